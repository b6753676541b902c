"""``fairstream.Error``: the base of every exception fairstream raises on purpose.

``except fairstream.Error`` catches them all; each keeps its own name and, where it had one,
its standard base too (``SchemaError`` and ``FeedbackError`` are ``ValueError``\\ s,
``MetricsPortError`` an ``OSError``), so existing ``except`` clauses still match.

Where they are:

- SDK: ``DeliveryError`` (``fairstream.sdk.producer``), ``KafkaAuthenticationError`` and
  ``TopicError`` (``fairstream.adapters.admin``), ``RateLimited``
  (``fairstream.sdk.worker.handler``, raised by handlers), ``MetricsPortError``
  (``fairstream.sdk.worker.metrics``);
- contracts: ``SchemaError`` (``fairstream.wire.policy``), ``FeedbackError``
  (``fairstream.wire.feedback``); the policy topic: ``PolicyStoreError``
  (``fairstream.adapters.policy_store``);
- scheduler: ``FatalError`` (``fairstream.scheduler.supervise``), ``Aborted``
  (``fairstream.scheduler.emitter.transaction``),
  ``RecoveryError`` (``fairstream.scheduler.recovery``), ``ProgressFormatError``
  (``fairstream.scheduler.progress``).
"""

from __future__ import annotations

__all__ = ["Error"]


class Error(Exception):
    """Base of fairstream's exceptions."""
