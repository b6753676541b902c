"""One scheduler instance: its threads, its identity, and how it stops.

Thread map: every thread, what it alone owns (writes), and how others learn of it. Each
long-lived thread runs under the one failure policy (``supervise.Supervisor``): "fatal" ends
the instance at the first failure, "restarted" runs again with backoff (``MAX_RESTARTS``
failures in a row are fatal). ``join`` waits for all of them on shutdown.

===============  =========  ==========================  ======================================
thread           failure    owns (writes alone)         hands off / is read through
===============  =========  ==========================  ======================================
emitter (emit)   fatal      the fair core, every        its mailbox (Handoff: records,
                            partition's progress, the   controls, Calls) is its only input.
                            transactional producer,     Publishes, replaced whole: owned (a
                            the payload fetcher, the    tuple), slots_counted,
                            checkpoint, Observed        fetcher.failing, phase (readiness),
                                                        the committed marks
                                                        (Trimmer.committed). Any other read is
                                                        a Handoff.call: scrape, tenant_stats,
                                                        demand, the audit probe
ingest (ingest)  fatal      the group consumer, the     Handoff records and Assign/Revoke
                            partition readers,          controls (the group metadata rides on
                            recovery, the heap trim     them)
                            (adapters.heap)
policies         restarted  the policy topic's          PolicyChange controls; PoliciesRead
                            consumer                    once the topic was read to its end
trim             restarted  an AdminClient, a watch     reads the marks the emitter swaps in;
                            consumer, the offsets       its gauges; the held-output
                            read-back, the held watch   condition
                            (held.HeldReader)
feedback         restarted  the feedback consumer, the  FeedbackBatch/AdaptiveChange controls
                            adaptive rate               (the group thread reads the rate back
                                                        with the emitter's demand); publishes
                                                        view (AdaptiveView, replaced whole)
                                                        for /tenants; asks RecentRequests
                                                        (swap-safe)
egress-lag       restarted  an AdminClient, the egress  LagChange controls; its gauges
                            group's lag and its bound
                            (--egress-group only)
audit            restarted  the fairness windows, the   probes the emitter by Handoff.call;
                            console's history           web threads read under its lock
group            fatal      the coordination topic's    ShareChange controls; reads the
                            producer, consumer and      emitter's InstanceDemand (demand,
                            reports                     partitions, adapted rate) by
                                                        Handoff.call; publishes state and the
                                                        instance rows (replaced whole)
main (run)       exits      the web server (asyncio,    reads only what the others publish,
                            its to_thread workers),     and the emitter by Handoff.call
                            the signals                 waiting SCRAPE_WAIT at most
===============  =========  ==========================  ======================================

Short-lived helpers: ``shutdown`` (started by ``stop``: it only asks each thread above to
stop, the ingest last, which hands the emitter a ``Stop``; ``join`` then waits for them all)
each transactional producer's call thread (``transaction.BrokerCalls``: it runs the
commit, the offsets and the abort; the emitter waits for each up to its deadline, then
counts the producer as stuck and replaces it, and the thread ends when the stuck call
returns), and the group thread's fence threads (``coordination.fence``: each fences one
silent peer's transactional id and hands the group thread the outcome through a queue; the
group thread then removes the fenced peer's report).

"fatal": the thread's reason goes to ``fail``: ``/healthz`` answers 503 with it and the
process exits non-zero within the shutdown timeout (stderr says why), for the orchestrator
to restart it. "restarted": logged, counted (``fairstream_thread_restarts_total``), raised
as a condition in ``/readyz``. No thread ends silently: a body that returns while not
stopped counts as a failure.

What is wrong now, short of fatal, is a condition (``observe.Conditions``, ``self.conditions``):
any thread may ``set``/``clear`` one, or ``watch`` a probe of state it publishes; ``/readyz``
lists them all and is 503 while one ``blocks_ready``; ``fairstream_condition{name}`` exports
them. ``/metrics`` and ``/tenants`` never wait for a busy emitter longer than
``SCRAPE_WAIT``: they serve its last snapshot, marked stale.

Identity: the transactional id is ``<app-id>-<group-instance-id>``; without
``--group-instance-id``, the identity is a uuid kept in ``--data-dir``, which one process at
a time holds (``datadir``), and ``run`` makes it the group instance id (static membership,
unless ``--membership dynamic``). A restart with the same identity fences its previous run at once
(``init_transactions`` aborts what it left open); a new identity waits until the broker
aborts the orphan (``--transaction-timeout``), unless a peer fences it first: the instance
that takes over a dead peer's partitions does (``coordination.shares``, "Death";
``coordination.fence``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from fairstream.adapters.heap import HeapTrimmer, glibc_trim
from fairstream.config import Settings
from fairstream.config.topics import holding_topic, progress_topic
from fairstream.core import ConcurrencyLimit, MonotonicClock, RecordClock
from fairstream.scheduler import datadir
from fairstream.scheduler.audit.auditor import CHART_TENANTS, Auditor
from fairstream.scheduler.coordination.shares import Coordination, DemandExchange
from fairstream.scheduler.emitter.loop import Emitter, Limits
from fairstream.scheduler.feedback.egress_lag import EgressLagReader
from fairstream.scheduler.feedback.reader import FeedbackReader
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.ingest.member import Ingest
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import (
    NO_SCRAPE,
    Condition,
    Conditions,
    Probe,
    Scrape,
    add_shares,
)
from fairstream.scheduler.policies.reader import PolicyReader
from fairstream.scheduler.recent import RecentRequests
from fairstream.scheduler.recovery import Recovery
from fairstream.scheduler.retention.held import HeldReader, held_patience
from fairstream.scheduler.retention.trim import Trimmer
from fairstream.scheduler.supervise import Supervisor
from fairstream.scheduler.tenant_tree import (
    GroupRow,
    TenantGroupCollector,
    add_tree,
    group_series,
)

log = logging.getLogger("fairstream.scheduler")

SCRAPE_WAIT = 1.0  # s a scrape waits for the emitter before serving its last snapshot
# A snapshot younger than this serves the next scrape again: taking one walks every
# backlogged tenant on the emitter thread, and scrapes as often as a poller likes (a
# dashboard, several Prometheus replicas) would take that time from emission.
SCRAPE_REUSE = 1.0


def transactional_id(settings: Settings) -> str:
    """This instance's transactional id (stable across restarts; see the module doc)."""
    return f"{settings.app_id}-{settings.group_instance_id or datadir.identity(settings.data_dir)}"


class SchedulerService:
    """Caller: ``fairstream scheduler`` (``fairstream.scheduler.run.run``)."""

    def __init__(
        self,
        settings: Settings,
        partitions: int,
        *,
        limits: Limits,
        retention_ms: int | None,
        clock: RecordClock | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.handoff = Handoff()
        # The one clock of the emitter and its parts (the rule, the core, the sender, the
        # backlog), the feedback reader and the group thread: tests drive a ManualClock.
        self.clock = clock or MonotonicClock()
        self.fatal: str | None = None
        self.done = threading.Event()
        # Readiness reasons any thread may raise (``/readyz``, ``fairstream_condition``).
        self.conditions = Conditions()
        self.supervisor = Supervisor(self.metrics, self.conditions, self.fail, self.done)
        # The emitter's last answer for /tenants, with its time (the clock's): served (marked
        # stale) when the emitter is too busy to answer (a long commit). /metrics': _scrape.
        self._stats_snapshot: tuple[dict[str, Any], float] | None = None
        librdkafka = settings.kafka.librdkafka()
        self.txn_id = txn_id = transactional_id(settings)
        # The commit tokens' prefix: the emitter writes it into the group's offset metadata,
        # the trimmer reads it back there to confirm a mark (this process's only).
        token_prefix = f"{txn_id}:{uuid.uuid4().hex[:8]}"
        self.trimmer = Trimmer(
            librdkafka,
            settings.topics.ingest,
            self.metrics,
            trim=settings.trim,
            retention_ms=retention_ms,
            holding=holding_topic(settings.app_id),
            group_id=settings.app_id,
            token_prefix=token_prefix,
            held=HeldReader(
                (
                    settings.topics.egress,
                    settings.topics.dlq,
                    progress_topic(settings.app_id),
                    holding_topic(settings.app_id),
                ),
                held_patience(settings.transaction_timeout),
                self.metrics,
                conditions=self.conditions,
            ),
        )
        self.ingest = Ingest(
            settings,
            self.handoff,
            Recovery(librdkafka, settings.topics.ingest, settings.app_id),
            emitter_alive=self._emitter_alive,
            on_lost_records=self.metrics.lost.inc,
            heap=HeapTrimmer(self.clock, glibc_trim()),
        )
        # The request ids emitted lately: a reported cost is charged only for one of them.
        recent = RecentRequests() if settings.feedback_topic else None
        self.emitter = Emitter(
            settings,
            partitions,
            self.handoff,
            self.metrics,
            clock=self.clock,
            transactional_id=txn_id,
            limits=limits,
            request_rewind=self.ingest.request_rewind,
            on_committed=self.trimmer.committed,
            recent=recent,
            token_prefix=token_prefix,
            wait_for_policies=True,
        )
        self.policies = PolicyReader(settings, self.handoff)
        self.group = self._group_shares(librdkafka, partitions)
        self.feedback = self._feedback_reader(librdkafka, partitions, recent)
        # Credit from the egress group's lag, for workers that send no feedback.
        self.egress_lag = (
            None
            if not settings.egress_group
            else EgressLagReader(
                librdkafka,
                settings.topics.egress,
                settings.egress_group,
                self.handoff,
                self.metrics,
                clock=self.clock,
            )
        )
        self.auditor = Auditor(self._probe, self.metrics, settings.fairness_window)
        self._threads = self._thread_map()
        self._emitter_thread, self._ingest_thread = self._threads[:2]
        # /metrics reads the emitter's numbers only from its last scrape snapshot, taken on
        # the emitter thread (``refresh_metrics``), never its live dicts.
        self._scrape: tuple[Scrape, float] = (NO_SCRAPE, self.clock.now())
        self._watch()

    def _group_shares(self, librdkafka: dict[str, Any], partitions: int) -> DemandExchange | None:
        """The group thread's part, with shares by demand and a rate to share."""
        settings = self.settings
        group_rate = settings.rate if settings.rate is not None else settings.cost_rate
        if not self.emitter.group_shares or group_rate is None:
            return None
        return DemandExchange(
            librdkafka,
            settings.app_id,
            self.txn_id,
            group_rate,
            self.handoff,
            self.metrics,
            demand=self.emitter.demand,
            partitions=partitions,
            owned=lambda: self.emitter.owned,
            clock=self.clock,
            transactional_id=self.txn_id,
        )

    def _feedback_reader(
        self, librdkafka: dict[str, Any], partitions: int, recent: RecentRequests | None
    ) -> FeedbackReader | None:
        """The feedback thread's part, with a feedback topic. The adapted rate goes to the
        emitter, through the mailbox; the group thread reads it from there with the demand."""
        settings = self.settings
        if not settings.feedback_topic:
            return None
        emitter = self.emitter
        return FeedbackReader(
            librdkafka,
            settings.feedback_topic,
            self.handoff,
            self.metrics,
            ceiling=settings.rate,
            floor=settings.min_rate,
            recent=recent,
            ownership=lambda: (partitions, set(emitter.owned)),
            slots=emitter.counts_slots,
            startup=emitter.startup_slots,
            clock=self.clock,
            egress_topic=settings.topics.egress,
            # Credit found from the feedback, unless a fixed --max-concurrency is given.
            concurrency=(
                ConcurrencyLimit(self.clock, idle=max(60.0, settings.concurrency_lease))
                if settings.adaptive_concurrency and settings.max_concurrency is None
                else None
            ),
        )

    def _thread_map(self) -> list[threading.Thread]:
        """The threads of the module's map, emitter and ingest first, each under the one
        failure policy (``supervise``): the emitter, ingest and group threads cannot run
        twice (the group's run leaves the group for good), so their first failure is fatal;
        the others are restarted."""
        supervised = self.supervisor.thread
        threads = [
            supervised("emitter", self.emitter.run, restart=False),
            supervised("ingest", self.ingest.run, restart=False),
            supervised("policies", self.policies.run),
            supervised("trim", self.trimmer.run),
            supervised("audit", self.auditor.run),
        ]
        if self.group is not None:
            threads.append(supervised("group", self.group.run, restart=False))
        if self.feedback is not None:
            threads.append(supervised("feedback", self.feedback.run))
        if self.egress_lag is not None:
            threads.append(supervised("egress-lag", self.egress_lag.run))
        return threads

    def _watch(self) -> None:
        """The metrics and conditions read at a scrape: what threads published, and the
        emitter's last scrape."""
        metrics = self.metrics
        metrics.watch_costs(lambda: self._scrape[0].cost_by_tenant)
        metrics.watch_budgets(lambda: self._scrape[0].budgets)
        metrics.watch_tenants(
            lambda: self._scrape[0].backlog_by_tenant, lambda: self._scrape[0].emitted_by_tenant
        )
        # The tenant groups' tree: the emitter's last scrape with the auditor's rates.
        metrics.registry.register(TenantGroupCollector(self._group_rows))
        self.conditions.watch("payload-readback", self._readback_condition)
        metrics.watch_conditions(
            lambda: [(c.name, c.blocks_ready) for c in self.conditions.current()]
        )
        metrics.backlog.set_function(lambda: self._scrape[0].backlog)
        metrics.in_flight.set_function(lambda: self._scrape[0].in_flight)
        metrics.payload_bytes.set_function(lambda: self._scrape[0].payload_bytes)
        metrics.noisy_tenants.set_function(lambda: self._scrape[0].noisy_tenants)
        metrics.oldest_quiet_age.set_function(lambda: self._scrape[0].oldest_quiet_age or 0.0)

    def _emitter_alive(self) -> bool:
        return self._emitter_thread.is_alive()

    @property
    def ready(self) -> bool:
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, list[str]]:
        """Whether the instance is ready, and every reason it is not or is degraded (the
        conditions, ``observe.Conditions``): what ``/readyz`` answers."""
        reasons: list[str] = []
        if self.fatal is not None:
            reasons.append(f"failed: {self.fatal}")
        elif self.done.is_set():
            reasons.append("stopping")
        elif not self.ingest.joined.is_set():
            reasons.append("joining the group and recovering its partitions")
        elif not self.emitter.phase.policies_read:
            reasons.append("reading the policy topic: the policies recorded before the start")
        elif not self.emitter.phase.ready:
            reasons.append("rewinding to the committed progress after an aborted transaction")
        ready = not reasons
        # At the safe share (coordination failing) an instance stays ready, since it still
        # emits at a rate that cannot overshoot; this line says where its share comes from.
        coordination = self.coordination
        if coordination is not None:
            kind = "coordination" if coordination.coordinated else "degraded: coordination"
            reasons.append(f"{kind}: {coordination.describe()}")
        for condition in self.conditions.current():
            ready = ready and not condition.blocks_ready
            kind = "unready" if condition.blocks_ready else "degraded"
            reasons.append(f"{kind}: {condition.name}: {condition.reason}")
        return ready, reasons

    @property
    def coordination(self) -> Coordination | None:
        """The group thread's last coordination snapshot (None without group shares)."""
        return self.group.state if self.group is not None else None

    def start(self) -> None:
        """Fence older runs of this instance, then start the threads."""
        self.emitter.init_transactions()
        for thread in self._threads:
            thread.start()
        self.metrics.ready.set_function(lambda: 1 if self.ready else 0)

    @property
    def ingest_stopping(self) -> bool:
        return self.done.is_set()

    def fail(self, reason: str) -> None:
        """A fatal error: record it (``/healthz`` answers 503) and stop the instance."""
        if self.fatal is None:
            self.fatal = reason
            log.critical("%s; stopping", reason)
        self.stop()

    def stop(self) -> None:
        """Stop ingesting, commit what is open, leave the group. Idempotent."""
        if self.done.is_set():
            return
        self.done.set()
        threading.Thread(target=self._shutdown, name="shutdown", daemon=True).start()

    def _shutdown(self) -> None:
        self.policies.stop()
        self.trimmer.stop()
        self.auditor.stop()
        if self.group is not None:
            self.group.stop()
        if self.feedback is not None:
            self.feedback.stop()
        if self.egress_lag is not None:
            self.egress_lag.stop()
        self.ingest.stop()  # hands the emitter a Stop, then closes the consumer

    def join(self, timeout: float) -> bool:
        """Wait for every thread of the map (ingest and emitter first: they commit what is
        open and leave the group); False, naming them in the log, if some did not end within
        ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.ident is not None:  # started
                thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.error("threads still running at the end of the shutdown: %s", ", ".join(alive))
        return not alive

    # -- reads for the web endpoints --------------------------------------------------------

    def _readback_condition(self) -> Condition | None:
        """Degraded while payloads of some partition cannot be read back (``fetch``): their
        tenants wait (nothing is dead-lettered, the log still holds them), others go on."""
        failing = self.emitter.fetcher.failing  # replaced whole by the emitter
        if not failing:
            return None
        now = self.clock.now()  # the fetcher's
        parts = "; ".join(
            f"partition {p} since {now - f.since:.0f} s, {f.attempts} tries ({f.error})"
            for p, f in sorted(failing.items())
        )
        return Condition(
            "payload-readback",
            f"payloads cannot be read back from the ingest log: {parts}; their tenants "
            "wait, the others are served",
        )

    def _group_rows(self, top: int) -> list[GroupRow]:
        """The tenant groups' series (``group_series``); none for a flat core, whose scrape
        has no tree, and then no rates asked for either (O(tenants) each)."""
        tree = self._scrape[0].tree
        if tree is None:
            return []
        return group_series(tree, *self.auditor.rates(), top)

    def refresh_metrics(self) -> None:
        """Before a scrape: the emitter's numbers (``Emitter.scrape``, taken on its thread),
        at most one snapshot per ``SCRAPE_REUSE`` (a younger one is served again, its age
        said); or, when it does not answer within ``SCRAPE_WAIT`` (a long commit), its last
        snapshot, marked stale (``fairstream_metrics_snapshot_stale`` 1, and its age).
        Caller: ``/metrics``."""
        now = self.clock.now()
        alive = self._emitter_thread.is_alive()
        last, at = self._scrape
        if alive and last is not NO_SCRAPE and now - at < SCRAPE_REUSE:
            self.metrics.snapshot_stale.set(0)
            self.metrics.snapshot_age.set(now - at)
            return
        if alive:
            try:
                fresh: Scrape = self.handoff.call(self.emitter.scrape, timeout=SCRAPE_WAIT)
            except TimeoutError:
                _, at = self._scrape
                self.metrics.snapshot_stale.set(1)
                self.metrics.snapshot_age.set(now - at)
                return
            self._scrape = (fresh, now)
        else:
            self._scrape = (NO_SCRAPE, now)
        self.metrics.snapshot_stale.set(0)
        self.metrics.snapshot_age.set(0)

    def _probe(self, backlogged: bool) -> Probe | None:
        """Caller: the audit thread. Runs ``Observed.probe`` on the emitter thread."""
        if not self._emitter_thread.is_alive():
            return None
        emitter = self.emitter
        probe: Probe = self.handoff.call(
            lambda: emitter.observed.probe(emitter.core, CHART_TENANTS, backlogged=backlogged)
        )
        return probe

    def tenant_stats(self, limit: int = 50, history_since: int | None = None) -> dict[str, Any]:
        """``/tenants``: the emitter's snapshot (``Observed.tenant_stats``), with the
        auditor's egress rates, shares and last fairness window merged in here, on the
        caller's thread; with ``history_since`` (epoch ms), the auditor's per-second
        samples after it too (the console's charts)."""
        result: dict[str, Any]
        if not self._emitter_thread.is_alive():
            result = {"ready": False, "partitions": [], "tenants": []}
        else:
            now = self.clock.now()
            try:
                result = self.handoff.call(
                    lambda: self.emitter.tenant_stats(limit), timeout=SCRAPE_WAIT
                )
                self._stats_snapshot = (result, now)
                result = {**result, "stale": False}
            except TimeoutError:
                if self._stats_snapshot is None:
                    raise
                last, at = self._stats_snapshot
                # The emitter is busy (a long commit): its last answer, marked stale.
                result = {
                    **last,
                    "tenants": [dict(row) for row in last["tenants"]],
                    "stale": True,
                    "snapshot_age_s": now - at,
                }
        rates, total = self.auditor.rates()
        result["app_id"] = self.settings.app_id
        result["group_instance_id"] = self.settings.group_instance_id
        result["egress_rate"] = total
        result["share_by"] = self.settings.share_by
        feedback = self.feedback
        if feedback is not None and feedback.adaptive is not None:
            # What the feedback thread last published: AdaptiveRate is its own (not
            # thread-safe; reading its rate moves it on).
            view = feedback.view
            result["adaptive"] = {
                "rate": view.rate,
                "ceiling": feedback.adaptive.ceiling,
                "floor": feedback.adaptive.floor,
                "held_for_s": max(0.0, view.hold_until - self.clock.now()),
                "rate_limited_total": self.metrics.rate_limited._value.get(),
            }
        if self.group is not None:
            result["instances"] = self.group.instances()
        result["fairness"] = self.auditor.fairness()
        add_shares(result["tenants"], rates, total)
        add_tree(result, rates, total, limit)
        if history_since is not None:
            result["history"] = self.auditor.history(history_since)
        return result
