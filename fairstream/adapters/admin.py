"""Topic administration with the confluent-kafka AdminClient: create fairstream's topics
idempotently, refuse partition counts that would break co-partitioning, and describe topics
for ``fairstream topics check`` (whose rules are ``fairstream.adapters.topic_check``)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition

# confluent-kafka's stubs do not re-export these names, though the module defines them.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)
from confluent_kafka.admin._listoffsets import OffsetSpec

from fairstream.adapters.topic_check import (
    HEADER_HEADROOM,
    KAFKA_DEFAULT_MAX_MESSAGE_BYTES,
    Kind,
    TopicState,
)
from fairstream.config import Connection, KafkaConnection, Topics
from fairstream.config.topics import (
    CHUNK_BYTES,
    PROGRESS_TOPIC_BYTES,
    coordination_topic,
    holding_topic,
    progress_topic,
)
from fairstream.errors import Error

# A parked record is the ingest record plus a request-id header: the holding topic takes
# what the ingest topic takes, and this much more.
HOLDING_HEADROOM = 64 * 1024
BROKER_DEFAULT_BYTES = 1_048_588  # Kafka's message.max.bytes default


class TopicError(Error):
    """A topic exists in a shape fairstream cannot work with, or Kafka refused a request."""


class KafkaAuthenticationError(TopicError):
    """The brokers refused our credentials (or the SASL/TLS handshake failed)."""


class AuthWatch:
    """A librdkafka ``error_cb`` that keeps the first authentication failure.

    librdkafka retries a refused login forever and a metadata request only ends in a
    generic transport error, so callers check this to fail at once with the broker's reason.
    Caller: librdkafka (from ``poll``). Affects: ``failure``.
    """

    def __init__(self, connection: KafkaConnection) -> None:
        self.connection = connection
        self.failure: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if self.failure is None and err.code() in (
            KafkaError._AUTHENTICATION,
            KafkaError._SSL,
            KafkaError.SASL_AUTHENTICATION_FAILED,
        ):
            self.failure = err

    def check(self) -> None:
        """Raise ``KafkaAuthenticationError`` when an authentication failure was seen."""
        if self.failure is not None:
            raise KafkaAuthenticationError(
                f"authentication failed at {self.connection.describe()}: {self.failure.str()}. "
                "Check --security-protocol, --sasl-mechanism, --sasl-username and "
                "--sasl-password (FAIRSTREAM_SASL_*)."
            )


@dataclass(frozen=True)
class TopicStatus:
    name: str
    partitions: int
    created: bool


def admin_client(kafka: Connection, timeout: float = 30.0) -> AdminClient:
    """An AdminClient that has answered a metadata request.

    Raises ``KafkaAuthenticationError`` as soon as the brokers refuse our credentials, and
    ``TopicError`` when they do not answer within ``timeout`` seconds.
    """
    connection = KafkaConnection.of(kafka)
    watch = AuthWatch(connection)
    config: dict[str, Any] = {**connection.librdkafka(), "error_cb": watch}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return admin
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            watch.check()
            if time.monotonic() >= deadline:
                raise TopicError(
                    f"no answer from Kafka at {connection.describe()} within {timeout:.0f} s: {exc}"
                ) from exc


# A partition's latest offset, as ``list_offsets`` asks for it.
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]  # untyped upstream


def latest_offsets(
    admin: AdminClient,
    partitions: Iterable[TopicPartition],
    level: IsolationLevel,
    timeout: float = 10.0,
) -> dict[tuple[str, int], int]:
    """Each of ``partitions``' latest offset, by (topic, partition): its end under
    ``READ_UNCOMMITTED``, its last stable offset under ``READ_COMMITTED`` (where an open
    transaction's first record stops read_committed readers). Raises what the futures raise
    (``KafkaException``, ``TimeoutError``)."""
    asked = admin.list_offsets(
        dict.fromkeys(partitions, LATEST), isolation_level=level, request_timeout=timeout
    )
    return {(tp.topic, tp.partition): f.result(timeout).offset for tp, f in asked.items()}


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


def topic_configs(
    admin: AdminClient, topic: str, names: tuple[str, ...], timeout: float = 30.0
) -> dict[str, str | None]:
    """The values of the named configs of ``topic`` (None for one the broker did not give)."""
    configs = _described(admin, topic, timeout)
    return {name: (str(configs[name].value) if name in configs else None) for name in names}


def _described(admin: AdminClient, topic: str, timeout: float) -> dict[str, Any]:
    """Every config entry of ``topic``, by name."""
    # Right after a topic is created the broker may not know it yet for config reads
    # (UNKNOWN_TOPIC_OR_PARTITION): ask again until it does.
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + timeout
    while True:
        try:
            future = admin.describe_configs([resource])[resource]
            return cast("dict[str, Any]", future.result(timeout=15))
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise TopicError(f"cannot read the configuration of {topic}: {exc}") from exc
            time.sleep(0.2)


def _cleanup_policy(admin: AdminClient, topic: str) -> str:
    return topic_configs(admin, topic, ("cleanup.policy",))["cleanup.policy"] or "delete"


def _create(admin: AdminClient, new_topics: list[NewTopic], *, validate_only: bool = False) -> None:
    """Create ``new_topics``; ``validate_only``: let the broker check every one and create
    none (``create_topics`` does so first: all or nothing)."""
    if not new_topics:
        return
    futures = admin.create_topics(new_topics, operation_timeout=30, validate_only=validate_only)
    for name, future in futures.items():
        try:
            future.result(timeout=60)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            # Another instance created it between our check and our request: fine.
            if getattr(err, "name", lambda: "")() != "TOPIC_ALREADY_EXISTS":
                none = ", so none was created" if validate_only else ""
                raise TopicError(f"cannot create {name}{none}: {exc}") from exc


def ensure_internal_topics(
    kafka: Connection,
    app_id: str,
    partitions: int,
    replication_factor: int,
    ingest_topic: str | None = None,
) -> None:
    """Create the scheduler's progress, holding and coordination topics where missing, and
    check their partitions and record size limits.

    Caller: ``fairstream scheduler`` at start (``topics create`` makes them too).
    Affects: those topics.
    """
    admin = admin_client(kafka)
    if partition_count(admin, coordination_topic(app_id)) is None:
        _create(admin, [_coordination_new_topic(app_id, replication_factor)])
    existing = partition_count(admin, progress_topic(app_id))
    if existing is None:
        _create(admin, [_progress_new_topic(app_id, partitions, replication_factor)])
    else:
        check_copartitioned(app_id, existing, partitions)
        _check_size(admin, progress_topic(app_id), CHUNK_BYTES + 64 * 1024)
    holding = holding_topic(app_id)
    existing = partition_count(admin, holding)
    wanted = _holding_bytes(admin, ingest_topic)
    if existing is None:
        _create(admin, [_holding_new_topic(app_id, partitions, replication_factor, wanted)])
    else:
        check_copartitioned(app_id, existing, partitions, holding)
        _check_size(admin, holding, wanted - HOLDING_HEADROOM)


def _holding_bytes(admin: AdminClient, ingest_topic: str | None) -> int:
    """The holding topic's max.message.bytes: the ingest topic's, plus headroom."""
    ingest = BROKER_DEFAULT_BYTES
    if ingest_topic is not None:
        value = topic_configs(admin, ingest_topic, ("max.message.bytes",))["max.message.bytes"]
        if value is not None and value.isdigit():
            ingest = int(value)
    return max(ingest, BROKER_DEFAULT_BYTES) + HOLDING_HEADROOM


def _check_size(admin: AdminClient, topic: str, needed: int) -> None:
    """Raise ``TopicError`` when ``topic`` takes records smaller than ``needed`` bytes."""
    value = topic_configs(admin, topic, ("max.message.bytes",))["max.message.bytes"]
    if value is not None and value.isdigit() and int(value) < needed:
        raise TopicError(
            f"topic {topic} takes records of at most {value} bytes (max.message.bytes); "
            f"fairstream needs {needed}. Raise it: kafka-configs --alter --entity-type topics "
            f"--entity-name {topic} --add-config max.message.bytes={needed}"
        )


def check_copartitioned(
    app_id: str, progress_partitions: int, ingest_partitions: int, topic: str | None = None
) -> None:
    """Raise ``TopicError`` unless the progress topic of ``app_id`` (or ``topic``, its
    holding topic) has as many partitions as the ingest topic: progress and parked records
    are co-partitioned with the ingest partitions they belong to."""
    if progress_partitions != ingest_partitions:
        name = topic or progress_topic(app_id)
        raise TopicError(
            f"the internal topic {name} of app {app_id!r} has "
            f"{progress_partitions} partitions but the ingest topic has {ingest_partitions}; "
            "they must match (co-partitioning). Use another --app-id, or delete the "
            "internal topic after draining the backlog."
        )


def _coordination_new_topic(app_id: str, replication_factor: int) -> NewTopic:
    # One partition: every instance reads every report, in one order. Compacted: only each
    # instance's latest report matters.
    return NewTopic(
        coordination_topic(app_id),
        1,
        replication_factor,
        config={"cleanup.policy": "compact", "segment.ms": "600000"},
    )


def _progress_new_topic(app_id: str, partitions: int, replication_factor: int) -> NewTopic:
    # Compacted: only each partition's latest chunks matter. Its record size limit is set,
    # not left to the broker's default: progress chunks are cut to fit it.
    return NewTopic(
        progress_topic(app_id),
        partitions,
        replication_factor,
        config={
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": "60000",
            "max.message.bytes": str(PROGRESS_TOPIC_BYTES),
        },
    )


def _holding_new_topic(
    app_id: str, partitions: int, replication_factor: int, max_bytes: int
) -> NewTopic:
    # Like the ingest topic, a buffer: kept until the scheduler trims what it settled.
    return NewTopic(
        holding_topic(app_id),
        partitions,
        replication_factor,
        config={
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "max.message.bytes": str(max_bytes),
        },
    )


def create_topics(
    kafka: Connection,
    topics: Topics,
    partitions: int,
    app_id: str,
    replication_factor: int = -1,
    ingest_retention_ms: int = -1,
    feedback_topic: str | None = None,
    *,
    min_insync_replicas: int | None = None,
    configs: Mapping[Kind, Mapping[str, str]] | None = None,
) -> list[TopicStatus]:
    """Create the ingest, egress, dead-letter, policy and progress topics where missing,
    and the workers' ``feedback_topic`` when one is named (as many partitions as egress).

    The ingest topic and the progress topic must have the same partition count (progress
    is co-partitioned with the ingest topic); an existing topic that breaks this raises
    ``TopicError`` before anything is created. The ingest topic is the scheduler's buffer:
    it is created with ``retention.ms`` ``ingest_retention_ms`` (-1: forever; the scheduler
    trims what it settled) and ``retention.bytes`` -1, so nothing buffered expires.

    ``replication_factor`` -1 is the broker's ``default.replication.factor``;
    ``min_insync_replicas`` (None: the broker's) goes on every topic created; ``configs``
    (checked by ``check_topic_configs``) are more topic configs per kind, applied over
    fairstream's own. Egress and dead-letter topics get a ``max.message.bytes`` that leaves
    room for fairstream's headers above the ingest topic's (``HEADER_HEADROOM``). Existing
    topics are left as they are; every topic to create is validated by the broker first, so
    a config it refuses creates nothing.

    Caller: ``fairstream topics create`` and the demo. Affects: topics on the cluster.
    """
    if replication_factor == 0 or replication_factor < -1:
        raise TopicError(
            f"replication factor must be -1 (the broker's) or >= 1, got {replication_factor}"
        )
    extra = {kind: dict(values) for kind, values in (configs or {}).items()}
    check_topic_configs(extra)
    admin = admin_client(kafka)
    existing_progress = _progress_partitions(admin, topics.ingest, app_id, partitions)
    progress, holding = progress_topic(app_id), holding_topic(app_id)
    room = str(_ingest_limit(admin, topics.ingest, extra.get("ingest", {})) + HEADER_HEADROOM)
    planned = [
        new if kind is None else _with_configs(new, kind, min_insync_replicas, extra)
        for kind, new in _planned(
            topics,
            partitions,
            app_id,
            replication_factor,
            ingest_retention_ms,
            room,
            feedback_topic,
        )
    ]
    statuses: list[TopicStatus] = []
    to_create: list[NewTopic] = []
    for new in planned:
        name = new.topic
        existing = existing_progress if name == progress else partition_count(admin, name)
        if existing is None:
            to_create.append(new)
            statuses.append(TopicStatus(name, new.num_partitions, True))
            continue
        if name == holding:
            check_copartitioned(app_id, existing, partitions, holding)
        statuses.append(TopicStatus(name, existing, False))
    _create(admin, to_create, validate_only=True)
    _create(admin, to_create)
    if _cleanup_policy(admin, topics.policy) != "compact":
        raise TopicError(
            f"topic {topics.policy} exists but is not compacted (cleanup.policy=compact): "
            "tenant policies would be deleted by retention"
        )
    return statuses


def _progress_partitions(
    admin: AdminClient, ingest_topic: str, app_id: str, partitions: int
) -> int | None:
    """The partitions of the progress topic of ``app_id`` (None: it does not exist yet), once
    neither it nor the ingest topic exists with other than ``partitions``."""
    ingest = partition_count(admin, ingest_topic)
    if ingest is not None and ingest != partitions:
        raise TopicError(
            f"topic {ingest_topic} exists with {ingest} partitions but --partitions is "
            f"{partitions}. fairstream's per-tenant buffers are co-partitioned with the ingest "
            f"topic: use --partitions {ingest}, or recreate the topic (which loses its records)."
        )
    existing = partition_count(admin, progress_topic(app_id))
    if existing is not None:
        check_copartitioned(app_id, existing, partitions)
    return existing


def _planned(
    topics: Topics,
    partitions: int,
    app_id: str,
    replication_factor: int,
    ingest_retention_ms: int,
    room: str,
    feedback_topic: str | None,
) -> list[tuple[Kind | None, NewTopic]]:
    """Every topic ``create_topics`` makes where missing, in order, with fairstream's configs
    and its kind, whose operator configs go over them (None: the holding topic takes none).
    ``room``: the egress and dead-letter topics' ``max.message.bytes``."""

    def new(name: str, count: int, config: dict[str, str]) -> NewTopic:
        return NewTopic(name, count, replication_factor, config=config)

    retention = {"retention.ms": str(ingest_retention_ms), "retention.bytes": "-1"}
    planned: list[tuple[Kind | None, NewTopic]] = [
        ("ingest", new(topics.ingest, partitions, retention)),
        ("egress", new(topics.egress, partitions, {"max.message.bytes": room})),
        ("dlq", new(topics.dlq, partitions, {"max.message.bytes": room})),
        # Every instance reads every policy, so one partition keeps them in one order.
        ("policy", new(topics.policy, 1, {"cleanup.policy": "compact"})),
    ]
    if feedback_topic is not None:
        planned.append(("feedback", new(feedback_topic, partitions, {})))
    holding_bytes = BROKER_DEFAULT_BYTES + HOLDING_HEADROOM
    return [
        *planned,
        ("progress", _progress_new_topic(app_id, partitions, replication_factor)),
        (None, _holding_new_topic(app_id, partitions, replication_factor, holding_bytes)),
        ("coordination", _coordination_new_topic(app_id, replication_factor)),
    ]


# --- topic configs chosen by the operator (``topics create --config``) ---------------------

TOPIC_KINDS: tuple[Kind, ...] = (
    "ingest",
    "egress",
    "dlq",
    "policy",
    "feedback",
    "progress",
    "coordination",
)
# Configs fairstream decides, with why: an operator's value would break a guarantee.
FIXED_CONFIGS = {
    "cleanup.policy": "fairstream sets it: compact for the policy, progress and coordination "
    "topics (only each key's latest record matters), delete for the rest (their records are "
    "keyed by tenant: compaction would keep one per tenant)",
}
# Configs with an option of their own in `fairstream topics create`, per kind.
OPTION_CONFIGS: dict[tuple[str, str], str] = {
    ("ingest", "retention.ms"): "--ingest-retention-ms",
    ("egress", "retention.ms"): "--egress-retention-ms",
    ("dlq", "retention.ms"): "--dlq-retention-ms",
}


def parse_topic_config(text: str) -> tuple[Kind, str, str]:
    """``KIND:KEY=VALUE`` (``egress:retention.ms=86400000``) as (kind, key, value).

    Raises ``TopicError`` with what is wrong and what is accepted.
    """
    kind, colon, rest = text.partition(":")
    key, equals, value = rest.partition("=")
    kind, key, value = kind.strip(), key.strip(), value.strip()
    if not colon or not equals or not key:
        raise TopicError(
            f"--config {text!r}: expected KIND:KEY=VALUE, e.g. egress:retention.ms=86400000 "
            f"(KIND is one of {', '.join(TOPIC_KINDS)})"
        )
    if kind not in TOPIC_KINDS:
        raise TopicError(
            f"--config {text!r}: unknown topic kind {kind!r}; one of {', '.join(TOPIC_KINDS)}"
        )
    if not value:
        raise TopicError(f"--config {text!r}: {key} needs a value")
    found: Kind = next(k for k in TOPIC_KINDS if k == kind)
    return found, key, value


def check_topic_configs(configs: Mapping[Kind, Mapping[str, str]]) -> None:
    """Refuse configs of an unknown kind or name, and those fairstream decides."""
    for kind, values in configs.items():
        if kind not in TOPIC_KINDS:
            raise TopicError(f"unknown topic kind {kind!r}; one of {', '.join(TOPIC_KINDS)}")
        for key in values:
            if key in FIXED_CONFIGS:
                raise TopicError(f"--config {kind}:{key} cannot be set: {FIXED_CONFIGS[key]}")
            if not key or not all(c.isalnum() or c in "._-" for c in key):
                raise TopicError(f"--config {kind}:{key}: not a topic config name")


def _with_configs(
    new: NewTopic,
    kind: Kind,
    min_insync_replicas: int | None,
    configs: Mapping[Kind, Mapping[str, str]],
) -> NewTopic:
    """``new`` with the operator's min ISR and configs of ``kind`` over fairstream's own."""
    config = dict(new.config or {})
    if min_insync_replicas is not None:
        config["min.insync.replicas"] = str(min_insync_replicas)
    config.update(configs.get(kind, {}))
    return NewTopic(new.topic, new.num_partitions, new.replication_factor, config=config)


def _ingest_limit(admin: AdminClient, ingest: str, config: Mapping[str, str]) -> int:
    """The ``max.message.bytes`` the ingest topic has or will have."""
    if "max.message.bytes" in config:
        try:
            return int(config["max.message.bytes"])
        except ValueError as exc:
            raise TopicError(
                f"--config ingest:max.message.bytes={config['max.message.bytes']}: not a number"
            ) from exc
    if partition_count(admin, ingest) is not None:
        value = topic_configs(admin, ingest, ("max.message.bytes",))["max.message.bytes"]
        return int(value) if value else KAFKA_DEFAULT_MAX_MESSAGE_BYTES
    return _broker_int(admin, "message.max.bytes") or KAFKA_DEFAULT_MAX_MESSAGE_BYTES


def _broker_int(admin: AdminClient, name: str) -> int | None:
    """A broker config of some broker, or None where the cluster does not let us read it."""
    try:
        brokers = admin.list_topics(timeout=15).brokers
        if not brokers:
            return None
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
        configs = admin.describe_configs([resource])[resource].result(timeout=15)
    except KafkaException:
        return None  # managed clusters may refuse DescribeConfigs on brokers
    entry = configs.get(name)
    try:
        return int(entry.value) if entry is not None and entry.value is not None else None
    except ValueError:
        return None


# --- describing topics (``topics check``) -------------------------------------------------


def describe_topics(kafka: Connection, names: Iterable[str]) -> dict[str, TopicState | None]:
    """Each named topic's partitions, replication factor and effective configs (None for a
    topic that does not exist).

    Caller: ``fairstream topics check``. Affects: nothing.
    """
    admin = admin_client(kafka)
    described: dict[str, TopicState | None] = {}
    for name in dict.fromkeys(names):
        try:
            info = admin.list_topics(topic=name, timeout=15).topics.get(name)
        except KafkaException as exc:
            raise TopicError(f"cannot read metadata of {name}: {exc}") from exc
        if info is None or info.error is not None or not info.partitions:
            described[name] = None
            continue
        replicas = min(len(p.replicas) for p in info.partitions.values())
        described[name] = TopicState(
            name, len(info.partitions), replicas, _all_configs(admin, name)
        )
    return described


def _all_configs(admin: AdminClient, topic: str, timeout: float = 30.0) -> dict[str, str]:
    configs = _described(admin, topic, timeout)
    return {k: str(v.value) for k, v in configs.items() if v.value is not None}
