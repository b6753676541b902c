"""The ingest thread's parse (``fairstream.scheduler.ingest.member``): one reader's slice goes into
its partition's handoff queue as ``Parsed`` tuples, end-of-partition events as controls."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from fairstream import wire
from fairstream.adapters.heap import HeapTrimmer
from fairstream.config import Settings
from fairstream.config.kafka import KafkaConnection
from fairstream.core import ManualClock
from fairstream.scheduler.emitter.egress import footprint
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.ingest import member as ingest_module
from fairstream.scheduler.ingest.member import Ingest
from fairstream.scheduler.messages import Heard
from fairstream.scheduler.records import held_headers, held_key, held_value
from fairstream.scheduler.recovery import Recovery, RecoveryError
from fairstream.scheduler.supervise import FatalError

NOWHERE = "127.0.0.1:1"  # nothing is read: the consumers are made, never polled


def ingest(**settings_: Any) -> Ingest:
    settings = Settings(kafka=KafkaConnection(bootstrap=NOWHERE), **settings_)
    handoff = Handoff()
    return Ingest(
        settings,
        handoff,
        Recovery({"bootstrap.servers": NOWHERE}, settings.topics.ingest, settings.app_id),
        emitter_alive=lambda: True,
        on_lost_records=lambda n: None,
        heap=HeapTrimmer(ManualClock(), None),
    )


def record(
    offset: int, key: bytes | None, headers: list[tuple[str, bytes]] | None = None
) -> Message:
    return Message(
        topic="ingest",
        partition=3,
        offset=offset,
        key=key,
        value=b"v",
        headers=headers,
        timestamp=(1, 1_000 + offset),
    )


def test_a_slice_goes_to_its_partitions_queue_in_order() -> None:
    ing = ingest()
    try:
        queue = ing.handoff.open(3)
        eof = Message(
            topic="ingest", partition=3, offset=4, error=KafkaError(KafkaError._PARTITION_EOF)
        )
        slice_ = [
            record(0, b"acme"),
            record(1, None),
            record(2, b"acme", [(wire.COST, b"3"), (wire.DEADLINE_MS, b"9000")]),
            record(3, b"acme"),  # known by now: the fast path
            eof,
        ]
        ing._hand_over(3, slice_)
        parsed = list(queue)
        assert [(p[0], p[1], p[2], p[3], p[4], p[5]) for p in parsed] == [
            (3, 0, "acme", 1, None, 1000),
            (3, 1, None, 1, None, 1001),
            (3, 2, "acme", 3, 9000, 1002),
            (3, 3, "acme", 1, None, 1003),
        ]
        assert parsed[1].invalid is not None
        assert parsed[1].invalid.reason == wire.INVALID_KEY
        assert all(p[7] is None for p in parsed[::2])
        [control] = ing.handoff.controls
        assert control == Heard(3)
        ing._hand_over(5, [record(9, b"acme")])  # not (or no longer) owned: dropped
        assert len(queue) == 4
    finally:
        ing.consumer.close()
        ing.readers.close_all()


def test_each_record_is_held_in_the_smallest_form_that_keeps_what_it_needs() -> None:
    """A valid record without headers is held as its value alone; one with headers of its
    own as a ``Headed`` (value, headers, footprint), its message let go; an invalid one as
    the consumer's message, whose key may be no tenant id (its dead letter keeps it)."""
    ing = ingest()
    try:
        queue = ing.handoff.open(3)
        own = [(wire.COST, b"2"), ("traceparent", b"00-abc-01")]
        bad = [(wire.COST, b"0"), ("traceparent", b"00-abc-01")]
        slice_ = [record(0, b"acme"), record(1, b"acme", own), record(2, b"\xff")]
        ing._hand_over(3, [*slice_, record(3, b"acme", bad)])  # acme known by then
        plain, headed, invalid, refused = list(queue)
        assert plain.msg == b"v"
        assert headed.msg == (b"v", own, footprint(record(1, b"acme", own)))
        assert headed.cost == 2
        # Its footprint, reckoned once as it arrived, is what a message's would be.
        assert footprint(headed.msg) == footprint(record(1, b"acme", own))
        assert held_key(headed.msg, "acme") == b"acme"
        assert held_value(headed.msg) == b"v"
        assert held_headers(headed.msg) == own
        assert isinstance(invalid.msg, Message)
        assert invalid.invalid is not None
        assert held_key(invalid.msg, None) == b"\xff"
        # A known tenant's record whose header breaks the contract: the verdict says why.
        assert refused.tenant is None
        assert refused.invalid is not None
        assert refused.invalid.reason == wire.INVALID_HEADER
        assert "must be between 1 and" in refused.invalid.detail
    finally:
        ing.consumer.close()
        ing.readers.close_all()


class Fenced:
    """A group consumer whose static member was fenced: ``consume`` answers the error as
    librdkafka raised it after a broker restart (code _FATAL, the fatal flag not set)."""

    made = 0

    def __init__(self, *config: object) -> None:
        Fenced.made += 1
        self.error = KafkaError(
            KafkaError._FATAL,
            "Fatal error: Broker: Static consumer fenced by other consumer with same "
            "group.instance.id",
        )
        self.closed = False

    def subscribe(self, topics: list[str], **callbacks: object) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return [Message(error=self.error)]

    def close(self) -> None:
        self.closed = True


@pytest.mark.timeout(60)
def test_a_fenced_static_member_rejoins_once_then_a_second_fence_is_fatal(monkeypatch) -> None:
    # Seen after a broker restart: librdkafka fenced its own static member and stopped; the
    # thread had ignored what consume returned and the instance stayed up with no partitions.
    # A new consumer rejoins; fenced again at once, another process has the instance id.
    monkeypatch.setattr(ingest_module, "Consumer", Fenced)
    ing = ingest(group_instance_id="sched-0")
    first = ing.consumer
    Fenced.made = 0
    try:
        with pytest.raises(
            RuntimeError,
            match=r"again within 60 s.*group instance sched-0 \(the same --group-instance-id",
        ):
            ing._run()
        assert first.closed  # type: ignore[attr-defined]
        assert Fenced.made == 1  # one new consumer joined
    finally:
        ing.readers.close_all()


def test_another_fatal_error_of_the_group_consumer_ends_the_thread(monkeypatch) -> None:
    monkeypatch.setattr(ingest_module, "Consumer", Fenced)
    ing = ingest()  # no static membership
    Fenced.made = 0
    try:
        with pytest.raises(RuntimeError, match="group consumer failed: Fatal error"):
            ing._run()
        assert Fenced.made == 0
    finally:
        ing.readers.close_all()


def test_a_failing_rebalance_callback_ends_the_thread_with_its_reason() -> None:
    """What a callback raises never crosses librdkafka (it came out of consume() as an
    object no ``except`` matched): it is kept, then raised as fatal by the thread."""
    ing = ingest()

    def recover(*_: Any) -> None:
        raise RecoveryError("cannot read the offsets of ingest [2]: not leader")

    try:
        guarded = ing._guarded("assigning", lambda consumer, parts: recover())
        guarded(ing.consumer, [TopicPartition("ingest", 2)])  # returns: nothing escapes
        guarded(ing.consumer, [TopicPartition("ingest", 3)])  # the first failure is kept
        with pytest.raises(FatalError, match=r"assigning ingest partitions \[2\] failed: Recov"):
            ing._raise_callback_failure()
    finally:
        ing.consumer.close()
        ing.readers.close_all()


def test_callbacks_that_succeed_leave_the_thread_running() -> None:
    ing = ingest()
    seen: list[list[int]] = []
    try:
        guarded = ing._guarded(
            "revoking", lambda c, parts: seen.append([p.partition for p in parts])
        )
        guarded(ing.consumer, [TopicPartition("ingest", 1)])
        ing._raise_callback_failure()
        assert seen == [[1]]
    finally:
        ing.consumer.close()
        ing.readers.close_all()
