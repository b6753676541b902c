"""examples/fastapi_submit.py, served by FastAPI's test client against a real broker: a
request is queued on the ingest topic as the contract wants it, and bad input is a 400."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from fairstream import wire
from fairstream_dev.harness.kafka import consume, create_topics, unique

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_submit.py"


def load(monkeypatch: pytest.MonkeyPatch, bootstrap: str, topic: str) -> ModuleType:
    monkeypatch.setenv("FAIRSTREAM_BOOTSTRAP", bootstrap)
    monkeypatch.setenv("FAIRSTREAM_INGEST_TOPIC", topic)
    spec = importlib.util.spec_from_file_location("fastapi_submit", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_request_is_queued_for_its_tenant(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique("fastapi-ingest")
    create_topics(kafka_bootstrap, [topic], partitions=3)
    example = load(monkeypatch, kafka_bootstrap, topic)
    with TestClient(example.app) as client:
        ok = client.post(
            "/v1/completions",
            content=b'{"prompt": "hello"}',
            headers={"X-Tenant": "acme", "X-Cost": "120"},
        )
        bad = client.post("/v1/completions", content=b"x", headers={"X-Tenant": "x" * 256})
    assert ok.status_code == 202, ok.text
    assert bad.status_code == 400
    assert "tenant id" in bad.json()["detail"]
    answer = ok.json()
    [msg] = consume(kafka_bootstrap, topic, 1)
    assert (msg.partition(), msg.offset()) == (answer["partition"], answer["offset"])
    valid = wire.validate_ingest(msg.key(), msg.value(), msg.headers())
    assert valid == wire.Valid("acme", 120, None, answer["request_id"])
    assert msg.value() == b'{"prompt": "hello"}'
