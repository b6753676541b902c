"""What the ingest side holds before the emitter indexes it, bounded over all partitions:
the readers' prefetch (``readers.prefetch``) and the parsed records handed over
(``handoff.high_water``)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from fairstream.scheduler.handoff import IN_FLIGHT, high_water
from fairstream.scheduler.ingest.readers import (
    FETCH_BOUNDS,
    FETCH_BUDGET,
    QUEUE_BOUNDS,
    QUEUE_BUDGET,
    Readers,
    prefetch,
    reader_config,
)


def test_the_readers_share_one_prefetch_budget_within_bounds() -> None:
    lone, twelve, many = prefetch(1), prefetch(12), prefetch(10_000)
    assert lone == {
        "max.partition.fetch.bytes": FETCH_BOUNDS[1],
        "queued.max.messages.kbytes": QUEUE_BOUNDS[1] // 1024,
    }
    assert twelve == {
        "max.partition.fetch.bytes": FETCH_BUDGET // 12,
        "queued.max.messages.kbytes": QUEUE_BUDGET // 12 // 1024,
    }
    assert many == {
        "max.partition.fetch.bytes": FETCH_BOUNDS[0],
        "queued.max.messages.kbytes": QUEUE_BOUNDS[0] // 1024,
    }
    for n in range(1, 200):
        share = prefetch(n)
        # Never more than the budget in all, unless each is at its floor.
        fetch, queue = share["max.partition.fetch.bytes"], share["queued.max.messages.kbytes"]
        assert n * fetch <= max(FETCH_BUDGET, n * FETCH_BOUNDS[0])
        assert n * queue * 1024 <= max(QUEUE_BUDGET, n * QUEUE_BOUNDS[0])
    assert prefetch(0) == lone


class _Reader:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.assigned: list[TopicPartition] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions

    def close(self) -> None:
        pass


def test_a_reader_is_opened_with_its_share_and_keeps_it_when_moved() -> None:
    made: list[_Reader] = []

    def connect(config: dict[str, Any]) -> _Reader:
        made.append(_Reader(config))
        return made[-1]

    readers = Readers(reader_config({}, "app"), "ingest", "holding", connect=connect)
    readers.open(0, 5, among=12)
    readers.open(~0, 0, among=12)
    readers.open(0, 9, among=1)  # moved: the same reader, its share unchanged
    assert len(made) == 2
    assert made[0].config["max.partition.fetch.bytes"] == FETCH_BUDGET // 12
    assert made[0].config["isolation.level"] == "read_committed"  # the reader's own settings
    assert made[0].assigned == [TopicPartition("ingest", 0, 9)]
    assert made[1].assigned == [TopicPartition("holding", 0, 0)]


def test_parsed_records_in_flight_are_bounded_over_all_partitions() -> None:
    assert high_water(1) == 20_000
    assert high_water(12) == IN_FLIGHT // 12
    assert high_water(1000) == 4096  # at least a batch the emitter takes at once
    assert high_water(0) == high_water(1)
