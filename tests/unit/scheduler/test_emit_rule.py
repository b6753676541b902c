"""The emitter drives the core's emission rule: what it produces, dead-letters and holds,
with a no-op producer and no broker; and the egress records it builds (``egress``)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from fairstream import wire
from fairstream.config import Settings
from fairstream.core import ManualClock
from fairstream.scheduler.emitter import send, transaction
from fairstream.scheduler.emitter.egress import Limits, Stamper, dead_letter, footprint
from fairstream.scheduler.emitter.loop import Emitter, Phase
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import Assign, Revoke
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.records import Letter, Parsed, Prepared


class Producer:
    """Sends nowhere; keeps what it was given: ``sent`` (topic, key, value, headers), and
    ``written`` with the partition and timestamp too (-1 and 0: not given, as in
    confluent-kafka)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, list[Any]]] = []
        self.written: list[tuple[Any, ...]] = []
        self.polls = 0

    def produce(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        self.sent.append((topic, key, value, headers))
        self.written.append((topic, partition, key, value, headers, timestamp))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


class Txn(transaction.Transaction):
    """The real one's counting and polling (``tally``), a producer that sends nowhere."""

    def __init__(self, *args: Any) -> None:
        self.open = True
        self.records = 0
        self._produced = 0
        self.producer = Producer()  # type: ignore[assignment]
        self.commits: list[tuple[list[Any], int]] = []  # (offsets, records) per commit
        self.metadata: list[Any] = []  # the group metadata each commit was made with
        self.aborted: list[str] = []

    def partitions(self, topic: str, timeout: float = 5.0) -> int | None:
        return None  # not known: records keep their key's partition (no spreading here)

    def begin(self) -> None:
        self.open = True

    def commit(self, offsets: list[Any], metadata: Any, meanwhile: Any = None) -> None:
        # The broker's work: the emitter may prepare meanwhile, until it has nothing to do.
        while meanwhile is not None and meanwhile():
            pass
        self.commits.append((offsets, self.records))
        self.metadata.append(metadata)
        self.open = False
        self.records = 0

    def abort(self, why: str) -> None:
        self.aborted.append(why)
        self.open = False
        self.records = 0

    def produce(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Any = None,
        partition: Any = None,
        timestamp: Any = None,
    ) -> None:
        extra = {"partition": partition} if partition is not None else {}
        if timestamp is not None:
            extra["timestamp"] = timestamp
        self.producer.produce(topic, value, key, headers=headers, **extra)
        self.records += 1
        self.tally(1)


class Fetcher:
    def __init__(self, *args: Any) -> None:
        pass

    def get(self, partition: int, offset: int, patience: float | None = None) -> None:
        return None

    def forget(self, partition: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def make():
    def make(fetcher: Any = Fetcher, **settings: Any) -> Emitter:
        emitter = Emitter(
            # No feedback unless asked for: no workers report here (the start-up window).
            Settings(**{"share_by": "partitions", "feedback_topic": "", **settings}),
            4,  # partitions; two of them owned: half the group's rate
            Handoff(),
            Metrics(),
            clock=ManualClock(),
            transactional_id="test",
            limits=Limits(),
            request_rewind=lambda: None,
            on_committed=lambda marks, seqs: None,
            transaction=Txn,
            fetcher=fetcher,
        )
        for partition in (0, 1):
            emitter.progress[partition] = PartitionProgress(0)
        emitter.phase = Phase(joined=True)
        emitter._publish_owned()  # as an assignment would
        emitter._apply_rate_share()
        return emitter

    return make


def message(offset: int, tenant: str = "A", value: bytes = b"v", headers: Any = None) -> Message:
    return Message(
        topic="ingest",
        partition=0,
        offset=offset,
        key=tenant.encode(),
        value=value,
        headers=headers,
    )


def push(
    emitter: Emitter,
    tenant: str,
    offset: int,
    *,
    partition: int = 0,
    cost: int = 1,
    deadline: int | None = None,
) -> None:
    msg = message(offset, tenant)
    emitter.backlog.cached += footprint(msg)
    emitter.core.push(tenant, Parsed(partition, offset, tenant, cost, deadline, 1, msg, None), cost)


def sent(emitter: Emitter) -> list[tuple[bytes | None, bytes | None]]:
    producer = emitter.txn.producer
    egress = emitter.sender.egress_topic  # progress records go with every commit: not these
    return [
        (key, dict(headers)[wire.REQUEST_ID])
        for topic, key, _, headers in producer.sent  # type: ignore[attr-defined]
        if topic == egress
    ]


def test_emits_in_fair_order_and_settles(make):
    emitter = make()
    for offset in range(4):
        push(emitter, "A" if offset % 2 else "B", offset)
    assert emitter._emit_some() == 4
    assert sorted(sent(emitter)) == [
        (b"A", b"fairstream.ingest-0-1"),
        (b"A", b"fairstream.ingest-0-3"),
        (b"B", b"fairstream.ingest-0-0"),
        (b"B", b"fairstream.ingest-0-2"),
    ]
    assert emitter.backlog.cached == 0
    assert emitter.progress[0].lwm == 4


def test_expired_at_emit_time_is_dead_lettered(make):
    emitter = make()
    push(emitter, "A", 0, deadline=1)
    push(emitter, "A", 1, deadline=emitter.clock.epoch_ms() + 3_600_000)
    assert emitter._emit_some() == 2
    assert [key for key, _ in sent(emitter)] == [b"A"]
    [(tenant, entry, reason, _)] = emitter.backlog.letters
    assert (tenant, entry.offset, reason) == ("A", 0, wire.EXPIRED)


def test_the_rule_paces_and_says_how_long_to_wait(make):
    emitter = make(rate=10, burst=2)  # half the rate and burst: 5/s, 1
    for offset in range(3):
        push(emitter, "A", offset)
    assert emitter._emit_some() == 1
    assert emitter.sender.wait == pytest.approx(0.2, rel=0.05)


def test_a_pick_held_for_cost_tokens_is_dropped_with_its_partition(make):
    emitter = make(cost_rate=10)  # half of it: 5/s, a burst of 5
    push(emitter, "A", 0, cost=3)
    push(emitter, "A", 1, partition=1, cost=5)
    assert emitter._emit_some() == 1
    held = emitter.rule.pending
    assert held is not None
    assert held.item.partition == 1
    assert emitter.sender.wait == pytest.approx(0.6, rel=0.05)
    before = emitter.backlog.cached
    emitter._drop({1})
    assert emitter.rule.pending is None
    assert emitter.backlog.cached == before - footprint(held.item.msg)


def test_a_pick_held_for_cost_tokens_is_purged(make):
    emitter = make(cost_rate=10)
    push(emitter, "A", 0, cost=3)
    push(emitter, "A", 1, cost=5)
    assert emitter._emit_some() == 1
    assert emitter.rule.pending is not None
    emitter.purge("A", before_ms=10)
    assert emitter.rule.pending is None
    assert [(t, e.offset, r) for t, e, r, _ in emitter.backlog.letters] == [("A", 1, wire.PURGED)]
    assert emitter.backlog.cached == 0


def test_feedback_pause_is_the_rules(make):
    emitter = make()
    push(emitter, "A", 0)
    push(emitter, "B", 1)
    assert emitter.rule.pause("A", 60.0)
    assert emitter.core.policy("A").paused
    assert emitter._emit_some() == 1
    assert [key for key, _ in sent(emitter)] == [b"B"]


def test_stamper_adds_fairstream_headers_and_replaces_stamped_ones():
    stamper = Stamper("ingest", 10_000)
    msg = message(7, headers=[("trace", b"t"), (wire.TENANT, b"forged")])
    headers = stamper.headers(msg.headers(), b"A", b"v", 0, 7, 1000, 2000)
    assert headers == [
        ("trace", b"t"),
        (wire.REQUEST_ID, b"ingest-0-7"),
        (wire.TENANT, b"A"),
        (wire.ENQUEUED_MS, b"1000"),
        (wire.SCHEDULED_MS, b"2000"),
    ]
    own = message(8, headers=[(wire.REQUEST_ID, b"mine")])
    stamped = stamper.headers(own.headers(), b"A", b"v", 0, 8, 1, 2)
    assert dict(stamped or [])[wire.REQUEST_ID] == b"mine"


def test_a_paced_stamper_adds_the_start_moment_and_replaces_a_forged_one():
    # Under a rate limit the record's slot is also the moment its call may start.
    stamper = Stamper("ingest", 10_000, paced=True)
    plain = stamper.headers(message(1).headers(), b"A", b"v", 0, 1, 1000, 2000)
    assert plain is not None
    assert plain[-2:] == [(wire.SCHEDULED_MS, b"2000"), (wire.START_MS, b"2000")]
    forged = message(2, headers=[("trace", b"t"), (wire.START_MS, b"1")])
    headers = stamper.headers(forged.headers(), b"A", b"v", 0, 2, 1000, 3000)
    assert headers is not None
    assert [v for n, v in headers if n == wire.START_MS] == [b"3000"]
    # Without a rate there is no schedule to keep: no start moment, and a producer's
    # header of that name is dropped all the same.
    unpaced = Stamper("ingest", 10_000).headers(forged.headers(), b"A", b"v", 0, 2, 1000, 3000)
    assert unpaced is not None
    assert wire.START_MS not in dict(unpaced)


def test_stamper_refuses_a_record_too_large():
    stamper = Stamper("ingest", 600)
    assert stamper.headers(None, b"A", b"x" * 100, 0, 0, 1, 2) is None
    assert "would be about 613 bytes; egress takes at most 600" in stamper.too_large("egress")


def test_dead_letter_of_a_lost_record_keeps_the_tenant():
    key, value, headers = dead_letter("A", None, wire.LOST, "gone", ("ingest", 0, 5), 10_000)
    assert (key, value) == (b"A", None)
    assert dict(headers)["fairstream-dlq-reason"] == b"lost"


def test_records_prepared_during_a_commit_go_right_after_it_in_order(make):
    emitter = make()
    for offset in range(6):
        push(emitter, "AB"[offset % 2], offset)
    assert emitter._emit_some() == 6
    emitter.txn.producer.sent.clear()
    for offset in range(6, 12):
        push(emitter, "AB"[offset % 2], offset)
    emitter._commit(prepare=True)
    [(offsets, records)] = emitter.txn.commits
    # The commit holds the first six, a progress record per partition, and the marks after
    # them: nothing prepared is in it.
    assert records == 6 + 2
    assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 6), (1, 0)]
    # The six prepared while it ran were sent right after it, in the next transaction.
    assert sorted(sent(emitter)) == sorted(
        (b"AB"[o % 2 : o % 2 + 1], b"fairstream.ingest-0-%d" % o) for o in range(6, 12)
    )
    assert emitter.txn.records == 6
    assert not emitter.sender.prepared
    assert emitter.progress[0].lwm == 12
    assert emitter.backlog.cached == 0


def test_nothing_is_prepared_under_a_rate_limit_or_without_prepare(make):
    emitter = make(rate=1000)
    push(emitter, "A", 0)
    assert emitter._emit_some() == 1
    push(emitter, "A", 1)
    emitter._commit(prepare=True)
    assert emitter.txn.records == 0
    assert emitter.core.backlog("A")[0] == 1
    emitter = make()
    push(emitter, "A", 0)
    assert emitter._emit_some() == 1
    push(emitter, "A", 1)
    emitter._commit()
    assert emitter.txn.records == 0
    assert emitter.core.backlog("A")[0] == 1


def test_a_prepared_record_past_its_deadline_is_dead_lettered(make):
    emitter = make()
    push(emitter, "A", 0, deadline=emitter.clock.epoch_ms() + 50)
    assert emitter.sender.prepare() is False  # one record: prepared, nothing more to pick
    assert len(emitter.sender.prepared) == 1
    emitter.clock.advance(0.06)  # the commit took longer than the record had left
    assert emitter._emit_some() == 1
    assert sent(emitter) == []
    assert [(t, e.offset, r) for t, e, r, _ in emitter.backlog.letters] == [("A", 0, wire.EXPIRED)]
    assert emitter.backlog.cached == 0


def test_a_rewind_forgets_what_was_prepared(make):
    emitter = make()
    push(emitter, "A", 0)
    emitter.sender.prepare()
    assert emitter.sender.prepared
    emitter._rewind()
    assert not emitter.sender.prepared


def test_max_in_flight_bounds_what_is_prepared_and_what_is_read_back(make):
    emitter = make(max_in_flight=5)
    for offset in range(20):
        push(emitter, "AB"[offset % 2], offset)
    while emitter.sender.prepare():
        pass
    assert len(emitter.sender.prepared) == 5
    emitter.sender.prepared.clear()
    # Payloads beyond --buffer-memory are read back one by one (emit_one): still 5 at most.
    emitter = make(max_in_flight=3)
    for offset in range(10):
        emitter.core.push("A", Parsed(0, offset, "A", 1, None, 1, None, None), 1)
    emitter.fetcher.get = lambda partition, offset: message(offset)  # type: ignore[method-assign]
    assert emitter._emit_some() == 3
    assert emitter.txn.records == 3


def test_the_producer_is_polled_across_batches(make):
    emitter = make()
    for offset in range(transaction.POLL_EVERY + 10):
        push(emitter, f"t{offset % 7}", offset)
    while emitter._emit_some():
        pass
    assert emitter.txn.producer.polls == 1


def test_a_record_prepared_long_ago_is_stamped_again(make):
    emitter = make()
    push(emitter, "A", 0)
    emitter.sender.prepare()
    step, stamp, key, value, headers = emitter.sender.prepared[0]
    emitter.sender.prepared[0] = Prepared(
        step, stamp - send.STALE_MS - 1, key, value, headers
    )  # a long commit
    assert emitter._emit_some() == 1
    [(_, _, _, sent_headers)] = emitter.txn.producer.sent
    scheduled = int(dict(sent_headers)[wire.SCHEDULED_MS])
    assert scheduled >= stamp


def test_concurrency_slots_bound_what_is_sent_and_completions_free_them(make):
    from fairstream.scheduler.messages import FeedbackBatch

    emitter = make(max_concurrency=4)  # 2 of 4 partitions owned: 2 slots here
    assert emitter.rule.inflight.limit == 2
    for offset in range(5):
        push(emitter, "A" if offset % 2 else "B", offset)
    emitter._emit_some()
    assert len(sent(emitter)) == 2
    held = {rid for _, rid in sent(emitter)}
    assert emitter.metrics.registry.get_sample_value("fairstream_concurrency_in_flight") == 2
    assert emitter._emit_some() == 0  # full: nothing more
    done = sorted(held)[0]
    emitter._control(FeedbackBatch(settled=[done, b"not-ours"]))
    emitter._emit_some()
    assert len(sent(emitter)) == 3
    assert emitter.rule.inflight.of("A") + emitter.rule.inflight.of("B") == 2
    assert done not in emitter.rule.inflight


def test_a_producers_request_id_keys_the_slot(make):
    from fairstream.scheduler.messages import FeedbackBatch

    emitter = make(max_concurrency=2)  # 1 slot here
    msg = message(0, "A", headers=[(wire.REQUEST_ID, b"order-7"), ("trace", b"t")])
    emitter.backlog.cached += footprint(msg)
    emitter.core.push("A", Parsed(0, 0, "A", 1, None, 1, msg, None), 1)
    push(emitter, "A", 1)
    emitter._emit_some()
    assert len(sent(emitter)) == 1
    assert b"order-7" in emitter.rule.inflight
    emitter._control(FeedbackBatch(settled=[b"order-7"]))
    emitter._emit_some()
    assert len(sent(emitter)) == 2


def test_without_a_limit_the_emitter_counts_no_slots(make):
    emitter = make()
    for offset in range(3):
        push(emitter, "A", offset)
    assert emitter.rule.direct()
    emitter._emit_some()
    assert len(emitter.rule.inflight) == 0
    assert not emitter.counts_slots()


def test_tenant_stats_show_the_slots_when_a_limit_exists(make):
    emitter = make(max_concurrency=4)
    for offset in range(3):
        push(emitter, "A", offset)
    emitter._emit_some()
    stats = emitter.tenant_stats(10)
    assert stats["concurrency"]["in_flight"] == 2
    assert stats["concurrency"]["limit"] == 2
    assert {r["tenant"]: r["in_flight"] for r in stats["tenants"]} == {"A": 2}
    assert "concurrency" not in make().tenant_stats(10)


class Readback:
    """A fetcher whose answers the test sets per offset: a message, ``Gone`` or None."""

    def __init__(self) -> None:
        self.answers: dict[int, Any] = {}
        self.asked: list[int] = []
        self.failing: dict[int, Any] = {}
        self.retry_at = 0.0

    def get(self, partition: int, offset: int, patience: float | None = None) -> Any:
        self.asked.append(offset)
        return self.answers.get(offset)

    def retry_in(self, partition: int) -> float:
        return 0.5

    def forget(self, partition: int) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_payload_not_readable_now_waits_in_order_and_is_never_lost(make):
    from fairstream.scheduler.emitter.fetch import Gone

    fetcher = Readback()
    emitter = make(fetcher=lambda *config: fetcher)
    for offset in range(3):  # A's records, none held: read back when they go
        emitter.core.push("A", Parsed(0, offset, "A", 1, None, 1, None, None), 1)
    push(emitter, "B", 10)
    emitter._emit_some()
    # A's first read fails for now: A waits (paused), B goes, nothing is dead-lettered.
    assert sent(emitter) == [(b"B", b"fairstream.ingest-0-10")]
    assert not emitter.backlog.letters
    assert emitter.core.backlog("A") == (3, 3)
    assert emitter.core.policy("A").paused
    assert emitter.progress[0].lwm == 0
    # Readable again once the pause ends: A's records go in their order.
    fetcher.answers = {offset: message(offset) for offset in range(3)}
    emitter.rule._resume(emitter.clock.now() + 1)
    emitter._emit_some()
    assert [rid for key, rid in sent(emitter) if key == b"A"] == [
        b"fairstream.ingest-0-0",
        b"fairstream.ingest-0-1",
        b"fairstream.ingest-0-2",
    ]
    # Gone for real (the log start passed it): a lost dead letter saying the log start.
    emitter.core.push("A", Parsed(0, 3, "A", 1, None, 1, None, None), 1)
    fetcher.answers[3] = Gone(7)
    emitter._emit_some()
    [(tenant, entry, reason, detail)] = emitter.backlog.letters
    assert (tenant, entry.offset, reason) == ("A", 3, wire.LOST)
    assert "log starts at 7" in detail


def test_a_dead_letter_whose_payload_is_not_readable_now_waits(make):
    fetcher = Readback()
    emitter = make(fetcher=lambda *config: fetcher)
    emitter.backlog.letters.append(
        Letter("A", Parsed(0, 4, "A", 1, None, 1, None, None), wire.EXPIRED, "late")
    )
    emitter._send_letters(10)
    assert not emitter.backlog.letters
    assert len(emitter.backlog.unread_letters) == 1
    assert emitter.txn.producer.sent == []
    fetcher.answers[4] = message(4)
    emitter.backlog.letters.extend(emitter.backlog.unread_letters)
    emitter.backlog.unread_letters.clear()
    emitter._send_letters(10)
    [(_, _, _, headers)] = emitter.txn.producer.sent
    assert dict(headers)["fairstream-dlq-reason"] == b"expired"


def test_commits_carry_the_metadata_of_the_last_hand_over(make):
    """Never metadata read at commit time: the generation the partitions came with, then
    the one that still owned them at their revocation."""
    emitter = make()
    emitter._assign(Assign({}, metadata="generation 1"))
    push(emitter, "A", 0)
    emitter._emit_some()
    emitter._commit()
    emitter._revoke(Revoke([1], metadata="generation 2"))
    assert emitter.txn.metadata == ["generation 1"]  # nothing open at the revocation
    push(emitter, "A", 1)
    emitter._emit_some()
    emitter._commit()
    assert emitter.txn.metadata == ["generation 1", "generation 2"]


def test_a_revocation_given_up_on_aborts_instead_of_committing(make):
    rewinds: list[bool] = []
    emitter = make()
    emitter._request_rewind = lambda: rewinds.append(True)
    emitter._assign(Assign({}, metadata="generation 1"))
    push(emitter, "A", 0)
    emitter._emit_some()
    assert emitter.txn.open
    revoke = Revoke([0], metadata="generation 1")
    revoke.given_up.set()  # the ingest thread stopped waiting and let partition 0 go
    emitter._revoke(revoke)
    assert emitter.txn.commits == []
    assert emitter.txn.aborted == ["partitions [0] were let go after --revoke-wait"]
    assert rewinds == [True]
    assert emitter.phase.rewinding
    assert revoke.done.is_set()
