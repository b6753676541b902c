"""The adaptive rate as the paid API sees it: a hidden capacity behind ``--rate 1000``,
measured at the moment each handler calls the API, on the real broker.

A simulated API (``fairstream_dev.harness.paid_api.PaidApi``) is a token bucket of C calls/s
holding a tenth of a second of them (30 at 300/s): a strict bucket, which refuses what a
clump of starts asks beyond it. A call without a token is refused with a Retry-After (the
time to its next token, rounded up to 0.1 s). One ``fairstream.Worker`` (8 handler calls at
a time, 2 ms per call that goes through) reads the egress of one ``fairstream scheduler``
run with ``--rate 1000`` and a feedback topic; 16 tenants keep a backlog on the ingest topic
all along. The scheduler has to find the capacity from the 429s.

Runs:

- ``constant``: C = 300/s for S seconds (60; ``--quick`` 30);
- ``changes``: C goes 300 -> 150 -> 300 (at 30 s and 60 s, to 90 s; ``--quick`` at 20 s
  and 40 s, to 60 s).

Per window (``constant``: from 10 s to the end; ``changes``: from 10 s after each change to
the next), measured from the API's own log of calls: mean goodput (calls that went through
per second) over the capacity, the worst 5 s window (stepping by 1 s) over the capacity, and
the share of calls refused. Targets: mean >= 0.93x, worst 5 s >= 0.85x, refused <= 3%.

``--playout-delay`` (seconds or ``off``, default: the Worker's default) is given to the
Worker. Prints numbers and the targets beside them, asserts nothing.

    .venv/bin/python -m benchmarks.api_adaptive [--bootstrap HOST:PORT] [--quick]
        [--run constant,changes] [--playout-delay SECONDS|off] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.api_view import playout_options
from benchmarks.common import Row, failed_row, get, logger, standalone
from fairstream_dev.harness.paid_api import FEEDBACK, PaidApi, api_handler, feedback_loop

CEILING = 1000
CAPACITY = 300.0
LOW = 150.0
BURST_SECONDS = 0.1  # a bucket of 30 at 300/s
LATENCY = 0.002
CONCURRENCY = 8
TENANTS = [f"t{i:02d}" for i in range(16)]
SETTLE = 10.0  # seconds after a change before its window opens
WINDOW = 5.0  # the span of the worst window
TARGETS = {"mean": 0.93, "worst": 0.85, "refused": 0.03}
RUNS = ("constant", "changes")

log = logger("api_adaptive")


def _schedule(run: str, quick: bool) -> tuple[list[tuple[float, float]], float]:
    if run == "constant":
        return [(0.0, CAPACITY)], 30.0 if quick else 60.0
    drop, rise, end = (20.0, 40.0, 60.0) if quick else (30.0, 60.0, 90.0)
    return [(0.0, CAPACITY), (drop, LOW), (rise, CAPACITY)], end


def window(api: PaidApi, begin: float, end: float) -> dict[str, Any]:
    """Goodput over the capacity (mean, and the worst ``WINDOW`` s), and the share refused,
    from ``begin`` to ``end`` s after the first call."""
    capacity = api.capacity_at(begin)
    mean = api.goodput(begin, end) / capacity
    starts = [begin + i for i in range(int(end - begin - WINDOW) + 1)]
    worst = min(api.goodput(t, t + WINDOW) / capacity for t in starts)
    refused = api.limited_share(begin, end)
    return {
        "window_s": [begin, end],
        "capacity": capacity,
        "mean": round(mean, 3),
        "worst_5s": round(worst, 3),
        "refused": round(refused, 4),
        "met": mean >= TARGETS["mean"]
        and worst >= TARGETS["worst"]
        and refused <= TARGETS["refused"],
    }


def per_second(api: PaidApi, end: float) -> dict[str, list[int]]:
    """Calls through and refused in each second from the first call, for a look at the
    shape (a sawtooth shows here)."""
    calls = api.window(0.0, end)
    start = api.start or 0.0
    ok = [0] * int(end)
    refused = [0] * int(end)
    for call in calls:
        second = int(call.at - start)
        if 0 <= second < len(ok):
            (ok if call.ok else refused)[second] += 1
    return {"ok": ok, "refused": refused}


def run(
    bootstrap: str,
    workdir: Path,
    name: str,
    quick: bool,
    playout: str,
    shape: tuple[float, float, int] = (BURST_SECONDS, LATENCY, CONCURRENCY),
) -> dict[str, Any]:
    """One run; ``shape``: the API's bucket in seconds of capacity, its call time, and the
    Worker's concurrency."""
    schedule, end = _schedule(name, quick)
    options, used = playout_options(playout)
    burst_seconds, latency, concurrency = shape
    api = PaidApi(schedule, burst_seconds=burst_seconds, latency=latency)
    run_dir = workdir / f"api-adaptive-{name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    backlog = int(1.5 * CAPACITY * end / len(TENANTS)) + 1
    args = ("--rate", str(CEILING), "--feedback-topic", FEEDBACK)
    with feedback_loop(
        bootstrap,
        run_dir,
        api_handler(api),
        *args,
        concurrency=concurrency,
        worker_options=options,
    ) as loop:
        loop.produce(dict.fromkeys(TENANTS, backlog))
        loop.run_until(lambda: api.elapsed() >= end, end + 90, f"{end:g} s of calls")
    changes = [at for at, _ in schedule]
    bounds = [*changes[1:], end]
    windows = {
        f"{schedule[i][1]:g}/s from {at + SETTLE:g} s": window(api, at + SETTLE, bounds[i])
        for i, at in enumerate(changes)
    }
    return {
        "status": "ok",
        "playout_delay": used,
        "schedule": schedule,
        "end_s": end,
        "windows": windows,
        "refused_all": round(api.limited_share(0.0, end), 4),
        "per_second": per_second(api, end),
    }


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    _cleanup: list[Callable[[], None]] | None = None,
    *,
    runs: tuple[str, ...] = RUNS,
    playout: str = "default",
    shape: tuple[float, float, int] = (BURST_SECONDS, LATENCY, CONCURRENCY),
) -> dict[str, Any]:
    out: dict[str, Any] = {"status": "ok", "targets": TARGETS, "shape": shape, "runs": {}}
    for name in runs:
        try:
            out["runs"][name] = run(bootstrap, workdir, name, quick, playout, shape)
        except Exception as exc:
            out["runs"][name] = {"status": "error", "error": repr(exc)[:300]}
        log(f"{name}: {json.dumps(out['runs'][name].get('windows', out['runs'][name]))}")
    return out


def report(result: dict[str, Any]) -> list[str]:
    bucket, latency, concurrency = result["shape"]
    lines = [
        f"adaptive rate at the API (--rate {CEILING}, a bucket of {bucket:g} s of the "
        f"capacity, Worker x{concurrency}, {latency * 1000:g} ms calls)",
        "  run       | window            | mean (>=0.93) | worst 5 s (>=0.85) | refused (<=3%)",
    ]
    for name, r in result["runs"].items():
        if r.get("status") != "ok":
            lines.append(f"  {name:9} | {r.get('error')}")
            continue
        for label, w in r["windows"].items():
            lines.append(
                f"  {name:9} | {label:17} | {w['mean']:13.3f} | {w['worst_5s']:18.3f} | "
                f"{w['refused']:.2%}{'' if w['met'] else '  (missed)'}"
            )
        overall = f"refused overall {r['refused_all']:.2%}"
        lines.append(f"  {'':9} | playout delay {r['playout_delay']}; {overall}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--run", default=",".join(RUNS), help="comma-separated")
    parser.add_argument("--playout-delay", default="default", help="seconds, or off")
    parser.add_argument("--json", type=Path, help="write the JSON here too")
    parser.add_argument(
        "--bucket", type=float, default=BURST_SECONDS, help="the API's bucket, in seconds"
    )
    parser.add_argument("--latency", type=float, default=LATENCY, help="seconds per call")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="the Worker's")
    args = parser.parse_args()
    runs = tuple(r.strip() for r in args.run.split(",") if r.strip())
    unknown = set(runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown run(s) {sorted(unknown)}; choose from {', '.join(RUNS)}")
    shape = (args.bucket, args.latency, args.concurrency)
    result = standalone(
        args.bootstrap,
        lambda bootstrap, workdir: phase(
            bootstrap, workdir, args.quick, runs=runs, playout=args.playout_delay, shape=shape
        ),
        args.json,
    )
    print("\n".join(report(result)))


# -- run_all's "api_adaptive" phase: its targets and its table in docs/benchmarks.md ----------


def _missed(w: dict[str, Any]) -> list[str]:
    """The targets a window missed, by name (none: it met them all)."""
    return [
        name
        for name, ok in (
            ("mean", w["mean"] >= TARGETS["mean"]),
            ("worst 5 s", w["worst_5s"] >= TARGETS["worst"]),
            ("refused", w["refused"] <= TARGETS["refused"]),
        )
        if not ok
    ]


def targets(results: dict[str, Any]) -> list[Row]:
    """The "api_adaptive" phase's target rows: per window of each run, goodput at the API
    over the hidden capacity, mean >= 0.93x and worst 5 s >= 0.85x, and <= 3% refused."""
    out: list[Row] = []
    for name, run in (get(results, "api_adaptive", "runs") or {}).items():
        if run.get("status") != "ok":
            continue
        for label, w in run["windows"].items():
            missed = _missed(w)
            out.append(
                (
                    f"adaptive rate at the API ({name}, {label}): mean >= {TARGETS['mean']}x "
                    f"the capacity, worst 5 s >= {TARGETS['worst']}x, refused <= "
                    f"{TARGETS['refused']:.0%}",
                    f"mean {w['mean']:.3f}x, worst 5 s {w['worst_5s']:.3f}x, refused "
                    f"{w['refused']:.1%} (playout delay {run['playout_delay']})",
                    not missed,
                    f"missed: {', '.join(missed)}" if missed else "",
                )
            )
    return out


def table(results: dict[str, Any]) -> list[str]:
    """The "adaptive rate at the API" table of docs/benchmarks.md (nothing when the phase
    did not run)."""
    r = get(results, "api_adaptive")
    if not r:
        return []
    if r.get("status") != "ok":
        return ["", f"**The adaptive rate at the API**: failed: {str(r.get('error'))[:200]}"]
    bucket, latency, concurrency = r["shape"]
    lines = [
        "",
        f"**The adaptive rate at the API** (`--rate {CEILING}` and a feedback topic; a paid API "
        f"of hidden capacity, a strict bucket holding {bucket:g} s of it; one Worker x "
        f"{concurrency}, {latency * 1000:g} ms calls; {len(TENANTS)} backlogged tenants; per "
        f"window from {SETTLE:g} s after each change, goodput at the API over the capacity: "
        f"mean and the worst {WINDOW:g} s; `benchmarks/api_adaptive.py`):",
        "",
        "| run | window | capacity | mean | worst 5 s | refused | refused overall | playout "
        "delay |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, run in (r.get("runs") or {}).items():
        if run.get("status") != "ok":
            lines.append(failed_row(name, run.get("error"), 8))
            continue
        for label, w in run["windows"].items():
            lines.append(
                f"| {name} | {label} | {w['capacity']:g}/s | {w['mean']:.3f}x | "
                f"{w['worst_5s']:.3f}x | {w['refused']:.1%} | {run['refused_all']:.1%} | "
                f"{run['playout_delay']} |"
            )
    return lines


if __name__ == "__main__":
    main()
