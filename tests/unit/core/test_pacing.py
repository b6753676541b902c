"""The emission rule's virtual schedule (``fairstream.core.emission``), on a ManualClock: a
late caller catches up the slots it missed while a backlog waited, the stamps never break
``rate * w + burst`` in any window, and nothing is owed for time nothing waited."""

from __future__ import annotations

import bisect
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.core import FairScheduler, ManualClock, Pick
from fairstream.core.emission import EmissionRule, Wait

WALL_MS = 1_700_000_000_000  # the wall clock at clock time 0 (epoch ms)

# Items are (name, enqueued epoch ms).
Item = tuple[str, int]


def make(**kwargs: object) -> tuple[EmissionRule[Item], FairScheduler[Item], ManualClock]:
    clock = ManualClock()
    core: FairScheduler[Item] = FairScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(
        core,
        clock,
        enqueued=lambda item: item[1],
        **kwargs,  # type: ignore[arg-type]
    )
    return rule, core, clock


def wall(clock: ManualClock) -> int:
    return WALL_MS + int(clock.now() * 1000)


def fill(core: FairScheduler[Item], n: int, tenants: int = 3, at_ms: int = WALL_MS) -> None:
    for i in range(n):
        core.push(f"t{i % tenants}", (f"r{i}", at_ms), 1)


def drain(rule: EmissionRule[Item], clock: ManualClock) -> list[int]:
    """Every pick the rule allows now; their stamps (epoch ms)."""
    stamps = []
    while True:
        step = rule.next(wall(clock))
        if not isinstance(step, Pick):
            return stamps
        stamps.append(rule.stamp_ms)


def worst_excess(stamps: list[int], rate: float, burst: float, window_ms: int) -> float:
    """The largest count in any window [s, s + w) of stamps minus rate * w + burst (a window
    starting at a stamp is where a maximum starts)."""
    ordered = sorted(stamps)
    allowed = rate * window_ms / 1000 + burst
    return max(bisect.bisect_left(ordered, s + window_ms) - i for i, s in enumerate(ordered)) - (
        allowed
    )


def run_late(
    rule: EmissionRule[Item], clock: ManualClock, seconds: float, lateness: list[float]
) -> list[int]:
    """A caller that sleeps as the rule says and wakes up late by the next lateness (cycled):
    the stamps of what it sent in ``seconds``."""
    stamps: list[int] = []
    end = clock.now() + seconds
    i = 0
    while clock.now() < end:
        stamps += drain(rule, clock)
        step = rule.next(wall(clock))
        assert isinstance(step, Wait)
        assert step.seconds != math.inf
        clock.advance(step.seconds + lateness[i % len(lateness)])
        i += 1
    return stamps


@pytest.mark.parametrize("rate", [50.0, 500.0, 2000.0])
@pytest.mark.parametrize("burst", [1.0, 10.0, 100.0])
def test_a_late_caller_gets_the_rate_and_the_stamps_keep_the_bound(rate, burst):
    rule, core, clock = make(rate=rate, burst=burst)
    seconds = 20.0
    fill(core, int(rate * seconds * 2))
    rng = random.Random(f"{rate}-{burst}")
    # Wake-ups late by up to 3 ms, and now and then a commit of 20-60 ms.
    lateness = [rng.uniform(0, 0.003) if rng.random() > 0.05 else rng.uniform(0.02, 0.06)]
    lateness += [
        rng.uniform(0, 0.003) if rng.random() > 0.05 else rng.uniform(0.02, 0.06)
        for _ in range(999)
    ]
    stamps = run_late(rule, clock, seconds, lateness)
    # All that the rate allowed (the first burst on top), less what is still being caught up.
    assert len(stamps) >= rate * seconds * 0.99
    assert len(stamps) <= rate * (seconds + 0.1) + burst
    for window_ms in (1, 10, 100, 1000, 5000):
        assert worst_excess(stamps, rate, burst, window_ms) <= 0, window_ms
    assert stamps == sorted(stamps)
    assert stamps[-1] <= wall(clock)


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(1, 3000),
    burst=st.floats(1, 50),
    late=st.lists(st.floats(0, 1.5, allow_nan=False), min_size=1, max_size=60),
    window_ms=st.sampled_from([1, 7, 50, 333, 1000]),
)
def test_no_window_of_stamps_exceeds_rate_times_window_plus_burst(rate, burst, late, window_ms):
    rule, core, clock = make(rate=rate, burst=burst)
    fill(core, 20_000)
    stamps = run_late(rule, clock, 2.0, late)
    if stamps:
        # Stamps are whole ms: a window of w ms holds stamps of slots within w ms.
        assert worst_excess(stamps, rate, burst, window_ms) <= 1e-6


def test_catching_up_is_bounded_by_catch_up():
    rule, core, clock = make(rate=100.0, burst=1.0, catch_up=0.5)
    fill(core, 1000)
    assert len(drain(rule, clock)) == 1  # the first burst
    clock.advance(3.0)  # a caller 3 s late: only the last 0.5 s of slots are still owed
    stamps = drain(rule, clock)
    assert 50 <= len(stamps) <= 51  # 0.5 s of slots at 100/s (the last one: rounding)
    assert stamps[0] == wall(clock) - 500
    assert stamps[-1] >= wall(clock) - 10


def test_nothing_is_owed_for_time_nothing_waited():
    rule, core, clock = make(rate=100.0, burst=1.0)
    fill(core, 1)
    assert len(drain(rule, clock)) == 1
    clock.advance(0.01)  # the next token: then the core is looked at
    assert rule.next(wall(clock)) == Wait(math.inf)  # the core is empty
    clock.advance(0.3)  # idle: the core was empty
    fill(core, 100, at_ms=wall(clock))
    assert len(drain(rule, clock)) == 1  # one burst, no catching up of the idle 0.3 s


def test_a_record_is_not_scheduled_before_it_was_enqueued():
    rule, core, clock = make(rate=100.0, burst=1.0)
    fill(core, 50)
    drain(rule, clock)
    clock.advance(0.2)  # a late caller; meanwhile a record arrived 0.05 s ago
    core.push("quiet", ("q", wall(clock) - 50), 1)
    stamps = []
    names = []
    while isinstance(step := rule.next(wall(clock)), Pick):
        stamps.append(rule.stamp_ms)
        names.append(step.item[0])
    quiet = stamps[names.index("q")]
    assert quiet >= wall(clock) - 50
    assert stamps == sorted(stamps)
    assert worst_excess(stamps, 100.0, 1.0, 10) <= 0


def test_no_catching_up_over_a_hold_a_forgo_or_a_new_share():
    rule, core, clock = make(rate=100.0, burst=1.0)
    fill(core, 1000)
    drain(rule, clock)
    rule.hold(clock.now() + 0.4)
    clock.advance(0.45)
    stamps = drain(rule, clock)
    assert stamps[0] == wall(clock) - 50  # from the hold's end on, not from before it
    assert 5 <= len(stamps) <= 6  # 0.4 s to 0.45 s at 100/s (the last one: rounding)
    rule.forgo()
    clock.advance(0.3)
    assert len(drain(rule, clock)) == 1
    clock.advance(0.2)
    rule.set_share(0.5)
    assert len(drain(rule, clock)) == 1  # the bucket's one token; the schedule starts now
    clock.advance(0.2)
    assert 9 <= len(drain(rule, clock)) <= 10  # 0.2 s at 50/s, not 0.4 s


def test_cost_tokens_are_caught_up_too():
    rule, core, clock = make(cost_rate=100.0, cost_burst=10.0)
    for i in range(100):
        core.push("a", (f"a{i}", WALL_MS), 5)
    assert len(drain(rule, clock)) == 2  # the cost burst
    lateness = [0.003, 0.0, 0.03, 0.001]
    stamps = run_late(rule, clock, 2.0, lateness)
    assert len(stamps) >= 100 / 5 * 2.0 - 2  # 20 records/s, less the one being caught up
    assert worst_excess(stamps, 100 / 5, 10 / 5, 1000) <= 0


def test_a_slow_commit_is_excused_in_full_and_only_once():
    rule, core, clock = make(rate=100.0, burst=1.0, catch_up=0.5)
    fill(core, 2000)
    drain(rule, clock)
    clock.advance(2.0)  # a commit that took 2 s while the backlog waited
    rule.excuse(2.0)
    stamps = drain(rule, clock)
    assert 199 <= len(stamps) <= 200  # every slot of the 2 s, not only the last 0.5 s
    assert worst_excess(stamps, 100.0, 1.0, 100) <= 0
    clock.advance(2.0)  # late again, without an excuse: only catch_up is owed
    assert 50 <= len(drain(rule, clock)) <= 51


def test_an_idle_rule_owes_nothing_for_a_commit():
    rule, core, clock = make(rate=100.0, burst=1.0)
    fill(core, 1)
    drain(rule, clock)
    clock.advance(0.01)  # the next token: then the core is looked at
    assert rule.next(wall(clock)) == Wait(math.inf)  # finds nothing: idle
    clock.advance(1.0)
    rule.excuse(1.0)
    fill(core, 500, at_ms=wall(clock))
    assert len(drain(rule, clock)) == 1


def test_the_same_share_again_keeps_what_is_owed():
    rule, core, clock = make(rate=100.0, burst=1.0)
    fill(core, 1000)
    drain(rule, clock)
    clock.advance(0.3)
    rule.excuse(0.3)
    rule.set_share(1.0)  # the group's lease renewed with the share unchanged
    assert 29 <= len(drain(rule, clock)) <= 30  # 0.3 s at 100/s (the last one: rounding)
