"""``fairstream scheduler``: run one scheduler instance (a member of the consumer group)."""

from __future__ import annotations

import sys
from typing import Any

import click

from fairstream.adapters.admin import TopicError
from fairstream.config import scheduler_options, settings_from_options
from fairstream.scheduler.run import run


@click.command("scheduler")
@scheduler_options
def scheduler(**options: Any) -> None:
    """Buffer the ingest topic per tenant and emit fairly onto the egress topic.

    Runs one member of the consumer group --app-id; start more instances (up to the ingest
    topic's partition count) to share the work. --rate is for the whole group: with
    --share-by demand (the default) the instances split it by their backlogged tenants'
    weights, weighted max-min fair over the group (reports exchanged through
    <app-id>-coordination); with --share-by partitions each instance takes rate x (its
    ingest partitions / all ingest partitions). Egress and dead-letter records are written
    in Kafka transactions (read them with isolation.level=read_committed). SIGTERM commits
    what is open and leaves the group.

    Several instances on one host: give each its own --web-port. Each locks its
    --data-dir (its identity); with the default directory each takes a free slot of it
    (<default>/instance-N), so started by hand they all work; with an explicit --data-dir
    in use, the second exits at once naming the first (pid, host, start time).
    """
    settings = settings_from_options(**options)
    try:
        code = run(settings)
    except TopicError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(code)
