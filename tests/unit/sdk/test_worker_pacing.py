"""Paced starts (``fairstream.sdk.worker.pacing``): when a record's call may start, how far
from the previous paced start, and the playout buffer that hands records out in the order of
that moment."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from fairstream.sdk.worker.pacing import (
    CATCH_UP_GAPS,
    CATCH_UP_SLACK,
    GATE_MARGIN,
    LEAD_SHARE,
    MAX_LEAD,
    PLAYOUT_DELAY,
    TIMER_GRAIN,
    Playout,
    Spacing,
    hold_until,
    start_at,
    timer_wait,
)
from fairstream.sdk.worker.settings import WorkerSettings


def test_a_record_starts_at_its_stamp_plus_the_delay() -> None:
    # Stamped at 100.000 s, fetched at 100.080 s (a commit and a fetch later).
    assert start_at(100_000, 100.08, 0.25) == pytest.approx(100.25)


def test_records_of_one_batch_keep_their_stamps_spacing() -> None:
    # A transaction of five records, stamped 5 ms apart, lands at once: the calls start
    # 5 ms apart, as the scheduler paced them, not together.
    starts = [start_at(100_000 + 5 * i, 100.1, 0.25) for i in range(5)]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps == pytest.approx([0.005] * 4)


def test_a_late_record_starts_at_once() -> None:
    # Fetched 0.4 s after its stamp, past stamp + delay: its moment has passed.
    assert start_at(100_000, 100.4, 0.25) == pytest.approx(100.25)
    assert start_at(100_000, 100.4, 0.25) < 100.4


def test_a_record_without_a_stamp_starts_on_arrival() -> None:
    assert start_at(None, 42.0, 0.25) == 42.0


def test_a_stamp_from_a_clock_ahead_waits_the_delay_at_most() -> None:
    # The scheduler's host is 30 s ahead of the worker's: the record waits the playout
    # delay from its arrival, not 30 s.
    assert start_at(130_000, 100.0, 0.25) == pytest.approx(100.25)


def test_playout_hands_records_out_in_order_of_their_start() -> None:
    playout: Playout[str] = Playout()
    playout.push(3.0, "c")
    playout.push(1.0, "a")
    playout.push(2.0, "b")
    playout.push(2.0, "b2")  # a tie: in the order pushed
    assert len(playout) == 4
    assert playout.next_due() == 1.0
    assert playout.pop_due(0.5) == []
    assert playout.pop_due(2.0) == ["a", "b", "b2"]
    assert playout.next_due() == 3.0
    assert playout.pop_due(10.0) == ["c"]
    assert playout.next_due() is None
    assert len(playout) == 0


def test_playout_purge_takes_out_what_matches_and_keeps_the_order() -> None:
    playout: Playout[int] = Playout()
    for due in (5.0, 1.0, 4.0, 2.0, 3.0):
        playout.push(due, int(due))
    assert sorted(playout.purge(lambda n: n % 2 == 0)) == [2, 4]
    assert playout.pop_due(10.0) == [1, 3, 5]


def test_the_worker_setting_paces_when_given_a_delay_and_zero_turns_it_off() -> None:
    assert WorkerSettings(playout_delay=PLAYOUT_DELAY).pacing == PLAYOUT_DELAY
    assert WorkerSettings().pacing == 0.1  # on by default
    assert WorkerSettings(playout_delay=0).pacing is None
    assert WorkerSettings(playout_delay=None).pacing is None
    with pytest.raises(ValueError, match="--playout-delay"):
        WorkerSettings(playout_delay=-1)


# -- spacing: a start never sooner after the previous paced one than their stamps ---------


def test_a_late_start_pushes_the_next_by_its_lateness() -> None:
    # Stamps 20 ms apart (50/s, a bucket of one); the first call began 1 ms late.
    spacing = Spacing()
    spacing.started(100.000, 100.101)
    assert spacing.earliest(100.020, 100.120) == pytest.approx(100.121)
    # And the pushes add up: each start keeps the stamps' distance from the one before.
    spacing.started(100.020, 100.1215)
    assert spacing.earliest(100.040, 100.140) == pytest.approx(100.1415)


def test_a_start_on_time_leaves_the_next_at_its_own_moment() -> None:
    spacing = Spacing()
    assert spacing.earliest(100.000, 100.1) == 100.1  # no start yet: nothing to keep to
    spacing.started(100.000, 100.1)
    assert spacing.earliest(100.020, 100.12) == pytest.approx(100.12)
    # Stamps further apart than the starts need: the moment itself, not sooner.
    spacing.started(100.020, 100.12)
    assert spacing.earliest(100.500, 100.6) == pytest.approx(100.6)


def test_past_the_slack_a_start_catches_up_to_its_moment() -> None:
    # Stamps 40 ms apart (two gaps: 80 ms, more than the slack): the slack is the limit.
    spacing = Spacing(slack=0.05)
    spacing.started(100.000, 100.149)  # 49 ms late: within the slack
    assert spacing.earliest(100.040, 100.140) == pytest.approx(100.189)  # kept
    spacing.started(100.040, 100.1905)  # 50.5 ms late: past it
    assert spacing.earliest(100.080, 100.180) == pytest.approx(100.180)  # caught up
    # The one after keeps its distance from that start again: one short gap only.
    spacing.started(100.080, 100.1806)
    assert spacing.earliest(100.120, 100.220) == pytest.approx(100.2206)


def test_close_stamps_are_held_two_gaps_past_their_moment_at_most() -> None:
    # Stamps 1 ms apart (1,000 calls/s): a call is held at most 2 ms past its moment.
    assert CATCH_UP_GAPS == 2
    spacing = Spacing(slack=0.05)
    spacing.started(100.000, 100.102)  # 2 ms late
    assert spacing.earliest(100.001, 100.101) == pytest.approx(100.103)
    spacing.started(100.001, 100.1031)  # 2.1 ms late: past two gaps
    assert spacing.earliest(100.002, 100.102) == pytest.approx(100.102)
    # Equal stamps (a burst) are never held apart, however late.
    spacing.started(100.002, 100.2)
    assert spacing.earliest(100.002, 100.102) == pytest.approx(100.102)


def test_a_stamp_from_a_clock_ahead_is_not_held_for_the_spacing() -> None:
    # start_at gave it arrival + delay; its stamp lies an hour after the previous one's.
    spacing = Spacing()
    spacing.started(100.000, 100.1)
    assert spacing.earliest(3700.000, 100.35) == 100.35


def test_a_record_stamped_before_the_previous_start_is_not_held_and_pushes_the_next() -> None:
    spacing = Spacing()
    spacing.started(100.100, 100.200)
    # It arrived late (its moment, 100.08 + 0.1, has passed): it may start at once.
    assert spacing.earliest(100.080, 100.180) <= 100.201
    spacing.started(100.080, 100.201)
    # The next keeps the stamps' distance from it: the slot it took is given back.
    assert spacing.earliest(100.120, 100.220) == pytest.approx(100.241)


def test_began_moves_the_previous_start_to_when_its_call_began() -> None:
    spacing = Spacing()
    spacing.started(100.000, 100.1)
    spacing.began(100.000, 100.1003)  # the loop ran it 0.3 ms after it left the buffer
    assert spacing.earliest(100.020, 100.12) == pytest.approx(100.1203)
    spacing.began(100.000, 100.1001)  # never earlier than it was
    assert spacing.earliest(100.020, 100.12) == pytest.approx(100.1203)
    spacing.started(100.020, 100.1203)
    spacing.began(100.000, 100.2)  # not the last one any more: ignored
    assert spacing.earliest(100.040, 100.14) == pytest.approx(100.1403)


def test_spacing_needs_a_slack_of_at_least_zero() -> None:
    assert Spacing().slack == CATCH_UP_SLACK
    with pytest.raises(ValueError, match="slack"):
        Spacing(slack=-0.01)


def test_the_playout_keeps_paced_items_apart_as_their_stamps_are() -> None:
    playout: Playout[str] = Playout()
    for i, name in enumerate("abc"):
        playout.push(10.0 + 0.02 * i, name, 9.9 + 0.02 * i)  # stamps 20 ms apart
    lead = LEAD_SHARE * 0.02  # each leaves this much ahead, to its gate
    assert playout.pop_due(10.001) == ["a"]  # a timer 1 ms late: "a" starts at 10.001
    assert playout.next_due() == pytest.approx(10.021 - lead)  # not 10.02
    assert playout.pop_due(10.0205 - lead) == []
    assert playout.pop_due(10.021 - lead) == ["b"]
    playout.began(9.92, 10.0212)  # its call began a little later still
    assert playout.next_due() == pytest.approx(10.0412 - lead)
    assert playout.pop_due(10.5) == ["c"]


def test_equal_stamps_leave_together_and_unstamped_items_are_not_spaced() -> None:
    playout: Playout[str] = Playout()
    playout.push(10.0, "a", 9.9)
    playout.push(10.0, "b", 9.9)  # a burst: the same stamp
    playout.push(10.001, "bare")  # no stamp: its own moment only
    assert playout.pop_due(10.0005) == ["a", "b"]
    assert playout.pop_due(10.001) == ["bare"]


def test_a_timer_is_set_early_by_its_grain_and_never_for_less_than_nothing() -> None:
    assert timer_wait(0.02) == pytest.approx(0.02 - TIMER_GRAIN)
    assert timer_wait(TIMER_GRAIN / 2) == 0.0
    assert timer_wait(-1.0) == 0.0


def test_a_began_that_pushes_the_next_past_the_slack_makes_it_due_at_once() -> None:
    # 50/s, a bucket of one: stamps 20 ms apart, the slack two gaps (40 ms).
    playout: Playout[str] = Playout()
    playout.push(10.100, "a", 10.000)
    playout.push(10.120, "b", 10.020)
    assert playout.pop_due(10.1395) == ["a"]  # 39.5 ms late: "b" is kept 20 ms after it
    assert playout.next_due() == pytest.approx(10.1595 - LEAD_SHARE * 0.02)
    # The call began 1 ms later: "b" would be held past the slack. It catches up: due at
    # once, back to back with "a", shedding a whole gap; its moment (10.12) has passed.
    playout.began(10.000, 10.1405)
    assert playout.next_due() == pytest.approx(10.120 - LEAD_SHARE * 0.02)
    assert playout.pop_due(10.1406) == ["b"]
    # Its gate lets it through at once: it sheds 20 ms, a whole gap.
    assert playout.gate(10.020, 10.120, 10.1407) == 10.120


def test_a_began_within_the_slack_pushes_the_next_by_its_lateness() -> None:
    playout: Playout[str] = Playout()
    playout.push(10.100, "a", 10.000)
    playout.push(10.120, "b", 10.020)
    assert playout.pop_due(10.101) == ["a"]
    playout.began(10.000, 10.1012)  # "b" kept at 10.1212: not due yet
    assert playout.next_due() == pytest.approx(10.1212 - LEAD_SHARE * 0.02)
    assert playout.pop_due(10.1207) == []
    assert playout.pop_due(10.1208) == ["b"]
    assert playout.gate(10.020, 10.120, 10.1209) == pytest.approx(10.1212 + GATE_MARGIN)


def test_the_lead_is_a_share_of_the_stamps_gap_and_at_most_the_cap() -> None:
    spacing = Spacing()
    assert spacing.lead(10.0) == 0.0  # nothing before it: nothing to keep apart from
    spacing.started(10.0, 10.1)
    assert spacing.lead(10.02) == pytest.approx(LEAD_SHARE * 0.02)  # 50/s: 0.4 ms
    assert spacing.lead(10.0005) == pytest.approx(LEAD_SHARE * 0.0005)  # 2,000/s: 10 us
    assert spacing.lead(11.0) == MAX_LEAD  # a second apart: the cap
    assert spacing.lead(10.0) == 0.0  # the same stamp (a burst): no gap, no lead
    assert spacing.lead(9.9) == 0.0  # stamped before it (arrived late): no lead


def test_the_gate_keeps_the_distance_from_the_last_call_that_began() -> None:
    # 50/s: "b" leaves its lead before 10.12, while "a" has not begun yet (the loop ran
    # "a" late): its gate follows "a"'s begin, not "a"'s hand-out.
    playout: Playout[str] = Playout()
    playout.push(10.100, "a", 10.000)
    playout.push(10.120, "b", 10.020)
    assert playout.pop_due(10.100) == ["a"]
    assert playout.pop_due(10.1196) == ["b"]
    now = 10.1197
    assert playout.gate(10.020, 10.120, now) == 10.120  # nothing began: its own moment
    playout.began(10.000, 10.1003)  # "a" began 0.3 ms after its moment
    # 20 ms after "a" began, and the margin: the API reads its clock a little after.
    assert playout.gate(10.020, 10.120, now) == pytest.approx(10.1203 + GATE_MARGIN)
    playout.began(10.020, 10.1203 + GATE_MARGIN)
    # A call never begins before its own moment.
    assert playout.gate(10.060, 10.200, now) == 10.200


def test_the_gate_margin_is_at_most_the_lead_share_of_the_gap() -> None:
    spacing = Spacing()
    spacing.began(10.000, 10.1)
    # 2,000/s: the whole margin would hold each call 12% behind its stamps.
    assert spacing.gate(10.0005, 10.1005, 10.1) == pytest.approx(10.1005 + LEAD_SHARE * 0.0005)
    assert LEAD_SHARE * 0.02 > GATE_MARGIN  # 50/s: the whole margin
    assert spacing.gate(10.02, 10.12, 10.1) == pytest.approx(10.12 + GATE_MARGIN)


def test_a_gate_held_past_the_slack_lets_the_call_catch_up_by_a_whole_gap() -> None:
    spacing = Spacing(slack=0.05)
    spacing.began(10.000, 10.145)  # 45 ms past its moment (10.100)
    # The next would be kept at 10.165, 45 ms past its moment (10.12): more than two
    # gaps. Asked right after the begin, it catches up back to back: sheds a whole gap.
    assert spacing.gate(10.020, 10.120, 10.1451) == 10.120
    spacing.began(10.000, 10.130)  # 30 ms late: within the slack, it keeps its distance
    assert spacing.gate(10.020, 10.120, 10.1301) == pytest.approx(10.150 + GATE_MARGIN)


def test_a_gate_near_its_moment_is_kept_rather_than_catch_up_by_a_fraction_of_a_gap() -> None:
    # "b" was handed out its lead before 10.16 (kept then: 39.5 ms late, within the
    # slack); "a"'s call then began 1 ms late, which puts "b" past the slack. Let through
    # now, 0.5 ms short of its gap, "b" would be refused and shed almost nothing: it is
    # kept, and the next one catches up instead.
    spacing = Spacing(slack=0.05)
    spacing.started(10.000, 10.1395)
    assert spacing.earliest(10.020, 10.120) == pytest.approx(10.1595)
    spacing.began(10.000, 10.1405)
    assert spacing.gate(10.020, 10.120, 10.1600) == pytest.approx(10.1605 + GATE_MARGIN)


def test_a_gate_far_past_the_slack_never_holds_the_call() -> None:
    # A worker slower than the stamps: "b" waited 2 s for a free slot, the previous call
    # (stamped 10 ms before it) began 6 ms ago. Holding "b" the last 4 ms of its gap would
    # only slow the worker more.
    spacing = Spacing(slack=0.05)
    spacing.began(10.000, 12.100)
    assert spacing.gate(10.010, 10.110, 12.106) == 10.110
    # Nor one taken out of stamp order (the tenant queues' round robin): stamped 0.3 s
    # after the last one to begin, due long ago.
    assert spacing.gate(10.300, 10.400, 12.1001) == 10.400


class SteppingClock:
    """A clock that moves ``step`` s at every reading, and a sleep that moves it as asked."""

    def __init__(self, now: float, step: float) -> None:
        self.now, self.step = now, step
        self.readings = 0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        self.readings += 1
        self.now += self.step
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_hold_until_sleeps_while_far_then_a_turn_of_the_loop_at_a_time() -> None:
    clock = SteppingClock(10.0, 1e-5)  # each reading 10 us later (a turn of the loop)
    at = asyncio.run(hold_until(lambda now: 10.02, clock, clock.sleep))
    assert 10.02 <= at < 10.02 + 2e-5  # never early, and a turn after it at most
    # One sleep until a timer's grain before, then turns of the loop (sleep(0)).
    assert clock.sleeps[0] == pytest.approx(0.02 - TIMER_GRAIN, abs=2e-5)
    assert len(clock.sleeps) > 1
    assert set(clock.sleeps[1:]) == {0.0}


def test_hold_until_asks_for_the_moment_again_after_each_wait() -> None:
    clock = SteppingClock(10.0, 1e-6)
    asked: list[float] = []

    def moment(now: float) -> float:
        asked.append(now)
        return 10.005 if len(asked) == 1 else 10.010  # a call began meanwhile: it moved

    at = asyncio.run(hold_until(moment, clock, clock.sleep))
    assert at >= 10.010
    assert asked[0] == pytest.approx(10.000001)  # asked with the clock's reading


def test_hold_until_returns_at_once_when_the_moment_has_passed() -> None:
    clock = SteppingClock(10.0, 0.0)
    assert asyncio.run(hold_until(lambda now: 9.0, clock, clock.sleep)) == 10.0
    assert clock.sleeps == []
