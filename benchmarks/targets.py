"""The targets of docs/benchmarks.md and whether a run met them: one row (target, measured,
met, by how much) per target the results let us evaluate. The phases that print their own
targets (burst, restart, group, feedback, and the paid-API ones) keep them, and their
bounds, in their module; this one gathers them with the rest.
"""

from __future__ import annotations

from typing import Any

from benchmarks import (
    api_adaptive,
    api_latency,
    api_view,
    faust_view,
    slow_api,
)
from benchmarks.burst import burst_targets
from benchmarks.common import Row, get
from benchmarks.feedback import feedback_targets
from benchmarks.group import group_targets
from benchmarks.restart import restart_targets
from benchmarks.throughput import spread

# overflow: quiet p99 dwell, seconds, while a flood's overflow is dead-lettered
OVERFLOW_OTHER_P99 = 0.5
OVERFLOW_OWN_P99 = 3.0
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
            "100k tenants <= 1.3x per-record CPU of 10",
            f"{ratio:.2f}x",
            ratio <= 1.3,
            f"{abs(1.3 - ratio):.2f}x",
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
