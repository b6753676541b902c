"""Group-wide fair shares: how the instances of one group split the group's egress rate.

Each instance reports its demand: per priority class, the total weight of its backlogged,
uncapped ungrouped tenants, the (weight, cap) of each backlogged capped one, and each tenant
group with members backlogged there (``GroupDemand``: the group's weight and rate cap, and
its members' weights and caps, by their class within the group). Every instance then
computes the same weighted max-min fair allocation (water filling, class by class in
priority order) at two levels, as ``core.hierarchy`` schedules:

- in the highest class with demand, every ungrouped tenant gets ``weight * level`` and
  every group ``group weight * level``, each at most its cap (a group: its rate cap, or its
  members' caps added up when all of them are capped), the level rising until the rate is
  used; what a class cannot use (all its entries capped) passes to the next class;
- a group's part is water-filled the same way among its members on every instance (their
  weights, their caps, their classes in the group).

An instance's rate is the sum over its tenants. So the group behaves as one two-level fair
scheduler, and one backlogged tenant anywhere can use the whole rate. An ungrouped tenant is
a group of one: without groups the allocation is the one-level one, to the bit.

A group's rate cap holds over all the instances: each instance takes a part of it in
proportion to what its members get of the group's allocation (``GroupParts``), and the same
part of the group's weight, so that its local two-level scheduler gives the group what the
group-wide allocation gives it there.

An idle instance keeps a small part of the rate (``floor`` split between the instances), so
that a record arriving there can go at once, before the others have read its new demand;
likewise every instance without members of a group keeps that part of the group's cap.
Pure: no Kafka, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fairstream.core.deficit import FairScheduler
from fairstream.core.hierarchy import Core, GroupScheduler
from fairstream.core.tenant import TenantPolicy

MAX_CAPPED = 64  # capped tenants reported one by one per class; the rest are summed
MAX_GROUPS = 32  # groups reported one by one per class; the rest as single tenants
MAX_MEMBERS_CAPPED = 8  # a group's capped members reported one by one per member class

Entry = tuple[int, float, float | None]  # (priority, weight, cap or None) of one tenant


@dataclass(frozen=True)
class ClassDemand:
    """The backlog of one priority class on one instance, as far as sharing needs it."""

    weight: float = 0.0  # total weight of backlogged ungrouped tenants without a rate cap
    capped: tuple[tuple[float, float], ...] = field(default=())  # (weight, cap records/s)
    groups: tuple[GroupDemand, ...] = field(default=())  # groups with members here

    def __post_init__(self) -> None:
        if not self.weight >= 0:
            raise ValueError(f"weight must be 0 or more, got {self.weight!r}")
        for weight, cap in self.capped:
            if not (weight > 0 and cap > 0):
                raise ValueError(f"a capped tenant needs a positive weight and cap: {weight, cap}")

    @property
    def empty(self) -> bool:
        return self.weight == 0 and not self.capped and not self.groups


@dataclass(frozen=True)
class GroupDemand:
    """One tenant group's backlog on one instance, in the class of the group's policy."""

    group: str
    weight: float  # the group's weight (its policy's: the same on every instance)
    cap: float | None  # its rate cap: records/s over all its members, on every instance
    members: Mapping[int, ClassDemand]  # its members here, by their class within the group

    def __post_init__(self) -> None:
        if not isinstance(self.group, str):
            raise ValueError(f"a group id is a string, got {self.group!r}")
        if not self.weight > 0 or (self.cap is not None and not self.cap > 0):
            raise ValueError(f"a group needs a positive weight and cap: {self.weight, self.cap}")
        if not self.members or any(m.empty or m.groups for m in self.members.values()):
            raise ValueError(f"group {self.group!r} needs members, themselves in no group")

    @property
    def member_weight(self) -> float:
        return sum(m.weight + sum(w for w, _ in m.capped) for m in self.members.values())

    @property
    def limit(self) -> float | None:
        """The most its members here can take: its cap, or their caps added up if lower
        (None: no bound)."""
        return _limit(self.cap, self.members.values())


def _limit(cap: float | None, members: Iterable[ClassDemand]) -> float | None:
    members = list(members)
    if any(m.weight > 0 for m in members):
        return cap
    caps = sum(c for m in members for _, c in m.capped)
    return caps if cap is None else min(cap, caps)


Demand = Mapping[int, ClassDemand]  # priority class -> demand


def backlogged_demand(
    core: Core[Any], group_policy: Callable[[str], TenantPolicy] | None = None
) -> dict[int, ClassDemand]:
    """The demand of ``core``'s backlogged, unpaused tenants (O(backlogged tenants)).
    ``group_policy``: each group's policy as set (the core holds this instance's part of
    its weight and cap); default the core's."""
    if type(core) is FairScheduler:  # one pass inside the core, by policy
        return summarize(_flat_entries(core.policy_counts()))
    grouped = type(core) is GroupScheduler
    tenants: list[Entry] = []
    members: dict[str, list[Entry]] = {}
    for tenant in core.tenants():
        policy = core.policy(tenant)
        if policy.paused:
            continue
        entry = (policy.priority, policy.weight, policy.rate_cap)
        group = core.group_of(tenant) if grouped else None  # type: ignore[union-attr]
        if group is None:
            tenants.append(entry)
        else:
            members.setdefault(group, []).append(entry)
    groups = []
    for group, entries in members.items():
        policy = group_policy(group) if group_policy else core.group_policy(group)  # type: ignore[union-attr]
        if not policy.paused:
            groups.append((group, policy.priority, policy.weight, policy.rate_cap, entries))
    return summarize(tenants, groups)


def _flat_entries(counts: list[tuple[TenantPolicy, int]]) -> list[Entry]:
    """The entries of tenants under each of these policies (unpaused ones): uncapped tenants
    of one policy only add up their weight (one entry for them all); a capped one is kept
    one by one, as ``summarize`` keeps the largest caps."""
    entries: list[Entry] = []
    for policy, n in counts:
        if policy.paused:
            continue
        if policy.rate_cap is None:
            entries.append((policy.priority, policy.weight * n, None))
        else:
            entries.extend([(policy.priority, policy.weight, policy.rate_cap)] * n)
    return entries


def summarize(
    tenants: list[Entry],
    groups: Iterable[tuple[str, int, float, float | None, list[Entry]]] = (),
) -> dict[int, ClassDemand]:
    """A demand from ``(priority, weight, cap or None)`` per backlogged, unpaused ungrouped
    tenant, and ``(group, priority, weight, cap, members)`` per group with such members.

    At most ``MAX_CAPPED`` capped tenants per class are kept one by one (the largest caps);
    the others are summed into one entry, whose cap binds later than theirs would: the
    instance may be offered a little rate it cannot use, never less than it can. Likewise
    a group's members, ``MAX_MEMBERS_CAPPED`` per class. At most ``MAX_GROUPS`` groups per
    class are kept (capped groups first, then the heaviest); each other one counts as one
    tenant of its weight and cap, its cap then not shared between instances.
    """
    by_class: dict[int, list[GroupDemand]] = {}
    for name, priority, weight, cap, entries in groups:
        demand = GroupDemand(name, weight, cap, _flat(entries, MAX_MEMBERS_CAPPED))
        by_class.setdefault(priority, []).append(demand)
    folded = list(tenants)
    kept: dict[int, tuple[GroupDemand, ...]] = {}
    for priority, found in by_class.items():
        found.sort(key=lambda g: (g.cap is None, -g.weight, g.group))
        kept[priority] = tuple(found[:MAX_GROUPS])
        folded.extend((priority, g.weight, g.limit) for g in found[MAX_GROUPS:])
    out = _flat(folded, MAX_CAPPED)
    for priority, found_kept in kept.items():
        cd = out.get(priority, ClassDemand())
        out[priority] = ClassDemand(cd.weight, cd.capped, found_kept)
    return out


def _flat(tenants: list[Entry], most: int) -> dict[int, ClassDemand]:
    weights: dict[int, float] = {}
    capped: dict[int, list[tuple[float, float]]] = {}
    for priority, weight, cap in tenants:
        if cap is None:
            weights[priority] = weights.get(priority, 0.0) + weight
        else:
            capped.setdefault(priority, []).append((weight, cap))
    out: dict[int, ClassDemand] = {}
    for priority in set(weights) | set(capped):
        entries = sorted(capped.get(priority, []), key=lambda e: e[1], reverse=True)
        if len(entries) > most:
            rest = entries[most - 1 :]
            entries = [*entries[: most - 1], (sum(w for w, _ in rest), sum(c for _, c in rest))]
        out[priority] = ClassDemand(weights.get(priority, 0.0), tuple(entries))
    return out


def flatten(demand: Demand) -> dict[int, ClassDemand]:
    """The one-level demand of the same tenants, each in its own class (what an instance of
    a release before tenant groups reported, and reads)."""
    tenants: list[Entry] = []
    for priority, cd in demand.items():
        for members, at in [(cd, priority)] + [
            (m, p) for g in cd.groups for p, m in g.members.items()
        ]:
            if members.weight:
                tenants.append((at, members.weight, None))
            tenants.extend((at, w, cap) for w, cap in members.capped)
    return _flat(tenants, MAX_CAPPED)


def _level(uncapped: float, capped: list[tuple[float, float]], rate: float) -> float | None:
    """The water level ``x`` with ``uncapped * x + sum(min(w * x, cap)) == rate``, or None
    when even every cap reached leaves rate over (no uncapped weight)."""
    total_caps = sum(cap for _, cap in capped)
    if uncapped == 0 and total_caps <= rate:
        return None
    # Caps bind in order of cap / weight; between two breakpoints the sum is linear in x.
    order = sorted(capped, key=lambda e: e[1] / e[0])
    # Weight not yet at its cap before each breakpoint, summed from the end (no
    # subtraction, so no cancellation with tiny weights).
    free = [uncapped] * (len(order) + 1)
    for k in range(len(order) - 1, -1, -1):
        free[k] = free[k + 1] + order[k][0]
    used = 0.0  # rate taken by tenants already at their cap
    for k, (weight, cap) in enumerate(order):
        x = cap / weight
        if used + free[k] * x >= rate:
            return (rate - used) / free[k]
        used += cap
    return (rate - used) / uncapped


@dataclass
class _Group:
    """One group as every instance reports it: merged, the same on every instance."""

    weight: float
    cap: float | None
    parts: dict[str, Demand]  # instance -> its members there

    @property
    def limit(self) -> float | None:
        return _limit(self.cap, (m for d in self.parts.values() for m in d.values()))


def _merge(members: Mapping[str, ClassDemand]) -> dict[str, _Group]:
    """The groups of one class over the instances. Should two reports disagree (a policy
    record on its way), the highest weight and the lowest cap: the same on every instance."""
    out: dict[str, _Group] = {}
    for instance, cd in members.items():
        for g in cd.groups:
            known = out.get(g.group)
            if known is None:
                out[g.group] = _Group(g.weight, g.cap, {instance: g.members})
                continue
            known.weight = max(known.weight, g.weight)
            if g.cap is not None:
                known.cap = g.cap if known.cap is None else min(known.cap, g.cap)
            known.parts[instance] = g.members
    return out


def _fill(
    demands: Mapping[str, Demand], rate: float
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Records/s per instance, and per group what its members on each instance get."""
    shares = dict.fromkeys(demands, 0.0)
    given: dict[str, dict[str, float]] = {}
    remaining = rate
    classes = sorted({c for d in demands.values() for c, cd in d.items() if not cd.empty})
    for priority in classes:
        if remaining <= 0:
            break
        members = {i: d[priority] for i, d in demands.items() if priority in d}
        groups = _merge(members)
        uncapped = sum(cd.weight for cd in members.values())
        capped = [(w, cap) for cd in members.values() for w, cap in cd.capped]
        for g in groups.values():
            if (limit := g.limit) is None:
                uncapped += g.weight
            else:
                capped.append((g.weight, limit))
        level = _level(uncapped, capped, remaining)
        for instance, cd in members.items():
            if level is None:
                take = sum(cap for _, cap in cd.capped)
            else:
                take = cd.weight * level + sum(min(w * level, cap) for w, cap in cd.capped)
            shares[instance] += min(take, remaining)  # (rounding, or an absurdly small weight)
        for name, g in groups.items():
            limit = g.limit
            if level is None:
                total = limit or 0.0
            else:
                total = g.weight * level if limit is None else min(g.weight * level, limit)
            got = given.setdefault(name, {})
            for instance, part in _fill(g.parts, min(total, remaining))[0].items():
                shares[instance] += part
                got[instance] = got.get(instance, 0.0) + part
        if level is None:
            remaining -= sum(cap for _, cap in capped)
        else:
            remaining = 0.0
    return shares, given


def allocate(demands: Mapping[str, Demand], rate: float) -> dict[str, float]:
    """Weighted max-min fair records/s per instance (two-level water filling, classes in
    order)."""
    return _fill(demands, rate)[0]


@dataclass(frozen=True)
class GroupParts:
    """This instance's part of each tenant group's weight and rate cap (fractions)."""

    cap: float = 1.0  # of the rate cap of every group not listed (no members here)
    groups: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # (weight, cap)

    def of(self, group: str) -> tuple[float, float]:
        """``group``'s part here: of its weight, of its rate cap."""
        return self.groups.get(group, (1.0, self.cap))

    def scaled(self, by: float) -> GroupParts:
        """The same with every cap's part ``by`` times smaller (weights as they are)."""
        return GroupParts(self.cap * by, {g: (w, c * by) for g, (w, c) in self.groups.items()})


WHOLE = GroupParts()  # alone: every group's whole weight and cap


@dataclass(frozen=True)
class Share:
    """This instance's part of the group: records/s, and of each tenant group."""

    rate: float
    parts: GroupParts = WHOLE


def instance_share(
    demands: Mapping[str, Demand], own: str, rate: float, floor: float = 0.05
) -> Share:
    """This instance's records/s and group parts. Alone in the group: the whole rate and
    every group whole. Otherwise each idle instance (no demand) keeps ``floor * rate /
    instances``, so that a record arriving there can go at once, before the others have
    read its new demand; the instances with demand share the rest (``allocate``). A group's
    cap is shared the same way: ``floor / instances`` of it on each instance without its
    members, the rest in proportion to what its members get on each instance (their
    weights when they get nothing); its weight, in proportion without a floor."""
    if own not in demands:
        raise ValueError(f"the instance's own demand is missing ({own!r})")
    if not 0 <= floor <= 1:
        raise ValueError(f"floor must be a fraction between 0 and 1, got {floor!r}")
    n = len(demands)
    if n == 1:
        return Share(rate)
    spare = rate * floor / n
    idle = [i for i, d in demands.items() if all(cd.empty for cd in d.values())]
    if own in idle:
        return Share(spare, GroupParts(floor / n))
    shares, given = _fill(demands, rate - spare * len(idle))
    weights: dict[str, dict[str, float]] = {}  # group -> instance -> its members' weight
    for instance, d in demands.items():
        for g in (g for cd in d.values() for g in cd.groups):
            at = weights.setdefault(g.group, {})
            at[instance] = at.get(instance, 0.0) + g.member_weight
    parts: dict[str, tuple[float, float]] = {}
    for group, at in weights.items():
        if own not in at:
            continue
        got = given.get(group, {})
        total = sum(got.values())
        mine = got.get(own, 0.0) / total if total > 0 else at[own] / sum(at.values())
        parts[group] = (mine, (1 - floor * (n - len(at)) / n) * mine)
    return Share(shares[own], GroupParts(floor / n, parts))


def instance_rate(
    demands: Mapping[str, Demand], own: str, rate: float, floor: float = 0.05
) -> float:
    """This instance's records/s (``instance_share``)."""
    return instance_share(demands, own, rate, floor).rate
