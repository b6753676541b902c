"""Paced starts (``fairstream.sdk.worker.pacing``): when a record's call may start, how far
from the previous paced start, and the playout buffer that hands records out in the order of
that moment."""

from __future__ import annotations

import itertools

import pytest

from fairstream.sdk.worker.pacing import (
    CATCH_UP_GAPS,
    CATCH_UP_SLACK,
    PLAYOUT_DELAY,
    TIMER_GRAIN,
    Playout,
    Spacing,
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
    assert playout.pop_due(10.001) == ["a"]  # a timer 1 ms late: "a" starts at 10.001
    assert playout.next_due() == pytest.approx(10.021)  # not 10.02
    assert playout.pop_due(10.0205) == []
    assert playout.pop_due(10.021) == ["b"]
    playout.began(9.92, 10.0212)  # its call began a little later still
    assert playout.next_due() == pytest.approx(10.0412)
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
    assert playout.next_due() == pytest.approx(10.1595)
    # The call began 1 ms later: "b" would be held past the slack. It catches up now, back
    # to back with "a", shedding a whole gap; its moment (10.12) has passed.
    assert playout.began(10.000, 10.1405) is True
    assert playout.next_due() == pytest.approx(10.120)
    assert playout.pop_due(10.1406) == ["b"]


def test_a_began_that_leaves_the_next_within_the_slack_or_already_due_says_so() -> None:
    playout: Playout[str] = Playout()
    playout.push(10.100, "a", 10.000)
    playout.push(10.120, "b", 10.020)
    assert playout.pop_due(10.101) == ["a"]
    assert playout.began(10.000, 10.1012) is False  # "b" kept at 10.1212: not due yet
    assert playout.next_due() == pytest.approx(10.1212)
    # Nothing waits: nothing to hand out.
    assert playout.pop_due(10.2) == ["b"]
    assert playout.began(10.020, 10.2001) is False
