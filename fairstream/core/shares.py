"""Group-wide fair shares: how the instances of one group split the group's egress rate.

Each instance reports its demand: per priority class, the total weight of its backlogged,
uncapped tenants and the (weight, cap) of each backlogged capped tenant. Every instance then
computes the same weighted max-min fair allocation over all the group's tenants (water
filling, class by class in priority order): in the highest class with demand, every tenant
gets ``weight * level``, capped tenants at most their cap, the level rising until the rate
is used; what a class cannot use (all its tenants capped) passes to the next class. An
instance's rate is the sum over its tenants. So the group behaves as one weighted fair
scheduler, and one backlogged tenant anywhere can use the whole rate.

An idle instance keeps a small part of the rate (``floor`` split between the instances), so
that a record arriving there can go at once, before the others have read its new demand.
Pure: no Kafka, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fairstream.core.hierarchy import Core

MAX_CAPPED = 64  # capped tenants reported one by one per class; the rest are summed


@dataclass(frozen=True)
class ClassDemand:
    """The backlog of one priority class on one instance, as far as sharing needs it."""

    weight: float = 0.0  # total weight of backlogged tenants without a rate cap
    capped: tuple[tuple[float, float], ...] = field(default=())  # (weight, cap records/s)

    def __post_init__(self) -> None:
        if not self.weight >= 0:
            raise ValueError(f"weight must be 0 or more, got {self.weight!r}")
        for weight, cap in self.capped:
            if not (weight > 0 and cap > 0):
                raise ValueError(f"a capped tenant needs a positive weight and cap: {weight, cap}")

    @property
    def empty(self) -> bool:
        return self.weight == 0 and not self.capped


Demand = Mapping[int, ClassDemand]  # priority class -> demand


def backlogged_demand(core: Core[Any]) -> dict[int, ClassDemand]:
    """The demand of ``core``'s backlogged, unpaused tenants (O(backlogged tenants))."""
    tenants = []
    for tenant in core.tenants():
        policy = core.policy(tenant)
        if not policy.paused:
            tenants.append((policy.priority, policy.weight, policy.rate_cap))
    return summarize(tenants)


def summarize(tenants: list[tuple[int, float, float | None]]) -> dict[int, ClassDemand]:
    """A demand from ``(priority, weight, cap or None)`` per backlogged, unpaused tenant.

    At most ``MAX_CAPPED`` capped tenants per class are kept one by one (the largest caps);
    the others are summed into one entry, whose cap binds later than theirs would: the
    instance may be offered a little rate it cannot use, never less than it can.
    """
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
        if len(entries) > MAX_CAPPED:
            rest = entries[MAX_CAPPED - 1 :]
            entries = [
                *entries[: MAX_CAPPED - 1],
                (sum(w for w, _ in rest), sum(c for _, c in rest)),
            ]
        out[priority] = ClassDemand(weights.get(priority, 0.0), tuple(entries))
    return out


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


def allocate(demands: Mapping[str, Demand], rate: float) -> dict[str, float]:
    """Weighted max-min fair records/s per instance (water filling, classes in order)."""
    shares = dict.fromkeys(demands, 0.0)
    remaining = rate
    classes = sorted({c for d in demands.values() for c, cd in d.items() if not cd.empty})
    for priority in classes:
        if remaining <= 0:
            break
        members = {i: d[priority] for i, d in demands.items() if priority in d}
        uncapped = sum(cd.weight for cd in members.values())
        capped = [(w, cap) for cd in members.values() for w, cap in cd.capped]
        level = _level(uncapped, capped, remaining)
        for instance, cd in members.items():
            if level is None:
                take = sum(cap for _, cap in cd.capped)
            else:
                take = cd.weight * level + sum(min(w * level, cap) for w, cap in cd.capped)
            shares[instance] += min(take, remaining)  # (rounding, or an absurdly small weight)
        if level is None:
            remaining -= sum(cap for _, cap in capped)
        else:
            remaining = 0.0
    return shares


def instance_rate(
    demands: Mapping[str, Demand], own: str, rate: float, floor: float = 0.05
) -> float:
    """This instance's records/s. Alone in the group: the whole rate. Otherwise each idle
    instance (no demand) keeps ``floor * rate / instances``, so that a record arriving there
    can go at once, before the others have read its new demand; the instances with demand
    share the rest, weighted max-min fair (``allocate``)."""
    if own not in demands:
        raise ValueError(f"the instance's own demand is missing ({own!r})")
    if not 0 <= floor <= 1:
        raise ValueError(f"floor must be a fraction between 0 and 1, got {floor!r}")
    if len(demands) == 1:
        return rate
    spare = rate * floor / len(demands)
    idle = [i for i, d in demands.items() if all(cd.empty for cd in d.values())]
    if own in idle:
        return spare
    return allocate(demands, rate - spare * len(idle))[own]
