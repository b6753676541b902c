"""The scheduler's internal topics: their names, derived from ``--app-id``, and the record
size the progress topic is made for.

- progress: the compacted topic of progress records, co-partitioned with the ingest topic;
- holding: the topic parked records wait in, co-partitioned with the ingest topic;
- coordination: the instances' reports of their demand
  (``fairstream.scheduler.coordination.shares``).

Callers: the scheduler (``scheduler.recovery``, ``scheduler.emitter``, ``scheduler.coordination``,
``scheduler.progress``), ``adapters.admin`` (which creates and checks them) and
``fairstream topics``.
"""

from __future__ import annotations

__all__ = [
    "CHUNK_BYTES",
    "PROGRESS_TOPIC_BYTES",
    "coordination_topic",
    "holding_topic",
    "progress_topic",
]

# A progress record is cut into chunks of at most this many bytes; the progress topic is
# created with max.message.bytes PROGRESS_TOPIC_BYTES, room for one chunk and its batch.
CHUNK_BYTES = 512 * 1024
PROGRESS_TOPIC_BYTES = 1024 * 1024


def progress_topic(app_id: str) -> str:
    """The compacted topic of progress records, co-partitioned with the ingest topic."""
    return f"{app_id}-progress"


def holding_topic(app_id: str) -> str:
    """The topic parked records wait in (``holding``), co-partitioned with the ingest topic."""
    return f"{app_id}-holding"


def coordination_topic(app_id: str) -> str:
    """The topic the scheduler instances of one ``app_id`` report their demand on."""
    return f"{app_id}-coordination"
