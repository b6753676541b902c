"""Fairness and latency arithmetic shared by the simulator, the benchmarks and the demo.

Pure functions over numbers: percentiles of dwell times, Jain's fairness index, and the
``FairShareTracker`` that measures how close each tenant's service came to its weighted fair
share of the egress while it was backlogged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["FairShareTracker", "jain_index", "percentile"]


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
