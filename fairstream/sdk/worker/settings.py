"""What a ``fairstream.Worker`` runs with: every setting it shares with ``fairstream worker``.

Each field is declared once with ``setting()`` (default, help, limits, flag, variable), as
the scheduler's are (``fairstream.config.settings``): the command's options and their
variables are derived from these declarations (``fairstream.config.options``), the
``Worker``'s keyword arguments take their defaults from them, and both refuse what
``__post_init__`` refuses. Field order is the order ``--help`` lists the options in.

The worker's own options read ``FAIRSTREAM_WORKER_*`` variables, so that they never collide
with the scheduler's; the topics share the scheduler's variables (one deployment, one
``FAIRSTREAM_EGRESS_TOPIC``). What only Python can pass (the handler, hooks, librdkafka
overrides, a metrics registry) and what only the command takes (``--handler``,
``--no-feedback``, ``--log-level``) are not settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairstream.config.setting import SettingsError, check, setting
from fairstream.config.settings import DEFAULT_DLQ, DEFAULT_EGRESS
from fairstream.sdk.worker.pacing import PLAYOUT_DELAY
from fairstream.sdk.worker.tracking import ORDERINGS, Ordering
from fairstream.wire.feedback import DEFAULT_FEEDBACK_TOPIC

__all__ = ["DEFAULT_GROUP", "WorkerSettings"]

DEFAULT_GROUP = "fairstream-workers"


@dataclass(frozen=True)
class WorkerSettings:
    """The settings of one worker; raises ``SettingsError`` (a ``ValueError``) for values
    outside their limits."""

    egress_topic: str = setting(
        DEFAULT_EGRESS, help="Topic the scheduler emits and the workers read."
    )
    dlq_topic: str = setting(
        DEFAULT_DLQ, help="Dead-letter topic for requests whose handler kept failing."
    )
    # None: report nothing (the command's --no-feedback, or an empty name).
    feedback_topic: str | None = setting(
        DEFAULT_FEEDBACK_TOPIC,
        empty_is_none=True,
        help="Topic the worker reports outcomes to (rate limits, reported cost) for the "
        "scheduler; an empty name turns feedback off, as --no-feedback does.",
    )
    group_id: str = setting(
        DEFAULT_GROUP,
        env="FAIRSTREAM_WORKER_GROUP_ID",
        help="Consumer group of the workers (workers of one group share the egress partitions).",
    )
    concurrency: int = setting(
        1,
        low=1,
        env="FAIRSTREAM_WORKER_CONCURRENCY",
        help="Requests in progress at once (a handler call running, or waiting for its retry).",
    )
    ordering: Ordering = setting(  # noqa: RUF009 - setting() is a dataclasses.field
        "start",
        choices=ORDERINGS,
        env="FAIRSTREAM_WORKER_ORDERING",
        help="start: a tenant's requests start in egress order, many at once (up to "
        "--concurrency), and finish in any order; completion: one at a time per tenant, each "
        "after the previous one finished (a tenant gets at most 1/latency calls/s).",
    )
    max_attempts: int = setting(
        5,
        low=1,
        env="FAIRSTREAM_WORKER_MAX_ATTEMPTS",
        help="Calls of the handler per request before it is dead-lettered as handler-failed.",
    )
    backoff_initial: float = setting(
        0.1,
        low=0,
        env="FAIRSTREAM_WORKER_BACKOFF_INITIAL",
        help="Seconds before the first retry; doubles with each retry.",
    )
    backoff_max: float = setting(
        10.0,
        low=0,
        env="FAIRSTREAM_WORKER_BACKOFF_MAX",
        help="Longest wait between two attempts, in seconds.",
    )
    # 0 and None both turn it off (None: Python's spelling).
    dedup_window: int | None = setting(
        10_000,
        low=0,
        env="FAIRSTREAM_WORKER_DEDUP_WINDOW",
        help="Recent request ids remembered to skip duplicates; 0 turns de-duplication off.",
    )
    # 0 and None both turn it off: each call starts as its record arrives
    # (``pacing.PLAYOUT_DELAY`` says how the default was chosen).
    playout_delay: float | None = setting(
        PLAYOUT_DELAY,
        low=0,
        high=60,
        env="FAIRSTREAM_WORKER_PLAYOUT_DELAY",
        help="Seconds after its start moment (the fairstream-start-ms stamp, written under a "
        "rate) that a request's call starts, so that calls reach the API at the scheduler's "
        "pace rather than in clumps as transactions land; it should cover a commit and a "
        "fetch (0.1 does on a local broker; raise it for a remote or busy one). 0 starts "
        "each call as its record arrives.",
    )
    max_pending: int = setting(
        1000,
        low=1,
        env="FAIRSTREAM_WORKER_MAX_PENDING",
        help="Records fetched and not finished before the worker stops fetching.",
    )
    session_timeout: float = setting(
        10.0,
        low=6,
        env="FAIRSTREAM_WORKER_SESSION_TIMEOUT",
        help="Seconds without heartbeats after which a dead worker's partitions move.",
    )
    metrics_port: int | None = setting(
        None,
        low=0,
        high=65535,
        env="FAIRSTREAM_WORKER_METRICS_PORT",
        help="Serve Prometheus metrics as /metrics on this port (0: any free port, logged). "
        "[default: off]",
    )
    metrics_host: str = setting(
        "0.0.0.0",
        env="FAIRSTREAM_WORKER_METRICS_HOST",
        help="Address /metrics binds to (with --metrics-port).",
    )

    def __post_init__(self) -> None:
        check(self)
        topic = self.feedback_topic
        if topic is not None and (not isinstance(topic, str) or not topic):
            raise SettingsError(
                f"--feedback-topic must be a topic name, or None for no feedback, got {topic!r}"
            )
        if self.backoff_max < self.backoff_initial:
            raise SettingsError(
                "--backoff-max must be at least --backoff-initial, "
                f"got {self.backoff_max!r} < {self.backoff_initial!r}"
            )

    @property
    def pacing(self) -> float | None:
        """The playout delay in seconds, or None when calls start on arrival."""
        return self.playout_delay or None

    @property
    def dedup(self) -> int | None:
        """How many recent request ids to remember, or None when de-duplication is off."""
        return self.dedup_window or None
