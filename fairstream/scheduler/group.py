"""Group-wide fair shares: instances exchange their demand through Kafka.

Each instance publishes a report to the compacted, one-partition topic
``<app-id>-coordination`` (key: the instance's id): its demand per priority class
(``fairstream.core.shares``), the ingest partitions it owns, and whether it is coordinated.
It reads every instance's latest report and sets its own rate; the emitter retunes its token
buckets to it. The group rate (``--rate``, ``R`` below, over ``P`` ingest partitions) is a
hard ceiling: the instances' rates must never add up to more than ``R`` (plus the burst the
token buckets allow). Everything here is decided by ``GroupView`` (pure, injected clock);
``GroupShares`` is the Kafka adapter around it.

No wall clock. Hosts' wall clocks disagree (an instance 1.3 s behind looked dead to the
others, who took the whole rate while it kept its share: twice the group rate). Every age
here is measured on this host's monotonic clock, and the log's order does the rest:

- *Echo.* An instance reads its own reports back. Reading back the report it sent at local
  time ``s`` proves it has read every report written before that one: its view of the group
  is no older than ``now - s``.
- *Age of a peer's report.* A report read after this instance's own report sent at ``s``
  was written after ``s``: it is at most ``now - s`` old. That is the age used (never
  younger than its age by local receipt time; a reader that fell behind and catches up
  does not take old reports for new ones). A peer's report older than ``STALE`` is not
  counted; one read before any echo of ours has no known age and is not counted either.

Two modes:

- *Coordinated*: this instance read back, within ``LEASE``, a report of its own that said
  "coordinated". It counts every fresh coordinated peer (``live``) and reserves ``R * u / P``
  for the ``u`` ingest partitions that no counted report lists (owned by instances that are
  stale, in the safe share, starting, or by nobody); the live instances split the rest by
  demand (``shares.instance_rate``). Every counted instance computes from the same reports,
  so their rates add up to at most ``R - reserve``.
- *Safe share* (fallback): without a fresh view (it cannot publish, cannot read, or has not
  read itself back yet) it takes ``R * p / P`` for the ``p`` partitions it owns. Partitions
  have one owner, so safe shares add up to at most ``R``, and the coordinated instances
  leave exactly those partitions' share unused: mixed groups stay under ``R`` too. It keeps
  emitting at that share (it never stops), publishes reports that say "not coordinated"
  (if it can), and says why (``Coordination``: ``/readyz`` text, ``/metrics``, a log line).
  ``/readyz`` stays ready: the instance does its job at a rate that cannot overshoot, and
  taking it out of service would move no partition anyway.

Transitions (where two instances can briefly claim the same rate):

- *Lower at once, raise late.* A lower rate applies at once; a higher one ``RAISE_DELAY``
  after it is first computed, by when the others have read the same reports and lowered
  theirs. A report is published as soon as demand, partitions, mode or the set of counted
  peers changes (so a newcomer gets an answer it can age at once), else every
  ``HEARTBEAT``.
- *Coordinated -> safe share.* Peers may count this instance's last coordinated report,
  at its demand share, until ``STALE`` after it was written (a report is written within
  ``DELIVERY_TIMEOUT`` of being sent, or never). Until then the instance takes the lower of
  its safe share and the rate it had; after, the safe share.
- *Safe share -> coordinated.* The first report read back that says "coordinated" is read
  by the peers about when this instance reads it: they stop reserving its partitions and
  count its demand, it moves to its demand share; whoever gains, gains ``RAISE_DELAY``
  later.
- *Rebalance.* An instance that loses partitions lowers its rate at once and reports the
  new set at its next look at its demand (``DEMAND_EVERY``); the new owner gets them only
  after the revocation completed, and recovers them (and warms up) before it emits, by
  when the old owner's new report is normally read. A peer still reading the old report
  counts the old owner's demand for those partitions instead of reserving their safe
  share: for that moment two instances claim the same partitions' rate, and the burst
  absorbs it (measured: ``tests/integration/test_group_shares.py``, a 1 s window never
  above rate + burst across joins and a kill).
- *Death.* A killed instance's report ages out; its partitions are reserved until their new
  owner reports them (a session timeout): the survivors do not take its share early. On
  SIGTERM an instance deletes its report (a tombstone).

What the bound rests on: the instances read the coordination topic within ``RAISE_DELAY`` of
each other, and the token buckets' burst absorbs what a disagreement in that window lets
through. Nothing rests on two hosts' clocks agreeing.

Caller: ``SchedulerService`` runs ``GroupShares.run`` on a thread. Affects: the coordination
topic; the emitter's rate (through a ``ShareChange`` handed over).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
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
from fairstream.config.topics import coordination_topic
from fairstream.core.shares import ClassDemand, Demand, instance_rate
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.metrics import Metrics
from fairstream.wire import now_ms

log = logging.getLogger("fairstream.group")

TICK = 0.05  # seconds between two looks at the reports
DEMAND_EVERY = 0.2  # seconds between two reads of this instance's demand
HEARTBEAT = 0.5  # a report at least this often, changed or not
LEASE = 3.0  # coordinated only while an own report sent this recently was read back
STALE = 4.0  # a peer's report older than this (see the module doc) is not counted
DELIVERY_TIMEOUT = 2.0  # a report is written within this long of being sent, or never
RAISE_DELAY = 0.3  # an instance raises its rate this long after first computing it
FLOOR = 0.05  # of the group rate, split between the instances, kept by idle ones
THREAD_LEASE = 1.0  # the emitter stops this long after the group thread stops renewing
RENEW_EVERY = 0.25  # seconds between two renewals of that lease


@dataclass(frozen=True)
class ShareChange:
    """The emitter's new share of the group rate, and until when it may emit (monotonic):
    the group thread renews that lease while it runs, whatever the coordination's state."""

    rate: float
    fraction: float
    lease_until: float


@dataclass(frozen=True)
class Report:
    instance: str
    sent_ms: int  # wall clock, for people only: nothing compares it with another clock
    partitions: tuple[int, ...]
    demand: dict[int, ClassDemand]
    coordinated: bool = True  # False: the sender takes its safe share (count its partitions)
    run: str = ""  # which run of the instance sent it (its own reports read back)
    seq: int = 0  # the run's sequence number of the report

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": 2,
                "instance": self.instance,
                "sent_ms": self.sent_ms,
                "partitions": list(self.partitions),
                "demand": {
                    str(p): {"weight": d.weight, "capped": [list(c) for c in d.capped]}
                    for p, d in self.demand.items()
                },
                "coordinated": self.coordinated,
                "run": self.run,
                "seq": self.seq,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Report:
        """Raises ``ValueError`` (with a reason) for anything that is not a report. Version
        1 reports (no mode, run or sequence) read as coordinated."""
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
                bool(doc.get("coordinated", True)),
                str(doc.get("run", "")),
                int(doc.get("seq", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a coordination report: {exc!r}") from exc


@dataclass(frozen=True)
class Coordination:
    """A read-only snapshot of this instance's coordination, for ``/readyz``, ``/metrics``
    and ``/tenants`` (replaced whole by the group thread; read from any thread)."""

    coordinated: bool  # the share follows the group's demand (False: the safe share)
    reason: str | None  # why not, in words (None when coordinated)
    fraction: float  # of --rate, taken now
    instances: int  # counted instances, this one included
    publish_failures: int  # reports the broker did not acknowledge, since start
    read_failures: int  # errors reading the coordination topic, since start

    def describe(self) -> str:
        share = f"{self.fraction:.3f} of --rate"
        if self.coordinated:
            return f"coordinated with {self.instances} instance(s), {share}"
        return f"safe share ({share}): {self.reason}"


STARTING = Coordination(False, "starting: no report of this instance read back yet", 0, 1, 0, 0)


@dataclass(frozen=True)
class Decision:
    rate: float  # records/s (or cost units/s) this instance may take now
    coordinated: bool
    live: dict[str, Report]  # counted instances' reports, this one's included
    reserved: float  # of the rate, kept for partitions no counted report lists


class GroupView:
    """What this instance knows of the group, and the rate it may take. Pure: the caller
    feeds it what was sent, acknowledged and read; ``clock`` is monotonic seconds.
    Caller: ``GroupShares`` (one thread)."""

    def __init__(
        self, instance: str, partitions: int, clock: Callable[[], float], run: str = ""
    ) -> None:
        if partitions < 1:
            raise ValueError(f"the ingest topic has partitions, got {partitions!r}")
        self.instance = instance
        self.partitions = partitions  # P: every partition of the ingest topic
        self.run = run or uuid.uuid4().hex[:12]
        self.clock = clock
        self.peers: dict[str, tuple[Report, float | None]] = {}  # report, anchor (see doc)
        self.own: Report | None = None  # the last report sent
        self._seq = 0
        self._sent: dict[int, tuple[float, bool]] = {}  # seq -> (sent at, coordinated)
        self._echo: tuple[float, bool] | None = None  # the latest own report read back
        self._last_coordinated_sent = -math.inf
        self._applied = 0.0
        self._raise_at: float | None = None
        self.publish_error: str | None = None  # the last delivery failure, until an ack
        self.read_error: str | None = None  # the last read failure, until an echo
        self.publish_failures = 0
        self.read_failures = 0

    # -- what happened ------------------------------------------------------------------------

    def report(self, demand: dict[int, ClassDemand], partitions: tuple[int, ...]) -> Report:
        """A new report of this instance, to publish now (its mode: whether it reads
        itself back)."""
        now = self.clock()
        self._seq += 1
        coordinated = self.reads()
        report = Report(
            self.instance, now_ms(), partitions, demand, coordinated, self.run, self._seq
        )
        sent = self._sent
        sent[self._seq] = (now, coordinated)
        # Reports never read back (the topic refuses them) are forgotten once too old to
        # make this instance coordinated anyway: the map stays small.
        while sent:
            first = next(iter(sent))
            if now - sent[first][0] <= LEASE:
                break
            del sent[first]
        if coordinated:
            self._last_coordinated_sent = now
        self.own = report
        return report

    def acked(self, seq: int) -> None:
        self.publish_error = None

    def failed(self, seq: int, reason: str) -> None:
        """The broker refused (or never acknowledged) report ``seq``."""
        self.publish_failures += 1
        self.publish_error = reason

    def read_failed(self, reason: str) -> None:
        self.read_failures += 1
        self.read_error = reason

    def received(self, key: str, value: bytes | None) -> None:
        """A record read from the coordination topic, in log order."""
        if key == self.instance:
            if value is None:
                return  # the tombstone of an earlier run of this instance
            try:
                report = Report.decode(value)
            except ValueError:
                return
            sent = self._sent.get(report.seq) if report.run == self.run else None
            if sent is not None:  # ours, this run: everything before it is read
                self._echo = sent
                self.read_error = None
                for seq in [s for s in self._sent if s <= report.seq]:
                    del self._sent[seq]
            return  # an earlier run's report: it is this instance, not a peer
        if value is None:
            self.peers.pop(key, None)  # an instance that left
            return
        try:
            report = Report.decode(value)
        except ValueError as exc:
            log.warning("ignoring coordination record %r: %s", key, exc)
            return
        self.peers[key] = (report, self._echo[0] if self._echo is not None else None)

    # -- what follows ---------------------------------------------------------------------------

    def reads(self) -> bool:
        """Whether an own report sent within ``LEASE`` was read back (any mode)."""
        echo = self._echo
        return echo is not None and self.clock() - echo[0] <= LEASE

    def coordinated(self) -> bool:
        echo = self._echo
        return echo is not None and echo[1] and self.clock() - echo[0] <= LEASE

    def live(self) -> dict[str, Report]:
        """The counted peers' reports: fresh (see the module doc) and coordinated."""
        now = self.clock()
        return {
            i: r
            for i, (r, anchor) in self.peers.items()
            if r.coordinated and anchor is not None and now - anchor <= STALE
        }

    def decide(
        self, demand: dict[int, ClassDemand], partitions: tuple[int, ...], rate: float
    ) -> Decision:
        """The rate this instance may take now, out of the group rate ``rate``, and what it
        was computed from. Moves the raise delay on; call once per look."""
        now = self.clock()
        total = self.partitions
        own = {p for p in partitions if 0 <= p < total}
        coordinated = self.coordinated()
        live: dict[str, Report] = {}
        reserved = 0.0
        if coordinated:
            live = self.live()
            covered = set(own)
            for report in live.values():
                covered.update(p for p in report.partitions if 0 <= p < total)
            reserved = rate * (total - len(covered)) / total
            demands: dict[str, Demand] = {i: r.demand for i, r in live.items()}
            demands[self.instance] = demand
            target = instance_rate(demands, self.instance, rate - reserved, FLOOR)
        else:
            target = rate * len(own) / total
            if now < self._last_coordinated_sent + DELIVERY_TIMEOUT + STALE:
                # Peers may still count our last coordinated report at its share.
                target = min(target, self._applied)
        current = self._applied
        if target > current + 1e-9:
            if self._raise_at is None:
                self._raise_at = now + RAISE_DELAY
            if now < self._raise_at:
                target = current
            else:
                self._raise_at = None
        else:
            self._raise_at = None
        self._applied = target
        if self.own is not None:
            live = {**live, self.instance: self.own}
        return Decision(target, coordinated, live, reserved)

    def reason(self) -> str | None:
        """Why this instance is not coordinated, in words (None when it is)."""
        if self.coordinated():
            return None
        if self.publish_error is not None:
            return f"cannot publish reports: {self.publish_error}"
        if self.read_error is not None:
            return f"cannot read reports: {self.read_error}"
        if self._echo is None:
            return "starting: no report of this instance read back yet"
        if not self._echo[1] and self.reads():
            return "rejoining: waiting for a coordinated report of this instance to come back"
        return f"no report of this instance read back within {LEASE:.0f} s"

    def ages(self) -> dict[str, float | None]:
        """Each peer report's age bound (seconds; None: unknown), for people."""
        now = self.clock()
        return {
            i: None if anchor is None else round(now - anchor, 3)
            for i, (_, anchor) in self.peers.items()
        }


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
        partitions: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = coordination_topic(app_id)
        self.instance = instance
        self.ceiling = rate  # --rate: fractions are of it
        self.rate = rate  # the group rate now: --rate, or less while the paid API pushes back
        self.handoff = handoff
        self.metrics = metrics
        self._demand = demand  # () -> (dict[int, ClassDemand], partitions), on the emitter
        self.clock = clock
        self.view = GroupView(instance, partitions, clock)
        self._stopping = threading.Event()
        self._producer = Producer(
            producer_config(
                config,
                acks=1,  # advisory: a report lost is one not counted
                linger_ms=0,
                overrides={
                    "message.timeout.ms": int(DELIVERY_TIMEOUT * 1000),
                    "request.timeout.ms": int(DELIVERY_TIMEOUT * 750),
                },
            )
        )
        self._consumer = Consumer(
            assigned_consumer_config(config, f"{self.topic}.reader", {"fetch.wait.max.ms": 20})
        )
        self._applied: ShareChange | None = None
        self._renewed = -math.inf
        self._counted: frozenset[str] = frozenset()
        self._reason: str | None = ""  # the last reason logged (None: coordinated)
        self.state: Coordination = STARTING  # read by other threads (one reference)
        self._rows: list[dict[str, Any]] = []

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Report, read, apply, until stopped. Nothing that fails here ends the thread or
        stops emission: a coordination topic that cannot be written or read, a broker away,
        an emitter busy longer than a call waits, all leave the instance at its safe share
        (see the module doc) until they pass."""
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        demand: dict[int, ClassDemand] = {}
        partitions: tuple[int, ...] = ()
        next_demand = 0.0
        last_sent = -math.inf
        try:
            while not self._stopping.is_set():
                now = self.clock()
                try:
                    self._read()
                except Exception as exc:
                    self._read_failed(repr(exc))
                if now >= next_demand:
                    next_demand = now + DEMAND_EVERY
                    try:
                        demand, partitions = self.handoff.call(self._demand)
                    except Exception as exc:  # the emitter busy: the last demand stands
                        log.debug("reading this instance's demand: %r", exc)
                    own = self.view.own
                    counted = frozenset(self.view.live())
                    if (
                        own is None
                        or (demand, partitions) != (own.demand, own.partitions)
                        or own.coordinated != self.view.reads()
                        or counted != self._counted
                        or now - last_sent >= HEARTBEAT
                    ):
                        self._counted = counted
                        self._publish(self.view.report(demand, partitions))
                        last_sent = now
                try:
                    self._producer.poll(0)
                except Exception as exc:
                    self._publish_failed(0, repr(exc))
                self._apply(demand, partitions)
                self._stopping.wait(TICK)
        finally:
            self._leave()

    def _publish(self, report: Report) -> None:
        seq = report.seq

        def acked(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                self.view.acked(seq)
            else:
                self._publish_failed(seq, err.str())

        try:
            self._producer.produce(
                self.topic, report.encode(), self.instance.encode(), on_delivery=acked
            )
        except Exception as exc:  # a full queue, a topic librdkafka knows is missing
            self._publish_failed(seq, repr(exc))

    def _publish_failed(self, seq: int, reason: str) -> None:
        if self.view.publish_error != reason:
            log.warning("publishing this instance's demand to %s failed: %s", self.topic, reason)
        self.view.failed(seq, reason)
        self.metrics.group_coordination_errors.labels("publish").inc()

    def _read_failed(self, reason: str) -> None:
        if self.view.read_error != reason:
            log.warning("reading %s failed: %s", self.topic, reason)
        self.view.read_failed(reason)
        self.metrics.group_coordination_errors.labels("read").inc()

    def _read(self) -> None:
        for msg in self._consumer.consume(num_messages=500, timeout=0):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self._read_failed(err.str())
                continue
            key = (msg.key() or b"").decode("utf-8", "replace")
            self.view.received(key, msg.value())

    def _apply(self, demand: dict[int, ClassDemand], partitions: tuple[int, ...]) -> None:
        view = self.view
        decision = view.decide(demand, partitions, self.rate)
        now = time.monotonic()  # the emitter's clock, for its lease
        fraction = decision.rate / self.ceiling if self.ceiling else 0.0
        change = ShareChange(decision.rate, fraction, now + THREAD_LEASE)
        if (
            self._applied is None
            or (change.rate, change.fraction) != (self._applied.rate, self._applied.fraction)
            or now - self._renewed >= RENEW_EVERY
        ):
            self._applied = change
            self._renewed = now
            self.handoff.put(change)
        reason = view.reason()
        if reason != self._reason:
            self._reason = reason
            if reason is None:
                log.info("coordinated with %d instance(s)", len(decision.live))
            else:
                (log.info if reason.startswith(("starting", "rejoining")) else log.warning)(
                    "not coordinated with the group: %s; emitting at the safe share "
                    "(this instance's partitions over the ingest topic's)",
                    reason,
                )
        live = decision.live
        self.state = Coordination(
            decision.coordinated,
            reason,
            fraction,
            max(1, len(live)),
            view.publish_failures,
            view.read_failures,
        )
        self.metrics.group_coordinated.set(1 if decision.coordinated else 0)
        self.metrics.group_instances.set(max(1, len(live)))
        for priority in {p for r in live.values() for p in r.demand}:
            total = sum(r.demand[priority].weight for r in live.values() if priority in r.demand)
            self.metrics.group_demand.labels(str(priority)).set(total)
        self._rows = self._instances(decision)

    def _instances(self, decision: Decision) -> list[dict[str, Any]]:
        live = decision.live
        demands: dict[str, Demand] = {i: r.demand for i, r in live.items()}
        ages = self.view.ages()
        rows = []
        for instance, report in sorted(live.items()):
            own = instance == self.instance
            rows.append(
                {
                    "instance": instance,
                    "self": own,
                    "partitions": list(report.partitions),
                    "demand_weight": sum(d.weight for d in report.demand.values()),
                    "capped_tenants": sum(len(d.capped) for d in report.demand.values()),
                    "rate_share": (
                        decision.rate
                        if own
                        else instance_rate(demands, instance, self.rate - decision.reserved, FLOOR)
                    ),
                    "report_age_s": 0.0 if own else ages.get(instance) or 0.0,
                    "coordinated": decision.coordinated if own else report.coordinated,
                }
            )
        return rows

    def instances(self) -> list[dict[str, Any]]:
        """The counted instances, for /tenants and ``fairstream top`` (the group thread's
        last snapshot)."""
        return list(self._rows)

    def _leave(self) -> None:
        try:
            # A tombstone: the others stop counting this instance at once (and reserve its
            # partitions' share until their new owner reports them).
            self._producer.produce(self.topic, None, self.instance.encode())
            self._producer.flush(5)
        except Exception as exc:
            log.warning("removing this instance's report: %s", exc)
        self._consumer.close()
