"""Prometheus metrics of one scheduler instance.

Per-tenant series are bounded: at each scrape the ``top_tenants`` tenants with the largest
backlog (and, separately, the most records emitted) get their own label, and the rest are
summed under ``tenant="__other__"``. A deployment with 100,000 tenants thus exports at most
``top_tenants + 1`` series per metric, not 100,000.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

OTHER = "__other__"
DWELL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


def _top(values: Mapping[str, int], k: int) -> tuple[list[tuple[str, int]], int]:
    # A tenant whose id is literally __other__ is counted with the rest: a label of its own
    # would duplicate the rest's series.
    named = ((t, v) for t, v in values.items() if t != OTHER)
    top = heapq.nlargest(k, named, key=lambda kv: kv[1])
    rest = sum(values.values()) - sum(v for _, v in top)
    return top, rest


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
        self._k = top_tenants

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        backlog = GaugeMetricFamily(
            "fairstream_tenant_backlog_records",
            "Records buffered per tenant (top tenants by backlog; the rest under __other__).",
            labels=["tenant"],
        )
        top, rest = _top(self._backlog(), self._k)
        for tenant, count in top:
            backlog.add_metric([tenant], count)
        backlog.add_metric([OTHER], rest)
        yield backlog
        emitted = CounterMetricFamily(
            "fairstream_tenant_emitted_records",
            "Records emitted per tenant since start (top tenants; the rest under __other__).",
            labels=["tenant"],
        )
        top, rest = _top(self._emitted(), self._k)
        for tenant, count in top:
            emitted.add_metric([tenant], count)
        emitted.add_metric([OTHER], rest)
        yield emitted


class Metrics:
    """The instance's metrics, in a registry of its own (no process-global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
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
        self.dwell = Histogram(
            "fairstream_dwell_seconds",
            "Time from ingest timestamp to egress scheduling.",
            buckets=DWELL_BUCKETS,
            registry=r,
        )
        self.rebalances = Counter("fairstream_rebalances", "Partition rebalances.", registry=r)
        self.backlog = Gauge("fairstream_backlog_records", "Records buffered.", registry=r)
        self.in_flight = Gauge(
            "fairstream_in_flight_records", "Egress sends awaiting acknowledgement.", registry=r
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
        self.policy_updates = Counter(
            "fairstream_policy_updates", "Policy-topic records applied.", registry=r
        )
        self.policy_errors = Counter(
            "fairstream_policy_errors",
            "Policy-topic records that could not be decoded.",
            registry=r,
        )

    def watch_tenants(
        self,
        backlog: Callable[[], Mapping[str, int]],
        emitted: Callable[[], Mapping[str, int]],
        top_tenants: int = 20,
    ) -> None:
        self.registry.register(TenantCollector(backlog, emitted, top_tenants))
