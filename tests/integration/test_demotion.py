"""Automatic demotion on the real broker: a flooding tenant is demoted one class, a quiet
tenant's burst arriving meanwhile goes out ahead of the flood's queued records, and once the
flood has drained and the quiet period passed, the flooding tenant is promoted back.

Judged on the egress order (the ``fairstream-scheduled-ms`` stamps), counted in records,
never in seconds: ``--rate`` keeps a backlog, so a loaded machine emits the same order. The
demotions and promotions it counts are not: a tenant's share is taken over a window of
seconds (``--demote-window``), and a scheduler slowed by tests beside it emits fewer of the
flood's records in it. On four xdist workers the quiet burst once made 52% of such a window
and was demoted too, so this test runs alone (``serial``).
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.policies import departures

pytestmark = [pytest.mark.integration, pytest.mark.serial]

PARTITIONS = 4
NOISY, QUIET = b"flood", b"calm"
FLOOD, BURST = 1500, 50  # records: 7.5 s of the test's --rate 200, and a quarter of a second
# Flood records that may go out among the quiet burst's records: the burst reaches the
# scheduler in one or a few fetches, and a flood record may take the slots between two.
# Without demotion the two tenants would alternate (about BURST of the flood's).
INTERLEAVED_AT_MOST = 5


def metric(scheduler: SchedulerProcess, name: str) -> float:
    status, text = scheduler.get("/metrics")
    assert status == 200, text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def demoted(scheduler: SchedulerProcess) -> dict[str, bool]:
    """Each listed tenant's ``demoted`` flag in ``/tenants``."""
    status, body = scheduler.get("/tenants")
    assert status == 200, body
    return {row["tenant"]: row["demoted"] for row in json.loads(body)["tenants"]}


def test_a_flood_is_demoted_a_quiet_burst_goes_first_and_the_flood_is_promoted_back(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # The two tenants read from ingest partitions of their own (librdkafka's default
    # partitioner: CRC32 of the key), so the quiet burst is not behind the flood in the log.
    assert zlib.crc32(NOISY) % PARTITIONS != zlib.crc32(QUIET) % PARTITIONS
    deployment = Deployment(kafka_bootstrap, partitions=PARTITIONS).create()
    scheduler = (
        SchedulerProcess(
            deployment,
            tmp_path,
            "--rate",
            "200",
            "--demote-share",
            "0.5",
            "--demote-window",
            "2",
            "--demote-quiet",
            "2",
        )
        .start()
        .wait_ready()
    )
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    try:
        assert metric(scheduler, "fairstream_noisy_tenants") == 0
        for i in range(FLOOD):
            producer.produce(deployment.topics.ingest, key=NOISY, value=b"flood-%d" % i)
        assert producer.flush(30) == 0

        # The flood takes all of the egress: it is noisy, one class down.
        def flood_demoted() -> bool:
            egress.poll(0)
            return metric(scheduler, "fairstream_noisy_tenants") == 1

        wait_until(flood_demoted, 30, lambda: f"the flood demoted:\n{scheduler.tail()}")
        assert demoted(scheduler).get(NOISY.decode()) is True
        assert metric(scheduler, "fairstream_demotions_total") == 1
        # Its queued records are the noisy tenant's: no quiet tenant's record waits.
        assert metric(scheduler, "fairstream_oldest_quiet_record_age_seconds") == 0
        flood_left = FLOOD - len(egress.messages)
        assert flood_left > 5 * BURST, "the flood drained before the quiet burst arrived"

        for i in range(BURST):
            producer.produce(deployment.topics.ingest, key=QUIET, value=b"calm-%d" % i)
        assert producer.flush(30) == 0

        def drained() -> bool:
            egress.poll()
            return len(egress.messages) >= FLOOD + BURST

        wait_until(drained, 60, lambda: f"everything emitted (have {len(egress.messages)})")

        # Promoted once the window holds none of its egress and it has been quiet 2 s.
        def promoted() -> bool:
            return metric(scheduler, "fairstream_noisy_tenants") == 0

        wait_until(promoted, 30, lambda: f"the flood promoted back:\n{scheduler.tail()}")
        assert metric(scheduler, "fairstream_promotions_total") == 1
        assert demoted(scheduler).get(NOISY.decode()) is False
    finally:
        egress.close()
        scheduler.terminate()

    order = [m.key() for m in departures(egress)]
    assert order.count(NOISY) == FLOOD
    assert order.count(QUIET) == BURST
    first, last = order.index(QUIET), len(order) - 1 - order[::-1].index(QUIET)
    between = order[first : last + 1].count(NOISY)
    after = order[last + 1 :].count(NOISY)
    print(
        f"\nquiet burst of {BURST}: emitted as records {first} to {last} of egress, with "
        f"{between} flood records among them (the two alternating: about {BURST}); "
        f"{after} of the flood's records were still queued behind it"
    )
    # The quiet burst went out ahead of the flood's queued records, not alternating with them:
    # of the flood's records after the burst's first one, at most a few came before its last.
    assert between <= INTERLEAVED_AT_MOST, order[first : last + 1]
    assert after >= 4 * BURST
    # The flood kept its order throughout.
    values = [m.value() for m in departures(egress) if m.key() == NOISY]
    assert values == [b"flood-%d" % i for i in range(FLOOD)]
