"""Static membership by default: a restart on the same disk rejoins as the same member.

With the default settings (no ``--group-instance-id``), a scheduler joins its consumer group
under the identity kept in its data directory (``group.instance.id``). After a kill -9, a
new process on the same data directory rejoins as that member: the coordinator gives it its
partitions back at once, with no rebalance and no wait for the dead run's session to time
out. The session timeout here is 60 s, so a restart that had to wait for it could not be
ready and emitting within the test's 30 s. The coordinator sees one member, under that id.
With ``--membership dynamic``, no ``group.instance.id`` is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess
from tests.integration.exactly_once import LoadProducer

pytestmark = pytest.mark.integration

SESSION_TIMEOUT = "60"  # s: what a restart that is not a static rejoin would wait for


def members(bootstrap: str, group: str) -> list[Any]:
    """The members of ``group`` as its coordinator describes them now."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return list(description.members)


def test_a_kill_9_and_a_restart_on_the_same_disk_rejoin_as_the_same_member(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4).create()
    args = ("--rate", "200", "--session-timeout", SESSION_TIMEOUT)

    def start() -> SchedulerProcess:
        # The same name: the same data dir, the same instance restarted; no instance id given.
        return SchedulerProcess(deployment, tmp_path, *args, name="sched").start()

    scheduler = start().wait_ready()
    identity = (scheduler.data_dir / "instance-id").read_text().strip()
    load = LoadProducer(kafka_bootstrap, deployment.topics.ingest, tenants=8, per_second=100)
    load.start()
    try:
        (member,) = members(kafka_bootstrap, deployment.app_id)
        assert member.group_instance_id == identity
        emitted = scheduler.metric("fairstream_egress_records_total") or 0.0
        wait_until(
            lambda: (scheduler.metric("fairstream_egress_records_total") or 0.0) > emitted,
            30,
            lambda: f"the first run emits; log:\n{scheduler.tail()}",
        )
        scheduler.kill()  # no LeaveGroup, no commit: the member's session goes on
        scheduler = start()
        # Ready and emitting again well inside the dead run's session timeout: only a static
        # rejoin gets the partitions that soon.
        scheduler.wait_ready(timeout=30)
        wait_until(
            lambda: (scheduler.metric("fairstream_egress_records_total") or 0.0) > 0,
            30,
            lambda: f"the restarted run emits; log:\n{scheduler.tail()}",
        )
        assert (scheduler.metric("fairstream_assigned_partitions") or 0) == 4
        (member,) = members(kafka_bootstrap, deployment.app_id)
        assert member.group_instance_id == identity
        assert len(member.assignment.topic_partitions) == 4
    finally:
        load.halt()
        if scheduler.alive():
            scheduler.kill()


def test_dynamic_membership_joins_without_an_instance_id(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "100", "--membership", "dynamic", name="dyn"
    )
    try:
        scheduler.start().wait_ready()
        (member,) = members(kafka_bootstrap, deployment.app_id)
        assert member.group_instance_id is None
        assert scheduler.terminate() == 0, scheduler.tail()
    finally:
        if scheduler.alive():
            scheduler.kill()
