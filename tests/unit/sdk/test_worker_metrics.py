"""The worker's Prometheus metrics: per-tenant series bounded like the scheduler's, in-flight
counts that return to zero, and a registry of their own unless one is given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairstream.adapters.tenant_series import OTHER, top_tenants
from fairstream.sdk.worker.metrics import WorkerMetrics


def samples(metrics: WorkerMetrics) -> dict[str, dict[str, float]]:
    """{sample name: {tenant label, or "": value}} of the registry's text format."""
    text = generate_latest(metrics.registry).decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[sample.labels.get("tenant", "")] = sample.value
    return out


def test_per_tenant_series_are_the_top_tenants_and_other() -> None:
    metrics = WorkerMetrics(top_tenants=3)
    for i in range(1, 11):  # tenant t10 handled 10 requests, t01 one
        for _ in range(i):
            metrics.fetched(f"t{i:02d}")
            metrics.finished(f"t{i:02d}")
            metrics.handled(f"t{i:02d}")
    metrics.fetched("t01")  # one request of t01 still in flight
    metrics.dead_lettered("t02", "handler-failed")

    out = samples(metrics)

    assert out["fairstream_worker_tenant_handled_records_total"] == {
        "t10": 10,
        "t09": 9,
        "t08": 8,
        OTHER: sum(range(1, 8)),
    }
    assert out["fairstream_worker_tenant_dead_letters_total"] == {"t02": 1, OTHER: 0}
    assert out["fairstream_worker_tenant_in_flight_records"] == {"t01": 1, OTHER: 0}
    assert out["fairstream_worker_handled_records_total"][""] == 55
    assert out["fairstream_worker_in_flight_records"][""] == 1
    assert out["fairstream_worker_rate_limited_total"][""] == 0


def test_in_flight_tenants_are_forgotten_when_done() -> None:
    metrics = WorkerMetrics()
    for i in range(1000):
        metrics.fetched(f"t{i}")
    for i in range(1000):
        metrics.finished(f"t{i}")
    _, _, in_flight = metrics.tenant_snapshot()
    assert in_flight == {}
    assert samples(metrics)["fairstream_worker_in_flight_records"][""] == 0


def test_a_tenant_named_other_is_counted_with_the_rest() -> None:
    top, rest = top_tenants({OTHER: 100, "a": 5, "b": 1}, 1)
    assert top == [("a", 5)]
    assert rest == 101


def test_metrics_go_to_a_given_registry() -> None:
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.handled("acme")
    assert registry.get_sample_value("fairstream_worker_handled_records_total") == 1
    # Two workers in one process keep apart by default.
    assert WorkerMetrics().registry is not WorkerMetrics().registry
