"""Read-back under a broker outage: a record the log still holds is never lost.

A backlog far above ``--buffer-memory`` (most payloads are read back from the ingest log
when their turn comes), and the broker stopped (SIGSTOP) for 15 s in the middle of
emission. Read-backs
fail meanwhile; none of them may become a ``lost`` dead letter (the log still holds every
record), and once the broker is back everything reaches egress exactly once, in order per
tenant, counted by request id with a read_committed consumer.

The broker is this test's own (``DevBroker`` in a temporary directory, local engine): the
shared development broker is never stopped. (Stopped with SIGSTOP rather than restarted:
the development broker's restart in place is not reliable on a loaded machine, and a hung
broker is the harder case for a read-back: requests time out instead of being refused.)
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fairstream import wire
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from fairstream_dev.kafka.broker import BrokerError, DevBroker
from tests.integration.exactly_once import all_seen, exactly_once_report, read_to_end

pytestmark = pytest.mark.integration

TENANTS = 8
PER_TENANT = 750  # 6,000 records
PAYLOAD = 2048  # bytes: 12 MB of payloads over a 1 MiB buffer
OUTAGE = 15.0  # seconds the broker is down


@pytest.fixture
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevBroker]:
    broker = DevBroker(state_dir=tmp_path_factory.mktemp("outage-broker"), log=lambda _: None)
    try:
        broker.up(engine="local")
    except BrokerError as exc:
        pytest.skip(f"no broker of our own to stop: {exc}")
    try:
        yield broker
    finally:
        broker.down()


def produce_backlog(bootstrap: str, topic: str) -> set[bytes]:
    # Idempotent: a fresh broker's first produce requests may fail and be retried, which
    # without idempotence reorders batches (and then the ingest order is not 0, 1, 2...).
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True}
    )
    values: set[bytes] = set()
    pad = b"x" * PAYLOAD
    for i in range(PER_TENANT):
        for t in range(TENANTS):
            value = b"t%02d:%06d:" % (t, i) + pad
            producer.produce(topic, value, b"t%02d" % t)
            values.add(value)
            producer.poll(0)
    assert producer.flush(60) == 0
    return values


# Its own deadline (240 s) fires before pytest's, so a failure shows the scheduler's log.
@pytest.mark.timeout(480)
def test_a_broker_outage_during_read_backs_loses_nothing(
    own_broker: DevBroker, tmp_path: Path
) -> None:
    state = own_broker.status()
    assert state is not None
    bootstrap = state.bootstrap
    pid = state.pid
    assert pid is not None
    deployment = Deployment(bootstrap, partitions=2).create()
    expected = produce_backlog(bootstrap, deployment.topics.ingest)
    sent = {b"t%02d" % t: PER_TENANT for t in range(TENANTS)}
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "300", "--buffer-memory", "1", "--feedback-topic", ""
    )
    egress = TopicReader(bootstrap, deployment.topics.egress)
    try:
        scheduler.start().wait_ready(timeout=120)
        egress.read_until(1500, timeout=120)  # well into the read-backs (1 MiB ~ 500 held)
        before = len({m.value() for m in egress.messages})
        # The broker stopped (SIGSTOP): connections stay open and every request, read-backs
        # included, goes unanswered, the case a read-back cannot tell from a deleted record
        # by itself. The outage is the scenario's 15 s, not a wait for a condition.
        os.kill(pid, signal.SIGSTOP)
        try:
            threading.Event().wait(OUTAGE)
        finally:
            os.kill(pid, signal.SIGCONT)

        def all_seen() -> bool:
            egress.poll()
            return {m.value() for m in egress.messages} >= expected

        wait_until(
            all_seen,
            240,
            lambda: f"every record reaches egress after the outage; log:\n{scheduler.tail()}",
            interval=0,
        )
        assert scheduler.alive(), scheduler.tail()
        status, readyz = scheduler.get("/readyz")
        metrics = scheduler.get("/metrics")[1]
        assert scheduler.terminate() == 0, scheduler.tail()
        # Counted by fresh readers: the one that watched through the outage may have read
        # some records twice itself (its fetch positions reset when the broker went away).
        final = TopicReader(bootstrap, deployment.topics.egress)
        messages = read_to_end(bootstrap, final, deployment.topics.egress, deployment.partitions)
        final.close()
        dlq = TopicReader(bootstrap, deployment.topics.dlq)
        letters = read_to_end(bootstrap, dlq, deployment.topics.dlq, deployment.partitions)
        dlq.close()
    finally:
        egress.close()
        if scheduler.alive():
            scheduler.kill()
    log = scheduler.log_path.read_text(errors="replace")
    request_ids = Counter(dict(m.headers())[wire.REQUEST_ID] for m in messages)
    repeated_ids = sum(n - 1 for n in request_ids.values() if n > 1)
    if repeated_ids:
        # Where each copy sits and when it was stamped: what a duplicate's cause shows.
        places: dict[bytes, list[tuple[int, int, bytes | None]]] = {}
        for m in messages:
            headers = dict(m.headers())
            if request_ids[headers[wire.REQUEST_ID]] > 1:
                places.setdefault(headers[wire.REQUEST_ID], []).append(
                    (m.partition(), m.offset(), headers.get(wire.SCHEDULED_MS))
                )
        print(f"\nrepeated request ids (egress partition, offset, scheduled-ms): {places}")
    reasons = Counter(dict(m.headers()).get(wire.DLQ_REASON, b"?") for m in letters)
    duplicates, missing, unexpected, disorder = exactly_once_report(messages, expected, sent)
    failed_reads = log.count("not read back (")
    refetches = [
        line
        for line in metrics.splitlines()
        if line.startswith("fairstream_payload_refetches_total")
    ]
    print(
        f"\nread-back under a {OUTAGE:.0f} s broker outage: {before} on egress before it, "
        f"{len(messages)} of {len(expected)} after; {len(request_ids)} request ids, "
        f"{repeated_ids} repeated; {duplicates} duplicates, {missing} missing; dead letters "
        f"{dict(reasons)}; {failed_reads} read-backs backed off; {refetches}; /readyz {status}"
    )
    assert reasons[b"lost"] == 0
    assert not letters, dict(reasons)
    assert duplicates == missing == unexpected == 0
    assert repeated_ids == 0
    assert len(request_ids) == len(expected)
    if disorder:  # where each tenant's records sit in egress, to tell what happened
        t = disorder[0].split(":")[0].strip("b'").encode()
        mine = [m for m in messages if m.key() == t]
        where = [(m.partition(), m.offset(), m.value()[:10]) for m in mine[:3]]
        zero = [(m.partition(), m.offset()) for m in mine if m.value().startswith(t + b":000000")]
        raise AssertionError(f"{disorder[:3]}; {t!r} first at {where}, its record 0 at {zero}")
    assert status == 200, readyz


def test_read_backs_that_find_nothing_are_retried_and_never_lost(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The first 40 reads of the log find nothing (an injected miss, as from a slow broker);
    the log start, asked of the real broker, says the log still holds the records: they wait
    (the instance says so in /readyz) and go out later, in order, none of them lost."""
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    expected = produce_backlog(kafka_bootstrap, deployment.topics.ingest)
    sent = {b"t%02d" % t: PER_TENANT for t in range(TENANTS)}
    scheduler = SchedulerProcess(
        deployment,
        tmp_path,
        "--rate",
        "1000",
        "--buffer-memory",
        "1",
        env={"FAIRSTREAM_TEST_FAULTS": "miss:readback=40"},
    )
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    degraded: list[str] = []
    try:
        scheduler.start().wait_ready(timeout=120)

        def done() -> bool:
            status, text = scheduler.get("/readyz")
            if "payload-readback" in text:
                degraded.append(f"{status} {text.strip()}")
            return all_seen(egress, expected)

        wait_until(done, 240, lambda: f"every record reaches egress; log:\n{scheduler.tail()}")
        assert scheduler.terminate() == 0, scheduler.tail()
        messages = read_to_end(
            kafka_bootstrap, egress, deployment.topics.egress, deployment.partitions
        )
        dlq = TopicReader(kafka_bootstrap, deployment.topics.dlq)
        letters = read_to_end(kafka_bootstrap, dlq, deployment.topics.dlq, deployment.partitions)
        dlq.close()
    finally:
        egress.close()
        if scheduler.alive():
            scheduler.kill()
    log = scheduler.log_path.read_text(errors="replace")
    backed_off = log.count("not read back (injected miss")
    duplicates, missing, unexpected, disorder = exactly_once_report(messages, expected, sent)
    print(
        f"\n{backed_off} read-backs found nothing and backed off; egress {len(messages)} of "
        f"{len(expected)}, {duplicates} duplicates, {missing} missing; {len(letters)} dead "
        f"letters; /readyz while waiting: {degraded[:1]}"
    )
    assert backed_off == 40
    assert not letters
    assert duplicates == missing == unexpected == 0
    assert not disorder, disorder[:3]
    assert degraded, "/readyz never named the read-back condition"
    assert degraded[0].startswith("200 ready")
