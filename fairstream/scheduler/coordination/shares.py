"""Group-wide fair shares: instances exchange their demand through Kafka.

Each instance publishes a report to the compacted, one-partition topic
``<app-id>-coordination`` (key: the instance's id): its demand per priority class, tenant
groups included (``fairstream.core.shares``), the ingest partitions it owns, and whether it
is coordinated. It reads every instance's latest report and sets its own rate, and its part
of each tenant group's weight and rate cap; the emitter retunes its token buckets and its
core's group policies to them. The parts follow the rate's rules below: lower at once,
raise late; in the safe share, every group's cap times the partitions owned over all.
The group rate (``--rate``, ``R`` below, over ``P`` ingest partitions) is a hard ceiling:
the instances' rates must never add up to more than ``R`` (plus the burst the token buckets
allow). Everything below is decided by ``PeerView`` (``coordination.view``: pure, an
injected clock); ``DemandExchange``, here, is the Kafka adapter around it.

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
  SIGTERM an instance deletes its report (a tombstone). A killed instance may leave a
  transaction open, which holds back read_committed readers of its egress partitions (the
  survivors' records there too) until the broker aborts it: the instance that owns one of
  its partitions once it went silent fences its transactional id (``fence``), which aborts
  that transaction at once.

What the bound rests on: the instances read the coordination topic within ``RAISE_DELAY`` of
each other, and the token buckets' burst absorbs what a disagreement in that window lets
through. Nothing rests on two hosts' clocks agreeing.

Caller: ``SchedulerService`` runs ``DemandExchange.run`` on a thread. Affects: the coordination
topic; the emitter's rate (through a ``ShareChange`` handed over).
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import threading
from collections.abc import Callable
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
from fairstream.core import MonotonicClock, RecordClock
from fairstream.core.shares import ClassDemand, Demand, instance_rate
from fairstream.scheduler.coordination.fence import Fencer, fence_in_background
from fairstream.scheduler.coordination.view import (
    DELIVERY_TIMEOUT,
    FLOOR,
    STARTING,
    Coordination,
    PeerView,
    Report,
    ShareDecision,
)
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import InstanceDemand, ShareChange, Spend
from fairstream.scheduler.metrics import Metrics

__all__ = ["Coordination", "DemandExchange", "ShareChange"]

log = logging.getLogger("fairstream.group")

TICK = 0.05  # seconds between two looks at the reports
DEMAND_EVERY = 0.2  # seconds between two reads of this instance's demand
HEARTBEAT = 0.5  # a report at least this often, changed or not
THREAD_LEASE = 1.0  # the emitter stops this long after the group thread stops renewing
RENEW_EVERY = 0.25  # seconds between two renewals of that lease


class DemandExchange:
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
        owned: Callable[[], tuple[int, ...]] | None = None,
        clock: RecordClock | None = None,
        transactional_id: str = "",
    ) -> None:
        """``clock``: the emitter's (default a ``MonotonicClock``): the reports' ages, the
        raise delay and the emitter's lease are times on it. ``transactional_id``: this
        instance's emitter's, said in its reports so that survivors can fence it (``fence``;
        "": not said, and never fenced)."""
        self.topic = coordination_topic(app_id)
        self.instance = instance
        self.ceiling = rate  # --rate: fractions are of it
        # The group rate now: --rate, or less while the paid API pushes back (the adapted
        # fraction read with the demand).
        self.rate = rate
        self.handoff = handoff
        self.metrics = metrics
        self._demand = demand  # () -> InstanceDemand, run on the emitter thread
        # () -> the partitions the emitter owns, a snapshot it publishes whole (read here
        # when it is too busy to answer for its demand).
        self._owned = owned
        self.clock = clock or MonotonicClock()
        self.view = PeerView(instance, partitions, self.clock, transactional_id=transactional_id)
        self._config = config
        self._fencer = Fencer(transactional_id)
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
        self._spend: tuple[Spend, ...] = ()  # the emitter's groups' budgets, as read
        # Peers fenced by the fence threads, handed here (their reports to remove).
        self._fenced_peers: queue.SimpleQueue[str] = queue.SimpleQueue()
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
                now = self.clock.now()
                try:
                    self._read()
                except Exception as exc:
                    self._read_failed(repr(exc))
                if now >= next_demand:
                    next_demand = now + DEMAND_EVERY
                    demand, partitions = self._read_demand(demand, partitions)
                    claims = self.view.plan_claims(self._spend)
                    own = self.view.own
                    counted = frozenset(self.view.live())
                    if (
                        own is None
                        or (demand, partitions) != (own.demand, own.partitions)
                        or claims != own.claims
                        or own.coordinated != self.view.reads()
                        or counted != self._counted
                        or now - last_sent >= HEARTBEAT
                    ):
                        self._counted = counted
                        self._publish(self.view.report(demand, partitions, claims))
                        last_sent = now
                    self._fence_silent(partitions)
                    self._remove_fenced()
                try:
                    self._producer.poll(0)
                except Exception as exc:
                    self._publish_failed(0, repr(exc))
                self._apply(demand, partitions)
                self._stopping.wait(TICK)
        finally:
            self._leave()

    def _read_demand(
        self, demand: dict[int, ClassDemand], partitions: tuple[int, ...]
    ) -> tuple[dict[int, ClassDemand], tuple[int, ...]]:
        """The emitter's demand and partitions now, and the group rate from the adapted
        fraction read with them; the last ones (``demand``, ``partitions``) when the
        emitter does not answer."""
        try:
            read: InstanceDemand = self.handoff.call(self._demand)
        except Exception as exc:  # the emitter busy: the last demand stands
            # The partitions decide what is reserved for a silent peer, and whether this
            # instance fences it: they come from the emitter's published snapshot, never
            # stale. An emitter busy in long commits (10 s timeouts each, while a killed
            # peer's transaction was open) answered few of these calls, and the last
            # partitions kept the dead peer's share reserved.
            if self._owned is not None:
                partitions = self._owned()
            log.warning(
                "reading this instance's demand: %r; the last one stands, with the "
                "partitions owned now (%s)",
                exc,
                list(partitions),
            )
            return demand, partitions
        self.rate = self.ceiling * read.rate_factor
        self._spend = read.spend
        return read.classes, read.partitions

    def _fence_silent(self, partitions: tuple[int, ...]) -> None:
        """Fence (on threads of their own) the silent peers whose partitions are ours now."""
        for report in self._fencer.due(self.view.silent(), partitions):
            fence_in_background(self._config, report, functools.partial(self._fenced, report))

    def _fenced(self, report: Report, outcome: str) -> None:
        """(On the fence's thread.) Counted; a fenced peer is handed to this thread, which
        removes its report (``_remove_fenced``)."""
        self.metrics.group_fences.labels(outcome).inc()
        if outcome == "fenced":
            self._fenced_peers.put(report.instance)

    def _remove_fenced(self) -> None:
        """The reports of fenced peers removed from the topic (tombstones): their claims on
        tenant groups' budgets are given back, in the log's order, for every instance."""
        while True:
            try:
                instance = self._fenced_peers.get_nowait()
            except queue.Empty:
                return
            try:
                self._producer.produce(self.topic, None, instance.encode())
            except Exception as exc:
                log.warning("removing fenced instance %s's report: %r", instance, exc)

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
        now = self.clock.now()  # the emitter's too, for its lease
        fraction = decision.rate / self.ceiling if self.ceiling else 0.0
        factor = self.rate / self.ceiling if self.ceiling else 1.0
        budgets = view.claims_in_force()
        change = ShareChange(
            decision.rate, fraction, now + THREAD_LEASE, decision.parts, factor, budgets
        )
        applied = self._applied
        if (
            applied is None
            or (change.rate, change.fraction, change.parts, change.factor, change.budgets)
            != (applied.rate, applied.fraction, applied.parts, applied.factor, applied.budgets)
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
            demands = [d for r in live.values() if (d := r.demand.get(priority)) is not None]
            # An uncapped group counts once, wherever its members are.
            groups = {g.group: g.weight for d in demands for g in d.groups if g.cap is None}
            total = sum(d.weight for d in demands) + sum(groups.values())
            self.metrics.group_demand.labels(str(priority)).set(total)
        self._rows = self._instances(decision)

    def _instances(self, decision: ShareDecision) -> list[dict[str, Any]]:
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
                    "demand_weight": sum(
                        d.weight + sum(g.weight for g in d.groups if g.cap is None)
                        for d in report.demand.values()
                    ),
                    "capped_tenants": sum(len(d.capped) for d in report.demand.values()),
                    "tenant_groups": sum(len(d.groups) for d in report.demand.values()),
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
