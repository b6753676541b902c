"""The soak's load and what it reads back: paced producers (the SDK and a plain
confluent-kafka client) with the ledger of what they were told, read_committed readers of
egress and dead letters, and the simulated API's served-requests files (``soak_api.py``).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import cast

from confluent_kafka import Consumer, KafkaError, Message, Producer

import fairstream
from fairstream import wire
from fairstream_dev.harness.kafka import unique

PARTITIONS = 8  # ingest partitions
TENANTS_PER_PRODUCER = 20
NOISY_SHARE = 0.4  # of a producer's records, for its first tenant
EXPIRED_SHARE = 0.01  # records sent with a deadline already passed
END = b"__end-of-soak__"  # key of the markers written after the schedulers stopped

Record = tuple[str, int]  # (tenant, sequence number)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def parse_value(value: bytes | None) -> Record | None:
    """``b"sdk-03|123"`` -> ("sdk-03", 123); None for anything else."""
    if not value:
        return None
    tenant, sep, seq = value.partition(b"|")
    if not sep or not seq.isdigit():
        return None
    return tenant.decode(), int(seq)


# -- producers ---------------------------------------------------------------------------------


class Ledger:
    """What the producers were told: acknowledged records, and those sent already expired."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[Record] = set()
        self.failed: list[str] = []
        self.expired: set[Record] = set()  # sent with a passed deadline
        self.by_kind: Counter[str] = Counter()

    def delivered(self, kind: str, err: KafkaError | None, msg: Message) -> None:
        record = parse_value(msg.value())
        with self.lock:
            if err is not None:
                self.failed.append(f"{kind} {record}: {err}")
            elif record is not None:
                self.acked.add(record)
                self.by_kind[kind] += 1


class PacedProducer:
    """Writes ``rate`` records/s for its tenants on a thread of its own until stopped."""

    def __init__(self, kind: str, rate: float, seed: int, ledger: Ledger) -> None:
        self.kind = kind
        self.rate = rate
        self.rng = random.Random(f"{seed}-{kind}")
        self.ledger = ledger
        self.tenants = [f"{kind}-{i:02d}" for i in range(TENANTS_PER_PRODUCER)]
        self.sent: Counter[str] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{kind}", daemon=True)

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(300)

    def _pick(self) -> str:
        if self.rng.random() < NOISY_SHARE:
            return self.tenants[0]
        return self.rng.choice(self.tenants[1:])

    def _run(self) -> None:
        try:
            self._produce_until_stopped()
        except Exception as exc:  # reported: a producer that dies makes the run fail
            self.errors.append(repr(exc))
            log(f"producer {self.kind} failed: {exc!r}")

    def _produce_until_stopped(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            tenant = self._pick()
            seq = self.sent[tenant]
            self.sent[tenant] += 1
            expired = self.rng.random() < EXPIRED_SHARE
            if expired:
                with self.ledger.lock:
                    self.ledger.expired.add((tenant, seq))
            self.send(tenant, seq, expired)
            next_at += interval
            # Pacing the load, not waiting for the system under test.
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        self.flush()

    def send(self, tenant: str, seq: int, expired: bool) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError


class SdkProducer(PacedProducer):
    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int, ledger: Ledger):
        super().__init__("sdk", rate, seed, ledger)
        self.producer = fairstream.Producer(
            bootstrap,
            topic,
            on_delivery=lambda err, msg: ledger.delivered("sdk", err, msg),
            log_level=3,
        )

    def send(self, tenant: str, seq: int, expired: bool) -> None:
        deadline = int(time.time() * 1000) - 1000 if expired else None
        self.producer.submit(
            tenant,
            b"%s|%d" % (tenant.encode(), seq),
            request_id=f"{tenant}-{seq}",
            deadline=deadline,
        )

    def flush(self) -> None:
        try:
            self.producer.flush(120)
        except fairstream.DeliveryError as exc:
            self.errors.append(str(exc))


class PlainProducer(PacedProducer):
    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int, ledger: Ledger):
        super().__init__("plain", rate, seed, ledger)
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "log_level": 3,
            }
        )

    def send(self, tenant: str, seq: int, expired: bool) -> None:
        headers: list[tuple[str, str | bytes | None]] = []
        if expired:
            headers.append((wire.DEADLINE_MS, b"%d" % (int(time.time() * 1000) - 1000)))
        self.producer.produce(
            self.topic,
            b"%s|%d" % (tenant.encode(), seq),
            tenant.encode(),
            headers=headers,
            on_delivery=lambda err, msg: self.ledger.delivered("plain", err, msg),
        )
        self.producer.poll(0)

    def flush(self) -> None:
        left = self.producer.flush(120)
        if left:
            self.errors.append(f"{left} records still unacknowledged after 120 s")


# -- readers -----------------------------------------------------------------------------------


class TopicLog:
    """Everything a read_committed consumer sees of a topic, on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("soak-reader"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "log_level": 3,
            }
        )
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        # (partition, record or None, fairstream-dlq-reason or None) in the order read
        self.entries: list[tuple[int, Record | None, str | None]] = []
        self.ends: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"read-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.consume(num_messages=1000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF and not err.retriable():
                        self.errors.append(err.str())
                    continue
                partition = msg.partition() or 0
                if msg.key() == END:
                    self.ends.add(partition)
                    continue
                reason = None
                headers = cast("list[tuple[str, bytes | None]]", msg.headers() or [])
                for name, raw in headers:
                    if name == wire.DLQ_REASON and raw is not None:
                        reason = raw.decode()
                with self.lock:
                    self.entries.append((partition, parse_value(msg.value()), reason))
        self.consumer.close()

    def records(self) -> list[tuple[int, Record | None, str | None]]:
        with self.lock:
            return list(self.entries)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


class HandledLog:
    """The lines the simulated API wrote (``soak_api.py``), read as the files grow."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._positions: dict[Path, int] = {}
        # (time ns, record) per request served, in no particular order
        self.served: list[tuple[int, Record]] = []

    def poll(self) -> None:
        for path in sorted(self.directory.glob("*.tsv")):
            start = self._positions.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # whole lines only
            for line in chunk[:end].splitlines():
                fields = line.split(b"\t")
                record = parse_value(fields[1]) if len(fields) == 4 else None
                if record is not None:
                    self.served.append((int(fields[0]), record))
            self._positions[path] = start + end

    def distinct(self) -> set[Record]:
        return {record for _, record in self.served}
