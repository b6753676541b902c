"""The open transaction's checkpoint (``checkpoint.Checkpoint``) on its own: its tallies,
which partitions changed, the progress records and commit tokens, and what a commit hands
on. No clock is read: the checkpoint counts what it is told."""

from __future__ import annotations

from fairstream import wire
from fairstream.scheduler import progress as codec
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress
from fairstream.scheduler.recovery import holding_id
from tests.unit.scheduler.parts import build
from tests.unit.scheduler.test_emit_rule import Txn


def test_tallies_are_counted_at_the_commit_and_then_start_again() -> None:
    parts = build()
    checkpoint = parts.checkpoint
    tally = checkpoint.tally()
    tally.record("A", 0.5)  # as the sender appends them
    tally.record("A", 1.0)
    checkpoint.emitted(3)
    tally.record("B", 0.1)
    tally.record("A", 2.0)
    checkpoint.emitted(1)
    checkpoint.lettered(wire.EXPIRED)
    checkpoint.lettered(wire.BACKLOG_FULL, 4)
    assert checkpoint.tally().by_tenant() == {"A": [0.5, 1.0, 2.0], "B": [0.1]}
    assert parts.sample("fairstream_egress_records_total") == 0  # not before the commit
    checkpoint.committed([])
    assert parts.sample("fairstream_egress_records_total") == 4
    assert parts.sample("fairstream_egress_cost_total") == 4
    assert parts.sample("fairstream_dead_letters_total", reason=wire.BACKLOG_FULL) == 4
    assert (len(checkpoint.tally()), checkpoint.cost, checkpoint.letters) == (0, 0, {})
    assert tally.by_tenant() == {"A": [0.5, 1.0, 2.0], "B": [0.1]}  # committed: unchanged
    assert checkpoint.observed.emitted_by_tenant == {"A": 3, "B": 1}


def test_an_abort_discards_the_tallies() -> None:
    parts = build()
    parts.checkpoint.tally().record("A", 0.5)
    parts.checkpoint.emitted(1)
    parts.checkpoint.lettered(wire.EXPIRED)
    parts.checkpoint.discard()
    parts.checkpoint.committed([])
    assert parts.sample("fairstream_egress_records_total") == 0
    assert parts.sample("fairstream_dead_letters_total", reason=wire.EXPIRED) is None


def test_only_partitions_whose_progress_moved_since_committed_are_changed() -> None:
    checkpoint = build().checkpoint
    progress = {0: PartitionProgress(10), 1: PartitionProgress(0)}
    for partition, prog in progress.items():
        checkpoint.recovered(partition, prog)
    assert checkpoint.handed() == ({0: 10, 1: 0}, {0: 0, 1: 0})  # recovered: sequence 0
    assert checkpoint.changed(progress) == []
    progress[1].settle(0)
    assert [p for p, _, _ in checkpoint.changed(progress)] == [1]
    # A holding log's progress counts for its ingest partition.
    hold = progress[holding_id(0)] = HoldingProgress(0)
    hold.settle(0)
    [(partition, prog, held)] = [c for c in checkpoint.changed(progress) if c[0] == 0]
    assert held is hold


def test_progress_records_and_tokens_tie_the_snapshot_to_the_offsets() -> None:
    checkpoint = build().checkpoint
    txn = Txn()
    prog = PartitionProgress(0)
    for offset in (0, 1, 5):
        prog.settle(offset)  # mark 2, settled [5, 6) above it
    plain = PartitionProgress(0)
    plain.settle(0)  # mark 1, nothing above: a snapshot all the same, for recovery's check
    token = checkpoint.next_token()
    assert token == "test:1:1"
    changed = [(0, prog, None), (1, plain, None)]
    offsets = checkpoint.progress_records(txn, token, changed)
    assert [(tp.partition, tp.offset, tp.metadata) for tp in offsets] == [
        (0, 2, token),
        (1, 1, token),
    ]
    written = {}
    for topic, key, value, _ in txn.producer.sent:
        assert topic == "app-progress"
        snapshot = codec.assemble([codec.decode_chunk(value)])
        assert snapshot is not None
        written[key] = (snapshot.token, snapshot.lwm, snapshot.ranges)
    assert written == {
        codec.chunk_key(0, 0): (token, 2, [(5, 6)]),
        codec.chunk_key(1, 0): (token, 1, []),
    }
    assert checkpoint.committed(changed) == ({0: 2, 1: 1}, {0: 1, 1: 1})
    assert checkpoint.changed({0: prog, 1: plain}) == []
    assert checkpoint.next_token() == "test:1:2"


def test_chunks_no_longer_written_are_tombstoned_and_forgotten_partitions_go() -> None:
    checkpoint = build().checkpoint
    txn = Txn()
    prog = PartitionProgress(0)
    for offset in range(1, 600_000, 2):
        prog.settle(offset)  # 300,000 settled ranges above the mark: more than one chunk
    checkpoint.progress_records(txn, checkpoint.next_token(), [(0, prog, None)])
    chunks = checkpoint.chunks[0]
    assert chunks > 1
    assert len(txn.producer.sent) == chunks
    for offset in range(0, 600_000, 2):
        prog.settle(offset)  # the mark runs over them all: one small chunk is left
    txn.producer.sent.clear()
    token = checkpoint.next_token()
    offsets = checkpoint.progress_records(txn, token, [(0, prog, None)])
    assert (offsets[0].offset, offsets[0].metadata) == (600_000, token)
    [(_, first, value, _), *rest] = txn.producer.sent
    assert first == codec.chunk_key(0, 0)
    snapshot = codec.assemble([codec.decode_chunk(value)])
    assert snapshot is not None
    assert (snapshot.lwm, snapshot.ranges) == (600_000, [])
    tombstones = [(key, value) for _, key, value, _ in rest]
    assert tombstones == [(codec.chunk_key(0, i), None) for i in range(1, chunks)]
    assert checkpoint.chunks == {0: 1}
    checkpoint.committed([(0, prog, None)])
    checkpoint.forget({0})
    assert checkpoint.handed() == ({}, {})
    assert checkpoint.chunks == {}
    checkpoint.recovered(1, PartitionProgress(7))
    checkpoint.reset()
    assert checkpoint.handed() == ({}, {})
