"""The open transaction's checkpoint: what it holds beyond its records, and what is committed.

Between two commits the emitter's transaction collects egress records and dead letters; the
checkpoint keeps what they add up to (each tenant's dwell, the cost sent, the dead letters
per reason) and what the last commits made of each partition's progress (its changes count,
its mark, the commit sequence that made it, the progress chunks its record had). At a commit
it says which partitions changed, writes their progress snapshots into the transaction, tied
to the group's offsets by a commit token, and once the broker has committed, counts what the
transaction held and hands the marks on (to the trimmer).

Caller: the emitter thread (``Emitter``), the only owner of the transaction. The emitter's
sender (``send``) and backlog (``backlog``) report what they produced through ``tally``,
``emitted`` and ``lettered``, once per batch.
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from fairstream.core.budget import BudgetLedger, Entry
from fairstream.scheduler import progress as progress_codec
from fairstream.scheduler.emitter.transaction import Transaction
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Observed
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress, Snapshot
from fairstream.scheduler.recovery import holding_id
from fairstream.scheduler.tallies import Tally

__all__ = ["Changed", "Checkpoint"]

# (ingest partition, its progress, its holding log's progress if any)
Changed = tuple[int, PartitionProgress, PartitionProgress | None]


class Checkpoint:
    """The open transaction's tallies and the committed progress of each partition."""

    def __init__(
        self,
        metrics: Metrics,
        observed: Observed,
        *,
        ingest_topic: str,
        progress_topic: str,
        token_prefix: str,
        ledger: BudgetLedger | None = None,
    ) -> None:
        self.metrics = metrics
        # The budgets' spend (the rule's): what the open transaction reserved stays when
        # it commits and is given back when it aborts.
        self.ledger = ledger
        self.observed = observed
        self.ingest_topic = ingest_topic
        self.progress_topic = progress_topic
        # A commit token names this process too (the transactional id outlives a restart,
        # the sequence does not): the trimmer compares the sequence in the group's offset
        # metadata with the one that made a mark, never a previous run's.
        self.token_prefix = token_prefix
        # The open transaction: the tenant and dwell (seconds) of each of its records; the
        # cost sent; the dead letters per reason.
        self.open_tally = Tally()
        self.cost = 0
        self.letters: dict[str, int] = {}
        # Per log (ingest partition, or holding_id of one): what its last commit made of it.
        self.changes: dict[int, int] = {}
        self.marks: dict[int, int] = {}
        # The sequence of the commit that made each mark (0: recovered). The trimmer trims
        # to a mark only once the group's offsets confirm it.
        self.seqs: dict[int, int] = {}
        self.chunks: dict[int, int] = {}  # partition -> progress chunks its last record had
        self.seq = 0
        self.largest = 0  # the largest progress record written so far (bytes)

    # -- the open transaction ----------------------------------------------------------------

    def tally(self) -> Tally:
        """The open transaction's records (tenant and dwell), live: the sender appends one
        per egress record, in order (a call per record would cost the per-record path).
        Caller: the sender, once per batch (a commit or an abort starts a new one)."""
        return self.open_tally

    def emitted(self, cost: int) -> None:
        """Egress records of ``cost`` in all produced. Caller: the sender, once per batch."""
        self.cost += cost

    def lettered(self, reason: str, count: int = 1) -> None:
        """``count`` dead letters for ``reason`` produced. Caller: the backlog."""
        self.letters[reason] = self.letters.get(reason, 0) + count

    def discard(self) -> None:
        """The open transaction was aborted: what it held counts for nothing."""
        self.open_tally, self.cost, self.letters = Tally(), 0, {}
        if self.ledger is not None:
            self.ledger.rewound()

    # -- progress ----------------------------------------------------------------------------

    def recovered(self, partition: int, prog: PartitionProgress) -> None:
        """A partition assigned with the progress read back from what is committed."""
        self.changes[partition] = prog.changes
        self.marks[partition] = prog.lwm
        self.seqs[partition] = 0

    def forget(self, partitions: set[int]) -> None:
        """Partitions (and holding logs) no longer owned."""
        for partition in partitions:
            self.changes.pop(partition, None)
            self.marks.pop(partition, None)
            self.seqs.pop(partition, None)
            self.chunks.pop(partition, None)

    def reset(self) -> None:
        """After an abort: nothing open, nothing known committed (recovery reads it again)."""
        self.discard()
        self.changes, self.marks, self.seqs = {}, {}, {}

    def handed(self) -> tuple[dict[int, int], dict[int, int]]:
        """Copies of the committed marks and the sequences that made them (for the trimmer)."""
        return dict(self.marks), dict(self.seqs)

    def changed(self, progress: dict[int, PartitionProgress]) -> list[Changed]:
        """The ingest partitions whose progress (or holding log's, or budget spend) changed
        since committed."""
        committed = self.changes
        spent = self.ledger.dirty if self.ledger is not None else ()
        return [
            (p, prog, progress.get(holding_id(p)))
            for p, prog in progress.items()
            if p >= 0
            and (
                prog.changes != committed.get(p)
                or _changes(progress.get(holding_id(p))) != committed.get(holding_id(p))
                or p in spent
            )
        ]

    def next_token(self) -> str:
        """The commit token of the next commit (the offsets' metadata)."""
        self.seq += 1
        return f"{self.token_prefix}:{self.seq}"

    def progress_records(
        self, txn: Transaction, token: str, changed: list[Changed]
    ) -> list[TopicPartition]:
        """Produce the progress snapshots of ``changed`` partitions into ``txn``; the offsets
        to commit with them, each naming ``token`` in its metadata.

        Every committed offset has its snapshot in the same transaction, even one that says
        no more than the offset (no range above the mark, the holding log unused): recovery
        then trusts an offset only once it has read that snapshot back committed. A broker
        can show an aborted transaction's offsets as committed (Apache Kafka 3.7.2, a
        producer killed mid-transaction: its offsets were served after the abort marker, and
        the records they covered were never on egress); without the snapshot nothing would
        tell that offset from a good one (``recovery``)."""
        offsets: list[TopicPartition] = []
        largest = 0
        ledger = self.ledger
        for partition, prog, hold in changed:
            budgets = ledger.export(partition) if ledger is not None else []
            records = progress_codec.encode_chunks(_snapshot(token, prog, hold, budgets))
            for index, record in enumerate(records):
                key = progress_codec.chunk_key(partition, index)
                txn.produce(self.progress_topic, record, key, None, partition)
                largest = max(largest, len(record))
            # Chunks the last record had and this one has not: tombstones, for compaction.
            for index in range(len(records), self.chunks.get(partition, 1)):
                key = progress_codec.chunk_key(partition, index)
                txn.produce(self.progress_topic, None, key, None, partition)
            self.chunks[partition] = len(records)
            offsets.append(TopicPartition(self.ingest_topic, partition, prog.lwm, token))
        if changed:
            self.metrics.progress_bytes.set(largest)
            if largest > self.largest:
                self.largest = largest
                self.metrics.progress_bytes_max.set(largest)
        return offsets

    def committed(self, changed: list[Changed]) -> tuple[dict[int, int], dict[int, int]]:
        """The broker committed: ``changed`` partitions' progress is what is committed now,
        and what the transaction held is counted. The marks and sequences, for the trimmer.

        Affects: the metrics (emitted, emitted cost, dwell, dead letters), ``observed``."""
        seq = self.seq
        for partition, prog, hold in changed:
            self.changes[partition] = prog.changes
            self.marks[partition] = prog.lwm
            self.seqs[partition] = seq
            if hold is not None:
                self.changes[holding_id(partition)] = hold.changes
                self.marks[holding_id(partition)] = hold.lwm
                self.seqs[holding_id(partition)] = seq
        tally = self.open_tally
        if tally.seconds:
            self.metrics.emitted.inc(self.observed.committed(tally))
            self.metrics.emitted_cost.inc(self.cost)
            self.metrics.dwell.observe_lists((tally.seconds,))
        for reason, count in self.letters.items():
            self.metrics.dead_letters.labels(reason).inc(count)
        if self.ledger is not None:
            self.ledger.committed()
        self.discard()
        return self.handed()


def _changes(prog: PartitionProgress | None) -> int | None:
    return None if prog is None else prog.changes


def _snapshot(
    token: str, prog: PartitionProgress, hold: PartitionProgress | None, budgets: list[Entry]
) -> Snapshot:
    """What the progress topic keeps for a partition: its mark and ranges, its holding
    log's (none without one), and the spend."""
    if hold is None:
        return Snapshot(token, prog.lwm, prog.ranges(), budgets=list(budgets))
    parked = dict(hold.parked) if isinstance(hold, HoldingProgress) else {}
    return Snapshot(token, prog.lwm, prog.ranges(), hold.lwm, hold.ranges(), parked, list(budgets))
