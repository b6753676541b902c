"""A flood over its tenant's backlog cap: the overflow is dead-lettered without holding anyone.

One tenant writes far more records than its ``--max-backlog`` into one partition while a
quiet tenant keeps sending on another. Judged on counts and on the order the scheduler wrote
things (the CreateTime stamps of its own egress and dead-letter records, one clock), not on
seconds: a quiet record that arrived with most of the overflow still to be dead-lettered
goes out before the overflow's last letter. Written first (the old emitter), the whole
overflow went out ahead of every quiet record that arrived during it.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from pathlib import Path

from confluent_kafka import Message, Producer

from fairstream import wire
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import read_to_end

FLOOD, QUIET = b"flood", b"quiet"
FLOOD_RECORDS = 200_000
CAP = 2_000
QUIET_RECORDS = 150


def created_ms(msg: Message) -> int:
    return msg.timestamp()[1]


def test_quiet_records_go_out_while_the_overflow_is_dead_lettered(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    topics = deployment.topics
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "500", "--max-backlog", str(CAP)
    ).start()
    scheduler.wait_ready()
    egress = TopicReader(kafka_bootstrap, topics.egress)
    dlq = TopicReader(kafka_bootstrap, topics.dlq)
    stop = threading.Event()

    def quiet() -> None:
        # 50 records/s on partition 1, from before the flood until after it: a trickle that
        # keeps arriving while the overflow is written.
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
        for i in range(QUIET_RECORDS):
            producer.produce(topics.ingest, key=QUIET, value=b"q-%d" % i, partition=1)
            producer.poll(0)
            if stop.wait(0.02):
                break
        producer.flush(30)

    sender = threading.Thread(target=quiet, daemon=True)
    try:
        sender.start()
        flood = Producer(
            {"bootstrap.servers": kafka_bootstrap, "linger.ms": 20, "batch.size": 1_000_000}
        )
        for i in range(FLOOD_RECORDS):
            while True:
                try:
                    flood.produce(topics.ingest, key=FLOOD, value=b"f-%d" % i, partition=0)
                    break
                except BufferError:
                    flood.poll(0.05)
        assert flood.flush(60) == 0
        sender.join(60)

        def settled() -> tuple[int, int]:
            egress.poll()
            dlq.poll()
            flood_out = sum(1 for m in [*egress.messages, *dlq.messages] if m.key() == FLOOD)
            quiet_out = sum(1 for m in egress.messages if m.key() == QUIET)
            return flood_out, quiet_out

        wait_until(
            lambda: settled()[0] >= FLOOD_RECORDS and settled()[1] >= QUIET_RECORDS,
            120,
            lambda: f"every flood record settled and every quiet one emitted: {settled()}",
            interval=0,
        )
        assert scheduler.terminate() == 0, scheduler.tail()
        # Everything the two topics will ever hold, so that no late duplicate goes unseen.
        letters = read_to_end(kafka_bootstrap, dlq, topics.dlq, 2)
        messages = read_to_end(kafka_bootstrap, egress, topics.egress, 2)
    finally:
        stop.set()
        egress.close()
        dlq.close()
        if scheduler.alive():
            scheduler.kill()

    # Every flood record exactly once: emitted within its cap, or dead-lettered backlog-full.
    emitted = [m.value() for m in messages if m.key() == FLOOD]
    dead = [m.value() for m in letters]
    assert all(m.key() == FLOOD for m in letters)
    assert {dict(m.headers())[wire.DLQ_REASON] for m in letters} == {wire.BACKLOG_FULL.encode()}
    assert sorted(emitted + dead) == sorted(b"f-%d" % i for i in range(FLOOD_RECORDS))
    assert len(dead) >= FLOOD_RECORDS - 10 * CAP, "the flood went over its cap"
    # The coordinates a dead letter carries are its own.
    for m in letters[:: len(letters) // 50]:
        headers = dict(m.headers())
        assert headers[wire.DLQ_TOPIC] == topics.ingest.encode()
        assert headers[wire.DLQ_PARTITION] == b"0"
        assert int(headers[wire.DLQ_OFFSET]) == int(m.value()[2:])

    # Quiet records that arrived while the overflow was written went out among its letters,
    # not after them.
    written = sorted(created_ms(m) for m in letters)
    first, last = written[0], written[-1]
    quiet = [m for m in messages if m.key() == QUIET]
    assert sorted(m.value() for m in quiet) == sorted(b"q-%d" % i for i in range(QUIET_RECORDS))
    during = [
        (int(dict(m.headers())[wire.ENQUEUED_MS]), created_ms(m))
        for m in quiet
        if first <= int(dict(m.headers())[wire.ENQUEUED_MS]) < last
    ]
    overtaken = [
        bisect_left(written, out) - bisect_right(written, arrived) for arrived, out in during
    ]
    print(
        f"\noverflow: {len(dead)} dead letters in {(last - first) / 1000:.2f} s, "
        f"{len(during)} quiet records arrived meanwhile, "
        f"dead letters written ahead of them: max {max(overtaken, default=0)}"
    )
    assert during, "quiet records arrived while the overflow was dead-lettered"
    # Those that arrived with most of the overflow still unwritten went out before its last
    # letter: written ahead of emission (the old emitter), every one of them came after all
    # of it. (How many letters overtook each depends on the machine's speed: printed.)
    early = [
        (arrived, out)
        for arrived, out in during
        if bisect_right(written, arrived) < len(written) // 2
    ]
    assert early, "quiet records arrived in the first half of the overflow"
    behind = [(arrived, out) for arrived, out in early if out >= last]
    assert not behind, f"{len(behind)} of {len(early)} came after the whole overflow"
