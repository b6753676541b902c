"""``fairstream worker``: run a ``fairstream.Worker`` around a handler named on the command line.

``--handler package.module:function`` names a callable taking one ``fairstream.Request``
(plain or ``async def``). As with gunicorn and uvicorn, the current directory is put on
``sys.path`` first, so a module next to where the command runs is found. Worker-specific
options read ``FAIRSTREAM_WORKER_*`` variables so that they never collide with the
scheduler's; the broker and topic options share the scheduler's variables. The options the
``Worker`` also takes as keyword arguments are derived from their declarations in
``fairstream.sdk.worker.settings`` (default, help, limits, variable).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import click

from fairstream.config import KafkaConnection, Settings, kafka_options, option_of
from fairstream.config.options import click_option, from_options
from fairstream.config.setting import declared
from fairstream.sdk.worker.settings import WorkerSettings


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


F = TypeVar("F", bound=Callable[..., Any])

# Not settings of the worker: how the command names its handler and says "no feedback".
_handler_option = click.option(
    "--handler",
    required=True,
    help="The function to call for every request, as module:function.",
    envvar="FAIRSTREAM_WORKER_HANDLER",
    show_envvar=True,
)
_no_feedback_option = click.option(
    "--no-feedback",
    is_flag=True,
    default=False,
    help="Report nothing on the feedback topic.",
    envvar="FAIRSTREAM_WORKER_NO_FEEDBACK",
    show_envvar=True,
)


def worker_options(f: F) -> F:
    """Every ``WorkerSettings`` option, derived from its declaration, in field order
    (``--no-feedback`` right after ``--feedback-topic``)."""
    for setting in reversed(declared(WorkerSettings)):
        if setting.field.name == "feedback_topic":
            f = _no_feedback_option(f)
        f = click_option(setting)(f)
    return f


@click.command("worker")
@_handler_option
@kafka_options
@worker_options
@option_of(Settings, "log_level")
def worker(
    handler: str,
    kafka: KafkaConnection,
    no_feedback: bool,
    log_level: str,
    **options: Any,
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

    feedback = resolve_feedback_topic(options["feedback_topic"], no_feedback)
    settings = dataclasses.replace(
        from_options(WorkerSettings, options), feedback_topic=feedback
    )  # refused values (--backoff-max below --backoff-initial) are usage errors
    function = load_handler(handler)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    instance = Worker(function, bootstrap=kafka, **dataclasses.asdict(settings))

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
