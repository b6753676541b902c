"""An in-memory Kafka behind the scheduler's ports (``fairstream.adapters.ports``), for
broker-free tests of the data path.

What it keeps of Kafka's semantics:

- topics of partitions of records, appended in order; a record without a partition goes
  where a Java client would put its key (murmur2);
- transactional producers: ``init_transactions`` bumps the transactional id's epoch, which
  fences the older producer with that id (its next call fails, fatally) and aborts what it
  left open; records and offsets of a transaction become visible (``read_committed``) when
  it commits, never when it aborts;
- consumer-group offsets sent with a transaction, refused for a generation that is no
  longer the group's (``ILLEGAL_GENERATION``, abortable), as KIP-447 has the coordinator do;
- consumers of partitions assigned by hand (``AssignedReader``) that read committed:
  aborted records are skipped, and nothing at or past an open transaction's first record
  (the last stable offset) is read; the end of a partition is said once per position;
- a log start a test moves (``trim``: retention deleted what lies below it), and records any
  producer appends outside a transaction (``append``);
- faults a test injects into the next calls of a kind (``fail``).

It is a test driver, not a broker: no replication, no time, no sizes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from fairstream.wire.partition import partition_of_key


class Outcome:
    """What became of one transaction: "open", "committed" or "aborted". Its records share
    it, so a commit or an abort changes one object, whatever the number of records."""

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state


COMMITTED = Outcome("committed")  # records appended outside any transaction


@dataclass(slots=True)
class Stored:
    """One record in a partition, and the outcome of the transaction that wrote it."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, str | bytes | None]]
    timestamp: int | None
    outcome: Outcome = COMMITTED

    @property
    def state(self) -> str:
        """Its transaction's outcome: "open", "committed" or "aborted"."""
        return self.outcome.state


@dataclass(frozen=True)
class GroupMetadata:
    """What ``consumer_group_metadata()`` gives: the group and the generation it is of."""

    group: str
    generation: int


@dataclass
class MemoryCluster:
    """Topics, group offsets and transactional ids, shared by the producers it makes."""

    partitions: dict[str, int] = field(default_factory=dict)  # topic -> partition count
    default_partitions: int = 1
    topics: dict[str, list[list[Stored]]] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)  # group -> its generation
    epochs: dict[str, int] = field(default_factory=dict)  # transactional id -> epoch
    starts: dict[tuple[str, int], int] = field(default_factory=dict)  # log starts
    _faults: dict[str, deque[KafkaError]] = field(default_factory=dict)
    _open: dict[str, MemoryProducer] = field(default_factory=dict)  # id -> its producer
    # Keyed records' partitions, by partition count, then key: a test appends hundreds of
    # thousands of records of a few keys, and murmur2 in Python would be most of its time.
    _homes: dict[int, dict[bytes | None, int]] = field(default_factory=dict)

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        """A producer on ``config`` (a ``ProducerFactory``)."""
        return MemoryProducer(self, str(config["transactional.id"]))

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        """A consumer of partitions assigned by hand (a ``ConsumerFactory``)."""
        return MemoryConsumer(self, bool(config.get("enable.partition.eof", False)))

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        partition: int | None = None,
    ) -> int:
        """A record written outside any transaction (a plain producer): its offset."""
        log = self.log(topic)
        if partition is None:
            partition = self.home(key, len(log))
        log[partition].append(Stored(key, value, list(headers or []), None))
        return len(log[partition]) - 1

    def home(self, key: bytes | None, count: int) -> int:
        """The partition of ``count`` a record keyed ``key`` goes to (a Java client's)."""
        homes = self._homes.get(count)
        if homes is None:
            homes = self._homes[count] = {}
        home = homes.get(key)
        if home is None:
            home = homes[key] = partition_of_key(key or b"", count)
        return home

    def extend(self, topic: str, partition: int, keys: list[bytes], values: list[bytes]) -> None:
        """``append`` of many records (``keys[i]``, ``values[i]``) to one partition, without
        headers."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        stored = map(Stored, keys, values, repeat(()), repeat(None))
        self.log(topic)[partition].extend(stored)

    def trim(self, topic: str, partition: int, start: int) -> None:
        """Retention deleted the records below ``start``: the log starts there."""
        self.starts[(topic, partition)] = start

    def log(self, topic: str) -> list[list[Stored]]:
        if topic not in self.topics:
            count = self.partitions.get(topic, self.default_partitions)
            self.topics[topic] = [[] for _ in range(count)]
        return self.topics[topic]

    def committed(self, topic: str, partition: int | None = None) -> list[Stored]:
        """What a ``read_committed`` reader sees of ``topic`` (one partition, or all in
        partition order)."""
        parts = self.log(topic)
        chosen = parts if partition is None else [parts[partition]]
        return [r for records in chosen for r in records if r.state == "committed"]

    def join(self, group: str) -> GroupMetadata:
        """A new generation of ``group`` (a rebalance): metadata of older ones is refused."""
        self.generations[group] = self.generations.get(group, 0) + 1
        return GroupMetadata(group, self.generations[group])

    def fail(self, call: str, error: KafkaError, times: int = 1) -> None:
        """The next ``times`` calls of ``call`` (a producer method's name) raise ``error``
        before they take effect."""
        self._faults.setdefault(call, deque()).extend([error] * times)

    def fault(self, call: str) -> None:
        if not self._faults:
            return
        faults = self._faults.get(call)
        if faults:
            raise KafkaException(faults.popleft())


class MemoryProducer:
    """A transactional producer of a ``MemoryCluster`` (``TransactionalProducer``)."""

    def __init__(self, cluster: MemoryCluster, transactional_id: str) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.epoch: int | None = None  # set by init_transactions
        self.open = False
        self._outcome = Outcome("open")  # the open transaction's, shared by its records
        self._offsets: tuple[str, dict[tuple[str, int], int]] | None = None

    def _alive(self) -> None:
        if self.epoch is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "init_transactions first"))
        if self.cluster.epochs[self.transactional_id] != self.epoch:
            raise KafkaException(
                KafkaError(
                    KafkaError._FENCED,
                    "Producer fenced by newer instance: old epoch",
                    fatal=True,
                )
            )

    def init_transactions(self, timeout: float = -1) -> None:
        cluster = self.cluster
        cluster.fault("init_transactions")
        older = cluster._open.pop(self.transactional_id, None)
        if older is not None:
            older._end("aborted")  # what the older producer left open
        self.epoch = cluster.epochs.get(self.transactional_id, 0) + 1
        cluster.epochs[self.transactional_id] = self.epoch

    def begin_transaction(self) -> None:
        self._alive()
        if self.open:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is open"))
        self.open = True
        self._outcome = Outcome("open")
        self.cluster._open[self.transactional_id] = self

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        cluster = self.cluster
        # One test produces hundreds of thousands of records: the three checks share one
        # branch, taken only when one of them has something to say.
        fenced = cluster.epochs.get(self.transactional_id) != self.epoch
        if fenced or not self.open or cluster._faults:
            self._alive()  # raises when fenced (or before init_transactions)
            if not self.open:
                raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
            cluster.fault("produce")
        log = cluster.topics.get(topic) or cluster.log(topic)
        if partition < 0:
            partition = cluster.home(key, len(log))
        log[partition].append(Stored(key, value, headers or (), timestamp or None, self._outcome))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float = -1
    ) -> None:
        self._alive()
        self.cluster.fault("send_offsets_to_transaction")
        meta: GroupMetadata = group_metadata
        if self.cluster.generations.get(meta.group) != meta.generation:
            raise KafkaException(
                KafkaError(
                    KafkaError.ILLEGAL_GENERATION,
                    "Specified group generation id is not valid",
                    txn_requires_abort=True,
                )
            )
        self._offsets = (meta.group, {(p.topic, p.partition): p.offset for p in positions})

    def commit_transaction(self, timeout: float = -1) -> None:
        self._alive()
        self.cluster.fault("commit_transaction")
        if self._offsets is not None:
            group, offsets = self._offsets
            self.cluster.offsets.setdefault(group, {}).update(offsets)
        self._end("committed")

    def abort_transaction(self, timeout: float = -1) -> None:
        self._alive()
        self.cluster.fault("abort_transaction")
        self._end("aborted")

    def _end(self, state: str) -> None:
        self._outcome.state = state  # every record of the transaction at once
        self._offsets = None
        self.open = False
        if self.cluster._open.get(self.transactional_id) is self:
            del self.cluster._open[self.transactional_id]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        names = [topic] if topic is not None else list(self.cluster.topics)
        return SimpleNamespace(
            topics={
                name: SimpleNamespace(
                    error=None, partitions=dict.fromkeys(range(len(self.cluster.log(name))))
                )
                for name in names
            }
        )


class MemoryConsumer:
    """A ``read_committed`` consumer of a ``MemoryCluster``'s partitions, assigned by hand
    (``AssignedReader``)."""

    def __init__(self, cluster: MemoryCluster, eof: bool) -> None:
        self.cluster = cluster
        self.eof = eof  # enable.partition.eof
        self.positions: dict[tuple[str, int], int] = {}
        self._told: set[tuple[str, int, int]] = set()  # ends of partitions said, by position
        self.closed = False

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {(tp.topic, tp.partition): tp.offset for tp in partitions}

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        cluster = self.cluster
        cluster.fault("consume")
        out: list[Message] = []
        append = out.append
        for (topic, partition), position in self.positions.items():
            records = cluster.log(topic)[partition]
            at = max(position, cluster.starts.get((topic, partition), 0))
            # Records are read up to the last stable offset (the first of a transaction still
            # open), and as many as are asked for.
            stop = min(len(records), at + num_messages - len(out))
            for record in records[at:stop]:
                state = record.outcome.state
                if state == "open":
                    break  # the last stable offset: nothing past it is read yet
                if state == "committed":
                    # Positional: Message's keywords cost four times its construction, and a
                    # test reads hundreds of thousands.
                    append(
                        Message(
                            topic, partition, at, record.key, record.value, record.headers or None
                        )
                    )
                at += 1
            self.positions[(topic, partition)] = at
            end = (topic, partition, at)
            if self.eof and at == len(records) and end not in self._told:
                self._told.add(end)
                eof = KafkaError(KafkaError._PARTITION_EOF, "end of partition")
                out.append(Message(topic=topic, partition=partition, offset=at, error=eof))
        return out

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        self.cluster.fault("get_watermark_offsets")
        key = (partition.topic, partition.partition)
        return self.cluster.starts.get(key, 0), len(self.cluster.log(partition.topic)[key[1]])

    def close(self) -> None:
        self.closed = True
