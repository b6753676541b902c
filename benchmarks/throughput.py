"""run_all's throughput phases, on one pre-filled topic (N records of 100 B, 1,000 tenants,
12 partitions) that the phases share without trimming it:

- ``ceiling``: a plain confluent-kafka consume-then-produce loop (no fairness, no state)
  copies it to another topic of the same broker: records/s from the first record read to
  the last one acknowledged. The practical limit of one Python process on this machine.
- ``max_throughput``: ``fairstream scheduler`` with no rate limit: records/s from the first
  record ingested (last /metrics poll before the ingest counter moves) to the N-th egress
  acknowledgement; its ratio to the ceiling. Three rounds, each against a ceiling run just
  before it (the first against ``ceiling``'s): the round with the median ratio is reported.
- ``absorption``: records/s from ingest to buffered (``--rate 1``) for fairstream, and for
  the same per-tenant buffering written with Quix Streams (``benchmarks/quix_peer.py``, in
  its own virtualenv).
- ``scale``: N records spread over 10, 1,000 and 100,000 tenants (topics of their own), no
  rate limit: records/s, µs/record, peak RSS, and the 100,000-tenant per-record cost over
  the 10-tenant one. The 1,000-tenant row is ``max_throughput``'s.
- the profile: ``max_throughput``'s workload under cProfile (run_all runs it when a target
  was missed).
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from benchmarks import sampling
from benchmarks.common import (
    EGRESS,
    IN_LOG,
    INGESTED,
    PROGRESS_MAX_BYTES,
    REPO,
    delete_all,
    delete_topics,
    log,
    new_deployment,
    prefill,
    start_scheduler,
    stop,
)
from benchmarks.profiling import ProfiledScheduler, profile_groups, profile_summary
from benchmarks.sampling import cores_used, cpu_seconds, cpu_share, first_moved, wait_for
from fairstream_dev.harness.kafka import create_topics, unique

PARTITIONS = 12
QUIX_PYTHON = REPO / ".venv" / "peer-quix" / "bin" / "python"

Cleanup = list[Callable[[], None]]


def shared_topic(bootstrap: str, records: int, headers: str | None = None) -> list[str]:
    """The pre-filled 1,000-tenant topic and the ceiling's copy of it: [source, copy].
    ``headers``: the header set the records carry (``common.HEADER_SETS``; None: none)."""
    source = f"{unique('bench')}.source"
    topics = [source, source + ".copy"]
    create_topics(bootstrap, topics, PARTITIONS)
    prefill(bootstrap, source, records, 1000, headers)
    return topics


# -- ceiling ---------------------------------------------------------------------------------


def ceiling(bootstrap: str, topics: list[str], records: int, timeout: float) -> dict[str, Any]:
    seconds, cores = passthrough(bootstrap, topics[0], topics[1], records, timeout)
    return {
        "cores_used": cores,
        "status": "ok",
        "records": records,
        "records_per_s": round(records / seconds),
        "us_per_record": round(seconds / records * 1e6, 1),
        "seconds": round(seconds, 2),
    }


def passthrough(
    bootstrap: str, source: str, sink: str, records: int, timeout: float
) -> tuple[float, dict[str, float | None]]:
    """Copy ``records`` records from ``source`` to ``sink``; seconds from first read to last
    acknowledgement. The producer is configured like fairstream's writer."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("bench-passthrough"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    acked = [0]

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            acked[0] += 1

    broker = sampling.broker_pid
    deadline = time.monotonic() + timeout
    consumer.subscribe([source])
    started: float | None = None
    cpu_at_start: tuple[float, float | None] = (0.0, None)
    read = 0
    try:
        while read < records and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None:
                    continue
                if started is None:
                    started = time.monotonic()
                    cpu_at_start = (time.process_time(), cpu_seconds(broker))
                while True:
                    try:
                        producer.produce(
                            sink,
                            key=msg.key(),
                            value=msg.value(),
                            headers=msg.headers(),
                            partition=msg.partition() or 0,
                            on_delivery=delivered,
                        )
                        break
                    except BufferError:
                        producer.poll(0.01)
                read += 1
            producer.poll(0)
        producer.flush(max(1.0, deadline - time.monotonic()))
    finally:
        consumer.close()
    if started is None or acked[0] < records:
        raise TimeoutError(f"passthrough: {acked[0]} of {records} acknowledged")
    seconds = time.monotonic() - started
    cores = {
        "passthrough": cpu_share(1, cpu_at_start[0], time.process_time(), seconds),
        "broker": cpu_share(broker, cpu_at_start[1], cpu_seconds(broker), seconds),
    }
    return seconds, cores


# -- max_throughput, scale, profile: fairstream drains a pre-filled topic ---------------------


def drain(
    bootstrap: str,
    workdir: Path,
    ingest: str,
    records: int,
    name: str,
    timeout: float,
    cleanup: Cleanup,
    profile: Path | None = None,
) -> dict[str, Any]:
    """A scheduler with no rate limit on a pre-filled ingest topic, until N are on egress."""
    d = new_deployment(bootstrap, "bench", PARTITIONS, ingest)
    cleanup.append(functools.partial(delete_all, d))
    if profile is None:
        scheduler = start_scheduler(d, workdir, name, [], cleanup)
    else:
        scheduler = ProfiledScheduler(d, workdir, "--log-level", "warning", name=name)
        scheduler.profile = profile
        scheduler.start()
        cleanup.append(lambda: stop(scheduler))
    launched = time.monotonic()
    deadline = launched + timeout
    samples = wait_for(scheduler, lambda m: m.get(EGRESS, 0) >= records, deadline)
    memory = sampling.scheduler_memory(scheduler)
    start = first_moved(samples, INGESTED)
    first = samples[start][0]
    seconds = samples[-1][0] - first
    # The scheduler process's CPU (every thread) over the same samples.
    cpu = [m.get("_cpu_scheduler") for _, m in (samples[start], samples[-1])]
    if profile is not None:
        stop(scheduler)
    return {
        "status": "ok",
        "records": records,
        "end_to_end_records_per_s": round(records / seconds),
        "us_per_record": round(seconds / records * 1e6, 1),
        "cpu_us_per_record": (
            round((cpu[1] - cpu[0]) / records * 1e6, 1)
            if cpu[0] is not None and cpu[1] is not None
            else None
        ),
        "seconds": round(seconds, 2),
        "start_to_first_ingest_seconds": round(first - launched, 2),
        "memory_mib": memory,
        "cores_used": cores_used(samples, start),
        # The settled ranges above the partitions' marks, as the last commit wrote them:
        # they multiply when tenants drain at different speeds (costs, weights).
        "progress_record_max_bytes": samples[-1][1].get(PROGRESS_MAX_BYTES, 0.0),
    }


def drain_alone(
    bootstrap: str, workdir: Path, ingest: str, records: int, name: str, timeout: float
) -> dict[str, Any]:
    """``drain``, then its scheduler stopped and its deployment's topics deleted, before the
    next run starts. A drained scheduler left running until the phase's end kept polling,
    auditing and answering beside the runs after it: each run of a phase shared the 2 cores
    with every one before it, and the last runs measured that."""
    undo: Cleanup = []
    try:
        return drain(bootstrap, workdir, ingest, records, name, timeout, undo)
    finally:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()


def max_throughput(
    bootstrap: str,
    workdir: Path,
    topics: list[str],
    records: int,
    timeout: float,
    ceiling_rate: float | None,
    rounds: int = 3,
) -> dict[str, Any]:
    """``rounds`` drains, each after a ceiling run of its own: the machine's speed drifts
    (a shared host), so each drain is compared with the loop run just before it. The
    result is the median drain (its row), with the median of the per-round ratios."""
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        loop = ceiling_rate if i == 0 and ceiling_rate else None
        if loop is None:
            loop = ceiling(bootstrap, topics, records, timeout)["records_per_s"]
        out = drain_alone(bootstrap, workdir, topics[0], records, f"max{i}", timeout)
        out["ceiling_records_per_s"] = loop
        out["ratio_to_ceiling"] = round(out["end_to_end_records_per_s"] / loop, 3)
        runs.append(out)
        log(f"max_throughput round {i + 1}: {out['ratio_to_ceiling']}x of {loop:,}/s")
    ranked = sorted(runs, key=lambda run: run["ratio_to_ceiling"])
    median = dict(ranked[len(ranked) // 2])
    keys = ("end_to_end_records_per_s", "ceiling_records_per_s", "ratio_to_ceiling")
    median["rounds"] = [{k: run[k] for k in keys} for run in runs]
    return median


def compared_round(
    bootstrap: str, workdir: Path, topics: list[str], records: int, timeout: float
) -> dict[str, Any]:
    """One loop run over ``topics`` and one drain of them (``max_throughput``, one round),
    as ``benchmarks.compare`` and ``benchmarks.headers`` line their rounds up: records/s,
    the ratio to the loop, µs of scheduler CPU a record, the largest progress record."""
    out = max_throughput(bootstrap, workdir, topics, records, timeout, None, rounds=1)
    rate = out["end_to_end_records_per_s"]
    cores = out["cores_used"].get("scheduler") or 0.0
    return {
        "records_per_s": rate,
        "ceiling_records_per_s": out["ceiling_records_per_s"],
        "ratio": out["ratio_to_ceiling"],
        "cpu_us": cores / rate * 1e6,
        "progress_bytes": out["progress_record_max_bytes"],
    }


def spread(result: dict[str, Any] | None) -> str:
    """The ratios of ``max_throughput``'s rounds, as they ran: "0.35x, 0.31x, 0.28x"."""
    rounds = (result or {}).get("rounds") or []
    return ", ".join(f"{run['ratio_to_ceiling']:.2f}x" for run in rounds)


def scale(
    bootstrap: str,
    workdir: Path,
    records: int,
    timeout: float,
    reuse: dict[str, Any] | None,
    rounds: int = 5,
) -> dict[str, Any]:
    """N records over 10, 1,000 and 100,000 tenants; the 10 and 100,000 runs alternate for
    ``rounds`` rounds (the machine's speed drifts), and the result is the median of the
    rounds' ratios of scheduler CPU per record. Five rounds: on 2 shared cores one round's
    ratio ranged from 0.65x to 1.85x within minutes, and a median of three moved with it.
    ``reuse``: max_throughput's result, the 1,000-tenant row when it is ok (else it runs
    once)."""
    rows = []
    ratios: list[float] = []

    def run(tenants: int) -> dict[str, Any]:
        # A data directory of its own per run.
        return scale_run(
            bootstrap, workdir, records, tenants, f"scale{tenants}-{len(rows)}", timeout
        )

    if reuse and reuse.get("status") == "ok":
        rows.append({"tenants": 1000, **reuse, "note": "max_throughput"})
    else:
        rows.append(run(1000))
    for _ in range(rounds):
        few, many = run(10), run(100_000)
        rows += [few, many]
        if few.get("cpu_us_per_record") and many.get("cpu_us_per_record"):
            ratios.append(many["cpu_us_per_record"] / few["cpu_us_per_record"])
    return {
        "status": "ok",
        "records": records,
        "rows": rows,
        "cost_ratios_100k_vs_10": [round(r, 2) for r in ratios],
        "cost_ratio_100k_vs_10": round(statistics.median(ratios), 2) if ratios else None,
    }


def scale_run(
    bootstrap: str, workdir: Path, records: int, tenants: int, name: str, timeout: float
) -> dict[str, Any]:
    """One of ``scale``'s runs: N records over ``tenants`` on a topic of their own, drained
    by a scheduler of its own (data directory ``name``), the topic deleted after."""
    topic = f"{unique('bench')}.scale{tenants}"
    try:
        create_topics(bootstrap, [topic], PARTITIONS)
        prefill(bootstrap, topic, records, tenants)
        row = drain_alone(bootstrap, workdir, topic, records, name, timeout)
    finally:
        delete_topics(bootstrap, [topic])  # before the next run, not at the phase's end
    log(f"scale {tenants}: {row}")
    return {"tenants": tenants, **row}


def profiled(
    bootstrap: str, workdir: Path, topics: list[str], records: int, timeout: float, cleanup: Cleanup
) -> dict[str, Any]:
    """max_throughput's workload (at most 100,000 records) under cProfile."""
    path = workdir / "scheduler.prof"
    n = min(records, 100_000)
    out = drain(bootstrap, workdir, topics[0], n, "profiled", timeout, cleanup, path)
    return {**out, "top": profile_summary(path), "groups": profile_groups(path)}


# -- absorption ------------------------------------------------------------------------------


def absorption(
    bootstrap: str,
    workdir: Path,
    topics: list[str],
    records: int,
    timeout: float,
    cleanup: Cleanup,
) -> dict[str, Any]:
    return {
        "records": records,
        "fairstream": absorption_fairstream(
            bootstrap, workdir, topics[0], records, timeout, cleanup
        ),
        "quix": absorption_quix(bootstrap, workdir, topics[0], records, timeout),
    }


def absorption_fairstream(
    bootstrap: str, workdir: Path, ingest: str, records: int, timeout: float, cleanup: Cleanup
) -> dict[str, Any]:
    d = new_deployment(bootstrap, "bench", PARTITIONS, ingest)
    cleanup.append(functools.partial(delete_all, d))
    scheduler = start_scheduler(d, workdir, "absorb", ["--rate", "1"], cleanup)
    launched = time.monotonic()
    # Taken in: indexed, or passed over to wait in the log (a tenant far behind at --rate 1,
    # past --index-ahead: more than 20,000 records of one tenant).
    samples = wait_for(
        scheduler, lambda m: m.get(INGESTED, 0) + m.get(IN_LOG, 0) >= records, launched + timeout
    )
    start = first_moved(samples, INGESTED)
    seconds = samples[-1][0] - samples[start][0]
    return {
        "status": "ok",
        "records_per_s": round(records / seconds),
        "seconds": round(seconds, 2),
        "cores_used": cores_used(samples, start),
        "memory_mib": sampling.scheduler_memory(scheduler),
    }


def absorption_quix(
    bootstrap: str, workdir: Path, ingest: str, records: int, timeout: float
) -> dict[str, Any]:
    if not QUIX_PYTHON.exists():
        return {"status": "skipped", "why": f"{QUIX_PYTHON} missing: run `make bench`"}
    group = unique("bench-quix")
    state = workdir / "quix-state"
    try:
        done = subprocess.run(
            [
                str(QUIX_PYTHON),
                str(REPO / "benchmarks" / "quix_peer.py"),
                "--bootstrap",
                bootstrap,
                "--topic",
                ingest,
                "--records",
                str(records),
                "--group",
                group,
                "--state-dir",
                str(state),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        delete_topics(bootstrap, [t for t in admin.list_topics(timeout=15).topics if group in t])
        shutil.rmtree(state, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"quix peer exited {done.returncode}: {done.stderr[-1500:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "status": "ok",
        "version": quix_version(),
        "records_per_s": round(records / out["processed_seconds"]),
        "records_per_s_incl_final_checkpoint": round(records / out["committed_seconds"]),
        **out,
    }


def quix_version() -> str | None:
    with contextlib.suppress(Exception):
        return subprocess.run(
            [str(QUIX_PYTHON), "-c", "import quixstreams; print(quixstreams.__version__)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
    return None
