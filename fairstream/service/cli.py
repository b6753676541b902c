"""``fairstream scheduler``: run one scheduler instance (a member of the consumer group)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import click

from fairstream.adapters.admin import (
    TopicError,
    admin_client,
    changelog_topic,
    ensure_internal_topics,
    lease_topic,
    partition_count,
)
from fairstream.config import Settings, scheduler_options, settings_from_options


def ingest_partitions(settings: Settings) -> int:
    """The ingest topic's partition count, checked against the buffer changelog's."""
    admin = admin_client(settings.kafka)
    partitions = partition_count(admin, settings.topics.ingest, timeout=30)
    if partitions is None:
        raise TopicError(
            f"the ingest topic {settings.topics.ingest} does not exist at "
            f"{settings.kafka.bootstrap}; "
            "create fairstream's topics first: fairstream topics create --partitions N"
        )
    for internal in (changelog_topic(settings.app_id), lease_topic(settings.app_id)):
        count = partition_count(admin, internal)
        if count is not None and count != partitions:
            raise TopicError(
                f"the internal topic {internal} has {count} partitions but "
                f"{settings.topics.ingest} has {partitions}; they must match (co-partitioning)"
            )
    return partitions


def run(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then stop gracefully."""
    import faust

    from fairstream.service.engine import SchedulerService
    from fairstream.service.web import start_web

    partitions = ingest_partitions(settings)
    ensure_internal_topics(settings.kafka, settings.app_id, partitions, settings.replication_factor)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    service = SchedulerService(settings, partitions)
    loop.run_until_complete(service.start())
    runner = loop.run_until_complete(start_web(service, settings.web_host, settings.web_port))
    logging.getLogger("fairstream").info(
        "web endpoints on %s:%d (/healthz /readyz /metrics)", settings.web_host, settings.web_port
    )
    worker = faust.Worker(service.app, loglevel=settings.log_level, loop=loop)
    try:
        worker.execute_from_commandline()
    finally:
        if not loop.is_closed():
            loop.run_until_complete(runner.cleanup())


@click.command("scheduler")
@scheduler_options
def scheduler(**options: Any) -> None:
    """Buffer the ingest topic per tenant and emit fairly onto the egress topic.

    Runs one member of the consumer group --app-id; start more instances (up to the ingest
    topic's partition count) to share the work. --rate is for the whole group: each
    instance takes rate x (its ingest partitions / all ingest partitions). SIGTERM stops
    emission, waits for in-flight sends, commits and leaves the group.
    """
    settings = settings_from_options(**options)
    try:
        run(settings)
    except TopicError as exc:
        raise click.ClickException(str(exc)) from exc
