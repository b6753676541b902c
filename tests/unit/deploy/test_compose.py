"""docker-compose.yml, beyond its JSON schema (which deploy/check.sh validates).

References between services, the demo worker's handler, and every FAIRSTREAM_* variable being
one that a fairstream command reads.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def validator() -> ModuleType:
    return load(ROOT / "deploy" / "validate_compose.py", "validate_compose")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_references_are_consistent(validator, compose):
    assert validator.reference_errors(compose, ROOT) == []


def test_reference_check_catches_broken_references(validator, compose):
    broken = copy.deepcopy(compose)
    broken["services"]["scheduler"]["depends_on"]["topicz"] = {"condition": "service_started"}
    broken["services"]["worker"]["volumes"] = ["./deploy/missing.py:/demo/missing.py:ro"]
    broken["services"]["scheduler"]["volumes"] = ["undeclared:/var/lib/fairstream"]
    broken["services"]["topics"]["depends_on"] = {"producer": {"condition": "service_healthy"}}
    broken["services"]["kafka"]["depends_on"] = ["prometheus"]
    broken["services"]["producer"]["command"] = ["echo $HOME"]
    errors = "\n".join(validator.reference_errors(broken, ROOT))
    assert "no service 'topicz'" in errors
    assert "missing.py does not exist" in errors
    assert "'undeclared' is not declared" in errors
    assert "'producer' has no healthcheck" in errors
    assert "'prometheus' only runs in a profile" in errors
    assert "would be interpolated" in errors


def test_the_demo_pipeline_is_complete(compose):
    services = compose["services"]
    assert services["kafka"]["image"] == "apache/kafka:4.4.0"
    assert services["scheduler"]["depends_on"]["topics"]["condition"] == (
        "service_completed_successfully"
    )
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["topics"]["command"][:2] == ["topics", "create"]
    assert services["prometheus"]["profiles"] == ["prometheus"]
    assert "/var/lib/fairstream" in services["scheduler"]["volumes"][0]
    # Services without a web port must not inherit the image's /healthz check.
    for name in ("topics", "producer", "worker"):
        assert services[name]["healthcheck"] == {"disable": True}


def test_the_demo_worker_handler_exists_and_handles_a_request(compose, caplog, monkeypatch):
    worker = compose["services"]["worker"]
    command = worker["command"]
    module_name, _, function = command[command.index("--handler") + 1].partition(":")
    mounts = {m.split(":")[1]: m.split(":")[0] for m in worker["volumes"]}
    source = mounts[f"{worker['working_dir']}/{module_name}.py"]
    module = load(ROOT / source, module_name)
    monkeypatch.setattr(module, "CALL_SECONDS", 0)
    request = SimpleNamespace(
        tenant="tenant-a",
        request_id="r-1",
        cost=1,
        payload=b"hello",
        enqueued_ms=1_000,
        scheduled_ms=1_250,
    )
    with caplog.at_level(logging.INFO, logger="demo_handler"):
        assert getattr(module, function)(request) is None
    assert "tenant=tenant-a" in caplog.text
    assert "waited 250 ms" in caplog.text


def test_every_fairstream_variable_is_read_by_a_command(compose, known_env_vars):
    known = known_env_vars
    used = set()
    for service in compose["services"].values():
        used.update(k for k in (service.get("environment") or {}) if k.startswith("FAIRSTREAM_"))
    assert used, "the demo configures fairstream through FAIRSTREAM_* variables"
    assert used <= known, sorted(used - known)
