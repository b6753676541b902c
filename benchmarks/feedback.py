"""Closing the loop with the paid API: the adaptive rate against a fixed rate and
against an oracle that knows the API's capacity.

A simulated paid API (``fairstream_dev.harness.paid_api``: a token bucket of 300 calls/s
holding half a second of them; a call without a token is refused with
``RateLimited(retry_after=`` the time to the next token, rounded up to 0.1 s``)``) is called
by one ``Worker`` (16 handler calls at a time, 10 ms per call that goes through) reading the
egress of one scheduler, with 16 tenants backlogged on the ingest topic:

- ``adaptive``: ``--rate 1000`` with feedback: the scheduler has to find the capacity;
- ``fixed``: ``--rate 1000 --feedback-topic ""``: what a guessed rate does without feedback;
- ``oracle``: ``--rate 300 --feedback-topic ""``: the capacity, known in advance.

Each run lasts S seconds of API calls (40; ``--quick`` 20). Per run, over the window from
SETTLE s (10; quick 8) after the first call to the end: goodput (calls that went through per
second), the share of calls refused (also over the whole run), the egress rate (records
by ``fairstream-scheduled-ms``), the most records released but not yet served (at the
workers or on the egress topic, where the scheduler can no longer reorder them, sampled
every 0.5 s); and the convergence time: from the first call to the first
1 s window from which on every 1 s window (0.5 s steps) has goodput >= 90% of the capacity
and at most 5% of its calls refused ("never" when the run ends first).

A fourth run, adaptive while the capacity goes 300 -> 150 -> 300 (workers 8 calls at a
time), gives goodput and refusals in a window after each change, the
convergence after each (the seconds until every 1 s window holds goodput >= 0.9x), the
share of calls refused from each change on, and the strict convergence (until every 1 s
window also has <= 5% of its calls refused: each probe that finds the limit again makes
one window above that, so it is shown beside, not as the target); a fifth is the same
with an API whose 429s carry no Retry-After. The fourth draws
``docs/feedback-loop.png``: egress rate, adaptive rate (``fairstream_adaptive_rate``),
goodput and capacity over time, beside the three runs' egress at a constant capacity.
Prints numbers, asserts nothing.

    .venv/bin/python -m benchmarks.feedback [--bootstrap HOST:PORT] [--quick]
        [--changes-only] [--baseline REV]

``--baseline REV`` runs the capacity changes first with the scheduler of REV (from a
worktree of its own, as ``benchmarks.compare`` does) and prints both side by side.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Broker, Row, failed_row, get, logger, print_targets
from fairstream_dev.harness.paid_api import (
    FEEDBACK,
    FeedbackLoop,
    PaidApi,
    api_handler,
    feedback_loop,
)

CAPACITY = 300.0
LOW = 150.0
CEILING = 1000
CHANGE_CONCURRENCY = 8  # handler calls at a time in the capacity-change runs
TENANTS = [f"t{i:02d}" for i in range(16)]
PLOT = REPO / "docs" / "feedback-loop.png"
RUNS: dict[str, tuple[str, ...]] = {
    "adaptive": ("--rate", str(CEILING), "--feedback-topic", FEEDBACK),
    "fixed": ("--rate", str(CEILING), "--feedback-topic", ""),
    "oracle": ("--rate", f"{CAPACITY:g}", "--feedback-topic", ""),
}


log = logger("feedback")


def _sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {"seconds": 20.0, "settle": 8.0, "changes": (15.0, 30.0, 50.0), "after": (8, 10)}
    return {"seconds": 40.0, "settle": 10.0, "changes": (20.0, 40.0, 70.0), "after": (10, 15)}


def _series(api: PaidApi, loop: FeedbackLoop, end: float) -> dict[str, list[float]]:
    """Per-second egress, goodput and refusals, from the first call to ``end`` s after it;
    the adaptive rate samples (seconds, records/s)."""
    start = api.start or 0.0
    seconds = int(end)
    egress = Counter(int(at - start) for at, _ in loop.scheduled() if 0 <= at - start < seconds)
    calls = api.window(0.0, end)
    ok = Counter(int(c.at - start) for c in calls if c.ok)
    refused = Counter(int(c.at - start) for c in calls if not c.ok)
    samples = [(at - start, rate) for at, rate in loop.samples if rate is not None]
    return {
        "egress": [egress[s] for s in range(seconds)],
        "ok": [ok[s] for s in range(seconds)],
        "refused": [refused[s] for s in range(seconds)],
        "capacity": [api.capacity_at(s) for s in range(seconds)],
        "adaptive_t": [round(t, 2) for t, _ in samples if 0 <= t < end],
        "adaptive_rate": [round(r, 1) for t, r in samples if 0 <= t < end],
    }


def _window(api: PaidApi, loop: FeedbackLoop, begin: float, end: float) -> dict[str, Any]:
    start = api.start or 0.0
    capacity = api.capacity_at(begin)
    goodput = api.goodput(begin, end)
    scheduled = sorted(at - start for at, _ in loop.scheduled())
    egress = sum(1 for at in scheduled if begin <= at < end)
    served = sorted(c.at - start for c in api.window(-1e9, end) if c.ok)
    # Released by the scheduler but not served by the API yet (at the workers, or on the
    # egress topic): where the scheduler can no longer reorder them.
    downstream = max(
        bisect.bisect_right(scheduled, t) - bisect.bisect_right(served, t)
        for t in (begin + 0.5 * i for i in range(int((end - begin) / 0.5) + 1))
    )
    return {
        "window_s": [begin, end],
        "capacity": capacity,
        "goodput": round(goodput, 1),
        "goodput_ratio": round(goodput / capacity, 3),
        "refused_share": round(api.limited_share(begin, end), 4),
        "egress_rate": round(egress / (end - begin), 1),
        "downstream_max": downstream,
    }


def _loop_run(
    bootstrap: str,
    workdir: Path,
    name: str,
    schedule: list[tuple[float, float]],
    seconds: float,
    args: tuple[str, ...],
    *,
    retry_after: bool = True,
    concurrency: int = 16,
) -> tuple[PaidApi, FeedbackLoop]:
    api = PaidApi(schedule, retry_after=retry_after)
    backlog = sum(
        capacity * ((schedule[i + 1][0] if i + 1 < len(schedule) else seconds) - begin)
        for i, (begin, capacity) in enumerate(schedule)
    )
    run_dir = workdir / f"feedback-{name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    with feedback_loop(
        bootstrap, run_dir, api_handler(api), *args, concurrency=concurrency
    ) as loop:
        # Enough for egress well above the capacity all along (a fixed rate empties the
        # ingest topic onto the workers anyway: that is what it does).
        loop.produce(dict.fromkeys(TENANTS, int(2.5 * backlog / len(TENANTS)) + 1))
        loop.run_until(lambda: api.elapsed() >= seconds, seconds + 90, f"{seconds:g} s of calls")
    return api, loop


def run_constant(
    bootstrap: str, workdir: Path, name: str, seconds: float, settle: float
) -> dict[str, Any]:
    api, loop = _loop_run(bootstrap, workdir, name, [(0.0, CAPACITY)], seconds, RUNS[name])
    out = {
        "status": "ok",
        "args": " ".join("<topic>" if a == FEEDBACK else a or '""' for a in RUNS[name]),
        **_window(api, loop, settle, seconds),
        "refused_share_all": round(api.limited_share(0.0, seconds), 4),
        "calls": len(api.window(0.0, seconds)),
        "convergence_s": api.convergence(0.0, seconds, 0.9, refused=0.05),
        "series": _series(api, loop, seconds),
    }
    return out


def run_changes(
    bootstrap: str, workdir: Path, sizes: dict[str, Any], *, retry_after: bool = True
) -> dict[str, Any]:
    drop, rise, end = sizes["changes"]
    after_drop, after_rise = sizes["after"]
    schedule = [(0.0, CAPACITY), (drop, LOW), (rise, CAPACITY)]
    name = "changes" if retry_after else "changes-no-retry-after"
    api, loop = _loop_run(
        bootstrap,
        workdir,
        name,
        schedule,
        end,
        RUNS["adaptive"],
        retry_after=retry_after,
        concurrency=CHANGE_CONCURRENCY,
    )
    windows = {
        "300": _window(api, loop, sizes["settle"], drop),
        "150": _window(api, loop, drop + after_drop, rise),
        "300 again": _window(api, loop, rise + after_rise, end),
    }
    return {
        "status": "ok",
        "retry_after": retry_after,
        "concurrency": CHANGE_CONCURRENCY,
        "schedule": schedule,
        "end_s": end,
        "windows": windows,
        "refused_share_all": round(api.limited_share(0.0, end), 4),
        # Seconds from each change until every 1 s window holds goodput >= 0.9x (with
        # "strict", also <= 5% of its calls refused: a probe that finds the limit again
        # has a window above that each time), and the share refused from the change on.
        "convergence_s": {
            "300": api.convergence(0.0, drop, 0.9),
            "150": api.convergence(drop, rise, 0.9),
            "300 again": api.convergence(rise, end, 0.9),
        },
        "refused_since_change": {
            "300": round(api.limited_share(0.0, drop), 4),
            "150": round(api.limited_share(drop, rise), 4),
            "300 again": round(api.limited_share(rise, end), 4),
        },
        "convergence_strict_s": {
            "300": api.convergence(0.0, drop, 0.9, refused=0.05),
            "150": api.convergence(drop, rise, 0.9, refused=0.05),
            "300 again": api.convergence(rise, end, 0.9, refused=0.05),
        },
        "series": _series(api, loop, end),
    }


def plot(result: dict[str, Any], path: Path) -> bool:
    """Egress rate against capacity over time, to a PNG; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    runs = result.get("runs") or {}
    changes = result.get("changes") or {}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    if changes.get("status") == "ok":
        s = changes["series"]
        t = list(range(len(s["egress"])))
        left.step(t, s["capacity"], where="post", color="black", ls="--", label="hidden capacity")
        left.plot(t, s["egress"], color="tab:blue", label="egress (records/s)")
        left.plot(t, s["ok"], color="tab:green", label="goodput (calls through/s)")
        left.plot(t, s["refused"], color="tab:red", lw=0.8, label="refused (429/s)")
        left.plot(
            s["adaptive_t"],
            s["adaptive_rate"],
            color="tab:orange",
            lw=0.8,
            label="adaptive rate",
        )
        left.set_ylim(0, max(CAPACITY, *s["egress"], *s["adaptive_rate"]) * 1.05)
        left.set_title(f"adaptive (--rate {CEILING}), capacity 300 -> 150 -> 300")
        left.set_xlabel("seconds after the first API call")
        left.set_ylabel("per second")
        left.legend(fontsize=8, loc="upper right")
    colors = {"adaptive": "tab:blue", "fixed": "tab:red", "oracle": "tab:green"}
    for name, run in runs.items():
        if run.get("status") != "ok":
            continue
        s = run["series"]
        right.plot(range(len(s["egress"])), s["egress"], color=colors[name], label=f"{name} egress")
        right.plot(
            range(len(s["ok"])), s["ok"], color=colors[name], ls=":", label=f"{name} goodput"
        )
    right.axhline(CAPACITY, color="black", ls="--", label="hidden capacity")
    right.set_title("capacity 300/s: adaptive, fixed --rate 1000, oracle --rate 300")
    right.set_xlabel("seconds after the first API call")
    right.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _changes(bootstrap: str, workdir: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    """Both capacity-change runs: with Retry-After ("changes"), without ("no_retry_after")."""
    out: dict[str, Any] = {}
    for key, retry_after in (("changes", True), ("no_retry_after", False)):
        try:
            out[key] = run_changes(bootstrap, workdir, sizes, retry_after=retry_after)
        except Exception as exc:
            out[key] = {"status": "error", "error": repr(exc)[:300]}
        log(f"{key}: {json.dumps({k: v for k, v in out[key].items() if k != 'series'})}")
    return out


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    _cleanup: list[Callable[[], None]] | None = None,
    plot_path: Path = PLOT,
    *,
    changes_only: bool = False,
) -> dict[str, Any]:
    sizes = _sizes(quick)
    runs: dict[str, Any] = {}
    for name in RUNS if not changes_only else ():
        try:
            runs[name] = run_constant(bootstrap, workdir, name, sizes["seconds"], sizes["settle"])
        except Exception as exc:
            runs[name] = {"status": "error", "error": repr(exc)[:300]}
        log(f"{name}: {json.dumps({k: v for k, v in runs[name].items() if k != 'series'})}")
    both = _changes(bootstrap, workdir, sizes)
    changes, bare = both["changes"], both["no_retry_after"]
    result: dict[str, Any] = {
        "status": "ok",
        "capacity": CAPACITY,
        "seconds": sizes["seconds"],
        "settle": sizes["settle"],
        "runs": runs,
        "changes": changes,
        "changes_no_retry_after": bare,
    }
    if not changes_only and plot(result, plot_path):
        result["plot"] = str(plot_path)
    # The per-second series are for the plot: keep them out of the report's raw JSON.
    series = {
        name: run.pop("series", None)
        for name, run in [*runs.items(), ("changes", changes), ("no_retry_after", bare)]
    }
    (workdir / "feedback-series.json").write_text(json.dumps(series))
    return result


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _g(value: Any) -> str:
    return "?" if value is None else f"{value:g}"


def feedback_table(results: dict[str, Any]) -> list[str]:
    """The "Closing the loop" table."""
    fb = get(results, "feedback") or {}
    runs = fb.get("runs") or {}
    lines = [
        f"**Closing the loop with the paid API** (a simulated API of hidden capacity "
        f"{CAPACITY:g} calls/s, a token bucket holding 0.5 s of it, refusing with a "
        "Retry-After to its next token; one worker, 16 calls at a time; 16 backlogged tenants; "
        f"{_g(fb.get('seconds'))} s of calls per run, figures over [{_g(fb.get('settle'))} s, "
        "end) after the first call; convergence: from the first call until every 1 s window "
        "has goodput >= 90% of the capacity and <= 5% refused; `benchmarks/feedback.py`):",
        "",
        "| run | scheduler | goodput | of capacity | refused (window) | refused (whole run) | "
        "egress | released, not served (max) | convergence |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    if not runs:  # --changes-only
        lines = lines[:2]
    for name in RUNS if runs else ():
        run = runs.get(name) or {}
        if run.get("status") != "ok":
            lines.append(failed_row(name, run.get("error"), 9))
            continue
        lines.append(
            f"| {name} | `{run['args']}` | {run['goodput']:g}/s | {run['goodput_ratio']:.2f}x | "
            f"{run['refused_share']:.1%} | {run['refused_share_all']:.1%} | "
            f"{run['egress_rate']:g}/s | {run['downstream_max']:,} | "
            f"{_seconds(run['convergence_s'])} |"
        )
    for key, what in (("changes", "with Retry-After"), ("changes_no_retry_after", "bare 429s")):
        changes = fb.get(key) or {}
        if changes.get("status") == "ok":
            w, c = changes["windows"], changes["convergence_s"]
            since = changes.get("refused_since_change", {})
            strict = changes.get("convergence_strict_s", {})
            parts = [
                f"{label} in [{w[k]['window_s'][0]:g}, {w[k]['window_s'][1]:g}) s: goodput "
                f"{w[k]['goodput_ratio']:.2f}x, {w[k]['refused_share']:.1%} refused; every 1 s "
                f"window >= 0.9x after {_seconds(c[k])} ("
                + ("" if since.get(k) is None else f"{since[k]:.1%} refused since the change, ")
                + f"every window <= 5% refused too after {_seconds(strict.get(k))})"
                for k, label in (("300", "300/s"), ("150", "150/s"), ("300 again", "300/s again"))
            ]
            drop, rise = (step[0] for step in changes["schedule"][1:])
            lines += [
                "",
                f"Adaptive while the capacity goes 300 -> 150 (at {drop:g} s) -> 300 (at "
                f"{rise:g} s), {what}, workers {changes.get('concurrency', 16)} calls at a "
                f"time: {'; '.join(parts)}; {changes['refused_share_all']:.1%} of all calls "
                "refused.",
            ]
        elif changes:
            lines += ["", f"Capacity changes ({what}): failed: {str(changes.get('error'))[:200]}"]
    if fb.get("plot"):
        lines += [
            "",
            "![Egress rate, adaptive rate and goodput against the hidden capacity over time]"
            "(feedback-loop.png)",
        ]
    return lines


def change_rows(changes: dict[str, Any]) -> list[str]:
    """Per capacity of a change run: "capacity | goodput | refused | seconds to 0.9x |
    refused since the change | seconds to 0.9x with every window <= 5% refused"."""
    if changes.get("status") != "ok":
        return [f"failed | | | {str(changes.get('error'))[:80]} | |"] if changes else []
    w, c = changes["windows"], changes["convergence_s"]
    since = changes.get("refused_since_change", {})
    strict = changes.get("convergence_strict_s", {})
    rows = []
    for k, label in (("300", "300/s"), ("150", "-> 150/s"), ("300 again", "-> 300/s")):
        share = "" if since.get(k) is None else f"{since[k]:.1%}"
        rows.append(
            f"{label} | {w[k]['goodput_ratio']:.2f}x | {w[k]['refused_share']:.1%} | "
            f"{_seconds(c[k])} | {share} | {_seconds(strict.get(k))}"
        )
    return rows


def feedback_targets(r: dict[str, Any]) -> list[Row]:
    run = get(r, "feedback", "runs", "adaptive") or {}
    out: list[Row] = []
    if run.get("status") == "ok":
        out += [
            (
                "feedback: adaptive goodput >= 0.9x the hidden capacity",
                f"{run['goodput']:g}/s of {CAPACITY:g}",
                run["goodput_ratio"] >= 0.9,
                f"{run['goodput_ratio']:.2f}x",
            ),
            (
                "feedback: adaptive refused calls <= 5%",
                f"{run['refused_share']:.1%} (after {run['window_s'][0]:g} s)",
                run["refused_share"] <= 0.05,
                "",
            ),
        ]
    for key, what in (("changes", "Retry-After"), ("changes_no_retry_after", "bare 429s")):
        changes = get(r, "feedback", key) or {}
        if changes.get("status") != "ok":
            continue
        windows = changes["windows"].values()
        met = all(w["goodput_ratio"] >= 0.9 and w["refused_share"] <= 0.05 for w in windows)
        out.append(
            (
                f"feedback ({what}): re-converges after 300 -> 150 -> 300",
                " / ".join(f"{w['goodput_ratio']:.2f}x" for w in windows),
                met,
                "",
            )
        )
        keys = ("150", "300 again")
        seconds = [changes["convergence_s"][k] for k in keys]
        refused = [changes.get("refused_since_change", {}).get(k) for k in keys]
        strict = [changes.get("convergence_strict_s", {}).get(k) for k in keys]
        out.append(
            (
                f"feedback ({what}): >= 0.9x within 10 s of each change, <= 5% refused",
                " / ".join(
                    f"{'never' if t is None else f'{t:g} s'}, {'?' if f is None else f'{f:.1%}'}"
                    for t, f in zip(seconds, refused, strict=True)
                ),
                all(t is not None and t <= 10 for t in seconds)
                and all(f is not None and f <= 0.05 for f in refused),
                "every window <= 5% refused too: "
                + " / ".join("never" if t is None else f"{t:g} s" for t in strict),
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", type=Path, default=PLOT, help=f"the PNG (default {PLOT})")
    parser.add_argument("--changes-only", action="store_true", help="only the change runs")
    parser.add_argument("--baseline", help="a revision whose scheduler runs the changes first")
    args = parser.parse_args()
    import fairstream_dev.harness.scheduler as harness
    from benchmarks.compare import worktrees

    broker = Broker.find(args.bootstrap)
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-feedback-"))
    baseline: dict[str, Any] | None = None
    try:
        if args.baseline:
            with worktrees([args.baseline]) as trees:
                harness.REPO = trees[0]
                try:
                    baseline = _changes(broker.bootstrap, workdir / "baseline", _sizes(args.quick))
                finally:
                    harness.REPO = REPO
        result = phase(
            broker.bootstrap,
            workdir,
            args.quick,
            plot_path=args.plot.resolve(),
            changes_only=args.changes_only,
        )
    finally:
        broker.stop()
    results = {"feedback": result}
    print(json.dumps({**results, "baseline": baseline}, indent=2))
    print("\n".join(feedback_table(results)))
    if baseline is not None:
        print(f"\nCapacity changes, {args.baseline} beside this tree:\n")
        print(
            "| scheduler | 429s | change | goodput | refused | seconds to 0.9x "
            "| refused since change | seconds, every window <= 5% refused |"
        )
        print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for label, source in ((args.baseline, baseline), ("this tree", result)):
            for key, name in (("changes", "Retry-After"), ("no_retry_after", "bare")):
                run = source.get(key) if key in source else source.get("changes_" + key)
                for row in change_rows(run or {}):
                    print(f"| {label} | {name} | {row} |")
    print_targets(feedback_targets(results))


if __name__ == "__main__":
    main()
