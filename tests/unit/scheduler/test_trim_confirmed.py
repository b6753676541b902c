"""A mark is trimmed to only once the group's committed offsets confirm it:
``commit_transaction`` returned success for a commit whose markers a shutting-down broker
then skipped, and its offsets (and egress records) were aborted with the next transaction."""

from __future__ import annotations

from fairstream.scheduler.retention.trim import Committed, Seasoned, confirmed, limits, token_seq

PREFIX = "app-x-sched:1a2b3c4d"


def test_the_soak_incident_trims_to_the_offset_the_group_kept() -> None:
    marks = Seasoned(lag=20.0)
    # commit 1905 "succeeded": partition 5 at 4634, its holding log (~5) at 12
    marks.observe(0, 100.0, {5: 4634, ~5: 12}, {5: 1905, ~5: 1905})
    # the group kept 1903's offset (4633): 1905's markers were skipped, then aborted
    group = {5: Committed(4633, token_seq(f"{PREFIX}:1903", PREFIX))}
    assert confirmed(marks.ripe(130.0, limits(group)), group) == {5: 4633}  # never 4634
    # once the group's metadata names 1905 (or newer), the holding mark is confirmed too
    group = {5: Committed(4634, token_seq(f"{PREFIX}:1905", PREFIX))}
    assert confirmed(marks.ripe(131.0, limits(group)), group) == {5: 4634, ~5: 12}


def test_an_unstable_or_unread_offset_trims_nothing_of_its_partition() -> None:
    marks = Seasoned(lag=0.0)
    marks.observe(0, 0.0, {0: 10, ~0: 3, 1: 20}, {0: 7, ~0: 7, 1: 7})
    group = {1: Committed(20, 7)}  # partition 0: UNSTABLE_OFFSET_COMMIT, left out
    assert confirmed(marks.ripe(1.0, limits(group)), group) == {1: 20}


def test_another_runs_token_confirms_only_recovered_marks() -> None:
    assert token_seq("app-x-sched:ffff0000:9000", PREFIX) == 0  # the previous process
    assert token_seq("", PREFIX) == 0  # a commit without a progress snapshot
    marks = Seasoned(lag=0.0)
    marks.observe(0, 0.0, {2: 50, ~2: 5}, {2: 0, ~2: 0})  # recovered at assignment
    group = {2: Committed(50, 0)}
    assert confirmed(marks.ripe(1.0, limits(group)), group) == {2: 50, ~2: 5}
