"""``fairstream topics create``: the topics a deployment needs, created idempotently."""

from __future__ import annotations

import click

from fairstream.adapters.admin import TopicError, create_topics
from fairstream.config import (
    KafkaConnection,
    Settings,
    Topics,
    kafka_options,
    option_of,
    topic_options,
)


@click.group("topics")
def topics() -> None:
    """Create and check fairstream's topics."""


@topics.command("create")
@kafka_options
@topic_options
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    envvar="FAIRSTREAM_PARTITIONS",
    show_envvar=True,
    help="Partitions of the ingest, egress, dead-letter and feedback topics. The ingest count "
    "bounds how many scheduler instances share the work.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    envvar="FAIRSTREAM_REPLICATION_FACTOR",
    show_envvar=True,
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
    app_id: str,
    ingest_retention_ms: int,
    feedback_topic: str,
) -> None:
    """Create the ingest, egress, dead-letter, (compacted) policy, progress and feedback
    topics where missing.

    Exits non-zero, creating nothing, when an existing topic's partition count would break
    co-partitioning of the ingest topic with the scheduler's progress topic.
    """
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
        )
    except TopicError as exc:
        raise click.ClickException(str(exc)) from exc
    for status in statuses:
        verb = "created" if status.created else "exists "
        unit = "partition" if status.partitions == 1 else "partitions"
        click.echo(f"{verb} {status.name} ({status.partitions} {unit})")
