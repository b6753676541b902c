"""The worker's side of the feedback contract on a real broker: RateLimited retries without using up
attempts, Usage is reported, and every outcome lands on the feedback topic as the contract
says (``fairstream.wire.feedback``); feedback_topic=None publishes nothing; garbage on the
feedback topic decodes to FeedbackError; ``fairstream topics create`` makes the topic.

Records are written straight to a fresh egress topic with a plain producer (no scheduler).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fairstream import RateLimited, Request, Usage, wire
from fairstream.wire.feedback import (
    Feedback,
    FeedbackError,
    Outcome,
    Scope,
    decode_feedback,
    encode_feedback,
)
from fairstream_dev.harness.kafka import consume, create_topics, unique
from tests.integration.workers import REPO, Setup, egress_record, feed, running


class FeedbackSetup(Setup):
    def __init__(self, bootstrap: str, partitions: int = 1) -> None:
        super().__init__(bootstrap, partitions)
        self.feedback = unique("w-feedback")
        create_topics(bootstrap, [self.feedback], partitions=partitions)

    def worker_with_feedback(self, handler: Any, **kwargs: Any) -> Any:
        return self.worker(handler, feedback_topic=self.feedback, **kwargs)

    def read_feedback(self, count: int) -> list[Feedback]:
        messages = consume(self.bootstrap, self.feedback, count, timeout=60)
        return [decode_feedback(m.value(), key=m.key()) for m in messages]


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watermarks")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def sample(worker: Any, name: str) -> float:
    value = worker.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return float(value)


def test_rate_limited_retries_without_using_attempts_and_is_reported(
    kafka_bootstrap: str,
) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", "r-1", b"prompt")])
    refusals = [
        RateLimited(retry_after=0.05),
        RateLimited(retry_after=0.05, scope="tenant"),
        RateLimited(),  # no Retry-After: the usual backoff
        RateLimited(retry_after=0.0),  # "0": the usual backoff too
    ]
    calls: list[int] = []

    def handler(request: Request) -> Usage:
        calls.append(request.attempt)
        if len(calls) <= len(refusals):
            raise refusals[len(calls) - 1]
        return Usage(cost=42)

    # max_attempts=1: a single counted failure would dead-letter the record.
    with running(s.worker_with_feedback(handler, max_attempts=1)) as worker:
        s.wait_committed([1])
        records = s.read_feedback(5)
    assert calls == [1, 1, 1, 1, 1]  # rate-limited calls do not use up attempts
    assert worker.stats.rate_limited == 4
    assert (worker.stats.processed, worker.stats.failed_attempts) == (1, 0)
    assert worker.stats.dead_lettered == 0
    assert sample(worker, "fairstream_worker_rate_limited_total") == 4
    assert sample(worker, "fairstream_worker_retries_total") == 0
    assert sample(worker, "fairstream_worker_feedback_records_total") == 5
    assert sample(worker, "fairstream_worker_feedback_errors_total") == 0

    assert [r.outcome for r in records] == [Outcome.RATE_LIMITED] * 4 + [Outcome.OK]
    assert [(r.scope, r.retry_after) for r in records[:4]] == [
        (Scope.API, 0.05),
        (Scope.TENANT, 0.05),
        (Scope.API, None),
        (Scope.API, 0.0),
    ]
    for r in records:
        assert (r.request_id, r.tenant, r.attempt, r.declared_cost) == ("r-1", "acme", 1, 3)
        assert r.scheduled_at_ms == 2000  # the egress record's fairstream-scheduled-ms
        assert r.egress_topic == s.egress  # names the deployment the request came from
        assert r.latency >= 0
    assert [r.cost for r in records] == [None] * 4 + [42]
    assert records[-1].final
    assert not any(r.final for r in records[:4])


def test_rate_limited_past_the_deadline_is_dead_lettered_as_expired(
    kafka_bootstrap: str,
) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    deadline_ms = int(time.time() * 1000) + 1500
    record = egress_record("acme", "r-late", b"x")
    record["headers"].append((wire.DEADLINE_MS, str(deadline_ms).encode()))
    feed(kafka_bootstrap, s.egress, [record, egress_record("acme", "r-next", b"y")])
    calls: list[str] = []

    def handler(request: Request) -> None:
        calls.append(request.request_id)
        if request.request_id == "r-late":
            raise RateLimited(retry_after=0.2)

    with running(s.worker_with_feedback(handler, max_attempts=1)) as worker:
        s.wait_committed([2])
    limited = calls.count("r-late")
    assert limited >= 1
    assert calls[-1] == "r-next"  # the tenant's next record waited for it (order)
    assert worker.stats.rate_limited == limited
    assert worker.stats.dead_lettered == 1
    assert (
        worker.metrics.registry.get_sample_value(
            "fairstream_worker_dead_letters_total", {"reason": wire.EXPIRED}
        )
        == 1
    )
    [dead] = consume(kafka_bootstrap, s.dlq, 1)
    headers = dict(dead.headers())
    assert headers[wire.DLQ_REASON] == wire.EXPIRED.encode()
    assert b"after the deadline" in headers[wire.DLQ_DETAIL]
    records = s.read_feedback(limited + 2)
    late = [r for r in records if r.request_id == "r-late"]
    assert [r.outcome for r in late] == [Outcome.RATE_LIMITED] * limited + [Outcome.DEAD_LETTERED]
    assert all(r.attempt == 1 for r in late)
    assert [r.outcome for r in records if r.request_id == "r-next"] == [Outcome.OK]


def test_usage_and_failures_are_reported(kafka_bootstrap: str) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    feed(
        kafka_bootstrap,
        s.egress,
        [
            egress_record("heavy", "r-heavy", b"a"),
            egress_record("light", "r-light", b"b"),
            egress_record("flaky", "r-flaky", b"c"),
            egress_record("broken", "r-broken", b"d"),
        ],
    )
    flaky_calls: list[int] = []

    async def handler(request: Request) -> Usage | None:  # async handlers report too
        if request.tenant == "heavy":
            return Usage(cost=10)
        if request.tenant == "flaky":
            flaky_calls.append(request.attempt)
            if request.attempt == 1:
                raise ConnectionError("upstream reset")
            return Usage(7)
        if request.tenant == "broken":
            raise ValueError("422")
        return None

    with running(s.worker_with_feedback(handler, max_attempts=2)) as worker:
        s.wait_committed([4])
        records = s.read_feedback(7)
    assert worker.stats.dead_lettered == 1
    by_request: dict[str, list[Feedback]] = {}
    for r in records:
        by_request.setdefault(r.request_id, []).append(r)
    summary = {
        rid: [(r.outcome.value, r.attempt, r.cost) for r in rs] for rid, rs in by_request.items()
    }
    assert summary == {
        "r-heavy": [("ok", 1, 10)],
        "r-light": [("ok", 1, None)],
        "r-flaky": [("failed", 1, None), ("ok", 2, 7)],
        "r-broken": [("failed", 1, None), ("failed", 2, None), ("dead-lettered", 2, None)],
    }
    assert all(r.declared_cost == 3 and r.tenant == r.request_id[2:] for r in records)


def test_feedback_off_publishes_nothing(kafka_bootstrap: str) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", f"r-{i}", b"x") for i in range(3)])
    calls: list[str] = []

    def handler(request: Request) -> Usage:
        calls.append(request.request_id)
        if calls.count(request.request_id) == 1:
            raise RateLimited(retry_after=0.01)
        return Usage(5)

    worker = s.worker(handler, feedback_topic=None)
    assert worker.feedback_topic is None
    with running(worker):
        s.wait_committed([3])
    # The worker has stopped: anything it produced would be on the topic by now.
    assert high_watermark(kafka_bootstrap, s.feedback) == 0
    assert worker.stats.rate_limited == 3
    assert sample(worker, "fairstream_worker_rate_limited_total") == 3
    assert sample(worker, "fairstream_worker_feedback_records_total") == 0


def test_missing_feedback_topic_neither_holds_nor_stops_the_worker(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", f"r-{i}", b"x") for i in range(3)])
    worker = s.worker(lambda r: Usage(2), feedback_topic=unique("w-no-such-topic"))
    with running(worker):
        s.wait_committed([3])
    assert worker.stats.processed == 3
    assert sample(worker, "fairstream_worker_feedback_errors_total") == 3
    assert sample(worker, "fairstream_worker_feedback_records_total") == 0


def test_garbage_on_the_feedback_topic_decodes_to_feedback_error(kafka_bootstrap: str) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", "r-good", b"x")])
    with running(s.worker_with_feedback(lambda r: Usage(9))):
        s.wait_committed([1])
        [good] = s.read_feedback(1)
    valid = encode_feedback(good)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    garbage: list[tuple[bytes | None, bytes | None]] = [
        (b"acme", None),  # a tombstone
        (b"acme", b""),
        (b"acme", b'{"tenant": "acme", "outcome": "ok"}'),
        (b"acme", os.urandom(64)),
        (b"acme", valid[:-3]),  # truncated
        (b"acme", valid + b"\x00"),  # trailing bytes
        (b"acme", valid[:2] + b"\x00" * 8 + valid[10:]),  # unknown fingerprint
        (b"someone-else", valid),  # key is not the tenant
        (None, valid),  # no key
    ]
    for key, value in garbage:
        producer.produce(s.feedback, value=value, key=key)
    assert producer.flush(30) == 0
    messages = consume(kafka_bootstrap, s.feedback, 1 + len(garbage))
    decoded: list[Feedback | str] = []
    for m in messages:
        try:
            decoded.append(decode_feedback(m.value(), key=m.key()))
        except FeedbackError as exc:
            decoded.append(type(exc).__name__)
    assert decoded[0] == good
    assert decoded[1:] == ["FeedbackError"] * 8 + [good]  # without a key there is none to check


HANDLER_MODULE = """
import fairstream

calls = {}

def handle(request):
    calls[request.request_id] = calls.get(request.request_id, 0) + 1
    if calls[request.request_id] == 1:
        raise fairstream.RateLimited(retry_after=0.05, scope="tenant")
    return fairstream.Usage(cost=int(request.payload))
"""


def run_cli_worker(
    s: Setup, workdir: Path, *flags: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    (workdir / "limitedhandler.py").write_text(HANDLER_MODULE)
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONUNBUFFERED": "1",
        "FAIRSTREAM_BOOTSTRAP": s.bootstrap,
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    log = (workdir / "worker.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fairstream",
            "worker",
            "--handler",
            "limitedhandler:handle",
            "--egress-topic",
            s.egress,
            "--dlq-topic",
            s.dlq,
            "--group-id",
            s.group,
            *flags,
        ],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )


def test_cli_worker_reports_to_the_feedback_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", "r-cli", b"12")])
    proc = run_cli_worker(s, tmp_path, "--feedback-topic", s.feedback)
    try:
        records = s.read_feedback(2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "worker.log").read_text()
    assert [(r.outcome, r.scope, r.cost) for r in records] == [
        (Outcome.RATE_LIMITED, Scope.TENANT, None),
        (Outcome.OK, None, 12),
    ]


def test_cli_no_feedback(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = FeedbackSetup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", "r-cli", b"12")])
    # --no-feedback wins over the variable.
    proc = run_cli_worker(
        s, tmp_path, "--no-feedback", env={"FAIRSTREAM_FEEDBACK_TOPIC": s.feedback}
    )
    try:
        s.wait_committed([1])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "worker.log").read_text()
    assert high_watermark(kafka_bootstrap, s.feedback) == 0


def test_topics_create_makes_the_feedback_topic(kafka_bootstrap: str) -> None:
    names = {n: unique(f"t-{n}") for n in ("ingest", "egress", "dlq", "policy", "feedback")}
    app_id = unique("t-app")
    command = [
        sys.executable,
        "-m",
        "fairstream",
        "topics",
        "create",
        "--bootstrap",
        kafka_bootstrap,
        "--ingest-topic",
        names["ingest"],
        "--egress-topic",
        names["egress"],
        "--dlq-topic",
        names["dlq"],
        "--policy-topic",
        names["policy"],
        "--feedback-topic",
        names["feedback"],
        "--app-id",
        app_id,
        "--partitions",
        "3",
    ]
    first = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stderr
    assert f"created {names['feedback']} (3 partitions)" in first.stdout
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics[names["feedback"]].partitions) == 3  # like egress
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stderr
    assert f"exists  {names['feedback']} (3 partitions)" in again.stdout


def test_every_outcome_is_reported_once_with_concurrency(kafka_bootstrap: str) -> None:
    s = FeedbackSetup(kafka_bootstrap, partitions=2)
    total = 60
    feed(
        kafka_bootstrap,
        s.egress,
        [{**egress_record(f"t{i % 6}", f"r{i}", b"x"), "partition": i % 2} for i in range(total)],
    )
    lock = threading.Lock()
    seen: set[str] = set()

    def handler(request: Request) -> Usage:
        with lock:
            first = request.request_id not in seen
            seen.add(request.request_id)
        if first:
            raise RateLimited(retry_after=0.01)
        return Usage(1 + int(request.request_id[1:]))

    with running(s.worker_with_feedback(handler, concurrency=4)) as worker:
        s.wait_committed([total // 2, total // 2])
        messages = consume(kafka_bootstrap, s.feedback, 2 * total)
    records = [decode_feedback(m.value(), key=m.key()) for m in messages]
    oks = {r.request_id: r.cost for r in records if r.outcome is Outcome.OK}
    assert oks == {f"r{i}": 1 + i for i in range(total)}
    assert sum(r.outcome is Outcome.RATE_LIMITED for r in records) == total
    assert sample(worker, "fairstream_worker_feedback_records_total") == 2 * total
