"""The targets of docs/benchmarks.md and whether a run met them: one row (target, measured,
met, by how much) per target the results let us evaluate.
"""

from __future__ import annotations

from typing import Any

from benchmarks import (
    api_adaptive,
    api_latency,
    api_view,
    faust_view,
    feedback,
    group,
    slow_api,
)
from benchmarks.common import Row, get
from benchmarks.throughput import spread

# burst: quiet p99 dwell, seconds
BURST_OTHER_P99 = 0.5
BURST_OWN_P99 = 5.0
BURST_OWN_P99_GOAL = 3.0
# overflow: quiet p99 dwell, seconds, while a flood's overflow is dead-lettered
OVERFLOW_OTHER_P99 = 0.5
OVERFLOW_OWN_P99 = 3.0
# restart, seconds
RESTART_OWN_DISK_MEDIAN = 3.0
RESTART_EMPTY_DISK = 30.0
# gaps: kill -9 to ready with a paused tenant's 1,000,000 records parked, seconds
GAPS_RESTART = 5.0


def targets(r: dict[str, Any]) -> list[Row]:
    """Every target row the results ``r`` (phase name -> result) allow."""
    return [
        *throughput_targets(r),
        *noisy_targets(r),
        *rate_targets(r),
        *scale_targets(r),
        *absorption_peer_targets(r),
        *burst_targets(r),
        *overflow_targets(r),
        *restart_targets(r),
        *gaps_targets(r),
        *group_targets(r),
        *feedback_targets(r),
        *slow_api.targets(r),
        *api_view.targets(r),
        *api_adaptive.targets(r),
        *api_latency.targets(r),
        *faust_view.targets(r),
        *concurrency_targets(r),
    ]


def throughput_targets(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    ceiling = get(r, "ceiling", "records_per_s")
    fs = get(r, "max_throughput", "end_to_end_records_per_s")
    # Against the loop run just before the median round (older reports: the ceiling phase).
    loop = get(r, "max_throughput", "ceiling_records_per_s") or ceiling
    if loop and fs:
        ratio = fs / loop
        rounds = get(r, "max_throughput", "rounds") or []
        out.append(
            (
                "end to end (no rate limit) >= 0.3x the consume->produce loop (goal 0.5x)",
                f"{ratio:.2f}x ({fs:,} / {loop:,} records/s"
                f"{'; median of ' + spread(get(r, 'max_throughput')) if len(rounds) > 1 else ''}"
                "); goal "
                f"{'met' if ratio >= 0.5 else 'missed'}",
                ratio >= 0.3,
                f"{abs(ratio - 0.3):.2f}x",
            )
        )
    absorbed = get(r, "absorption", "fairstream", "records_per_s")
    if ceiling and absorbed:
        ratio = absorbed / ceiling
        out.append(
            (
                "absorption >= 0.5x the consume->produce loop",
                f"{ratio:.2f}x ({absorbed:,} / {ceiling:,} records/s)",
                ratio >= 0.5,
                f"{abs(ratio - 0.5):.2f}x",
            )
        )
    return out


def noisy_targets(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    p99 = get(r, "noisy", "quiet_dwell", "fairstream", "p99_ms")
    ideal = get(r, "noisy", "quiet_dwell", "gps", "p99_ms")
    if p99 is not None and ideal is not None:
        bound = 2 * ideal + 100
        out.append(
            (
                "quiet p99 dwell <= 2x ideal + 100 ms",
                f"{p99:,.0f} ms (bound {bound:,.0f} ms)",
                p99 <= bound,
                f"{abs(bound - p99):,.0f} ms",
            )
        )
    jain = get(r, "noisy", "jain_per_1s_window", "min")
    if jain is not None:
        mean = get(r, "noisy", "jain_per_1s_window", "mean")
        out.append(
            (
                "Jain >= 0.99 (min over 1 s windows)",
                f"min {jain:.4f}, mean {mean:.4f}",
                jain >= 0.99,
                f"{abs(jain - 0.99):.4f}",
            )
        )
    return out


def rate_targets(r: dict[str, Any]) -> list[Row]:
    err = get(r, "rate", "error_pct")
    if err is None:
        return []
    return [
        (
            "egress rate within 1%",
            f"{get(r, 'rate', 'achieved_rate')}/s ({err:+.2f}%)",
            abs(err) <= 1,
            f"{abs(abs(err) - 1):.2f} points",
        ),
        *rate_matrix_targets(r),
    ]


def rate_matrix_targets(r: dict[str, Any]) -> list[Row]:
    rows = get(r, "rate", "matrix")
    if not rows:
        return []
    ratios = [row["ratio"] for row in rows]
    worst = max(max(row["excess_100ms"], row["excess_1s"]) for row in rows)
    low, high = min(ratios), max(ratios)
    return [
        (
            "delivered/allowed 0.98-1.02x at rates 50-2,000, bursts 1 to 100",
            f"{low:.3f}x to {high:.3f}x ({len(rows)} rows)",
            low >= 0.98 and high <= 1.02,
            f"{min(low - 0.98, 1.02 - high):+.3f}x",
        ),
        (
            "egress stamps never above rate x w + burst (w = 0.1 s, 1 s)",
            f"largest excess {worst:+g}",
            worst <= 0,
            f"{-worst:g} records",
        ),
    ]


def scale_targets(r: dict[str, Any]) -> list[Row]:
    ratio = get(r, "scale", "cost_ratio_100k_vs_10")
    if ratio is None:
        return []
    return [
        (
            "100k tenants <= 1.5x per-record cost of 10",
            f"{ratio:.2f}x",
            ratio <= 1.5,
            f"{abs(1.5 - ratio):.2f}x",
        )
    ]


def absorption_peer_targets(r: dict[str, Any]) -> list[Row]:
    ours = get(r, "absorption", "fairstream", "records_per_s")
    peer = get(r, "absorption", "quix", "records_per_s")
    if not (ours and peer):
        return []
    return [
        (
            "absorption >= Quix Streams peer's",
            f"{ours:,} vs {peer:,} records/s ({ours / peer:.2f}x)",
            ours >= peer,
            f"{abs(ours - peer):,} records/s",
        )
    ]


def burst_targets(r: dict[str, Any]) -> list[Row]:
    """Per burst size: quiet p99 on the burst's partition and on the others."""
    out: list[Row] = []
    for run in get(r, "burst", "runs") or []:
        if run.get("status") != "ok":
            continue
        n = f"{run['records']:,}"
        for part, label, bound, goal in (
            ("other_partitions", "other partitions", BURST_OTHER_P99, None),
            ("burst_partition", "burst's partition", BURST_OWN_P99, BURST_OWN_P99_GOAL),
        ):
            cell = get(run, "dwell", part) or {}
            p99 = get(cell, "fairstream", "p99_s")
            if p99 is None:
                continue
            ideal, fifo = get(cell, "gps", "p99_s"), get(cell, "fifo", "p99_s")
            lower = "p99_s" in (get(cell, "fairstream", "lower_bound") or ())
            out.append(
                (
                    f"burst {n}: quiet p99 dwell, {label} <= {bound:g} s"
                    + (f" (goal {goal:g} s)" if goal else ""),
                    f"{'>= ' if lower else ''}{p99:,.2f} s (ideal {ideal:,.3f} s, FIFO "
                    f"{fifo:,.1f} s)",
                    p99 <= bound and not lower,
                    f"{abs(bound - p99):,.2f} s",
                )
            )
    return out


def overflow_targets(r: dict[str, Any]) -> list[Row]:
    """Per flood over the default cap: quiet p99 on the flood's partitions and the others,
    and the goal for both, 2x the ideal + 0.1 s."""
    out: list[Row] = []
    for run in get(r, "overflow", "runs") or []:
        if run.get("status") != "ok":
            continue
        floods = run.get("burst_partitions") or [0]
        n = f"{run['records']:,} x {len(floods)} of {run.get('partitions')}"
        for part, label, bound in (
            ("other_partitions", "other partitions", OVERFLOW_OTHER_P99),
            ("burst_partition", "flood's partition", OVERFLOW_OWN_P99),
        ):
            cell = get(run, "dwell", part) or {}
            p99 = get(cell, "fairstream", "p99_s")
            ideal = get(cell, "gps", "p99_s")
            if p99 is None or ideal is None:
                continue
            lower = "p99_s" in (get(cell, "fairstream", "lower_bound") or ())
            goal = 2 * ideal + 0.1
            out.append(
                (
                    f"overflow {n}: quiet p99 dwell, {label} <= {bound:g} s "
                    f"(goal 2x ideal + 0.1 = {goal:.2f} s)",
                    f"{'>= ' if lower else ''}{p99:,.2f} s (ideal {ideal:,.3f} s)",
                    p99 <= bound and not lower,
                    f"{abs(bound - p99):,.2f} s",
                )
            )
    return out


def gaps_targets(r: dict[str, Any]) -> list[Row]:
    """The gaps phase: restart to ready, and the largest progress record against its limit."""
    g = get(r, "gaps") or {}
    if g.get("status") != "ok":
        return []
    seconds, largest, limit = (
        g["restart_to_ready_s"],
        g["largest_progress_bytes"],
        g["progress_limit_bytes"],
    )
    return [
        (
            f"gaps ({g['repeats']:,} x paused, busy, busy): kill -9 to ready <= {GAPS_RESTART:g} s",
            f"{seconds:.2f} s",
            seconds <= GAPS_RESTART,
            f"{abs(GAPS_RESTART - seconds):.2f} s",
        ),
        (
            "gaps: largest progress record under the progress topic's max.message.bytes",
            f"{largest:,} B of {limit:,} B",
            0 < largest <= limit,
            f"{limit - largest:,} B",
        ),
    ]


def restart_targets(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    own = get(r, "restart", "own_disk") or {}
    median = own.get("to_ready_median_seconds")
    if median is not None:
        out.append(
            (
                f"restart on its own disk: median to ready <= {RESTART_OWN_DISK_MEDIAN:g} s "
                f"({own['restarts']} kill -9s, static membership)",
                f"{median:.2f} s (max {own['to_ready_max_seconds']:.2f} s)",
                median <= RESTART_OWN_DISK_MEDIAN,
                f"{abs(RESTART_OWN_DISK_MEDIAN - median):.2f} s",
            )
        )
    empty = get(r, "restart", "empty_disk") or {}
    if empty.get("status") in ("ok", "timeout") and "buffered_before_kill" in empty:
        seconds = empty.get("to_restored_seconds")
        out.append(
            (
                f"{empty['records']:,} buffered records back from an empty disk <= "
                f"{RESTART_EMPTY_DISK:g} s",
                empty["result"],
                seconds is not None and seconds <= RESTART_EMPTY_DISK,
                f"{abs(RESTART_EMPTY_DISK - seconds):.1f} s"
                if seconds is not None
                else f"> {max(0.0, empty['restore_timeout_seconds'] - RESTART_EMPTY_DISK):g} s",
            )
        )
    return out


def group_targets(r: dict[str, Any]) -> list[Row]:
    rate, burst = group.RATE, group.BURST
    run = get(r, "group", "runs", "demand") or {}
    if run.get("status") != "ok":
        return []
    alone, jain, worst = run["alone_rate"] or 0, run["four_jain"], run["worst_1s"]
    conv = run["convergence_seconds"]
    return [
        (
            "across instances: one backlogged tenant >= 0.9x the group rate",
            f"{alone}/s of {rate}",
            alone >= 0.9 * rate,
            f"{alone / rate:.2f}x",
        ),
        (
            "across instances: Jain >= 0.95 (4 tenants, 2 instances)",
            f"{jain:.3f}",
            jain >= 0.95,
            "",
        ),
        (
            "across instances: never above rate + burst in any 1 s",
            f"{worst} (bound {rate + burst})",
            worst <= rate + burst,
            "",
        ),
        (
            "across instances: a demand change takes effect within 2 s",
            "never" if conv is None else f"{conv:.1f} s",
            conv is not None and conv <= 2.0,
            "",
        ),
    ]


def feedback_targets(r: dict[str, Any]) -> list[Row]:
    run = get(r, "feedback", "runs", "adaptive") or {}
    out: list[Row] = []
    if run.get("status") == "ok":
        out += [
            (
                "feedback: adaptive goodput >= 0.9x the hidden capacity",
                f"{run['goodput']:g}/s of {feedback.CAPACITY:g}",
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


def concurrency_targets(r: dict[str, Any]) -> list[Row]:
    c = get(r, "concurrency") or {}
    if c.get("status") != "ok":
        return []
    run = c["slots"]
    mean, most = run["in_flight_mean"], run["in_flight_max"]
    return [
        (
            "concurrency: --max-concurrency 20 holds at most 20 calls in flight, >= 18 on average",
            f"mean {mean}, max {most} ({run['calls_per_s']} calls/s; fairstream.Worker mean "
            f"{c['sdk']['in_flight_mean']})",
            mean is not None and mean >= 18 and most <= c["max_concurrency"],
            "",
        )
    ]
