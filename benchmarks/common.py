"""The helpers every benchmark shares: logging, the broker, deployments on topics of their
own, a scheduler's /metrics, Faust worker processes, consumers sharing partitions, writing
records, and reading nested results.

The scheduler processes, topics and readers themselves come from the harness the
integration tests use (``fairstream_dev.harness``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from fairstream.config import Topics
from fairstream.wire.partition import partition_of
from fairstream_dev.harness.kafka import unique
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess
from fairstream_dev.kafka import DevBroker

REPO = Path(__file__).resolve().parents[1]
INGESTED = "fairstream_ingested_records_total"
IN_LOG = "fairstream_backlog_in_log_records"  # read, passed over, waiting in the log
EGRESS = "fairstream_egress_records_total"
PROGRESS_MAX_BYTES = "fairstream_progress_record_max_bytes"
DEAD_LETTERS = "fairstream_dead_letters_total"  # labelled by reason
BACKLOG = "fairstream_backlog_records"
VALUE_SIZE = 100  # bytes per record value

Row = tuple[str, str, bool | None, str]  # a target: (target, measured, met, by how much)


def logger(name: str) -> Callable[[str], None]:
    """A ``log(message)`` writing ``[name HH:MM:SS] message`` to stderr."""

    def log(message: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    return log


log = logger("bench")


# -- reading results -------------------------------------------------------------------------


def get(node: Any, *path: str) -> Any:
    """``node[path[0]][path[1]]...``, or None where a key is missing."""
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def num(value: Any, fmt: str = ",.0f") -> str:
    """``value`` formatted, or "-" when there is none."""
    return "-" if value is None else format(value, fmt)


def cell(text: str) -> str:
    """``text`` fit for one Markdown table cell: printable, one line, no pipes."""
    # Terminal escapes (a spinner), raw or as repr() writes them, and repr()'s \n.
    text = re.sub(r"(\x1b|\\x1b)\[[0-9;?]*[A-Za-z]|\\x[0-9a-f]{2}|\\[nt]", " ", text)
    return " ".join("".join(c for c in text if c.isprintable() or c.isspace()).split()).replace(
        "|", "/"
    )


def failed_row(key: str, error: object, columns: int) -> str:
    """A markdown table row of ``columns`` cells for a run that failed: its key, then the
    error (its first 120 characters), then empty cells."""
    return f"| {key} | failed: {str(error)[:120]} |" + " |" * (columns - 2)


def print_targets(rows: list[Row]) -> None:
    """A phase's targets, for the phase scripts run on their own."""
    for name, measured, met, by in rows:
        print(
            f"{'met   ' if met else 'missed'}  {name}: {measured}" + (f" (by {by})" if by else "")
        )


@contextlib.contextmanager
def undoing() -> Iterator[list[Callable[[], None]]]:
    """A list of clean-up steps, run last to first when the block ends, each one whatever
    the others do."""
    undo: list[Callable[[], None]] = []
    try:
        yield undo
    finally:
        for step in reversed(undo):
            with contextlib.suppress(Exception):
                step()


# -- the broker ------------------------------------------------------------------------------


@dataclass
class Broker:
    """The broker a run uses: given, or the development broker (started here if needed)."""

    bootstrap: str
    pid: int | None = None  # the development broker's JVM, when it runs on this machine
    started: DevBroker | None = None  # ours to stop

    @classmethod
    def find(cls, bootstrap: str | None) -> Broker:
        if bootstrap:
            pid = None
            with contextlib.suppress(Exception):
                running = DevBroker().status()
                if running is not None and running.bootstrap == bootstrap:
                    pid = running.pid
            return cls(bootstrap, pid)
        broker = DevBroker()
        already = broker.status()
        state = already or broker.up()
        return cls(state.bootstrap, state.pid, None if already is not None else broker)

    def stop(self) -> None:
        if self.started is not None:
            self.started.down()


def standalone(
    bootstrap: str | None, run: Callable[[str, Path], dict[str, Any]], json_path: Path | None
) -> dict[str, Any]:
    """A benchmark run on its own (its ``main``): ``run(bootstrap, workdir)`` on the given
    broker (or the development broker, started and stopped here if it was not running), in
    a temporary directory; its result, also written to ``json_path`` when given."""
    import json
    import tempfile

    broker = Broker.find(bootstrap)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(broker.bootstrap, Path(tmp))
    finally:
        broker.stop()
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=1))
    return result


# -- deployments -----------------------------------------------------------------------------


def new_deployment(
    bootstrap: str, prefix: str, partitions: int, ingest: str | None = None
) -> Deployment:
    """Topics and an app id whose names all start with one unique base (see delete_all);
    ``ingest`` reuses a pre-filled ingest topic instead of a new one."""
    base = unique(prefix)
    topics = Topics(ingest or f"{base}.ingest", f"{base}.egress", f"{base}.dlq", f"{base}.policy")
    d = Deployment(bootstrap, partitions=partitions, topics=topics, app_id=f"{base}-app")
    for attempt in range(5):
        try:
            return d.create()
        except Exception as exc:  # the broker's metadata may lag right after creation
            if attempt == 4:
                raise
            log(f"creating topics: {exc}; retrying")
            time.sleep(1)
    raise AssertionError("unreachable")


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=15).topics)
    doomed = [n for n in names if n in existing]
    if not doomed:
        return
    for future in admin.delete_topics(doomed, operation_timeout=30).values():
        with contextlib.suppress(Exception):
            future.result(timeout=60)


def delete_all(d: Deployment) -> None:
    """Delete the deployment's topics and every internal topic the scheduler made (their
    names start with the app id, which starts with the topics' base); a reused ingest topic
    of another base stays."""
    base = d.topics.egress.rsplit(".", 1)[0]
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    delete_topics(
        d.bootstrap, [t for t in admin.list_topics(timeout=15).topics if t.startswith(base)]
    )


# -- schedulers ------------------------------------------------------------------------------


def metrics(scheduler: SchedulerProcess) -> dict[str, float]:
    """The unlabelled samples of the scheduler's /metrics (empty when unreadable)."""
    status, body = scheduler.get("/metrics")
    out: dict[str, float] = {}
    if status != 200:
        return out
    for line in body.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def stop(scheduler: SchedulerProcess) -> None:
    """SIGTERM, and wait for the exit (terminate() kills one that ignores it)."""
    if scheduler.proc is None:
        return
    try:
        scheduler.terminate(timeout=60)
    except AssertionError as exc:  # ignored SIGTERM: terminate() killed it
        print(str(exc)[:2000], file=sys.stderr)


def start_scheduler(
    d: Deployment, workdir: Path, name: str, args: list[str], cleanup: list[Callable[[], None]]
) -> SchedulerProcess:
    """A scheduler for run_all's phases, stopped by ``cleanup``."""
    # Phases share one pre-filled ingest topic (each with an app id of its own): no phase
    # may trim it for the next ones, as a deployment with other readers would run.
    scheduler = SchedulerProcess(
        d, workdir, *args, "--no-trim", "--log-level", "warning", name=name
    )
    scheduler.start()
    cleanup.append(lambda: stop(scheduler))
    return scheduler


def kill(scheduler: SchedulerProcess) -> None:
    """kill -9 (a benchmark's scheduler has nothing left to finish) and drop its state."""
    if scheduler.alive():
        scheduler.kill()
    shutil.rmtree(scheduler.data_dir, ignore_errors=True)


def faust_worker(
    app: str, env: Mapping[str, str], log_path: Path, *options: str
) -> subprocess.Popen[bytes]:
    """``faust -A APP worker -l warn OPTIONS`` from the repository, with ``env`` over this
    process's environment, its output appended to ``log_path``. Stop it with
    ``stop_process``; ``exited`` tells whether it died."""
    return subprocess.Popen(
        [sys.executable, "-m", "faust", "-A", app, "worker", "-l", "warn", *options],
        cwd=REPO,
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )


def exited(proc: subprocess.Popen[bytes], log_path: Path, what: str) -> None:
    """Raise, with the last lines of its log, if ``what`` (``proc``) has exited."""
    if proc.poll() is not None:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{what} exited {proc.returncode}:\n{tail}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and wait up to a minute for the exit; then kill."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def partitions_shared(owned: Sequence[int], partitions: int) -> bool:
    """Whether consumers of one group, owning ``owned`` partitions each (one entry per
    consumer), hold all ``partitions`` between them, each some while there are enough to go
    round. The first to join owns them all until the others' join moves some: a rebalance
    that a measurement must not hold."""
    owners = sum(1 for n in owned if n > 0)
    return sum(owned) == partitions and owners == min(len(owned), partitions)


@functools.cache
def scheduler_help() -> str:
    """``fairstream scheduler --help``, to pass options only where this version has them."""
    with contextlib.suppress(Exception):
        return subprocess.run(
            [sys.executable, "-m", "fairstream", "scheduler", "--help"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    return ""


def backlog_option(records: int) -> list[str]:
    """``--max-backlog`` above ``records`` when the scheduler has a per-tenant cap (the
    current one dead-letters a tenant's records beyond 100,000 by default)."""
    return ["--max-backlog", str(records + 10_000)] if "--max-backlog" in scheduler_help() else []


# -- writing records -------------------------------------------------------------------------


# Header sets a benchmark's records may carry, by name (``--headers`` of benchmarks.compare),
# cycled over the records. "cost-trace" is what a cost-weighted producer writes: a
# ``fairstream-cost`` header (1 to 4) and a header of its own (a W3C trace context). The
# others take it apart: "trace" a header of its own alone, "cost1-trace" both headers with
# every cost 1 (records with headers, tenants that drain alike), "cost" the cost header alone
# (tenants that drain at four speeds).
TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
Headers = list[tuple[str, bytes]]
HEADER_SETS: dict[str, list[Headers]] = {
    "cost-trace": [
        [("fairstream-cost", b"%d" % c), ("traceparent", TRACEPARENT)] for c in (1, 2, 3, 4)
    ],
    "trace": [[("traceparent", TRACEPARENT)]],
    "cost1-trace": [[("fairstream-cost", b"1"), ("traceparent", TRACEPARENT)]],
    "cost": [[("fairstream-cost", b"%d" % c)] for c in (1, 2, 3, 4)],
}
COST_TRACE = "cost-trace"


def _write(
    producer: Producer,
    topic: str,
    records: int,
    tenants: int,
    value: bytes,
    headers: str | None = None,
) -> float:
    keys = [f"tenant-{i:05d}".encode() for i in range(tenants)]
    sets = HEADER_SETS[headers] if headers else [None]
    started = time.monotonic()
    for i in range(records):
        own = sets[i % len(sets)]
        while True:
            try:
                producer.produce(topic, key=keys[i % tenants], value=value, headers=own)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    return started


def produce(
    bootstrap: str, topic: str, records: int, tenants: int, size: int, headers: str | None = None
) -> float:
    """Write ``records`` zero-filled records round-robin over ``tenants`` keys (murmur2, as
    the README tells producers to), with the header set ``headers`` names (``HEADER_SETS``;
    None: no headers); seconds it took."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random",
        }
    )
    started = _write(producer, topic, records, tenants, bytes(size), headers)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records not acknowledged by the broker")
    return time.monotonic() - started


def prefill(
    bootstrap: str, topic: str, records: int, tenants: int, headers: str | None = None
) -> dict[str, Any]:
    """``produce`` for run_all's phases, logged; what was written."""
    seconds = produce(bootstrap, topic, records, tenants, VALUE_SIZE, headers)
    with_headers = f", with headers {headers}" if headers else ""
    log(
        f"pre-filled {topic}: {records:,} records, {tenants:,} tenants{with_headers} "
        f"in {seconds:.1f} s"
    )
    return {"records": records, "tenants": tenants, "producer_seconds": round(seconds, 2)}


def fill(
    bootstrap: str, topic: str, records: int, tenants: int, headers: str | None = None
) -> float:
    """``produce`` in larger lz4 batches (the burst and restart backlogs, up to 1,000,000
    records), with the header set ``headers`` names (``HEADER_SETS``; None: no headers);
    seconds until all are acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "compression.type": "lz4",
            "partitioner": "murmur2_random",
        }
    )
    started = _write(producer, topic, records, tenants, b"f:".ljust(VALUE_SIZE, b"x"), headers)
    unsent = producer.flush(300)
    if unsent:
        raise RuntimeError(f"{unsent} records not acknowledged by the broker")
    return time.monotonic() - started


def keys_for(prefix: str, partition: int, count: int, partitions: int) -> list[str]:
    """The first ``count`` keys ``<prefix>-<n>`` that murmur2 puts on ``partition``."""
    out: list[str] = []
    n = 0
    while len(out) < count:
        key = f"{prefix}-{n}"
        if partition_of(key, partitions) == partition:
            out.append(key)
        n += 1
    return out
