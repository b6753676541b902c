"""What ``fairstream topics check`` finds wrong with a deployment's topics, and how to fix it.

Pure: the rules take the topics as described (partitions, replication factor, effective
configs: ``TopicState``, read by ``fairstream.adapters.admin.describe_topics``) and return
``Finding``\\ s, each with the fix an operator can run. A *problem* breaks a guarantee
(records lost or dead-lettered, instances that cannot agree) and makes the command exit 1; a
*warning* is a risk worth knowing (a single replica, a bound that needs watching).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# Bytes an egress record or a dead letter may add to a record that fitted the ingest topic:
# the stamped headers (fairstream-request-id with a default id of up to 280 bytes, -tenant
# with a key of up to 255, -enqueued-ms, -scheduled-ms: about 650 bytes with their names),
# the dead-letter headers (reason, a detail sentence, the ingest topic, partition and offset:
# about 800), and the 512 bytes the scheduler adds for the record's own framing, rounded up.
HEADER_HEADROOM = 4096

# Kafka's default max.message.bytes (message.max.bytes of the broker).
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588

Kind = Literal["ingest", "egress", "dlq", "policy", "feedback", "progress", "coordination"]
Severity = Literal["problem", "warning"]


@dataclass(frozen=True)
class TopicState:
    """One topic as the cluster describes it."""

    name: str
    partitions: int
    replication_factor: int  # the fewest replicas of any partition
    configs: Mapping[str, str]  # effective values, broker defaults included

    def config(self, key: str) -> str | None:
        return self.configs.get(key)

    def int_config(self, key: str) -> int | None:
        value = self.configs.get(key)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None


@dataclass(frozen=True)
class Finding:
    severity: Severity
    topic: str
    what: str  # what is wrong, and what it costs
    fix: str  # what to run or change

    def render(self) -> str:
        return f"{self.severity.upper()} {self.topic}: {self.what}\n  fix: {self.fix}"


@dataclass(frozen=True)
class Expected:
    """The deployment being checked: its topics by kind and what the operator asked for."""

    names: Mapping[Kind, str]
    bootstrap: str  # for the fix commands
    app_id: str
    partitions: int | None = None  # the ingest partition count the operator expects
    allow_ingest_retention: bool = False  # a finite ingest retention is intended and watched
    create: str = "fairstream topics create"  # the command that creates these topics


COMPACTED: tuple[Kind, ...] = ("policy", "progress", "coordination")
TENANT_KEYED: tuple[Kind, ...] = ("ingest", "egress", "dlq", "feedback")


def _alter(expected: Expected, topic: str, settings: str) -> str:
    return (
        f"kafka-configs.sh --bootstrap-server {expected.bootstrap} --alter --entity-type "
        f"topics --entity-name {topic} --add-config {settings}"
    )


def check(expected: Expected, described: Mapping[str, TopicState | None]) -> list[Finding]:
    """Every finding for the topics of ``expected``; ``described`` maps each topic name to
    its state, or None when it does not exist."""
    findings: list[Finding] = []
    states: dict[Kind, TopicState] = {}
    missing: list[tuple[Kind, str]] = []
    for kind, name in expected.names.items():
        state = described.get(name)
        if state is None:
            missing.append((kind, name))
        else:
            states[kind] = state
    ingest = states.get("ingest")
    count = ingest.partitions if ingest is not None else expected.partitions
    create = f"{expected.create} --partitions {count or 'N'}"
    findings += [_missing(expected, kind, name, create) for kind, name in missing]
    findings += _partitions(expected, states)
    findings += _compaction(expected, states)
    findings += _retention(expected, states)
    for state in states.values():
        findings += replication(expected, state)
        if state.config("unclean.leader.election.enable") == "true":
            findings.append(
                Finding(
                    "problem",
                    state.name,
                    "has unclean.leader.election.enable=true: a replica that missed writes "
                    "can become leader, and acknowledged records are lost",
                    _alter(expected, state.name, "unclean.leader.election.enable=false"),
                )
            )
    findings += _sizes(expected, states)
    return findings


def _missing(expected: Expected, kind: Kind, name: str, create: str) -> Finding:
    if kind in ("progress", "coordination"):
        return Finding(
            "warning",
            name,
            f"does not exist yet (the {kind} topic of app {expected.app_id!r}); the first "
            "scheduler creates it, with its --replication-factor",
            f"{create} creates it now (it leaves existing topics alone)",
        )
    return Finding(
        "problem",
        name,
        f"the {kind} topic does not exist: the scheduler refuses to start without it",
        f"{create} (it leaves existing topics alone)",
    )


# The topics of one partition: what another count costs, and the fix ({name}: the topic's).
SINGLE_PARTITION: dict[Kind, tuple[Severity, str, str]] = {
    "coordination": (
        "problem",
        "instances read partition 0 only, so reports written to the others are never seen "
        "and the group's shares of --rate are wrong",
        "stop the schedulers and delete {name} (it holds only live reports); the next "
        "scheduler recreates it with 1 partition",
    ),
    "policy": (
        "warning",
        "one keeps every policy in one order, and adding partitions later would move "
        "tenants' keys, leaving an older policy in another partition",
        "leave its partition count as it is: never add partitions to it",
    ),
}


def _partitions(expected: Expected, states: Mapping[Kind, TopicState]) -> list[Finding]:
    found: list[Finding] = []
    ingest, progress = states.get("ingest"), states.get("progress")
    wanted = expected.partitions
    if ingest is not None and wanted is not None and ingest.partitions != wanted:
        found.append(
            Finding(
                "problem",
                ingest.name,
                f"has {ingest.partitions} partitions, not the {wanted} expected "
                "(--partitions); a tenant's records are ordered and buffered by ingest "
                "partition, so the count cannot change under a running deployment",
                f"use --partitions {ingest.partitions}, or drain the backlog, stop the "
                "producers and schedulers, and recreate the ingest topic with another "
                "--app-id (which loses what the old topic holds)",
            )
        )
    if ingest is not None and progress is not None and progress.partitions != ingest.partitions:
        found.append(
            Finding(
                "problem",
                progress.name,
                f"has {progress.partitions} partitions but the ingest topic {ingest.name} has "
                f"{ingest.partitions}: progress records are co-partitioned with the ingest "
                "partitions they settle, so the scheduler refuses to start",
                f"run the schedulers with another --app-id (a new progress topic), or drain "
                f"the backlog, stop the schedulers and delete {progress.name}",
            )
        )
    for kind, (severity, cost, fix) in SINGLE_PARTITION.items():
        state = states.get(kind)
        if state is not None and state.partitions != 1:
            found.append(
                Finding(
                    severity,
                    state.name,
                    f"has {state.partitions} partitions; {cost}",
                    fix.format(name=state.name),
                )
            )
    return found


def _compaction(expected: Expected, states: Mapping[Kind, TopicState]) -> list[Finding]:
    found: list[Finding] = []
    for kind, state in states.items():
        policy = state.config("cleanup.policy") or "delete"
        parts = {p.strip() for p in policy.split(",")}
        if kind in COMPACTED and parts != {"compact"}:
            found.append(
                Finding(
                    "problem",
                    state.name,
                    f"has cleanup.policy={policy}; the {kind} topic must be compacted only "
                    "(cleanup.policy=compact): with delete, retention removes the latest "
                    "record of a key "
                    + {
                        "policy": "and tenants fall back to the defaults",
                        "progress": "and a restart re-emits settled records",
                        "coordination": "and instances miss each other's demand",
                    }.get(kind, ""),
                    _alter(expected, state.name, "cleanup.policy=compact"),
                )
            )
        elif kind in TENANT_KEYED and "compact" in parts:
            found.append(
                Finding(
                    "problem",
                    state.name,
                    f"has cleanup.policy={policy}; its records are keyed by tenant, so "
                    "compaction keeps only each tenant's last record and loses the rest",
                    _alter(expected, state.name, "cleanup.policy=delete"),
                )
            )
    return found


def _retention(expected: Expected, states: Mapping[Kind, TopicState]) -> list[Finding]:
    ingest = states.get("ingest")
    if ingest is None:
        return []
    severity: Severity = "warning" if expected.allow_ingest_retention else "problem"
    # The ingest topic is the scheduler's buffer: a bound of either kind deletes records
    # still waiting. Each bound: what it costs ({hours}: the bound in hours), and advice
    # after the fix.
    bounds = (
        (
            "retention.ms",
            " ({hours:.3g} h): the ingest topic is the scheduler's buffer, and a record still "
            "waiting (a paused, capped or starved tenant) when it is that old is deleted and "
            "dead-lettered as lost",
            " (the scheduler deletes what it settled: --trim); or keep the bound, alert on "
            "fairstream_ingest_retention_headroom_seconds and pass --allow-ingest-retention",
        ),
        (
            "retention.bytes",
            ": a backlog larger than that per partition is deleted before it is emitted",
            "",
        ),
    )
    found: list[Finding] = []
    for key, cost, advice in bounds:
        value = ingest.int_config(key)
        if value is not None and value >= 0:
            found.append(
                Finding(
                    severity,
                    ingest.name,
                    f"has {key}={value}" + cost.format(hours=value / 3_600_000),
                    _alter(expected, ingest.name, f"{key}=-1") + advice,
                )
            )
    return found


def replication(expected: Expected, state: TopicState) -> list[Finding]:
    """The min ISR rule: ``acks=all`` means as many copies as ``min.insync.replicas``."""
    rf = state.replication_factor
    isr = state.int_config("min.insync.replicas") or 1
    if isr > rf:
        return [
            Finding(
                "problem",
                state.name,
                f"has min.insync.replicas={isr} above its replication factor {rf}: every "
                "write with acks=all fails (NOT_ENOUGH_REPLICAS)",
                _alter(expected, state.name, f"min.insync.replicas={max(1, rf - 1)}"),
            )
        ]
    if rf >= 3 and isr < 2:
        return [
            Finding(
                "problem",
                state.name,
                f"has replication factor {rf} but min.insync.replicas={isr}: acks=all is "
                "satisfied by the leader alone, and losing that broker loses acknowledged "
                "records",
                _alter(expected, state.name, "min.insync.replicas=2"),
            )
        ]
    if rf == 1:
        return [
            Finding(
                "warning",
                state.name,
                "has one replica: losing its broker loses the topic's records (fine on a "
                "development broker)",
                "in production use replication factor 3 with min.insync.replicas=2: "
                "recreate the topics with fairstream topics create --replication-factor 3 "
                "--min-insync-replicas 2, or add replicas with "
                "kafka-reassign-partitions.sh",
            )
        ]
    if rf in (2, isr):
        return [
            Finding(
                "warning",
                state.name,
                f"has replication factor {rf} and min.insync.replicas={isr}: "
                + (
                    "one broker down stops every write with acks=all"
                    if isr == rf
                    else "acks=all is satisfied by one copy"
                ),
                "use replication factor 3 with min.insync.replicas=2",
            )
        ]
    return []


def _sizes(expected: Expected, states: Mapping[Kind, TopicState]) -> list[Finding]:
    ingest = states.get("ingest")
    if ingest is None:
        return []
    limit = ingest.int_config("max.message.bytes") or KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    found: list[Finding] = []
    sized: tuple[tuple[Kind, str], ...] = (
        ("egress", "is dead-lettered as too-large instead of emitted"),
        ("dlq", "loses its value once dead-lettered"),
    )
    for kind, cost in sized:
        state = states.get(kind)
        if state is None:
            continue
        size = state.int_config("max.message.bytes") or KAFKA_DEFAULT_MAX_MESSAGE_BYTES
        if size < limit + HEADER_HEADROOM:
            found.append(
                Finding(
                    "problem",
                    state.name,
                    f"has max.message.bytes={size}, but the ingest topic {ingest.name} takes "
                    f"records of up to {limit} bytes and fairstream adds up to "
                    f"{HEADER_HEADROOM} bytes of headers: a record valid on ingest {cost}",
                    _alter(expected, state.name, f"max.message.bytes={limit + HEADER_HEADROOM}")
                    + " (or lower the ingest topic's max.message.bytes to "
                    f"{size - HEADER_HEADROOM})",
                )
            )
    return found
