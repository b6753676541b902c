"""Fatal means exit: a scheduler fenced by a newer process with its identity.

A second ``fairstream scheduler`` started with the same transactional identity (the same
``--group-instance-id`` and ``--app-id``; the same ``--data-dir`` is refused before it gets
that far, see test_data_dir) fences the first one's producer in its ``init_transactions``.
The first one's next commit then fails for good: it must answer ``/healthz`` 503 with the
reason, exit non-zero within its shutdown timeout with the reason on stderr, and lose
nothing: the second one carries on from what was committed. Egress is read with
read_committed, as workers do.
"""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import pytest

from fairstream.scheduler.run import SHUTDOWN_TIMEOUT
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import (
    LoadProducer,
    all_seen,
    exactly_once_report,
    read_to_end,
)

pytestmark = pytest.mark.integration

FATAL_LINE = "fairstream scheduler: fatal: "
# Beyond the shutdown timeout: the interpreter's own exit after the threads were given up.
EXIT_MARGIN = 5.0


class HealthProbe:
    """Asks ``/healthz`` over one kept-alive connection, as often as it is called.

    The stop after a fatal error is quick (about 10 ms here, from the error to the exit), so
    a prober that opened a connection per request, or paused between requests, would seldom
    see the 503 that is answered meanwhile.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.answers: list[tuple[int, str]] = []  # in order
        self._conn: http.client.HTTPConnection | None = None

    def __call__(self) -> int:
        try:
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            self._conn.request("GET", "/healthz")
            response = self._conn.getresponse()
            answer = (response.status, response.read().decode().strip())
        except (OSError, http.client.HTTPException):
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return 0
        self.answers.append(answer)
        return answer[0]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


@pytest.mark.parametrize("identity", ["group-instance-id"])
def test_a_fenced_scheduler_exits_non_zero_with_the_reason(
    kafka_bootstrap: str, tmp_path: Path, identity: str
) -> None:
    partitions = 4
    deployment = Deployment(kafka_bootstrap, partitions=partitions).create()
    args: tuple[str, ...] = ("--rate", "400")
    if identity == "group-instance-id":
        args = (*args, "--group-instance-id", "sched-0")
    first = SchedulerProcess(deployment, tmp_path, *args, name="first").start().wait_ready()
    # The same transactional id: the same data dir (its instance-id file), or the same
    # group instance id (each process then has a data dir of its own).
    second = SchedulerProcess(deployment, tmp_path, *args, name="second")
    if identity == "data-dir":
        second.data_dir = first.data_dir
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    load = LoadProducer(kafka_bootstrap, deployment.topics.ingest, tenants=10, per_second=200)
    load.start()
    health = HealthProbe(first.web_port)
    try:
        egress.read_until(200, timeout=60)  # the first one emits and commits
        second.start()

        wait_until(
            lambda: health() == 503 or not first.alive(),
            90,
            lambda: f"the first scheduler is fenced; its log:\n{first.tail()}",
            interval=0,
        )
        fenced_at = time.monotonic()

        def first_exited() -> bool:
            health()
            return not first.alive()

        wait_until(
            first_exited,
            SHUTDOWN_TIMEOUT + EXIT_MARGIN,
            lambda: f"the fenced scheduler exits within its shutdown timeout; log:\n{first.tail()}",
            interval=0,
        )
        exit_after = time.monotonic() - fenced_at
        assert first.proc is not None
        code = first.proc.returncode
        second.wait_ready(timeout=120)
        expected = load.stop()
        wait_until(
            lambda: all_seen(egress, expected),
            120,
            lambda: (
                f"every record reaches egress through the second scheduler; log:\n{second.tail()}"
            ),
            interval=0,
        )
        assert second.terminate() == 0, second.tail()
        messages = read_to_end(kafka_bootstrap, egress, deployment.topics.egress, partitions)
    finally:
        health.close()
        load.halt()
        egress.close()
        for process in (first, second):
            if process.alive():
                process.kill()

    log = first.log_path.read_text(errors="replace")
    fatal_lines = [line for line in log.splitlines() if line.startswith(FATAL_LINE)]
    answers = health.answers
    unhealthy = [text for status, text in answers if status == 503]
    duplicates, missing, unexpected, disorder = exactly_once_report(messages, expected, load.sent)
    print(
        f"\nfenced through the same {identity}: exit code {code} {exit_after:.1f} s after "
        f"/healthz first answered 503 ({len(unhealthy)} answers of 503 seen); "
        f"stderr: {fatal_lines[-1] if fatal_lines else '(no fatal line)'}; "
        f"egress read_committed {len(messages)} of {len(expected)} produced, "
        f"{duplicates} duplicates, {missing} missing"
    )
    assert code not in (0, None), f"exit code {code}"
    assert fatal_lines, f"no '{FATAL_LINE}...' line on stderr:\n{first.tail()}"
    reason = fatal_lines[-1][len(FATAL_LINE) :]
    assert unhealthy, f"/healthz never answered 503 before the exit: {answers[-5:]}"
    assert unhealthy[0] == f"failed: {reason}"
    assert all(status == 200 for status, _ in answers[: answers.index((503, unhealthy[0]))])
    assert duplicates == 0
    assert missing == 0
    assert unexpected == 0
    assert not disorder, disorder[:3]
    # The reason says what happened (librdkafka's generic "Local: Fatal error" alone would
    # not), and the stop did not wait for a failing emitter to answer.
    assert "fenced" in reason.lower(), reason
    assert "threads still running" not in log, first.tail()
