"""Parking (fairstream/scheduler/emitter/holding.py) on an emitter with a producer that sends
nowhere: a paused tenant interleaved with a busy one is moved to the holding log, the
busy one's mark moves on, and the parked records come back in order."""

from __future__ import annotations

from typing import Any

import pytest

from fairstream import wire
from fairstream.config import Settings
from fairstream.core import ManualClock, TenantPolicy
from fairstream.scheduler import progress
from fairstream.scheduler.emitter.egress import Limits
from fairstream.scheduler.emitter.loop import Emitter, Phase
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress
from fairstream.scheduler.records import Parsed, headed
from fairstream.scheduler.recovery import holding_id
from tests.unit.scheduler.test_emit_rule import Fetcher, Txn


class HoldingTxn(Txn):
    """A ``Txn`` that shows what its producer was given, with partitions and timestamps
    (``written``), whether the emitter produced directly or through ``produce``."""

    @property
    def written(self) -> list[tuple[Any, ...]]:
        return self.producer.written  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def emitter() -> Emitter:
    em = Emitter(
        Settings(
            share_by="partitions", park_ranges=16, park_span=1000, app_id="app", feedback_topic=""
        ),
        1,
        Handoff(),
        Metrics(),
        clock=ManualClock(),
        transactional_id="test",
        limits=Limits(),
        request_rewind=lambda: None,
        on_committed=lambda marks, seqs: None,
        transaction=HoldingTxn,
        fetcher=Fetcher,
    )
    em.progress[0] = PartitionProgress(0)
    em.progress[holding_id(0)] = HoldingProgress(0)
    em.phase = Phase(joined=True)
    em._publish_owned()  # as an assignment would
    em._apply_rate_share()
    em.set_policy("slow", TenantPolicy(paused=True))
    return em


def parsed(partition: int, offset: int, tenant: str, value: bytes, headers: Any = None) -> Parsed:
    """A record as the ingest thread hands it over (``parse``), from the ingest log or a
    holding log alike: held as its value alone, or with headers of its own (a parked record
    read back carries at least its request id) as ``(value, headers, size)``."""
    held = value if headers is None else headed(value, headers)
    return Parsed(partition, offset, tenant, 1, None, 1000 + offset, held, None)


def index(em: Emitter, records: list[Parsed]) -> None:
    em.backlog.index(records, em.txn)


def emit_all(em: Emitter) -> None:
    while em.sender.emit_batch(em.txn):
        pass


def holding_writes(em: Emitter) -> list[tuple[Any, ...]]:
    return [w for w in em.txn.written if w[0] == em.holding_topic]  # type: ignore[attr-defined]


def test_a_paused_tenant_is_parked_and_comes_back_in_order(emitter: Emitter) -> None:
    em = emitter
    records = []
    for i in range(40):  # (slow, fast, fast) x 40
        records.append(parsed(0, 3 * i, "slow", b"slow:%02d" % i))
        records.append(parsed(0, 3 * i + 1, "fast", b"fast:%02d" % (2 * i)))
        records.append(parsed(0, 3 * i + 2, "fast", b"fast:%02d" % (2 * i + 1)))
    index(em, records)
    emit_all(em)
    ingest = em.progress[0]
    assert ingest.lwm == 0  # pinned by slow's first record
    assert ingest.settled_above == 40
    em._commit()

    # slow is held back (paused): parked; the mark runs to the end of what was read.
    written = holding_writes(em)
    assert [w[3] for w in written] == [b"slow:%02d" % i for i in range(40)]
    assert {w[1] for w in written} == {0}  # the holding log's partition 0
    assert [w[5] for w in written] == [1000 + 3 * i for i in range(40)]  # enqueued times
    ids = [dict(w[4])[wire.REQUEST_ID] for w in written]
    assert ids == [b"%s-0-%d" % (em.ingest_topic.encode(), 3 * i) for i in range(40)]
    assert ingest.lwm == 120
    assert ingest.settled_above == 0
    hold = em.progress[holding_id(0)]
    assert isinstance(hold, HoldingProgress)
    assert hold.parked == {"slow": 40}

    # The commit carried a snapshot with the holding log's state.
    snapshots = [w for w in em.txn.written if w[0] == em.progress_topic]  # type: ignore[attr-defined]
    last = progress.assemble([progress.decode_chunk(snapshots[-1][3])])
    assert last is not None
    assert last.lwm == 120
    assert last.parked == {"slow": 40}

    # A new record of slow is parked as it is read, behind the others.
    index(em, [parsed(0, 120, "slow", b"slow:40"), parsed(0, 121, "fast", b"fast:80")])
    assert holding_writes(em)[-1][3] == b"slow:40"
    assert hold.parked == {"slow": 41}

    # Read back from the holding log (offsets 0..40), resumed: out in order, counted down.
    index(
        em,
        [parsed(holding_id(0), h, "slow", w[3], w[4]) for h, w in enumerate(holding_writes(em))],
    )
    em.set_policy("slow", TenantPolicy())
    before = len(em.txn.producer.sent)  # type: ignore[attr-defined]
    emit_all(em)
    out = [v for topic, _, v, _ in em.txn.producer.sent[before:] if topic == em.egress_topic]  # type: ignore[attr-defined]
    slow = [v for v in out if v.startswith(b"slow")]
    assert slow == [b"slow:%02d" % i for i in range(41)]
    assert hold.parked == {}
    assert hold.lwm == 41
    egress_ids = [
        dict(h)[wire.REQUEST_ID]
        for topic, _, v, h in em.txn.producer.sent[before:]  # type: ignore[attr-defined]
        if topic == em.egress_topic and v.startswith(b"slow")
    ]
    assert egress_ids[:2] == ids[:2]  # the request ids they would have had


def test_a_served_tenant_is_not_parked_but_reading_waits_for_it(emitter: Emitter) -> None:
    em = emitter
    em.set_policy("slow", TenantPolicy())  # nobody paused
    # Every other offset skipped (transaction markers, say): 39 settled gaps, the mark at 0.
    index(em, [parsed(0, 2 * i, "other", b"x:%03d" % i) for i in range(40)])
    assert em.progress[0].settled_above == 39
    em._commit()
    assert holding_writes(em) == []  # "other", at the mark, can be served: not parked
    assert em.backlog.parking.ahead == {0}  # 39 ranges: twice --park-ranges (32) or more
    assert em._taken() == {}
    emit_all(em)
    em._commit()
    assert em.progress[0].lwm == 79
    assert em.backlog.parking.ahead == set()
