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
  paced ones apart with a ``Spacing``; it hands a paced record out a little ahead of its
  moment (its *lead*), and the call's task holds it the rest at the gate (``Playout.gate``,
  ``hold_until``), right before the handler: the steps between leaving the buffer and the
  handler's first line (a turn of the event loop) no longer make it late. The worker says
  when the call began (``Playout.began``) on the handler's doorstep, the next gate keeps
  its distance from that moment, plus a margin (``GATE_MARGIN``) for the API's own reading
  of the clock a few steps later;
- ``timer_wait`` is how long to set a loop's timer for a moment, so that it wakes on time.

Both the SDK's ``Worker`` and the Faust agent (``fairstream.faust``) pace with these.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = [
    "CATCH_UP_GAPS",
    "CATCH_UP_SLACK",
    "GATE_MARGIN",
    "LEAD_SHARE",
    "MAX_LEAD",
    "PLAYOUT_DELAY",
    "TIMER_GRAIN",
    "Playout",
    "Spacing",
    "hold_until",
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


# The lead: how far ahead of its start a paced record leaves the playout buffer, to be held
# the rest at its call's gate. Between leaving the buffer and the handler's first line the
# record waits a turn of the event loop (a task is created, then run), and that turn took
# 0.14 ms at the median here, up to 0.4 ms at p99, with other threads taking the
# interpreter lock in it: each paced start was that much late, a creep that ended in
# catch-ups, each a call a bucket of one refuses (1.0-1.6% of calls at 50/s). The gate
# waits out the rest of the lead a turn of the loop at a time, so the lead costs the
# loop's time: ``LEAD_SHARE`` of the stamps' gap keeps it within that share at any rate
# (0.4 ms at 50/s, 0.1 ms at 200/s, 10 us at 2,000/s, where a bucket of 200 leaves room
# anyway), ``MAX_LEAD`` at most. (Spinning on the clock instead, the lock held, made the
# steps after the gate slower, 26 us against 12 at the median on 2 busy cores, and
# their spread is what ``GATE_MARGIN`` must cover: 3% refused at 50/s.)
LEAD_SHARE = 0.02
MAX_LEAD = 0.0005

# How far past the stamps' gap the gate holds a call. A call's start is read on the
# handler's doorstep (``began``: the worker's last step before the handler), and the API
# reads its own clock on the handler's first line, a few steps later: 7 us at the median on
# 2 cores shared with a broker and a scheduler, 12-28 us at p99, 60 us at most in four
# runs. A bucket of one refuses a call a microsecond short of the stamps' gap, and each gap
# the API sees is the worker's plus the difference of two such delays: the margin covers
# that difference. It is also a creep (each start that much later), which ends in
# catch-ups: at 50/s behind a bucket of one, 0.4% of calls refused with 60 us, all of
# them catch-ups; 0.6% with 30 us, half of them short by the delays' difference. Like the
# lead, it is at most ``LEAD_SHARE`` of the gap: at 2,000/s the whole margin would hold
# every call 12% behind its stamps, to be caught up in clumps.
GATE_MARGIN = 60e-6


async def hold_until(
    moment: Callable[[float], float],
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[object]],
) -> float:
    """Wait until ``clock()`` reaches ``moment(now)`` (asked again after every wait: it may
    move meanwhile); return the clock's reading then. It sleeps (``sleep``, the loop's:
    ``asyncio.sleep``) for ``timer_wait``: while more than ``TIMER_GRAIN`` away, until a
    grain before; within it, a turn of the loop at a time. It never returns before the
    moment. Caller: a task on an event loop."""
    while True:
        now = clock()
        at = moment(now)
        if now >= at:
            return now
        await sleep(timer_wait(at - now))


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

    Two previous starts are kept: the last handed out (``started``, at the moment it was
    given, corrected by ``began``), which ``earliest`` and ``lead`` read to hand the next
    one out; and the last whose call began (``began``), which ``gate`` reads to hold the
    next one's call until its moment: a call handed out before the previous one began
    still keeps its distance from that one's begin.

    Times are seconds on one clock (the worker's wall clock, which stamps are compared with).
    Records without a stamp are not paced: leave them out. Caller: one thread or event
    loop. Affects: this object only.
    """

    __slots__ = ("_begun", "_begun_stamp", "_stamp", "_start", "slack")

    def __init__(self, slack: float = CATCH_UP_SLACK) -> None:
        if slack < 0:
            raise ValueError(f"slack must be at least 0, got {slack}")
        self.slack = slack
        self._stamp: float | None = None  # the previous paced start's stamp
        self._start = 0.0  # and when it started
        self._begun_stamp: float | None = None  # the last paced call to begin: its stamp
        self._begun = 0.0  # and when it began

    def earliest(self, stamp: float, due: float) -> float:
        """When a call stamped ``stamp`` (s), due at ``due`` (``start_at``), may start."""
        if self._stamp is None:
            return due
        gap = stamp - self._stamp
        kept = self._start + gap
        if kept <= due or kept - due > min(self.slack, CATCH_UP_GAPS * gap):
            return due
        return kept

    def lead(self, stamp: float) -> float:
        """How far ahead of ``earliest`` a call stamped ``stamp`` is handed out to its gate:
        ``LEAD_SHARE`` of its stamp's distance from the previous one, ``MAX_LEAD`` at most."""
        if self._stamp is None or stamp <= self._stamp:
            return 0.0
        return min(MAX_LEAD, LEAD_SHARE * (stamp - self._stamp))

    def gate(self, stamp: float, due: float, now: float) -> float:
        """When the call stamped ``stamp`` (handed out, due at ``due``) may begin, asked at
        ``now``: the stamps' distance after the last paced call that began, plus
        ``GATE_MARGIN`` (``LEAD_SHARE`` of the gap at most), and never before ``due``. It
        catches up (``due``) as ``earliest`` does, past the slack, with one exception: a
        call that would catch up by less than half a gap when it is past the slack by less
        than half a gap. That is a call handed out to be kept whose previous one began a
        little late: let through, it would begin a fraction of a millisecond short of its
        moment, a call a bucket of one refuses that sheds almost nothing (measured: 7 of 9
        refusals at 50/s). It is kept instead, and the next one catches up back to back. A
        call far past the slack (a worker slower than the stamps, its calls waiting for a
        free slot) is never held."""
        if self._begun_stamp is None:
            return due
        gap = stamp - self._begun_stamp
        kept = self._begun + min(GATE_MARGIN, LEAD_SHARE * gap) + gap
        if kept <= due:
            return due
        limit = min(self.slack, CATCH_UP_GAPS * gap)
        if kept - due > limit and (kept - now >= gap / 2 or kept - due > limit + gap / 2):
            return due
        return kept

    def started(self, stamp: float, at: float) -> None:
        """A call stamped ``stamp`` started at ``at``: the next ones keep their distance."""
        self._stamp, self._start = stamp, at

    def began(self, stamp: float, at: float) -> None:
        """The paced call stamped ``stamp`` began at ``at``: the next call's gate keeps its
        distance from it. When it is the last one handed out (``started``: it left the
        playout buffer, then waited for the loop to run it), the next ones are handed out
        from the later of the two moments; once another call has started since (another
        stamp), only the gate moves."""
        self._begun_stamp, self._begun = stamp, at
        if stamp == self._stamp and at > self._start:
            self._start = at


class Playout(Generic[T]):
    """Items waiting for their start time, handed out in order of it (ties: as pushed).

    An item pushed with its ``stamp`` is paced: it leaves no sooner after the previous
    paced item than their stamps are apart (``Spacing``), which may hold it past its
    ``due``; the order stays that of ``due``. It leaves its ``Spacing.lead`` ahead of that
    moment: its call's task holds it the rest (``gate``, ``hold_until``), then says when it
    ``began``. Caller: one thread or event loop (the worker's loop, a Faust agent).
    Affects: this object only.
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
        if stamp is None:
            return due
        spacing = self.spacing
        return spacing.earliest(stamp, due) - spacing.lead(stamp)

    def pop_due(self, now: float) -> list[T]:
        """The items whose start time (less a paced item's lead) has come by ``now``,
        earliest first; a paced one counts as started at its start time, or ``now`` if
        later (``began`` corrects that when its call begins later)."""
        heap, ready, spacing = self._heap, [], self.spacing
        while heap:
            due, _, stamp, item = heap[0]
            if stamp is not None:
                at = spacing.earliest(stamp, due)
                if at - spacing.lead(stamp) > now:
                    break
                spacing.started(stamp, max(at, now))
            elif due > now:
                break
            heapq.heappop(heap)
            ready.append(item)
        return ready

    def gate(self, stamp: float, due: float, now: float) -> float:
        """When the call of a handed-out item stamped ``stamp`` (pushed due at ``due``) may
        begin, asked at ``now``: its stamps' distance after the last paced call that began
        (``Spacing.gate``), never before ``due``. Ask again after each wait: a call
        beginning meanwhile moves it."""
        return self.spacing.gate(stamp, due, now)

    def began(self, stamp: float, at: float) -> None:
        """The call of a paced item handed out (stamped ``stamp``) began at ``at``: the next
        ones keep their distance from it (``Spacing.began``). It may make the earliest item
        due at once: its start would be held past the slack, so it catches up. The caller
        looks again (``pop_due``) as soon as the call is under way: left to the caller's
        timer, set for the moment before the correction, a catch-up left a millisecond or
        two before that moment, one gap shorter than its stamps' (a call a bucket of one
        refuses) that shed almost none of the lateness; handed out at once, it sheds a
        whole gap (measured at 50 calls/s: 10 catch-ups in 6 s, shedding 3.4 ms each). Only
        state changes here: it runs between the gate and the handler, where each
        microsecond counts."""
        self.spacing.began(stamp, at)

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
