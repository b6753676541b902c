"""The chart against the scheduler's settings: every setting has a value (or is the chart's
to decide, with the reason), the chart's defaults are the CLI's, and the rendered chart
sets them.

The first two need no helm. The rendering tests run helm (deploy/ensure-helm.sh's cached
build, or HELM); deploy/check.sh runs them with FAIRSTREAM_REQUIRE_HELM=1, where a missing
helm fails instead of skipping.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from fairstream.cli import main
from fairstream.config import KafkaConnection, Settings, Topics, settings_from_options
from fairstream.config.setting import Declared, declared

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "fairstream"
REPOSITORY = "registry.example.com/platform/fairstream"

# Settings whose value the chart decides, and why.
CHART_DECIDES = {
    "group_instance_id": "the pod name (static membership; also the transactional identity)",
    "data_dir": "/var/lib/fairstream, an emptyDir or the PVC of persistence.enabled",
    "web_host": "0.0.0.0: the probes and the Service reach the pod's address",
}
# Values whose chart default differs from the CLI's on purpose, and why.
PRODUCTION_DEFAULTS = {
    "replication_factor": (3, "a cluster the chart installs on is a production one: RF 3"),
}
# Where a setting's value is, when not scheduler.<camelCase name> (the Kafka connection's
# are under kafka.*, with the cluster's address rather than a default).
PLACES = {
    **{s.field.name: ("topics", s.field.name) for s in declared(Topics)},
    "replication_factor": ("topics", "replicationFactor"),
}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def chart_value(values: dict[str, Any], setting: Declared) -> Any:
    section, key = PLACES.get(setting.field.name, ("scheduler", camel(setting.field.name)))
    assert key in values[section], f"{setting.flag} has no value {section}.{key} in values.yaml"
    return values[section][key]


def scheduler_settings() -> list[Declared]:
    kafka = {s.field.name for s in declared(KafkaConnection)}
    return [s for s in declared(Settings) if s.field.name not in kafka | set(CHART_DECIDES)]


def test_every_scheduler_setting_has_a_chart_value(values: dict[str, Any]) -> None:
    for setting in scheduler_settings():
        chart_value(values, setting)  # asserts it is there
    # and the chart has no scheduler value that is not a setting (or the pods' own)
    names = {camel(s.field.name) for s in scheduler_settings()}
    pods = {
        "replicas",
        "terminationGracePeriodSeconds",
        "podManagementPolicy",
        "persistence",
        "resources",
        "livenessProbe",
        "readinessProbe",
        "pdb",
        "extraEnv",
        "podAnnotations",
        "podLabels",
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
    }
    assert set(values["scheduler"]) - names - pods == set()


def test_chart_defaults_are_the_clis(values: dict[str, Any]) -> None:
    for setting in scheduler_settings():
        chart = chart_value(values, setting)
        if setting.field.name in PRODUCTION_DEFAULTS:
            assert chart == PRODUCTION_DEFAULTS[setting.field.name][0]
            continue
        # Declared.default is in the option's unit (MiB for --buffer-memory), as the chart's.
        assert chart == setting.default, f"{setting.flag}: chart {chart!r}, CLI {setting.default!r}"


def test_every_setting_variable_is_set_by_a_template() -> None:
    text = "\n".join(p.read_text() for p in (CHART / "templates").iterdir())
    missing = [s.env for s in declared(Settings) if s.env not in text]
    assert missing == []


# -- rendered with helm ------------------------------------------------------------------------


def helm_binary() -> str | None:
    given = os.environ.get("HELM")
    if given:
        return given
    cached = sorted(
        Path(os.environ.get("FAIRSTREAM_CACHE_DIR", Path.home() / ".cache" / "fairstream"))
        .joinpath("tools")
        .glob("helm-*/helm")
    )
    return str(cached[-1]) if cached else shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    found = helm_binary()
    if found is None:
        if os.environ.get("FAIRSTREAM_REQUIRE_HELM") == "1":
            pytest.fail("no helm: run deploy/ensure-helm.sh (make deploy-check does)")
        pytest.skip(
            "no helm binary (deploy/ensure-helm.sh builds one; make deploy-check runs this)"
        )
    return found


def template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "template", "fairstream", str(CHART), "--kube-version", "1.37.0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def rendered(helm: str, *args: str) -> list[dict[str, Any]]:
    result = template(helm, "--set", f"image.repository={REPOSITORY}", *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def test_the_defaults_refuse_to_render_until_an_image_repository_is_given(helm: str) -> None:
    refused = template(helm)
    assert refused.returncode != 0
    assert "image.repository is required" in refused.stderr
    assert "make image-push IMAGE=" in refused.stderr

    docs = rendered(helm)
    statefulset = one(docs, "StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{REPOSITORY}:0.1.0"


def test_the_configmap_sets_every_scheduler_setting_to_the_clis_default(helm: str) -> None:
    data = one(rendered(helm), "ConfigMap")["data"]
    for setting in scheduler_settings():
        if setting.default is None:  # unlimited / computed: the variable stays unset
            assert setting.env not in data, setting.env
            continue
        assert setting.env in data, setting.env
        wanted = PRODUCTION_DEFAULTS.get(setting.field.name, (setting.default,))[0]
        assert yaml.safe_load(data[setting.env]) == wanted, setting.env
    docs = rendered(helm, "--set", "scheduler.rate=100", "--set", "scheduler.minRate=5")
    data = one(docs, "ConfigMap")["data"]
    assert (data["FAIRSTREAM_RATE"], data["FAIRSTREAM_MIN_RATE"]) == ("100", "5")


def test_schedulers_have_no_pvc_unless_asked(helm: str) -> None:
    spec = one(rendered(helm), "StatefulSet")["spec"]
    assert "volumeClaimTemplates" not in spec
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]

    spec = one(rendered(helm, "--set", "scheduler.persistence.enabled=true"), "StatefulSet")["spec"]
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert "data" not in {v["name"] for v in spec["template"]["spec"]["volumes"]}


def test_workers_get_probes_a_metrics_port_and_a_pod_monitor(helm: str) -> None:
    worker = ["--set", "worker.enabled=true", "--set", "worker.handler=app:handle"]
    docs = rendered(helm, *worker, "--set", "worker.podMonitor.enabled=true")
    deployment = one(docs, "Deployment", "-worker")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9091, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FAIRSTREAM_WORKER_METRICS_PORT"] == "9091"
    monitor = one(docs, "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()

    assert [d for d in rendered(helm, *worker) if d["kind"] == "PodMonitor"] == []


def test_the_topics_job_passes_replication_min_isr_retention_and_configs(helm: str) -> None:
    docs = rendered(
        helm,
        "--set",
        "topics.egressRetentionMs=86400000",
        "--set",
        "topics.config[0]=egress:compression.type=zstd",
    )
    (container,) = one(docs, "Job", "-topics")["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[:2] == ["topics", "create"]
    pairs = dict(zip(args[2::2], args[3::2], strict=True))
    assert pairs["--min-insync-replicas"] == "2"
    assert pairs["--ingest-retention-ms"] == "-1"
    assert pairs["--egress-retention-ms"] == "86400000"
    assert pairs["--config"] == "egress:compression.type=zstd"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FAIRSTREAM_REPLICATION_FACTOR"] == "3"


def test_the_scheduler_reads_the_rendered_configmap_as_the_clis_defaults(
    helm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap's strings ("true", "0.1", "512") parse into the settings meant."""
    data = one(rendered(helm), "ConfigMap")["data"]
    for name in [n for n in os.environ if n.startswith("FAIRSTREAM_")]:
        monkeypatch.delenv(name)
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    command = main.get_command(click.Context(main), "scheduler")
    assert command is not None
    ctx = command.make_context("scheduler", [])

    settings = settings_from_options(**ctx.params)

    assert settings == dataclasses.replace(
        Settings(),
        kafka=dataclasses.replace(KafkaConnection(), bootstrap="kafka:9092"),
        replication_factor=3,
        data_dir=Path("/var/lib/fairstream"),
    )
