"""Run ``fairstream scheduler`` as a real process against the test (or benchmark) broker.

Each deployment gets unique topic names and an app id of its own; each process gets its own
data directory and web port, and is checked through ``/readyz`` like an orchestrator would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import Consumer, KafkaError, Message

from fairstream.adapters.admin import create_topics
from fairstream.config import Topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.kafka import free_port

# The source tree (dev/fairstream_dev/harness/ is three levels down; the harness is installed
# editable from it): scheduler processes run from here, as `make` would run them.
REPO = Path(__file__).resolve().parents[3]


def unique_topics() -> Topics:
    base = unique("fs")
    return Topics(f"{base}.ingest", f"{base}.egress", f"{base}.dlq", f"{base}.policy")


@dataclass
class Deployment:
    """A set of fairstream topics and an app id, created for one test."""

    bootstrap: str
    partitions: int = 4
    topics: Topics = field(default_factory=unique_topics)
    app_id: str = field(default_factory=lambda: unique("app"))

    def create(self) -> Deployment:
        create_topics(self.bootstrap, self.topics, self.partitions, self.app_id)
        return self


class SchedulerProcess:
    """One ``fairstream scheduler`` process of a deployment, with its own data dir and port.

    ``started`` lists the processes started since the last ``forget_started()``: the
    integration tests' conftest shows their log tails when a test fails."""

    started: ClassVar[list[SchedulerProcess]] = []

    @classmethod
    def forget_started(cls) -> None:
        cls.started.clear()

    def __init__(
        self,
        deployment: Deployment,
        workdir: Path,
        *args: str,
        name: str = "sched",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.deployment = deployment
        self.env = dict(env or {})  # extra environment, e.g. FAIRSTREAM_SASL_*
        self.web_port = free_port()
        self.data_dir = workdir / f"{name}-data"
        self.log_path = workdir / f"{name}.log"
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        d = self.deployment
        options = [
            ("--bootstrap", d.bootstrap),
            ("--ingest-topic", d.topics.ingest),
            ("--egress-topic", d.topics.egress),
            ("--dlq-topic", d.topics.dlq),
            ("--policy-topic", d.topics.policy),
            ("--app-id", d.app_id),
            ("--data-dir", str(self.data_dir)),
            ("--web-port", str(self.web_port)),
            ("--web-host", "127.0.0.1"),
        ]
        if not any(arg.startswith("--feedback-topic") for arg in self.args):
            # Feedback only from a topic of the test's own: the default one is shared by
            # every test, and a deployment whose workers report nothing would hold its
            # first releases to the start-up window of credit (up to 8 s).
            options.append(("--feedback-topic", ""))
        flags = [part for option in options for part in option]
        return [sys.executable, "-m", "fairstream", "scheduler", *flags, *self.args]

    def start(self) -> SchedulerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        if self not in SchedulerProcess.started:
            SchedulerProcess.started.append(self)
        return self

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, labels: str = "") -> float | None:
        """One sample of the scheduler's /metrics (``labels`` as written there), or None."""
        status, body = self.get("/metrics")
        if status != 200:
            return None
        prefix = f"{name}{{{labels}}} " if labels else f"{name} "
        for line in body.splitlines():
            if line.startswith(prefix):
                return float(line[len(prefix) :])
        return None

    def wait_ready(self, timeout: float = 90) -> SchedulerProcess:
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"scheduler exited {self.proc.returncode}: {self.tail()}")
            return self.get("/readyz")[0] == 200

        wait_until(
            ready, timeout, lambda: f"scheduler ready; log tail:\n{self.tail()}", interval=0.2
        )
        return self

    def terminate(self, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"scheduler ignored SIGTERM:\n{self.tail()}") from None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class TopicReader:
    """A consumer reading a topic from the beginning, accumulating what it has seen."""

    def __init__(self, bootstrap: str, topic: str, config: Mapping[str, Any] | None = None) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                **(config or {}),  # e.g. a KafkaConnection's librdkafka() settings
                "group.id": unique("reader"),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.messages: list[Message] = []

    def poll(self, duration: float = 0.2) -> list[Message]:
        new: list[Message] = []
        for msg in self.consumer.consume(num_messages=10_000, timeout=duration):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {err}")
            new.append(msg)
        self.messages.extend(new)
        return new

    def read_until(self, count: int, timeout: float) -> list[Message]:
        def enough() -> bool:
            self.poll()
            return len(self.messages) >= count

        wait_until(
            enough, timeout, lambda: f"{count} records (have {len(self.messages)})", interval=0
        )
        return self.messages

    def close(self) -> None:
        self.consumer.close()
