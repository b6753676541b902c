"""The emitter's parts built on their own, around a ManualClock, a producer that sends
nowhere and a fetcher whose answers a test sets: for test_backlog, test_sender and
test_checkpoint; and committed transactions' tallies (``tally_of``, ``commit``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from confluent_kafka import Message

from fairstream.config import Settings
from fairstream.core import FairScheduler, ManualClock, TenantPolicy
from fairstream.core.emission import EmissionRule
from fairstream.scheduler.emitter.backlog import Backlog
from fairstream.scheduler.emitter.checkpoint import Checkpoint
from fairstream.scheduler.emitter.egress import Limits
from fairstream.scheduler.emitter.send import Sender
from fairstream.scheduler.emitter.spill import Spill
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Observed
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.records import Parsed
from fairstream.scheduler.tallies import Tally
from tests.unit.scheduler.test_emit_rule import Txn


class Readback:
    """A fetcher whose answers the test sets per offset: a message, ``Gone`` or None."""

    def __init__(self) -> None:
        self.answers: dict[int, Any] = {}
        self.asked: list[int] = []
        self.retry_at = 0.0

    def get(self, partition: int, offset: int, patience: float | None = None) -> Any:
        self.asked.append(offset)
        return self.answers.get(offset)

    def retry_in(self, partition: int) -> float:
        return 0.5

    def forget(self, partition: int) -> None:
        pass


@dataclass
class Parts:
    settings: Settings
    clock: ManualClock
    metrics: Metrics
    rule: EmissionRule[Parsed]
    progress: dict[int, PartitionProgress]
    fetcher: Readback
    checkpoint: Checkpoint
    backlog: Backlog
    sender: Sender
    txn: Txn = field(default_factory=Txn)

    @property
    def core(self) -> FairScheduler[Parsed]:
        return self.rule.core

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels or None)


def build(*, max_backlog: int | None = None, **settings: Any) -> Parts:
    """The parts as the emitter wires them, owning ingest partitions 0 and 1."""
    # No feedback unless asked for: without workers reporting, the start-up window would
    # hold releases to a few slots (``fairstream.core.credit.StartupWindow``).
    settings = {"feedback_topic": "", **settings}
    config = Settings(share_by="partitions", app_id="app", max_backlog=max_backlog, **settings)
    clock = ManualClock(100.0)
    metrics = Metrics()
    core: FairScheduler[Parsed] = FairScheduler(
        clock, quantum=config.quantum, default_policy=TenantPolicy(max_backlog=max_backlog)
    )
    rule: EmissionRule[Parsed] = EmissionRule(
        core,
        clock,
        rate=config.rate,
        burst=config.effective_burst,
        cost_rate=config.cost_rate,
        deadline=attrgetter("deadline"),
        enqueued=attrgetter("enqueued"),
    )
    progress = {0: PartitionProgress(0), 1: PartitionProgress(0)}
    fetcher = Readback()
    checkpoint = Checkpoint(
        metrics,
        Observed(),
        ingest_topic=config.topics.ingest,
        progress_topic="app-progress",
        token_prefix="test:1",
        ledger=rule.ledger,
    )
    limits = Limits()
    backlog = Backlog(
        config,
        rule,
        progress,
        fetcher,  # type: ignore[arg-type]
        checkpoint,
        metrics,
        clock,
        warming=set(),
        purges={},
        dlq_limit=limits.dlq,
        spill=Spill(config.index_ahead, Handoff(), fetcher, rule),  # type: ignore[arg-type]
    )
    sender = Sender(
        config,
        rule,
        progress,
        backlog,
        checkpoint,
        fetcher,  # type: ignore[arg-type]
        metrics,
        clock,
        egress_limit=limits.egress,
    )
    return Parts(config, clock, metrics, rule, progress, fetcher, checkpoint, backlog, sender)


def message(partition: int, offset: int, tenant: str = "A", value: bytes = b"v") -> Message:
    return Message(
        topic="fairstream.ingest",
        partition=partition,
        offset=offset,
        key=tenant.encode(),
        value=value,
    )


def record(
    parts: Parts,
    offset: int,
    tenant: str = "A",
    *,
    partition: int = 0,
    cost: int = 1,
    deadline: int | None = None,
    age: float = 0.0,
    value: bytes = b"v",
) -> Parsed:
    """An ingest record as the ingest thread hands it over, enqueued ``age`` seconds ago by
    the parts' clock."""
    enqueued = parts.clock.epoch_ms() - round(age * 1000)
    msg = message(partition, offset, tenant, value)
    return Parsed(partition, offset, tenant, cost, deadline, enqueued, msg, None)


def tally_of(dwells: Mapping[str, list[float]]) -> Tally:
    """A transaction's tally of each tenant's records in turn, with these dwell times."""
    tally = Tally()
    for tenant, seconds in dwells.items():
        for d in seconds:
            tally.record(tenant, d)
    return tally


def commit(observed: Observed, counts: Mapping[str, int]) -> None:
    """A committed transaction of ``counts`` records per tenant (each dwelt 0 s)."""
    observed.committed(tally_of({tenant: [0.0] * n for tenant, n in counts.items()}))
