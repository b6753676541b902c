"""The "Results" section of docs/benchmarks.md: one table (and its caption) per phase."""

from __future__ import annotations

from typing import Any

from benchmarks import (
    api_adaptive,
    api_view,
    burst,
    concurrency,
    feedback,
    group,
    noisy,
    restart,
    slow_api,
    throughput,
)
from benchmarks.common import VALUE_SIZE, cell, failed_row, get, num
from benchmarks.targets import (
    BURST_OTHER_P99,
    BURST_OWN_P99,
    BURST_OWN_P99_GOAL,
    OVERFLOW_OTHER_P99,
    OVERFLOW_OWN_P99,
    RESTART_EMPTY_DISK,
    RESTART_OWN_DISK_MEDIAN,
)


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
        "| tenants | records/s | µs/record | peak RSS MiB | cores: scheduler / broker |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in get(r, "scale", "rows") or []:
        lines.append(
            f"| {row['tenants']:,} | {num(row.get('end_to_end_records_per_s'))} | "
            f"{num(row.get('us_per_record'), '.1f')} | "
            f"{num((row.get('memory_mib') or {}).get('VmHWM'), ',.0f')} | "
            f"{_cores(row.get('cores_used'))} |"
        )
    return [
        *lines,
        "",
        "Per-record cost, 100,000 tenants vs 10: "
        f"{num(get(r, 'scale', 'cost_ratio_100k_vs_10'), '.2f')}x.",
        "",
    ]


# -- burst -----------------------------------------------------------------------------------


def _dwell(s: dict[str, Any] | None, key: str) -> str:
    if not s or s.get(key) is None:
        return "-"
    bound = ">= " if key in s.get("lower_bound", ()) else ""
    return f"{bound}{s[key]:,.{3 if s[key] < 1 else 2}f}"


def _three(s: dict[str, Any] | None) -> str:
    return " / ".join(_dwell(s, k) for k in ("p50_s", "p99_s", "max_s"))


def burst_table(results: dict[str, Any]) -> list[str]:
    """The "Burst" table."""
    b = get(results, "burst") or {}
    runs = b.get("runs") or []
    ok = [r for r in runs if r.get("status") == "ok"]
    first = ok[0] if ok else {}
    lines = [
        f"**Burst** (`--rate {get(b, 'rate') or burst.RATE:g}`, {burst.PARTITIONS} ingest "
        f"partitions; {burst.PARTITIONS * burst.QUIET_PER_PARTITION} quiet tenants at "
        f"{burst.QUIET_RATE:g} records/s each, {burst.QUIET_PER_PARTITION} per partition; then "
        f"one tenant writes N records of {VALUE_SIZE} B into partition {burst.BURST_PARTITION} "
        "at once; quiet records created from the burst's start until "
        f"{get(first, 'after_burst_seconds') or '-'} s after it; dwell = time a read_committed "
        "egress consumer received the record - its ingest CreateTime; FIFO and ideal (GPS) "
        "computed by `fairstream.analysis.reference` from the same arrivals at the same rate; "
        "`benchmarks/burst.py`):",
        "",
        "| burst | quiet dwell | burst's partition p50 / p99 / max s | other partitions "
        "p50 / p99 / max s |",
        "| --- | --- | ---: | ---: |",
    ]
    for run in runs:
        n = f"{run.get('records', 0):,}"
        if run.get("status") != "ok":
            lines.append(f"| {n} | failed: {cell(str(run.get('error')))[:160]} | - | - |")
            continue
        w = run["burst_write"]
        head = f"{n} written in {w['seconds_to_last_ack']:.2f} s"
        d = run["dwell"]
        for i, (key, label) in enumerate(
            (("fairstream", "fairstream"), ("fifo", "FIFO"), ("gps", "ideal (GPS)"))
        ):
            lines.append(
                f"| {head if i == 0 else ''} | {label} | {_three(d['burst_partition'][key])} | "
                f"{_three(d['other_partitions'][key])} |"
            )
        lines.append(
            f"| | target (p99) | <= {BURST_OWN_P99:g} (goal {BURST_OWN_P99_GOAL:g}) | "
            f"<= {BURST_OTHER_P99:g} |"
        )
    lines.append("")
    for run in ok:
        lines.append(_burst_note(run))
    groups = ("burst_partition", "other_partitions")
    if any("lower_bound" in (get(r, "dwell", g, "fairstream") or {}) for r in ok for g in groups):
        lines.append(
            '- ">=": quiet records still missing when the wait ended count with the dwell '
            "they had reached; the statistic is a lower bound."
        )
    return lines


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
                f"| {n if i == 0 else ''} | {label} | {_three(d['burst_partition'][key])} | "
                f"{_three(d['other_partitions'][key])} | {taken if i == 0 else ''} | "
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


def _burst_note(run: dict[str, Any]) -> str:
    d = run["dwell"]
    absorbed = run.get("burst_absorbed_seconds")
    return (
        f"- {run['records']:,}: {run['quiet_received']:,} of {run['quiet_sent']:,} quiet "
        f"records on egress after waiting {run['drain_wait_seconds']:g} s (at most "
        f"{run['drain_timeout_seconds']:g}) once the quiet tenants stopped; measured "
        f"{get(d, 'burst_partition', 'fairstream', 'n')} + "
        f"{get(d, 'other_partitions', 'fairstream', 'n')}; burst counted as ingested "
        + (f"{absorbed:,.1f} s after its first record" if absorbed is not None else "never")
        + " (ingest counter on /metrics); egress "
        f"{get(run, 'egress_records_per_s_after_burst') or '-'} records/s from 2 s after "
        f"the burst; {run['burst_write']['writers']} writer process(es)"
        + (
            "."
            if run["burst_write"]["under_1s"]
            else f", which took {run['burst_write']['seconds_to_last_ack']:.2f} s, over the "
            "1 s asked for: they share the 2 cores with the broker and the scheduler."
        )
    )


# -- restart, group, feedback ----------------------------------------------------------------


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


def restart_table(results: dict[str, Any]) -> list[str]:
    """The "Restarts" table."""
    own = get(results, "restart", "own_disk") or {}
    empty = get(results, "restart", "empty_disk") or {}
    out = get(results, "restart", "outage") or {}
    lines = [
        "**Restarts** (kill -9, then a new process with the same `--group-instance-id`, "
        f"static membership; {restart.PARTITIONS} ingest partitions; `benchmarks/restart.py`):",
        "",
        "| restart | measured | target |",
        "| --- | --- | --- |",
    ]
    if own.get("status") == "ok":
        lines.append(
            f"| own data dir, {own['restarts']} times, {own['backlog_records']:,} records "
            f"backlog at `--rate {own['rate']:g}` | to /readyz median "
            f"{num(own['to_ready_median_seconds'], '.2f')} s, max "
            f"{num(own['to_ready_max_seconds'], '.2f')} s; to first egress median "
            f"{num(own.get('to_first_egress_median_seconds'), '.2f')} s, max "
            f"{num(own.get('to_first_egress_max_seconds'), '.2f')} s"
            + (
                f"; {len(own['exited_before_ready'])} more exited before ready (raw results)"
                if own.get("exited_before_ready")
                else ""
            )
            + f" | median <= {RESTART_OWN_DISK_MEDIAN:g} s |"
        )
    elif own:
        lines.append(f"| own data dir | failed: {cell(str(own.get('error')))[:200]} | |")
    if empty.get("status") in ("ok", "timeout"):
        detail = empty["result"]
        if "buffered_before_kill" in empty:
            detail += (
                f" (to /readyz {num(empty.get('to_ready_seconds'), '.1f')} s; "
                f"{empty['buffered_before_kill']:,.0f} buffered before the kill, by a scheduler "
                f"that took {empty['fill_seconds']:g} s to absorb them)"
            )
        lines.append(
            f"| empty data dir, {empty['records']:,} records buffered, until /readyz and "
            f"`fairstream_backlog_records` are back | {detail} | <= {RESTART_EMPTY_DISK:g} s |"
        )
    elif empty:
        lines.append(f"| empty data dir | failed: {cell(str(empty.get('error')))[:200]} | |")
    if out.get("status") == "ok":
        lines.append(
            f"| broker stopped {out['outage_seconds']:g} s (SIGSTOP) while emitting at "
            f"`--rate {out['rate']:g}` | after it ended: to /readyz "
            f"{num(out.get('to_ready_seconds'), '.2f')} s, to egress again "
            f"{num(out.get('to_egress_seconds'), '.2f')} s | printed |"
        )
    elif out:
        lines.append(f"| broker outage | failed: {cell(str(out.get('error')))[:200]} | |")
    return lines


def group_table(results: dict[str, Any]) -> list[str]:
    """The "Across instances" table."""
    runs = get(results, "group", "runs") or {}
    rate, burst_ = group.RATE, group.BURST
    lines = [
        f"**Across instances** (two schedulers in one group, 4 ingest partitions, `--rate "
        f"{rate} --burst {burst_}`; A's backlog on instance 1 alone, then B, C, D arrive on "
        "instance 2; rates counted on a read_committed egress consumer by scheduling stamp; "
        "`benchmarks/group.py`):",
        "",
        "| `--share-by` | A alone | A / B / C / D after | Jain | group egress | most in 1 s | "
        "convergence after the change |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in group.MODES:
        run = runs.get(mode) or {}
        if run.get("status") != "ok":
            lines.append(failed_row(mode, run.get("error"), 7))
            continue
        four = run["four_rates"]
        conv = run["convergence_seconds"]
        lines.append(
            f"| {mode} | {run['alone_rate']}/s | "
            + " / ".join(f"{four.get(t, 0):g}" for t in "ABCD")
            + f" | {run['four_jain']:.3f} | {run['group_rate']:g}/s of {rate} | "
            f"{run['worst_1s']} (bound {rate + burst_}) | "
            + (f"{conv:.1f} s" if conv is not None else "never within 10%")
            + " |"
        )
    return lines


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
        f"{feedback.CAPACITY:g} calls/s, a token bucket holding 0.5 s of it, refusing with a "
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
    for name in feedback.RUNS if runs else ():
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
