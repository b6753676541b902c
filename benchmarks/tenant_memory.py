"""Memory per tenant: N one-record tenants buffered by one scheduler.

One run, on topics and an app id of its own:

1. An ingest topic of 12 partitions pre-filled with N records of 100 B, each with a tenant of
   its own (``tenant-<i>``), written before the scheduler starts.
2. ``fairstream scheduler --rate 1`` (so that almost nothing drains), with the default
   ``--buffer-memory`` (512 MiB of held payloads; the rest are read back when their turn
   comes), until its ingest counter has all N.
3. Its peak resident memory (``VmHWM``) and its resident memory then (``VmRSS``), beside an
   idle scheduler's (the same command on an empty topic, read once ready): the bytes per
   tenant are the difference over N.

Target: 1,000,000 tenants at a peak of at most 600 MB. With ``--headers SET`` each record
carries the headers of that set (``benchmarks.common.HEADER_SETS``; ``cost-trace``: a
``fairstream-cost`` header and a trace header, as cost-weighted producers write them).

    .venv/bin/python -m benchmarks.tenant_memory [--bootstrap HOST:PORT] [--tenants 1000000]
        [--headers SET] [--timeout 600] [--json]

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``) the development broker is used
(started if it is not running). Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks import sampling
from benchmarks.common import (
    BACKLOG,
    HEADER_SETS,
    INGESTED,
    delete_all,
    fill,
    kill,
    logger,
    metrics,
    new_deployment,
    standalone,
    undoing,
)
from fairstream_dev.harness.scheduler import SchedulerProcess

PARTITIONS = 12
TARGET_MB = 600.0  # peak RSS with 1,000,000 tenants

log = logger("tenant-memory")


def _scheduler(d: Any, workdir: Path, name: str) -> SchedulerProcess:
    return SchedulerProcess(d, workdir, "--rate", "1", "--log-level", "warning", name=name)


def idle(bootstrap: str, workdir: Path) -> dict[str, float]:
    """A scheduler's memory on an empty ingest topic, once ready."""
    d = new_deployment(bootstrap, "memidle", PARTITIONS)
    with undoing() as undo:
        undo.append(functools.partial(delete_all, d))
        process = _scheduler(d, workdir, f"idle-{d.app_id}").start()
        undo.append(lambda: kill(process))
        process.wait_ready(120)
        time.sleep(2.0)  # its threads settled (the audit's first window, the first commits)
        return sampling.scheduler_memory(process)


def run(
    bootstrap: str, workdir: Path, tenants: int, timeout: float, headers: str | None = None
) -> dict[str, Any]:
    base = idle(bootstrap, workdir)
    log(f"idle scheduler: {base}")
    d = new_deployment(bootstrap, "memory", PARTITIONS)
    with undoing() as undo:
        undo.append(functools.partial(delete_all, d))
        seconds = fill(bootstrap, d.topics.ingest, tenants, tenants, headers)
        with_headers = f", with headers {headers}" if headers else ""
        log(f"{tenants:,} records of {tenants:,} tenants{with_headers} written in {seconds:.1f} s")
        process = _scheduler(d, workdir, f"fill-{d.app_id}").start()
        undo.append(lambda: kill(process))
        started = time.monotonic()
        seen: dict[str, float] = {}
        while time.monotonic() < started + timeout:
            if not process.alive():
                raise RuntimeError(f"scheduler exited:\n{process.tail()}")
            seen = metrics(process) or seen
            if seen.get(INGESTED, 0) >= tenants:
                break
            time.sleep(0.2)
        else:
            return {
                "status": "timeout",
                "tenants": tenants,
                "ingested": seen.get(INGESTED, 0),
                "result": f"did not buffer {tenants:,} records in {timeout:g} s",
            }
        took = time.monotonic() - started
        memory = sampling.scheduler_memory(process)
    peak, now = memory.get("VmHWM", 0.0), memory.get("VmRSS", 0.0)
    per_tenant = (peak - base.get("VmRSS", 0.0)) * 1024 * 1024 / tenants
    log(f"buffered in {took:.1f} s: {memory}; {per_tenant:,.0f} B per tenant above idle")
    return {
        "status": "ok",
        "tenants": tenants,
        "headers": headers,
        "buffered": seen.get(BACKLOG),
        "seconds_to_buffer": round(took, 1),
        "idle_mib": base,
        "peak_mib": peak,
        "rss_mib": now,
        "bytes_per_tenant_above_idle": round(per_tenant),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--tenants", type=int, default=1_000_000)
    parser.add_argument(
        "--headers",
        choices=sorted(HEADER_SETS),
        help="each record with this header set (benchmarks.common.HEADER_SETS)",
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args()
    result = standalone(
        args.bootstrap,
        lambda b, w: run(b, w, args.tenants, args.timeout, args.headers),
        json_path=None,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    if result["status"] != "ok":
        print(f"{args.tenants:,} one-record tenants: {result['result']}")
        return
    peak_mb = result["peak_mib"] * 1.048576
    verdict = "met" if args.tenants < 1_000_000 or peak_mb <= TARGET_MB else "missed"
    with_headers = f" (headers {args.headers})" if args.headers else ""
    print(
        f"{args.tenants:,} one-record tenants{with_headers} buffered in "
        f"{result['seconds_to_buffer']:g} s: "
        f"peak RSS {peak_mb:,.0f} MB ({result['peak_mib']:,.0f} MiB), RSS then "
        f"{result['rss_mib']:,.0f} MiB, idle {result['idle_mib'].get('VmRSS', 0):,.0f} MiB; "
        f"{result['bytes_per_tenant_above_idle']:,} B per tenant above idle"
    )
    if args.tenants >= 1_000_000 and not args.headers:  # the target is for records without
        print(f"{verdict}   1,000,000 tenants: peak RSS <= {TARGET_MB:g} MB")


if __name__ == "__main__":
    main()
