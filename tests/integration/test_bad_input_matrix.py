"""The bad-input matrix: odd records are dead-lettered with a reason or emitted,
every one is accounted for, and the scheduler's memory stays bounded.

One scheduler with the defaults (no rate limit, ``--max-backlog`` 100,000) reads, on one
ingest topic: a record with 10,000 headers; tenant ids of 255 bytes (valid) and 256 bytes
(``invalid-key``), in ASCII and in multi-byte UTF-8; binary keys (not UTF-8:
``invalid-key``; NUL and control bytes are UTF-8 and valid); timestamps far in the past and
far in the future; a deadline already passed (``expired``) and the largest one allowed; cost
2^63 and deadline 2^63 (``invalid-header``) and the largest cost allowed; and
``FAIRSTREAM_BAD_INPUT_TENANTS`` (default 1,000,000) distinct tenants with one record each.

Egress and dead letters are read with read_committed, as workers do, until end markers
written after the scheduler stopped: egress + dead letters == produced, nothing twice. The
scheduler's peak resident memory (VmHWM) is printed and held to a generous bound.

Kafka 4 refuses, by default, a record whose timestamp is more than an hour ahead of the
broker's clock (``message.timestamp.after.max.ms``): the ingest topic here accepts any, so
that what the scheduler does with such a record is what is tested.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from fairstream import wire
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader

pytestmark = pytest.mark.integration

TENANTS = int(os.environ.get("FAIRSTREAM_BAD_INPUT_TENANTS", "1000000"))
PARTITIONS = 4
EGRESS = "egress"
END = b"__end-of-test__"  # key of the markers written after the scheduler stopped
CASE = b"case:"  # values of the matrix's records start with it; one tenant record: b"u..."
# Peak resident memory allowed: a base for the interpreter, librdkafka and the web server,
# plus a generous 3 KiB per buffered one-record tenant (measured here: 232 MiB at 100,000
# tenants, 1,817 MiB at 1,000,000, all of them buffered at once).
RSS_BASE_MIB = 400
RSS_PER_TENANT_KIB = 3.0
FAR_PAST_MS = 1  # 1970-01-01T00:00:00.001Z (0 would mean "now" to librdkafka)
FAR_FUTURE_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z


@dataclass
class Case:
    name: str
    key: bytes | None
    expect: str  # EGRESS, or the dead-letter reason
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp: int | None = None

    @property
    def value(self) -> bytes:
        return CASE + self.name.encode()


def matrix(now_ms: int) -> list[Case]:
    many = [(f"h{i:05d}", b"v") for i in range(10_000)]
    return [
        Case("10000-headers", b"headers", EGRESS, many),
        Case("key-255-ascii", b"k" * 255, EGRESS),
        Case("key-255-utf8", ("\u00e9" * 127 + "k").encode(), EGRESS),  # 2 x 127 + 1 bytes
        Case("key-256-ascii", b"k" * 256, wire.INVALID_KEY),
        Case("key-256-utf8", ("\u20ac" * 85 + "k").encode(), wire.INVALID_KEY),  # 3 x 85 + 1
        Case("key-binary-ff", b"\xff\xfe\xfd", wire.INVALID_KEY),
        Case("key-binary-lone-continuation", b"\x80tenant", wire.INVALID_KEY),
        Case("key-binary-truncated", b"tenant\xc3", wire.INVALID_KEY),
        Case("key-binary-surrogate", b"\xed\xa0\x80", wire.INVALID_KEY),
        Case("key-nul-and-control-bytes", b"\x00\x01\x1f", EGRESS),
        Case("timestamp-far-past", b"old", EGRESS, timestamp=FAR_PAST_MS),
        Case("timestamp-far-future", b"future", EGRESS, timestamp=FAR_FUTURE_MS),
        Case(
            "deadline-passed",
            b"late",
            wire.EXPIRED,
            [(wire.DEADLINE_MS, b"%d" % (now_ms - 60_000))],
        ),
        Case(
            "deadline-largest",
            b"patient",
            EGRESS,
            [(wire.DEADLINE_MS, b"%d" % wire.MAX_EPOCH_MS)],
        ),
        Case(
            "deadline-2^63",
            b"patient",
            wire.INVALID_HEADER,
            [(wire.DEADLINE_MS, b"%d" % 2**63)],
        ),
        Case("cost-2^63", b"costly", wire.INVALID_HEADER, [(wire.COST, b"%d" % 2**63)]),
        Case("cost-largest", b"costly", EGRESS, [(wire.COST, b"%d" % wire.MAX_COST)]),
    ]


def tenant_key(i: int) -> bytes:
    return b"u%07d" % i


class Tally:
    """Reads a topic from the start (read_committed), keeping the matrix's records whole and
    only the values of the one-record tenants (a million messages would not fit)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.reader = TopicReader(bootstrap, topic)
        self.cases: list[Message] = []
        self.tenants: Counter[bytes] = Counter()
        self.ends: set[int] = set()

    @property
    def count(self) -> int:
        return len(self.cases) + self.tenants.total()

    def poll(self) -> None:
        for msg in self.reader.poll(0.5):
            value = msg.value() or b""
            if msg.key() == END:
                self.ends.add(msg.partition())
            elif value.startswith(CASE):
                self.cases.append(msg)
            else:
                self.tenants[value] += 1
        self.reader.messages.clear()

    def ended(self) -> bool:
        """Polls; True once an end marker was read from every partition."""
        self.poll()
        return len(self.ends) == PARTITIONS

    def close(self) -> None:
        self.reader.close()


def produce_matrix(bootstrap: str, topic: str, cases: list[Case]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(f"{msg.value()!r}: {err}")

    for case in cases:
        extra = {"timestamp": case.timestamp} if case.timestamp is not None else {}
        headers = [*case.headers, ("x-case", case.name.encode())]
        producer.produce(
            topic, case.value, case.key, headers=headers, on_delivery=delivered, **extra
        )
    assert producer.flush(60) == 0
    assert not failed, failed


def produce_tenants(bootstrap: str, topic: str, count: int) -> float:
    """One record for each of ``count`` tenants, as fast as librdkafka takes them; records/s."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    started = time.monotonic()
    for i in range(count):
        key = tenant_key(i)
        while True:
            try:
                producer.produce(topic, key, key)
                break
            except BufferError:
                producer.poll(0.05)  # librdkafka's queue is full: let it drain
    assert producer.flush(120) == 0
    return count / (time.monotonic() - started)


def memory_kib(pid: int) -> dict[str, int]:
    """VmHWM (peak resident) and VmRSS of a process, in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            found[name] = int(rest.split()[0])
    return found


def allow_any_timestamp(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                name,
                str(2**63 - 1),
                incremental_operation=AlterConfigOpType.SET,
            )
            for name in ("message.timestamp.after.max.ms", "message.timestamp.before.max.ms")
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def write_end_markers(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(PARTITIONS):
        producer.produce(topic, b"", END, partition=partition)
    assert producer.flush(30) == 0


@pytest.mark.timeout(1200)
def test_bad_input_matrix(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=PARTITIONS).create()
    allow_any_timestamp(kafka_bootstrap, deployment.topics.ingest)
    scheduler = SchedulerProcess(deployment, tmp_path).start().wait_ready()
    egress = Tally(kafka_bootstrap, deployment.topics.egress)
    dlq = Tally(kafka_bootstrap, deployment.topics.dlq)
    cases = matrix(int(time.time() * 1000))
    to_egress = TENANTS + sum(case.expect == EGRESS for case in cases)
    to_dlq = sum(case.expect != EGRESS for case in cases)
    try:
        produce_matrix(kafka_bootstrap, deployment.topics.ingest, cases)
        started = time.monotonic()
        produced_per_second = produce_tenants(kafka_bootstrap, deployment.topics.ingest, TENANTS)

        def all_arrived() -> bool:
            egress.poll()
            dlq.poll()
            return egress.count >= to_egress and dlq.count >= to_dlq

        wait_until(
            all_arrived,
            max(120.0, TENANTS / 1000),
            lambda: (
                f"egress {egress.count} of {to_egress}, dead letters {dlq.count} of {to_dlq}; "
                f"log:\n{scheduler.tail()}"
            ),
            interval=0,
        )
        drained_in = time.monotonic() - started
        assert scheduler.proc is not None
        memory = memory_kib(scheduler.proc.pid)
        health = scheduler.get("/healthz")[0]
        scrape_started = time.monotonic()
        scrape = scheduler.get("/metrics")[0]
        scrape_took = time.monotonic() - scrape_started
        assert scheduler.terminate() == 0, scheduler.tail()
        for tally, topic in ((egress, deployment.topics.egress), (dlq, deployment.topics.dlq)):
            write_end_markers(kafka_bootstrap, topic)
            wait_until(
                tally.ended,
                60,
                f"end markers read from every partition of {topic}",
                interval=0,
            )
    finally:
        egress.close()
        dlq.close()
        if scheduler.alive():
            scheduler.kill()

    produced = len(cases) + TENANTS
    peak_mib = memory["VmHWM"] / 1024
    bound_mib = RSS_BASE_MIB + TENANTS * RSS_PER_TENANT_KIB / 1024
    tenant_duplicates = sum(n - 1 for n in egress.tenants.values())
    print(
        f"\nbad-input matrix: {produced:,} records produced ({len(cases)} odd ones, "
        f"{TENANTS:,} one-record tenants at {produced_per_second:,.0f}/s); egress "
        f"{egress.count:,}, dead letters {dlq.count:,}, egress + dead letters "
        f"{egress.count + dlq.count:,}; all out {drained_in:.1f} s after the first tenant "
        f"record; scheduler peak RSS (VmHWM) {peak_mib:,.0f} MiB (bound {bound_mib:,.0f}), "
        f"RSS after draining {memory['VmRSS'] / 1024:,.0f} MiB; one /metrics scrape then "
        f"{scrape_took * 1000:,.0f} ms"
    )
    outcome: dict[str, tuple[str, Message]] = {}
    for where, tally in ((EGRESS, egress), ("dlq", dlq)):
        for msg in tally.cases:
            name = msg.value()[len(CASE) :].decode()
            assert name not in outcome, f"{name} came out twice"
            reason = dict(msg.headers() or []).get(wire.DLQ_REASON)
            outcome[name] = (EGRESS if where == EGRESS else (reason or b"?").decode(), msg)
    for case in cases:
        found, _ = outcome[case.name]
        print(f"  {case.name:30} -> {found}")
    for case in cases:
        found, msg = outcome[case.name]
        assert found == case.expect, f"{case.name}: expected {case.expect}, got {found}"
        assert msg.key() == case.key, f"{case.name}: the key is carried as it was"
        headers = msg.headers() or []
        assert headers[: len(case.headers) + 1] == [*case.headers, ("x-case", case.name.encode())]
        found_headers = dict(headers)
        if case.expect == EGRESS:
            if case.timestamp is not None:  # the ingest timestamp, whatever it is
                assert found_headers[wire.ENQUEUED_MS] == b"%d" % case.timestamp
        else:
            assert found_headers[wire.DLQ_DETAIL], f"{case.name}: a sentence says why"
    assert egress.tenants.keys() == {tenant_key(i) for i in range(TENANTS)}
    assert tenant_duplicates == 0
    assert not dlq.tenants, f"tenant records dead-lettered: {list(dlq.tenants)[:5]}"
    assert egress.count + dlq.count == produced
    assert health == 200
    assert scrape == 200
    assert peak_mib < bound_mib
