"""The development broker: a single-node KRaft Apache Kafka for development, tests and CI.

Two engines run it: ``local`` (jars resolved from Maven Central with Maven, run with the
machine's Java) and ``docker`` (the ``apache/kafka`` image through testcontainers, where a
Docker engine answers).

``state``: constants, ``BrokerState`` (``state.json``), directories. ``process``: ports,
liveness, stopping. ``jars``: the Maven classpath and Java. ``local_engine`` and
``docker_engine``: starting a broker each way. ``broker``: ``DevBroker``, the lifecycle.
``cluster``: ``DevCluster``, three or more local nodes whose one node restarts (the soak).
``cli``: ``fairstream-dev kafka``.
"""

from fairstream_dev.kafka.broker import DevBroker
from fairstream_dev.kafka.jars import java_command
from fairstream_dev.kafka.process import answers_metadata, free_port, port_is_free
from fairstream_dev.kafka.state import (
    DEFAULT_SASL_USER,
    KAFKA_VERSION,
    SCRAM_MECHANISM,
    BrokerError,
    BrokerState,
    default_cache_dir,
    default_state_dir,
    describe,
)

__all__ = [
    "DEFAULT_SASL_USER",
    "KAFKA_VERSION",
    "SCRAM_MECHANISM",
    "BrokerError",
    "BrokerState",
    "DevBroker",
    "answers_metadata",
    "default_cache_dir",
    "default_state_dir",
    "describe",
    "free_port",
    "java_command",
    "port_is_free",
]
