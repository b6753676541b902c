"""AdaptiveRate and TenantPauses: the rules one at a time with a ManualClock, then a
simulated paid API with a hidden capacity behind workers that retry what it refuses."""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.core import AdaptiveRate, ManualClock, TenantPauses
from fairstream.sdk.worker.retry import backoff_delay


def controller(clock: ManualClock, **kw: float) -> AdaptiveRate:
    options: dict[str, float] = {"ceiling": 1000.0, **kw}
    return AdaptiveRate(clock, **options)  # type: ignore[arg-type]


# -- the rules -----------------------------------------------------------------------------


def steady(clock: ManualClock, rate: AdaptiveRate, seconds: float, calls: float) -> None:
    """``calls`` ok calls per second reported for ``seconds``, in 10 ms steps."""
    owed = 0.0
    for _ in range(round(seconds * 100)):
        clock.advance(0.01)
        owed += calls / 100
        if owed >= 1:
            rate.on_ok(int(owed))
            owed -= int(owed)


def test_no_feedback_no_change() -> None:
    clock = ManualClock()
    rate = controller(clock)
    for _ in range(100):
        clock.advance(7.5)
        assert rate.rate() == 1000.0
        assert rate.held_for() == 0.0
    assert rate.floor == 10.0  # 1% of the ceiling by default
    assert rate.decreases == 0


def test_clean_feedback_at_the_ceiling_changes_nothing() -> None:
    clock = ManualClock()
    rate = controller(clock)
    for _ in range(1000):
        clock.advance(0.01)
        rate.on_ok(10)
    assert rate.rate() == 1000.0


def test_a_rate_limited_outcome_decreases_once_per_interval() -> None:
    clock = ManualClock()
    rate = controller(clock, interval=1.0, window=1.0)
    assert rate.on_rate_limited() is True
    assert rate.rate() == pytest.approx(900.0)  # too few calls seen to measure: 0.9x
    clock.advance(1.0)
    steady(clock, rate, 1.0, 300)
    assert rate.on_rate_limited() is True  # 300/s measured: one step down to 291
    for _ in range(50):  # the rest of the same overload's batch of 429s
        clock.advance(0.01)
        rate.on_ok(3)
        rate.on_rate_limited()
    # Measured over the last buckets of the window (while the API refused, or 0.4 s):
    # within a bucket's worth of calls.
    assert rate.rate() == pytest.approx(291, rel=0.03)
    assert (rate.decreases, rate.rate_limited) == (2, 52)


def test_an_api_that_takes_nothing_brings_the_rate_to_the_floor() -> None:
    clock = ManualClock()
    rate = controller(clock, interval=1.0)
    for _ in range(20):
        clock.advance(0.01)
        rate.on_rate_limited()
    assert rate.rate() == rate.floor


def test_calls_timed_by_their_end_measure_the_api_whatever_the_batches() -> None:
    """Reports of two workers interleave: one worker's come at once, the other's in one
    batch a second late. Timed by when each call ended (``now``), each counts in its own
    bucket, and the throughput measured in a short span is the API's 300/s, not the late
    batch piled on the last buckets."""
    clock = ManualClock()
    rate = controller(clock, window=1.0)
    for i in range(150):  # worker A: 150 calls/s, reported as they end
        clock.set((i + 1) / 150)
        rate.on_ok(1)
    for i in range(150):  # worker B: the same second's 150 calls, reported only now
        rate.on_ok(1, now=(i + 0.5) / 150)
    rate.on_rate_limited(now=clock.now())
    assert rate.rate() == pytest.approx(0.97 * 300, rel=0.03)


def test_a_cut_made_before_all_its_reports_arrived_is_aimed_again_when_they_do() -> None:
    """The API takes 300/s from two workers; the first 429 arrives while only worker A's
    reports are in (B's come 0.3 s late, one fetch of another partition). The cut aims at
    what was counted then, 150/s; when B's reports arrive it is aimed again, at the
    300/s the API took, and not left to a slow probe up from half the capacity."""
    clock = ManualClock()
    rate = controller(clock)
    steady(clock, rate, 2.0, 300)  # the rate, 1000, is not used: no increase anyway
    start = clock.now()
    late = []
    for i in range(240):  # 0.8 s of calls, A's and B's in turn: A's reported as they end
        clock.set(start + (i + 1) / 300)
        if i % 2:
            late.append(clock.now())
        else:
            rate.on_ok(1)
        if i == 149:  # the first 429, 0.5 s in
            rate.on_rate_limited()
            assert rate.rate() == pytest.approx(0.97 * 150, rel=0.1)  # half the reports in
    for ended in late:  # B's reports arrive, each at the time its call ended
        rate.on_ok(1, now=ended)
    assert rate.rate() == pytest.approx(0.97 * 300, rel=0.05)


def test_a_cut_is_aimed_again_only_while_its_overload_is_in_the_window() -> None:
    """After the interval, a cut's measurement stands: the calls at the lower rate after
    it say nothing about the API's capacity."""
    clock = ManualClock()
    rate = controller(clock, window=1.0, interval=1.0)
    steady(clock, rate, 1.0, 300)
    rate.on_rate_limited()
    cut = rate.rate()
    steady(clock, rate, 1.5, 100)  # hardly anything goes through after the cut
    assert rate.rate() >= cut  # not aimed again at the 100/s


def test_the_decrease_aims_below_the_measured_throughput() -> None:
    clock = ManualClock()
    rate = controller(clock, window=1.0)
    for _ in range(100):  # 300 calls/s go through, the rest is refused
        clock.advance(0.01)
        rate.on_ok(3)
    assert rate.on_rate_limited() is True
    assert rate.rate() == pytest.approx(0.97 * 300, rel=0.03)  # one step, not many


def saturated(clock: ManualClock, rate: AdaptiveRate, seconds: int) -> list[float]:
    """The API takes 300 calls/s and refuses more (requests stuck retrying) for
    ``seconds``; the rate at the end of each second."""
    rates = []
    for _ in range(seconds):
        for _ in range(100):
            clock.advance(0.01)
            rate.on_ok(3)
            rate.on_rate_limited()
        rates.append(rate.rate())
    return rates


def test_decreases_in_a_row_cut_deeper_down_to_half_the_throughput() -> None:
    clock = ManualClock()
    rate = controller(clock, window=1.0, interval=1.0)
    steady(clock, rate, 1.0, 300)
    rates = saturated(clock, rate, 6)
    assert rates[0] == pytest.approx(291, rel=0.02)
    assert rates[1] == pytest.approx(291 * 0.9**2, rel=0.02)
    assert rates[2] == pytest.approx(291 * 0.9**2 * 0.9**4, rel=0.02)
    assert rates[3:] == pytest.approx([291 / 2] * 3, rel=0.02)  # not below half of it


def test_with_sojourns_a_429_a_little_after_a_cut_starts_a_new_overload() -> None:
    """With sojourns, what an overload leaves downstream is drained, not cut deeper: a 429
    more than an interval after the last one, though within two of the cut, is the next
    probe finding the limit, and cuts once (0.9x), not twice as deep (0.81x)."""
    clock = ManualClock()
    rate = controller(clock, interval=1.0)

    def calls(seconds: float, per_second: float) -> None:
        for _ in range(round(seconds * 100)):
            clock.advance(0.01)
            rate.on_ok(round(per_second / 100), sojourn=0.1)

    calls(2.0, 300)
    rate.on_rate_limited()
    calls(1.2, 300)
    before = rate.rate()
    rate.on_rate_limited()
    assert rate.rate() == pytest.approx(0.9 * before, rel=0.02)


def test_a_first_cut_on_little_evidence_is_refined_within_the_interval() -> None:
    clock = ManualClock()
    rate = controller(clock, interval=1.0)
    rate.on_ok(3)
    assert rate.on_rate_limited() is True  # 4 calls seen: just 0.9x
    assert rate.rate() == pytest.approx(900.0)
    refined = False
    for _ in range(30):  # the API takes 30/s; the evidence comes in
        clock.advance(0.01)
        if clock.now() * 100 % 3 < 1:
            rate.on_ok(1)
        refined = rate.on_rate_limited() or refined
    assert refined
    assert rate.rate() < 100.0  # well before the interval is over
    assert rate.decreases == 1


def test_retry_after_holds_egress_until_it_passed() -> None:
    clock = ManualClock()
    rate = controller(clock)
    rate.on_rate_limited(retry_after=2.0)
    assert rate.held_for() == 2.0
    clock.advance(0.5)
    rate.on_rate_limited(retry_after=0.5)  # ends earlier: the longer hold stands
    assert rate.held_for() == 1.5
    rate.on_rate_limited(retry_after=3.0)
    assert rate.held_for() == 3.0
    clock.advance(3.0)
    assert rate.held_for() == 0.0


@pytest.mark.parametrize("retry_after", [None, 0.0, -1.0, math.nan, math.inf])
def test_no_usable_retry_after_no_hold(retry_after: float | None) -> None:
    clock = ManualClock()
    rate = controller(clock)
    rate.on_rate_limited(retry_after=retry_after)
    assert rate.held_for() == 0.0


def test_a_hold_is_bounded_by_max_hold() -> None:
    clock = ManualClock()
    rate = controller(clock, max_hold=60.0)
    rate.on_rate_limited(retry_after=86_400.0)
    assert rate.held_for() == 60.0


def test_increase_waits_for_clean_feedback_then_probes_gently() -> None:
    clock = ManualClock()
    rate = controller(clock, interval=1.0, window=1.0)
    steady(clock, rate, 1.0, 300)
    rate.on_rate_limited()
    after_cut = rate.rate()
    steady(clock, rate, 0.99, after_cut)  # within the interval: no increase
    assert rate.rate() == after_cut
    steady(clock, rate, 3.0, after_cut)
    probed = rate.rate()
    # Above the knee (where it was cut to) the probe is gentle: 4% in its first 3 s.
    assert after_cut < probed < 1.05 * after_cut
    steady(clock, rate, 5.0, probed)
    # Then faster: 0.77x more after 8 s, a limit that went up is found within seconds.
    assert rate.rate() > 1.7 * after_cut


def test_climbs_back_to_the_knee_fast_after_a_deep_cut() -> None:
    clock = ManualClock()
    rate = controller(clock, interval=1.0, window=1.0)
    steady(clock, rate, 1.0, 300)
    saturated(clock, rate, 4)
    assert rate.rate() == pytest.approx(145.5, rel=0.02)
    steady(clock, rate, 1.0, 145.5)  # the clean interval
    steady(clock, rate, 1.0, 291)  # the workers use what they are given
    assert rate.rate() == pytest.approx(291, rel=0.03)  # the knee, within about a second


def test_an_unused_rate_is_not_raised() -> None:
    clock = ManualClock()
    rate = controller(clock, interval=1.0, window=1.0)
    steady(clock, rate, 1.0, 300)
    rate.on_rate_limited()
    cut = rate.rate()
    steady(clock, rate, 30.0, 20)  # demand fell to 20 calls/s
    assert rate.rate() == cut
    unused = controller(ManualClock(), interval=1.0, window=1.0, utilization=0)
    unused.on_rate_limited()
    assert unused.rate(100.0) == 1000.0  # utilization 0: raised whatever the use


def test_never_below_the_floor_nor_above_the_ceiling() -> None:
    clock = ManualClock()
    rate = controller(clock, floor=50.0, interval=0.1, window=0.1)
    for _ in range(200):
        clock.advance(0.1)
        rate.on_rate_limited()
    assert rate.rate() == 50.0
    steady(clock, rate, 120.0, 1000)
    assert rate.rate() == 1000.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 3),
            st.sampled_from(["ok", "limited", "other", "rate"]),
            st.none() | st.floats(0, 1000),
            st.integers(1, 500),
        ),
        max_size=80,
    )
)
def test_any_feedback_stays_within_floor_and_ceiling(
    events: list[tuple[float, str, float | None, int]],
) -> None:
    clock = ManualClock()
    rate = controller(clock, floor=5.0)
    for gap, kind, retry_after, count in events:
        clock.advance(gap)
        if kind == "ok":
            rate.on_ok(count)
        elif kind == "other":
            rate.on_other(count)
        elif kind == "limited":
            rate.on_rate_limited(retry_after=retry_after)
        now_rate = rate.rate()
        assert 5.0 <= now_rate <= 1000.0
        assert 0.0 <= rate.held_for() <= 300.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.001, 2.0), min_size=1, max_size=60))
def test_the_increase_does_not_depend_on_how_often_the_rate_is_read(gaps: list[float]) -> None:
    """The increase is integrated lazily: reading the rate often or once gives the same."""
    often, once = ManualClock(), ManualClock()
    a = controller(often, utilization=0, interval=1.0)
    b = controller(once, utilization=0, interval=1.0)
    a.on_rate_limited()
    b.on_rate_limited()
    for gap in gaps:
        often.advance(gap)
        a.rate()
    once.advance(sum(gaps))
    assert a.rate() == pytest.approx(b.rate(), rel=1e-9)


def timed(
    clock: ManualClock, rate: AdaptiveRate, seconds: float, calls: float, sojourn: float
) -> None:
    """Like ``steady``, each call reported with its ``sojourn`` (release to report)."""
    for _ in range(round(seconds * 100)):
        clock.advance(0.01)
        for _ in range(round(calls / 100)):
            rate.on_ok(1, sojourn=sojourn)


def test_a_queue_left_downstream_drains_then_the_rate_comes_back() -> None:
    """Records that waited 0.3 s more than the path takes: the rate leaves the API the
    capacity to drain them within ``drain``; once fresh records go straight through again,
    it is back at once, without the clean interval an increase waits for."""
    clock = ManualClock()
    rate = controller(clock, window=1.0, interval=1.0)
    timed(clock, rate, 2.0, 300, sojourn=0.1)
    assert rate.on_rate_limited() is True
    knee = rate.rate()
    assert knee == pytest.approx(291, rel=0.03)
    timed(clock, rate, 0.5, 300, sojourn=0.4)  # everything waits 0.3 s downstream
    assert rate.rate() <= 0.6 * knee
    timed(clock, rate, 0.5, 300, sojourn=0.1)  # drained: no more waiting, no more 429s
    assert rate.rate() >= knee
    assert rate.decreases == 1


def test_a_retry_after_shorter_than_the_path_holds_nothing() -> None:
    """A record released now reaches the API one path (0.2 s here) later: a Retry-After of
    0.1 s is over by then, so nothing is held; of 1 s, the hold is 0.8 s."""
    clock = ManualClock()
    rate = controller(clock)
    timed(clock, rate, 1.0, 100, sojourn=0.2)
    rate.on_rate_limited(retry_after=0.1)
    assert rate.held_for() == 0.0
    clock.advance(2.0)
    rate.on_rate_limited(retry_after=1.0)
    assert rate.held_for() == pytest.approx(0.8)


def test_no_measurement_across_a_long_hold() -> None:
    """While a long Retry-After holds egress the workers wait it out too and the API takes
    nothing: that says nothing of its capacity (it would say 0/s), so the cuts that follow
    are multiplicative ones."""
    clock = ManualClock()
    rate = controller(clock, window=1.0, interval=1.0)
    timed(clock, rate, 1.0, 300, sojourn=0.02)
    rate.on_rate_limited(retry_after=1.0)
    first = rate.rate()
    assert first == pytest.approx(291, rel=0.03)  # measured before the hold began
    clock.advance(1.5)  # held, then nothing went through
    for _ in range(20):
        rate.on_rate_limited()
    assert rate.rate() == pytest.approx(first * 0.9**2)  # the second cut in a row, deeper


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"ceiling": 0.0}, "ceiling"),
        ({"ceiling": math.inf}, "ceiling"),
        ({"floor": 2000.0}, "above the ceiling"),
        ({"decrease": 1.0}, "must decrease"),
        ({"decrease": 0.0}, "decrease"),
        ({"headroom": 1.5}, "headroom"),
        ({"utilization": -0.1}, "utilization"),
        ({"cubic": 0.0}, "cubic"),
        ({"drain": -1.0}, "drain"),
        ({"interval": 0.0}, "interval"),
    ],
)
def test_invalid_settings(kw: dict[str, float], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        controller(ManualClock(), **kw)


# -- tenant pauses --------------------------------------------------------------------------


def test_tenant_pauses() -> None:
    pauses = TenantPauses(max_pause=60.0)
    assert pauses.pause("acme", 2.0, now=10.0)
    assert pauses.is_paused("acme", 11.9)
    assert not pauses.is_paused("zeta", 11.9)
    assert not pauses.pause("acme", 1.0, now=10.5)  # ends earlier: the pause stands
    assert pauses.pause("acme", 3.0, now=10.5)  # extends it to 13.5
    assert pauses.pause("zeta", 1000.0, now=10.0)  # bounded: until 70
    assert pauses.paused_until("zeta") == 70.0
    assert pauses.next_expiry() == 13.5
    assert pauses.expire(12.0) == []  # acme's first pause (until 12) was superseded
    assert pauses.expire(13.5) == ["acme"]
    assert not pauses.is_paused("acme", 13.5)
    assert "acme" not in pauses
    assert len(pauses) == 1
    assert pauses.expire(100.0) == ["zeta"]
    assert pauses.next_expiry() is None


@pytest.mark.parametrize("retry_after", [0.0, -3.0, math.nan, math.inf])
def test_a_tenant_pause_needs_a_usable_retry_after(retry_after: float) -> None:
    pauses = TenantPauses()
    assert not pauses.pause("acme", retry_after, now=0.0)
    assert len(pauses) == 0


# -- a simulated paid API -------------------------------------------------------------------


@dataclass
class PaidApi:
    """A token bucket of ``capacity`` calls/s holding ``burst_seconds`` of them: a call
    without a token is refused with Retry-After = the time until the next token, rounded
    up to ``grain``."""

    capacity: float
    grain: float
    burst_seconds: float = 0.1
    tokens: float = 0.0
    at: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = self.burst

    @property
    def burst(self) -> float:
        return max(1.0, self.capacity * self.burst_seconds)

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.capacity)
        self.at = now

    def change(self, capacity: float, now: float) -> None:
        self.refill(now)
        self.capacity = capacity
        self.tokens = min(self.tokens, self.burst)

    def call(self, now: float) -> float | None:
        """None if the call goes through, else the Retry-After in seconds."""
        self.refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return None
        wait = (1 - self.tokens) / self.capacity
        return max(self.grain, math.ceil(wait / self.grain) * self.grain)


@dataclass
class Run:
    ok: list[float] = field(default_factory=list)  # times of calls that went through
    limited: list[float] = field(default_factory=list)  # times of calls refused
    rates: list[tuple[float, float]] = field(default_factory=list)

    def goodput(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.ok) / (end - start)

    def limited_share(self, start: float = 0.0, end: float = math.inf) -> float:
        refused = sum(start <= t < end for t in self.limited)
        done = sum(start <= t < end for t in self.ok)
        return refused / (refused + done)


def simulate(
    phases: list[tuple[float, float]],
    *,
    grain: float = 0.1,
    workers: int = 16,
    latency: float = 0.02,
    delay: float = 0.2,
    tick: float = 0.01,
    burst_seconds: float = 0.1,
    retry_after: bool = True,
    sojourns: bool = True,
    egress_delay: float = 0.0,
    late: float = 0.0,
    make: Callable[[ManualClock], AdaptiveRate] = lambda clock: AdaptiveRate(clock, 1000.0),
) -> Run:
    """The scheduler (an infinite backlog, paced at the controller's rate, held when told),
    ``workers`` handler slots calling the API (``latency`` s per call that goes through;
    a refused request is refused at once and retried by its slot without the scheduler:
    after the Retry-After, or with ``retry_after`` False after the worker SDK's own
    backoff, 0.1 s doubling per refusal in a row), released records reaching the workers
    ``egress_delay`` s after their release (the egress transaction, the workers' fetch),
    and feedback reaching the controller ``delay`` s after each call (with the record's
    sojourn, from release to report, unless ``sojourns`` is False).

    ``late``: each report comes up to that many seconds later still (uniformly, seeded),
    so reports arrive out of the order their calls ended; each is then given at the time
    its call ended, as the scheduler's feedback reader does (at most 1 s back).
    """
    jitter = random.Random(7)
    clock = ManualClock()
    rate = make(clock)
    api = PaidApi(phases[0][1], grain, burst_seconds)
    refusals: dict[float, int] = {}  # refusals in a row, by request (its release time)
    events: list[tuple[float, int, str, float]] = []
    order = itertools.count()
    queued: deque[float] = deque()  # released, waiting for a worker: when released
    free = workers
    run = Run()
    ends = list(itertools.accumulate(duration for duration, _ in phases))
    phase = 0
    credit = 0.0
    next_tick = 0.0

    def call(now: float, sent: float) -> None:
        wait = api.call(now)
        if wait is None:
            refusals.pop(sent, None)
            heapq.heappush(events, (now + latency, next(order), "ok", sent))
            return
        refusals[sent] = tries = refusals.get(sent, 0) + 1
        told = wait if retry_after else 0.0
        retry = wait if retry_after else backoff_delay(tries, 0.1, 10.0)
        heapq.heappush(events, (now, next(order), "refused", sent))
        arrives = now + delay + late * jitter.random()
        heapq.heappush(events, (arrives, next(order), f"429:{told}:{now}", sent))
        heapq.heappush(events, (now + retry, next(order), "retry", sent))

    while True:
        if events and events[0][0] < next_tick:
            now, _, kind, sent = heapq.heappop(events)
        else:
            now, kind, sent = next_tick, "tick", 0.0
            next_tick += tick
        if now >= ends[-1]:
            return run
        clock.set(now)
        while now >= ends[phase]:
            phase += 1
            api.change(phases[phase][1], now)
        if kind == "tick":
            current = rate.rate()
            if rate.held_for() == 0:
                credit = min(credit + current * tick, max(1.0, current / 10))
                while credit >= 1:
                    credit -= 1
                    if egress_delay:
                        heapq.heappush(events, (now + egress_delay, next(order), "egress", now))
                    else:
                        queued.append(now)
            run.rates.append((now, current))
        elif kind == "ok":
            run.ok.append(now)
            arrives = now + delay + late * jitter.random()
            heapq.heappush(events, (arrives, next(order), f"ok:{now - sent}:{now}", sent))
            free += 1
        elif kind == "egress":
            queued.append(sent)
        elif kind == "refused":
            run.limited.append(now)
        elif kind == "retry":
            call(now, sent)
        elif kind.startswith("ok:"):
            _, sojourn, ended = kind.split(":")
            at = max(float(ended), now - 1.0) if late else None
            rate.on_ok(1, sojourn=float(sojourn) if sojourns else None, now=at)
        else:  # a 429 reaching the scheduler: its Retry-After, and when the call ended
            _, said, ended = kind.split(":")
            told = float(said)
            if not late:
                rate.on_rate_limited(retry_after=told - delay if told else None)
            else:
                at = max(float(ended), now - 1.0)
                left = told - (now - float(ended)) + (now - at)
                rate.on_rate_limited(retry_after=left if told else None, now=at)
        while free and queued:
            free -= 1
            call(now, queued.popleft())


def test_converges_to_a_hidden_capacity_from_the_ceiling() -> None:
    """--rate 1000 in front of an API that takes 300/s: within seconds, 90% of the
    capacity goes through and at most 5% of the calls are refused, the start included."""
    run = simulate([(60.0, 300.0)])
    assert run.goodput(10.0, 60.0) >= 0.9 * 300
    assert run.limited_share() <= 0.05
    assert all(10.0 <= r <= 1000.0 for _, r in run.rates)
    late = [r for t, r in run.rates if t >= 10.0]
    # It stays around the capacity, not the ceiling: each probe goes a little above it.
    assert max(late) < 1.3 * 300
    assert 0.9 * 300 <= sum(late) / len(late) <= 1.1 * 300


def test_reconverges_when_the_capacity_changes() -> None:
    """300 -> 150 -> 300 calls/s: after each change goodput is back at 90% of the new
    capacity within 10 s, and over the whole run at most 5% of the calls were refused."""
    run = simulate([(40.0, 300.0), (40.0, 150.0), (40.0, 300.0)])
    assert run.goodput(10.0, 40.0) >= 0.9 * 300
    assert run.goodput(50.0, 80.0) >= 0.9 * 150
    assert run.goodput(90.0, 120.0) >= 0.9 * 300
    assert run.limited_share() <= 0.05


# The benchmark's loop (benchmarks/feedback.py): an API holding half a second of its
# capacity as a burst, 8 handler calls at a time of 10 ms each, egress reaching the workers
# 0.15 s after its release and feedback the scheduler 0.05 s after each call.
LOOP = {"burst_seconds": 0.5, "workers": 8, "latency": 0.01, "delay": 0.05, "egress_delay": 0.15}
CHANGES = [(40.0, 300.0), (40.0, 150.0), (40.0, 300.0)]


def windows(run: Run, start: float, end: float) -> list[float]:
    """Goodput of each 1 s window from ``start`` to ``end``, in steps of 0.5 s."""
    return [
        run.goodput(start + 0.5 * i, start + 0.5 * i + 1) for i in range(int(2 * (end - start)) - 1)
    ]


@pytest.mark.parametrize("retry_after", [True, False], ids=["retry-after", "bare-429"])
def test_every_window_is_back_at_the_capacity_within_10_s_of_a_change(retry_after: bool) -> None:
    """Issue 20: after each change, every 1 s window from 10 s on has goodput of 0.9x the
    new capacity or more, and at most 5% of the calls since the change were refused (with
    the API's Retry-After, and with bare 429s)."""
    run = simulate(CHANGES, retry_after=retry_after, **LOOP)  # type: ignore[arg-type]
    for change, end, capacity in ((0.0, 40.0, 300.0), (40.0, 80.0, 150.0), (80.0, 120.0, 300.0)):
        assert min(windows(run, change + 10.0, end)) >= 0.9 * capacity, (change, capacity)
        assert run.limited_share(change, end) <= 0.05, (change, capacity)
    # The rise is found by probing: a window at 0.9x within 10 s of it.
    assert any(good >= 0.9 * 300 for good in windows(run, 80.0, 90.0))


@pytest.mark.parametrize("retry_after", [True, False], ids=["retry-after", "bare-429"])
def test_feedback_late_and_out_of_order_still_finds_each_capacity(retry_after: bool) -> None:
    """Each report up to 0.5 s late (the feedback topic's partitions fetched apart, a busy
    worker), so a cut counts only part of the calls before it: the cut is aimed again as
    the rest arrive, and goodput after each change holds 0.9x of the new capacity (the
    cut left at its first, partial measurement gave 0.70-0.88x here)."""
    run = simulate(CHANGES, retry_after=retry_after, late=0.5, **LOOP)  # type: ignore[arg-type]
    for change, end, capacity in ((0.0, 40.0, 300.0), (40.0, 80.0, 150.0), (80.0, 120.0, 300.0)):
        assert run.goodput(change + 10.0, end) >= 0.9 * capacity, (change, capacity)
        assert run.limited_share(change, end) <= 0.05, (change, capacity)


def test_without_sojourns_the_loop_still_converges() -> None:
    """Feedback without ``scheduled_at`` (an older worker): no sojourns, so no drain of the
    queue an overload leaves; decreases in a row cut deeper instead."""
    run = simulate(CHANGES, sojourns=False, **LOOP)  # type: ignore[arg-type]
    assert run.goodput(10.0, 40.0) >= 0.9 * 300
    assert run.goodput(50.0, 80.0) >= 0.9 * 150
    assert run.goodput(90.0, 120.0) >= 0.9 * 300
    assert run.limited_share() <= 0.08


def test_whole_second_retry_after_costs_goodput_in_holds() -> None:
    """An API that answers Retry-After in whole seconds makes each overload hold all
    egress for most of a second: fewer refusals, a little less goodput."""
    run = simulate([(60.0, 300.0)], grain=1.0)
    assert run.goodput(10.0, 60.0) >= 0.85 * 300
    assert run.limited_share() <= 0.05


def test_slower_feedback_still_converges() -> None:
    """Feedback half a second late (a slow commit interval, a busy worker)."""
    run = simulate([(60.0, 300.0)], delay=0.5)
    assert run.goodput(10.0, 60.0) >= 0.85 * 300
    assert run.limited_share() <= 0.1


def test_a_capacity_far_below_the_ceiling() -> None:
    """--rate 1000 in front of 30/s: the first fraction of a second at the ceiling leaves
    hundreds of requests stuck at the workers, which take a while to drain; then the rate
    holds around the capacity, probing in steps the size of the capacity, not the ceiling."""
    run = simulate([(60.0, 30.0)])
    assert run.goodput(30.0, 60.0) >= 0.9 * 30
    assert run.limited_share(30.0, 60.0) <= 0.05
