"""``fairstream worker``: run a ``fairstream.Worker`` around a handler named on the command line.

``--handler package.module:function`` names a callable taking one ``fairstream.Request``
(plain or ``async def``). As with gunicorn and uvicorn, the current directory is put on
``sys.path`` first, so a module next to where the command runs is found. Worker-specific
options read ``FAIRSTREAM_WORKER_*`` variables so that they never collide with the
scheduler's; the broker and topic options share the scheduler's variables.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from types import FrameType
from typing import Any

import click

from fairstream.config import KafkaConnection, Settings, Topics, kafka_options, option_of
from fairstream.sdk.worker.consumer import DEFAULT_GROUP
from fairstream.sdk.worker.tracking import ORDERINGS, Ordering


def load_handler(spec: str) -> Any:
    """Import ``module:attribute[.attribute...]``; click errors say what is wrong."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise click.BadParameter(f"expected module:function, got {spec!r}", param_hint="--handler")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name}: {exc}", param_hint="--handler"
        ) from exc
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise click.BadParameter(
                f"{module_name} has no attribute {attr_path}", param_hint="--handler"
            ) from None
    if not callable(target):
        raise click.BadParameter(f"{spec} is not callable", param_hint="--handler")
    return target


def resolve_feedback_topic(topic: str, off: bool) -> str | None:
    """The feedback topic the worker writes, or None for none.

    Off with ``--no-feedback``, with an empty ``--feedback-topic``, and with
    ``FAIRSTREAM_FEEDBACK_TOPIC`` set but empty (click reads an empty variable as unset);
    ``--no-feedback`` with a topic named on the command line is a contradiction.
    """
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("feedback_topic") if ctx is not None else None
    if off:
        if source is click.core.ParameterSource.COMMANDLINE and topic:
            raise click.UsageError("--no-feedback and --feedback-topic contradict each other")
        return None
    if (
        source is click.core.ParameterSource.DEFAULT
        and os.environ.get("FAIRSTREAM_FEEDBACK_TOPIC", None) == ""
    ):
        return None
    return topic.strip() or None


def _env(name: str) -> dict[str, Any]:
    return {"envvar": f"FAIRSTREAM_{name}", "show_envvar": True}


@click.command("worker")
@click.option(
    "--handler",
    required=True,
    help="The function to call for every request, as module:function.",
    **_env("WORKER_HANDLER"),
)
@kafka_options
@option_of(Topics, "egress", help="Topic the scheduler emits and the workers read.")
@option_of(Topics, "dlq", help="Dead-letter topic for requests whose handler kept failing.")
@option_of(
    Settings,
    "feedback_topic",
    help="Topic the worker reports outcomes to (rate limits, reported cost) for the "
    "scheduler; an empty name turns feedback off, as --no-feedback does.",
)
@click.option(
    "--no-feedback",
    is_flag=True,
    default=False,
    help="Report nothing on the feedback topic.",
    **_env("WORKER_NO_FEEDBACK"),
)
@click.option(
    "--group-id",
    default=DEFAULT_GROUP,
    show_default=True,
    help="Consumer group of the workers (workers of one group share the egress partitions).",
    **_env("WORKER_GROUP_ID"),
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Requests in progress at once (a handler call running, or waiting for its retry).",
    **_env("WORKER_CONCURRENCY"),
)
@click.option(
    "--ordering",
    type=click.Choice(ORDERINGS),
    default="start",
    show_default=True,
    help="start: a tenant's requests start in egress order, many at once (up to "
    "--concurrency), and finish in any order; completion: one at a time per tenant, each "
    "after the previous one finished (a tenant gets at most 1/latency calls/s).",
    **_env("WORKER_ORDERING"),
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Calls of the handler per request before it is dead-lettered as handler-failed.",
    **_env("WORKER_MAX_ATTEMPTS"),
)
@click.option(
    "--backoff-initial",
    type=click.FloatRange(min=0),
    default=0.1,
    show_default=True,
    help="Seconds before the first retry; doubles with each retry.",
    **_env("WORKER_BACKOFF_INITIAL"),
)
@click.option(
    "--backoff-max",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Longest wait between two attempts, in seconds.",
    **_env("WORKER_BACKOFF_MAX"),
)
@click.option(
    "--dedup-window",
    type=click.IntRange(min=0),
    default=10_000,
    show_default=True,
    help="Recent request ids remembered to skip duplicates; 0 turns de-duplication off.",
    **_env("WORKER_DEDUP_WINDOW"),
)
@click.option(
    "--max-pending",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Records fetched and not finished before the worker stops fetching.",
    **_env("WORKER_MAX_PENDING"),
)
@click.option(
    "--session-timeout",
    type=click.FloatRange(min=6),
    default=10.0,
    show_default=True,
    help="Seconds without heartbeats after which a dead worker's partitions move.",
    **_env("WORKER_SESSION_TIMEOUT"),
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics as /metrics on this port (0: any free port, logged). "
    "[default: off]",
    **_env("WORKER_METRICS_PORT"),
)
@click.option(
    "--metrics-host",
    default="0.0.0.0",
    show_default=True,
    help="Address /metrics binds to (with --metrics-port).",
    **_env("WORKER_METRICS_HOST"),
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Log level.",
    **_env("LOG_LEVEL"),
)
def worker(
    handler: str,
    kafka: KafkaConnection,
    egress_topic: str,
    dlq_topic: str,
    feedback_topic: str,
    no_feedback: bool,
    group_id: str,
    concurrency: int,
    ordering: Ordering,
    max_attempts: int,
    backoff_initial: float,
    backoff_max: float,
    dedup_window: int,
    max_pending: int,
    session_timeout: float,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
) -> None:
    """Consume the egress topic and call HANDLER for every request.

    Offsets are committed only past requests that succeeded, were dead-lettered or were
    skipped as duplicates, so a crash re-delivers and loses nothing. SIGTERM or SIGINT
    finishes the running handlers, commits and leaves the group (a second signal kills).
    Credentials the broker refuses end the command at once with its reason (exit 1).
    A handler may raise fairstream.RateLimited (retried without using up an attempt) and
    return fairstream.Usage(cost=N); outcomes go to --feedback-topic for the scheduler.
    """
    from fairstream.adapters.admin import KafkaAuthenticationError
    from fairstream.sdk.worker.consumer import Worker
    from fairstream.sdk.worker.metrics import MetricsPortError

    if backoff_max < backoff_initial:
        raise click.UsageError("--backoff-max must be at least --backoff-initial")
    feedback = resolve_feedback_topic(feedback_topic, no_feedback)
    function = load_handler(handler)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    instance = Worker(
        function,
        bootstrap=kafka,
        egress_topic=egress_topic,
        dlq_topic=dlq_topic,
        feedback_topic=feedback,
        group_id=group_id,
        max_attempts=max_attempts,
        backoff_initial=backoff_initial,
        backoff_max=backoff_max,
        dedup_window=dedup_window or None,
        concurrency=concurrency,
        ordering=ordering,
        max_pending=max_pending,
        session_timeout=session_timeout,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("fairstream.worker").info(
            "%s: stopping (again to kill)", signal.Signals(signum).name
        )
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        instance.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        instance.run()
    except KafkaAuthenticationError as exc:
        raise click.ClickException(str(exc)) from exc
    except MetricsPortError as exc:
        raise click.ClickException(str(exc)) from exc
