"""``fairstream tenants`` against a real broker: round trips through the compacted policy topic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from fairstream.adapters.policy_store import read_policies
from fairstream.core.tenant import TenantPolicy
from fairstream.wire.policy import DEFAULT_POLICY_KEY, decode_policy
from fairstream_dev.harness.kafka import consume, create_topics, unique, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def tenants(bootstrap: str, topic: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``fairstream tenants ...`` in a fresh interpreter, as a user would."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fairstream",
            "tenants",
            *args,
            "--bootstrap",
            bootstrap,
            "--policy-topic",
            topic,
            "--timeout",
            "30",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def end_offset(bootstrap: str, topic: str) -> int:
    """The policy topic's end offset. A topic just created may not be in this new client's
    metadata yet (``_UNKNOWN_PARTITION``): asked again until it is, within a deadline."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("offsets")})
    high: list[int] = []

    def known() -> bool:
        try:
            high.append(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1])
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
            return False
        return True

    try:
        wait_until(known, 30, f"the end offset of {topic}", interval=0.2)
    finally:
        consumer.close()
    return int(high[-1])


@pytest.fixture
def policy_topic(kafka_bootstrap: str) -> str:
    name = unique("fs-policy")
    create_topics(kafka_bootstrap, [name], partitions=1, config={"cleanup.policy": "compact"})
    return name


def test_set_get_list_reset_default_purge(kafka_bootstrap: str, policy_topic: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return tenants(kafka_bootstrap, policy_topic, *args)

    # Nothing written yet: every tenant has the built-in defaults.
    got = json.loads(ok(run("get", "acme", "--json")))
    assert got["source"] == "built-in default"
    assert got["weight"] == 1
    assert json.loads(ok(run("list", "--json"))) == []

    # Defaults, then a tenant that starts from them.
    ok(run("set", "--default", "--max-backlog", "500", "--rate", "20", "--rate-burst", "5"))
    ok(run("set", "acme", "--weight", "3", "--priority", "1", "--pause"))
    got = json.loads(ok(run("get", "acme", "--json")))
    assert got["source"] == "explicit"
    assert (got["weight"], got["priority"], got["paused"]) == (3, 1, True)
    assert (got["max_backlog"], got["rate_cap"], got["cap_burst"]) == (500, 20, 5)
    other = json.loads(ok(run("get", "globex", "--json")))
    assert other["source"] == "default"
    assert other["max_backlog"] == 500

    # A merge keeps the fields not given; 'none' lifts a limit.
    ok(run("set", "acme", "--resume", "--max-backlog", "none"))
    got = json.loads(ok(run("get", "acme", "--json")))
    assert (got["weight"], got["paused"], got["max_backlog"]) == (3, False, None)

    # What the scheduler will see, decoded in-process from the topic.
    policies = read_policies(kafka_bootstrap, policy_topic, timeout=30)
    assert set(policies) == {DEFAULT_POLICY_KEY, b"acme"}
    assert policies[b"acme"].policy == TenantPolicy(
        weight=3, priority=1, rate_cap=20, cap_burst=5, paused=False
    )
    assert policies[b"acme"].updated_at_ms > time.time() * 1000 - 600_000

    table = ok(run("list"))
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["TENANT", "WEIGHT", "PRIORITY"]
    assert lines[1].startswith("(default)")
    assert lines[2].startswith("acme")
    assert [row["tenant"] for row in json.loads(ok(run("list", "--json")))] == [None, "acme"]

    # Purge: the current policy, with purge_before = now.
    before = int(time.time() * 1000)
    ok(run("purge", "acme", "--yes"))
    purged = read_policies(kafka_bootstrap, policy_topic, timeout=30)[b"acme"]
    assert purged.policy == policies[b"acme"].policy
    assert purged.purge_before_ms is not None
    assert before - 5000 <= purged.purge_before_ms <= int(time.time() * 1000)
    # A purge of a tenant that followed the defaults copies them.
    ok(run("purge", "initech", "--yes"))
    assert read_policies(kafka_bootstrap, policy_topic)[b"initech"].policy.max_backlog == 500

    # Reset: a tombstone; the tenant follows the defaults again.
    ok(run("reset", "acme"))
    got = json.loads(ok(run("get", "acme", "--json")))
    assert got["source"] == "default"
    assert got["weight"] == 1
    assert b"acme" not in read_policies(kafka_bootstrap, policy_topic)
    # Resetting what has no policy writes nothing.
    offset = end_offset(kafka_bootstrap, policy_topic)
    ok(run("reset", "acme"))
    assert end_offset(kafka_bootstrap, policy_topic) == offset
    ok(run("reset", "--default"))
    assert json.loads(ok(run("get", "globex", "--json")))["source"] == "built-in default"


@pytest.mark.parametrize(
    "args",
    [
        ("set", "acme", "--weight", "0"),
        ("set", "acme", "--weight", "-2"),
        ("set", "acme", "--weight", "nan"),
        ("set", "acme", "--priority", "-1"),
        ("set", "acme", "--max-backlog", "-5"),
        ("set", "acme", "--max-backlog-cost", "0"),
        ("set", "acme", "--rate", "0"),
        ("set", "acme", "--rate-burst", "0.5"),
        ("set", "acme", "--max-concurrency", "0"),
        ("set", "acme", "--max-concurrency", "1.5"),
        ("set", "acme", "--pause", "--resume"),
        ("set", "acme"),
        ("set", "", "--weight", "2"),
        ("set", "x" * 256, "--weight", "2"),
        ("set", "acme", "--default", "--weight", "2"),
        ("purge", ""),
    ],
    ids=lambda a: " ".join(a)[:40],
)
def test_invalid_values_write_nothing(
    kafka_bootstrap: str, policy_topic: str, args: tuple[str, ...]
) -> None:
    before = end_offset(kafka_bootstrap, policy_topic)
    result = tenants(kafka_bootstrap, policy_topic, *args)
    assert result.returncode != 0
    assert "Error" in result.stderr
    assert "Traceback" not in result.stderr
    assert end_offset(kafka_bootstrap, policy_topic) == before


def test_missing_topic_is_a_clear_error(kafka_bootstrap: str) -> None:
    missing = unique("fs-no-such-policy")
    result = tenants(kafka_bootstrap, missing, "set", "acme", "--weight", "2")
    assert result.returncode == 1
    assert f"the policy topic {missing} does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_undecodable_values_are_skipped_with_a_warning(
    kafka_bootstrap: str, policy_topic: str
) -> None:
    ok(tenants(kafka_bootstrap, policy_topic, "set", "acme", "--weight", "2"))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    producer.produce(policy_topic, key=b"globex", value=b'{"weight": 5}')
    producer.flush(30)
    result = tenants(kafka_bootstrap, policy_topic, "list", "--json")
    rows = json.loads(ok(result))
    assert [r["tenant"] for r in rows] == ["acme"]
    assert "skipped the policy of 'globex'" in result.stderr
    assert "C3 01" in result.stderr
    with pytest.raises(ValueError, match="C3 01"):
        read_policies(kafka_bootstrap, policy_topic)
    # The CLI's own writes decode with the library the scheduler uses.
    value = consume(kafka_bootstrap, policy_topic, 1)[0].value()
    assert value is not None
    assert decode_policy(value).policy.weight == 2


def test_max_concurrency_is_set_shown_and_removed(kafka_bootstrap: str, policy_topic: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return tenants(kafka_bootstrap, policy_topic, *args)

    assert "max_concurrency: 4" in ok(run("set", "acme", "--max-concurrency", "4"))
    got = json.loads(ok(run("get", "acme", "--json")))
    assert got["max_concurrency"] == 4
    assert "CONCURRENCY" in ok(run("list"))
    ok(run("set", "acme", "--max-concurrency", "none"))
    assert json.loads(ok(run("get", "acme", "--json")))["max_concurrency"] is None
    stored = read_policies(kafka_bootstrap, policy_topic, timeout=30)
    assert stored[b"acme"].policy == TenantPolicy(max_concurrency=None)


def test_budgets_are_set_replaced_shown_and_removed(
    kafka_bootstrap: str, policy_topic: str
) -> None:
    from fairstream.core.budget import Budget

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return tenants(kafka_bootstrap, policy_topic, *args)

    out = ok(run("set", "acme", "--budget", "1000/day", "--budget", "50/minute,records"))
    assert "budgets: 1000/day; 50/minute,records" in out
    # A budget of the same window replaces the one there; another window is added.
    ok(run("set", "acme", "--budget", "2000/day,tz=Europe/Paris,dead-letter"))
    ok(run("set", "acme", "--budget", "1500/day"))
    got = json.loads(ok(run("get", "acme", "--json")))
    assert got["budgets"] == [
        "1500/day",
        "50/minute,records",
        "2000/day,dead-letter,tz=Europe/Paris",
    ]
    assert "BUDGETS" in ok(run("list"))
    stored = read_policies(kafka_bootstrap, policy_topic, timeout=30)
    assert stored[b"acme"].policy.budgets == (
        Budget(1500, "day"),
        Budget(50, "minute", unit="records"),
        Budget(2000, "day", time_zone="Europe/Paris", on_exhausted="dead-letter"),
    )
    bad = run("set", "acme", "--budget", "10/week")
    assert bad.returncode == 2
    assert "LIMIT/WINDOW" in bad.stderr
    ok(run("set", "acme", "--no-budgets"))
    assert json.loads(ok(run("get", "acme", "--json")))["budgets"] == []
