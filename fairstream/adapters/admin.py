"""Topic administration with the confluent-kafka AdminClient: create fairstream's topics
idempotently and refuse partition counts that would break co-partitioning."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException

# confluent-kafka's stubs do not re-export these names, though the module defines them.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from fairstream.config import Topics

BUFFER_TABLE = "buffers"


class TopicError(Exception):
    """A topic exists in a shape fairstream cannot work with, or Kafka refused a request."""


@dataclass(frozen=True)
class TopicStatus:
    name: str
    partitions: int
    created: bool


def changelog_topic(app_id: str) -> str:
    """The changelog of the per-tenant buffer table (Faust names it ``<app>-<table>-changelog``)."""
    return f"{app_id}-{BUFFER_TABLE}-changelog"


def lease_topic(app_id: str) -> str:
    """The internal topic whose partition assignment says which ingest partitions we own."""
    return f"{app_id}-lease"


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def partition_count(admin: AdminClient, topic: str, timeout: float = 15.0) -> int | None:
    """Partitions of ``topic``, or None when it does not exist."""
    try:
        metadata = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise TopicError(f"cannot read metadata of {topic}: {exc}") from exc
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        return None
    return len(info.partitions)


def _cleanup_policy(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    future = admin.describe_configs([resource])[resource]
    configs = future.result(timeout=15)
    entry = configs.get("cleanup.policy")
    return str(entry.value) if entry is not None else "delete"


def create_topics(
    bootstrap: str,
    topics: Topics,
    partitions: int,
    app_id: str,
    replication_factor: int = 1,
) -> list[TopicStatus]:
    """Create the ingest, egress, dead-letter and policy topics where missing.

    The ingest topic and the buffer changelog must have the same partition count (the
    buffers are co-partitioned with the ingest topic); an existing topic that breaks this
    raises ``TopicError`` before anything is created.

    Caller: ``fairstream topics create`` and the demo. Affects: topics on the cluster.
    """
    admin = admin_client(bootstrap)
    ingest = partition_count(admin, topics.ingest)
    if ingest is not None and ingest != partitions:
        raise TopicError(
            f"topic {topics.ingest} exists with {ingest} partitions but --partitions is "
            f"{partitions}. fairstream's per-tenant buffers are co-partitioned with the ingest "
            f"topic: use --partitions {ingest}, or recreate the topic (which loses its records)."
        )
    for internal in (changelog_topic(app_id), lease_topic(app_id)):
        existing_internal = partition_count(admin, internal)
        if existing_internal is not None and existing_internal != partitions:
            raise TopicError(
                f"the internal topic {internal} of app {app_id!r} has {existing_internal} "
                f"partitions but the ingest topic would have {partitions}: they must match. "
                f"Use --partitions {existing_internal}, or another --app-id."
            )
    wanted = [
        (topics.ingest, partitions, {}),
        (topics.egress, partitions, {}),
        (topics.dlq, partitions, {}),
        # Every instance reads every policy, so one partition keeps them in one order.
        (topics.policy, 1, {"cleanup.policy": "compact"}),
    ]
    statuses: list[TopicStatus] = []
    to_create: list[NewTopic] = []
    for name, count, config in wanted:
        existing = partition_count(admin, name)
        if existing is None:
            to_create.append(NewTopic(name, count, replication_factor, config=config))
            statuses.append(TopicStatus(name, count, True))
        else:
            statuses.append(TopicStatus(name, existing, False))
    if to_create:
        for name, future in admin.create_topics(to_create, operation_timeout=30).items():
            try:
                future.result(timeout=60)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                # Another instance created it between our check and our request: fine.
                if getattr(err, "name", lambda: "")() != "TOPIC_ALREADY_EXISTS":
                    raise TopicError(f"cannot create {name}: {exc}") from exc
    if _cleanup_policy(admin, topics.policy) != "compact":
        raise TopicError(
            f"topic {topics.policy} exists but is not compacted (cleanup.policy=compact): "
            "tenant policies would be deleted by retention"
        )
    return statuses
