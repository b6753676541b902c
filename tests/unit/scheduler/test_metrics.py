"""Prometheus metrics: per-tenant series stay bounded, whatever the number of tenants."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fairstream.adapters.tenant_series import OTHER
from fairstream.scheduler.metrics import Metrics


def scrape(metrics: Metrics) -> dict[str, dict[str, float]]:
    """{sample name: {tenant label: value}} of the per-tenant samples in the text format."""
    text = generate_latest(metrics.registry).decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "tenant" in sample.labels:
                out.setdefault(sample.name, {})[sample.labels["tenant"]] = sample.value
    return out


def test_at_most_top_tenants_plus_other_per_metric() -> None:
    backlog = {f"t{i:03d}": i for i in range(1, 101)}  # t100 has the most, 100 records
    emitted = {f"t{i:03d}": 1000 - i for i in range(1, 101)}  # t001 has the most
    metrics = Metrics()
    metrics.watch_tenants(lambda: backlog, lambda: emitted, top_tenants=5)

    samples = scrape(metrics)

    assert samples["fairstream_tenant_backlog_records"] == {
        "t100": 100,
        "t099": 99,
        "t098": 98,
        "t097": 97,
        "t096": 96,
        OTHER: sum(range(1, 96)),
    }
    # Ranked separately: the tenants that emitted most are not the most backlogged ones.
    assert samples["fairstream_tenant_emitted_records_total"] == {
        "t001": 999,
        "t002": 998,
        "t003": 997,
        "t004": 996,
        "t005": 995,
        OTHER: sum(1000 - i for i in range(6, 101)),
    }


def test_series_totals_equal_the_real_totals() -> None:
    backlog = {f"tenant-{i}": (i * 7919) % 1000 for i in range(10_000)}
    metrics = Metrics()
    metrics.watch_tenants(lambda: backlog, dict, top_tenants=20)

    series = scrape(metrics)["fairstream_tenant_backlog_records"]

    assert len(series) == 21
    assert sum(series.values()) == sum(backlog.values())
    named = {t: v for t, v in series.items() if t != OTHER}
    assert min(named.values()) >= max(v for t, v in backlog.items() if t not in named)


def test_fewer_tenants_than_the_limit_each_get_a_series_and_other_is_zero() -> None:
    metrics = Metrics()
    metrics.watch_tenants(lambda: {"a": 3, "b": 1}, lambda: {}, top_tenants=20)

    samples = scrape(metrics)

    assert samples["fairstream_tenant_backlog_records"] == {"a": 3, "b": 1, OTHER: 0}
    assert samples["fairstream_tenant_emitted_records_total"] == {OTHER: 0}


def test_series_follow_the_values_at_each_scrape() -> None:
    # As the service hands them: the emitter's snapshot, a new mapping at each refresh.
    snapshots = [{"a": 5, "b": 1, "c": 2}]
    metrics = Metrics()
    metrics.watch_tenants(lambda: snapshots[-1], dict, top_tenants=1)
    assert scrape(metrics)["fairstream_tenant_backlog_records"] == {"a": 5, OTHER: 3}

    snapshots.append({"a": 0, "b": 1, "c": 9})

    assert scrape(metrics)["fairstream_tenant_backlog_records"] == {"c": 9, OTHER: 1}


class CountedItems(dict[str, int]):
    """A snapshot that counts how often its items are walked."""

    walks = 0

    def items(self) -> Any:
        self.walks += 1
        return super().items()


def test_a_snapshot_reused_over_scrapes_is_ranked_once() -> None:
    # The emitter's snapshot is reused over many scrapes (``observe.Reused``): with 100,000
    # tenants, ranking it again at each scrape was most of what a scrape cost.
    snapshot = CountedItems({f"t{i}": i for i in range(100)})
    metrics = Metrics()
    metrics.watch_tenants(lambda: snapshot, dict, top_tenants=3)

    for _ in range(5):
        assert scrape(metrics)["fairstream_tenant_backlog_records"] == {
            "t99": 99,
            "t98": 98,
            "t97": 97,
            OTHER: sum(range(97)),
        }

    assert snapshot.walks == 1


def test_instances_do_not_share_a_registry() -> None:
    first, second = Metrics(), Metrics()
    first.ingested.inc(3)

    assert "fairstream_ingested_records_total 3.0" in generate_latest(first.registry).decode()
    assert "fairstream_ingested_records_total 0.0" in generate_latest(second.registry).decode()


def test_a_tenant_called_other_does_not_duplicate_the_other_series() -> None:
    metrics = Metrics()
    metrics.watch_tenants(lambda: {OTHER: 5, "a": 1, "b": 2}, dict, top_tenants=1)

    text = generate_latest(metrics.registry).decode()

    lines = [line for line in text.splitlines() if line.startswith("fairstream_tenant_backlog")]
    assert len(lines) == len(set(line.rsplit(" ", 1)[0] for line in lines))
