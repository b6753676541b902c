"""Credit from the egress group's committed offsets (``--egress-group``), on the real broker.

The workers are a plain confluent-kafka consumer that sends no feedback: it takes one
record at a time, works ``CALL`` seconds on it and commits after each, so it takes about
1/CALL records a second, far below ``--rate``. One noisy tenant has a big backlog; a quiet
tenant sends a few records while it drains. Egress has one partition, FIFO: whatever the
scheduler released ahead of the quiet records is read first.

With ``--egress-group`` naming the consumer's group, the scheduler holds what it releases
to what the group consumes in about half a second: the egress lag (counted here from the
topic's end offset and the group's committed one) stays a few dozen records while hundreds
of noisy records wait, and the quiet records are taken after a few dozen noisy ones, not
behind the backlog. At ``--rate`` without the bound the lag would grow by the rate less
the consumer's speed every second.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess

RATE = 100.0  # records a second the scheduler may release: five times the consumer's speed
CALL = 0.05  # seconds the consumer works on each record
NOISY = 800  # the noisy tenant's backlog
QUIET = 5
LAG_LIMIT = 60  # generous: the bound is about 20/s * 0.5 s * 1.2 + 2, plus a refill
NOISY_AHEAD_LIMIT = 80  # noisy records taken after the quiet ones were produced, at most


class PlainConsumer:
    """A consumer that commits after each call, in a thread; remembers what it took."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self.consumer.subscribe([topic])
        self.taken: list[str] = []  # tenants, in the order taken
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="plain-consumer")

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.errors.append(str(err))
                continue
            time.sleep(CALL)  # the paid call
            self.taken.append((msg.key() or b"").decode())
            self.consumer.commit(message=msg, asynchronous=False)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()


def egress_lag(admin: AdminClient, topic: str, group: str) -> int | None:
    """The topic's end offset less the group's committed one (None: nothing committed)."""
    tp = TopicPartition(topic, 0)
    ends = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)  # type: ignore[no-untyped-call]
    end = ends[tp].result(timeout=10).offset
    answer = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [tp])], request_timeout=10
    )
    committed = [p.offset for p in answer[group].result(timeout=10).topic_partitions or []]
    if not committed or committed[0] < 0:
        return None
    return int(end - committed[0])


def produce(bootstrap: str, topic: str, tenant: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(count):
        producer.produce(topic, key=tenant.encode(), value=f"{tenant}-{i}".encode())
    assert producer.flush(30) == 0


def test_the_egress_groups_lag_bounds_what_is_released(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=1).create()
    egress = deployment.topics.egress
    group = unique("plain-workers")
    scheduler = SchedulerProcess(
        deployment,
        tmp_path,
        "--rate",
        str(RATE),
        "--feedback-topic",
        "",  # no feedback at all: the credit is the group's lag alone
        "--egress-group",
        group,
    )
    consumer = PlainConsumer(kafka_bootstrap, egress, group)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    scheduler.start()
    try:
        scheduler.wait_ready()
        consumer.start()
        produce(kafka_bootstrap, deployment.topics.ingest, "noisy", NOISY)
        lags: list[int] = []

        def sampled(count: int) -> bool:
            lag = egress_lag(admin, egress, group)
            if lag is not None:
                lags.append(lag)
            return len(consumer.taken) >= count and not consumer.errors

        # Some seconds of the noisy backlog draining at the consumer's speed.
        wait_until(
            lambda: sampled(60),
            90,
            lambda: (
                f"the consumer took 60 records (took {len(consumer.taken)}, errors "
                f"{consumer.errors}); scheduler log:\n{scheduler.tail()}"
            ),
            interval=0.2,
        )
        bound = scheduler.metric("fairstream_egress_lag_bound")
        assert bound is not None, "no bound gauge"
        assert bound > 0, f"no bound applies: {bound}"
        before = len(consumer.taken)
        produce(kafka_bootstrap, deployment.topics.ingest, "quiet", QUIET)
        wait_until(
            lambda: sampled(0) and consumer.taken.count("quiet") == QUIET,
            90,
            lambda: (
                f"the quiet tenant's records were taken (took "
                f"{consumer.taken.count('quiet')} of {QUIET}, {len(consumer.taken)} in all)"
            ),
            interval=0.2,
        )
        after = consumer.taken[before:]
        last_quiet = max(i for i, tenant in enumerate(after) if tenant == "quiet")
        noisy_ahead = after[:last_quiet].count("noisy")
        # The noisy backlog still waits in the scheduler, not in egress.
        assert consumer.taken.count("noisy") < NOISY - 100
        assert noisy_ahead <= NOISY_AHEAD_LIMIT, (
            f"{noisy_ahead} noisy records were taken before the last quiet one"
        )
        assert lags, "the group's lag was never read"
        assert max(lags) <= LAG_LIMIT, f"the egress lag reached {max(lags)} (samples {lags})"
        reported = scheduler.metric("fairstream_egress_lag")
        assert reported is not None
        assert reported >= 0
    finally:
        consumer.stop()
        scheduler.terminate()
