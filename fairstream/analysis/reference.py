"""Reference schedules to compare fairstream against: plain FIFO and the ideal fluid one.

Both take the same arrivals (time, tenant, id) and a service rate in records per second,
and return when each record's service starts. Pure functions: the demo, ``fairstream audit``
and the benchmarks compare what fairstream measured on a real broker with what these say
(``fairstream.analysis.verdict`` judges the comparison).

- FIFO: one queue, records served in arrival order at the service rate.
- GPS (generalised processor sharing): the fluid ideal of weighted fair queueing. The
  server's rate is split between backlogged tenants in proportion to their weights, and a
  tenant serves its records in order. A record's service "starts" when the work queued
  ahead of it in its tenant has drained; the tenant's unit record then takes
  ``1 / its current rate``. We report the finish time minus one record's service time at
  the full rate, so that a record alone in an idle system starts at once, as in FIFO.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arrival:
    """One record's arrival: when (seconds), whose, which, and what it costs.

    The reference schedules count records (each is one unit of work); ``fairstream
    simulate`` replays traces of these with their cost, the seconds the paid API holds a
    concurrency slot for it (``hold``, under ``--max-concurrency``) and the tenant group the
    record names (``group``, None: by convention or none).
    """

    t: float
    tenant: str
    id: str
    cost: int = 1
    hold: float = 0.0
    group: str | None = None


def fifo_starts(arrivals: Iterable[Arrival], rate: float) -> dict[str, float]:
    """Service start time of each record under one FIFO queue served at ``rate``."""
    starts: dict[str, float] = {}
    free_at = float("-inf")
    for a in sorted(arrivals, key=lambda a: a.t):
        start = max(a.t, free_at)
        starts[a.id] = start
        free_at = start + 1.0 / rate
    return starts


def gps_starts(
    arrivals: Iterable[Arrival], rate: float, weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Service start time of each record under GPS at ``rate`` (see the module docstring).

    An event simulation: between events (an arrival, or a head record finishing), every
    backlogged tenant's head record receives ``rate * w / sum(w of backlogged)`` units of
    work per second; each record is one unit.
    """
    weights = weights or {}
    records = sorted(arrivals, key=lambda a: a.t)
    arrived = {a.id: a.t for a in records}
    pending = deque(records)
    queues: dict[str, deque[Arrival]] = {}
    remaining: dict[str, float] = {}  # work left of each backlogged tenant's head record
    finish: dict[str, float] = {}
    now = 0.0
    while pending or queues:
        total_w = sum(weights.get(t, 1.0) for t in queues)
        shares = {t: rate * weights.get(t, 1.0) / total_w for t in queues}
        # The head record that completes first at the current shares, if any.
        first = min(queues, key=lambda t: remaining[t] / shares[t], default=None)
        next_done = now + remaining[first] / shares[first] if first else float("inf")
        next_arrival = pending[0].t if pending else float("inf")
        step_to = min(next_done, next_arrival)
        for tenant in queues:
            remaining[tenant] -= shares[tenant] * (step_to - now)
        if first is not None and next_done <= next_arrival:
            remaining[first] = 0.0  # exact: no float residue may keep it alive
        now = step_to
        for tenant in [t for t in queues if remaining[t] <= 1e-9]:
            done = queues[tenant].popleft()
            finish[done.id] = now
            if queues[tenant]:
                remaining[tenant] = 1.0
            else:
                del queues[tenant]
                del remaining[tenant]
        while pending and pending[0].t <= now:
            a = pending.popleft()
            if a.tenant not in queues:
                queues[a.tenant] = deque()
                remaining[a.tenant] = 1.0
            queues[a.tenant].append(a)
    return {rid: max(arrived[rid], f - 1.0 / rate) for rid, f in finish.items()}
