"""The backlog index (``backlog.Backlog``) on its own: what joins the core, the payload
bytes it holds, and the dead letters it makes and sends. A ManualClock, no broker."""

from __future__ import annotations

from fairstream import wire
from fairstream.core import TenantPolicy
from fairstream.scheduler.emitter.egress import footprint
from fairstream.scheduler.emitter.fetch import Gone
from tests.unit.scheduler.parts import build, message, record


def test_indexed_records_join_the_core_and_their_payload_bytes_are_counted() -> None:
    parts = build()
    records = [record(parts, offset, "AB"[offset % 2]) for offset in range(4)]
    parts.backlog.index(records, parts.txn)
    assert parts.core.backlog("A") == (2, 2)
    assert parts.core.backlog("B") == (2, 2)
    assert parts.backlog.cached == sum(footprint(r.msg) for r in records)  # type: ignore[arg-type]
    assert parts.progress[0].next == 4
    assert parts.sample("fairstream_ingested_records_total") == 4
    # A record seen already (read again) is not indexed twice.
    parts.backlog.index(records[:1], parts.txn)
    assert parts.core.backlog("A") == (2, 2)


def test_beyond_the_buffer_memory_a_record_is_kept_without_its_payload() -> None:
    parts = build(buffer_memory=2**20)  # 1 MiB: one of these payloads, not two
    big = b"x" * 600_000
    parts.backlog.index([record(parts, 0, value=big), record(parts, 1, value=big)], parts.txn)
    [held, bare] = parts.core.remove_tenant("A")
    assert held.msg is not None
    assert bare.msg is None
    assert (bare.partition, bare.offset, bare.tenant) == (0, 1, "A")
    assert parts.backlog.cached == footprint(held.msg)


def test_a_deadline_passed_by_the_clock_makes_an_expired_letter_at_indexing() -> None:
    parts = build()
    deadline = parts.clock.epoch_ms() + 50
    parts.clock.advance(0.051)  # no sleep: the clock the backlog reads moves
    parts.backlog.index([record(parts, 0, deadline=deadline)], parts.txn)
    [letter] = parts.backlog.letters
    assert (letter.tenant, letter.entry.offset, letter.reason) == ("A", 0, wire.EXPIRED)
    assert len(parts.core) == 0
    assert parts.backlog.cached == 0
    # Still within its deadline: indexed.
    parts.backlog.index([record(parts, 1, deadline=parts.clock.epoch_ms() + 50)], parts.txn)
    assert parts.core.backlog("A") == (1, 1)


def test_purges_in_force_and_purge_dead_letter_what_was_enqueued_up_to_then() -> None:
    parts = build()
    parts.backlog.index([record(parts, 0, age=10), record(parts, 1, age=5)], parts.txn)
    before_ms = parts.clock.epoch_ms() - 7_000
    assert parts.backlog.purge("A", before_ms) == 1  # one kept
    assert [(x.entry.offset, x.reason) for x in parts.backlog.letters] == [(0, wire.PURGED)]
    assert parts.backlog.cached == footprint(message(0, 1))
    # A purge in force (the policies') applies to records read later too.
    parts.backlog.purges["A"] = before_ms
    parts.backlog.index([record(parts, 2, age=8)], parts.txn)
    assert [x.entry.offset for x in parts.backlog.letters] == [0, 2]


def test_over_its_backlog_limit_a_record_is_overflow() -> None:
    parts = build(max_backlog=2)
    parts.backlog.index([record(parts, offset) for offset in range(5)], parts.txn)
    assert parts.core.backlog("A") == (2, 2)
    overflow = parts.backlog.overflow
    assert [x.entry.offset for x in overflow.letters] == [2, 3, 4]
    assert {x.reason for x in overflow.letters} == {wire.BACKLOG_FULL}
    assert overflow.held == 3 * footprint(message(0, 2))
    assert parts.backlog.waiting


def test_dropping_a_partition_forgets_its_records_letters_and_bytes() -> None:
    parts = build()
    parts.backlog.index([record(parts, 0, partition=0), record(parts, 0, partition=1)], parts.txn)
    parts.backlog.letter("A", record(parts, 1, partition=1), wire.EXPIRED, "late")
    parts.backlog.drop({1})
    [kept] = parts.core.remove_tenant("A")
    assert kept.partition == 0
    assert parts.backlog.cached == footprint(message(0, 0))
    assert not parts.backlog.letters


def test_letters_go_to_the_dlq_settle_their_offsets_and_are_tallied() -> None:
    parts = build(max_backlog=1)
    parts.backlog.index([record(parts, offset) for offset in range(3)], parts.txn)
    parts.backlog.letter("A", record(parts, 0, partition=1), wire.EXPIRED, "late")
    assert parts.backlog.send_letters(parts.txn, 10) == 3
    sent = parts.txn.producer.sent
    assert [topic for topic, *_ in sent] == [parts.settings.topics.dlq] * 3
    reasons = [dict(headers)["fairstream-dlq-reason"] for *_, headers in sent]
    assert reasons == [b"expired", b"backlog-full", b"backlog-full"]
    assert parts.progress[1].lwm == 1
    assert parts.progress[0].ranges() == [(1, 3)]  # offset 0 waits in the core
    assert parts.checkpoint.letters == {wire.EXPIRED: 1, wire.BACKLOG_FULL: 2}
    assert parts.backlog.overflow.held == 0
    assert not parts.backlog.waiting


def test_a_letter_whose_payload_cannot_be_read_now_waits_and_a_gone_one_is_lost() -> None:
    parts = build()
    bare = record(parts, 0)._replace(msg=None)
    parts.backlog.letter("A", bare, wire.EXPIRED, "late")
    parts.backlog.send_letters(parts.txn, 10)
    assert not parts.backlog.letters
    assert len(parts.backlog.unread_letters) == 1
    assert parts.txn.producer.sent == []
    parts.fetcher.answers[0] = Gone(5)
    parts.backlog.retry_unread()
    parts.backlog.send_letters(parts.txn, 10)
    [(_, _, _, headers)] = parts.txn.producer.sent
    assert dict(headers)["fairstream-dlq-reason"] == b"lost"
    assert parts.checkpoint.letters == {wire.LOST: 1}


def test_a_tenant_limited_by_a_policy_of_its_own_overflows_when_the_default_has_no_limit() -> None:
    parts = build()  # the default policy: no backlog limit
    parts.core.set_policy("A", TenantPolicy(max_backlog=2))
    parts.backlog.index([record(parts, offset, "AB"[offset % 2]) for offset in range(8)], parts.txn)
    assert parts.core.backlog("A") == (2, 2)
    assert parts.core.backlog("B") == (4, 4)  # unlimited
    assert [x.entry.offset for x in parts.backlog.overflow.letters] == [4, 6]
