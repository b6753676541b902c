"""The "Results" section of docs/benchmarks.md: one table (and its caption) per phase. The
phases that print their own table (burst, restart, group, feedback, and the paid-API ones)
keep it in their module; this one puts them in order with the rest."""

from __future__ import annotations

from typing import Any

from benchmarks import (
    api_adaptive,
    api_view,
    concurrency,
    noisy,
    slow_api,
    throughput,
)
from benchmarks.burst import burst_table, dwell_cells
from benchmarks.common import VALUE_SIZE, cell, get, num
from benchmarks.feedback import feedback_table
from benchmarks.group import group_table
from benchmarks.restart import restart_table
from benchmarks.targets import OVERFLOW_OTHER_P99, OVERFLOW_OWN_P99


def result_tables(r: dict[str, Any]) -> list[str]:
    return [
        *throughput_tables(r),
        *noisy_table(r),
        *rate_line(r),
        *rate_table(r),
        *scale_table(r),
        *burst_table(r),
        "",
        *overflow_table(r),
        "",
        *restart_table(r),
        "",
        *gaps_table(r),
        "",
        *group_table(r),
        "",
        *feedback_table(r),
        *slow_api.table(r),
        *api_view.table(r),
        *api_adaptive.table(r),
        "",
        *concurrency.line(r),
    ]


def _cores(cores: dict[str, Any] | None, process: str = "scheduler") -> str:
    if not cores:
        return "-"
    return f"{num(cores.get(process), '.2f')} / {num(cores.get('broker'), '.2f')}"


def throughput_tables(r: dict[str, Any]) -> list[str]:
    def g(*path: str) -> Any:
        return get(r, *path)

    return [
        f"**Throughput** ({num(g('ceiling', 'records'))} records of {VALUE_SIZE} B, 1,000 "
        f"tenants, {throughput.PARTITIONS} partitions, pre-filled; one process each; no rate "
        "limit):",
        "",
        "| | records/s | µs/record | ratio to ceiling | cores: process / broker |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| ceiling: confluent-kafka consume, produce (no state) | "
        f"{num(g('ceiling', 'records_per_s'))} | {num(g('ceiling', 'us_per_record'), '.1f')} | "
        f"1 | {_cores(g('ceiling', 'cores_used'), 'passthrough')} |",
        f"| fairstream scheduler, ingest to egress acknowledged | "
        f"{num(g('max_throughput', 'end_to_end_records_per_s'))} | "
        f"{num(g('max_throughput', 'us_per_record'), '.1f')} | "
        f"{num(g('max_throughput', 'ratio_to_ceiling'), '.2f')} | "
        f"{_cores(g('max_throughput', 'cores_used'))} |",
        f"| the same, each record with a cost header and a trace header (against its own loop "
        f"run, {num(g('max_throughput_headers', 'ceiling_records_per_s'))} records/s) | "
        f"{num(g('max_throughput_headers', 'end_to_end_records_per_s'))} | "
        f"{num(g('max_throughput_headers', 'us_per_record'), '.1f')} | "
        f"{num(g('max_throughput_headers', 'ratio_to_ceiling'), '.2f')} | "
        f"{_cores(g('max_throughput_headers', 'cores_used'))} |",
        "",
        "**Absorption** (ingest to indexed per tenant, same pre-filled topic; fairstream "
        "keeps the ingest log as the buffer and writes nothing per record; the Quix Streams "
        "peer writes each record into its state store):",
        "",
        "| | records/s |",
        "| --- | ---: |",
        f"| fairstream (`--rate 1`, /metrics ingest counter) | "
        f"{num(g('absorption', 'fairstream', 'records_per_s'))} |",
        f"| Quix Streams, first to N-th record processed | "
        f"{num(g('absorption', 'quix', 'records_per_s'))} |",
        f"| Quix Streams, including its final checkpoint (flush, changelog acked, commit) | "
        f"{num(g('absorption', 'quix', 'records_per_s_incl_final_checkpoint'))} |",
        "",
        *loop_ratios(r),
    ]


def loop_ratios(r: dict[str, Any]) -> list[str]:
    """Absorption and end to end against the consume->produce loop of the same run."""
    loop = get(r, "ceiling", "records_per_s")
    if not loop:
        return []
    absorbed = get(r, "absorption", "fairstream", "records_per_s")
    e2e = get(r, "max_throughput", "ratio_to_ceiling")
    rounds = get(r, "max_throughput", "rounds") or []
    return [
        f"Against the plain consume->produce loop of this run ({loop:,} records/s): absorption "
        f"{num(absorbed and absorbed / loop, '.2f')}x (target 0.5x), end to end with no rate "
        f"limit {num(e2e, '.2f')}x (target 0.3x, goal 0.5x)"
        + (
            f": the median of {len(rounds)} rounds ({throughput.spread(get(r, 'max_throughput'))}),"
            " each against a loop run just "
            "before it, as the machine's speed drifts."
            if len(rounds) > 1
            else "."
        ),
        "",
    ]


def noisy_table(r: dict[str, Any]) -> list[str]:
    def g(*path: str) -> Any:
        return get(r, "noisy", *path)

    q = g("quiet_dwell") or {}
    lines = [
        f"**Noisy neighbour** (rate {num(g('rate'))}/s; bursts {g('noisy_bursts')}; "
        f"{noisy.QUIET_TENANTS} quiet tenants at ~{noisy.QUIET_RATE:g}/s each, "
        f"{num(g('quiet_records'))} quiet records; dwell = fairstream-scheduled-ms - "
        "fairstream-enqueued-ms; FIFO and GPS computed by `fairstream.analysis.reference` on "
        "the same actual arrivals):",
        "",
        "| quiet tenants' dwell | p50 ms | p99 ms | max ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, label in (("fairstream", "fairstream"), ("fifo", "FIFO"), ("gps", "ideal (GPS)")):
        s = q.get(key) or {}
        lines.append(
            f"| {label} | {num(s.get('p50_ms'), ',.1f')} | {num(s.get('p99_ms'), ',.1f')} | "
            f"{num(s.get('max_ms'), ',.1f')} |"
        )
    j = g("jain_per_1s_window") or {}
    return [
        *lines,
        "",
        f"Jain's index per 1 s window over the tenants backlogged throughout the window "
        f"(equal weights; {j.get('windows', '-')} windows with two or more): min "
        f"{num(j.get('min'), '.4f')}, mean {num(j.get('mean'), '.4f')}.",
        "",
    ]


def rate_line(r: dict[str, Any]) -> list[str]:
    def g(key: str, fmt: str = ",.0f") -> str:
        return num(get(r, "rate", key), fmt)

    return [
        f"**Rate precision** (`--rate {g('configured_rate')}`, burst {g('burst')}, "
        f"{g('backlog_records')} records backlogged; {g('window_seconds')} s from 2 s after the "
        f"first egress record): achieved {g('achieved_rate', ',.2f')}/s "
        f"({g('error_pct', '+.2f')}%); largest count in any [t, t+1 s) minus the rate: "
        f"{g('max_overshoot_1s_in_window')} in the window, "
        f"{g('max_overshoot_1s_incl_start')} including the start (the bucket's burst).",
        "",
    ]


def rate_table(r: dict[str, Any]) -> list[str]:
    rows = get(r, "rate", "matrix")
    if not rows:
        return []
    lines = [
        f"**Rate precision at any burst** (a backlog always waiting; "
        f"{num(rows[0]['window_seconds'])} s from 2 s after the first egress record; counted "
        "by the `fairstream-scheduled-ms` stamps). Excess: the largest count in any window "
        "of w minus `rate x w + burst`, over the whole run (<= 0: the bound held). At produce "
        "time (Kafka timestamps) a late emitter catches up to 0.5 s of slots plus what its "
        "commits took; the last column counts against `rate x (w + 0.5 s) + burst`, so a "
        "positive value is a commit that took longer than that (under load):",
        "",
        "| --rate | --burst | delivered/s | delivered/allowed | excess w=0.1 s | excess w=1 s "
        "| excess at produce time, 1 s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        option = row["burst_option"]
        burst = f"{num(row['burst'])} (default)" if option == "default" else option
        lines.append(
            f"| {num(row['rate'])} | {burst} | {num(row['achieved_rate'], ',.2f')} "
            f"| {row['ratio']:.3f}x | {row['excess_100ms']:+g} | {row['excess_1s']:+g} "
            f"| {row['produced_excess_1s']:+g} |"
        )
    lines.append("")
    return lines


def scale_table(r: dict[str, Any]) -> list[str]:
    lines = [
        f"**Tenant scale** ({num(get(r, 'scale', 'records'))} records, no rate limit; memory "
        "is the scheduler process's peak RSS, VmHWM):",
        "",
        "| tenants | records/s | µs/record | CPU µs/record | peak RSS MiB | "
        "cores: scheduler / broker |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in get(r, "scale", "rows") or []:
        lines.append(
            f"| {row['tenants']:,} | {num(row.get('end_to_end_records_per_s'))} | "
            f"{num(row.get('us_per_record'), '.1f')} | "
            f"{num(row.get('cpu_us_per_record'), '.1f')} | "
            f"{num((row.get('memory_mib') or {}).get('VmHWM'), ',.0f')} | "
            f"{_cores(row.get('cores_used'))} |"
        )
    return [
        *lines,
        "",
        "Scheduler CPU per record, 100,000 tenants vs 10 (median of the alternating rounds "
        f"{', '.join(f'{x:.2f}x' for x in get(r, 'scale', 'cost_ratios_100k_vs_10') or [])}): "
        f"{num(get(r, 'scale', 'cost_ratio_100k_vs_10'), '.2f')}x.",
        "",
    ]


# -- overflow (burst's table is benchmarks/burst.py's) ------------------------------------


def overflow_table(results: dict[str, Any]) -> list[str]:
    """The "Overflow" table: floods over the default backlog cap."""
    o = get(results, "overflow") or {}
    runs = o.get("runs") or []
    if not runs:
        return []
    lines = [
        f"**Overflow** (`--rate {get(o, 'rate') or 500:g}`, the default `--max-backlog` "
        "(100,000): what a flooding tenant writes beyond it is dead-lettered `backlog-full` "
        "while the quiet tenants (2 per partition, 2 records/s each) go on; the burst "
        "scenario's dwell and references otherwise; `benchmarks/overflow.py`):",
        "",
        "| flood | quiet dwell | flood's partitions p50 / p99 / max s | other partitions "
        "p50 / p99 / max s | taken in | dead letters |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        floods = run.get("burst_partitions") or [0]
        n = (
            f"{run.get('records', 0):,} x {len(floods)} into partition"
            f"{'s' if len(floods) > 1 else ''} {', '.join(map(str, floods))} of "
            f"{run.get('partitions', '-')}"
        )
        if run.get("status") != "ok":
            lines.append(f"| {n} | failed: {cell(str(run.get('error')))[:160]} | - | - | - | - |")
            continue
        d = run["dwell"]
        absorbed = run.get("burst_absorbed_seconds")
        taken = "-" if absorbed is None else f"{absorbed:.1f} s"
        rate = run.get("dead_letters_per_s")
        letters = f"{run.get('dead_letters', 0):,} ({num(rate, ',.0f')}/s)"
        for i, (key, label) in enumerate(
            (("fairstream", "fairstream"), ("fifo", "FIFO"), ("gps", "ideal (GPS)"))
        ):
            lines.append(
                f"| {n if i == 0 else ''} | {label} | {dwell_cells(d['burst_partition'][key])} | "
                f"{dwell_cells(d['other_partitions'][key])} | {taken if i == 0 else ''} | "
                f"{letters if i == 0 else ''} |"
            )
        lines.append(
            f"| | target (p99) | <= {OVERFLOW_OWN_P99:g} | <= {OVERFLOW_OTHER_P99:g} | | |"
        )
    lines.append("")
    lines.append(
        "- taken in: from the flood's first record until the scheduler had ingested or "
        "dead-lettered all of it; dead letters per second: from the flood's first record to "
        "the last dead letter counted."
    )
    return lines


# -- gaps (restart's, group's and feedback's tables are in their modules) ------------------


def gaps_table(results: dict[str, Any]) -> list[str]:
    """The "Gaps" line: a paused tenant interleaved with a busy one (``benchmarks/gaps.py``)."""
    g = get(results, "gaps") or {}
    if g.get("status") != "ok":
        return [f"**Gaps**: failed: {cell(str(g.get('error')))[:200]}"] if g else []
    return [
        f"**Gaps** (one partition, `slow` paused, (slow, fast, fast) x {g['repeats']:,}; "
        f"`benchmarks/gaps.py`): fast's {2 * g['repeats']:,} drained in "
        f"{g['busy_drain_s']:g} s ({g['busy_records_per_s']:,}/s); largest progress record "
        f"{g['largest_progress_bytes']:,} B (topic limit {g['progress_limit_bytes']:,} B); "
        f"kill -9 to ready {g['restart_to_ready_s']:.2f} s (target {g['restart_target_s']:g} "
        f"s); slow's {g['repeats']:,} drained {g['held_drain_s']:g} s after its resume.",
    ]
