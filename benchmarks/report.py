"""docs/benchmarks.md from one run's report (the JSON run_all prints and ``--report-json``
saves): the header, the targets, the results tables, the profile, the reading of the
missed targets, and the raw results.
"""

from __future__ import annotations

import json
from typing import Any

from benchmarks.common import get, num
from benchmarks.tables import result_tables
from benchmarks.targets import targets

QUICK_COMMAND = ".venv/bin/python -m benchmarks.run_all --quick     # modest sizes, about 4 minutes"


def markdown(report: dict[str, Any]) -> str:
    r = report["results"]
    m = report["machine"]
    lines = [
        "# Benchmarks",
        "",
        f"Latest run: {report['date']}, {report['mode']} size, total {report['seconds']:.0f} s.",
        "Written by `benchmarks/run_all.py` (`make bench`); every number below is from that "
        "one run, on one development broker on the same machine as the benchmark's clients "
        "and the scheduler.",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}, "
        f"confluent-kafka {m['confluent_kafka']} (librdkafka {m['librdkafka']}), Apache Kafka "
        f"{m['kafka_broker']} (development broker, one node); Quix Streams "
        f"{get(r, 'absorption', 'quix', 'version') or 'n/a'} for the peer; fairstream at "
        f"commit {m.get('fairstream_commit') or 'unknown'}"
        f"{' with uncommitted changes in fairstream/' if m.get('fairstream_dirty') else ''}."
        " The 2 cores are "
        "shared with the broker, the load generators and, when this ran, other engineers' "
        "tests: expect noise of 10-20%.",
        "",
        "Commands:",
        "",
        "```",
        "make bench    # core_decisions.py, service_throughput.py, then this run (run_all.py)",
        f"{report['command']}",
        QUICK_COMMAND,
        "```",
        "",
        "## Targets",
        "",
        "| target | measured | met | by |",
        "| --- | --- | --- | ---: |",
    ]
    for name, measured, met, by in targets(r):
        word = "met" if met else "missed"
        lines.append(f"| {name} | {measured} | {word} | {by} |")
    lines += ["", "## Results", ""]
    lines += result_tables(r)
    if report.get("profile"):
        lines += ["", "## Profile (a target was missed)", ""]
        lines += profile_notes(report["profile"])
    lines += ["", "## What holds the missed targets back", ""]
    lines += holding_back(r, report.get("profile") or {})
    lines += ["", "## Raw results", "", "```json", json.dumps(r, indent=2), "```", ""]
    return "\n".join(lines)


def holding_back(r: dict[str, Any], profile: dict[str, Any]) -> list[str]:
    """The reading of this run's numbers for the targets it missed (numbers filled in)."""
    missed = [name for name, _m, met, _by in targets(r) if met is False]
    if not missed:
        return ["Nothing: every target was met in this run."]

    def g(*path: str) -> Any:
        return get(r, *path)

    lines = [f"Missed: {'; '.join(missed)}.", ""]
    fs = g("max_throughput", "end_to_end_records_per_s")
    ceiling = g("ceiling", "records_per_s")
    sched_cores = g("max_throughput", "cores_used", "scheduler")
    pass_cores = g("ceiling", "cores_used", "passthrough")
    absorb = g("absorption", "fairstream", "records_per_s")
    quix = g("absorption", "quix", "records_per_s")
    if fs and ceiling and sched_cores and pass_cores:
        ours_us = sched_cores / fs * 1e6
        theirs_us = pass_cores / ceiling * 1e6
        lines.append(
            f"- **Throughput vs the ceiling.** The scheduler process is CPU-bound: it used "
            f"{sched_cores:.2f} cores while draining, {ours_us:.0f} µs of CPU per record, "
            f"against {theirs_us:.1f} µs for the passthrough loop ({ours_us / theirs_us:.0f}x). "
            "Per record the passthrough copies a record it already holds; fairstream parses "
            "it against the contract, indexes it in its tenant's queue, picks it with the DRR "
            "core, stamps four headers and produces it inside a transaction, and settles its "
            "offset; a transaction commits every 100 ms or 10,000 records. Two Python threads "
            "(ingest, emit) "
            "share one interpreter lock. "
            f"Absorption alone runs at {num(absorb)} records/s "
            f"({(absorb or 0) / ceiling:.2f}x the ceiling)."
        )
    tenants_ratio = g("scale", "cost_ratio_100k_vs_10")
    if tenants_ratio and tenants_ratio > 1.3:
        lines.append(
            f"- **Many tenants.** With 100,000 tenants of two records each the scheduler's "
            f"CPU per record is {tenants_ratio:.2f}x the 10-tenant one: a tenant's first "
            "record creates its queue and its place in the DRR ring, its last one removes "
            "them, and each batch and commit does per-tenant bookkeeping (admission room, "
            "counts, dwell samples) that 10 tenants share."
        )
    if profile.get("groups"):
        top = ", ".join(f"{k} {v:.0%}" for k, v in list(profile["groups"].items())[:5])
        lines.append(
            f"- **Where the scheduler's threads' time goes** (cProfile of every thread, "
            f"waits left out, above): {top}."
        )
    if absorb and quix and absorb < quix:
        lines.append(
            f"- **Absorption vs Quix Streams.** fairstream {absorb:,} vs {quix:,} records/s "
            "(Quix timed in-process from first to N-th record; fairstream from /metrics "
            "polled every 0.1 s, which errs low by at most 0.1 s). Quix's State.set only "
            "writes into an in-memory transaction; its RocksDB write batch and changelog "
            "records go out at the checkpoint (every 5 s), so its rate including the final "
            f"checkpoint is {num(g('absorption', 'quix', 'records_per_s_incl_final_checkpoint'))}"
            " records/s. fairstream validates each record against the contract as it "
            "comes and indexes it (offset, cost, time, deadline) with its payload held in "
            "memory up to --buffer-memory; the ingest topic itself is the durable buffer."
        )
    return lines


def profile_notes(profile: dict[str, Any]) -> list[str]:
    lines = [
        "The scheduler under cProfile on the max-throughput workload (the same pre-filled "
        f"topic, 1,000 tenants, no rate limit, until {profile.get('records', 0):,} records "
        "are on egress; the profile covers the whole process, start-up included; profiling "
        f"slows it to {num(profile.get('end_to_end_records_per_s'))} records/s). Every "
        "Python thread is profiled (emitter, ingest, web, readers of policies and feedback; "
        "librdkafka's own threads are C); time spent waiting (epoll, locks, sleeps, and "
        "librdkafka calls that take a timeout: consume, poll, commit, flush) is left out and "
        "the shares are of the rest. Top functions by own time:",
        "",
        "| function | calls | own s | share | cumulative s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in profile.get("top", []):
        lines.append(
            f"| `{row['function']}` | {row['calls']:,} | {row['tottime_s']} | "
            f"{num(row['tottime_share'], '.1%')} | {row['cumtime_s']} |"
        )
    groups = profile.get("groups") or {}
    if groups:
        lines += ["", "Own time by group:", "", "| group | share |", "| --- | ---: |"]
        lines += [f"| {name} | {share:.1%} |" for name, share in groups.items()]
    return lines
