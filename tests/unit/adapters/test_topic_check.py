"""The rules of ``fairstream topics check`` on described topics (no broker), and the
parsing of ``topics create --config``.

A single-node development broker cannot hold a topic with replication factor 3, so the
min ISR rule is tested here on described configs; tests/integration/test_topics.py runs
the other rules against topics on the real broker.
"""

from __future__ import annotations

import pytest

from fairstream.adapters.admin import TopicError, check_topic_configs, parse_topic_config
from fairstream.adapters.topic_check import (
    HEADER_HEADROOM,
    Expected,
    Finding,
    Kind,
    TopicState,
    check,
    replication,
)

BOOTSTRAP = "kafka:9092"
NAMES: dict[Kind, str] = {
    "ingest": "i",
    "egress": "e",
    "dlq": "d",
    "policy": "p",
    "progress": "app-progress",
    "coordination": "app-coordination",
}
EXPECTED = Expected(NAMES, BOOTSTRAP, "app")
ROOMY = str(1_048_588 + HEADER_HEADROOM)


def state(name: str, partitions: int = 3, rf: int = 3, **configs: str) -> TopicState:
    base = {"cleanup.policy": "delete", "min.insync.replicas": "2", "retention.ms": "604800000"}
    return TopicState(
        name, partitions, rf, {**base, **{k.replace("_", "."): v for k, v in configs.items()}}
    )


def healthy() -> dict[str, TopicState | None]:
    return {
        "i": state("i", retention_ms="-1", retention_bytes="-1", max_message_bytes="1048588"),
        "e": state("e", max_message_bytes=ROOMY),
        "d": state("d", max_message_bytes=ROOMY),
        "p": state("p", 1, cleanup_policy="compact"),
        "app-progress": state("app-progress", cleanup_policy="compact"),
        "app-coordination": state("app-coordination", 1, cleanup_policy="compact"),
    }


def problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "problem"]


# -- min.insync.replicas against the replication factor -----------------------------------


def test_min_isr_1_on_rf_3_is_a_problem_fixed_by_min_isr_2() -> None:
    (finding,) = replication(EXPECTED, state("i", rf=3, min_insync_replicas="1"))

    assert finding.severity == "problem"
    assert "replication factor 3 but min.insync.replicas=1" in finding.what
    assert "leader alone" in finding.what
    assert finding.fix == (
        "kafka-configs.sh --bootstrap-server kafka:9092 --alter --entity-type topics "
        "--entity-name i --add-config min.insync.replicas=2"
    )


def test_min_isr_2_on_rf_3_is_right() -> None:
    assert replication(EXPECTED, state("i", rf=3, min_insync_replicas="2")) == []
    assert replication(EXPECTED, state("i", rf=5, min_insync_replicas="3")) == []


def test_min_isr_above_rf_fails_every_write() -> None:
    (finding,) = replication(EXPECTED, state("i", rf=3, min_insync_replicas="4"))
    assert finding.severity == "problem"
    assert "NOT_ENOUGH_REPLICAS" in finding.what
    assert finding.fix.endswith("--add-config min.insync.replicas=2")


@pytest.mark.parametrize(
    ("rf", "isr", "said"),
    [
        (1, "1", "one replica"),
        (2, "1", "satisfied by one copy"),
        (2, "2", "one broker down stops every write"),
        (3, "3", "one broker down stops every write"),
    ],
)
def test_weak_but_working_replication_is_a_warning(rf: int, isr: str, said: str) -> None:
    (finding,) = replication(EXPECTED, state("i", rf=rf, min_insync_replicas=isr))
    assert finding.severity == "warning"
    assert said in finding.what
    assert "replication factor 3 with min.insync.replicas=2" in finding.fix


def test_the_whole_check_reports_min_isr_per_topic() -> None:
    described = healthy()
    described["e"] = state("e", max_message_bytes=ROOMY, min_insync_replicas="1")
    (finding,) = check(EXPECTED, described)
    assert (finding.severity, finding.topic) == ("problem", "e")


def test_unclean_leader_election_is_a_problem() -> None:
    described = healthy()
    described["app-progress"] = state(
        "app-progress", cleanup_policy="compact", unclean_leader_election_enable="true"
    )
    (finding,) = check(EXPECTED, described)
    assert (finding.severity, finding.topic) == ("problem", "app-progress")
    assert finding.fix.endswith("--add-config unclean.leader.election.enable=false")


# -- the other rules, on described topics --------------------------------------------------


def test_a_healthy_deployment_has_no_findings() -> None:
    assert check(EXPECTED, healthy()) == []


def test_each_rule_finds_its_fault_with_a_fix() -> None:
    described = healthy()
    described["app-progress"] = state("app-progress", 4, cleanup_policy="compact")
    described["app-coordination"] = state("app-coordination", 2, cleanup_policy="compact")
    described["p"] = state("p", 1, cleanup_policy="delete")
    described["e"] = state("e", max_message_bytes="1048588", cleanup_policy="compact")
    described["i"] = state("i", retention_ms="3600000", retention_bytes="-1")
    described["d"] = None

    found = {(f.topic, f.what.split(";")[0].split(":")[0]): f for f in check(EXPECTED, described)}

    assert set(found) == {
        ("app-progress", "has 4 partitions but the ingest topic i has 3"),
        ("app-coordination", "has 2 partitions"),
        ("p", "has cleanup.policy=delete"),
        ("e", "has cleanup.policy=compact"),
        (
            "e",
            "has max.message.bytes=1048588, but the ingest topic i takes records of up to "
            "1048588 bytes and fairstream adds up to 4096 bytes of headers",
        ),
        ("i", "has retention.ms=3600000 (1 h)"),
        ("d", "the dlq topic does not exist"),
    }
    assert all(f.severity == "problem" for f in found.values())
    fixes = {key[0] + " " + f.fix for key, f in found.items()}
    assert any("p kafka-configs.sh" in f and "cleanup.policy=compact" in f for f in fixes)
    assert any("e kafka-configs.sh" in f and "cleanup.policy=delete" in f for f in fixes)
    assert any(f"max.message.bytes={1_048_588 + HEADER_HEADROOM}" in f for f in fixes)
    assert any("i kafka-configs.sh" in f and "retention.ms=-1" in f for f in fixes)
    assert any(f.startswith("d fairstream topics create") and "--partitions 3" in f for f in fixes)
    assert any(f.startswith("app-progress") and "another --app-id" in f for f in fixes)


def test_expected_partitions_and_an_allowed_ingest_retention() -> None:
    described = healthy()
    described["i"] = state("i", retention_ms="3600000", retention_bytes="-1")
    allowing = Expected(NAMES, BOOTSTRAP, "app", partitions=6, allow_ingest_retention=True)

    findings = check(allowing, described)

    assert [f.severity for f in findings if "retention.ms" in f.what] == ["warning"]
    (wrong,) = problems(findings)
    assert wrong.topic == "i"
    assert "has 3 partitions, not the 6 expected" in wrong.what
    assert "--partitions 3" in wrong.fix


def test_missing_internal_topics_are_warnings_the_scheduler_fixes() -> None:
    described = healthy()
    described["app-progress"] = None
    described["app-coordination"] = None
    findings = check(EXPECTED, described)
    assert [(f.severity, f.topic) for f in findings] == [
        ("warning", "app-progress"),
        ("warning", "app-coordination"),
    ]


# -- topics create --config ---------------------------------------------------------------


def test_config_parsing() -> None:
    assert parse_topic_config("egress:compression.type=zstd") == (
        "egress",
        "compression.type",
        "zstd",
    )
    assert parse_topic_config(" dlq : segment.ms = 60000 ") == ("dlq", "segment.ms", "60000")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("compression.type=zstd", "expected KIND:KEY=VALUE"),
        ("egress:compression.type", "expected KIND:KEY=VALUE"),
        ("egres:compression.type=zstd", "unknown topic kind 'egres'; one of ingest, egress"),
        ("egress:compression.type=", "needs a value"),
    ],
)
def test_config_parsing_refuses_with_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(TopicError, match=message):
        parse_topic_config(text)


def test_configs_fairstream_decides_are_refused() -> None:
    with pytest.raises(TopicError, match=r"cleanup\.policy cannot be set: fairstream sets it"):
        check_topic_configs({"policy": {"cleanup.policy": "delete"}})
    with pytest.raises(TopicError, match="not a topic config name"):
        check_topic_configs({"egress": {"retention ms": "1"}})
    check_topic_configs({"egress": {"compression.type": "zstd"}})
