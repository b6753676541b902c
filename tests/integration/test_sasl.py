"""Authenticated Kafka: a SASL_PLAINTEXT / SCRAM-SHA-256 development broker of its own, and
the scheduler (librdkafka), fairstream.Producer and fairstream.Worker logging in to
it; wrong credentials fail fast with the broker's reason.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairstream import Producer, Request, Worker, wire
from fairstream.adapters.admin import create_topics
from fairstream.config import KafkaConnection
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.scheduler import (
    REPO,
    Deployment,
    SchedulerProcess,
    TopicReader,
    unique_topics,
)
from fairstream_dev.kafka import SCRAM_MECHANISM, BrokerError, DevBroker
from tests.integration.exactly_once import read_to_end

USER = "fairstream-test"
PASSWORD = "pw-" + secrets.token_urlsafe(12)


def sasl_env(kafka: KafkaConnection, password: str | None = None) -> dict[str, str]:
    """The FAIRSTREAM_* variables that make any fairstream command log in."""
    return {
        "FAIRSTREAM_BOOTSTRAP": kafka.bootstrap,
        "FAIRSTREAM_SECURITY_PROTOCOL": kafka.security_protocol,
        "FAIRSTREAM_SASL_MECHANISM": kafka.sasl_mechanism or "",
        "FAIRSTREAM_SASL_USERNAME": kafka.sasl_username or "",
        "FAIRSTREAM_SASL_PASSWORD": password or kafka.sasl_password or "",
    }


@pytest.fixture(scope="module")
def sasl_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DevBroker, KafkaConnection]]:
    # A SASL broker of its own even when KAFKA_BOOTSTRAP_SERVERS names one for the other
    # tests: that one has no SCRAM user. Without Java this fails under CI=true, else skips.
    broker = DevBroker(state_dir=tmp_path_factory.mktemp("sasl-broker"), log=lambda _: None)
    try:
        state = broker.up(engine="local", sasl=True, sasl_user=USER, sasl_password=PASSWORD)
    except BrokerError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no SASL development broker: {exc}", pytrace=False)
        pytest.skip(f"no SASL development broker: {exc}")
    try:
        yield (
            broker,
            KafkaConnection(
                bootstrap=state.bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=SCRAM_MECHANISM,
                sasl_username=USER,
                sasl_password=PASSWORD,
            ),
        )
    finally:
        broker.down()


def fairstream(
    *args: str, env: dict[str, str], timeout: float = 60, module: str = "fairstream"
) -> subprocess.CompletedProcess[str]:
    """``python -m fairstream ARGS`` (or another ``module``) with only ``env``'s FAIRSTREAM_*."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_reference_scenario_with_sasl(
    sasl_broker: tuple[DevBroker, KafkaConnection], tmp_path: Path
) -> None:
    _, kafka = sasl_broker
    deployment = Deployment(kafka.bootstrap, topics=unique_topics())
    created = fairstream(
        "topics",
        "create",
        "--partitions",
        "4",
        "--app-id",
        deployment.app_id,
        "--ingest-topic",
        deployment.topics.ingest,
        "--egress-topic",
        deployment.topics.egress,
        "--dlq-topic",
        deployment.topics.dlq,
        "--policy-topic",
        deployment.topics.policy,
        env=sasl_env(kafka),
    )
    assert created.returncode == 0, created.stderr
    assert f"created {deployment.topics.ingest} (4 partitions)" in created.stdout

    # The backlog is in the ingest topic before the scheduler starts (as after a restart),
    # so its first decisions see all three tenants: how fast B's and C's records would
    # overtake A's in a live start depends on the machine's load, not on the scheduler.
    # --burst 1: one record every 50 ms, the round robin of the reference articles.
    with Producer(kafka, deployment.topics.ingest) as producer:
        for i in range(100):
            producer.submit("A", b"A%d" % i)
        assert producer.flush(30) == 0
        producer.submit("B", b"B1")
        producer.submit("C", b"C1")
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "20", "--burst", "1", env=sasl_env(kafka)
    )
    handled: list[Request] = []
    lock = threading.Lock()

    def handle(request: Request) -> None:
        with lock:
            handled.append(request)

    worker = Worker(
        handle,
        bootstrap=kafka,
        egress_topic=deployment.topics.egress,
        dlq_topic=deployment.topics.dlq,
        group_id=unique("sasl-workers"),
        commit_interval=0.2,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    egress = TopicReader(kafka.bootstrap, deployment.topics.egress, kafka.librdkafka())
    try:
        scheduler.start().wait_ready()
        thread.start()
        wait_until(lambda: len(handled) >= 102, 60, lambda: f"102 handled (have {len(handled)})")
        egress.read_until(102, timeout=30)
        worker.stop()
        thread.join(60)
        assert not thread.is_alive(), "worker did not stop"
        assert scheduler.terminate() == 0, scheduler.tail()
        # Everything egress will ever hold: anything beyond 102 would be a duplicate.
        messages = read_to_end(
            kafka.bootstrap,
            egress,
            deployment.topics.egress,
            deployment.partitions,
            config=kafka.librdkafka(),
        )
    finally:
        worker.stop()
        thread.join(60)
        egress.close()
        if scheduler.alive():
            scheduler.kill()

    assert len(messages) == 102, f"egress holds {len(messages)} records, not 102"
    records = sorted(handled, key=lambda r: r.scheduled_ms or 0)
    order = [(r.tenant, r.payload) for r in records]
    print("\nfirst departures over SASL:", order[:5])
    assert len(order) == 102
    assert len({r.request_id for r in records}) == 102, "each record exactly once"
    assert ("B", b"B1") in order[:4]
    assert ("C", b"C1") in order[:4]
    assert [p for t, p in order if t == "A"] == [b"A%d" % i for i in range(100)]
    assert all(r.header(wire.TENANT) == r.tenant.encode() for r in records)
    # The password never reaches the scheduler's log.
    assert PASSWORD not in scheduler.log_path.read_text(errors="replace")


def test_wrong_credentials_fail_fast(
    sasl_broker: tuple[DevBroker, KafkaConnection], tmp_path: Path
) -> None:
    _, kafka = sasl_broker
    wrong = sasl_env(kafka, password="not-the-password")

    started = time.monotonic()
    result = fairstream("topics", "create", "--ingest-topic", unique("never"), env=wrong)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "authentication failed" in result.stderr.lower(), result.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s"
    assert "not-the-password" not in result.stdout + result.stderr

    # Valid topics, wrong password: the scheduler exits before it starts emitting.
    topics = unique_topics()
    create_topics(kafka, topics, partitions=1, app_id=unique("app"))
    started = time.monotonic()
    result = fairstream(
        "scheduler",
        "--ingest-topic",
        topics.ingest,
        "--data-dir",
        str(tmp_path / "data"),
        "--web-port",
        "0",
        env=wrong,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "authentication failed" in result.stderr.lower(), result.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s"

    # A password-less SASL configuration is refused before any connection.
    missing = fairstream("tenants", "list", env={**wrong, "FAIRSTREAM_SASL_PASSWORD": ""})
    assert missing.returncode == 2
    assert "needs --sasl-password" in missing.stderr


def test_dev_kafka_keeps_the_password_out_of_sight(
    sasl_broker: tuple[DevBroker, KafkaConnection],
) -> None:
    broker, kafka = sasl_broker
    assert stat.S_IMODE(broker.sasl_password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((broker.state_dir / "server.properties").stat().st_mode) == 0o600
    status = fairstream(
        "kafka", "status", "--json", "--dir", str(broker.state_dir), env={}, module="fairstream_dev"
    )
    assert status.returncode == 0, status.stderr
    described = json.loads(status.stdout)
    assert described["sasl_username"] == USER
    assert described["security_protocol"] == "SASL_PLAINTEXT"
    assert PASSWORD not in status.stdout
    credentials = fairstream(
        "kafka", "credentials", "--dir", str(broker.state_dir), env={}, module="fairstream_dev"
    )
    assert f"export FAIRSTREAM_SASL_PASSWORD={PASSWORD}" in credentials.stdout.splitlines()
    assert f"export FAIRSTREAM_BOOTSTRAP={kafka.bootstrap}" in credentials.stdout.splitlines()
