"""The broker every integration test runs against.

Order of preference: ``KAFKA_BOOTSTRAP_SERVERS`` if set; else the apache/kafka image through
testcontainers when a Docker engine answers; else the development broker (``fairstream-dev
kafka``: Apache Kafka jars from Maven Central, run with the machine's Java), started here
and stopped at the end if this session started it. Under ``CI=true`` a missing broker fails
the run instead of skipping it.

Workers of pytest-xdist (``-n``) each run a session of their own: a broker one of them
started would stop with that worker while the others still use it. They need the broker
started before them, as ``make test`` does (``fairstream-dev kafka up``, then
``KAFKA_BOOTSTRAP_SERVERS``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairstream_dev.harness.scheduler import SchedulerProcess
from fairstream_dev.kafka import KAFKA_VERSION, BrokerError, DevBroker, answers_metadata
from fairstream_dev.kafka.docker_engine import docker_available
from fairstream_dev.kafka.local_engine import version_tuple

SCHEDULER_LOG_LINES = 120  # of each scheduler's log, shown when a test fails


def _no_broker(reason: str) -> None:
    message = f"no Kafka broker for integration tests: {reason}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A bootstrap address (host:port) of a real Apache Kafka broker."""
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if given:
        if not answers_metadata(given, timeout=10):
            _no_broker(f"KAFKA_BOOTSTRAP_SERVERS={given} does not answer a metadata request")
        yield given
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(
            "integration tests on pytest-xdist workers need a broker started before them: "
            "run `make test`, or `fairstream-dev kafka up` and set KAFKA_BOOTSTRAP_SERVERS "
            "to the address it prints",
            pytrace=False,
        )
    if docker_available():
        state_dir = Path(tempfile.mkdtemp(prefix="fairstream-tc-"))
        broker = DevBroker(state_dir=state_dir)
        try:
            state = broker.up(engine="docker")
        except BrokerError as exc:
            _no_broker(f"testcontainers could not start apache/kafka: {exc}")
        yield state.bootstrap
        broker.down()
        return
    broker = DevBroker()
    already = broker.status()
    try:
        state = already or broker.up(engine="local")
    except BrokerError as exc:
        _no_broker(str(exc))
    yield state.bootstrap
    if already is None:
        broker.down()


# Share groups (KIP-932) are production-ready from Apache Kafka 4.2.
SHARE_KAFKA_VERSION = "4.4.0"


@pytest.fixture(scope="session")
def share_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """A broker with share groups: ``KAFKA_SHARE_BOOTSTRAP_SERVERS`` if set; the session's
    development broker when it is of 4.2 or later (the default); else a development broker
    of ``SHARE_KAFKA_VERSION`` of its own, beside the session's."""
    given = os.environ.get("KAFKA_SHARE_BOOTSTRAP_SERVERS")
    if given:
        if not answers_metadata(given, timeout=10):
            _no_broker(f"KAFKA_SHARE_BOOTSTRAP_SERVERS={given} does not answer")
        yield given
        return
    if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and version_tuple(KAFKA_VERSION) >= (4, 2):
        yield request.getfixturevalue("kafka_bootstrap")
        return
    base = os.environ.get("FAIRSTREAM_DEV_KAFKA_DIR")
    state_dir = Path(f"{base}-share") if base else None
    broker = DevBroker(state_dir=state_dir, kafka_version=SHARE_KAFKA_VERSION)
    if state_dir is None:
        broker = DevBroker(
            state_dir=broker.state_dir.parent / f"dev-kafka-{SHARE_KAFKA_VERSION}",
            kafka_version=SHARE_KAFKA_VERSION,
        )
    already = broker.status()
    try:
        state = already or broker.up(engine="local")
    except BrokerError as exc:
        _no_broker(f"Apache Kafka {SHARE_KAFKA_VERSION} for share groups: {exc}")
    yield state.bootstrap
    if already is None:
        broker.down()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    SchedulerProcess.forget_started()  # before the test's fixtures start any


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test shows the log tails of the schedulers it started: a stall or a fatal
    error inside a scheduler process is otherwise invisible in the test's report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and call.when == "call":
        for process in SchedulerProcess.started:
            report.sections.append(
                (f"scheduler log {process.log_path}", process.tail(SCHEDULER_LOG_LINES))
            )
