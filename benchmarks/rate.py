"""run_all's ``rate`` phase: ``--rate 500`` with a backlog of 2.5 windows' worth: the rate
achieved over a 30 s window (from 2 s after the first egress record) and the largest count
in any [t, t+1 s) minus the rate, in the window and including the start.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import delete_all, new_deployment, prefill, start_scheduler
from benchmarks.noisy import egress_records
from benchmarks.throughput import PARTITIONS
from fairstream_dev.harness.scheduler import TopicReader


def _worst(ts: list[float]) -> int:
    """The largest count in any [t, t + 1 s), t a departure time (where maxima start)."""
    return max(bisect.bisect_left(ts, t + 1.0) - i for i, t in enumerate(ts))


def phase(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    rate = 500.0
    window = 10.0 if quick else 30.0
    backlog = int(rate * window * 2.5)
    d = new_deployment(bootstrap, "bench", PARTITIONS)
    cleanup.append(functools.partial(delete_all, d))
    fill = prefill(bootstrap, d.topics.ingest, backlog, 100)
    scheduler = start_scheduler(d, workdir, "rate", ["--rate", str(rate)], cleanup)
    reader = TopicReader(bootstrap, d.topics.egress)
    cleanup.append(reader.close)
    deadline = time.monotonic() + window + 150
    # Read until the window (from 2 s after the first egress record) is surely covered.
    while time.monotonic() < deadline:
        reader.poll(0.5)
        times = sorted(r[3] for r in egress_records(reader.messages))
        if times and times[-1] >= times[0] + 2 + window + 1:
            break
        if not scheduler.alive():
            raise RuntimeError(f"scheduler exited:\n{scheduler.tail()}")
    else:
        raise TimeoutError(f"rate: {len(reader.messages)} egress records read")
    times = sorted(r[3] for r in egress_records(reader.messages))
    begin = times[0] + 2
    end = begin + window
    in_window = bisect.bisect_left(times, end) - bisect.bisect_left(times, begin)
    achieved = in_window / window
    steady = [t for t in times if begin <= t < end]
    return {
        "status": "ok",
        "configured_rate": rate,
        "burst": rate / 10,
        "backlog_records": fill["records"],
        "window_seconds": window,
        "achieved_rate": round(achieved, 2),
        "error_pct": round((achieved - rate) / rate * 100, 3),
        "max_overshoot_1s_in_window": _worst(steady) - rate,
        "max_overshoot_1s_incl_start": _worst(times) - rate,
    }
