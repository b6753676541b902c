"""The emitter on an in-memory cluster (``memory_kafka``), no broker: its real
``Transaction`` commits egress records with the group's offsets, and the hard cases of
the data path run in milliseconds. An abort (the generation gone at commit) leaves nothing
visible and rewinds to the committed marks, from which every record goes out once; a
newer producer with the instance's transactional id fences it, and it stops with nothing
of the zombie's transaction visible."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from fairstream import wire
from fairstream.config import Settings
from fairstream.core import ManualClock
from fairstream.scheduler.emitter.egress import Limits
from fairstream.scheduler.emitter.loop import Emitter, Phase
from fairstream.scheduler.emitter.transaction import Transaction
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import Assign
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.supervise import FatalError
from tests.unit.scheduler.memory_kafka import MemoryCluster
from tests.unit.scheduler.test_emit_rule import Fetcher
from tests.unit.scheduler.test_holding import parsed

GROUP = "app"
TID = "app-instance-0"


class Driver:
    """One emitter owning ingest partition 0, on ``cluster``: the ingest side's part (the
    records read, the assignment, the recovery a rewind asks for) is the test's."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.rewinds = 0
        self.emitter = Emitter(
            Settings(share_by="partitions", app_id=GROUP, feedback_topic=""),
            1,
            Handoff(),
            Metrics(),
            clock=ManualClock(),
            transactional_id=TID,
            limits=Limits(),
            request_rewind=self._rewind_asked,
            on_committed=lambda marks, seqs: None,
            transaction=functools.partial(Transaction, connect=cluster.producer),
            fetcher=Fetcher,
        )
        self.emitter.init_transactions()
        self.assign()

    def _rewind_asked(self) -> None:
        self.rewinds += 1

    def assign(self, *, rewind: bool = False) -> None:
        """Partition 0 from its committed offset (as the ingest thread recovers it), in a new
        generation of the group."""
        mark = self.cluster.offsets.get(GROUP, {}).get(("fairstream.ingest", 0), 0)
        em = self.emitter
        em._assign(
            Assign({0: PartitionProgress(mark)}, rewind=rewind, metadata=self.cluster.join(GROUP))
        )
        em.phase = Phase(joined=True)
        em._warm_until = 0.0  # no warm-up wait in a test

    def read(self, *values: tuple[int, str]) -> None:
        """Ingest records (offset, tenant) handed over by the ingest thread."""
        em = self.emitter
        em.backlog.index([parsed(0, o, t, b"%s:%d" % (t.encode(), o)) for o, t in values], em.txn)

    def emit_and_commit(self) -> None:
        em = self.emitter
        while em._emit_some():
            pass
        em._commit()

    def egress(self) -> list[bytes | None]:
        return [r.value for r in self.cluster.committed("fairstream.egress")]

    def request_ids(self) -> list[Any]:
        return [
            dict(r.headers)[wire.REQUEST_ID] for r in self.cluster.committed("fairstream.egress")
        ]


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster()


def test_records_and_the_mark_commit_together(cluster: MemoryCluster) -> None:
    driver = Driver(cluster)
    driver.read((0, "a"), (1, "b"), (2, "a"))
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:2", b"b:1"]
    assert cluster.offsets[GROUP][("fairstream.ingest", 0)] == 3


def test_an_abort_rewinds_to_the_committed_marks_and_each_record_goes_out_once(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster)
    driver.read((0, "a"), (1, "b"))
    driver.emit_and_commit()
    driver.read((2, "a"), (3, "b"), (4, "a"))
    em = driver.emitter
    while em._emit_some():
        pass
    cluster.join(GROUP)  # a rebalance before the commit: this generation's offsets are refused
    em._commit()
    assert driver.rewinds == 1
    assert em.phase.rewinding
    assert sorted(driver.egress()) == [b"a:0", b"b:1"]  # the aborted three never show
    assert cluster.offsets[GROUP][("fairstream.ingest", 0)] == 2
    # The ingest thread recovers from the committed mark and reads the rest again.
    driver.assign(rewind=True)
    driver.read((2, "a"), (3, "b"), (4, "a"))
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:2", b"a:4", b"b:1", b"b:3"]
    assert len(set(driver.request_ids())) == 5  # each once
    assert cluster.offsets[GROUP][("fairstream.ingest", 0)] == 5


def test_a_fenced_emitter_stops_and_its_open_records_never_show(cluster: MemoryCluster) -> None:
    driver = Driver(cluster)
    driver.read((0, "a"), (1, "b"))
    em = driver.emitter
    while em._emit_some():
        pass
    # Another process with this instance's transactional id (the same data directory on
    # two hosts): its init_transactions fences this one and aborts what it left open.
    cluster.producer({"transactional.id": TID}).init_transactions()
    with pytest.raises(FatalError, match="fenced"):
        em._commit()
    assert driver.egress() == []
    assert GROUP not in cluster.offsets
