"""The scheduler under cProfile, every thread of it (``profile_threads``): a process that
writes its profile when it exits, and the profile read back as the top functions and the
share of time per group of functions, out of the time not spent waiting.
"""

from __future__ import annotations

import pstats
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import REPO
from fairstream_dev.harness.scheduler import SchedulerProcess

# Threads that wait (for the broker, for records, for the next scrape) are not working.
# librdkafka calls that take a timeout (consume, poll, commit, flush) mostly wait too, and
# cProfile cannot split their waiting from their work: they count as waits.
WAITING = (
    "select.epoll",
    "'acquire' of '_thread.lock'",
    "time.sleep",
    "'consume' of 'cimpl",
    "'poll' of 'cimpl",
    "'commit_transaction' of 'cimpl",
    "'send_offsets_to_transaction' of 'cimpl",
    "'flush' of 'cimpl",
    "'init_transactions' of 'cimpl",
    "list_topics",
    "'get' of '_queue.SimpleQueue'",
)
PROFILE_GROUPS = (
    ("librdkafka produce (and other calls that do not wait)", ("cimpl.",)),
    ("fairstream/core (DRR, emission rule, limiter)", ("fairstream/core/",)),
    ("fairstream/scheduler (emitter, send, ingest, backlog)", ("fairstream/scheduler/",)),
    ("fairstream (wire, metrics, other)", ("fairstream/",)),
    ("prometheus_client", ("prometheus_client/",)),
    ("asyncio, aiohttp (web)", ("asyncio/", "aiohttp/")),
)


class ProfiledScheduler(SchedulerProcess):
    """A scheduler process under cProfile (the profile is written when it exits)."""

    profile: Path

    def command(self) -> list[str]:
        command = super().command()
        # [python, -m, fairstream, ...] -> [python, -m, benchmarks.profile_threads, file, -m,
        # fairstream, ...]: every thread profiled, not only the main one.
        return [command[0], "-m", "benchmarks.profile_threads", str(self.profile), *command[1:]]


def profile_groups(path: Path) -> dict[str, float]:
    """Share of the threads' own time per group of functions, waits left out."""
    stats = pstats.Stats(str(path))
    shares: dict[str, float] = defaultdict(float)
    for (filename, _line, func), (_cc, _calls, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}:{func}"
        if any(mark in where for mark in WAITING):
            continue
        label = next(
            (name for name, marks in PROFILE_GROUPS if any(m in where for m in marks)), "other"
        )
        shares[label] += tt
    total = sum(shares.values())
    return {
        k: round(v / total, 3) if total else 0.0
        for k, v in sorted(shares.items(), key=lambda kv: -kv[1])
    }


def profile_summary(path: Path, top: int = 15) -> list[dict[str, Any]]:
    """The ``top`` functions by own time, waits left out (shares of the rest)."""
    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, func), (_cc, calls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}:{func}"
        if not any(mark in where for mark in WAITING):
            rows.append((tt, ct, calls, f"{_short(filename)}:{line}({func})"))
    total = sum(row[0] for row in rows)
    rows.sort(reverse=True)
    return [
        {
            "function": where,
            "calls": calls,
            "tottime_s": round(tt, 2),
            "tottime_share": round(tt / total, 3) if total else None,
            "cumtime_s": round(ct, 2),
        }
        for tt, ct, calls, where in rows[:top]
    ]


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/work/main/", str(REPO) + "/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename
