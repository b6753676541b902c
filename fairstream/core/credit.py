"""Credit: how many requests the workers and the paid API can have in flight, found from
their feedback.

Without a 429 nothing tells the scheduler that the workers (or an API that queues calls
instead of refusing them) are slower than ``--rate``: it would keep releasing at the rate,
and the backlog would move from the scheduler, where fairness is applied, into the egress
topic and the API's queue, which are FIFO. ``ConcurrencyLimit`` finds the concurrency they
sustain, as TCP Vegas and Netflix's Gradient2 or Envoy's adaptive concurrency do, from one
measurement per settled request: its *hold*, the seconds from its release (the egress
record's ``scheduled_at``) to its final feedback being read. That is the time the request
held a concurrency slot: the egress queue, the workers' playout delay, the call, and the
feedback's way back.

Each hold has a *call* (the feedback's ``latency``) and a *wait* before it (the report's
sojourn, ``reported_at - scheduled_at``, less the call: the egress queue, the playout
delay; the feedback's way back is not in it, so its batching does not pass for a queue).
By Little's law the slots in use are ``completions/s x mean hold``. The least wait and the
least call seen (``base_wait``, ``base_call``; ``base`` is their sum) are what a request
takes when nothing queues. Every ``interval`` seconds, over the completions of the last ``window``:

- **Queue**: requests queue before the call (the egress topic, a worker busy) by as much
  as the window's mean wait is above ``base_wait``, less ``slack`` (commits and fetches
  make waits vary by tens of milliseconds with no queue). The mean, not a low quantile:
  records are keyed by tenant, so one worker may have a queue while the others have none,
  and the requests behind it are the ones fairness is about. The wait does not include
  the call, so calls that vary in length never pass for a queue of the workers. In the API
  (it queues calls instead of refusing them) by as much as the *short latency* is above
  ``base_call``: the window's least call, or while the window holds fewer than
  ``_CALLS_TRUSTED`` (an API of a few calls a second), the least of the last ones. A
  standing queue there delays the quickest call too, while calls that only vary in length
  leave the least near its base. Calls of one length (``fixed_call``: the run's first
  ``_CALLS_TRUSTED`` calls, which meet no queue of ours under the start-up window, all
  within ``tolerance`` of their mean; a probe measures it again) show the API's queue more
  exactly: as much as the window's mean call is above that length. Calls that end in
  lockstep (an API of 8 slots of 0.5 s) leave one of them unqueued in most windows, so the
  least call hid a queue behind the others, which the target then kept and the growth
  added to: the limit climbed from 14 to 20-23 and was cut back, again and again, and the
  quiet tenants waited 1.2-1.3 s at p99 (``benchmarks.api_view --scenario queueing-api``);
  told from the mean, it stays at 14 from the fourth second on, and they wait at most
  0.89 s (0.83-0.88 s at p99 with slow start's first growth, ``_SLOW_START``). Calls that
  vary in length leave it None: their mean above their least is no queue.
- **Target**: ``completions/s x (mean hold - queue) x (1 + headroom) + spare``: the slots
  that keep the workers busy with no queue, plus a little queue (a worker finishing a call
  finds the next one). While a queue shows, the completions per second are the capacity
  itself, so this is the capacity's concurrency plus the headroom, and the queue it leaves
  is about ``headroom x base + spare / capacity`` seconds long.
- **Grow**: while the limit binds (the slots in use reach ``_BINDING`` of it) and the queue
  is at most ``tolerance x base``, capacity may be left unused: the limit grows by
  ``growth``, up to ``ceiling``. Otherwise it goes to the target, but never up by more than
  ``growth`` at once (a short span of holds, some queued and some not, makes the target
  overshoot). For a round trip after a growth (the mean hold and the window), it does not
  go down while no queue shows: the slots in use, counted from the window's completions,
  lag the growth by that much. Cut to the target then, a limit that had just grown passed
  for one that did not bind, and with holds longer than the window it was cut back after
  every growth (a slow API of 1 s calls at ``--rate`` 40: the limit swung between 13 and
  82 for 8 s, and the API got 0.95x of the rate; with 2 s calls the simulated loop held it
  to 0.6x). Past that round trip the target applies again: kept up longer, the limit left
  an API of 8 slots that queues a longer queue (its quiet tenants waited about 0.08 s more
  at the median). Never below ``floor``. It grows once per round trip, as TCP Vegas adjusts
  its window: only when a request released since the last growth has come back (its hold
  measures the growth), and meanwhile no higher than it was. Grown every interval, it
  overshot before the holds showed the queue (an API of 8 slots of 0.5 s that queues: the
  quiet tenants' wait went from 1.0 s to 1.15 s at p99, in a sawtooth every 5 s). Until
  the first queue past ``tolerance`` is seen, ``growth`` is ``_SLOW_START`` (as TCP's slow
  start doubles per round trip), so that a slow API reaches its concurrency within a few
  round trips. The first growth is less when calls are long (1 + ``_SLOW_START_QUEUE`` /
  the mean call): the first limit may be an API's own slots, and an overshoot from there
  at an API that queues costs each queued request its call length for the round trip it
  takes to show; once a growth came back with no queue, the API has room, and it doubles.
- **First limit**: the completions per second are counted from ``interval`` after the
  first sample, and, under a start-up window of ``startup`` slots (``update``), at most
  ``startup`` per mean hold (Little's law: no more were in flight). Counted over a short
  span, requests that settle together (an API of 8 slots: 8 at a time) passed for twice
  the rate, and the first limit for twice the slots: the quiet tenants then waited 1.5 s
  in its queue.
- **Gradient**: an API that queues calls instead of refusing them hides its queue in the
  call's latency, where ``wait`` does not see it. As Netflix's Gradient2 and Envoy's
  adaptive concurrency do, the short latency (the least call of the window, or of the last
  ``_CALLS_TRUSTED`` calls while the window holds fewer) is compared with the no-load one
  (``base_call``, re-measured by the probes). Past ``gradient_tolerance`` times it plus
  ``slack``, the limit is cut by the ratio ``gradient = (gradient_tolerance x base_call +
  slack) / short`` (at least ``_GRADIENT_MIN``), smoothed: to ``limit x (1 - smoothing x
  (1 - gradient))`` per interval, and it does not grow. Never below what the API's slots
  and the pipeline need with no queue: ``completions/s x (mean hold - queue) + spare``
  (while the API queues, the completions per second are its capacity, so this is its real
  concurrency plus the records between release and the call and on the way back), so the
  API stays busy. Calls of a fixed length (slow workers: the queue is in ``wait``) never
  move it.
- **Probe**: the bases only go down with new samples; a standing queue would otherwise
  become part of them and ratchet the limit up, and an API that got slower would never
  be measured. So, every ``probe_every`` seconds in which the limit bound most of the
  time, the limit drops to ``floor`` until ``probe_samples`` requests released after the
  drop have come back (the queue has drained: they meet none) or ``probe_timeout`` has
  passed; their least wait and call are the new bases, and the limit returns to where it
  was, kept there until the probe's completions have left the window. Envoy's gradient
  controller measures its minimum round trip the same way (every 60 s by default). A probe
  stalls releases for about two holds, and the quiet tenants' requests with them (an API
  of 8 slots of 0.5 s: their waits went from 1 s to 1.9 s for that span), so a probe that
  found the bases where they were (within ``tolerance`` of them, plus ``slack``) doubles
  the span to the next, up to ``probe_max``; one that moved them brings it back to
  ``probe_every``.
- **429s, no limit**: an API that refuses calls (api-scope 429s) has the adaptive rate
  (``fairstream.core.adaptive``) in charge; the limit stands aside (None) for ``aside``
  seconds after each refusal. It is for workers and APIs that are slow without saying so.
- **No feedback, no limit**: until the first sample, and again after ``idle`` seconds
  without one, ``limit`` is None (unlimited) and everything learnt is forgotten (``learning``
  tells this None from the one that stands aside for 429s): workers that report nothing, or
  stopped reporting, never hold the scheduler back for long.
- **Start-up window** (``StartupWindow``, applied by the emitter while ``learning``): before
  the first sample nothing is known, and releasing at ``--rate`` for the first hold (the
  playout delay, a call, the feedback's way back) put a second of releases into the egress
  topic and the API's queue, FIFO, where the quiet tenants waited behind it for seconds
  (measured: 5.3 s at p99 with an API of 8 slots that queues, ``benchmarks.api_view
  --scenario queueing-api``). As TCP's initial window does, a few slots are allowed until
  the first limit is found. The window doubles every ``doubling`` seconds without one, and
  opens ``timeout`` seconds after its first release: the workers report nothing, or calls
  are longer than that.

The limit is the group's: every instance reads all the feedback, so each computes the same
one and holds its part of it, as with a fixed ``--max-concurrency``.

Pure: no I/O; time comes from an injected ``Clock`` (or as ``now``, on its seconds). Not
thread-safe: one owner (the feedback reader) calls every method.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

from fairstream.core.clock import Clock
from fairstream.core.parameters import at_least, count, counts, finite

__all__ = ["ConcurrencyLimit", "StartupWindow"]

# The limit binds when the slots in use (Little's law over the window) reach this
# fraction of it: a limit that binds holds all its slots, less what a commit delays, and
# one that does not is at least 1 + headroom times the slots in use.
_BINDING: Final = 0.9

# The least gradient applied at once (Gradient2's bound): one window of calls stuck behind a
# burst must not take the limit down by more than half before the next one is measured.
_GRADIENT_MIN: Final = 0.5

# The growth per round trip until the first queue is seen: doubling, as TCP's slow start.
# But the first limit, set under the start-up window's few slots, may already be an API's
# own (an API of 8 slots: the window's 8 are its 8), and grown by g from there, the API
# queues (g - 1) x its call for the round trip it takes to show. So the first growth is at
# most 1 + _SLOW_START_QUEUE / the window's mean call; once it came back with no queue the
# API has room past the first limit, and the limit doubles. At an API of 8 slots of 0.5 s
# that queues, doubling took the first limit (12: its slots and the pipeline) to 23 in the
# first second, and the quiet tenants behind those 11 calls waited 1.0-1.3 s at p99;
# grown by half (its calls are 0.5 s), to 17-18, they waited 0.83-0.88 s. Grown by half
# every round trip, a fast worker behind a strict API (--rate 200 --burst 5) spent a round
# trip more with the limit binding, and its catch-up releases had 73 of the first 800
# calls refused (tests/integration/test_pacing.py, on a cold broker): its calls take
# milliseconds, and it doubles; and a slow API of 1 s calls at --rate 40, grown by 1.25
# every round trip, got 0.964x of the rate instead of 0.977x (benchmarks.slow_api).
_SLOW_START: Final = 2.0
_SLOW_START_QUEUE: Final = 0.25  # seconds

# The API's queue is told from the least of this many calls at least (the window's, or the
# last ones while the window holds fewer): the least of fewer calls that vary in length is
# far above the least ever.
_CALLS_TRUSTED: Final = 8


# The start-up window (``StartupWindow``): at least this many slots, or 50 ms of releases at
# the rate. With 16, two workers of one 0.1 s call each had 0.8 s of queue each before the
# first limit, and their quiet tenants waited 1.7 s; an API of 8 slots that queues had 8
# calls queued.
STARTUP_SLOTS: Final = 8
STARTUP_HORIZON: Final = 0.05  # seconds of releases at --rate
# The window doubles every STARTUP_DOUBLING seconds until a request settles (as TCP's slow
# start doubles per round trip, with the round trip not known yet), and opens
# STARTUP_TIMEOUT seconds after its first release. Workers that settle quickly stop it
# small (an API of 8 slots of 0.5 s, doubled at 0.5 s, had 8 calls queued); a slow API (1 s
# calls at --rate 40) starts with 16. Workers that report nothing lose about four seconds of
# releases, once.
STARTUP_DOUBLING: Final = 1.0
STARTUP_TIMEOUT: Final = 8.0


def _finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


class ConcurrencyLimit:
    """The concurrency the workers and the API sustain, from the holds of settled requests
    (see the module docstring). ``limit`` is None (unlimited) until the first sample.

    ``floor`` and ``ceiling`` bound the limit; ``headroom`` and ``spare`` are the fraction
    and the slots above the Little's-law value; ``growth`` the factor per ``interval``
    while the limit binds and nothing queues; ``tolerance`` and ``slack`` how much
    queue, a fraction of ``base`` plus seconds (commits and fetches make waits vary), is
    still "nothing queues"; ``window`` the seconds of completions the rate is measured
    over; ``probe_every``, ``probe_max``, ``probe_samples`` and ``probe_timeout`` the
    probes of the bases; ``idle`` the seconds without a sample after which the limit is dropped;
    ``aside`` the seconds it stands aside after the API refused a call (``refused``);
    ``gradient_tolerance`` how many times ``base_call`` the window's short latency may be
    before the API counts as queueing, and ``smoothing`` the share of the gradient's cut
    """

    __slots__ = (
        "_aside",
        "_aside_until",
        "_binding",
        "_calls",
        "_clock",
        "_first",
        "_grow_at",
        "_grown_from",
        "_held_until",
        "_last",
        "_limit",
        "_next_probe",
        "_next_update",
        "_noload",
        "_probe_call",
        "_probe_calls",
        "_probe_count",
        "_probe_interval",
        "_probe_start",
        "_probe_wait",
        "_queued",
        "_released_last",
        "_room",
        "_samples",
        "_saved",
        "_startup",
        "_updates",
        "aside",
        "base_call",
        "base_wait",
        "ceiling",
        "fixed_call",
        "floor",
        "gradient",
        "gradient_tolerance",
        "growth",
        "headroom",
        "idle",
        "interval",
        "probe_every",
        "probe_max",
        "probe_samples",
        "probe_timeout",
        "probes",
        "slack",
        "smoothing",
        "spare",
        "tolerance",
        "window",
    )

    # The run's state (``_forget`` sets it).
    _limit: float | None
    base_wait: float | None
    base_call: float | None
    _probe_start: float | None
    _probe_interval: float
    _next_probe: float
    _binding: int
    _updates: int
    _grow_at: float
    _released_last: float
    _queued: bool
    _room: bool
    _noload: list[float]
    fixed_call: float | None

    def __init__(
        self,
        clock: Clock,
        *,
        floor: int = 2,
        ceiling: int = 10_000,
        headroom: float = 0.2,
        spare: float = 2.0,
        growth: float = 1.25,
        tolerance: float = 0.1,
        slack: float = 0.05,
        interval: float = 0.25,
        window: float = 1.0,
        probe_every: float = 60.0,
        probe_max: float = 600.0,
        probe_samples: int = 2,
        probe_timeout: float = 10.0,
        idle: float = 60.0,
        aside: float = 10.0,
        gradient_tolerance: float = 1.5,
        smoothing: float = 0.2,
    ) -> None:
        counts(floor, ceiling, probe_samples=probe_samples)
        self._clock = clock
        self.floor = floor
        self.ceiling = ceiling
        self.probe_samples = probe_samples
        self.headroom = finite("headroom", headroom, low=0, strict=False)
        self.spare = finite("spare", spare, low=0, strict=False)
        self.growth = finite("growth", growth, low=1, strict=True)
        self.tolerance = finite("tolerance", tolerance, low=0, strict=False)
        self.slack = finite("slack", slack, low=0, strict=False)
        self.interval = finite("interval", interval, low=0, strict=True)
        self.window = finite("window", window, low=0, strict=True)
        at_least("window", window, "interval", interval)
        self.probe_every = finite("probe_every", probe_every, low=0, strict=True)
        self.probe_max = finite("probe_max", probe_max, low=0, strict=True)
        at_least("probe_max", probe_max, "probe_every", probe_every)
        self.probe_timeout = finite("probe_timeout", probe_timeout, low=0, strict=True)
        self.idle = finite("idle", idle, low=0, strict=True)
        self.aside = finite("aside", aside, low=0, strict=False)
        self.gradient_tolerance = finite(
            "gradient_tolerance", gradient_tolerance, low=1, strict=False
        )
        self.smoothing = finite("smoothing", smoothing, low=0, strict=True)
        if self.smoothing > 1:
            raise ValueError(f"smoothing must be a finite number <= 1, got {smoothing!r}")
        # (read at, hold, call, wait), oldest first
        self._samples: deque[tuple[float, float, float, float]] = deque()
        # The last calls, however old: the API's queue is told from them while the window
        # holds fewer than _CALLS_TRUSTED (an API of a few calls per second).
        self._calls: deque[float] = deque(maxlen=_CALLS_TRUSTED)
        self._first = 0.0  # when the first sample of this run came
        self._startup: int | None = None  # the start-up window's slots, at the last update
        self._grown_from = 0.0  # the limit at the last growth: no higher until measured
        self._last = -math.inf  # when the last sample came
        self._next_update = -math.inf
        self._probe_wait = self._probe_call = math.inf
        self._probe_calls: list[float] = []
        self._probe_count = 0
        self._saved = 0.0  # the limit before the running probe
        self._held_until = -math.inf  # no recomputing before (the window holds a probe)
        self._forget()  # the run's state, as after ``idle``
        self._aside_until = -math.inf  # no limit before (the API refused calls lately)
        self._aside = False
        self.probes = 0  # probes completed, ever
        self.gradient = 1.0  # the last update's latency gradient (1: the API does not queue)

    @property
    def limit(self) -> int | None:
        """The group's concurrency limit now (None: unlimited, no feedback to go by)."""
        if self._limit is None or self._aside:
            return None
        if self._probe_start is not None:
            return self.floor
        return max(self.floor, min(self.ceiling, math.floor(self._limit + 0.5)))

    @property
    def learning(self) -> bool:
        """Whether nothing is known: no sample yet, or all forgotten after ``idle`` seconds
        without one (``limit`` is then None). False while a limit stands aside for 429s."""
        return self._limit is None

    @property
    def probing(self) -> bool:
        """Whether the limit is down at ``floor`` to measure the bases afresh."""
        return self._probe_start is not None

    @property
    def base(self) -> float | None:
        """The hold of a request that meets no queue (``base_wait + base_call``), or None
        before the first sample."""
        if self.base_wait is None or self.base_call is None:
            return None
        return self.base_wait + self.base_call

    def observe(
        self,
        hold: float,
        call: float = 0.0,
        wait: float | None = None,
        now: float | None = None,
    ) -> None:
        """A request settled (a final outcome was read): it held a slot for ``hold``
        seconds, from its release to ``now``; ``call`` of them in the API call (the
        feedback's ``latency``; 0 when unknown) and ``wait`` before it (the report's
        sojourn less its latency: the egress topic, the playout delay, a queue at the
        workers; None: the hold less the call, which adds the feedback's way back). A hold
        that is not a finite number >= 0 (the clocks of two hosts disagree) is ignored; a
        call longer than the hold is taken as the hold, a wait that is not a number >= 0
        as none.

        Caller: the feedback reader, per final outcome with ``scheduled_at``."""
        if not (_finite(hold) and hold >= 0):
            return
        if not (_finite(call) and call >= 0):
            call = 0.0
        if now is None:
            now = self._clock.now()
        hold = float(hold)
        call = min(float(call), hold)
        if wait is None:
            wait = hold - call
        elif not (_finite(wait) and wait >= 0):
            wait = 0.0
        wait = float(wait)
        if self._limit is None and not self._samples:
            self._first = now  # the first sample of a run: the rate is measured from here
            self._next_probe = now + self._probe_interval
            self._next_update = -math.inf  # a limit at the next update
        self._samples.append((now, hold, call, wait))
        self._released_last = max(self._released_last, now - hold)
        self._calls.append(call)
        self._last = now
        noload = self._noload
        if len(noload) < _CALLS_TRUSTED:
            # The run's first calls meet no queue of ours (the start-up window's few slots).
            noload.append(call)
            if len(noload) == _CALLS_TRUSTED:
                self.fixed_call = _one_length(noload, self.tolerance)
        if self.base_wait is None or wait < self.base_wait:
            self.base_wait = wait
        if self.base_call is None or call < self.base_call:
            self.base_call = call
        start = self._probe_start
        if start is not None and now - hold >= start:  # released after the probe began
            self._probe_count += 1
            self._probe_wait = min(self._probe_wait, wait)
            self._probe_call = min(self._probe_call, call)
            self._probe_calls.append(call)

    def update(self, now: float | None = None, startup: int | None = None) -> int | None:
        """Recompute the limit when ``interval`` has passed since the last time; the limit.
        ``startup``: the slots the emitter's start-up window allows now (``StartupWindow``;
        None: none), at most that many in flight before the first limit.

        Caller: the feedback reader, a few times a second."""
        if now is None:
            now = self._clock.now()
        self._startup = startup
        if now < self._next_update:
            return self.limit
        self._next_update = now + self.interval
        if now - self._last > self.idle:
            self._forget()
            return None
        self._aside = now < self._aside_until
        samples = self._samples
        while samples and samples[0][0] < now - self.window:
            samples.popleft()
        if self._probe_start is not None:
            self._probing(now)
        elif samples and now >= self._held_until and self._measured(now):
            self._settle(now)
            if now >= self._next_probe and not self._aside:
                self._start_probe(now)
        return self.limit

    def refused(self, now: float | None = None) -> None:
        """The API refused a call for the group's rate (an api-scope 429): the adaptive rate
        is in charge, and the limit stands aside (None) for ``aside`` seconds from ``now``,
        learning meanwhile. A limit that bound while the rate probes the API's capacity
        would release in clumps as completions free slots, which such an API refuses, and
        would slow the rate's own measure of it.

        Caller: the feedback reader, per api-scope rate-limited outcome."""
        if now is None:
            now = self._clock.now()
        self._aside_until = max(self._aside_until, now + self.aside)
        self._aside = True
        self._probe_start = None  # a probe now would measure the refusals

    def queue(self) -> float:
        """Seconds requests queue now, as the window's samples show it: the mean wait above
        ``base_wait`` less ``slack`` (the egress topic, a worker busy) plus the short
        latency (``short_call``) above ``base_call`` (an API that queues calls): a queue
        there delays the quickest call too, while calls that only vary in length leave
        the least near its base; for calls of one length (``fixed_call``), the mean call
        above it, when that is more."""
        samples = self._samples
        if not samples or self.base_wait is None or self.base_call is None:
            return 0.0
        mean = sum(wait for _, _, _, wait in samples) / len(samples)
        queue = max(0.0, mean - self.base_wait - self.slack)
        short = self.short_call()
        if short is not None:
            api = max(0.0, short - self.base_call)
            fixed = self.fixed_call
            if fixed is not None:
                # Calls of one length: the mean above that length is the API's queue.
                calls = sum(call for _, _, call, _ in samples) / len(samples)
                api = max(api, calls - fixed)
            queue += api
        return queue

    def short_call(self) -> float | None:
        """The short latency: the window's least call, or while the window holds fewer
        than ``_CALLS_TRUSTED``, the least of the last ``_CALLS_TRUSTED`` calls (None while
        fewer came)."""
        samples = self._samples
        if len(samples) >= _CALLS_TRUSTED:
            return min(call for _, _, call, _ in samples)
        if len(self._calls) < _CALLS_TRUSTED:
            return None
        return min(self._calls)

    def _gradient(self) -> float:
        """``(gradient_tolerance x base_call + slack) / short_call`` when the short latency
        is past that (the API queues calls), at least ``_GRADIENT_MIN``; else 1."""
        short, base = self.short_call(), self.base_call
        if short is None or base is None or base <= 0:
            return 1.0  # no call lengths reported (0): nothing to compare
        # Plus ``slack``: the least of a window of calls that vary in length (exponential,
        # say) is many times the least ever when both are a few milliseconds.
        allowed = base * self.gradient_tolerance + self.slack
        if short <= allowed:
            return 1.0
        return max(_GRADIENT_MIN, allowed / short)

    def _measured(self, now: float) -> bool:
        """Whether the completions per second can be told: a limit exists, or ``interval``
        has passed since the first sample (the first update after it saw one completion,
        and its limit was a handful of slots: a fast API took 8 s to grow from 6)."""
        return self._limit is not None or now - self._first >= self.interval

    def _settle(self, now: float) -> None:
        samples = self._samples
        base = self.base
        assert base is not None  # a sample sets it
        # Completions per second over the window (or over the run, while it is shorter).
        span = max(self.interval, min(self.window, now - self._first))
        rate = len(samples) / span
        mean = sum(hold for _, hold, _, _ in samples) / len(samples)
        if self._limit is None and self._startup is not None:
            # The first limit: no more than the start-up window's slots complete per mean
            # hold. Counted over a short span, the requests that settle together (an API
            # of 8 slots of 0.5 s: 8 at a time) passed for twice the rate, and the first
            # limit for twice the slots, whose queue then held quiet tenants for seconds.
            rate = min(rate, self._startup / mean) if mean > 0 else rate
        queue = max(0.0, min(self.queue(), mean - base))
        in_use = rate * mean  # Little's law
        # The slots that keep the workers busy without the queue, plus headroom and spare.
        target = rate * (mean - queue) * (1 + self.headroom) + self.spare
        limit = self._limit
        new = target
        slow_start = False  # the limit grows by the slow start's factor at this update
        self.gradient = gradient = self._gradient()
        if queue > base * self.tolerance or gradient < 1:
            self._queued = True  # slow start is over at the first queue seen
        if limit is not None:
            # Up by growth at most: a spread of holds in a short span (some queued, some
            # not) makes the target overshoot, and a real need is met by the growth. Up
            # only once a request released since the last growth came back (a round trip:
            # the growth is in its hold), and meanwhile back up to where it was.
            growing = self._released_last >= self._grow_at
            if growing:
                grown = limit * (self.growth if self._queued else self._slow_start())
            else:
                grown = max(limit, self._grown_from)
            new = min(target, grown)
            no_queue = queue <= base * self.tolerance and gradient >= 1
            if in_use >= _BINDING * limit:
                self._binding += 1
                if no_queue:
                    new = grown
                    slow_start = growing and not self._queued
            elif no_queue and now < self._grow_at + mean + self.window:
                new = max(new, limit)  # the slots in use do not show the growth yet
            if gradient < 1:
                # The API queues calls: cut by the gradient, down to what its slots and the
                # pipeline need with no queue (no headroom: the headroom is the queue). The
                # mean hold less the queue, not the bases: calls that vary in length have a
                # least far below their mean, and slots for the least would starve them.
                need = rate * (mean - queue) + self.spare
                cut = limit * (1 - self.smoothing * (1 - gradient))
                new = min(new, max(need, cut))
        self._updates += 1
        new = max(float(self.floor), min(float(self.ceiling), new))
        if limit is None or new > self._grown_from:
            self._grown_from, self._grow_at = new, now
        # A slow-start growth (not the target's): the next one, if no queue shows first,
        # doubles.
        self._room = self._room or slow_start
        self._limit = new

    def _slow_start(self) -> float:
        """The growth per round trip before the first queue: ``_SLOW_START`` once a growth
        came back with no queue; before that, less for long calls, so that an overshoot
        from an API's own slots queues at most ``_SLOW_START_QUEUE``."""
        if self._room:
            return _SLOW_START
        samples = self._samples
        call = sum(call for _, _, call, _ in samples) / len(samples) if samples else 0.0
        if call <= 0:
            return _SLOW_START
        return max(self.growth, min(_SLOW_START, 1 + _SLOW_START_QUEUE / call))

    def _start_probe(self, now: float) -> None:
        # Probe a limit that bound most of the time (a standing queue may have become part
        # of base); one that did not left no queue of ours to measure.
        if 2 * self._binding < self._updates:
            self._binding = self._updates = 0
            self._next_probe = now + self._probe_interval
            return
        assert self._limit is not None
        self._saved = self._limit
        self._probe_start = now
        self._probe_wait = self._probe_call = math.inf
        self._probe_calls = []
        self._probe_count = 0

    def _probing(self, now: float) -> None:
        start = self._probe_start
        assert start is not None
        done = self._probe_count >= self.probe_samples
        if not done and now - start < self.probe_timeout:
            return
        if done:
            old = self.base
            self.base_wait = self._probe_wait
            self.base_call = self._probe_call
            if self.fixed_call is not None:
                # Calls of one length then: still, at the length the probe measured?
                self.fixed_call = _one_length(self._probe_calls, self.tolerance)
            self.probes += 1
            new = self.base
            assert old is not None
            assert new is not None
            moved = abs(new - old) > old * self.tolerance + self.slack
            self._probe_interval = (
                self.probe_every if moved else min(self.probe_max, 2 * self._probe_interval)
            )
        self._probe_start = None
        self._limit = self._saved
        self._binding = self._updates = 0
        self._next_probe = now + self._probe_interval
        # The completions of the next hold and window are still those of the probe's few
        # slots: measured, they would bring the limit down to them. It stays as it was.
        self._held_until = now + (self.base or 0.0) + self.window

    def _forget(self) -> None:
        """Start a run over: nothing learnt (``learning``)."""
        self._samples.clear()
        self._calls.clear()
        self._limit = None
        self.base_wait = None  # the least hold outside the call
        self.base_call = None  # the least call
        self._probe_start = None  # the running probe's start, if any
        self._probe_interval = self.probe_every  # to the next probe, doubled while stable
        self._next_probe = math.inf
        self._binding = 0  # updates since the last probe at which the limit bound
        self._updates = 0  # updates since the last probe
        self._grow_at = -math.inf  # when the limit last grew
        self._released_last = -math.inf  # the latest release among the samples
        self._queued = False  # a queue was seen this run: slow start is over
        self._room = False  # a slow-start growth came back with no queue: the next doubles
        self._noload = []  # the run's first calls (no queue of ours before them)
        self.fixed_call = None  # the calls' one length, when they have one (seconds)


def _one_length(calls: list[float], tolerance: float) -> float | None:
    """The calls' mean, when they are all within ``tolerance`` of it (None otherwise)."""
    if not calls:
        return None
    mean = sum(calls) / len(calls)
    if mean <= 0 or max(calls) - min(calls) > tolerance * mean:
        return None
    return mean


class StartupWindow:
    """The slots allowed before the feedback has found a concurrency limit (see the module
    docstring): ``slots`` at first, doubled every ``doubling`` seconds from the first
    release under the window while nothing settled (``settled``), and None (unlimited)
    once a limit is found (``found``) or ``timeout`` seconds after that first release
    (``review``): workers that report nothing lose a few seconds of releases once, and
    calls longer than ``doubling`` are not held to the first few slots. ``rearm`` starts it
    over when the limit forgot everything.

    ``for_rate`` sizes it for a ``--rate``. Pure; one owner (the emitter's pacing).
    """

    __slots__ = ("_start", "armed", "doubling", "heard", "limit", "slots", "timeout")

    def __init__(
        self,
        slots: int = STARTUP_SLOTS,
        *,
        doubling: float = STARTUP_DOUBLING,
        timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.slots = count("slots", slots)
        self.doubling = finite("doubling", doubling, low=0, strict=True)
        self.timeout = finite("timeout", timeout, low=0, strict=True)
        self.armed = True
        self.heard = False  # a request settled: the feedback flows, a limit is coming
        # The slots allowed now (None: the window does not limit).
        self.limit: int | None = slots
        self._start: float | None = None  # the first review that saw a slot in use

    @classmethod
    def for_rate(cls, rate: float | None) -> StartupWindow:
        """``STARTUP_SLOTS``, or ``STARTUP_HORIZON`` seconds of releases at ``rate`` when
        that is more (an API of thousands of calls a second needs more in flight)."""
        slots = STARTUP_SLOTS
        if rate is not None and math.isfinite(rate) and rate > 0:
            slots = max(slots, math.ceil(rate * STARTUP_HORIZON))
        return cls(slots)

    def review(self, now: float, in_use: int) -> bool:
        """Whether ``limit`` moved: it doubles every ``doubling`` seconds from the first
        review that saw a slot in use (``in_use``), and goes (None) ``timeout`` seconds
        after it. ``now``: seconds, any clock that does not go back."""
        if not self.armed:
            return False
        start = self._start
        if start is None:
            if in_use > 0:
                self._start = now
            return False
        elapsed = now - start
        if elapsed >= self.timeout:
            self.armed = False
            self.limit = None
            return True
        if self.heard:
            return False
        limit = self.slots << int(elapsed / self.doubling)
        if limit == self.limit:
            return False
        self.limit = limit
        return True

    def settled(self) -> None:
        """A request released under the window settled: the workers report, and the
        feedback reader has a limit within a window of samples. The window stops doubling
        (doubled, the start-up window's second 16 requests queued behind the first at an
        API of 8 slots before the limit came); the timeout still holds (an API refusing
        calls leaves the limit aside, and none comes)."""
        self.heard = True

    def found(self) -> None:
        """The feedback found a limit (or stands aside for 429s): the window is done."""
        self.armed = False
        self.limit = None

    def rearm(self) -> None:
        """The limit forgot everything (no sample for its ``idle`` seconds): start over."""
        self.armed = True
        self.heard = False
        self.limit = self.slots
        self._start = None
