"""run_all's ``rate`` phase: rate precision with a backlog always waiting.

For each of ``--rate`` 50, 500 and 2,000 and ``--burst`` 1, the default (a tenth of the
rate) and 100: a fresh deployment pre-filled with more than the window's worth, one
scheduler, and its egress read back. Per row:

- delivered/allowed: egress records whose ``fairstream-scheduled-ms`` stamp falls in the
  window (``window`` s from 2 s after the first stamp), over ``rate x window``;
- the window bound: the largest count in any [t, t + w) of stamps minus ``rate x w + burst``,
  for w = 0.1 s and 1 s, over the whole run including the start (<= 0 means it held);
- the same at produce time (the records' Kafka timestamps), against ``rate x (w + 0.5 s) +
  burst``: a late emitter catches missed slots up, 0.5 s of them plus what its commits took,
  so a positive excess there is a commit longer than that.

The ``--rate 500``, default-burst row also fills the phase's top-level keys (achieved rate,
error, the 1 s overshoot), which the targets and the older report line read.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import delete_all, log, new_deployment, prefill, start_scheduler
from benchmarks.noisy import egress_records
from benchmarks.throughput import PARTITIONS
from fairstream_dev.harness.scheduler import TopicReader

RATES = (50.0, 500.0, 2000.0)
BURSTS: tuple[float | None, ...] = (1.0, None, 100.0)  # None: the default, rate / 10
CATCH_UP = 0.5  # fairstream.core.emission.CATCH_UP: the produce-time bound's extra room


def _worst(ts: list[float], width: float) -> int:
    """The largest count in any [t, t + width), t a time in ``ts`` (where maxima start)."""
    return max(bisect.bisect_left(ts, t + width) - i for i, t in enumerate(ts))


def _excess(ts: list[float], rate: float, burst: float, width: float) -> float:
    return round(_worst(ts, width) - (rate * width + burst), 2)


def one(
    bootstrap: str,
    workdir: Path,
    rate: float,
    burst: float | None,
    window: float,
    cleanup: list[Callable[[], None]],
) -> dict[str, Any]:
    """One scheduler at ``rate`` and ``burst`` (None: the default) over a waiting backlog."""
    effective = burst if burst is not None else max(1.0, rate / 10)
    backlog = int(rate * (window + 12) + effective)
    d = new_deployment(bootstrap, "bench", PARTITIONS)
    cleanup.append(functools.partial(delete_all, d))
    prefill(bootstrap, d.topics.ingest, backlog, 100)
    args = ["--rate", f"{rate:g}"] + ([] if burst is None else ["--burst", f"{burst:g}"])
    name = f"rate-{rate:g}-{'default' if burst is None else f'{burst:g}'}"
    scheduler = start_scheduler(d, workdir, name, args, cleanup)
    reader = TopicReader(bootstrap, d.topics.egress)
    cleanup.append(reader.close)
    deadline = time.monotonic() + window + 150
    stamps: list[float] = []
    while time.monotonic() < deadline:
        reader.poll(0.5)
        stamps = sorted(r[3] for r in egress_records(reader.messages))
        if stamps and stamps[-1] >= stamps[0] + 2 + window + 1:
            break
        if not scheduler.alive():
            raise RuntimeError(f"scheduler exited:\n{scheduler.tail()}")
    else:
        raise TimeoutError(f"{name}: {len(reader.messages)} egress records read")
    scheduler.terminate(timeout=60)
    produced = sorted(m.timestamp()[1] / 1000 for m in reader.messages)
    begin = stamps[0] + 2
    end = begin + window
    in_window = bisect.bisect_left(stamps, end) - bisect.bisect_left(stamps, begin)
    achieved = in_window / window
    steady = [t for t in stamps if begin <= t < end]
    row = {
        "rate": rate,
        "burst": effective,
        "burst_option": "default" if burst is None else f"{burst:g}",
        "backlog_records": backlog,
        "window_seconds": window,
        "achieved_rate": round(achieved, 2),
        "ratio": round(achieved / rate, 4),
        "excess_100ms": _excess(stamps, rate, effective, 0.1),
        "excess_1s": _excess(stamps, rate, effective, 1.0),
        "produced_excess_1s": _excess(produced, rate, effective + rate * CATCH_UP, 1.0),
        "max_overshoot_1s_in_window": _worst(steady, 1.0) - rate,
        "max_overshoot_1s_incl_start": _worst(stamps, 1.0) - rate,
    }
    log(
        f"rate {name}: {row['ratio']:.3f}x, excess 0.1 s {row['excess_100ms']}, 1 s "
        f"{row['excess_1s']}"
    )
    return row


def phase(
    bootstrap: str, workdir: Path, quick: bool, cleanup: list[Callable[[], None]]
) -> dict[str, Any]:
    window = 8.0 if quick else 20.0
    rows = []
    for rate in RATES:
        for burst in BURSTS:
            undo: list[Callable[[], None]] = []
            try:
                rows.append(one(bootstrap, workdir, rate, burst, window, undo))
            finally:
                for step in reversed(undo):
                    try:
                        step()
                    except Exception as exc:  # one row's clean-up must not lose the rest
                        log(f"rate clean-up: {exc!r}")
    main = next(r for r in rows if r["rate"] == 500.0 and r["burst_option"] == "default")
    return {
        "status": "ok",
        "configured_rate": main["rate"],
        "burst": main["burst"],
        "backlog_records": main["backlog_records"],
        "window_seconds": window,
        "achieved_rate": main["achieved_rate"],
        "error_pct": round((main["achieved_rate"] - main["rate"]) / main["rate"] * 100, 3),
        "max_overshoot_1s_in_window": main["max_overshoot_1s_in_window"],
        "max_overshoot_1s_incl_start": main["max_overshoot_1s_incl_start"],
        "matrix": rows,
    }


def main() -> None:
    """``python -m benchmarks.rate [--quick] [--baseline REV]``: the matrix on its own; with
    ``--baseline``, the same rows first for the scheduler of REV (run from a worktree of its
    own, as ``benchmarks.compare`` does), then side by side."""
    import argparse
    import json
    import os
    import tempfile

    import fairstream_dev.harness.scheduler as harness
    from benchmarks.common import REPO
    from benchmarks.compare import worktrees
    from benchmarks.tables import rate_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", help="a revision to measure first (e.g. main)")
    args = parser.parse_args()
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            with worktrees([args.baseline]) as trees:
                harness.REPO = trees[0]
                try:
                    results[args.baseline] = phase(bootstrap, Path(tmp), args.quick, [])
                finally:
                    harness.REPO = REPO
        results["this tree"] = phase(bootstrap, Path(tmp), args.quick, [])
    print(json.dumps(results, indent=2))
    for name, result in results.items():
        print(f"\n{name}:")
        print("\n".join(rate_table({"rate": result})))
    if args.baseline:
        before, after = (results[args.baseline]["matrix"], results["this tree"]["matrix"])
        print(
            f"\n| --rate | --burst | {args.baseline} | this tree |\n| ---: | ---: | ---: | ---: |"
        )
        for old, new in zip(before, after, strict=True):
            print(
                f"| {old['rate']:,.0f} | {old['burst_option']} | {old['ratio']:.3f}x "
                f"| {new['ratio']:.3f}x |"
            )


if __name__ == "__main__":
    main()
