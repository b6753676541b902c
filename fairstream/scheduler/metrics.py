"""Prometheus metrics of one scheduler instance.

Per-tenant series are bounded (``adapters.tenant_series``): at each scrape the
``top_tenants`` tenants with the largest backlog (and, separately, the most records emitted)
get their own label, and the rest are summed under ``tenant="__other__"``. A deployment with
100,000 tenants thus exports at most ``top_tenants + 1`` series per metric, not 100,000.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from fairstream.adapters.tenant_series import OTHER, top_tenants
from fairstream.core.budget import BudgetState, format_budget, scope_name
from fairstream.scheduler.tallies import bucket_dwells

_Family = TypeVar("_Family", GaugeMetricFamily, CounterMetricFamily)
DWELL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


class TenantCollector(Collector):
    """Per-tenant backlog and emitted counts, read at scrape time."""

    def __init__(
        self,
        backlog: Callable[[], Mapping[str, int]],
        emitted: Callable[[], Mapping[str, int]],
        top_tenants: int,
    ) -> None:
        self._backlog = backlog
        self._emitted = emitted
        self._top_backlog = TopOf(top_tenants)
        self._top_emitted = TopOf(top_tenants)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield _with_top(
            GaugeMetricFamily(
                "fairstream_tenant_backlog_records",
                "Records buffered per tenant (top tenants by backlog; the rest under __other__).",
                labels=["tenant"],
            ),
            self._top_backlog(self._backlog()),
        )
        yield _with_top(
            CounterMetricFamily(
                "fairstream_tenant_emitted_records",
                "Records emitted per tenant since start (top tenants; the rest under __other__).",
                labels=["tenant"],
            ),
            self._top_emitted(self._emitted()),
        )


class TopOf:
    """``top_tenants`` of a mapping, worked out again only for another mapping: the emitter's
    snapshot is reused over many scrapes (``observe.Reused``), and with 100,000 tenants the
    selection is what a scrape costs. The mappings are the snapshot's copies, never changed
    once made."""

    __slots__ = ("_k", "_of", "_top")

    def __init__(self, k: int) -> None:
        self._k = k
        self._of: Mapping[str, int] | None = None
        self._top: tuple[list[tuple[str, int]], int] = ([], 0)

    def __call__(self, values: Mapping[str, int]) -> tuple[list[tuple[str, int]], int]:
        if values is not self._of:
            self._top = top_tenants(values, self._k)
            self._of = values  # kept: an id alone could be reused by a newer mapping
        return self._top


def _with_top(family: _Family, top: tuple[list[tuple[str, int]], int]) -> _Family:
    """``family`` with a series per tenant of ``top`` (``top_tenants``: the largest, and the
    rest summed under __other__)."""
    named, rest = top
    for tenant, count in named:
        family.add_metric([tenant], count)
    family.add_metric([OTHER], rest)
    return family


def _le(bound: float) -> str:
    # Prometheus's spelling of a bucket bound: "+Inf", "0.005", "1.0".
    return "+Inf" if bound == math.inf else repr(float(bound))


class TenantCostCollector(Collector):
    """Per tenant, the cost its records declared and the cost the workers measured (the
    ``top_tenants`` largest measured; the rest under __other__), read at scrape time."""

    def __init__(self, costs: Callable[[], Mapping[str, list[int]]], top_tenants: int) -> None:
        self._costs = costs
        self._k = top_tenants

    def collect(self) -> Iterator[CounterMetricFamily]:
        costs = self._costs()
        top, _ = top_tenants({t: c[1] for t, c in costs.items()}, self._k)
        named = {t for t, _ in top}
        for name, index, what in (
            ("fairstream_tenant_cost_declared", 0, "Cost its requests declared"),
            ("fairstream_tenant_cost_reported", 1, "Cost the workers measured"),
        ):
            family = CounterMetricFamily(
                name,
                f"{what}, per tenant, over the requests with a measured cost (top tenants "
                "by measured cost; the rest under __other__).",
                labels=["tenant"],
            )
            for tenant in sorted(named):
                family.add_metric([tenant], costs[tenant][index])
            family.add_metric([OTHER], sum(c[index] for t, c in costs.items() if t not in named))
            yield family


class BudgetCollector(Collector):
    """The budgets nearest their limit (``fairstream.core.budget``), from the emitter's last
    scrape: spent, limit, remaining and windows closed, per scope (a tenant, or ``group:``
    and a tenant group) and budget (its text form: ``1000/day``)."""

    def __init__(self, rows: Callable[[], Iterable[BudgetState]]) -> None:
        self._rows = rows

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        rows = list(self._rows())
        labels = ["scope", "budget"]
        families = (
            GaugeMetricFamily(
                "fairstream_budget_spent",
                "What the scope spent in the budget's current window (cost units, or records): "
                "reserved at emission, corrected by measured costs; the budgets nearest their "
                "limit.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "fairstream_budget_limit", "The budget's limit per window.", labels=labels
            ),
            GaugeMetricFamily(
                "fairstream_budget_remaining",
                "What the scope may still spend in the budget's current window.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "fairstream_budget_resets_at_seconds",
                "When the budget's window ends (rolling: when its oldest spend leaves it), "
                "epoch seconds.",
                labels=labels,
            ),
            CounterMetricFamily(
                "fairstream_budget_resets",
                "Windows of the budget closed since this instance counted it.",
                labels=labels,
            ),
        )
        spent, limit, remaining, resets_at, resets = families
        for row in rows:
            names = [scope_name(row.scope), format_budget(row.budget)]
            spent.add_metric(names, row.spent)
            limit.add_metric(names, row.budget.limit)
            remaining.add_metric(names, row.remaining)
            resets_at.add_metric(names, row.resets_at_ms / 1000)
            resets.add_metric(names, row.resets)
        yield from families


class ConditionCollector(Collector):
    """One series per condition of the instance now (degraded or unready), read at scrape."""

    def __init__(self, current: Callable[[], Iterable[tuple[str, bool]]]) -> None:
        self._current = current

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "fairstream_condition",
            "Something wrong with this instance now (1 per condition; the reason is in "
            "/readyz): blocks_ready=true makes it unready, false only degraded.",
            labels=["name", "blocks_ready"],
        )
        for name, blocks in self._current():
            family.add_metric([name, "true" if blocks else "false"], 1)
        yield family


class CheapHistogram(Collector):
    """A histogram with a value per egress record, observed from one thread.

    prometheus_client's Histogram takes a lock and walks its buckets on every observation
    (about 2 µs, a tenth of a record's whole emission cost); this one does a binary search
    and an increment per value, compiled (``tallies.bucket_dwells``: about 50 ns a value,
    against 170 interpreted), and builds the cumulative buckets at scrape time.
    """

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = list(buckets)
        # The same bounds, each a float: compiled code reads a float without converting an int.
        self._floats = [float(bound) for bound in buckets]
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe_lists(self, lists: Iterable[list[float]]) -> None:
        """Observe each value of each of ``lists`` (``tallies.bucket_dwells``, compiled).
        Caller: one thread only (the emitter, once per committed transaction)."""
        self.sum += bucket_dwells(self._floats, self.counts, lists)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation)
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip([*self.bounds, math.inf], list(self.counts), strict=True):
            cumulative += count
            buckets.append((_le(bound), cumulative))
        family.add_metric([], buckets, self.sum)
        yield family


class Metrics:
    """The instance's metrics, in a registry of its own (no process-global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Registered in this order (the order of /metrics), a concern at a time.
        self._flow(self.registry)
        self._concurrency(self.registry)
        self._commits(self.registry)
        self._ingest_log(self.registry)
        self._group(self.registry)
        self._feedback(self.registry)
        self._emitter(self.registry)
        self._policies(self.registry)
        self._fairness(self.registry)
        self._demotion(self.registry)
        self._health(self.registry)

    def _flow(self, r: CollectorRegistry) -> None:
        """Records in and out: buffered, emitted (and their cost and dwell), dead-lettered;
        the backlog, the open transaction, rebalances."""
        self.ingested = Counter("fairstream_ingested_records", "Records buffered.", registry=r)
        self.emitted = Counter(
            "fairstream_egress_records", "Records written to the egress topic.", registry=r
        )
        self.emitted_cost = Counter(
            "fairstream_egress_cost", "Cost units written to the egress topic.", registry=r
        )
        self.dead_letters = Counter(
            "fairstream_dead_letters",
            "Records sent to the dead-letter topic.",
            ["reason"],
            registry=r,
        )
        self.dwell = CheapHistogram(
            "fairstream_dwell_seconds",
            "Time from ingest timestamp to egress scheduling.",
            DWELL_BUCKETS,
        )
        r.register(self.dwell)
        self.rebalances = Counter("fairstream_rebalances", "Partition rebalances.", registry=r)
        self.backlog = Gauge("fairstream_backlog_records", "Records buffered.", registry=r)
        self.in_flight = Gauge(
            "fairstream_in_flight_records",
            "Egress records in the open transaction (not yet visible to read_committed readers).",
            registry=r,
        )

    def _concurrency(self, r: CollectorRegistry) -> None:
        """The concurrency slots (``--max-concurrency``, ``fairstream.core.inflight``)."""
        self.concurrency_in_flight = Gauge(
            "fairstream_concurrency_in_flight",
            "Requests this instance released and no worker reported settled yet (the "
            "concurrency slots held; counted while a concurrency limit exists).",
            registry=r,
        )
        self.concurrency_limit = Gauge(
            "fairstream_concurrency_limit",
            "This instance's part of --max-concurrency (-1: unlimited).",
            registry=r,
        )
        self.concurrency_adaptive = Gauge(
            "fairstream_concurrency_adaptive_limit",
            "The group's concurrency limit found from the workers' feedback (without "
            "--max-concurrency; -1: unlimited, no feedback to go by or turned off).",
            registry=r,
        )
        self.concurrency_adaptive.set(-1)
        self.concurrency_lease_expired = Counter(
            "fairstream_concurrency_lease_expired",
            "Concurrency slots given back because their lease ran out (a lost completion).",
            registry=r,
        )
        # Credit from the egress group's committed offsets (--egress-group).
        self.egress_lag = Gauge(
            "fairstream_egress_lag",
            "Egress offsets released and not yet committed by --egress-group, less one "
            "transaction marker per lagging partition (-1: unknown: no --egress-group, the "
            "group has committed nothing, or its offsets could not be read).",
            registry=r,
        )
        self.egress_lag.set(-1)
        self.egress_lag_bound = Gauge(
            "fairstream_egress_lag_bound",
            "The group's bound on egress offsets waiting for --egress-group, from the "
            "group's progress (-1: unlimited, nothing to go by).",
            registry=r,
        )
        self.egress_lag_bound.set(-1)
        self.egress_lag_errors = Counter(
            "fairstream_egress_lag_errors",
            "Reads of --egress-group's committed offsets or of egress's end offsets that "
            "failed (the last bound holds for a few seconds).",
            registry=r,
        )

    def _commits(self, r: CollectorRegistry) -> None:
        """The transactions and what committing one takes."""
        self.transactions = Counter(
            "fairstream_transactions",
            "Kafka transactions ended, by outcome (committed, aborted).",
            ["outcome"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "fairstream_commit_seconds",
            "Time to commit one transaction (offsets, progress, egress records).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )

    def _ingest_log(self, r: CollectorRegistry) -> None:
        """What the ingest log keeps for this instance: unsettled offsets, parking, the
        progress records, retention, trimming, the payloads held."""
        self.unsettled = Gauge(
            "fairstream_ingest_unsettled_offsets",
            "Per ingest partition: offsets between the committed low-water mark and the "
            "read position (what a restart reads again).",
            ["partition"],
            registry=r,
        )
        self.parked = Counter(
            "fairstream_parked_records",
            "Records moved to the holding topic because their tenant pinned a partition's "
            "low-water mark (paused, capped or starved), and new records of parked tenants.",
            registry=r,
        )
        self.parked_tenants = Gauge(
            "fairstream_parked_tenants",
            "Tenants with records waiting in the holding topic.",
            registry=r,
        )
        self.in_log = Gauge(
            "fairstream_backlog_in_log_records",
            "Records of tenants far behind that wait in the ingest topic: passed over as they "
            "were read, and read again when their tenant's turn nears (--index-ahead).",
            registry=r,
        )
        self.held_partitions = Gauge(
            "fairstream_ingest_held_partitions",
            "Ingest partitions read no further for now: twice --park-ranges settled ranges "
            "above the mark, interleaved with the backlog of a tenant being served.",
            registry=r,
        )
        self.held_output = Gauge(
            "fairstream_held_output_partitions",
            "Partitions of the topics this instance writes (egress, dead letters, progress, "
            "holding) whose last stable offset has stood behind their end for three "
            "transaction timeouts: a transaction left open there holds read_committed "
            "readers back (see docs/operations.md).",
            registry=r,
        )
        self.progress_bytes = Gauge(
            "fairstream_progress_record_bytes",
            "Largest progress record (one chunk) written in the last commit, in bytes.",
            registry=r,
        )
        self.progress_bytes_max = Gauge(
            "fairstream_progress_record_max_bytes",
            "Largest progress record (one chunk) written since the start, in bytes.",
            registry=r,
        )
        self.retention_headroom = Gauge(
            "fairstream_ingest_retention_headroom_seconds",
            "Per ingest partition: time left before retention may delete the oldest "
            "unsettled record (+Inf when the ingest topic keeps records forever).",
            ["partition"],
            registry=r,
        )
        self.lost = Counter(
            "fairstream_ingest_lost_records",
            "Unsettled ingest records deleted (by retention) before they could be emitted.",
            registry=r,
        )
        self.trimmed = Counter(
            "fairstream_ingest_trimmed_records",
            "Ingest records deleted below the committed low-water mark (delete_records).",
            registry=r,
        )
        self.payload_bytes = Gauge(
            "fairstream_payload_cache_bytes",
            "Bytes of buffered payloads held in memory (the rest is read back from the log).",
            registry=r,
        )

    def _group(self, r: CollectorRegistry) -> None:
        """The group-wide shares (``fairstream.scheduler.coordination.shares``)."""
        self.group_instances = Gauge(
            "fairstream_group_instances",
            "Instances counted in this instance's share (fresh coordinated reports, its own "
            "included).",
            registry=r,
        )
        self.group_demand = Gauge(
            "fairstream_group_demand_weight",
            "Total weight of the group's backlogged uncapped tenants, per priority class.",
            ["priority"],
            registry=r,
        )
        self.group_coordinated = Gauge(
            "fairstream_group_coordinated",
            "1 while this instance's share follows the group's demand; 0 while it takes the "
            "safe share (its partitions over the ingest topic's): it cannot publish or read "
            "the coordination topic, or is starting (the reason is in /readyz).",
            registry=r,
        )
        self.group_coordination_errors = Counter(
            "fairstream_group_coordination_errors",
            "Failures to publish (delivery) or read the coordination topic, by kind.",
            ["kind"],
            registry=r,
        )
        self.group_fences = Counter(
            "fairstream_group_fences",
            "Transactional ids of peers that went silent and whose partitions this instance "
            "took over, fenced so the broker aborts what they left open, by outcome "
            "(fenced, failed: the broker aborts it at its --transaction-timeout instead).",
            ["outcome"],
            registry=r,
        )
        self.group_share = Gauge(
            "fairstream_group_rate_share",
            "This instance's fraction of the group egress rate.",
            registry=r,
        )

    def _feedback(self, r: CollectorRegistry) -> None:
        """The paid API's feedback (``fairstream.scheduler.feedback.reader``) and the rate it
        adapts."""
        self.adaptive_rate = Gauge(
            "fairstream_adaptive_rate",
            "The group egress rate as the paid API's feedback allows it now (records/s; "
            "--rate without feedback).",
            registry=r,
        )
        self.rate_limited = Counter(
            "fairstream_feedback_rate_limited",
            "api-scope rate-limited outcomes (429s) the workers reported.",
            registry=r,
        )
        self.feedback = Counter(
            "fairstream_feedback_records",
            "Feedback records read, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.feedback_errors = Counter(
            "fairstream_feedback_errors",
            "Feedback records ignored, by reason (malformed, absurd-cost, unknown-request, "
            "foreign: another deployment's, naming another egress topic).",
            ["reason"],
            registry=r,
        )

    def _emitter(self, r: CollectorRegistry) -> None:
        """The emitter: payloads read back, its rate limit, its partitions, whether it is
        ready."""
        self.refetches = Counter(
            "fairstream_payload_refetches",
            "Reads of the ingest log for payloads not held in memory.",
            registry=r,
        )
        self.rate_share = Gauge(
            "fairstream_egress_rate_limit",
            "This instance's share of the group egress rate (records/s; 0: unlimited).",
            registry=r,
        )
        self.assigned = Gauge(
            "fairstream_assigned_partitions", "Ingest partitions assigned.", registry=r
        )
        self.ready = Gauge("fairstream_ready", "1 when recovered and emitting.", registry=r)

    def _policies(self, r: CollectorRegistry) -> None:
        """The policy topic (``fairstream.scheduler.policies.reader``)."""
        self.policy_updates = Counter(
            "fairstream_policy_updates", "Policy-topic records applied.", registry=r
        )
        self.policy_errors = Counter(
            "fairstream_policy_errors",
            "Policy-topic records that could not be decoded.",
            registry=r,
        )
        self.budget_refused = Counter(
            "fairstream_budget_refused",
            "Records a budget had no room for: dead-lettered (budget-exhausted), or put back "
            "to wait, their tenant out of the pick until the budget has room.",
            ["action"],
            registry=r,
        )
        self.budget_waiting = Gauge(
            "fairstream_budget_waiting_tenants",
            "Tenants out of the pick until a budget has room.",
            registry=r,
        )

    def _fairness(self, r: CollectorRegistry) -> None:
        """The fairness audit (``fairstream.scheduler.audit.auditor``), one value per closed
        window."""
        self.fairness_jain = Gauge(
            "fairstream_fairness_jain_index",
            "Jain's index, over the tenants backlogged throughout the last fairness window, "
            "of each one's egress divided by its weighted share (1: exactly fair; NaN: no "
            "tenant was backlogged throughout).",
            registry=r,
        )
        self.fairness_shortfall = Gauge(
            "fairstream_fairness_shortfall_ratio",
            "Largest fraction of its weighted share that a tenant backlogged throughout the "
            "last fairness window did not get (0: none fell short).",
            registry=r,
        )
        self.fairness_tenants = Gauge(
            "fairstream_fairness_backlogged_tenants",
            "Tenants backlogged throughout the last fairness window (those judged).",
            registry=r,
        )
        self.fairness_windows = Counter(
            "fairstream_fairness_windows", "Fairness windows closed.", registry=r
        )

    def _demotion(self, r: CollectorRegistry) -> None:
        """Automatic demotion (``--demote-share``, ``--demote-backlog``;
        ``fairstream.scheduler.emitter.demotions``), in the manner of SQS fair queues."""
        self.noisy_tenants = Gauge(
            "fairstream_noisy_tenants", "Tenants demoted one class now as noisy.", registry=r
        )
        self.oldest_quiet_age = Gauge(
            "fairstream_oldest_quiet_record_age_seconds",
            "Age of the oldest record waiting among tenants that are neither noisy nor "
            "paused (0: none waits): what demotion keeps small while noisy tenants flood.",
            registry=r,
        )
        self.demotions = Counter(
            "fairstream_demotions", "Tenants demoted as noisy (one class down).", registry=r
        )
        self.promotions = Counter(
            "fairstream_promotions", "Demoted tenants promoted back, once quiet.", registry=r
        )

    def _health(self, r: CollectorRegistry) -> None:
        """The service's own health (``fairstream.scheduler.supervise``,
        ``observe.Conditions``)."""
        self.thread_up = Gauge(
            "fairstream_thread_up",
            "1 while the supervised thread runs, 0 while it waits to be restarted.",
            ["thread"],
            registry=r,
        )
        self.thread_restarts = Counter(
            "fairstream_thread_restarts",
            "Restarts of a supervised thread after it failed.",
            ["thread"],
            registry=r,
        )
        self.snapshot_age = Gauge(
            "fairstream_metrics_snapshot_age_seconds",
            "Age of the emitter's figures in this scrape (per-tenant backlog): under 1 s "
            "when fresh (a snapshot serves the scrapes of a second), more when the emitter "
            "was busy (a long commit) and the last snapshot was served instead.",
            registry=r,
        )
        self.snapshot_stale = Gauge(
            "fairstream_metrics_snapshot_stale",
            "1 when this scrape served the emitter's last snapshot because the emitter did "
            "not answer in time (a long commit), 0 when its figures are fresh.",
            registry=r,
        )

    def watch_conditions(self, current: Callable[[], Iterable[tuple[str, bool]]]) -> None:
        """``fairstream_condition{name, blocks_ready}``: 1 per condition now (see
        ``fairstream.scheduler.observe.Conditions``)."""
        self.registry.register(ConditionCollector(current))

    def watch_budgets(self, rows: Callable[[], Iterable[BudgetState]]) -> None:
        self.registry.register(BudgetCollector(rows))

    def watch_costs(
        self, costs: Callable[[], Mapping[str, list[int]]], top_tenants: int = 20
    ) -> None:
        self.registry.register(TenantCostCollector(costs, top_tenants))

    def watch_tenants(
        self,
        backlog: Callable[[], Mapping[str, int]],
        emitted: Callable[[], Mapping[str, int]],
        top_tenants: int = 20,
    ) -> None:
        self.registry.register(TenantCollector(backlog, emitted, top_tenants))
