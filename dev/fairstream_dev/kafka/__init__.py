"""The development broker: a single-node KRaft Apache Kafka for development, tests and CI.

Two engines run it: ``local`` (jars resolved from Maven Central with Maven, run with the
machine's Java) and ``docker`` (the ``apache/kafka`` image through testcontainers, where a
Docker engine answers).
"""

from fairstream_dev.kafka.broker import (
    KAFKA_VERSION,
    BrokerError,
    BrokerState,
    DevBroker,
    default_cache_dir,
    default_state_dir,
)

__all__ = [
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerState",
    "DevBroker",
    "default_cache_dir",
    "default_state_dir",
]
