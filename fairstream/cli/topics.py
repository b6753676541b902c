"""``fairstream topics create`` and ``fairstream topics check``: the topics a deployment
needs, created idempotently with the replication and configs an operator chooses, and
checked against what the scheduler relies on (``fairstream.adapters.topic_check``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from fairstream.adapters.admin import (
    OPTION_CONFIGS,
    TOPIC_KINDS,
    TopicError,
    check_topic_configs,
    create_topics,
    describe_topics,
    parse_topic_config,
)
from fairstream.adapters.topic_check import Expected, Finding, Kind, Severity, check
from fairstream.config import (
    KafkaConnection,
    Settings,
    Topics,
    kafka_options,
    option_of,
    topic_options,
)
from fairstream.config.topics import coordination_topic, progress_topic

F = TypeVar("F", bound=Callable[..., Any])


@click.group("topics")
def topics() -> None:
    """Create and check fairstream's topics."""


def _configs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[Kind, dict[str, str]]:
    configs: dict[Kind, dict[str, str]] = {}
    try:
        for text in values:
            kind, key, value = parse_topic_config(text)
            if (kind, key) in OPTION_CONFIGS:
                raise TopicError(f"--config {text!r}: use {OPTION_CONFIGS[kind, key]} instead")
            configs.setdefault(kind, {})[key] = value
        check_topic_configs(configs)
    except TopicError as exc:
        raise click.BadParameter(str(exc)) from exc
    return configs


def _retention(kind: str, why: str) -> Callable[[F], F]:
    return click.option(
        f"--{kind}-retention-ms",
        type=click.IntRange(min=-1),
        default=None,
        envvar=f"FAIRSTREAM_{kind.upper()}_RETENTION_MS",
        show_envvar=True,
        help=f"retention.ms of a new {why} (-1: forever). [default: the broker's log.retention.*]",
    )


def _partitions_option(required: bool) -> Callable[[F], F]:
    return click.option(
        "--partitions",
        type=click.IntRange(min=1),
        default=12 if required else None,
        show_default=required,
        envvar="FAIRSTREAM_PARTITIONS",
        show_envvar=True,
        help="Partitions of the ingest, egress, dead-letter and feedback topics. The ingest "
        "count bounds how many scheduler instances share the work."
        if required
        else "The ingest partition count you expect. [default: any]",
    )


@topics.command("create")
@kafka_options
@topic_options
@_partitions_option(required=True)
@option_of(
    Settings,
    "replication_factor",
    help="Replication factor of every topic created (the progress and coordination topics "
    "included); -1: the broker's default.replication.factor. Use 3 in production.",
)
@click.option(
    "--min-insync-replicas",
    type=click.IntRange(min=1),
    default=None,
    envvar="FAIRSTREAM_MIN_INSYNC_REPLICAS",
    show_envvar=True,
    help="min.insync.replicas of every topic created: the copies a write with acks=all "
    "needs. Use 2 with replication factor 3 (with 1, the leader alone acknowledges). "
    "[default: the broker's]",
)
@option_of(
    Settings, "app_id", help="The scheduler's app id: names its progress topic <app-id>-progress."
)
@click.option(
    "--ingest-retention-ms",
    type=click.IntRange(min=-1),
    default=-1,
    show_default=True,
    envvar="FAIRSTREAM_INGEST_RETENTION_MS",
    show_envvar=True,
    help="retention.ms of a new ingest topic. The ingest topic is the scheduler's buffer: "
    "with -1 nothing buffered expires, and the scheduler deletes what it settled (--trim). "
    "A finite value loses records still buffered when they outlive it.",
)
@_retention(
    "egress",
    "egress topic. An emitted record is settled on ingest: one that waits longer than this "
    "for a worker (an outage) is lost, so it must outlast the longest worker outage",
)
@_retention("dlq", "dead-letter topic: how long dead letters stay to be inspected or replayed")
@click.option(
    "--config",
    "configs",
    multiple=True,
    callback=_configs,
    metavar="KIND:KEY=VALUE",
    envvar="FAIRSTREAM_TOPIC_CONFIG",
    show_envvar=True,
    help="A topic config for the topics of one kind that this command creates "
    f"(repeatable; KIND is {', '.join(TOPIC_KINDS)}), applied over fairstream's own, e.g. "
    "egress:compression.type=zstd. cleanup.policy is fairstream's, and retention.ms of "
    "ingest, egress and dlq has an option of its own. The variable takes several, "
    "separated by spaces.",
)
@option_of(
    Settings,
    "feedback_topic",
    help="Topic the workers report outcomes to (rate limits, measured cost), with as many "
    "partitions as the egress topic; an empty name creates none.",
)
def create(
    kafka: KafkaConnection,
    ingest_topic: str,
    egress_topic: str,
    dlq_topic: str,
    policy_topic: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int | None,
    app_id: str,
    ingest_retention_ms: int,
    egress_retention_ms: int | None,
    dlq_retention_ms: int | None,
    configs: dict[Kind, dict[str, str]],
    feedback_topic: str,
) -> None:
    """Create the ingest, egress, dead-letter, (compacted) policy, progress, coordination
    and feedback topics where missing; existing topics are left as they are (`fairstream
    topics check` reports what is wrong with them).

    Exits non-zero, creating nothing, when an existing topic's partition count would break
    co-partitioning of the ingest topic with the scheduler's progress topic, or when the
    broker refuses a topic's settings.
    """
    if replication_factor == 0:
        raise click.BadParameter(
            "must be -1 (the broker's default.replication.factor) or >= 1",
            param_hint="--replication-factor",
        )
    if (
        min_insync_replicas is not None
        and replication_factor > 0
        and min_insync_replicas > replication_factor
    ):
        raise click.UsageError(
            f"--min-insync-replicas {min_insync_replicas} is above --replication-factor "
            f"{replication_factor}: every write with acks=all would fail"
        )
    retentions: tuple[tuple[Kind, int | None], ...] = (
        ("egress", egress_retention_ms),
        ("dlq", dlq_retention_ms),
    )
    for kind, retention in retentions:
        if retention is not None:
            configs.setdefault(kind, {})["retention.ms"] = str(retention)
    names = Topics(ingest_topic, egress_topic, dlq_topic, policy_topic)
    try:
        statuses = create_topics(
            kafka,
            names,
            partitions,
            app_id,
            replication_factor,
            ingest_retention_ms,
            feedback_topic=feedback_topic.strip() or None,
            min_insync_replicas=min_insync_replicas,
            configs=configs,
        )
    except TopicError as exc:
        raise click.ClickException(str(exc)) from exc
    for status in statuses:
        verb = "created" if status.created else "exists "
        unit = "partition" if status.partitions == 1 else "partitions"
        click.echo(f"{verb} {status.name} ({status.partitions} {unit})")


@topics.command("check")
@kafka_options
@topic_options
@option_of(
    Settings,
    "app_id",
    help="The scheduler's app id: names <app-id>-progress and <app-id>-coordination.",
)
@option_of(Settings, "feedback_topic", help="The workers' feedback topic; an empty name: none.")
@_partitions_option(required=False)
@click.option(
    "--allow-ingest-retention",
    is_flag=True,
    envvar="FAIRSTREAM_ALLOW_INGEST_RETENTION",
    show_envvar=True,
    help="A finite ingest retention is intended and watched (an alert on "
    "fairstream_ingest_retention_headroom_seconds): report it as a warning, not a problem.",
)
def check_command(
    kafka: KafkaConnection,
    ingest_topic: str,
    egress_topic: str,
    dlq_topic: str,
    policy_topic: str,
    app_id: str,
    feedback_topic: str,
    partitions: int | None,
    allow_ingest_retention: bool,
) -> None:
    """Report what is wrong with fairstream's topics, each with how to fix it: partition
    counts (the progress topic co-partitioned with ingest, one coordination partition),
    compaction (policy, progress and coordination compacted, the tenant-keyed topics not),
    the ingest retention, min.insync.replicas against the replication factor (and unclean
    leader election), and
    max.message.bytes of egress and dead letters against the ingest topic's.

    Exits 1 when it found a problem, 0 when it found none (warnings included).
    """
    names: dict[Kind, str] = {
        "ingest": ingest_topic,
        "egress": egress_topic,
        "dlq": dlq_topic,
        "policy": policy_topic,
        "progress": progress_topic(app_id),
        "coordination": coordination_topic(app_id),
    }
    if feedback_topic.strip():
        names["feedback"] = feedback_topic.strip()
    create = f"fairstream topics create --bootstrap {kafka.bootstrap} --app-id {app_id}"
    defaults = Topics()
    for flag, name, default in (
        ("--ingest-topic", ingest_topic, defaults.ingest),
        ("--egress-topic", egress_topic, defaults.egress),
        ("--dlq-topic", dlq_topic, defaults.dlq),
        ("--policy-topic", policy_topic, defaults.policy),
    ):
        if name != default:
            create += f" {flag} {name}"
    expected = Expected(names, kafka.bootstrap, app_id, partitions, allow_ingest_retention, create)
    try:
        described = describe_topics(kafka, names.values())
    except TopicError as exc:
        raise click.ClickException(str(exc)) from exc
    findings = check(expected, described)
    # One finding said of several topics (a single replica, say) is printed once, for all.
    grouped: dict[tuple[Severity, str, str], list[str]] = {}
    for finding in findings:
        grouped.setdefault((finding.severity, finding.what, finding.fix), []).append(finding.topic)
    for (severity, what, fix), names_of in grouped.items():
        click.echo(Finding(severity, ", ".join(names_of), what, fix).render())
    problems = sum(1 for f in findings if f.severity == "problem")
    warnings = len(findings) - problems
    checked = sum(1 for state in described.values() if state is not None)
    click.echo(f"{checked} topics checked: {problems} problems, {warnings} warnings")
    sys.exit(1 if problems else 0)
