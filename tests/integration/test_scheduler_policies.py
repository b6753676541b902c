"""Live tenant policies through the policy topic: weights, a weight change, pause, purge.

Shares are read off the egress in the order the scheduler emitted it, over windows counted
in records (from the record written after the policy change on), not over seconds: a loaded
machine emits fewer records a second, but the same order.
"""

from __future__ import annotations

import time
from pathlib import Path

from fairstream import wire
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.exactly_once import read_to_end, start_ms
from tests.integration.policies import departures, produce, scheduled_s, set_policy

# A policy change reaches the scheduler through the policy topic: within this many records
# emitted after it was written, it has taken effect (2 s at the test's --rate 100).
TAKES_EFFECT_WITHIN = 200


def drift(keys: list[bytes], ratio: int) -> int:
    """The largest ``|heavy - ratio * light|`` over the prefixes of ``keys``: how far the
    served counts get from ``ratio``:1 (a round of the two tenants' weights keeps it small)."""
    heavy = light = worst = 0
    for key in keys:
        if key == b"heavy":
            heavy += 1
        else:
            light += 1
        worst = max(worst, abs(heavy - ratio * light))
    return worst


def holds_from(keys: list[bytes], ratio: int, bound: int) -> int:
    """The first index from which the served counts stay within ``bound`` of ``ratio``:1 up
    to the end of ``keys``."""
    return next(k for k in range(len(keys) + 1) if drift(keys[k:], ratio) <= bound)


def test_weights_weight_change_and_pause(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4).create()
    policy_topic = deployment.topics.policy
    set_policy(kafka_bootstrap, policy_topic, b"heavy", weight=3)
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "100", "--burst", "1")
    scheduler.start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        try:
            produce(kafka_bootstrap, deployment.topics.ingest, [b"heavy", b"light"], 1000)
            egress.read_until(300, timeout=30)

            # Phase 1, weights 3 and 1: served cost stays within one round of 3:1.
            first = [m.key() for m in departures(egress)[20:300]]
            worst = drift(first, 3)
            heavy, light = first.count(b"heavy"), first.count(b"light")
            print(f"\nweights 3:1 -> {heavy}:{light}, largest lead over 3:1 {worst}")
            assert worst <= 4, "more than one round (3 + 1 records) away from 3:1"

            # Phase 2: light gets weight 3 too. Within TAKES_EFFECT_WITHIN records the served
            # counts turn 1:1 and stay within one round (3 + 3 records) of it for 150 records.
            changed_at = set_policy(kafka_bootstrap, policy_topic, b"light", weight=3)

            def after(written_at: float) -> list[bytes]:
                egress.poll()
                return [m.key() for m in departures(egress) if scheduled_s(m) > written_at]

            def told(written_at: float) -> str:
                keys = after(written_at)
                return (
                    f"{len(keys)} records since, {keys.count(b'heavy')} heavy's; within a round of "
                    f"1:1 from record {holds_from(keys, 1, 3)} on; the last 12: {keys[-12:]}"
                )

            def balanced() -> tuple[int, list[bytes]] | None:
                keys = after(changed_at)
                start = holds_from(keys, 1, 3)
                return (start, keys) if len(keys) - start >= 150 else None

            start, keys = wait_until(
                balanced,
                30,
                lambda: f"150 records within a round of 1:1 after the change: {told(changed_at)}",
                interval=0,
            )
            print(f"after the change: 1:1 from its record {start} on, {len(keys) - start} records")
            assert start <= TAKES_EFFECT_WITHIN, "the weight change took effect late"

            # Phase 3: pause heavy: within TAKES_EFFECT_WITHIN records nothing of it goes out
            # any more (100 records in a row all light's), and it keeps its backlog.
            paused_at = set_policy(kafka_bootstrap, policy_topic, b"heavy", weight=3, paused=True)

            def light_only() -> tuple[int, list[bytes]] | None:
                keys = after(paused_at)
                stop = max((i + 1 for i, key in enumerate(keys) if key == b"heavy"), default=0)
                return (stop, keys) if len(keys) - stop >= 100 else None

            stop, keys = wait_until(
                light_only,
                30,
                lambda: f"100 of light's records in a row after the pause: {told(paused_at)}",
                interval=0,
            )
            print(f"paused: heavy's last record was the {stop}th after the pause")
            assert stop <= TAKES_EFFECT_WITHIN, "the pause took effect late"
            _, metrics = scheduler.get("/metrics")
            assert 'fairstream_tenant_backlog_records{tenant="heavy"}' in metrics

            # Phase 4: resume: heavy flows again.
            resumed_at = set_policy(kafka_bootstrap, policy_topic, b"heavy", weight=3)

            def heavy_again() -> bool:
                egress.poll()
                return any(
                    m.key() == b"heavy" and scheduled_s(m) > resumed_at for m in egress.messages
                )

            wait_until(heavy_again, 10, "heavy flows again after resume", interval=0)
        finally:
            scheduler.terminate()
        # Everything it emitted, read to the end: the reader stopped once heavy flowed again,
        # maybe before it fetched heavy's last records on every egress partition.
        messages = read_to_end(kafka_bootstrap, egress, deployment.topics.egress, 4)
    finally:
        egress.close()
    # Its start order: spread over the egress partitions, its records carry their stamps.
    heavy = sorted((m for m in messages if m.key() == b"heavy"), key=start_ms)
    heavy_values = [m.value() for m in heavy]
    assert heavy_values == [b"heavy-%d" % i for i in range(len(heavy_values))]


def test_purge_moves_the_backlog_to_the_dead_letter_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "20").start().wait_ready()
    dlq = TopicReader(kafka_bootstrap, deployment.topics.dlq)
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        produce(kafka_bootstrap, deployment.topics.ingest, [b"doomed", b"kept"], 200)
        egress.read_until(10, timeout=30)
        set_policy(
            kafka_bootstrap,
            deployment.topics.policy,
            b"doomed",
            purge_before_ms=int(time.time() * 1000),
        )

        doomed = {b"doomed-%d" % i for i in range(200)}

        def gone_one_way_or_the_other() -> set[bytes]:
            dlq.poll()
            egress.poll()
            return {m.value() for m in [*dlq.messages, *egress.messages]} & doomed

        wait_until(
            lambda: gone_one_way_or_the_other() == doomed,
            30,
            lambda: f"the doomed records in egress or the DLQ: {len(gone_one_way_or_the_other())}",
            interval=0,
        )
        assert scheduler.terminate() == 0, scheduler.tail()
        # Everything the two topics will ever hold, so that no late duplicate goes unseen.
        letters = read_to_end(kafka_bootstrap, dlq, deployment.topics.dlq, 2)
        messages = read_to_end(kafka_bootstrap, egress, deployment.topics.egress, 2)
    finally:
        egress.close()
        dlq.close()
        if scheduler.alive():
            scheduler.kill()
    assert all(m.key() == b"doomed" for m in letters)
    assert all(dict(m.headers())[wire.DLQ_REASON] == wire.PURGED.encode() for m in letters)
    emitted = [m.value() for m in messages if m.key() == b"doomed"]
    dead = [m.value() for m in letters]
    print(f"\npurge: {len(emitted)} of doomed's records emitted before it, {len(dead)} purged")
    assert len(dead) >= 150, "the backlog went to the dead-letter topic"
    # Every doomed record went exactly one way, once: egress before the purge, or the DLQ.
    assert sorted(emitted + dead) == sorted(doomed)
