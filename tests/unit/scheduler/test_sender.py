"""The sender (``send.Sender``) on its own: what it produces, stamps, prepares, expires and
reads back, with a ManualClock: no sleeps, and dwell and stamps exact."""

from __future__ import annotations

import pytest

from fairstream import wire
from fairstream.scheduler.emitter.send import STALE_MS
from tests.unit.scheduler.parts import Parts, build, message, record


def fill(parts: Parts, *records: object) -> None:
    parts.backlog.index(list(records), parts.txn)  # type: ignore[arg-type]


def headers_of(parts: Parts) -> list[dict[str, bytes]]:
    return [dict(headers) for *_, headers in parts.txn.producer.sent]


def test_records_go_out_settled_with_their_dwell_and_cost_tallied() -> None:
    parts = build()
    fill(parts, record(parts, 0, "A", age=1.5, cost=3), record(parts, 1, "B", age=0.25))
    assert parts.sender.emit_batch(parts.txn) == 2
    assert parts.txn.records == 2
    assert parts.progress[0].lwm == 2
    assert parts.backlog.cached == 0
    assert parts.checkpoint.tally().by_tenant() == {"A": [1.5], "B": [0.25]}  # one clock: exact
    assert parts.checkpoint.cost == 4
    scheduled = {h[wire.SCHEDULED_MS] for h in headers_of(parts)}
    assert scheduled == {b"%d" % parts.clock.epoch_ms()}


def test_under_a_rate_the_sender_says_how_long_to_wait_and_goes_when_the_clock_has_moved() -> None:
    parts = build(rate=10, burst=1)
    fill(parts, *(record(parts, offset) for offset in range(3)))
    assert parts.sender.emit_batch(parts.txn) == 1
    assert parts.sender.paced
    assert parts.sender.wait == pytest.approx(0.1)
    assert parts.sender.emit_batch(parts.txn) == 0  # no time has passed
    parts.clock.advance(0.1)
    assert parts.sender.emit_batch(parts.txn) == 1
    assert parts.progress[0].lwm == 2


def test_prepared_records_go_first_and_a_deadline_passed_meanwhile_expires_them() -> None:
    parts = build()
    fill(
        parts,
        record(parts, 0, deadline=parts.clock.epoch_ms() + 50),
        record(parts, 1, deadline=parts.clock.epoch_ms() + 5_000),
    )
    assert parts.sender.prepare() is False  # nothing more to pick
    assert [p.pick.item.offset for p in parts.sender.prepared] == [0, 1]
    assert parts.progress[0].lwm == 0  # nothing settled while a commit runs
    parts.clock.advance(0.06)  # the commit took longer than the first record had left
    assert parts.sender.emit_batch(parts.txn) == 2
    assert not parts.sender.prepared
    [letter] = parts.backlog.letters
    assert (letter.entry.offset, letter.reason) == (0, wire.EXPIRED)
    [sent] = headers_of(parts)
    assert sent[wire.REQUEST_ID] == b"fairstream.ingest-0-1"
    assert parts.backlog.cached == 0


def test_a_record_prepared_longer_ago_than_stale_ms_is_stamped_again() -> None:
    parts = build()
    fill(parts, record(parts, 0))
    parts.sender.prepare()
    stamped = parts.sender.prepared[0].stamp
    parts.clock.advance((STALE_MS + 1) / 1000)
    parts.sender.emit_batch(parts.txn)
    [sent] = headers_of(parts)
    assert int(sent[wire.SCHEDULED_MS]) == stamped + STALE_MS + 1 == parts.clock.epoch_ms()


def test_nothing_is_prepared_while_letters_wait_or_under_a_rate() -> None:
    parts = build()
    fill(parts, record(parts, 0))
    parts.backlog.letter("A", record(parts, 5), wire.EXPIRED, "late")
    assert parts.sender.prepare() is False
    assert not parts.sender.prepared
    paced = build(rate=10)
    fill(paced, record(paced, 0))
    assert paced.sender.prepare() is False
    assert not paced.sender.prepared


def test_a_payload_not_held_is_read_back_or_waits_with_its_tenant_paused() -> None:
    parts = build()
    bare = [record(parts, offset)._replace(msg=None) for offset in range(2)]
    for entry in bare:
        parts.core.push("A", entry, 1)
    parts.fetcher.answers[0] = message(0, 0)
    assert parts.sender.emit_batch(parts.txn) == 2
    assert parts.fetcher.asked == [0, 1]
    assert parts.progress[0].lwm == 1  # offset 0 read back and sent
    assert parts.core.backlog("A") == (1, 1)  # offset 1 back at the head of its queue
    assert parts.core.policy("A").paused
    assert parts.sample("fairstream_payload_refetches_total") == 1
    assert not parts.backlog.letters  # never a lost letter for a record the log still holds
