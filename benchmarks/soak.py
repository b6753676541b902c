"""``make soak``: one chaos run of the whole system on a real broker.

Everything runs for real, on development brokers of the soak's own, under the work directory
(never the shared broker, since the soak restarts them): a cluster of three nodes
(``DevCluster``) by default, or one broker with ``--brokers 1`` (``DevBroker``):

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
same port (one node of the cluster, or the only broker: a controlled shutdown, then a start;
``--broker-stop kill`` kills it instead, as a crash), and
the rebalance (the third scheduler joins, later leaves). A process
that exits on its own is started again too, and reported.

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

    .venv/bin/python -m benchmarks.soak [--duration 360] [--seed 1] [--rate 150]
        [--scheduler-rate 300] [--markdown docs/soak.md] [--workdir DIR] [--keep]

``--duration`` is the chaos phase; with the set-up, the drain and the stops a run takes
about ``duration + 2 min``. tests/integration/test_soak.py runs a short one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from benchmarks.soak_load import (
    END,
    PARTITIONS,
    HandledLog,
    Ledger,
    PacedProducer,
    PlainProducer,
    SdkProducer,
    TopicLog,
    log,
)
from benchmarks.soak_processes import (
    EXTRA,
    STATIC,
    WORKERS,
    Process,
    Setup,
    Slot,
    scheduler_snapshot,
    worker_factory,
)
from benchmarks.soak_report import Options, Report, markdown, print_report
from fairstream import wire
from fairstream.adapters.admin import latest_offsets
from fairstream_dev.harness.kafka import unique
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess
from fairstream_dev.kafka import DevBroker
from fairstream_dev.kafka.cluster import DevCluster

__all__ = ["Options", "Report", "print_report", "run"]


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


def ingest_left(d: Deployment, patience: float = 120.0) -> dict[int, int]:
    """Per ingest partition, records at or above the group's committed mark (unsettled).
    Asked again for up to ``patience`` seconds while the broker answers with a retriable
    error: after the soak's broker faults the group coordinator can take a while to load
    (a committed-offsets request timed out once at 30 s)."""
    deadline = time.monotonic() + patience
    consumer = Consumer(
        {"bootstrap.servers": d.bootstrap, "group.id": d.app_id, "enable.auto.commit": False}
    )
    try:
        wanted = [TopicPartition(d.topics.ingest, p) for p in range(PARTITIONS)]
        while True:
            try:
                left = {}
                for tp in consumer.committed(wanted, timeout=30):
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(d.topics.ingest, tp.partition), timeout=30, cached=False
                    )
                    left[tp.partition] = high - max(tp.offset, low)
                return left
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                retriable = isinstance(err, KafkaError) and (
                    err.retriable() or err.code() == KafkaError._TIMED_OUT
                )
                if not retriable or time.monotonic() >= deadline:
                    raise
                print(f"reading the committed marks: {exc}; asking again", flush=True)
                time.sleep(0.5)  # an answer that comes at once (a coordinator loading) waits
    finally:
        consumer.close()


def open_transactions(d: Deployment, topics: Iterable[str]) -> list[str]:
    """Partitions whose last stable offset stays behind their end: a transaction left open
    there hides every later record from read_committed readers (the end markers too)."""
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    try:
        ends = latest_offsets(admin, tps, IsolationLevel.READ_UNCOMMITTED, 30)
        stable = latest_offsets(admin, tps, IsolationLevel.READ_COMMITTED, 30)
    except Exception as exc:  # a diagnosis of a failure already reported: say why it is missing
        return [f"the last stable offsets could not be read: {exc}"]
    return [
        f"{topic} partition {partition}: last stable offset {stable[(topic, partition)]}, "
        f"end {end} (a transaction is still open there)"
        for (topic, partition), end in ends.items()
        if stable[(topic, partition)] < end
    ]


class Soak:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.report = Report(options)
        self.started = time.monotonic()
        self.own_workdir = options.workdir is None
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="fairstream-soak-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker: DevBroker | None = None
        self.cluster: DevCluster | None = None
        if options.brokers > 1:
            self.cluster = DevCluster(self.workdir / "cluster", nodes=options.brokers, log=log)
        else:
            self.broker = DevBroker(state_dir=self.workdir / "broker", log=log)
        self.slots: dict[str, Slot] = {}

    def event(self, what: str) -> None:
        at = time.monotonic() - self.started
        self.report.events.append((at, what))
        log(what)

    def delay(self) -> float:
        return self.rng.uniform(1.0, 5.0)

    # -- set-up

    def start_kafka(self) -> str:
        """The soak's brokers up; returns the bootstrap."""
        kafka = self.cluster or self.broker
        assert kafka is not None
        if not kafka.jars_ready():
            kafka.fetch_jars()
        if self.cluster is not None:
            bootstrap = self.cluster.up()
        else:
            assert self.broker is not None
            bootstrap = self.broker.up(engine="local").bootstrap
        log(f"soak brokers {bootstrap} (state in {kafka.state_dir})")
        return bootstrap

    def stop_kafka(self) -> None:
        if self.cluster is not None:
            self.cluster.down()
        elif self.broker is not None:
            self.broker.down()

    def set_up(self) -> Setup:
        self.report.bootstrap = self.start_kafka()
        deployment = Deployment(self.report.bootstrap, partitions=PARTITIONS).create()
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
        # Keyed egress (not the rate's default, spreading): the soak checks each tenant's
        # order on egress and in the order the API finished its calls (the workers run
        # ``--ordering completion`` through failures and retries), which only one partition
        # per tenant keeps. Spread records keep start order (test_egress_spread.py).
        args = ["--rate", f"{self.options.scheduler_rate:g}", "--egress-spread", "key"]
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
        kill = self.options.broker_stop == "kill"
        if self.cluster is not None:
            node_id = self.rng.randrange(1, len(self.cluster.nodes) + 1)
            self.event(f"broker down: node {node_id} of {len(self.cluster.nodes)}")
            self.cluster.stop(node_id, kill=kill)
            time.sleep(self.rng.uniform(2.0, 5.0))
            node = self.cluster.start(node_id)
            self.event(f"broker up again: node {node_id} on {node.bootstrap} (same port)")
            return
        assert self.broker is not None
        before = self.broker.recorded()
        self.event("broker down")
        self.broker.down(kill=kill)
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
            self.stop_kafka()
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
        self.report.errors.extend(open_transactions(d, (d.topics.egress, d.topics.dlq)))

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
        scheduler_letters = [rec for rec, reason in letters if reason != wire.HANDLER_FAILED]
        worker_letters = {rec for rec, reason in letters if reason == wire.HANDLER_FAILED}
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
    parser.add_argument(
        "--broker-stop",
        choices=("kill", "term"),
        default=Options.broker_stop,
        help="how the broker goes down: SIGTERM (a controlled shutdown, the default) or "
        "kill -9 (a crash)",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=Options.brokers,
        help="3: a cluster, whose restart stops one node (the default); 1: one broker, whose "
        "restart leaves every partition without a leader (see docs/soak.md)",
    )
    parser.add_argument(
        "--fault-every",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        default=Options.fault_every,
        help="seconds between two process faults, drawn between LOW and HIGH "
        "(the short soak in the tests: 8 15)",
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
        fault_every=(args.fault_every[0], args.fault_every[1]),
        broker_stop=args.broker_stop,
        brokers=args.brokers,
    )
    report = run(options)
    print_report(report)
    if args.json:
        print(json.dumps({**report.__dict__, "options": options.__dict__}, default=str))
    if args.markdown is not None:
        defaults = Options()
        same = all(
            getattr(options, name) == getattr(defaults, name)
            for name in (
                "duration",
                "seed",
                "rate",
                "scheduler_rate",
                "broker_restart",
                "fault_every",
                "broker_stop",
                "brokers",
            )
        )
        command = ("make soak\n# that is:\n" if same else "") + (
            f".venv/bin/python -m benchmarks.soak --duration {options.duration:g} "
            f"--seed {options.seed} --rate {options.rate:g} "
            f"--scheduler-rate {options.scheduler_rate:g} --markdown {args.markdown}"
            + ("" if options.broker_restart else " --no-broker-restart")
            + (
                f" --fault-every {options.fault_every[0]:g} {options.fault_every[1]:g}"
                if options.fault_every != defaults.fault_every
                else ""
            )
            + (" --broker-stop kill" if options.broker_stop == "kill" else "")
            + (f" --brokers {options.brokers}" if options.brokers != defaults.brokers else "")
        )
        args.markdown.write_text(markdown(report, command))
        log(f"report written to {args.markdown}")
    sys.exit(0 if report.passed else 1)


if __name__ == "__main__":
    main()
