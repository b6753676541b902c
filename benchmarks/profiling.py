"""The scheduler under cProfile: a process that writes its profile when it exits, and the
profile read back as the top functions and the share of time per group of functions.
"""

from __future__ import annotations

import pstats
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import REPO
from fairstream_dev.harness.scheduler import SchedulerProcess

PROFILE_GROUPS = (
    ("event loop idle (epoll wait)", ("select.epoll",)),
    ("librdkafka calls (produce, poll, consume)", ("cimpl.",)),
    ("RocksDB (rocksdict get, put, delete)", ("Rdict",)),
    ("prometheus_client", ("prometheus_client/",)),
    ("fairstream/core (DRR, limiter)", ("fairstream/core/",)),
    ("fairstream (service, state, contract)", ("fairstream/",)),
    ("asyncio", ("asyncio/",)),
    ("faust, mode, aiokafka", ("faust/", "mode/", "aiokafka/")),
)


class ProfiledScheduler(SchedulerProcess):
    """A scheduler process under cProfile (the profile is written when it exits)."""

    profile: Path

    def command(self) -> list[str]:
        command = super().command()
        # [python, -m, fairstream, ...] -> [python, -m, cProfile, -o, file, -m, fairstream, ...]
        return [command[0], "-m", "cProfile", "-o", str(self.profile), *command[1:]]


def profile_groups(path: Path) -> dict[str, float]:
    """Share of the profiled thread's own time per group of functions."""
    stats = pstats.Stats(str(path))
    total = stats.total_tt  # type: ignore[attr-defined]
    shares: dict[str, float] = defaultdict(float)
    for (filename, _line, func), (_cc, _calls, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename}:{func}"
        label = next(
            (name for name, marks in PROFILE_GROUPS if any(m in where for m in marks)), "other"
        )
        shares[label] += tt / total if total else 0.0
    return {k: round(v, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}


def profile_summary(path: Path, top: int = 15) -> list[dict[str, Any]]:
    """The ``top`` functions by own time."""
    stats = pstats.Stats(str(path))
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (filename, line, func), (_cc, calls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, calls, f"{_short(filename)}:{line}({func})"))
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
