"""The soak's processes: ``fairstream worker`` processes serving the simulated API, and the
slot that supervises one scheduler or worker (kill -9, SIGTERM, starts again, unexpected
exits), as an orchestrator would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import REPO, metrics
from benchmarks.soak_load import log
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess

WORKER_CONCURRENCY = 4
STATIC = ("sched-0", "sched-1")  # the two schedulers with static membership
EXTRA = "sched-2"  # the third one, for the rebalance (dynamic membership)
WORKERS = ("worker-0", "worker-1")


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
            sys.executable,
            "-m",
            "fairstream",
            "worker",
            "--handler",
            "soak_api:handle",
            "--bootstrap",
            d.bootstrap,
            "--egress-topic",
            d.topics.egress,
            "--dlq-topic",
            d.topics.dlq,
            "--group-id",
            self.setup.worker_group,
            "--concurrency",
            str(WORKER_CONCURRENCY),
            # The soak checks the order the API served each tenant's requests in (a line
            # per call that finished): completion order, which --ordering start does not keep.
            "--ordering",
            "completion",
            "--backoff-initial",
            "0.05",
            "--backoff-max",
            "1",
            "--no-feedback",
        ]
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


def scheduler_snapshot(name: str, process: SchedulerProcess) -> str:
    """What a scheduler says of itself: health, readiness, partitions, backlog, egress."""
    said = [
        line.split(": ", 1)[-1][:160]
        for line in process.tail(2000).splitlines()
        if " ERROR " in line or " CRITICAL " in line
    ]
    m = metrics(process)
    return (
        f"{name}: /healthz {process.get('/healthz')[0]}, /readyz {process.get('/readyz')[0]}, "
        f"partitions {m.get('fairstream_assigned_partitions')}, backlog "
        f"{m.get('fairstream_backlog_records')}, emitted "
        f"{m.get('fairstream_egress_records_total')}"
        + (f"; last error logged: {said[-1]}" if said else "")
    )
