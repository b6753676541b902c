"""Paced starts: when a worker may start the call for an egress record. Pure.

Under a rate (or cost rate) the scheduler stamps each egress record with the moment its
call may start (``fairstream-start-ms``: its slot on the rate's schedule). Records become
visible a Kafka transaction at a time, so a worker that called the API as each fetched batch landed
would send it clumps: a strict API (a token bucket of ``--rate`` holding ``--burst``)
refused 37% of such calls at an exact average rate. A worker instead starts each call at
its stamp plus a fixed *playout delay*, as a media jitter buffer plays each packet at its
timestamp plus a fixed delay: the delay covers a transaction's commit and a fetch, so the
API sees the scheduler's schedule, shifted but not bunched.

- ``start_at`` is the rule for one record;
- ``Playout`` holds the records whose moment has not come, earliest first.

Both the SDK's ``Worker`` and the Faust agent (``fairstream.faust``) pace with these.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PLAYOUT_DELAY", "Playout", "start_at"]

T = TypeVar("T")

# A playout delay that covers the scheduler's paced commits (every 20 ms) and a fetch on the
# development broker: behind it a strict bucket of 200/s holding 5 refused 4 of 800 calls
# (tests/integration/test_pacing.py). Workers do not pace by default yet: the adaptive
# rate's loop grows by the delay, and behind a hidden capacity it then refused 13.8% of
# calls after a drop instead of 0.3% (tests/integration/test_feedback_loop.py).
PLAYOUT_DELAY = 0.25


def start_at(start_ms: int | None, arrived: float, delay: float) -> float:
    """The wall-clock second at which a record's call may start.

    ``start_ms``: the record's start stamp (``Request.start_ms``, epoch ms), None for a
    record without one (it starts on arrival). ``arrived``: when the worker fetched it
    (epoch s). ``delay``: the playout delay in seconds. A record that arrives after its
    moment (a slow commit or fetch) starts at once; one whose stamp lies ahead of
    ``arrived`` (the scheduler host's clock ahead of this one's) waits the delay from its
    arrival at most: a skewed clock may shift starts, never hold a record for long.
    """
    if start_ms is None:
        return arrived
    due = start_ms / 1000 + delay
    return min(due, arrived + delay)


class Playout(Generic[T]):
    """Items waiting for their start time, handed out in order of it (ties: as pushed).

    Caller: one thread or event loop (the worker's loop, a Faust agent). Affects: this
    object only.
    """

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due: float, item: T) -> None:
        """Hold ``item`` until ``due`` (a time on the caller's clock)."""
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, item))

    def next_due(self) -> float | None:
        """The earliest start time held, or None when nothing waits."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[T]:
        """The items whose start time has come by ``now``, earliest first."""
        heap, ready = self._heap, []
        while heap and heap[0][0] <= now:
            ready.append(heapq.heappop(heap)[2])
        return ready

    def purge(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the items for which ``predicate(item)`` is true."""
        kept: list[tuple[float, int, T]] = []
        removed: list[T] = []
        for entry in self._heap:
            if predicate(entry[2]):
                removed.append(entry[2])
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._heap = kept
        return removed
