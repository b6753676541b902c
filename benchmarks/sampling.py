"""What the machine and its processes are doing, read from /proc: CPU seconds, cores used,
peak memory; a scheduler's /metrics sampled with them; and the machine a run ran on.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka

from benchmarks.common import REPO, metrics
from fairstream_dev.harness.scheduler import SchedulerProcess
from fairstream_dev.kafka import KAFKA_VERSION

POLL = 0.1  # seconds between /metrics samples

Samples = list[tuple[float, dict[str, float]]]  # (monotonic time, metrics) per poll

broker_pid: int | None = None  # the development broker's JVM, when it runs here (run_all)


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a process (all its threads) so far."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(
    pid: int | None, before: float | None, after: float | None, seconds: float
) -> float | None:
    """Cores used on average (1.0 = one core busy) between two cpu_seconds readings."""
    if pid is None or before is None or after is None or seconds <= 0:
        return None
    return round((after - before) / seconds, 2)


def memory_mib(pid: int) -> dict[str, float]:
    """VmHWM (peak resident) and VmRSS of a process, in MiB."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                out[name] = round(int(rest.split()[0]) / 1024, 1)
    return out


def scheduler_memory(scheduler: SchedulerProcess) -> dict[str, float]:
    return memory_mib(scheduler.proc.pid) if scheduler.proc else {}


def wait_for(
    scheduler: SchedulerProcess, condition: Callable[[dict[str, float]], bool], deadline: float
) -> Samples:
    """Poll /metrics every 0.1 s until ``condition`` holds; the samples (time, metrics)."""
    samples: Samples = []
    while time.monotonic() < deadline:
        if not scheduler.alive():
            raise RuntimeError(f"scheduler exited:\n{scheduler.tail()}")
        m = metrics(scheduler)
        # CPU of the scheduler and the broker at each sample, to say which one is the limit.
        pid = scheduler.proc.pid if scheduler.proc else None
        for label, p in (("_cpu_scheduler", pid), ("_cpu_broker", broker_pid)):
            value = cpu_seconds(p)
            if value is not None:
                m[label] = value
        samples.append((time.monotonic(), m))
        if m and condition(m):
            return samples
        time.sleep(POLL)
    raise TimeoutError(f"deadline passed; last metrics {samples[-1][1] if samples else None}")


def first_moved(samples: Samples, name: str) -> int:
    """Index of the last sample before counter ``name`` moved (errs early by <= 0.1 s)."""
    for i, (_at, m) in enumerate(samples):
        if m.get(name, 0) > 0:
            return max(0, i - 1)
    return len(samples) - 1


def cores_used(samples: Samples, start: int) -> dict[str, Any]:
    """Average cores used by the scheduler and the broker from sample ``start`` to the end."""
    (t0, m0), (t1, m1) = samples[start], samples[-1]
    return {
        label: cpu_share(1, m0.get(key), m1.get(key), t1 - t0)
        for label, key in (("scheduler", "_cpu_scheduler"), ("broker", "_cpu_broker"))
    }


# -- the machine -------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = None
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "nproc": os.cpu_count(),
        "memory_gib": mem_gib,
        "cpu": cpu,
        "python": platform.python_version(),
        "confluent_kafka": _version(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka_broker": KAFKA_VERSION,
        "fairstream_commit": _git("rev-parse", "--short", "HEAD"),
        "fairstream_dirty": bool(_git("status", "--porcelain", "--", "fairstream")),
    }


def _git(*args: str) -> str | None:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    return None


def _version(value: Any) -> str:
    # confluent_kafka.version() is a string in 2.16 and a (string, int) pair in older ones.
    return value if isinstance(value, str) else str(value[0])
