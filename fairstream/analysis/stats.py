"""Fairness and latency arithmetic shared by the simulator, the benchmarks and the demo.

Pure functions over numbers: percentiles of dwell times, Jain's fairness index, the
``FairShareTracker`` that measures how close each tenant's service came to its weighted fair
share of the egress while it was backlogged, and the per-window fairness audit
(``window_fairness``, ``busy_periods``) that the scheduler's metrics and ``fairstream audit``
report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FairShareTracker",
    "WindowFairness",
    "backlogged_throughout",
    "busy_periods",
    "jain_index",
    "percentile",
    "window_fairness",
]


def percentile(values: Sequence[float], q: float, *, presorted: bool = False) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated between ranks.

    The same definition as numpy's default (``linear``): p50 of [1, 2, 3, 4] is 2.5.
    Raises ValueError on an empty sequence or ``q`` outside [0, 100].
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be between 0 and 100, got {q!r}")
    ordered = values if presorted else sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``: 1.0 when all equal, 1/n at worst.

    Raises ValueError on no values or a negative value; all zeros count as perfectly fair.
    """
    total = 0.0
    squares = 0.0
    n = 0
    for x in values:
        if x < 0:
            raise ValueError(f"Jain's index needs non-negative values, got {x!r}")
        total += x
        squares += x * x
        n += 1
    if n == 0:
        raise ValueError("Jain's index of no values")
    if squares == 0:
        return 1.0
    return total * total / (n * squares)


class FairShareTracker:
    """Each tenant's service divided by its weighted fair share while it was backlogged.

    Feed it, in time order, ``backlogged(tenant, weight)`` when a tenant's queue becomes
    non-empty, ``served(tenant, cost)`` for each departure (before ``idle``), and
    ``idle(tenant)`` when its queue empties. Every departure of cost ``c`` entitles each
    tenant backlogged at that moment to ``c * w / W`` (``W`` the total weight backlogged),
    the share an ideal fluid (GPS) scheduler would give it. ``ratios()`` is served divided by
    entitled, per tenant: 1.0 is exactly fair. O(1) per event, using a global virtual time.

    This ignores priority classes and rate caps: it measures weighted fairness only.
    """

    __slots__ = ("_entitled", "_served", "_since", "_total_weight", "_virtual", "_weights")

    def __init__(self) -> None:
        self._virtual = 0.0  # cost units per unit of weight, accumulated over departures
        self._total_weight = 0.0
        self._weights: dict[str, float] = {}  # backlogged tenants
        self._since: dict[str, float] = {}  # virtual time when each became backlogged
        self._entitled: dict[str, float] = {}
        self._served: dict[str, float] = {}

    def backlogged(self, tenant: str, weight: float = 1.0) -> None:
        """``tenant`` now has records waiting (no effect if it already had)."""
        if tenant in self._weights:
            return
        self._weights[tenant] = weight
        self._total_weight += weight
        self._since[tenant] = self._virtual
        self._entitled.setdefault(tenant, 0.0)
        self._served.setdefault(tenant, 0.0)

    def served(self, tenant: str, cost: float = 1.0) -> None:
        """A record of ``tenant`` of ``cost`` departed; it must be backlogged."""
        if tenant not in self._weights:
            raise ValueError(f"tenant {tenant!r} served while not backlogged")
        self._virtual += cost / self._total_weight
        self._served[tenant] += cost

    def idle(self, tenant: str) -> None:
        """``tenant``'s queue emptied."""
        weight = self._weights.pop(tenant, None)
        if weight is None:
            return
        self._entitled[tenant] += weight * (self._virtual - self._since.pop(tenant))
        self._total_weight -= weight
        if not self._weights:
            self._total_weight = 0.0  # no drift across idle periods

    def ratios(self) -> dict[str, float]:
        """served / entitled per tenant that was entitled to anything (still-backlogged
        tenants are counted up to now)."""
        result: dict[str, float] = {}
        for tenant, entitled_when_idle in self._entitled.items():
            entitled = entitled_when_idle
            if tenant in self._weights:
                entitled += self._weights[tenant] * (self._virtual - self._since[tenant])
            if entitled > 0:
                result[tenant] = self._served[tenant] / entitled
        return result

    def jain_index(self) -> float | None:
        """Jain's index over ``ratios()``; None when no tenant was ever entitled to service."""
        ratios = self.ratios()
        return jain_index(ratios.values()) if ratios else None


@dataclass(frozen=True, slots=True)
class WindowFairness:
    """How fairly one window's egress was split between the tenants backlogged throughout it.

    - ``tenants``: how many tenants were judged (backlogged all through the window, with a
      share to compare against);
    - ``jain``: Jain's index over each tenant's service divided by its weighted share (1.0:
      every tenant got exactly its share; None when no tenant was judged);
    - ``worst``: the tenant furthest below its weighted share, ``shortfall`` the fraction of
      its share it did not get (0.0: none did worse than its share, 1.0: it got nothing) and
      ``shortfall_units`` the same in records (or cost units, whatever ``served`` counts).
    """

    tenants: int
    jain: float | None
    worst: str | None
    shortfall: float
    shortfall_units: float


NO_CONTENTION = WindowFairness(tenants=0, jain=None, worst=None, shortfall=0.0, shortfall_units=0)


def window_fairness(
    served: Mapping[str, float],
    weights: Mapping[str, float],
    classes: Mapping[str, int] | None = None,
) -> WindowFairness:
    """Judge one window: ``served`` is what each tenant backlogged throughout it received.

    A tenant's weighted share is what its class received in the window split by weight
    among the judged tenants of that class (``weights``, default 1; ``classes``, default
    one class): strict priority between classes is the policy, not a shortfall. A class that
    received nothing has no share to fall short of and is not judged.
    """
    by_class: dict[int, list[str]] = {}
    for tenant in served:
        by_class.setdefault((classes or {}).get(tenant, 0), []).append(tenant)
    ratios: list[float] = []
    worst: str | None = None
    worst_fraction = 0.0
    worst_units = 0.0
    for members in by_class.values():
        total = sum(served[t] for t in members)
        weight = sum(weights.get(t, 1.0) for t in members)
        if total <= 0 or weight <= 0:
            continue
        for tenant in sorted(members):
            entitled = total * weights.get(tenant, 1.0) / weight
            ratios.append(served[tenant] / entitled)
            missing = entitled - served[tenant]
            fraction = missing / entitled
            if fraction > worst_fraction:
                worst, worst_fraction, worst_units = tenant, fraction, missing
    if not ratios:
        return NO_CONTENTION
    return WindowFairness(
        tenants=len(ratios),
        jain=jain_index(ratios),
        worst=worst,
        shortfall=worst_fraction,
        shortfall_units=worst_units,
    )


def busy_periods(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The periods a tenant had records waiting, from each record's (enqueued, scheduled).

    Overlapping or touching spans merge: a queue is busy from an arrival until its last
    waiting record leaves. Returned sorted, disjoint.
    """
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def backlogged_throughout(periods: Sequence[tuple[float, float]], start: float, end: float) -> bool:
    """Whether one of the (sorted, disjoint) busy ``periods`` covers [start, end]."""
    return any(s <= start and e >= end for s, e in periods)
