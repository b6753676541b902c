"""The SDK against a SASL/SCRAM broker with a wrong password: ``fairstream.Producer``,
``fairstream.Worker``, ``fairstream submit`` and ``fairstream worker`` stop with the broker's
reason instead of retrying until their timeouts (forever, for a worker).

The broker is a SASL development broker of this module's own, started the way
``test_sasl.py`` starts its one.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairstream import KafkaAuthenticationError, Producer, Worker
from fairstream.adapters.admin import create_topics
from fairstream.config import KafkaConnection, Topics
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.kafka import SCRAM_MECHANISM, BrokerError, DevBroker

REPO = Path(__file__).resolve().parents[2]
USER = "fairstream-sdk"
PASSWORD = "pw-" + secrets.token_urlsafe(12)
WRONG = "not-the-password"


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnection]:
    # A SASL broker of its own even when KAFKA_BOOTSTRAP_SERVERS names one for the other
    # tests: that one has no SCRAM user. Without Java this fails under CI=true, else skips.
    broker = DevBroker(state_dir=tmp_path_factory.mktemp("sdk-sasl-broker"), log=lambda _: None)
    try:
        state = broker.up(engine="local", sasl=True, sasl_user=USER, sasl_password=PASSWORD)
    except BrokerError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"no SASL development broker: {exc}", pytrace=False)
        pytest.skip(f"no SASL development broker: {exc}")
    try:
        yield KafkaConnection(
            bootstrap=state.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=SCRAM_MECHANISM,
            sasl_username=USER,
            sasl_password=PASSWORD,
        )
    finally:
        broker.down()


@pytest.fixture(scope="module")
def topics(sasl_kafka: KafkaConnection) -> Topics:
    names = Topics(
        ingest=unique("auth-ingest"),
        egress=unique("auth-egress"),
        dlq=unique("auth-dlq"),
        policy=unique("auth-policy"),
    )
    create_topics(sasl_kafka, names, partitions=1, app_id=unique("auth-app"))
    return names


def wrong_password(kafka: KafkaConnection) -> KafkaConnection:
    return KafkaConnection(
        bootstrap=kafka.bootstrap,
        security_protocol=kafka.security_protocol,
        sasl_mechanism=kafka.sasl_mechanism,
        sasl_username=kafka.sasl_username,
        sasl_password=WRONG,
    )


def assert_refused(error: BaseException | str) -> None:
    text = str(error)
    assert "authentication failed" in text.lower(), text
    assert "invalid credentials" in text.lower(), text  # the broker's own reason
    assert WRONG not in text


def test_producer_fails_fast_on_a_wrong_password(
    sasl_kafka: KafkaConnection, topics: Topics
) -> None:
    # Control: the right password delivers.
    with Producer(sasl_kafka, topics.ingest) as producer:
        producer.submit("acme", b"fine")
    assert producer.delivered == 1

    refused = Producer(wrong_password(sasl_kafka), topics.ingest)
    refused.submit("acme", b"never delivered")
    # Without the fail-fast path this waits the whole timeout and returns 1 (still queued).
    with pytest.raises(KafkaAuthenticationError) as info:
        refused.flush(timeout=120)
    assert_refused(info.value)
    with pytest.raises(KafkaAuthenticationError):  # and nothing more is queued
        refused.submit("acme", b"x")

    # As a context manager: the error leaves the with block at once.
    with (
        pytest.raises(KafkaAuthenticationError) as info,
        Producer(wrong_password(sasl_kafka), topics.ingest) as producer,
    ):
        producer.submit("acme", b"never delivered")
    assert_refused(info.value)


def test_worker_fails_fast_on_a_wrong_password(sasl_kafka: KafkaConnection, topics: Topics) -> None:
    worker = Worker(
        lambda request: None,
        bootstrap=wrong_password(sasl_kafka),
        egress_topic=topics.egress,
        dlq_topic=topics.dlq,
        group_id=unique("auth-workers"),
    )
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        # Without the fail-fast path run() never returns: librdkafka retries the login.
        wait_until(lambda: not thread.is_alive(), 60, "Worker.run() ending on refused login")
    finally:
        worker.stop()
        thread.join(30)
    assert len(errors) == 1, errors
    assert isinstance(errors[0], KafkaAuthenticationError), errors
    assert_refused(errors[0])


def fairstream(*args: str, kafka: KafkaConnection) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSTREAM_")}
    env = {
        **clean,
        "FAIRSTREAM_BOOTSTRAP": kafka.bootstrap,
        "FAIRSTREAM_SECURITY_PROTOCOL": kafka.security_protocol,
        "FAIRSTREAM_SASL_MECHANISM": kafka.sasl_mechanism or "",
        "FAIRSTREAM_SASL_USERNAME": kafka.sasl_username or "",
        "FAIRSTREAM_SASL_PASSWORD": kafka.sasl_password or "",
    }
    return subprocess.run(
        [sys.executable, "-m", "fairstream", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_submit_and_worker_commands_fail_fast_on_a_wrong_password(
    sasl_kafka: KafkaConnection, topics: Topics
) -> None:
    wrong = wrong_password(sasl_kafka)
    submit = fairstream(
        "submit",
        "--tenant",
        "acme",
        "--payload",
        "x",
        "--ingest-topic",
        topics.ingest,
        "--timeout",
        "100",
        kafka=wrong,
    )
    assert submit.returncode == 1, submit.stderr
    assert "Traceback" not in submit.stderr
    assert_refused(submit.stderr)

    # json:dumps is a callable that takes one argument: the handler is never called anyway.
    worker = fairstream(
        "worker",
        "--handler",
        "json:dumps",
        "--egress-topic",
        topics.egress,
        "--dlq-topic",
        topics.dlq,
        "--group-id",
        unique("auth-cli"),
        kafka=wrong,
    )
    assert worker.returncode == 1, worker.stderr
    assert "Traceback" not in worker.stderr
    assert_refused(worker.stderr)
