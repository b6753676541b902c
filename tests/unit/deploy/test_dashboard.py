"""The Grafana dashboard shipped in the Helm chart: valid, complete, and querying only metrics
that the scheduler really exports (its registry, as scraped; the integration test
tests/integration/test_console.py checks the same against a running scheduler's /metrics).
"""

from __future__ import annotations

import yaml
from prometheus_client import generate_latest

from fairstream.scheduler.metrics import Metrics
from tests.dashboard import CHART, METRIC, dashboard, queries

# What the issue asks the dashboard to show, each by words of its panels' titles.
REQUIRED_PANELS = (
    "egress rate against limit",
    "backlog",
    "dwell time quantiles",
    "dead letters by reason",
    "per-tenant share",
    "rebalances and readiness",
)


def exported_samples(metrics: Metrics) -> set[str]:
    """Sample names in the exposition text (``_total``, ``_bucket`` and all)."""
    text = generate_latest(metrics.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def scheduler_samples() -> set[str]:
    """Every sample a scheduler exports, per-tenant and labelled ones included."""
    metrics = Metrics()
    metrics.watch_tenants(lambda: {"acme": 3}, lambda: {"acme": 5})
    metrics.dead_letters.labels("expired").inc()
    metrics.transactions.labels("committed").inc()
    metrics.unsettled.labels("0").set(0)
    metrics.retention_headroom.labels("0").set(0)
    return exported_samples(metrics)


def test_the_dashboard_is_valid_grafana_json():
    data = dashboard()
    assert data["uid"] == "fairstream"
    assert data["schemaVersion"] >= 36
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))
    for panel in data["panels"]:
        assert panel["type"] in ("timeseries", "stat")
        assert panel["targets"], panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
    variables = {v["name"] for v in data["templating"]["list"]}
    assert variables == {"datasource", "job"}


def test_the_dashboard_has_every_panel_the_issue_asks_for():
    titles = [p["title"].lower() for p in dashboard()["panels"]]
    for wanted in REQUIRED_PANELS:
        assert any(wanted in t for t in titles), (wanted, titles)


def test_every_query_reads_a_metric_the_scheduler_exports():
    exported = scheduler_samples()
    used: set[str] = set()
    for title, expr in queries(dashboard()):
        names = set(METRIC.findall(expr))
        assert names, f"{title}: {expr} reads no fairstream metric"
        missing = names - exported
        assert not missing, f"{title}: {sorted(missing)} are not exported"
        used |= names
    # The fairness audit's metrics are on the dashboard too.
    assert {"fairstream_fairness_jain_index", "fairstream_fairness_shortfall_ratio"} <= used


def test_the_chart_ships_it_off_by_default_with_the_sidecar_label():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["grafanaDashboard"]["enabled"] is False
    assert values["grafanaDashboard"]["labels"] == {"grafana_dashboard": "1"}
    template = (CHART / "templates" / "grafana-dashboard.yaml").read_text()
    assert "if .Values.grafanaDashboard.enabled" in template
    assert '.Files.Get "dashboards/fairstream.json"' in template
    assert "kind: ConfigMap" in template
    ignored = (CHART / ".helmignore").read_text().split()
    assert "dashboards/" not in ignored
