"""Fairness while tenants contend, measured as trigger.dev's fairness study measures it.

trigger.dev's fair-queueing spike (PR 4353, ``internal-packages/run-engine/src/run-queue/
fairness-spike/harness/metrics.ts``) judges a schedule by who was served while at least two
fairness groups had work waiting. ``contention`` computes the same numbers from a list of
services (who, when it arrived, when it was served), so fairstream's schedules can be put
beside the study's published figures:

- the *contention window*: the services at instants when at least two groups have work that
  has arrived and is not yet served (the group being served counts: its record waited
  until that instant). This leaves out the drain tail (one group left) and the stretches
  before a group's records have arrived;
- a group's *share over weight*: its part of the window's services over its expected part,
  its weight over the summed weights of every group that contended at some time (the
  study's definition, kept so the numbers compare: under staggered arrivals it scores a
  fair schedule against more groups than ever contended at once);
- the *worst* share over weight among the groups that contended (1 is fair, 0 starved) and
  Jain's index over their shares over weight;
- each group's mean wait (served minus arrived) and the *makespan*, the last service time.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fairstream.analysis.stats import jain_index

__all__ = ["Contention", "Service", "contention"]


@dataclass(frozen=True, slots=True)
class Service:
    """One record served: its fairness group, when it arrived and when it was served."""

    group: str
    arrived: float
    served: float


@dataclass(frozen=True, slots=True)
class Contention:
    """What ``contention`` measured (see the module docstring)."""

    share_over_weight: dict[str, float]  # groups that contended only
    worst_share_over_weight: float
    jain: float
    mean_wait: dict[str, float]
    makespan: float
    window: int  # services in the contention window

    def mean_wait_of(self, groups: Iterable[str]) -> float:
        """The mean over ``groups`` of their mean waits (the study's light tenants' wait)."""
        waits = [self.mean_wait[g] for g in groups]
        return sum(waits) / len(waits)


def contention(
    services: Iterable[Service], weights: Mapping[str, float] | None = None
) -> Contention:
    """Measure ``services`` (any order; ties in ``served`` keep their given order) with
    ``weights`` per group (default 1). Raises ValueError on no services or a service
    before its arrival."""
    weights = weights or {}
    ordered = sorted(services, key=lambda s: s.served)
    if not ordered:
        raise ValueError("contention of no services")
    arrivals: dict[str, list[float]] = {}
    waits: dict[str, list[float]] = {}
    for s in ordered:
        if s.served < s.arrived:
            raise ValueError(f"a record of {s.group!r} served at {s.served} before it arrived")
        arrivals.setdefault(s.group, []).append(s.arrived)
        waits.setdefault(s.group, []).append(s.served - s.arrived)
    for times in arrivals.values():
        times.sort()
    served: dict[str, int] = dict.fromkeys(arrivals, 0)
    counts: dict[str, int] = dict.fromkeys(arrivals, 0)
    contended: set[str] = set()
    window = 0
    for s in ordered:
        # O(groups log n) per service: the study's scenarios have at most ~100 groups.
        waiting = [
            g for g, times in arrivals.items() if bisect.bisect_right(times, s.served) > served[g]
        ]
        if len(waiting) >= 2:
            contended.update(waiting)
            counts[s.group] += 1
            window += 1
        served[s.group] += 1
    total_weight = sum(weights.get(g, 1.0) for g in contended)
    ratios = {
        g: (counts[g] / window) / (weights.get(g, 1.0) / total_weight) for g in sorted(contended)
    }
    return Contention(
        share_over_weight=ratios,
        worst_share_over_weight=min(ratios.values()) if ratios else 1.0,
        jain=jain_index(ratios.values()) if ratios else 1.0,
        mean_wait={g: sum(w) / len(w) for g, w in sorted(waits.items())},
        makespan=ordered[-1].served,
        window=window,
    )
