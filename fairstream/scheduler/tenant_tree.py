"""The tenant groups' tree an instance shows (``/tenants``, the console, the metrics): groups,
their members, and share against entitlement at each level (``fairstream.analysis.tree``).

Two halves, on two threads:

- ``GroupCounts`` (kept by ``Observed``, on the emitter thread) files the records emitted
  per tenant under their groups, and ``snapshot`` copies what the tree needs of the core
  (a ``TreeSnapshot``: every backlogged group with its policy and backlogged members, the
  recent emitters of each, every backlogged ungrouped tenant). Both run on the emitter
  thread only, when ``/tenants``, ``/metrics`` or the auditor asks (never per record).
- ``tree`` and ``add_tree`` (on the web's threads) join that copy with the auditor's
  recent egress rates per tenant: a group's rate is its members' sum.

A tenant's group is the core's (``GroupScheduler.group_of``) when its records are filed.
A grouped tenant that is neither backlogged nor among the ``RECENT`` latest grouped
emitters counts as ungrouped in the rates (with more than ``RECENT`` grouped tenants
emitting within the auditor's ``RATE_SPAN``, a group's rate is undercounted). With a flat
core there is no tree: ``/tenants`` is exactly as without groups.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fairstream.adapters.tenant_series import OTHER
from fairstream.analysis.tree import Entitled, Entry, GroupNode, share_tree
from fairstream.core import Core, GroupScheduler

__all__ = [
    "RECENT",
    "GroupCounts",
    "GroupLoad",
    "MemberLoad",
    "TenantGroupCollector",
    "TreeSnapshot",
    "add_tree",
    "group_series",
    "tree",
]

RECENT = 10_000  # latest grouped emitters whose group is remembered (for the groups' rates)
EMITTED_GROUPS = 10_000  # groups whose emitted counts are kept one by one
UNFILED = 64  # transactions' counts kept unread before they are added up (no reads)
GroupRow = tuple[str, int, int, float, float]  # group, backlog, emitted, share, entitlement
# A committed transaction's records per tenant, counted.
Emitted = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class MemberLoad:
    tenant: str
    backlog: int
    weight: float
    priority: int
    paused: bool
    rate_cap: float | None
    emitted: int  # records emitted since start (this instance)


@dataclass(frozen=True, slots=True)
class GroupLoad:
    """A group as the core has it: its policy, its backlog (staged included), what it
    emitted since start, and its members (backlogged, or among the recent emitters)."""

    group: str
    weight: float
    priority: int
    paused: bool
    rate_cap: float | None
    backlog: int
    backlog_cost: int
    emitted: int
    members: tuple[MemberLoad, ...]


@dataclass(frozen=True, slots=True)
class TreeSnapshot:
    """The emitter's copy for the tree: every group backlogged or recently emitting, and
    every backlogged ungrouped tenant (an outer entry: its backlog and policy)."""

    groups: tuple[GroupLoad, ...] = ()
    ungrouped: tuple[Entry, ...] = ()
    emitted: int = 0  # records emitted by every group since start (the listed and the rest)


class GroupCounts:
    """Records emitted per group, filed from the per-tenant counts at each read.

    Caller: ``Observed`` on the emitter thread: ``emitted`` per committed transaction,
    ``file`` and ``snapshot`` when someone reads. Bounded: the groups' counts like
    ``Observed``'s per tenant (folded into ``OTHER``), the remembered tenants at ``RECENT``,
    the unfiled counts at the tenants emitted between two reads (the auditor reads every
    second).
    """

    def __init__(self) -> None:
        self.by_group: dict[str, int] = {}
        self.recent: OrderedDict[str, str] = OrderedDict()  # tenant -> group, latest last
        # The transactions' per-tenant counts since the last read, kept as they came. Past
        # UNFILED of them (no reads), they are added up into the first.
        self._unfiled: list[Emitted] = []
        # Whether the core was flat (no tenant groups) at the last read: then nothing is kept
        # (a transaction's tally held until the next read kept its dwell times alive, a second
        # of them). A core grouped since is known at the next read; what was committed
        # meanwhile is not filed under its groups.
        self.flat = False

    def emitted(self, counts: Emitted) -> None:
        """A committed transaction's records per tenant (``counts`` is not changed after),
        filed under the groups at the next read."""
        if self.flat:
            return
        self._unfiled.append(counts)
        if len(self._unfiled) > UNFILED:
            self._unfiled = [_added_up(self._unfiled)]

    def file(self, core: Core[Any]) -> None:
        """File the counts since the last read under the tenants' groups (the core's now)."""
        batches, self._unfiled = self._unfiled, []
        if not isinstance(core, GroupScheduler):
            self.flat = True
            return
        self.flat = False
        by_group, recent = self.by_group, self.recent
        for tenant, count in _added_up(batches).items():
            group = core.group_of(tenant)
            if group is None:
                recent.pop(tenant, None)
                continue
            by_group[group] = by_group.get(group, 0) + count
            recent[tenant] = group
            recent.move_to_end(tenant)
        while len(recent) > RECENT:
            recent.popitem(last=False)
        if len(by_group) > EMITTED_GROUPS:
            keep = dict(heapq.nlargest(EMITTED_GROUPS // 2, by_group.items(), key=itemgetter(1)))
            keep[OTHER] = keep.get(OTHER, 0) + sum(by_group.values()) - sum(keep.values())
            self.by_group = keep

    def snapshot(self, core: Core[Any], emitted: Mapping[str, int]) -> TreeSnapshot | None:
        """The copy the tree needs (None for a flat core). O(backlogged tenants + RECENT)."""
        self.file(core)
        if not isinstance(core, GroupScheduler):
            return None
        members: dict[str, dict[str, MemberLoad]] = {}

        def member(tenant: str, records: int) -> MemberLoad:
            policy = core.policy(tenant)
            return MemberLoad(
                tenant,
                records,
                policy.weight,
                policy.priority,
                policy.paused,
                policy.rate_cap,
                emitted.get(tenant, 0),
            )

        ungrouped: list[Entry] = []
        for tenant in core.tenants():
            records = core.backlog(tenant)[0]
            group = core.group_of(tenant)
            if group is None:
                policy = core.policy(tenant)
                ungrouped.append(
                    Entry(tenant, policy.weight, policy.priority, policy.paused, records)
                )
            else:
                members.setdefault(group, {})[tenant] = member(tenant, records)
        for tenant, group in self.recent.items():
            known = members.setdefault(group, {})
            if tenant not in known:
                known[tenant] = member(tenant, 0)
        groups = []
        for group, listed in members.items():
            policy = core.group_policy(group)
            records, cost = core.group_backlog(group)
            groups.append(
                GroupLoad(
                    group,
                    policy.weight,
                    policy.priority,
                    policy.paused,
                    policy.rate_cap,
                    records,
                    cost,
                    self.by_group.get(group, 0),
                    tuple(listed.values()),
                )
            )
        return TreeSnapshot(tuple(groups), tuple(ungrouped), sum(self.by_group.values()))


def _added_up(batches: list[Emitted]) -> dict[str, int]:
    """Counts per tenant, added up over ``batches``."""
    total: dict[str, int] = {}
    for counts in batches:
        for tenant, count in counts.items():
            total[tenant] = total.get(tenant, 0) + count
    return total


@dataclass(frozen=True)
class Tree:
    """The snapshot joined with the rates: the groups' nodes, the loads they came from (in
    the same order), and each ungrouped tenant's outer entitlement."""

    nodes: list[GroupNode]
    loads: list[GroupLoad]
    ungrouped: dict[str, Entitled] = field(default_factory=dict)


def tree(snapshot: TreeSnapshot, rates: Mapping[str, float], total: float) -> Tree:
    """The share tree of ``snapshot`` under the auditor's ``rates`` (records/s per tenant,
    ``total`` in all). Pure; O(groups + members + ungrouped)."""
    groups: list[Entry] = []
    members: dict[str, list[Entry]] = {}
    for g in snapshot.groups:
        inner = [
            Entry(m.tenant, m.weight, m.priority, m.paused, m.backlog, rates.get(m.tenant, 0.0))
            for m in g.members
        ]
        members[g.group] = inner
        groups.append(
            Entry(g.group, g.weight, g.priority, g.paused, g.backlog, sum(e.rate for e in inner))
        )
    ungrouped = [
        Entry(e.name, e.weight, e.priority, e.paused, e.backlog, rates.get(e.name, 0.0))
        for e in snapshot.ungrouped
    ]
    nodes, outer = share_tree(groups, members, ungrouped, total)
    return Tree(nodes, list(snapshot.groups), outer)


def _state(entry: Entry, cap: float | None) -> str:
    if entry.paused:
        return "paused"
    if cap is not None and entry.rate >= 0.95 * cap:
        return "capped"
    return "backlogged" if entry.backlog else "idle"


def add_tree(result: dict[str, Any], rates: Mapping[str, float], total: float, limit: int) -> None:
    """``/tenants``' ``groups`` (the ``limit`` busiest groups, each with its ``limit``
    busiest members), and on each tenant row its entitlement as the tree has it: an
    ungrouped tenant's at the outer level, a member's overall (its group's part times its
    own), with its share and entitlement within the group beside. In place, from the
    emitter's ``tree_snapshot`` (taken out: it is no JSON); nothing without one (a flat
    core). Caller: ``SchedulerService.tenant_stats``, after ``add_shares``."""
    snapshot: TreeSnapshot | None = result.pop("tree_snapshot", None)
    if snapshot is None:
        return
    t = tree(snapshot, rates, total)
    where: dict[str, tuple[GroupNode, int]] = {}
    for node in t.nodes:
        for i, m in enumerate(node.members):
            where[m.entry.name] = (node, i)
    for row in result["tenants"]:
        name = row["tenant"]
        if row.get("group") is None:
            at = t.ungrouped.get(name, Entitled())
            row["entitlement"], row["backlogged_share"] = at.entitlement, at.backlogged_share
            continue
        found = where.get(name)
        if found is None:
            continue
        m = found[0].members[found[1]]
        row["entitlement"] = m.overall.entitlement
        row["backlogged_share"] = m.overall.backlogged_share
        row["share_in_group"] = m.share
        row["entitlement_in_group"] = m.within.entitlement
        row["backlogged_share_in_group"] = m.within.backlogged_share
    busiest = sorted(
        zip(t.nodes, t.loads, strict=True),
        key=lambda nl: (-nl[0].entry.rate, -nl[0].entry.backlog, nl[0].entry.name),
    )[:limit]
    result["groups"] = [_group_row(node, load, limit) for node, load in busiest]


def _group_row(node: GroupNode, load: GroupLoad, limit: int) -> dict[str, Any]:
    e = node.entry
    emitted = {m.tenant: m for m in load.members}
    members = sorted(node.members, key=lambda m: (-m.entry.rate, -m.entry.backlog, m.entry.name))
    return {
        "group": e.name,
        "weight": e.weight,
        "priority": e.priority,
        "paused": e.paused,
        "rate_cap": load.rate_cap,
        "state": _state(e, load.rate_cap),
        "backlog": e.backlog,
        "backlog_cost": load.backlog_cost,
        "emitted": load.emitted,
        "rate": e.rate,
        "share": node.share,
        "entitlement": node.entitled.entitlement,
        "backlogged_share": node.entitled.backlogged_share,
        "members_listed": len(load.members),
        "members": [
            {
                "tenant": m.entry.name,
                "weight": m.entry.weight,
                "priority": m.entry.priority,
                "paused": m.entry.paused,
                "state": _state(m.entry, emitted[m.entry.name].rate_cap),
                "backlog": m.entry.backlog,
                "emitted": emitted[m.entry.name].emitted,
                "rate": m.entry.rate,
                "share": m.share,  # of the group's egress
                "entitlement": m.within.entitlement,  # within the group
                "backlogged_share": m.within.backlogged_share,
                "overall_entitlement": m.overall.entitlement,
            }
            for m in members[:limit]
        ],
    }


def group_series(
    snapshot: TreeSnapshot | None, rates: Mapping[str, float], total: float, top: int
) -> list[GroupRow]:
    """The metrics' rows, ``(group, backlog, emitted, share, entitlement)``: the ``top``
    groups by backlog then rate, and the rest summed under ``OTHER`` (share and entitlement
    summed too: the rest's part). Nothing for a flat core."""
    if snapshot is None:
        return []
    t = tree(snapshot, rates, total)
    rows = [
        (n.entry.name, n.entry.backlog, load.emitted, n.share or 0.0, n.entitled.entitlement or 0.0)
        for n, load in zip(t.nodes, t.loads, strict=True)
        if n.entry.name != OTHER
    ]
    rows.sort(key=lambda r: (-r[1], -r[3], r[0]))
    named, rest = rows[:top], rows[top:]
    # The rest's emitted count: every group's but the named ones' (groups no longer listed
    # included), so that the sum over the series only grows.
    other = (
        OTHER,
        sum(r[1] for r in rest),
        snapshot.emitted - sum(r[2] for r in named),
        sum(r[3] for r in rest),
        sum(r[4] for r in rest),
    )
    return [*named, other]


class TenantGroupCollector(Collector):
    """``fairstream_tenant_group_*{group}``: per tenant group its backlog, records emitted,
    share of recent egress and entitlement, read at scrape time (``rows(top)``: from
    ``group_series``). Bounded as the tenants' series (``metrics.TenantCollector``): the
    ``top_groups`` largest backlogs, the rest under ``__other__``; none while no group is in
    use. Registered by ``SchedulerService`` in the instance's ``Metrics.registry``."""

    def __init__(self, rows: Callable[[int], list[GroupRow]], top_groups: int = 20) -> None:
        self._rows = rows
        self._k = top_groups

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        families: tuple[GaugeMetricFamily | CounterMetricFamily, ...] = (
            GaugeMetricFamily(
                "fairstream_tenant_group_backlog_records",
                "Records buffered per tenant group (its members' backlogs, staged included).",
                labels=["group"],
            ),
            CounterMetricFamily(
                "fairstream_tenant_group_emitted_records",
                "Records emitted per tenant group since start (its members').",
                labels=["group"],
            ),
            GaugeMetricFamily(
                "fairstream_tenant_group_share",
                "Tenant group's fraction of this instance's egress over the last 10 s.",
                labels=["group"],
            ),
            GaugeMetricFamily(
                "fairstream_tenant_group_entitlement",
                "Tenant group's weighted fair share among the groups (and ungrouped tenants) "
                "of its class waiting for a share (0: it does not wait for one).",
                labels=["group"],
            ),
        )
        for group, *values in self._rows(self._k):
            for family, value in zip(families, values, strict=True):
                family.add_metric([group], value)
        yield from families
