"""A fetched record's run through the worker (``Job``), how it ended (``JobOutcome``), and
the worker's counters (``WorkerStats``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from fairstream import wire
from fairstream.sdk.worker.handler import Request
from fairstream.sdk.worker.tracking import CommitPosition

__all__ = ["FINISHED", "Job", "JobOutcome", "WorkerStats"]


class JobOutcome(enum.Enum):
    """How the run of one fetched record ended, as the consumer thread applies it."""

    DONE = "done"  # the handler succeeded
    DEAD_LETTERED = "dead-lettered"  # the dead-letter topic acknowledged it
    DUPLICATE = "duplicate"  # skipped: its request id was seen recently
    # Skipped: the same record, fetched again after its partition came back, was finished
    # by the run that began before the partition was revoked.
    REPEATED = "repeated"
    ABANDONED = "abandoned"  # not finished (revoked, stopping): must not be committed past


# Outcomes after which a record may be committed past and its request id counts as seen.
FINISHED = (JobOutcome.DONE, JobOutcome.DEAD_LETTERED)


@dataclass(eq=False, slots=True)
class Job:
    """One fetched record on its way through the event loop and back."""

    request: Request
    key: bytes | None
    value: bytes | None
    progress: CommitPosition
    # The run of the same record still going on from an earlier assignment of its
    # partition, if any: this one runs after it (same tenant), and only if it did not finish.
    predecessor: Job | None = None
    outcome: JobOutcome | None = None  # set by the event loop when the run ends
    due: float = 0.0  # paced: when its call may start (``pacing.start_at``), wall clock
    reason: str = wire.HANDLER_FAILED  # the dead-letter reason, when dead-lettered


@dataclass
class WorkerStats:
    """Counters since the worker started (read them from any thread)."""

    processed: int = 0  # handler succeeded
    failed_attempts: int = 0  # handler raised (each attempt counts), RateLimited aside
    rate_limited: int = 0  # handler raised RateLimited (each call counts)
    dead_lettered: int = 0
    duplicates_skipped: int = 0
    abandoned: int = 0  # left unfinished for the next owner (rebalance, shutdown)
    commits: int = 0
