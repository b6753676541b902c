"""One process per data directory: the lock, and two schedulers on the defaults.

A second scheduler given a data directory another live scheduler holds must exit non-zero
at once, naming the first (its pid), instead of fencing it. Two schedulers started with
the default data directory on one host (only their web ports differ) must both work: each
takes a slot of the default directory, with an identity of its own, and egress holds every
record exactly once (read_committed).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import (
    LoadProducer,
    all_seen,
    exactly_once_report,
    read_to_end,
)

pytestmark = pytest.mark.integration


class DefaultDirScheduler(SchedulerProcess):
    """A scheduler without ``--data-dir``: the per-user default, under ``XDG_DATA_HOME``."""

    def command(self) -> list[str]:
        command = super().command()
        at = command.index("--data-dir")
        return command[:at] + command[at + 2 :]


def test_a_second_scheduler_on_a_data_dir_in_use_exits_naming_the_first(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    first = SchedulerProcess(deployment, tmp_path, "--rate", "100", name="first")
    second = SchedulerProcess(deployment, tmp_path, "--rate", "100", name="second")
    second.data_dir = first.data_dir
    try:
        first.start().wait_ready()
        second.start()
        wait_until(lambda: not second.alive(), 30, "the second scheduler exits", interval=0.1)
        assert second.proc is not None
        assert first.proc is not None
        code = second.proc.returncode
        log = second.log_path.read_text(errors="replace")
        # The first one is untouched: still ready, its identity its own.
        assert first.get("/readyz")[0] == 200
        assert first.alive()
        assert first.terminate() == 0, first.tail()
    finally:
        for process in (first, second):
            if process.alive():
                process.kill()
    print(f"\nsecond scheduler on {first.data_dir}: exit {code}: {log.strip()[-300:]}")
    assert code not in (0, None)
    assert f"the data directory {first.data_dir} is in use" in log
    assert f"pid {first.proc.pid} on host " in log
    assert "fenced" not in log.lower()


def test_two_schedulers_with_the_default_data_dir_both_work(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    partitions = 4
    deployment = Deployment(kafka_bootstrap, partitions=partitions).create()
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    default = tmp_path / "xdg" / "fairstream"
    args = ("--rate", "400")
    first = DefaultDirScheduler(deployment, tmp_path, *args, name="first", env=env)
    second = DefaultDirScheduler(deployment, tmp_path, *args, name="second", env=env)
    egress = TopicReader(deployment.bootstrap, deployment.topics.egress)
    load = LoadProducer(kafka_bootstrap, deployment.topics.ingest, tenants=10, per_second=300)
    try:
        first.start().wait_ready()
        second.start().wait_ready()
        load.start()
        egress.read_until(600, timeout=60)
        expected = load.stop()
        wait_until(lambda: all_seen(egress, expected), 120, "every record reaches egress")
        assert first.alive(), first.tail()
        assert second.alive(), second.tail()
        assert first.terminate() == 0, first.tail()
        assert second.terminate() == 0, second.tail()
        messages = read_to_end(kafka_bootstrap, egress, deployment.topics.egress, partitions)
    finally:
        load.halt()
        egress.close()
        for process in (first, second):
            if process.alive():
                process.kill()
    assert first.proc is not None
    assert second.proc is not None
    holders = {
        json.loads((directory / "lock").read_text())["pid"]: directory
        for directory in (default, default / "instance-1")
    }
    identities = {(d / "instance-id").read_text() for d in holders.values()}
    duplicates, missing, unexpected, disorder = exactly_once_report(messages, expected, load.sent)
    print(
        f"\ntwo schedulers on the default data dir: slots {sorted(map(str, holders.values()))}, "
        f"{len(messages)} of {len(expected)} on egress, {duplicates} duplicates, "
        f"{missing} missing"
    )
    assert set(holders) == {first.proc.pid, second.proc.pid}
    assert len(identities) == 2
    assert "fenced" not in first.log_path.read_text(errors="replace").lower()
    assert "fenced" not in second.log_path.read_text(errors="replace").lower()
    assert duplicates == missing == unexpected == 0
    assert not disorder, disorder[:3]


def test_a_web_port_in_use_fails_before_joining_the_group(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "100")
    taken = socket.socket()
    taken.bind(("127.0.0.1", scheduler.web_port))
    taken.listen()
    try:
        scheduler.start()
        wait_until(lambda: not scheduler.alive(), 60, "the scheduler exits", interval=0.1)
        assert scheduler.proc is not None
        code = scheduler.proc.returncode
        log = scheduler.log_path.read_text(errors="replace")
    finally:
        taken.close()
        if scheduler.alive():
            scheduler.kill()
    print(f"\nweb port in use: exit {code}: {log.strip().splitlines()[-1][:200]}")
    assert code == 2
    assert f"the web port {scheduler.web_port} on 127.0.0.1 is in use" in log
    assert "assigned ingest partitions" not in log
