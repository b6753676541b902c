"""The librdkafka defaults every fairstream client starts from."""

from __future__ import annotations

from fairstream.adapters.clients import assigned_consumer_config, producer_config


def test_producer_defaults_are_idempotent_murmur2_and_overridable() -> None:
    config = producer_config({"bootstrap.servers": "b:9092"})
    assert config == {
        "bootstrap.servers": "b:9092",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "partitioner": "murmur2_random",
    }
    assert producer_config({}, overrides={"linger.ms": 20})["linger.ms"] == 20


def test_advisory_producer_is_not_idempotent() -> None:
    config = producer_config({}, acks=1, linger_ms=1)
    assert config["acks"] == 1
    assert config["linger.ms"] == 1
    assert "enable.idempotence" not in config


def test_assigned_consumer_commits_nothing() -> None:
    config = assigned_consumer_config({"x": 1}, "g", {"fetch.wait.max.ms": 10})
    assert config == {
        "x": 1,
        "group.id": "g",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 10,
    }
