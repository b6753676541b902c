"""Tenant policies written to a scheduler's policy topic, load for its ingest topic, and its
egress read back in the order the scheduler emitted it: shared by the scheduler tests that set
weights and pauses (test_scheduler_policies, test_top, test_console, test_group_shares).
"""

from __future__ import annotations

import time

from confluent_kafka import Message, Producer

from fairstream import wire
from fairstream.core import TenantPolicy
from fairstream.wire.policy import PolicyRecord, encode_policy
from fairstream_dev.harness.scheduler import TopicReader


def set_policy(bootstrap: str, topic: str, tenant: bytes, **fields: object) -> float:
    """Write a tenant's policy as `fairstream tenants set` would; returns the time written."""
    now_ms = int(time.time() * 1000)
    purge = fields.pop("purge_before_ms", None)
    record = PolicyRecord(TenantPolicy(**fields), updated_at_ms=now_ms, purge_before_ms=purge)  # type: ignore[arg-type]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, key=tenant, value=encode_policy(record))
    assert producer.flush(30) == 0
    return time.time()


def produce(bootstrap: str, topic: str, tenants: list[bytes], count: int) -> None:
    """``count`` records of each tenant, round robin: ``b"<tenant>-<i>"``."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    for i in range(count):
        for tenant in tenants:
            producer.produce(topic, key=tenant, value=b"%s-%d" % (tenant, i))
    assert producer.flush(30) == 0


def scheduled_s(msg: Message) -> float:
    """When the scheduler emitted ``msg`` (its fairstream-scheduled-ms stamp), in seconds."""
    return int(dict(msg.headers())[wire.SCHEDULED_MS]) / 1000


def departures(reader: TopicReader) -> list[Message]:
    """What ``reader`` has read of the egress, in the order the scheduler emitted it."""
    return sorted(reader.messages, key=scheduled_s)
