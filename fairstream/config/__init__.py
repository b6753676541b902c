"""One settings model for the scheduler and the tools around it.

Precedence: command-line flags, then ``FAIRSTREAM_*`` environment variables, then the
declared defaults. Each setting is declared once, on its field (``setting``); the click
options every command uses are derived from those declarations (``options``).

- ``setting``: the declaration (``setting()``) and what is derived from it.
- ``kafka``: ``KafkaConnection``, how every client reaches Kafka.
- ``settings``: ``Topics`` and the scheduler's ``Settings``.
- ``options``: the click options of all of these.
- ``topics``: the scheduler's internal topics (progress, holding, coordination): their
  names, derived from the app id, and the progress topic's record size.
"""

from fairstream.config.kafka import (
    DEFAULT_BOOTSTRAP,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    Connection,
    KafkaConnection,
    KafkaConnectionError,
)
from fairstream.config.options import (
    kafka_options,
    option_of,
    policy_topic_option,
    scheduler_options,
    settings_from_options,
    topic_options,
)
from fairstream.config.setting import SettingsError
from fairstream.config.settings import (
    DEFAULT_APP_ID,
    DEFAULT_DLQ,
    DEFAULT_EGRESS,
    DEFAULT_INGEST,
    DEFAULT_POLICY,
    DEFAULT_WEB_PORT,
    Settings,
    Topics,
    default_data_dir,
)

__all__ = [
    "DEFAULT_APP_ID",
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_DLQ",
    "DEFAULT_EGRESS",
    "DEFAULT_INGEST",
    "DEFAULT_POLICY",
    "DEFAULT_WEB_PORT",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "Connection",
    "KafkaConnection",
    "KafkaConnectionError",
    "Settings",
    "SettingsError",
    "Topics",
    "default_data_dir",
    "kafka_options",
    "option_of",
    "policy_topic_option",
    "scheduler_options",
    "settings_from_options",
    "topic_options",
]
