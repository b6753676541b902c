"""Group-wide fair shares: instances exchange their demand through Kafka.

Each instance publishes a report to the compacted topic ``<app-id>-coordination`` (key: the
instance's id): its demand per priority class (``fairstream.core.shares``), the partitions
it owns, and when it was sent. It reads every instance's latest report, drops those older
than ``STALE`` seconds (a dead instance), and computes its own rate with
``shares.instance_rate``; the emitter retunes its token buckets to it.

The group rate is a hard ceiling, so changes are ordered: an instance lowers its rate at
once and raises it only ``RAISE_DELAY`` after the report that justifies it, by when the
others have read the same reports and lowered theirs. A report is published as soon as the
instance's demand changes (and every ``HEARTBEAT`` seconds anyway). An instance whose
reports stop being acknowledged stops emitting after ``LEASE`` seconds (its own clock),
before the others count it dead at ``STALE`` seconds (theirs): instances' clocks must agree
to within ``STALE - LEASE`` (NTP). On SIGTERM an instance deletes its report (a tombstone),
so the others take its share at once.

Caller: ``SchedulerService`` runs ``run`` on a thread. Affects: the coordination topic; the
emitter's rate (through a ``ShareChange`` handed over).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from fairstream.adapters.clients import assigned_consumer_config, producer_config
from fairstream.core.shares import ClassDemand, Demand, instance_rate
from fairstream.metrics import Metrics
from fairstream.scheduler.handoff import Handoff
from fairstream.wire import now_ms

log = logging.getLogger("fairstream.group")

TICK = 0.05  # seconds between two looks at the reports
DEMAND_EVERY = 0.2  # seconds between two reads of this instance's demand
HEARTBEAT = 1.0  # a report at least this often, changed or not
LEASE = 2.0  # an instance emits only this long after its last acknowledged report
STALE = 2.5  # a report older than this is a dead instance's
RAISE_DELAY = 0.3  # an instance raises its rate this long after the report that allows it
FLOOR = 0.05  # of the group rate, split between the instances, kept by idle ones


def coordination_topic(app_id: str) -> str:
    return f"{app_id}-coordination"


@dataclass(frozen=True)
class ShareChange:
    """The emitter's new share of the group rate, and until when it may emit (monotonic)."""

    rate: float
    fraction: float
    lease_until: float


@dataclass(frozen=True)
class Report:
    instance: str
    sent_ms: int
    partitions: tuple[int, ...]
    demand: dict[int, ClassDemand]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "instance": self.instance,
                "sent_ms": self.sent_ms,
                "partitions": list(self.partitions),
                "demand": {
                    str(p): {"weight": d.weight, "capped": [list(c) for c in d.capped]}
                    for p, d in self.demand.items()
                },
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Report:
        """Raises ``ValueError`` (with a reason) for anything that is not a report."""
        try:
            doc = json.loads(raw)
            demand = {
                int(p): ClassDemand(
                    float(d["weight"]), tuple((float(w), float(c)) for w, c in d["capped"])
                )
                for p, d in doc["demand"].items()
            }
            return cls(
                str(doc["instance"]),
                int(doc["sent_ms"]),
                tuple(int(p) for p in doc["partitions"]),
                demand,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a coordination report: {exc!r}") from exc


class GroupShares:
    """Publishes this instance's demand, reads the others', sets this instance's rate."""

    def __init__(
        self,
        config: dict[str, Any],
        app_id: str,
        instance: str,
        rate: float,
        handoff: Handoff,
        metrics: Metrics,
        *,
        demand: Any,
    ) -> None:
        self.topic = coordination_topic(app_id)
        self.instance = instance
        self.ceiling = rate  # --rate: fractions are of it
        self.rate = rate  # the group rate now: --rate, or less while the paid API pushes back
        self.handoff = handoff
        self.metrics = metrics
        self._demand = demand  # () -> (dict[int, ClassDemand], partitions), on the emitter
        self.reports: dict[str, Report] = {}
        self._stopping = threading.Event()
        self._producer = Producer(producer_config(config, linger_ms=0))
        self._consumer = Consumer(
            assigned_consumer_config(config, f"{self.topic}.reader", {"fetch.wait.max.ms": 20})
        )
        self._acked_at = -1e9  # monotonic time the last acknowledged report was sent
        self._applied: ShareChange | None = None
        self._raise_at: float | None = None
        self._caught_up = False  # read the reports that were there when we started
        self._start_high = 0
        self.own: Report | None = None

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Report, read, apply, until stopped. Nothing that fails here ends the thread: a
        broker that is away, an emitter busy longer than a call waits, are met again on
        the next turn (meanwhile the lease runs out and this instance stops emitting, as
        the others count it gone)."""
        try:
            while not self._stopping.is_set() and not self._start():
                self._stopping.wait(1.0)
            next_demand = 0.0
            last_sent = -1e9
            while not self._stopping.is_set():
                try:
                    self._read()
                    now = time.monotonic()
                    if now >= next_demand:
                        next_demand = now + DEMAND_EVERY
                        demand, partitions = self.handoff.call(self._demand)
                        changed = self.own is None or (demand, partitions) != (
                            self.own.demand,
                            self.own.partitions,
                        )
                        if changed or now - last_sent >= HEARTBEAT:
                            report = Report(self.instance, now_ms(), partitions, demand)
                            self._publish(report, now)
                            last_sent = now
                    self._producer.poll(0)
                    self._apply(time.monotonic())
                except Exception as exc:
                    log.warning("group shares: %r; trying again", exc)
                self._stopping.wait(TICK)
        finally:
            self._leave()

    def _start(self) -> bool:
        """Find where the coordination topic ends, to know when the reports there are read."""
        tp = TopicPartition(self.topic, 0, OFFSET_BEGINNING)
        try:
            _, self._start_high = self._consumer.get_watermark_offsets(tp, timeout=10)
        except Exception as exc:
            log.warning("reading the coordination topic %s: %r; trying again", self.topic, exc)
            return False
        self._caught_up = self._start_high == 0
        self._consumer.assign([tp])
        return True

    def _publish(self, report: Report, sent: float) -> None:
        self.own = report
        self.reports[self.instance] = report

        def acked(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                self._acked_at = max(self._acked_at, sent)
            else:
                log.warning("publishing this instance's demand failed: %s", err.str())

        self._producer.produce(
            self.topic, report.encode(), self.instance.encode(), on_delivery=acked
        )

    def _read(self) -> None:
        for msg in self._consumer.consume(num_messages=500, timeout=0):
            if msg.error() is not None:
                continue
            if (msg.offset() or 0) + 1 >= self._start_high:
                self._caught_up = True
            key = (msg.key() or b"").decode("utf-8", "replace")
            value = msg.value()
            if key == self.instance:
                continue  # our own reports: we know them already
            if value is None:
                self.reports.pop(key, None)  # an instance that left
                continue
            try:
                self.reports[key] = Report.decode(value)
            except ValueError as exc:
                log.warning("ignoring coordination record %r: %s", key, exc)

    def live(self) -> dict[str, Report]:
        """Reports of the instances alive now (this one's included once published)."""
        cutoff = now_ms() - STALE * 1000
        return {i: r for i, r in self.reports.items() if i == self.instance or r.sent_ms >= cutoff}

    def _apply(self, now: float) -> None:
        if self.own is None or not self._caught_up:
            return  # the others' reports are not all known yet: emit nothing
        live = self.live()
        demands: dict[str, Demand] = {i: r.demand for i, r in live.items()}
        target = instance_rate(demands, self.instance, self.rate, FLOOR)
        lease_until = self._acked_at + LEASE
        current = self._applied.rate if self._applied is not None else 0.0
        if target > current + 1e-9:
            # Raise only once the others had time to read the reports that lower theirs.
            if self._raise_at is None:
                self._raise_at = now + RAISE_DELAY
            if now < self._raise_at:
                target = current
            else:
                self._raise_at = None
        else:
            self._raise_at = None
        change = ShareChange(target, target / self.ceiling if self.ceiling else 0.0, lease_until)
        if change != self._applied:
            self._applied = change
            self.handoff.put(change)
        self.metrics.group_instances.set(len(live))
        for priority in {p for r in live.values() for p in r.demand}:
            total = sum(r.demand[priority].weight for r in live.values() if priority in r.demand)
            self.metrics.group_demand.labels(str(priority)).set(total)

    def instances(self) -> list[dict[str, Any]]:
        """The live instances, for /tenants and ``fairstream top``."""
        live = self.live()
        demands: dict[str, Demand] = {i: r.demand for i, r in live.items()}
        now = now_ms()
        rows = []
        for instance, report in sorted(live.items()):
            rows.append(
                {
                    "instance": instance,
                    "self": instance == self.instance,
                    "partitions": list(report.partitions),
                    "demand_weight": sum(d.weight for d in report.demand.values()),
                    "capped_tenants": sum(len(d.capped) for d in report.demand.values()),
                    "rate_share": instance_rate(demands, instance, self.rate, FLOOR),
                    "report_age_s": round(max(0, now - report.sent_ms) / 1000, 3),
                }
            )
        return rows

    def _leave(self) -> None:
        try:
            # A tombstone: the others take this instance's share at once.
            self._producer.produce(self.topic, None, self.instance.encode())
            self._producer.flush(5)
        except Exception as exc:
            log.warning("removing this instance's report: %s", exc)
        self._consumer.close()
