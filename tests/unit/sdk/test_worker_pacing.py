"""Paced starts (``fairstream.sdk.worker.pacing``): when a record's call may start, and the
playout buffer that hands records out in the order of that moment."""

from __future__ import annotations

import itertools

import pytest

from fairstream.sdk.worker.pacing import PLAYOUT_DELAY, Playout, start_at
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
    assert WorkerSettings().pacing is None  # off by default, for now
    assert WorkerSettings(playout_delay=0).pacing is None
    assert WorkerSettings(playout_delay=None).pacing is None
    with pytest.raises(ValueError, match="--playout-delay"):
        WorkerSettings(playout_delay=-1)
