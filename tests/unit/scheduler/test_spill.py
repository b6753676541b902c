"""A tenant far behind waits in the ingest log (``emitter.spill``): the ingest thread passes
its records over in runs, the progress counts the runs read but unsettled, its records
enter the core in log order, and they are read again when its backlog runs low."""

from __future__ import annotations

from collections import deque
from typing import Any

from fairstream import wire
from fairstream.core import TenantPolicy
from fairstream.scheduler.emitter.backlog import Refused
from fairstream.scheduler.emitter.fetch import Gone
from fairstream.scheduler.emitter.spill import REFILL_BATCH
from fairstream.scheduler.parsing import parse
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.records import Parsed, passed_over
from tests.unit.scheduler.parts import Parts, build, message, record


def ignore(_: Any) -> None:
    pass


def read_again(parts: Parts, parked: dict[int, dict[str, int]] | None = None) -> int:
    backlog = parts.backlog
    return backlog.spill.refill(
        lambda records: backlog.index(records, parts.txn, again=True),
        backlog.letters.append,
        parked or {},
    )


def offsets_of(parts: Parts, tenant: str) -> list[int]:
    """The offsets of ``tenant``'s records in the core, in its order (taken out of it)."""
    return [entry.offset for entry in parts.core.remove_tenant(tenant)]


def test_the_ingest_thread_passes_over_runs_of_the_keys_named() -> None:
    queue: deque[Parsed] = deque()
    messages = [
        message(0, 0, "A"),
        message(0, 1, "B"),
        message(0, 2, "B"),
        message(0, 4, "B"),  # offset 3 never came (a transaction marker): a run of its own
        message(0, 5, "A"),
        message(0, 6, "B"),
    ]
    parse(0, messages, queue, {}, ignore, ignore, {b"B": "B"})
    assert [(p.offset, p.tenant, p.cost, p.msg is None) for p in queue] == [
        (0, "A", 1, False),
        (1, "B", 2, True),
        (4, "B", 1, True),
        (5, "A", 1, False),
        (6, "B", 1, True),
    ]


def test_without_keys_to_pass_over_every_record_is_parsed() -> None:
    queue: deque[Parsed] = deque()
    parse(0, [message(0, 0, "B"), message(0, 1, "B")], queue, {}, ignore, ignore, {})
    assert [p.msg is not None for p in queue] == [True, True]


def test_a_run_is_read_but_not_settled_and_gaps_around_it_are() -> None:
    parts = build(rate=100.0)
    prog = parts.progress[0]
    parts.backlog.index(
        [record(parts, 0, "A"), passed_over(0, 2, "B", 3), record(parts, 6, "A")], parts.txn
    )
    assert prog.next == 7
    assert parts.backlog.spill.runs == {(0, "B"): deque([[2, 5]])}
    assert parts.backlog.spill.counts == {"B": 3}
    prog.settle(0)
    assert prog.lwm == 2  # over A's record and the gap at 1, not into the run
    prog.settle(6)
    assert prog.lwm == 2  # the gap at 5 is settled, the run still pins the mark


def test_offsets_settled_before_a_restart_are_left_out_of_a_run() -> None:
    parts = build(rate=100.0)
    parts.progress[0] = PartitionProgress(0, settled=[(3, 5)])
    parts.backlog.index([passed_over(0, 0, "B", 8)], parts.txn)
    assert parts.backlog.spill.runs == {(0, "B"): deque([[0, 3], [5, 8]])}
    assert parts.backlog.spill.waiting == 6


def test_a_record_behind_runs_joins_them_and_all_enter_the_core_in_log_order() -> None:
    parts = build(rate=100.0)
    spill = parts.backlog.spill
    parts.backlog.index(
        [passed_over(0, 0, "B", 2), record(parts, 2, "B"), record(parts, 3, "A")], parts.txn
    )
    assert spill.runs == {(0, "B"): deque([[0, 3]])}
    assert parts.core.backlog("B") == (0, 0)
    assert parts.core.backlog("A") == (1, 1)
    parts.fetcher.answers = {o: message(0, o, "B", b"x%d" % o) for o in range(3)}
    assert read_again(parts) == 3
    assert not spill.runs
    assert spill.waiting == 0
    assert not spill.counts
    entries = parts.core.remove_tenant("B")
    assert [(e.offset, e.msg) for e in entries] == [(0, b"x0"), (1, b"x1"), (2, b"x2")]


def test_a_tenant_at_the_depth_is_passed_over_until_read_again_to_its_end() -> None:
    parts = build(rate=100.0, index_ahead=0.01)  # depth: the minimum, set to 4 below
    spill, handoff = parts.backlog.spill, parts.backlog.spill.handoff
    spill.min_depth = 4
    parts.backlog.index([record(parts, o, "B") for o in range(3)], parts.txn)
    assert handoff.passing == {}
    parts.backlog.index([record(parts, 3, "B")], parts.txn)
    assert handoff.passing == {0: {b"B": "B"}}
    parts.backlog.index([passed_over(0, 4, "B", 6)], parts.txn)  # offsets 4-9
    parts.fetcher.answers = {o: message(0, o, "B") for o in range(4, 10)}
    assert read_again(parts) == 0  # 4 in the core: not below half the depth
    assert offsets_of(parts, "B") == [0, 1, 2, 3]  # emitted, say
    assert read_again(parts) == 4  # up to the depth
    assert spill.runs == {(0, "B"): deque([[8, 10]])}
    assert handoff.passing == {0: {b"B": "B"}}
    assert offsets_of(parts, "B") == [4, 5, 6, 7]
    assert read_again(parts) == 2
    assert handoff.passing == {}  # caught up: its next records are indexed as they come
    assert offsets_of(parts, "B") == [8, 9]


def test_unpaced_no_tenant_is_passed_over() -> None:
    parts = build(index_ahead=0.01)
    parts.backlog.spill.min_depth = 2
    parts.backlog.index([record(parts, o, "B") for o in range(10)], parts.txn)
    assert parts.backlog.spill.depth() is None
    assert parts.backlog.spill.handoff.passing == {}


def test_index_ahead_zero_turns_passing_off() -> None:
    parts = build(rate=100.0, index_ahead=0)
    parts.backlog.spill.min_depth = 2
    parts.backlog.index([record(parts, o, "B") for o in range(10)], parts.txn)
    assert parts.backlog.spill.handoff.passing == {}


def test_records_the_log_no_longer_holds_become_lost_letters_at_once() -> None:
    parts = build(rate=100.0)
    parts.backlog.index([passed_over(0, 0, "B", 3), passed_over(0, 4, "B", 2)], parts.txn)
    parts.fetcher.answers = {0: Gone(5), 5: message(0, 5, "B")}
    assert read_again(parts) == 5
    assert parts.fetcher.asked == [0, 5]  # below the log start: lettered, not asked for
    letters = parts.backlog.letters
    assert [(x.tenant, x.entry.offset, x.reason) for x in letters] == [
        ("B", at, wire.LOST) for at in (0, 1, 2, 4)
    ]
    assert offsets_of(parts, "B") == [5]
    assert not parts.backlog.spill.runs


def test_a_read_that_fails_now_leaves_the_runs_waiting() -> None:
    parts = build(rate=100.0)
    parts.backlog.index([passed_over(0, 0, "B", 2)], parts.txn)
    assert read_again(parts) == 0  # the fetcher answers None: not now
    assert parts.backlog.spill.runs == {(0, "B"): deque([[0, 2]])}
    assert parts.progress[0].lwm == 0


def test_a_record_read_again_is_judged_as_it_is_indexed() -> None:
    parts = build(rate=100.0)
    # Purged up to a minute ahead (a message without a timestamp is enqueued as read).
    parts.backlog.purges["B"] = wire.now_ms() + 60_000
    parts.backlog.index([passed_over(0, 0, "B", 1)], parts.txn)
    parts.fetcher.answers = {0: message(0, 0, "B")}
    assert read_again(parts) == 1
    [letter] = parts.backlog.letters
    assert letter.reason == wire.PURGED
    assert parts.core.backlog("B") == (0, 0)


def test_revoked_partitions_forget_their_runs_and_keys() -> None:
    parts = build(rate=100.0, index_ahead=0.01)
    spill = parts.backlog.spill
    spill.min_depth = 1
    parts.backlog.index([record(parts, 0, "B"), record(parts, 0, "C", partition=1)], parts.txn)
    assert spill.handoff.passing == {0: {b"B": "B"}, 1: {b"C": "C"}}
    parts.backlog.index([passed_over(0, 1, "B", 3), passed_over(1, 1, "C", 2)], parts.txn)
    parts.backlog.drop({0})
    assert spill.runs == {(1, "C"): deque([[1, 3]])}
    assert spill.counts == {"C": 2}
    assert spill.waiting == 2
    assert spill.handoff.passing == {1: {b"C": "C"}}
    parts.backlog.clear()
    assert not spill.runs
    assert not spill.counts
    assert spill.waiting == 0
    assert spill.handoff.passing == {}


def test_a_backlog_limit_counts_the_records_in_the_log_and_refuses_beyond_it() -> None:
    parts = build(rate=100.0, index_ahead=0.01, max_backlog=10)
    spill, backlog = parts.backlog.spill, parts.backlog
    spill.min_depth = 4
    backlog.index([record(parts, o, "B") for o in range(4)], parts.txn)
    assert spill.handoff.passing == {0: {b"B": "B"}}
    backlog.index([passed_over(0, 4, "B", 4), passed_over(0, 9, "B", 10)], parts.txn)
    assert spill.runs == {(0, "B"): deque([[4, 8], [9, 11]])}  # 4 + 6 = 10, the limit
    # The 8 refused (11-18) wait as one run of letters, each made as it is written.
    [refused] = backlog.overflow.letters
    assert isinstance(refused, Refused)
    assert (refused.entry.offset, refused.end, refused.reason) == (11, 19, wire.BACKLOG_FULL)
    assert "max_backlog=10" in refused.detail
    parts.fetcher.answers = {o: message(0, o, "B") for o in range(11, 19)}
    assert backlog.send_letters(parts.txn, 5) == 5
    assert parts.fetcher.asked == [11, 12, 13, 14, 15]  # payloads read back as written
    [rest] = backlog.overflow.letters
    assert isinstance(rest, Refused)
    assert (rest.entry.offset, rest.end) == (16, 19)
    prog = parts.progress[0]
    prog.settle(0)
    assert backlog.send_letters(parts.txn, 10) == 3
    assert not backlog.overflow.letters


def test_a_tenant_with_a_limit_on_its_backlog_cost_is_never_passed_over() -> None:
    parts = build(rate=100.0, index_ahead=0.01)
    parts.core.set_default_policy(TenantPolicy(max_backlog_cost=1000))
    parts.backlog.spill.min_depth = 2
    parts.backlog.index([record(parts, o, "B") for o in range(10)], parts.txn)
    assert parts.core.backlog("B") == (10, 10)
    assert parts.backlog.spill.handoff.passing == {}


def test_a_parked_tenant_is_read_again_whatever_its_backlog() -> None:
    parts = build(rate=100.0, index_ahead=0.01)
    spill = parts.backlog.spill
    spill.min_depth = 4
    parts.backlog.index([record(parts, o, "B") for o in range(4)], parts.txn)
    parts.backlog.index([passed_over(0, 4, "B", 3)], parts.txn)
    parts.fetcher.answers = {o: message(0, o, "B") for o in range(4, 7)}
    assert read_again(parts) == 0  # 4 in the core
    # Parked: what is read again moves on to the holding log, so its runs must not wait.
    assert read_again(parts, {0: {"B": 4}}) == 3
    assert not spill.runs


def test_a_record_parsed_behind_runs_is_refused_beyond_the_backlog_limit() -> None:
    parts = build(rate=100.0, max_backlog=3)
    parts.backlog.index([passed_over(0, 0, "B", 2), record(parts, 2, "B")], parts.txn)
    parts.backlog.index([record(parts, 3, "B")], parts.txn)  # 3 in the log: the limit
    assert parts.backlog.spill.runs == {(0, "B"): deque([[0, 3]])}
    [letter] = parts.backlog.overflow.letters
    assert not isinstance(letter, Refused)
    assert (letter.entry.offset, letter.reason) == (3, wire.BACKLOG_FULL)
    assert letter.entry.msg is not None  # parsed: its payload is at hand


def test_a_tenant_with_runs_is_passed_over_while_paced_and_not_once_unpaced() -> None:
    parts = build(rate=100.0)
    spill = parts.backlog.spill
    # Runs, but not passed over (its key was withdrawn before these arrived, say).
    parts.backlog.index([passed_over(0, 0, "B", 2)], parts.txn)
    parts.core.push("B", record(parts, 9, "B"), 1)  # a backlog: nothing to read yet
    spill.min_depth = 2
    read_again(parts)
    assert spill.handoff.passing == {0: {b"B": "B"}}
    spill.index_ahead = 0  # as unpaced: nobody is passed over
    read_again(parts)
    assert spill.handoff.passing == {}
    assert spill.runs  # the runs are still read again, as their turn comes


def test_a_turn_reads_at_most_a_batch() -> None:
    parts = build(rate=100.0)
    spill = parts.backlog.spill
    parts.backlog.index([passed_over(0, 0, "B", 10_000)], parts.txn)
    parts.fetcher.answers = {o: message(0, o, "B") for o in range(10_000)}
    assert read_again(parts) == REFILL_BATCH
    assert spill.waiting == 10_000 - REFILL_BATCH


def test_a_refused_run_whose_payload_cannot_be_read_now_waits_at_the_head() -> None:
    parts = build(rate=100.0, max_backlog=2)
    backlog = parts.backlog
    backlog.index([record(parts, 0, "B"), record(parts, 1, "B")], parts.txn)
    backlog.index([passed_over(0, 2, "B", 4)], parts.txn)  # all four over the limit
    parts.fetcher.answers = {2: message(0, 2, "B"), 3: message(0, 3, "B")}  # 4: not now
    assert backlog.send_letters(parts.txn, 100) == 2
    [rest] = backlog.overflow.letters
    assert isinstance(rest, Refused)
    assert rest.entry.offset == 4
    assert backlog.send_letters(parts.txn, 100) == 0  # still not: no spin, no loss
    assert parts.progress[0].settled_above == 1  # 2 and 3, one range above the mark
