"""One reader per owned ingest partition, so that a burst in one never delays another.

A librdkafka consumer keeps one prefetch queue for all its partitions: while a burst fills
it, a quiet partition's next record waits behind the burst's prefetched records (measured
here: up to half a second behind a 300,000-record burst, with the scheduler's two busy
threads draining the queue). So the group member only holds the membership (its
partitions stay paused) and each owned partition is read by a consumer of its own, outside
the group, assigned by hand at the partition's low-water mark. The ingest thread takes a
slice from each reader in turn, and skips a reader whose records are still waiting for the
emitter: that reader's own bounded prefetch then stops fetching, and nothing else slows.

What the readers prefetch is bounded over all of them (``prefetch``), not per reader: a
librdkafka fetch is bounded in bytes on the wire, and a compressed batch can be many times
its size once decompressed, with a few hundred bytes of librdkafka's own per record. At 1 MiB
per fetch and 4 MiB of queue per reader, each of 12 readers of lz4 batches held 36-39 MiB
before the ingest thread took anything (430 MiB in all); an instance owning 48 partitions
would have held four times that. Shared out of ``FETCH_BUDGET`` and ``QUEUE_BUDGET``, the
readers of 12 partitions held 7 MiB each, and a lone partition's reader still fetches a MiB.

Caller: the ingest thread only. Affects: the readers' positions.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Message, TopicPartition

from fairstream.adapters.clients import assigned_consumer_config
from fairstream.adapters.ports import AssignedReader, ConsumerFactory, connect_consumer

log = logging.getLogger("fairstream.readers")

SLICE = 1000  # records taken from one reader before the next one's turn
# Over all the readers of an instance: bytes fetched at once (as on the wire, compressed),
# and bytes prefetched into their queues; each reader gets its share, within these bounds.
FETCH_BUDGET = 1536 * 1024
QUEUE_BUDGET = 6 * 1024 * 1024
FETCH_BOUNDS = (64 * 1024, 1024 * 1024)  # a reader's max.partition.fetch.bytes
QUEUE_BOUNDS = (512 * 1024, 4 * 1024 * 1024)  # a reader's queued.max.messages.kbytes (bytes)


def prefetch(readers: int) -> dict[str, int]:
    """The prefetch settings of one reader among ``readers`` ingest readers: its share of
    ``FETCH_BUDGET`` and ``QUEUE_BUDGET``, within ``FETCH_BOUNDS`` and ``QUEUE_BOUNDS``."""
    share = max(1, readers)
    fetch = min(max(FETCH_BUDGET // share, FETCH_BOUNDS[0]), FETCH_BOUNDS[1])
    queue = min(max(QUEUE_BUDGET // share, QUEUE_BOUNDS[0]), QUEUE_BOUNDS[1])
    return {"max.partition.fetch.bytes": fetch, "queued.max.messages.kbytes": queue // 1024}


def reader_config(connection: dict[str, Any], app_id: str) -> dict[str, Any]:
    """A reader's settings: no group duties, read_committed, a bounded queue of its own."""
    return assigned_consumer_config(
        connection,
        f"{app_id}.reader",
        {
            "auto.offset.reset": "earliest",
            # Only committed ingest records are requests; aborted ones never reach egress.
            "isolation.level": "read_committed",
            "enable.partition.eof": True,  # tells the warm-up a partition has nothing more
            **prefetch(1),  # a lone reader's; ``Readers.open`` gives each its share
            "fetch.queue.backoff.ms": 5,
            "fetch.wait.max.ms": 500,
        },
    )


class Readers:
    """Readers keyed by ingest partition; a negative key ``~p`` reads partition ``p`` of
    ``holding`` (the holding log, ``scheduler.holding``)."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        holding: str | None = None,
        connect: ConsumerFactory = connect_consumer,
    ) -> None:
        self._config = config
        self.topic = topic
        self.holding = holding
        self._connect = connect  # confluent-kafka's Consumer, or a test's (``adapters.ports``)
        self._readers: dict[int, AssignedReader] = {}
        self._turn = 0

    def open(self, partition: int, offset: int, *, among: int = 1) -> None:
        """Read ``partition`` from ``offset`` (a fresh reader, or the existing one moved).
        ``among``: the ingest partitions this instance reads, whose readers share the
        prefetch budget (``prefetch``); a reader keeps the share it was opened with."""
        reader = self._readers.get(partition)
        if reader is None:
            config = {**self._config, **prefetch(among)}
            reader = self._readers[partition] = self._connect(config)
        # assign() at an offset drops anything the reader had prefetched.
        if partition < 0 and self.holding is not None:
            reader.assign([TopicPartition(self.holding, ~partition, offset)])
        else:
            reader.assign([TopicPartition(self.topic, partition, offset)])

    def close(self, partition: int) -> None:
        reader = self._readers.pop(partition, None)
        if reader is not None:
            reader.close()

    def close_all(self) -> None:
        for partition in list(self._readers):
            self.close(partition)

    def take(self, skip: set[int]) -> list[tuple[int, list[Message]]]:
        """A slice from each reader not in ``skip``, starting at a different one each time:
        (partition, its records) for each reader that had some."""
        readers = [(p, r) for p, r in self._readers.items() if p not in skip]
        if not readers:
            return []
        self._turn = (self._turn + 1) % len(readers)
        out: list[tuple[int, list[Message]]] = []
        for partition, reader in readers[self._turn :] + readers[: self._turn]:
            batch = reader.consume(num_messages=SLICE, timeout=0)
            if batch:
                out.append((partition, batch))
        return out

    def __len__(self) -> int:
        return len(self._readers)
