"""Prometheus metrics of one ``fairstream.Worker``, and the HTTP endpoint that serves them.

Per-tenant series are bounded as the scheduler's are (``fairstream.adapters.tenant_series``):
at each scrape the ``top_tenants`` tenants with the largest value get a label of their own
and the rest are summed under ``tenant="__other__"``, each metric ranked separately.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fairstream.adapters.tenant_series import OTHER, top_tenants
from fairstream.errors import Error

# Handler calls of paid APIs: from a cached answer (ms) to a long generation (minutes).
HANDLER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DEFAULT_TOP_TENANTS = 20


class _TenantCollector(Collector):
    """Per-tenant handled, dead-lettered and in-flight records, read at scrape time."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        handled, dead, in_flight = self._metrics.tenant_snapshot()
        k = self._metrics.top_tenants
        families: list[tuple[Any, Mapping[str, int]]] = [
            (
                CounterMetricFamily(
                    "fairstream_worker_tenant_handled_records",
                    "Requests handled per tenant (top tenants; the rest under __other__).",
                    labels=["tenant"],
                ),
                handled,
            ),
            (
                CounterMetricFamily(
                    "fairstream_worker_tenant_dead_letters",
                    "Requests dead-lettered per tenant (top tenants; the rest under __other__).",
                    labels=["tenant"],
                ),
                dead,
            ),
            (
                GaugeMetricFamily(
                    "fairstream_worker_tenant_in_flight_records",
                    "Requests fetched and not finished per tenant (top tenants; the rest "
                    "under __other__).",
                    labels=["tenant"],
                ),
                in_flight,
            ),
        ]
        for family, values in families:
            top, rest = top_tenants(values, k)
            for tenant, value in top:
                family.add_metric([tenant], value)
            family.add_metric([OTHER], rest)
            yield family


class WorkerMetrics:
    """A worker's metrics, in a registry of its own unless one is given.

    The consumer thread reports outcomes (``handled``, ``dead_lettered``...) and the
    fetched/finished records; the event loop reports handler calls and retries. Scrapes
    come from any thread (the HTTP server's).
    Caller: ``fairstream.Worker``. Affects: this object and its registry.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        top_tenants: int = DEFAULT_TOP_TENANTS,
    ) -> None:
        if top_tenants < 0:
            raise ValueError(f"top_tenants must be 0 or more, got {top_tenants}")
        self.registry = registry if registry is not None else CollectorRegistry()
        self.top_tenants = top_tenants
        r = self.registry
        self.handled_total = Counter(
            "fairstream_worker_handled_records",
            "Requests whose handler succeeded.",
            registry=r,
        )
        self.retries = Counter(
            "fairstream_worker_retries",
            "Handler calls that failed and were tried again after a backoff.",
            registry=r,
        )
        self.rate_limited = Counter(
            "fairstream_worker_rate_limited",
            "Handler calls the API refused as rate-limited (the handler raised "
            "fairstream.RateLimited); retried without using up an attempt.",
            registry=r,
        )
        self.feedback_records = Counter(
            "fairstream_worker_feedback_records",
            "Feedback records handed to the producer for the feedback topic.",
            registry=r,
        )
        self.feedback_errors = Counter(
            "fairstream_worker_feedback_errors",
            "Feedback records lost: the producer's queue was full, or the broker did not "
            "take them (e.g. the feedback topic does not exist).",
            registry=r,
        )
        self.dead_letters = Counter(
            "fairstream_worker_dead_letters",
            "Requests written to the dead-letter topic (acknowledged by the broker).",
            ["reason"],
            registry=r,
        )
        self.duplicates = Counter(
            "fairstream_worker_duplicates_skipped",
            "Requests skipped because their request id (or the record itself) was handled.",
            registry=r,
        )
        self.abandoned = Counter(
            "fairstream_worker_abandoned_records",
            "Requests left unfinished for the partition's next owner (rebalance, stop).",
            registry=r,
        )
        self.handler_seconds = Histogram(
            "fairstream_worker_handler_seconds",
            "Duration of one handler call (every attempt, successful or not).",
            buckets=HANDLER_BUCKETS,
            registry=r,
        )
        self.running = Gauge(
            "fairstream_worker_running_handlers", "Handler calls running now.", registry=r
        )
        self.in_flight = Gauge(
            "fairstream_worker_in_flight_records",
            "Requests fetched and not finished: queued, running, or waiting for a retry.",
            registry=r,
        )
        self.in_flight.set_function(self._in_flight_total)
        self.assigned = Gauge(
            "fairstream_worker_assigned_partitions",
            "Egress partitions this worker owns.",
            registry=r,
        )
        self._lock = threading.Lock()
        self._handled: Tally[str] = Tally()
        self._dead: Tally[str] = Tally()
        self._in_flight: Tally[str] = Tally()
        r.register(_TenantCollector(self))

    # Caller: the worker's consumer thread.

    def fetched(self, tenant: str) -> None:
        with self._lock:
            self._in_flight[tenant] += 1

    def finished(self, tenant: str) -> None:
        """A fetched record is resolved (whatever the outcome)."""
        with self._lock:
            left = self._in_flight[tenant] - 1
            if left > 0:
                self._in_flight[tenant] = left
            else:
                del self._in_flight[tenant]

    def handled(self, tenant: str) -> None:
        self.handled_total.inc()
        with self._lock:
            self._handled[tenant] += 1

    def dead_lettered(self, tenant: str, reason: str) -> None:
        self.dead_letters.labels(reason).inc()
        with self._lock:
            self._dead[tenant] += 1

    # Caller: the scrape.

    def _in_flight_total(self) -> float:
        with self._lock:
            return float(sum(self._in_flight.values()))

    def tenant_snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Copies of the per-tenant handled, dead-lettered and in-flight counts."""
        with self._lock:
            return dict(self._handled), dict(self._dead), dict(self._in_flight)


class MetricsPortError(Error, OSError):
    """The metrics endpoint cannot listen where it was asked to (port taken, bad address)."""


class MetricsServer:
    """``/metrics`` of one registry over HTTP, on a thread of its own.

    Caller: ``Worker.run`` (started before consuming, closed when it returns).
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise MetricsPortError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self.host = host
        self.port = int(self._server.server_port)  # the real one when port was 0

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
