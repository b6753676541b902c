"""librdkafka settings of fairstream's clients: the defaults, in one place.

Every producer fairstream makes (the SDK's, the worker's dead letters and feedback, the
scheduler's transactional one, the policy writer, the group coordination) starts from
``producer_config``; every consumer that reads partitions assigned by hand, outside any
group, from ``assigned_consumer_config``. The ``base`` is the connection's settings
(``KafkaConnection.librdkafka()``: servers, authentication), possibly with more of the
caller's; ``overrides`` win over everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PARTITIONER", "assigned_consumer_config", "producer_config"]

# The partition a Java client or aiokafka would choose for the same key (tenant);
# librdkafka's own default (CRC32) would pick another one.
PARTITIONER = "murmur2_random"


def producer_config(
    base: Mapping[str, Any],
    *,
    acks: int | str = "all",
    linger_ms: int = 5,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A producer's settings: ``base``, then fairstream's defaults, then ``overrides``.

    The defaults: ``acks`` (``all``, and then idempotent: no duplicates or reordering on
    librdkafka's retries; ``1`` for advisory records), ``linger.ms`` and the murmur2
    partitioner.
    """
    config = {**base, "acks": acks, "linger.ms": linger_ms, "partitioner": PARTITIONER}
    if acks == "all":
        config["enable.idempotence"] = True
    if overrides:
        config.update(overrides)
    return config


def assigned_consumer_config(
    base: Mapping[str, Any], group_id: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A consumer's settings for partitions assigned by hand: it never joins ``group_id``
    (librdkafka requires one) and commits nothing; then ``overrides``."""
    return {
        **base,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        **(overrides or {}),
    }
