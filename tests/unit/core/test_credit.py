"""The concurrency limit found from feedback (``fairstream.core.credit``): its rules one by
one, then a simulated loop (a scheduler with a backlog, an egress queue, workers of fixed
capacity, feedback coming back; no broker) showing that it finds the concurrency the
workers sustain, keeps the queue in front of them short, and follows a change of capacity.
Time is a ManualClock's."""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from fairstream.core.clock import ManualClock
from fairstream.core.credit import ConcurrencyLimit, StartupWindow

# -- the rules -------------------------------------------------------------------------------


def test_no_limit_before_any_feedback():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock)
    for _ in range(100):
        assert credit.update() is None
        clock.advance(0.1)
    assert credit.limit is None
    assert credit.base is None


def test_the_first_samples_give_a_limit_by_littles_law():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, headroom=0.2, spare=2.0)
    # 16 completions in a second, each held 0.5 s (0.4 of it in the call): 8 in use.
    for _ in range(16):
        credit.observe(0.5, 0.4)
        clock.advance(1 / 16)
    limit = credit.update()
    assert credit.base == pytest.approx(0.5)
    assert limit == round(16 * 0.5 * 1.2 + 2)


def test_the_limit_is_dropped_when_feedback_stops_and_learnt_again_after():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, idle=60.0)
    for _ in range(20):
        clock.advance(0.05)
        credit.observe(0.2, 0.1)
    assert credit.update() is not None
    assert not credit.learning
    clock.advance(59.0)
    assert credit.update() is not None  # quiet, not gone yet
    clock.advance(1.5)
    assert credit.update() is None
    assert credit.base is None
    # A slower API later is measured afresh, not against what was learnt before.
    for _ in range(20):
        clock.advance(0.05)
        credit.observe(1.0, 0.9)
    clock.advance(credit.interval)
    assert credit.update() is not None
    assert credit.base == pytest.approx(1.0)


def test_the_limit_is_recomputed_once_per_interval():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, interval=0.25)
    credit.observe(0.2, 0.1)
    clock.advance(credit.window)
    first = credit.update()
    clock.advance(0.1)
    for _ in range(50):
        # A burst of completions at one instant, released after the first limit.
        credit.observe(0.05, 0.01)
    assert credit.update() == first  # within the interval: not recomputed
    clock.advance(0.25)
    assert credit.update() != first


def test_floor_and_ceiling_bound_the_limit():
    clock = ManualClock()
    low = ConcurrencyLimit(clock, floor=3)
    low.observe(0.01, 0.01)
    high = ConcurrencyLimit(clock, ceiling=10)
    for _ in range(1000):
        high.observe(1.0, 1.0)
    clock.advance(1.0)  # a window of completions: the rate can be told
    assert low.update() == 3
    assert high.update() == 10


def test_holds_that_are_not_finite_non_negative_numbers_are_ignored():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock)
    for hold in (-0.5, math.nan, math.inf, True, "1"):
        credit.observe(hold)  # type: ignore[arg-type]
    assert credit.update() is None
    credit.observe(0.2, 5.0)  # a call longer than its hold is the hold
    assert (credit.base_wait, credit.base_call) == (0.0, 0.2)
    credit.observe(0.3, math.nan)  # an unknown call length counts as none
    assert (credit.base_wait, credit.base_call) == (0.0, 0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"floor": 0},
        {"floor": 5, "ceiling": 4},
        {"probe_samples": 0},
        {"headroom": -0.1},
        {"growth": 1.0},
        {"interval": 0},
        {"window": 0.1, "interval": 0.25},
        {"idle": math.inf},
        {"spare": True},
        {"gradient_tolerance": 0.9},
        {"smoothing": 0},
        {"smoothing": 1.5},
    ],
)
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError, match="must be"):
        ConcurrencyLimit(ManualClock(), **kwargs)


def test_the_limit_stands_aside_while_the_api_refuses_calls():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, aside=10.0)
    for _ in range(8):
        credit.observe(0.2, 0.1)
        clock.advance(0.125)
    assert credit.update() is not None
    credit.refused()  # an api-scope 429: the adaptive rate's business
    assert credit.limit is None
    for _ in range(36):  # 9 s of feedback: still learning, still aside
        credit.observe(0.2, 0.1)
        clock.advance(0.25)
        assert credit.update() is None
    for _ in range(8):
        credit.observe(0.2, 0.1)
        clock.advance(0.25)
    assert credit.update() is not None


def test_a_limit_that_does_not_bind_is_not_probed():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, probe_every=5.0)
    for _ in range(40):  # 10 s of 4 completions per interval of 0.25 s holds: 4 in use
        for _ in range(4):
            credit.observe(0.25, 0.2)
        clock.advance(0.25)
        credit.update()
        assert not credit.probing
    assert credit.limit is not None
    assert credit.limit > 4


# -- the simulated loop ----------------------------------------------------------------------


@dataclass
class Loop:
    """A scheduler with an endless backlog releasing at ``rate`` under the limit (a slot
    per request released while a limit exists, as the emitter counts them), an egress
    queue reached ``transit`` seconds after release (commit, fetch, playout), ``servers``
    calls at a time (workers, or an API that queues) of ``call()`` seconds each, and the
    feedback read ``back`` seconds after the call ends. ``queue_in_call``: the queue is the
    API's, inside the call (workers of unbounded concurrency take every record on arrival):
    the latency reported is the time queued plus the call, and the wait only the transit.
    Until the limit is found, the start-up window holds releases, as the emitter's pacing
    applies it (``startup``; None: unlimited)."""

    servers: int
    call: Callable[[], float]
    rate: float = 100.0
    transit: float = 0.03
    back: float = 0.02
    dt: float = 0.005
    queue_in_call: bool = False
    credit: ConcurrencyLimit | None = None
    # The emitter's start-up window (``startup``: the slots before a limit is found).
    startup: StartupWindow | None = field(default_factory=StartupWindow)
    clock: ManualClock = field(default_factory=ManualClock)
    waits: list[tuple[float, float]] = field(default_factory=list)  # (start, queued for)
    done: list[float] = field(default_factory=list)  # when each feedback was read
    limits: list[tuple[float, int | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.credit is None:
            self.credit = ConcurrencyLimit(self.clock)

    def run(self, seconds: float, adaptive: bool = True) -> None:
        credit = self.credit
        assert credit is not None
        clock = self.clock
        counted = 0  # slots held
        tokens = 1.0
        moving: list[tuple[float, float, bool]] = []  # (reaches the queue, released, counted)
        queue: deque[tuple[float, float, bool]] = deque()  # (queued, released, counted)
        busy: list[tuple[float, float, float, bool]] = []  # (ends, released, call, counted)
        back: list[tuple[float, float, float, bool]] = []  # (read, released, call, counted)
        end = clock.now() + seconds
        while clock.now() < end:
            now = clock.now()
            while back and back[0][0] <= now:
                _, released, call, slot = heapq.heappop(back)
                counted -= slot
                # The wait before the call: the report's sojourn less the call.
                credit.observe(now - released, call, now - released - self.back - call)
                self.done.append(now)
                if slot and self.startup is not None and self.startup.armed:
                    self.startup.settled()
            startup = self.startup if adaptive else None
            window = startup.limit if startup is not None else None
            limit = credit.update(startup=window) if adaptive else None
            if startup is not None and startup.armed:
                if limit is not None:
                    startup.found()
                else:
                    startup.review(now, counted)
                    limit = startup.limit
            self.limits.append((now, limit))
            tokens = min(1.0, tokens + self.rate * self.dt)
            while tokens >= 1 and (limit is None or counted < limit):
                tokens -= 1
                counted += limit is not None
                heapq.heappush(moving, (now + self.transit, now, limit is not None))
            while moving and moving[0][0] <= now:
                _, released, slot = heapq.heappop(moving)
                queue.append((now, released, slot))
            while busy and busy[0][0] <= now:
                ends, released, call, slot = heapq.heappop(busy)
                heapq.heappush(back, (ends + self.back, released, call, slot))
            while queue and len(busy) < self.servers:
                queued, released, slot = queue.popleft()
                self.waits.append((now, now - queued))
                call = self.call()
                latency = call + (now - queued) * self.queue_in_call
                heapq.heappush(busy, (now + call, released, latency, slot))
            clock.advance(self.dt)

    def throughput(self, start: float, stop: float) -> float:
        return sum(start <= t < stop for t in self.done) / (stop - start)

    def wait_p99(self, start: float, stop: float) -> float:
        waits = sorted(w for t, w in self.waits if start <= t < stop)
        return waits[int(0.99 * (len(waits) - 1))]

    def limit_median(self, start: float, stop: float) -> int:
        limits = sorted(n for t, n in self.limits if start <= t < stop and n is not None)
        return limits[len(limits) // 2]


def _fixed(seconds: float) -> Callable[[], float]:
    return lambda: seconds


@pytest.mark.parametrize("transit", [0.03, 0.28], ids=["on-arrival", "playout-0.25s"])
def test_slow_workers_get_what_they_sustain_and_the_backlog_stays_upstream(transit):
    # Two workers at concurrency 1, 0.1 s calls: 20 calls/s; --rate 100.
    loop = Loop(servers=2, call=_fixed(0.1), transit=transit)
    loop.run(40.0)
    hold = transit + 0.1 + loop.back
    assert loop.throughput(10, 40) >= 0.95 * 20  # the workers are kept busy
    assert 20 * hold <= loop.limit_median(10, 40) <= 2 * 20 * hold + 3
    assert loop.wait_p99(10, 40) <= 2 * hold  # a short queue: calls start soon
    # Without the limit the queue grows by 80 records a second (the test can fail).
    unlimited = Loop(servers=2, call=_fixed(0.1), transit=transit)
    unlimited.run(20.0, adaptive=False)
    assert unlimited.wait_p99(10, 20) > 10.0


def test_an_api_that_queues_calls_gets_its_capacity_and_a_short_queue():
    # The API takes 8 calls at a time, 0.5 s each (16/s), and queues the rest: the
    # workers' concurrency is unbounded, so the queue is the API's.
    loop = Loop(servers=8, call=_fixed(0.5))
    loop.run(40.0)
    hold = loop.transit + 0.5 + loop.back
    assert loop.throughput(10, 40) >= 0.95 * 16
    assert 16 * hold <= loop.limit_median(10, 40) <= 2 * 16 * hold + 3
    assert loop.wait_p99(10, 40) <= 2 * hold
    unlimited = Loop(servers=8, call=_fixed(0.5))
    unlimited.run(20.0, adaptive=False)
    assert unlimited.wait_p99(10, 20) > 10.0


def test_the_limit_follows_when_capacity_rises():
    loop = Loop(servers=2, call=_fixed(0.1))
    loop.run(20.0)
    assert loop.throughput(10, 20) >= 0.95 * 20
    loop.servers = 8  # six more workers: 80 calls/s, and --rate is 100
    loop.run(20.0)
    assert loop.throughput(25, 40) >= 0.95 * 80
    assert loop.wait_p99(25, 40) <= 2 * (loop.transit + 0.1 + loop.back)


def test_a_fast_api_is_left_at_the_rate():
    # 64 calls at a time of 0.2 s on average (320/s): --rate binds, not the limit.
    rng = random.Random(7)
    loop = Loop(servers=64, call=lambda: rng.expovariate(5.0), transit=0.28)
    loop.run(40.0)
    assert loop.throughput(5, 40) >= 0.97 * loop.rate


@pytest.mark.parametrize("call", [1.0, 2.0])
def test_a_slow_api_is_left_at_the_rate_when_holds_outlast_the_window(call):
    # Calls longer than the window (1 s), workers of unbounded concurrency, --rate 40: the
    # slots in use counted from the window's completions lag each growth, and must not pass
    # for a limit that does not bind (cut back, the loop held 2 s calls to 0.6x the rate).
    loop = Loop(servers=1024, call=_fixed(call), rate=40.0, transit=0.13, back=0.05)
    loop.run(30.0)
    assert loop.throughput(10, 30) >= 0.97 * loop.rate
    limits = [n for t, n in loop.limits if t >= 10]
    assert None not in limits
    assert min(limits) >= loop.rate * (loop.transit + call + loop.back)


def test_calls_of_varying_length_do_not_pass_for_a_queue():
    # 16 calls at a time, log-normal lengths (median 1 s, mean 1.38 s: about 11.6/s). The
    # least call of a window is far from the least ever: the limit must not collapse.
    rng = random.Random(1)
    loop = Loop(servers=16, call=lambda: rng.lognormvariate(0.0, 0.8), transit=0.28)
    loop.run(60.0)
    capacity = 16 / math.exp(0.8**2 / 2)
    assert loop.throughput(10, 60) >= 0.7 * capacity
    assert loop.limit_median(10, 60) >= 16


def test_the_gradient_cuts_the_limit_while_the_api_queues_calls():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, gradient_tolerance=1.5, smoothing=0.2, spare=2.0)
    # A second of 16 completions at no load: 0.5 s calls, 0.1 s before them, held 0.65 s.
    for _ in range(16):
        clock.advance(1 / 16)
        credit.observe(0.65, 0.5, 0.1)
    credit.update()
    assert credit.gradient == 1.0
    # Then the API queues: every call takes 1.5 s (1 s in its FIFO), the wait is unchanged.
    limits = []
    for _ in range(40):  # 10 s
        for _ in range(4):
            clock.advance(1 / 16)
            credit.observe(1.65, 1.5, 0.1)
        limits.append(credit.update())
    assert credit.gradient == pytest.approx((1.5 * 0.5 + credit.slack) / 1.5)
    # Down to what the API's 8 slots and the pipeline need (16/s x 0.65 s) plus spare, not
    # to the target's headroom above it (16 x 0.65 x 1.2 + 2 = 14.5).
    # (The window holds 16 or 17 completions.)
    assert round(16 * 0.65 + 2) <= limits[-1] <= round(17 * 0.65 + 2)
    # A call only a little longer than the least ever is no queue: no cut.
    for _ in range(40):
        clock.advance(1 / 16)
        credit.observe(0.75, 0.6, 0.1)
    credit.update()
    assert credit.gradient == 1.0


def _queueing_api(servers: int, call: float, **kwargs: float) -> Loop:
    """An API of ``servers`` slots that queues the rest of the calls itself: the workers
    take every record on arrival (0.1 s playout), so the queue is in the latency alone."""
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, **kwargs)
    return Loop(
        servers,
        _fixed(call),
        transit=0.13,
        back=0.05,
        clock=clock,
        credit=credit,
        queue_in_call=True,
    )


def test_an_api_that_queues_inside_the_call_gets_its_capacity_and_a_short_queue():
    # 8 slots of 0.5 s (16/s); the first second, before any feedback, fills its queue.
    loop = _queueing_api(8, 0.5)
    loop.run(80.0)
    hold = loop.transit + 0.5 + loop.back
    assert loop.throughput(40, 80) >= 0.95 * 16
    assert 16 * hold <= loop.limit_median(40, 80) <= 16 * hold * (1 + 0.2) + 2 + 2
    assert loop.wait_p99(40, 80) <= 2 * hold  # a record's wait for a slot of the API


def test_an_api_of_a_few_calls_a_second_is_measured_from_its_last_calls():
    # 4 slots of 1 s: a window of 1 s holds 4 calls, too few to tell a queue by. Measured
    # over the last 8 calls, the limit stays near its need (4/s x 1.18 s); measured over
    # the window alone it grew without a bound in sight (114 over 40-80 s).
    loop = _queueing_api(4, 1.0)
    loop.run(80.0)
    hold = loop.transit + 1.0 + loop.back
    assert loop.throughput(40, 80) >= 0.9 * 4
    assert 4 * hold <= loop.limit_median(40, 80) <= 2 * 4 * hold + 3
    assert loop.wait_p99(40, 80) <= 2 * hold


def test_the_gradient_brings_the_limit_down_when_an_api_that_queues_loses_capacity():
    # 8 slots of 0.5 s, then 4: the API's queue hides in the calls' latency, and the
    # gradient cuts the limit to the slots left sooner than the target alone does.
    runs = []
    for tolerance in (1.5, 1000.0):
        loop = _queueing_api(8, 0.5, gradient_tolerance=tolerance)
        loop.run(30.0)
        loop.servers = 4
        loop.run(30.0)
        runs.append(loop)
    gradient, target_only = runs
    assert gradient.throughput(40, 60) >= 0.95 * 8
    assert gradient.limit_median(35, 60) < target_only.limit_median(35, 60)
    assert gradient.wait_p99(40, 60) < target_only.wait_p99(40, 60)


def test_calls_of_a_fixed_length_never_move_the_gradient():
    # Slow workers: the queue is before the call (in the wait), every call takes 0.1 s:
    # the limit moves exactly as it does with the gradient turned off.
    runs = []
    for tolerance in (1.5, 1000.0):
        clock = ManualClock()
        credit = ConcurrencyLimit(clock, gradient_tolerance=tolerance)
        loop = Loop(servers=2, call=_fixed(0.1), clock=clock, credit=credit)
        loop.run(40.0)
        assert credit.gradient == 1.0
        runs.append(loop.limits)
    assert runs[0] == runs[1]


def test_probes_drop_to_the_floor_and_measure_an_api_that_got_slower():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, floor=2, probe_every=5.0)
    loop = Loop(servers=8, call=_fixed(0.5), clock=clock, credit=credit)
    loop.run(12.0)
    assert credit.probes >= 1
    assert any(n == 2 for t, n in loop.limits if t >= 5.0)  # down at the floor meanwhile
    assert credit.base_call == pytest.approx(0.5)
    # The API's calls now take 0.8 s (10/s): the least call ever (0.5 s) is no measure of
    # it any more; the next probe measures it, and the limit follows.
    loop.call = _fixed(0.8)
    loop.run(20.0)
    assert credit.base_call == pytest.approx(0.8)
    hold = loop.transit + 0.8 + loop.back
    # Over 15-32 s, with a probe every 5 s (each costs about a second of the API's time;
    # the default is one every 30 s). The calls, all of one length, end in lockstep.
    assert loop.throughput(15, 32) >= 0.8 * 10
    assert 10 * hold <= loop.limit_median(15, 32) <= 2 * 10 * hold + 3


def test_a_queue_at_one_worker_of_two_is_a_queue():
    # Records are keyed by tenant: a noisy tenant's backlog goes to worker A alone (0.1 s
    # calls), while quiet tenants (8 requests/s, half on each worker) keep worker B mostly
    # idle. The requests queued at A are a quarter or more of the samples only: the limit
    # must see them, or the quiet requests that land on A wait behind the noisy ones.
    clock = ManualClock()
    credit = ConcurrencyLimit(clock)
    rng = random.Random(3)
    dt, transit, back, call = 0.002, 0.05, 0.03, 0.1
    counted, tokens, next_quiet = 0, 1.0, 0.0
    quiet: deque[tuple[float, int]] = deque()  # (arrived, worker)
    moving: list[tuple[float, float, int, float]] = []  # (queued at, released, worker, arrived)
    queues: list[deque[tuple[float, float]]] = [deque(), deque()]  # (released, arrived)
    busy: list[float | None] = [None, None]  # the release of the call in progress
    ends = [0.0, 0.0]
    returning: list[tuple[float, float]] = []  # (read at, released)
    waits: list[float] = []  # quiet requests: arrival to call, after the first 10 s
    startup = StartupWindow()  # the emitter's, until a limit is found
    while clock.now() < 60.0:
        now = clock.now()
        while returning and returning[0][0] <= now:
            _, released = heapq.heappop(returning)
            counted -= 1
            credit.observe(now - released, call, now - released - back - call)
        limit = credit.update(startup=startup.limit)
        if startup.armed:
            if limit is not None:
                startup.found()
            else:
                startup.review(now, counted)
                limit = startup.limit
        while now >= next_quiet:
            quiet.append((now, rng.randrange(2)))
            next_quiet += 1 / 8
        tokens = min(1.0, tokens + 100 * dt)  # --rate 100
        while tokens >= 1 and (limit is None or counted < limit):
            tokens, counted = tokens - 1, counted + 1
            arrived, worker = quiet.popleft() if quiet else (-1.0, 0)  # quiet ones first
            heapq.heappush(moving, (now + transit, now, worker, arrived))
        while moving and moving[0][0] <= now:
            _, released, worker, arrived = heapq.heappop(moving)
            queues[worker].append((released, arrived))
        for worker in (0, 1):
            held = busy[worker]
            if held is not None and ends[worker] <= now:
                heapq.heappush(returning, (ends[worker] + back, held))
                busy[worker] = None
            if busy[worker] is None and queues[worker]:
                released, arrived = queues[worker].popleft()
                if arrived >= 10.0:
                    waits.append(now - arrived)
                busy[worker], ends[worker] = released, now + call
        clock.advance(dt)
    waits.sort()
    assert waits[int(0.99 * (len(waits) - 1))] <= 1.0  # 5 records at A at most, mostly


# -- the start-up window ------------------------------------------------------------------------


def test_the_start_up_window_doubles_from_its_first_release_and_opens_at_its_timeout() -> None:
    window = StartupWindow(16, doubling=1.5, timeout=8.0)
    assert window.limit == 16
    assert not window.review(100.0, in_use=0)  # nothing released yet: time does not run
    assert not window.review(500.0, in_use=3)  # the first release: the clock starts
    assert not window.review(501.4, in_use=16)
    assert window.review(501.5, in_use=16)
    assert window.limit == 32
    assert window.review(504.5, in_use=32)
    assert window.limit == 128
    assert window.armed
    assert window.review(508.0, in_use=128)
    assert window.limit is None
    assert not window.armed
    assert not window.review(600.0, in_use=1)


def test_a_found_limit_ends_the_window_and_rearm_starts_it_over() -> None:
    window = StartupWindow(4)
    window.review(0.0, in_use=1)
    window.review(window.doubling, in_use=8)
    assert window.limit == 8
    window.found()
    assert window.limit is None
    assert not window.armed
    window.rearm()
    assert window.limit == 4
    assert window.armed
    assert not window.review(1000.0, in_use=1)  # its time starts over


def test_the_start_up_window_is_sized_for_the_rate() -> None:
    assert StartupWindow.for_rate(None).slots == 8
    assert StartupWindow.for_rate(100.0).slots == 8
    assert StartupWindow.for_rate(2000.0).slots == 100  # 50 ms of releases
    with pytest.raises(ValueError, match="slots"):
        StartupWindow(0)
    with pytest.raises(ValueError, match="timeout"):
        StartupWindow(4, timeout=math.nan)


def test_probes_that_find_the_same_bases_space_out_and_a_moved_base_brings_them_back():
    # Each probe stalls releases for about two holds, quiet tenants' requests included.
    clock = ManualClock()
    credit = ConcurrencyLimit(clock, floor=2, probe_every=5.0, probe_max=20.0)
    loop = Loop(servers=8, call=_fixed(0.5), clock=clock, credit=credit)
    loop.run(60.0)

    def gaps(since: float) -> list[float]:
        """Seconds between the drops to the floor (the probes' starts) after ``since``."""
        limits = loop.limits
        starts = [
            t
            for (t, n), (_, before) in zip(limits[1:], limits, strict=False)
            if n == 2 and before != 2 and t >= since
        ]
        return [b - a for a, b in itertools.pairwise(starts)]

    # Counted from each probe's end, a second or two after its start.
    stable = gaps(0.0)
    assert 10 <= stable[0] <= 12  # doubled
    assert all(20 <= g <= 22 for g in stable[1:])  # then at probe_max
    assert len(stable) >= 2
    loop.call = _fixed(0.8)  # the API got slower: the next probe moves the bases
    loop.run(110.0)
    assert credit.base_call == pytest.approx(0.8)
    assert 5 <= gaps(60.0)[0] < 20  # back to probe_every (a probe skipped while not binding)


def test_an_api_that_queues_is_not_flooded_at_the_start():
    # 8 slots of 0.5 s that queue the rest, --rate 100: released at the rate for the first
    # hold, a second of releases waited in the API's queue. The start-up window, a first
    # limit of at most its slots per hold, and growth once per round trip keep the queue
    # short from the first second.
    def run(startup: StartupWindow | None) -> Loop:
        clock = ManualClock()
        credit = ConcurrencyLimit(clock)
        loop = Loop(8, _fixed(0.5), transit=0.15, back=0.1, queue_in_call=True, clock=clock)
        loop.credit, loop.startup = credit, startup
        loop.run(30.0)
        return loop

    paced = run(StartupWindow())
    hold = 0.15 + 0.5 + 0.1
    assert paced.wait_p99(0, 5) <= 1.0
    # Calls that end in lockstep leave one of them unqueued in most windows: the least call
    # hides the queue behind the others, which the target then keeps (about 8 calls).
    assert paced.wait_p99(5, 30) <= 2 * hold
    assert paced.throughput(5, 30) >= 0.95 * 16
    assert run(None).wait_p99(0, 5) > 3.0  # the first hold at the rate


def test_the_first_limit_counts_no_more_completions_than_the_window_allowed():
    # 8 requests settled together within the first interval (8 slots of 0.5 s): counted
    # over that span, 32/s; the start-up window held 16 over a hold of 0.65 s, 25/s at most.
    clock = ManualClock()
    capped, free = ConcurrencyLimit(clock), ConcurrencyLimit(clock)
    for credit in (capped, free):
        for _ in range(8):
            credit.observe(0.65, 0.5)
    clock.advance(0.25)
    assert capped.update(startup=16) == round(16 / 0.65 * 0.65 * 1.2 + 2)
    assert free.update() == round(8 / 0.25 * 0.65 * 1.2 + 2)


def test_calls_of_one_length_are_told_from_calls_that_vary():
    clock = ManualClock()
    credit = ConcurrencyLimit(clock)
    for _ in range(8):  # the run's first calls: one length, within the tolerance
        clock.advance(0.05)
        credit.observe(0.75, 0.5 + random.Random(3).uniform(0, 0.01), 0.15)
    assert credit.fixed_call == pytest.approx(0.505, abs=0.006)
    varying = ConcurrencyLimit(clock)
    for length in (0.2, 0.5, 0.3, 0.9, 0.4, 0.25, 0.6, 0.35):
        clock.advance(0.05)
        varying.observe(length + 0.25, length, 0.15)
    assert varying.fixed_call is None
    assert varying.queue() == 0.0  # their mean above their least is no queue


def test_an_api_of_one_call_length_keeps_a_short_queue_when_its_calls_end_in_lockstep():
    # 8 slots of 0.5 s that queue the rest: 8 calls start together and end together, so in
    # most windows one of them met no queue and the least call hid the others' queue. The
    # mean call above the one length shows it: the queue stays under one call (without:
    # 0.735 s at p99, the limit at 19 of the 12 the slots and the pipeline hold).
    clock = ManualClock()
    loop = Loop(8, _fixed(0.5), transit=0.15, back=0.1, queue_in_call=True, clock=clock)
    loop.credit = credit = ConcurrencyLimit(clock)
    loop.run(40.0)
    assert credit.fixed_call == pytest.approx(0.5)
    assert loop.wait_p99(5, 40) < 0.5
    assert loop.throughput(5, 40) >= 0.95 * 16  # the API stays busy
    assert loop.limit_median(5, 40) <= 17


def test_a_probe_measures_the_call_length_again():
    # 8 slots that queue, calls of 0.5 s, then of 1 s: the next probe's calls (the limit at
    # its floor, nothing queued) measure the new length.
    clock = ManualClock()
    length = [0.5]
    loop = Loop(8, lambda: length[0], transit=0.15, back=0.1, queue_in_call=True, clock=clock)
    loop.credit = credit = ConcurrencyLimit(clock, probe_every=10.0)
    loop.run(5.0)
    assert credit.fixed_call == pytest.approx(0.5)
    length[0] = 1.0
    loop.run(30.0)
    assert credit.probes >= 1
    assert credit.fixed_call == pytest.approx(1.0)


def _limits_seen(loop: Loop, stop: float) -> list[int]:
    """The limits the loop held before ``stop``, in order, each once."""
    seen: list[int] = []
    for t, n in loop.limits:
        if t < stop and n is not None and (not seen or seen[-1] != n):
            seen.append(n)
    return seen


def _slow_start(call: float, seconds: float) -> list[int]:
    """The limits, each once, of a run whose calls take ``call`` seconds (a hold of
    ``call`` + 0.25 s, 0.15 s of it before the call) and whose workers settle requests as
    fast as the limit lets them, with no queue: the first limit under the start-up window's
    8 slots, then every change over ``seconds``."""
    clock = ManualClock()
    credit = ConcurrencyLimit(clock)
    hold = call + 0.25
    for _ in range(8):
        clock.advance(0.001)
        credit.observe(hold, call, 0.15)
    clock.advance(0.25)
    limit = credit.update(startup=8)
    assert limit is not None
    limits = [limit]
    end = clock.now() + seconds
    while clock.now() < end:  # completions at the limit's pace: it binds
        clock.advance(hold / limit)
        credit.observe(hold, call, 0.15)
        limit = credit.update() or 0
        if limit != limits[-1]:
            limits.append(limit)
    return limits


def _growths(limits: list[int]) -> list[float]:
    """The factors by which ``limits`` grew, past the target's small steps."""
    return [b / a for a, b in itertools.pairwise(limits) if b > 1.2 * a]


def test_slow_start_tests_an_api_of_long_calls_before_it_doubles():
    # The first limit, set under the start-up window's 8 slots, may be an API's own (8
    # slots and the pipeline): doubled from there, an API that queues holds the overshoot
    # for a round trip, half a second per call of 0.5 s. The first growth is at most
    # 1 + 0.25 s / call; once it came back with no queue, the API has room, and it doubles.
    for call, first in ((0.5, 1.5), (1.0, 1.25)):
        growths = _growths(_slow_start(call, 6.0))
        assert growths[0] <= first + 0.05, growths
        assert growths[1] >= 1.9, growths
    # Calls of milliseconds double from the first growth: a strict API behind a fast
    # worker must not stay limit-bound, its catch-up releases come back to back.
    assert _growths(_slow_start(0.002, 2.0))[0] >= 1.9
