"""``--egress-spread`` in the sender: which egress partition each record is produced to,
with the parts of ``parts`` and a producer that records the partition it was given."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fairstream.core.spread import SLACK
from fairstream.scheduler.emitter.send import PRUNE_EVERY, SPREAD_RETRY, home_partition
from fairstream.wire.partition import partition_of
from tests.unit.scheduler.parts import Parts, build, record
from tests.unit.scheduler.test_emit_rule import Producer, Txn

EGRESS_PARTITIONS = 4


class Placed(Producer):
    """A producer that sends nowhere and keeps the partition each record was given."""

    @property
    def placed(self) -> list[tuple[bytes | None, int | None]]:
        """(key, partition) of each record, None for the partitioner's choice (-1)."""
        return [(key, None if part < 0 else part) for _, part, key, *_ in self.written]


class SpreadTxn(Txn):
    """``Txn`` whose producer's metadata says egress has ``partitions`` (None: unknown)."""

    def __init__(self, partitions: int | None = EGRESS_PARTITIONS) -> None:
        super().__init__()
        self.producer = Placed()  # type: ignore[assignment]
        self.answer = partitions
        self.asked = 0

    def partitions(self, topic: str, timeout: float = 5.0) -> int | None:
        self.asked += 1
        return self.answer


def emit_all(parts: Parts, txn: SpreadTxn, records: int) -> list[tuple[bytes | None, int | None]]:
    """Emit until ``records`` went out, the clock moving on as the rate asks."""
    producer: Placed = txn.producer  # type: ignore[assignment]
    for _ in range(10 * records):
        if len(producer.written) >= records:
            break
        parts.sender.emit_batch(txn)
        parts.clock.advance(max(parts.sender.wait, 0.001))
    assert len(producer.written) == records
    return producer.placed


def fill_noisy_and_quiet(parts: Parts, noisy: int) -> None:
    entries = [record(parts, i, "noisy") for i in range(noisy)]
    entries.append(record(parts, noisy, "quiet", partition=1))
    parts.backlog.index(entries, parts.txn)


def test_under_a_rate_a_backlogged_tenant_spreads_and_a_quiet_one_keeps_its_partition() -> None:
    parts = build(rate=100)  # the default: spread
    txn = SpreadTxn()
    fill_noisy_and_quiet(parts, 40)
    placed = emit_all(parts, txn, 41)
    noisy = Counter(p for key, p in placed if key == b"noisy")
    assert set(noisy) == set(range(EGRESS_PARTITIONS))
    assert max(noisy.values()) - min(noisy.values()) <= 2  # only the quiet record tips it
    [quiet] = [p for key, p in placed if key == b"quiet"]
    assert quiet == partition_of("quiet", EGRESS_PARTITIONS)
    assert txn.asked == 1  # the metadata is asked once


def test_the_last_record_of_a_backlog_with_none_outstanding_goes_home() -> None:
    parts = build(rate=100, egress_spread="backlogged")
    txn = SpreadTxn()
    fill_noisy_and_quiet(parts, 3)
    placed = [p for key, p in emit_all(parts, txn, 4) if key == b"noisy"]
    # Nothing tracks slots here (no concurrency limit): "backlogged" is "more waiting".
    assert placed[-1] == partition_of("noisy", EGRESS_PARTITIONS)


@pytest.mark.parametrize(
    "settings",
    [
        {"rate": 100, "egress_spread": "key"},
        {"egress_spread": "backlogged"},  # no rate: no start stamps to keep the order by
    ],
)
def test_records_keep_their_keys_partition_unless_spread_under_a_rate(
    settings: dict[str, Any],
) -> None:
    parts = build(**settings)
    txn = SpreadTxn()
    fill_noisy_and_quiet(parts, 20)
    placed = emit_all(parts, txn, 21)
    assert {p for _, p in placed} == {None}  # the producer's partitioner: by key
    assert txn.asked == 0


def test_while_the_partitions_are_unknown_records_go_by_key_and_it_asks_again_later() -> None:
    parts = build(rate=100, egress_spread="backlogged")
    txn = SpreadTxn(partitions=None)
    fill_noisy_and_quiet(parts, 30)
    first = emit_all(parts, txn, 10)
    assert {p for _, p in first} == {None}
    assert txn.asked == 1
    txn.answer = EGRESS_PARTITIONS
    parts.clock.advance(SPREAD_RETRY)
    placed = emit_all(parts, txn, 31)[10:]
    assert txn.asked == 2
    assert len({p for key, p in placed if key == b"noisy"}) == EGRESS_PARTITIONS


def test_one_egress_partition_leaves_every_record_to_the_partitioner() -> None:
    parts = build(rate=100, egress_spread="backlogged")
    txn = SpreadTxn(partitions=1)
    fill_noisy_and_quiet(parts, 10)
    assert {p for _, p in emit_all(parts, txn, 11)} == {None}
    parts.clock.advance(2 * SPREAD_RETRY)
    parts.sender.emit_batch(txn)
    assert txn.asked == 1


@pytest.mark.parametrize("tenant", ["a", "tenant-7", "acme/alice", "ünï"])
@pytest.mark.parametrize("partitions", [1, 4, 12])
def test_home_partition_is_where_the_producers_murmur2_puts_the_key(
    tenant: str, partitions: int
) -> None:
    assert home_partition(tenant.encode(), partitions) == partition_of(tenant, partitions)


def test_with_concurrency_slots_a_partition_whose_records_stay_out_is_skipped() -> None:
    parts = build(rate=100, burst=1, egress_spread="backlogged")
    parts.rule.set_max_concurrency(1000)  # slots by request id: settlement is known
    txn = SpreadTxn()
    parts.backlog.index([record(parts, i, "noisy") for i in range(200)], parts.txn)
    placed: list[int | None] = []
    while len(placed) < 200:  # every worker settles at once, but partition 3's never does
        before = len(txn.producer.placed)  # type: ignore[attr-defined]
        parts.sender.emit_batch(txn)
        new = txn.producer.placed[before:]  # type: ignore[attr-defined]
        settled = [
            b"fairstream.ingest-0-%d" % (len(placed) + i) for i, (_, p) in enumerate(new) if p != 3
        ]
        parts.rule.settled(settled)
        placed.extend(p for _, p in new)
        parts.clock.advance(max(parts.sender.wait, PRUNE_EVERY))
    counts = Counter(placed)
    assert counts[3] <= SLACK + 1
    assert {counts[p] for p in (0, 1, 2)} <= set(range(60, 70))
