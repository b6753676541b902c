"""Paced starts: when a worker may start the call for an egress record. Pure.

Under a rate (or cost rate) the scheduler stamps each egress record with the moment its
call may start (``fairstream-start-ms``: its slot on the rate's schedule). Records become
visible a Kafka transaction at a time, so a worker that called the API as each fetched
batch landed would send it clumps: a strict API (a token bucket of ``--rate`` holding ``--burst``)
refused 37% of such calls at an exact average rate. A worker instead starts each call at
its stamp plus a fixed *playout delay*, as a media jitter buffer plays each packet at its
timestamp plus a fixed delay: the delay covers a transaction's commit and a fetch, so the
API sees the scheduler's schedule, shifted but not bunched.

- ``start_at`` is the rule for one record;
- ``Spacing`` is the rule between records: a call never starts sooner after the previous
  paced one than their stamps are apart (timers fire late, by up to a millisecond here, and
  a strict API with a bucket of one refuses a call a hair early: 36% refused at 50/s when
  each record kept only its own moment);
- ``Playout`` holds the records whose moment has not come, earliest first, and keeps the
  paced ones apart with a ``Spacing``;
- ``timer_wait`` is how long to set a loop's timer for a moment, so that it wakes on time.

Both the SDK's ``Worker`` and the Faust agent (``fairstream.faust``) pace with these.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = [
    "CATCH_UP_GAPS",
    "CATCH_UP_SLACK",
    "PLAYOUT_DELAY",
    "TIMER_GRAIN",
    "Playout",
    "Spacing",
    "start_at",
    "timer_wait",
]

T = TypeVar("T")

# The default playout delay: it covers the scheduler's paced commits (every 20 ms) and a
# fetch on the development broker, where records became visible 60 ms after their stamp at
# p99 (77 ms at most): behind it a strict bucket of 200/s holding 5 refused 0.5% of calls,
# 2,000/s holding 200 none (benchmarks/api_view.py). It lengthens the adaptive rate's
# loop as much, and shorter is better there: behind a hidden capacity (a bucket of half a
# second) 0.6-1.5% of calls were refused per window at 0.1 s, 3-7% at 0.25 s
# (tests/integration/test_feedback_loop.py). A record later than the delay starts at once.
PLAYOUT_DELAY = 0.1


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


# How far past its moment (``start_at``) spacing may hold a call before the worker catches
# up. Keeping the stamps' spacing after a late start pushes every later start by that
# lateness, and a loop only ever runs a call late, so lateness creeps up at each start;
# past the slack the next call starts at its moment instead, which sheds the lateness at the
# cost of one gap shorter than its stamps' (a call a bucket of one refuses), so lateness
# stays bounded. A catch-up sheds at most the stamps' gap: a slack of ``CATCH_UP_GAPS`` gaps
# lets each shed a whole one (the fewest short gaps for the creep), and more only adds
# latency, which cost a fifth of the throughput at 2,000 calls/s when every call ran 50 ms
# late. 50 ms at most: a call is held no longer than that past its playout moment.
CATCH_UP_SLACK = 0.05
CATCH_UP_GAPS = 2


# An event loop's timer on Linux (epoll) waits whole milliseconds, rounded up: it fires up
# to this late (0.7 ms at the median in the worker). A paced start sets the moment of the
# next (``Spacing``), so each late start delays every later one and the creep ends in
# catch-ups, each a short gap: at 50 calls/s with a bucket of one, 6-8% of calls were
# refused with the timer set for the moment, 3-5% with it set this much early and the loop
# looking again on each pass for the rest (a median 0.03 ms late). The cost: the loop spins
# for at most this long per wait, about half of it on average.
TIMER_GRAIN = 0.001


def timer_wait(wait: float) -> float:
    """How long to set a loop's timer for a moment ``wait`` s away: ``TIMER_GRAIN`` early,
    and 0 (look again on the loop's next pass) within it. Whoever it wakes checks the time
    and waits again if the moment has not come: a timer never starts a call early."""
    return max(0.0, wait - TIMER_GRAIN)


class Spacing:
    """The earliest start of a paced call, given the previous paced start. Pure.

    The scheduler's stamps conform to the API's bucket; starts conform too when no two are
    closer than their stamps. So a record stamped ``stamp`` starts no sooner than the
    previous paced start plus the stamps' difference (and never before its own ``due``):
    a late start pushes the next ones by its lateness instead of bunching them. Unless that
    would hold the record past its ``due`` by more than ``slack`` or ``CATCH_UP_GAPS`` times
    its stamp's distance from the previous one: then it starts at ``due`` (``CATCH_UP_SLACK``
    says why). A record stamped before the previous one (it arrived
    late) is not held for it, and the one after it keeps its distance from it.

    Times are seconds on one clock (the worker's wall clock, which stamps are compared with).
    Records without a stamp are not paced: leave them out. Caller: one thread or event
    loop. Affects: this object only.
    """

    __slots__ = ("_stamp", "_start", "slack")

    def __init__(self, slack: float = CATCH_UP_SLACK) -> None:
        if slack < 0:
            raise ValueError(f"slack must be at least 0, got {slack}")
        self.slack = slack
        self._stamp: float | None = None  # the previous paced start's stamp
        self._start = 0.0  # and when it started

    def earliest(self, stamp: float, due: float) -> float:
        """When a call stamped ``stamp`` (s), due at ``due`` (``start_at``), may start."""
        if self._stamp is None:
            return due
        gap = stamp - self._stamp
        kept = self._start + gap
        if kept <= due or kept - due > min(self.slack, CATCH_UP_GAPS * gap):
            return due
        return kept

    def started(self, stamp: float, at: float) -> None:
        """A call stamped ``stamp`` started at ``at``: the next ones keep their distance."""
        self._stamp, self._start = stamp, at

    def began(self, stamp: float, at: float) -> None:
        """The previous paced call, stamped ``stamp``, actually began at ``at`` (after its
        ``started``: it left the playout buffer, then waited for the loop to run it); the
        next ones keep their distance from the later of the two. Ignored once another
        call has started since (another stamp)."""
        if stamp == self._stamp and at > self._start:
            self._start = at


class Playout(Generic[T]):
    """Items waiting for their start time, handed out in order of it (ties: as pushed).

    An item pushed with its ``stamp`` is paced: it leaves no sooner after the previous
    paced item than their stamps are apart (``Spacing``), which may hold it past its
    ``due``; the order stays that of ``due``. Caller: one thread or event loop (the
    worker's loop, a Faust agent). Affects: this object only.
    """

    __slots__ = ("_heap", "_seq", "spacing")

    def __init__(self, slack: float = CATCH_UP_SLACK) -> None:
        self._heap: list[tuple[float, int, float | None, T]] = []
        self._seq = 0
        self.spacing = Spacing(slack)

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due: float, item: T, stamp: float | None = None) -> None:
        """Hold ``item`` until ``due`` (a time on the caller's clock); ``stamp``: its start
        stamp on that clock (seconds), to keep its distance from the previous paced item."""
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, stamp, item))

    def next_due(self) -> float | None:
        """When the earliest item may leave, or None when nothing waits."""
        if not self._heap:
            return None
        due, _, stamp, _ = self._heap[0]
        return due if stamp is None else self.spacing.earliest(stamp, due)

    def pop_due(self, now: float) -> list[T]:
        """The items whose start time has come by ``now``, earliest first; the paced ones
        count as started at ``now`` (``began`` corrects that when a call begins later)."""
        heap, ready = self._heap, []
        while heap:
            due, _, stamp, item = heap[0]
            if stamp is not None:
                if self.spacing.earliest(stamp, due) > now:
                    break
                self.spacing.started(stamp, now)
            elif due > now:
                break
            heapq.heappop(heap)
            ready.append(item)
        return ready

    def began(self, stamp: float, at: float) -> bool:
        """The call of the last paced item handed out (stamped ``stamp``) began at ``at``.
        True when that made the earliest item due by ``at``: its start would be held past
        the slack, so it catches up, and the caller should hand it out now. Left to the
        caller's timer (set for the moment before the correction), it left a millisecond or
        two before that moment: one gap shorter than its stamps' (a call a bucket of one
        refuses) that shed almost none of the lateness; handed out now, the catch-up sheds
        a whole gap (measured at 50 calls/s: 10 catch-ups in 6 s, shedding 3.4 ms each)."""
        before = self.next_due()
        self.spacing.began(stamp, at)
        due = self.next_due()
        # Only a change of due's: one due already is handed out by the caller's timer.
        return due is not None and due <= at and (before is None or before > at)

    def purge(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the items for which ``predicate(item)`` is true."""
        kept: list[tuple[float, int, float | None, T]] = []
        removed: list[T] = []
        for entry in self._heap:
            if predicate(entry[3]):
                removed.append(entry[3])
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._heap = kept
        return removed
