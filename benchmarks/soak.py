"""``make soak``: one chaos run of the whole system on a real broker (issue 13).

Everything runs for real, on a development broker of the soak's own (``DevBroker`` with a
state directory under the work directory: never the shared one, since the soak restarts it):

- producers: a ``fairstream.Producer`` (the SDK) and a plain confluent-kafka producer
  (idempotent, murmur2_random), each on a thread, at a steady rate, each with tenants of
  its own (one noisy tenant takes 40% of its records) and a sequence number per tenant in
  the value (``b"sdk-03|123"``). 1% of the records carry a deadline already passed: the
  scheduler must dead-letter them as ``expired``;
- two ``fairstream scheduler`` processes with ``--group-instance-id`` and ``--rate`` (for the
  group), and later a third one without a group instance id (added, then removed);
- two ``fairstream worker`` processes calling a simulated paid API (``soak_api.py``: a short
  random latency, 1% transient failures that the worker retries), which appends a line per
  request served to a file of its own.

Meanwhile, at random times drawn from ``--seed``: kill -9 and SIGTERM of a scheduler or a
worker (started again 1 to 5 s later, as an orchestrator would), one broker restart on the
same port (``down``, then ``up``), and the rebalance (the third scheduler joins, later
leaves). A process that exits on its own is started again too, and reported.

Then the producers stop, the soak waits until everything acknowledged came out, stops the
processes, and reads egress and dead letters (read_committed, as workers do) up to end
markers written after the schedulers stopped. It prints:

- records acknowledged to producers; handled by workers; dead-lettered (by reason);
- lost: acknowledged but neither on egress nor dead-lettered (before egress), or on egress
  but never served by the API (after egress); must be 0;
- per-tenant order violations on egress and in what the API served (first servings);
  must be 0;
- duplicates by where they happened: the scheduler (a record twice on egress, or both on
  egress and dead-lettered; must be 0 for read_committed readers), and worker re-delivery
  (a request served twice, after a worker was killed or lost its partitions).

Exit status 1 when anything lost, out of order or duplicated by the scheduler.

    .venv/bin/python benchmarks/soak.py [--duration 360] [--seed 1] [--rate 150]
        [--scheduler-rate 300] [--markdown docs/soak.md] [--workdir DIR] [--keep]

``--duration`` is the chaos phase; with the set-up, the drain and the stops a run takes
about ``duration + 2 min``. tests/integration/test_soak.py runs a short one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the harness lives in tests/integration

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition  # noqa: E402

import fairstream  # noqa: E402
from fairstream import contract  # noqa: E402
from fairstream_dev.harness.kafka import unique  # noqa: E402
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess  # noqa: E402
from fairstream_dev.kafka import DevBroker  # noqa: E402

PARTITIONS = 8
TENANTS_PER_PRODUCER = 20
NOISY_SHARE = 0.4  # of a producer's records, for its first tenant
EXPIRED_SHARE = 0.01  # records sent with a deadline already passed
WORKER_CONCURRENCY = 4
END = b"__end-of-soak__"  # key of the markers written after the schedulers stopped
STATIC = ("sched-0", "sched-1")  # the two schedulers with static membership
EXTRA = "sched-2"  # the third one, for the rebalance (dynamic membership)
WORKERS = ("worker-0", "worker-1")

Record = tuple[str, int]  # (tenant, sequence number)


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def parse_value(value: bytes | None) -> Record | None:
    """``b"sdk-03|123"`` -> ("sdk-03", 123); None for anything else."""
    if not value:
        return None
    tenant, sep, seq = value.partition(b"|")
    if not sep or not seq.isdigit():
        return None
    return tenant.decode(), int(seq)


# -- producers ---------------------------------------------------------------------------------


class Ledger:
    """What the producers were told: acknowledged records, and those sent already expired."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[Record] = set()
        self.failed: list[str] = []
        self.expired: set[Record] = set()  # sent with a passed deadline
        self.by_kind: Counter[str] = Counter()

    def delivered(self, kind: str, err: KafkaError | None, msg: Message) -> None:
        record = parse_value(msg.value())
        with self.lock:
            if err is not None:
                self.failed.append(f"{kind} {record}: {err}")
            elif record is not None:
                self.acked.add(record)
                self.by_kind[kind] += 1


class PacedProducer:
    """Writes ``rate`` records/s for its tenants on a thread of its own until stopped."""

    def __init__(self, kind: str, rate: float, seed: int, ledger: Ledger) -> None:
        self.kind = kind
        self.rate = rate
        self.rng = random.Random(f"{seed}-{kind}")
        self.ledger = ledger
        self.tenants = [f"{kind}-{i:02d}" for i in range(TENANTS_PER_PRODUCER)]
        self.sent: Counter[str] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{kind}", daemon=True)

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(300)

    def _pick(self) -> str:
        if self.rng.random() < NOISY_SHARE:
            return self.tenants[0]
        return self.rng.choice(self.tenants[1:])

    def _run(self) -> None:
        try:
            self._produce_until_stopped()
        except Exception as exc:  # reported: a producer that dies makes the run fail
            self.errors.append(repr(exc))
            log(f"producer {self.kind} failed: {exc!r}")

    def _produce_until_stopped(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            tenant = self._pick()
            seq = self.sent[tenant]
            self.sent[tenant] += 1
            expired = self.rng.random() < EXPIRED_SHARE
            if expired:
                with self.ledger.lock:
                    self.ledger.expired.add((tenant, seq))
            self.send(tenant, seq, expired)
            next_at += interval
            # Pacing the load, not waiting for the system under test.
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        self.flush()

    def send(self, tenant: str, seq: int, expired: bool) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError


class SdkProducer(PacedProducer):
    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int, ledger: Ledger):
        super().__init__("sdk", rate, seed, ledger)
        self.producer = fairstream.Producer(
            bootstrap,
            topic,
            on_delivery=lambda err, msg: ledger.delivered("sdk", err, msg),
            log_level=3,
        )

    def send(self, tenant: str, seq: int, expired: bool) -> None:
        deadline = int(time.time() * 1000) - 1000 if expired else None
        self.producer.submit(
            tenant,
            b"%s|%d" % (tenant.encode(), seq),
            request_id=f"{tenant}-{seq}",
            deadline=deadline,
        )

    def flush(self) -> None:
        try:
            self.producer.flush(120)
        except fairstream.DeliveryError as exc:
            self.errors.append(str(exc))


class PlainProducer(PacedProducer):
    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int, ledger: Ledger):
        super().__init__("plain", rate, seed, ledger)
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                "log_level": 3,
            }
        )

    def send(self, tenant: str, seq: int, expired: bool) -> None:
        headers: list[tuple[str, str | bytes | None]] = []
        if expired:
            headers.append((contract.DEADLINE_MS, b"%d" % (int(time.time() * 1000) - 1000)))
        self.producer.produce(
            self.topic,
            b"%s|%d" % (tenant.encode(), seq),
            tenant.encode(),
            headers=headers,
            on_delivery=lambda err, msg: self.ledger.delivered("plain", err, msg),
        )
        self.producer.poll(0)

    def flush(self) -> None:
        left = self.producer.flush(120)
        if left:
            self.errors.append(f"{left} records still unacknowledged after 120 s")


# -- readers -----------------------------------------------------------------------------------


class TopicLog:
    """Everything a read_committed consumer sees of a topic, on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("soak-reader"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "log_level": 3,
            }
        )
        self.consumer.subscribe([topic])
        self.lock = threading.Lock()
        # (partition, record or None, fairstream-dlq-reason or None) in the order read
        self.entries: list[tuple[int, Record | None, str | None]] = []
        self.ends: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"read-{topic}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.consume(num_messages=1000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF and not err.retriable():
                        self.errors.append(err.str())
                    continue
                partition = msg.partition() or 0
                if msg.key() == END:
                    self.ends.add(partition)
                    continue
                reason = None
                headers = cast("list[tuple[str, bytes | None]]", msg.headers() or [])
                for name, raw in headers:
                    if name == contract.DLQ_REASON and raw is not None:
                        reason = raw.decode()
                with self.lock:
                    self.entries.append((partition, parse_value(msg.value()), reason))
        self.consumer.close()

    def records(self) -> list[tuple[int, Record | None, str | None]]:
        with self.lock:
            return list(self.entries)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)


class HandledLog:
    """The lines the simulated API wrote (``soak_api.py``), read as the files grow."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._positions: dict[Path, int] = {}
        # (time ns, record) per request served, in no particular order
        self.served: list[tuple[int, Record]] = []

    def poll(self) -> None:
        for path in sorted(self.directory.glob("*.tsv")):
            start = self._positions.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # whole lines only
            for line in chunk[:end].splitlines():
                fields = line.split(b"\t")
                record = parse_value(fields[1]) if len(fields) == 4 else None
                if record is not None:
                    self.served.append((int(fields[0]), record))
            self._positions[path] = start + end

    def distinct(self) -> set[Record]:
        return {record for _, record in self.served}


# -- processes ---------------------------------------------------------------------------------


class WorkerProcess:
    """``fairstream worker --handler soak_api:handle``, a new served-requests file per start."""

    def __init__(self, name: str, setup: Setup, incarnation: int) -> None:
        self.name = name
        self.setup = setup
        self.log_path = setup.workdir / f"{name}.log"
        self.handled = setup.handled_dir / f"{name}.{incarnation}.tsv"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        d = self.setup.deployment
        command = [
            sys.executable, "-m", "fairstream", "worker",
            "--handler", "soak_api:handle",
            "--bootstrap", d.bootstrap,
            "--egress-topic", d.topics.egress,
            "--dlq-topic", d.topics.dlq,
            "--group-id", self.setup.worker_group,
            "--concurrency", str(WORKER_CONCURRENCY),
            "--backoff-initial", "0.05",
            "--backoff-max", "1",
            "--no-feedback",
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "FAIRSTREAM_SOAK_HANDLED": str(self.handled),
            "FAIRSTREAM_SOAK_SEED": str(self.setup.seed),
        }
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                command, cwd=REPO / "benchmarks", stdout=out, stderr=subprocess.STDOUT, env=env
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


Process = SchedulerProcess | WorkerProcess


def worker_factory(name: str, setup: Setup) -> Callable[[int], Process]:
    def make(incarnation: int) -> Process:
        return WorkerProcess(name, setup, incarnation)

    return make


@dataclass
class Setup:
    deployment: Deployment
    workdir: Path
    handled_dir: Path
    worker_group: str
    seed: int
    scheduler_rate: float


@dataclass
class Slot:
    """One supervised process: what runs now, and what happened to it."""

    name: str
    make: Callable[[int], Process]
    wanted: bool = True  # an orchestrator keeps it running
    process: Process | None = None
    starts: int = 0
    restart_at: float | None = None  # monotonic time; None: not waiting to start
    sent: str | None = None  # the signal the soak sent to what runs now
    exits: list[str] = field(default_factory=list)  # unexpected ones

    def start(self) -> None:
        self.process = self.make(self.starts).start()
        self.starts += 1
        self.sent = None
        self.restart_at = None

    def signal(self, sig: signal.Signals) -> bool:
        proc = self.process.proc if self.process is not None else None
        if proc is None or proc.poll() is not None:
            return False
        self.sent = sig.name
        proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait()
        return True

    def check(self, now: float, delay: Callable[[], float]) -> None:
        """Note an exit; start again when it is due."""
        proc = self.process.proc if self.process is not None else None
        if proc is not None and proc.poll() is not None:
            code = proc.returncode
            expected = (self.sent == "SIGKILL" and code == -signal.SIGKILL) or (
                self.sent == "SIGTERM" and code == 0
            )
            if not expected:
                assert self.process is not None
                said = [
                    line
                    for line in self.process.tail(200).splitlines()
                    if "fatal" in line or "CRITICAL" in line or "ERROR" in line
                ]
                self.exits.append(
                    f"{self.name}: exit code {code} (soak sent {self.sent or 'nothing'})"
                    + (f": {said[-1][:300]}" if said else "")
                )
                log(f"unexpected exit: {self.exits[-1]}")
            self.process = None
            if self.wanted and self.restart_at is None:
                self.restart_at = now + delay()
        due = self.restart_at is not None and now >= self.restart_at
        if self.process is None and self.wanted and due:
            self.start()
            log(f"started {self.name} again")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.alive()


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Options:
    duration: float = 360.0
    seed: int = 1
    rate: float = 150.0  # records/s over both producers
    scheduler_rate: float = 300.0  # --rate of the group
    workdir: Path | None = None
    keep: bool = False
    drain_timeout: float = 180.0
    fault_every: tuple[float, float] = (8.0, 20.0)  # seconds between process faults
    broker_restart: bool = True


@dataclass
class Report:
    options: Options
    bootstrap: str = ""
    events: list[tuple[float, str]] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    acked: int = 0
    acked_by_kind: dict[str, int] = field(default_factory=dict)
    not_acked: int = 0
    sent_expired: int = 0
    egress_records: int = 0
    egress_distinct: int = 0
    served: int = 0
    served_distinct: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    lost_before_egress: int = 0
    lost_after_egress: int = 0
    lost_sample: list[str] = field(default_factory=list)
    unexpected_records: int = 0
    egress_order_violations: int = 0
    served_order_violations: int = 0
    egress_duplicates: int = 0
    dlq_duplicates: int = 0
    egress_and_dlq: int = 0
    worker_duplicates: int = 0
    worker_duplicated_records: int = 0
    drained_in: float | None = None
    ingest_left: int = 0  # records above the group's committed marks once all stopped
    stuck: list[str] = field(default_factory=list)  # schedulers when the drain gave up
    chaos_seconds: float = 0.0
    total_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.lost_before_egress + self.lost_after_egress

    @property
    def scheduler_duplicates(self) -> int:
        return self.egress_duplicates + self.dlq_duplicates + self.egress_and_dlq

    @property
    def order_violations(self) -> int:
        return self.egress_order_violations + self.served_order_violations

    @property
    def passed(self) -> bool:
        return (
            self.lost == 0
            and self.order_violations == 0
            and self.scheduler_duplicates == 0
            and not self.errors
        )


def order_violations(sequences: Iterable[tuple[str, int]]) -> int:
    """Records whose sequence number is below an earlier one of the same tenant, counting
    each record's first appearance only (a repeat is a duplicate, not disorder)."""
    highest: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    violations = 0
    for tenant, seq in sequences:
        if (tenant, seq) in seen:
            continue
        seen.add((tenant, seq))
        if seq < highest.get(tenant, -1):
            violations += 1
        else:
            highest[tenant] = seq
    return violations


def scheduler_metric(process: SchedulerProcess, name: str) -> float | None:
    status, text = process.get("/metrics")
    if status != 200:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def scheduler_snapshot(name: str, process: SchedulerProcess) -> str:
    """What a scheduler says of itself: health, readiness, partitions, backlog, egress."""
    said = [
        line.split(": ", 1)[-1][:160]
        for line in process.tail(2000).splitlines()
        if " ERROR " in line or " CRITICAL " in line
    ]
    return (
        f"{name}: /healthz {process.get('/healthz')[0]}, /readyz {process.get('/readyz')[0]}, "
        f"partitions {scheduler_metric(process, 'fairstream_assigned_partitions')}, backlog "
        f"{scheduler_metric(process, 'fairstream_backlog_records')}, emitted "
        f"{scheduler_metric(process, 'fairstream_egress_records_total')}"
        + (f"; last error logged: {said[-1]}" if said else "")
    )


def ingest_left(d: Deployment) -> dict[int, int]:
    """Per ingest partition, records at or above the group's committed mark (unsettled)."""
    consumer = Consumer(
        {"bootstrap.servers": d.bootstrap, "group.id": d.app_id, "enable.auto.commit": False}
    )
    try:
        wanted = [TopicPartition(d.topics.ingest, p) for p in range(PARTITIONS)]
        left = {}
        for tp in consumer.committed(wanted, timeout=30):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(d.topics.ingest, tp.partition), timeout=30, cached=False
            )
            left[tp.partition] = high - max(tp.offset, low)
        return left
    finally:
        consumer.close()


class Soak:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.report = Report(options)
        self.started = time.monotonic()
        self.own_workdir = options.workdir is None
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="fairstream-soak-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker = DevBroker(state_dir=self.workdir / "broker", log=log)
        self.slots: dict[str, Slot] = {}

    def event(self, what: str) -> None:
        at = time.monotonic() - self.started
        self.report.events.append((at, what))
        log(what)

    def delay(self) -> float:
        return self.rng.uniform(1.0, 5.0)

    # -- set-up

    def set_up(self) -> Setup:
        if not self.broker.jars_ready():
            self.broker.fetch_jars()
        state = self.broker.up(engine="local")
        self.report.bootstrap = state.bootstrap
        log(f"soak broker {state.bootstrap} (state in {self.broker.state_dir})")
        deployment = Deployment(state.bootstrap, partitions=PARTITIONS).create()
        handled_dir = self.workdir / "served"
        handled_dir.mkdir(exist_ok=True)
        setup = Setup(
            deployment,
            self.workdir,
            handled_dir,
            unique("soak-workers"),
            self.options.seed,
            self.options.scheduler_rate,
        )
        for name in STATIC:
            self.slots[name] = Slot(name, self.scheduler_factory(deployment, name, static=True))
        self.slots[EXTRA] = Slot(
            EXTRA, self.scheduler_factory(deployment, EXTRA, static=False), wanted=False
        )
        for name in WORKERS:
            self.slots[name] = Slot(name, worker_factory(name, setup))
        for slot in self.slots.values():
            if slot.wanted:
                slot.start()
        for name in STATIC:
            process = self.slots[name].process
            assert isinstance(process, SchedulerProcess)
            process.wait_ready(timeout=120)
        return setup

    def scheduler_factory(
        self, deployment: Deployment, name: str, *, static: bool
    ) -> Callable[[int], Process]:
        """Starts of one scheduler: the same name, data dir and log every time."""
        args = ["--rate", f"{self.options.scheduler_rate:g}"]
        if static:
            args += ["--group-instance-id", name]

        def make(_incarnation: int) -> Process:
            return SchedulerProcess(deployment, self.workdir, *args, name=name)

        return make

    # -- chaos

    def supervise(self) -> None:
        now = time.monotonic()
        for slot in self.slots.values():
            slot.check(now, self.delay)

    def fault(self) -> None:
        """kill -9 or SIGTERM of a running scheduler or worker, chosen at random."""
        names = [*STATIC, *WORKERS]
        running = [n for n in names if self.slots[n].running]
        if not running:
            return
        name = self.rng.choice(running)
        sig = self.rng.choice([signal.SIGKILL, signal.SIGTERM])
        slot = self.slots[name]
        if slot.signal(sig):
            slot.restart_at = time.monotonic() + self.delay()
            self.event(f"{'kill -9' if sig == signal.SIGKILL else 'SIGTERM'} {name}")

    def restart_broker(self) -> None:
        before = self.broker.recorded()
        self.event("broker down")
        self.broker.down()
        # Nothing is started while the broker is away: a scheduler would only fail to
        # find its topics. Processes that exit meanwhile are noted after.
        time.sleep(self.rng.uniform(2.0, 5.0))
        state = self.broker.up(engine="local")
        same = before is not None and state.port == before.port
        self.event(f"broker up again on {state.bootstrap} ({'same' if same else 'ANOTHER'} port)")
        if not same:
            self.report.errors.append(f"the broker came back on another port: {state.bootstrap}")

    def chaos(self) -> None:
        duration = self.options.duration
        start = time.monotonic()
        broker_at = self.rng.uniform(0.40, 0.55) * duration
        plan: list[tuple[float, str]] = [
            (self.rng.uniform(0.15, 0.30) * duration, "add"),
            (self.rng.uniform(0.65, 0.80) * duration, "remove"),
        ]
        if self.options.broker_restart:
            plan.append((broker_at, "broker"))
        low, high = self.options.fault_every
        at = self.rng.uniform(low, high) / 2
        while at < duration * 0.9:
            plan.append((at, "fault"))
            at += self.rng.uniform(low, high)
        plan.sort()
        for at, what in plan:
            while time.monotonic() - start < at:
                self.supervise()
                time.sleep(0.2)
            if what == "broker":
                self.restart_broker()
            elif what == "add":
                self.slots[EXTRA].wanted = True
                self.slots[EXTRA].start()
                self.event(f"{EXTRA} joins the group (rebalance)")
            elif what == "remove":
                extra = self.slots[EXTRA]
                extra.wanted = False
                if extra.signal(signal.SIGTERM):
                    self.event(f"SIGTERM {EXTRA}: it leaves the group (rebalance)")
            else:
                self.fault()
        while time.monotonic() - start < duration:
            self.supervise()
            time.sleep(0.2)
        self.report.chaos_seconds = time.monotonic() - start

    def all_running(self, timeout: float = 120) -> None:
        """Every wanted process up (and the schedulers ready) before the drain."""
        for slot in self.slots.values():
            if slot.wanted and not slot.running and slot.restart_at is None:
                slot.restart_at = time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.supervise()
            if all(s.running for s in self.slots.values() if s.wanted):
                break
            time.sleep(0.2)
        for name in STATIC:
            process = self.slots[name].process
            if isinstance(process, SchedulerProcess):
                with contextlib.suppress(AssertionError):
                    process.wait_ready(timeout=max(1.0, deadline - time.monotonic()))

    def stop_all(self) -> None:
        """SIGTERM every process and wait for it (kill -9 after 60 s)."""
        for slot in self.slots.values():
            slot.wanted = False
            slot.signal(signal.SIGTERM)
        for slot in self.slots.values():
            proc = slot.process.proc if slot.process is not None else None
            if proc is None:
                continue
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            slot.check(time.monotonic(), self.delay)

    # -- the whole run

    def run(self) -> Report:
        report = self.report
        ledger = Ledger()
        producers: list[PacedProducer] = []
        logs: list[TopicLog] = []
        try:
            setup = self.set_up()
            d = setup.deployment
            egress = TopicLog(d.bootstrap, d.topics.egress)
            dlq = TopicLog(d.bootstrap, d.topics.dlq)
            logs = [egress, dlq]
            served = HandledLog(setup.handled_dir)
            half = self.options.rate / 2
            producers = [
                SdkProducer(d.bootstrap, d.topics.ingest, half, self.options.seed, ledger).start(),
                PlainProducer(
                    d.bootstrap, d.topics.ingest, half, self.options.seed, ledger
                ).start(),
            ]
            self.event(
                f"producers at {self.options.rate:g} records/s; schedulers at "
                f"{self.options.scheduler_rate:g}/s; chaos for {self.options.duration:g} s"
            )
            self.chaos()
            self.all_running()
            for producer in producers:
                producer.stop()
            self.event(f"producers stopped: {len(ledger.acked)} records acknowledged")
            drain_started = time.monotonic()
            if self.drain(ledger, egress, dlq, served):
                report.drained_in = time.monotonic() - drain_started
            self.event("stopping every process")
            self.stop_all()
            report.ingest_left = sum(ingest_left(d).values())
            self.read_to_end(d, egress, dlq)
            served.poll()
            self.tally(ledger, producers, egress, dlq, served)
        finally:
            for producer in producers:
                producer._stop.set()
            for topic_log in logs:
                topic_log.close()
            for slot in self.slots.values():
                if slot.running and slot.process is not None and slot.process.proc is not None:
                    slot.process.proc.kill()
            self.broker.down()
            report.total_seconds = time.monotonic() - self.started
            if self.own_workdir and not self.options.keep and report.passed:
                shutil.rmtree(self.workdir, ignore_errors=True)
            else:
                log(f"logs and data kept in {self.workdir}")
        return report

    def drain(self, ledger: Ledger, egress: TopicLog, dlq: TopicLog, served: HandledLog) -> bool:
        """Wait until every acknowledged record came out and every emitted one was served."""
        deadline = time.monotonic() + self.options.drain_timeout
        while time.monotonic() < deadline:
            self.supervise()
            served.poll()
            out = {r for _, r, _ in egress.records() if r is not None}
            lettered = {r for _, r, _ in dlq.records() if r is not None}
            if ledger.acked <= out | lettered and out <= served.distinct() | lettered:
                self.event("drained: everything acknowledged came out and was served")
                return True
            time.sleep(0.5)
        self.event(f"not drained after {self.options.drain_timeout:g} s")
        for slot in self.slots.values():
            if isinstance(slot.process, SchedulerProcess) and slot.running:
                self.report.stuck.append(scheduler_snapshot(slot.name, slot.process))
                log(self.report.stuck[-1])
        return False

    def read_to_end(self, d: Deployment, egress: TopicLog, dlq: TopicLog) -> None:
        """End markers on every partition, written after the schedulers and workers stopped:
        once a reader has them all, it has read everything committed before."""
        producer = Producer({"bootstrap.servers": d.bootstrap})
        for topic in (d.topics.egress, d.topics.dlq):
            for partition in range(PARTITIONS):
                producer.produce(topic, b"", END, partition=partition)
        producer.flush(60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(egress.ends) == PARTITIONS and len(dlq.ends) == PARTITIONS:
                return
            time.sleep(0.2)
        self.report.errors.append("the end markers were not all read back within 120 s")

    def tally(
        self,
        ledger: Ledger,
        producers: list[PacedProducer],
        egress: TopicLog,
        dlq: TopicLog,
        served: HandledLog,
    ) -> None:
        r = self.report
        for producer in producers:
            r.errors.extend(f"producer {producer.kind}: {e}" for e in producer.errors)
        for topic_log in (egress, dlq):
            r.errors.extend(f"reader of {topic_log.topic}: {e}" for e in topic_log.errors[:5])
        r.acked = len(ledger.acked)
        r.acked_by_kind = dict(ledger.by_kind)
        r.not_acked = len(ledger.failed)
        r.sent_expired = len(ledger.expired)
        out_entries = egress.records()
        out = [rec for _, rec, _ in out_entries if rec is not None]
        r.unexpected_records = sum(rec is None for _, rec, _ in out_entries)
        r.egress_records = len(out)
        out_set = set(out)
        r.egress_distinct = len(out_set)
        r.egress_duplicates = len(out) - len(out_set)
        letters = [(rec, reason) for _, rec, reason in dlq.records() if rec is not None]
        reasons = Counter(reason or "?" for _, reason in letters)
        r.dead_letters = dict(reasons)
        scheduler_letters = [rec for rec, reason in letters if reason != contract.HANDLER_FAILED]
        worker_letters = {rec for rec, reason in letters if reason == contract.HANDLER_FAILED}
        r.dlq_duplicates = len(scheduler_letters) - len(set(scheduler_letters))
        r.egress_and_dlq = len(out_set & set(scheduler_letters))
        served_counts = Counter(record for _, record in served.served)
        r.served = sum(served_counts.values())
        r.served_distinct = len(served_counts)
        r.worker_duplicates = sum(n - 1 for n in served_counts.values() if n > 1)
        r.worker_duplicated_records = sum(1 for n in served_counts.values() if n > 1)
        lost_before = ledger.acked - out_set - set(scheduler_letters)
        lost_after = out_set - set(served_counts) - worker_letters
        r.lost_before_egress = len(lost_before)
        r.lost_after_egress = len(lost_after)
        r.lost_sample = [f"{t}#{s} (before egress)" for t, s in sorted(lost_before)[:10]]
        r.lost_sample += [f"{t}#{s} (after egress)" for t, s in sorted(lost_after)[:10]]
        # A tenant's records share one egress partition: the reader saw them in order.
        r.egress_order_violations = order_violations(out)
        r.served_order_violations = order_violations(record for _, record in sorted(served.served))
        expired_out = len(ledger.expired & out_set)
        if expired_out:
            r.errors.append(f"{expired_out} records sent with a passed deadline reached egress")
        for slot in self.slots.values():
            r.unexpected_exits.extend(slot.exits)


# -- the report --------------------------------------------------------------------------------


def lines(report: Report) -> list[tuple[str, str]]:
    r = report
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r.acked_by_kind.items()))
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(r.dead_letters.items())) or "none"
    return [
        ("records acknowledged to producers", f"{r.acked:,} ({kinds}; {r.not_acked} refused)"),
        ("emitted on egress (read_committed)", f"{r.egress_distinct:,} distinct records"),
        (
            "handled by workers (served by the API)",
            f"{r.served_distinct:,} distinct records in {r.served:,} servings",
        ),
        ("dead-lettered", f"{sum(r.dead_letters.values()):,} ({reasons})"),
        (
            "lost",
            f"{r.lost:,} (before egress {r.lost_before_egress:,}, after egress "
            f"{r.lost_after_egress:,}); unsettled in the ingest log at the end "
            f"{r.ingest_left:,}",
        ),
        (
            "per-tenant order violations",
            f"{r.order_violations:,} (egress {r.egress_order_violations:,}, served "
            f"{r.served_order_violations:,})",
        ),
        (
            "duplicates: scheduler egress",
            f"{r.scheduler_duplicates:,} (twice on egress {r.egress_duplicates:,}, twice "
            f"dead-lettered {r.dlq_duplicates:,}, on egress and dead-lettered "
            f"{r.egress_and_dlq:,})",
        ),
        (
            "duplicates: worker re-delivery",
            f"{r.worker_duplicates:,} extra servings of {r.worker_duplicated_records:,} records",
        ),
        ("unexpected process exits", f"{len(r.unexpected_exits)}"),
        (
            "drained after the producers stopped",
            f"{r.drained_in:.1f} s" if r.drained_in is not None else "NO",
        ),
    ]


def chaos_summary(report: Report) -> str:
    counts: Counter[str] = Counter()
    for _, what in report.events:
        for prefix in ("kill -9 sched", "SIGTERM sched", "kill -9 worker", "SIGTERM worker"):
            if what.startswith(prefix) and EXTRA not in what:
                counts[prefix.replace("sched", "scheduler")] += 1
    parts = [f"{kind} x{count}" for kind, count in sorted(counts.items())]
    parts.append(f"broker restarts x{sum(w == 'broker down' for _, w in report.events)}")
    parts.append(f"a third scheduler added and removed ({EXTRA})")
    return ", ".join(parts)


def print_report(report: Report) -> None:
    o = report.options
    print()
    print(
        f"fairstream soak: seed {o.seed}, {report.chaos_seconds:.0f} s of chaos, "
        f"{report.total_seconds:.0f} s in all, broker {report.bootstrap}, {PARTITIONS} "
        f"partitions, {2 * TENANTS_PER_PRODUCER} tenants, {o.rate:g} records/s produced, "
        f"--rate {o.scheduler_rate:g}"
    )
    print(f"chaos: {chaos_summary(report)}")
    for at, what in report.events:
        print(f"  {at:6.1f} s  {what}")
    width = max(len(name) for name, _ in lines(report))
    for name, value in lines(report):
        print(f"{name:<{width}}  {value}")
    for exit_ in report.unexpected_exits:
        print(f"  unexpected exit: {exit_}")
    for stuck in report.stuck:
        print(f"  when the drain gave up: {stuck}")
    for sample in report.lost_sample:
        print(f"  lost: {sample}")
    for error in report.errors:
        print(f"  error: {error}")
    print("verdict:", "PASS" if report.passed else "FAIL")


# What runs of the soak found in the scheduler, for docs/soak.md (see issue 13). Remove an
# entry once it is fixed.
KNOWN_PROBLEMS = """\
None open. Fixed after earlier runs: a broker restart made schedulers exit (a retriable
`send_offsets_to_transaction` timeout was taken for a fatal error), and could leave an
instance that no longer emitted while `/readyz` said ready (the group-shares thread ended
on a timed-out call to a busy emitter, and its lease was never renewed).
"""


def listing(title: str, items: list[str], empty: str = "none") -> str:
    if not items:
        return f"{title}: {empty}."
    return f"{title}:\n\n" + "\n".join(f"- {item}" for item in items)


def paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=92)


def markdown(report: Report, command: str) -> str:
    o = report.options
    rows = "\n".join(f"| {name} | {value} |" for name, value in lines(report))
    events = "\n".join(f"| {at:.1f} s | {what} |" for at, what in report.events)
    exits = listing(
        "Unexpected process exits (each was started again, as an orchestrator would)",
        report.unexpected_exits,
    )
    stuck = listing("Schedulers when the drain gave up", report.stuck, "none (it drained)")
    errors = listing("Errors", report.errors)
    setting = paragraph(
        f"""Latest run: {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {os.cpu_count()}
        cores shared with other work, Python {platform.python_version()}, an Apache Kafka
        4.1.1 development broker of the soak's own on the same machine; seed {o.seed};
        {report.chaos_seconds:.0f} s of chaos, {report.total_seconds:.0f} s in all;
        {PARTITIONS} ingest partitions, {2 * TENANTS_PER_PRODUCER} tenants, {o.rate:g}
        records/s produced (half through the SDK, half through a plain confluent-kafka
        producer), schedulers at `--rate {o.scheduler_rate:g}`, two workers with
        concurrency {WORKER_CONCURRENCY}."""
    )
    intro = paragraph(
        """`make soak` runs it with the defaults (`SOAK_ARGS` adds options; `--duration` and
        `--seed` vary the run). What runs, what is injected and how each number is counted
        is in the docstring of [benchmarks/soak.py](../benchmarks/soak.py); a 60 s version
        runs in the test suite (`tests/integration/test_soak.py`)."""
    )
    return f"""# Soak: the whole system under chaos

Reproduce with:

```
{command}
```

{intro}

{setting}

**Verdict: {"PASS" if report.passed else "FAIL"}** (lost, order violations and scheduler
duplicates must all be 0).

| | |
| --- | --- |
{rows}

Chaos: {chaos_summary(report)}.

| at | event |
| ---: | --- |
{events}

{exits}

{stuck}

{errors}

## Problems the soak has found

{KNOWN_PROBLEMS}"""


def run(options: Options) -> Report:
    return Soak(options).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=360.0, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=150.0, help="records/s produced")
    parser.add_argument("--scheduler-rate", type=float, default=300.0)
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--no-broker-restart", action="store_true", help="leave the broker restart out"
    )
    parser.add_argument("--markdown", type=Path, default=None, help="write the report here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON too")
    args = parser.parse_args()
    options = Options(
        duration=args.duration,
        seed=args.seed,
        rate=args.rate,
        scheduler_rate=args.scheduler_rate,
        drain_timeout=args.drain_timeout,
        workdir=args.workdir,
        keep=args.keep,
        broker_restart=not args.no_broker_restart,
    )
    report = run(options)
    print_report(report)
    if args.json:
        print(json.dumps({**report.__dict__, "options": options.__dict__}, default=str))
    if args.markdown is not None:
        defaults = Options()
        same = all(
            getattr(options, name) == getattr(defaults, name)
            for name in ("duration", "seed", "rate", "scheduler_rate", "broker_restart")
        )
        command = ("make soak\n# that is:\n" if same else "") + (
            f".venv/bin/python benchmarks/soak.py --duration {options.duration:g} "
            f"--seed {options.seed} --rate {options.rate:g} "
            f"--scheduler-rate {options.scheduler_rate:g} --markdown {args.markdown}"
            + ("" if options.broker_restart else " --no-broker-restart")
        )
        args.markdown.write_text(markdown(report, command))
        log(f"report written to {args.markdown}")
    sys.exit(0 if report.passed else 1)


if __name__ == "__main__":
    main()
