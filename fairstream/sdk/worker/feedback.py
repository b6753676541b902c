"""The worker's end of the feedback topic: one record per outcome, handed to librdkafka and
never awaited. The contract itself (records, Avro codec) is ``fairstream.wire.feedback``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as _KafkaProducer

from fairstream.adapters import clients
from fairstream.config import KafkaConnection
from fairstream.sdk.worker.calling import OutcomeReport
from fairstream.sdk.worker.handler import where
from fairstream.sdk.worker.metrics import WorkerMetrics
from fairstream.wire.feedback import FeedbackError, encode_feedback, feedback_key

__all__ = ["FeedbackWriter", "feedback_settings"]

log = logging.getLogger("fairstream.worker")

# Lost feedback is logged at most this often (with a count), not once per record.
FEEDBACK_WARNING_INTERVAL = 60.0
# How often a worker looks again for a feedback topic that did not exist.
FEEDBACK_TOPIC_CHECK_INTERVAL = 30.0


def feedback_settings(
    kafka: KafkaConnection, producer_config: dict[str, Any] | None
) -> dict[str, Any]:
    # Feedback is advisory: leader acks, a little batching, no long retries.
    return clients.producer_config(
        kafka.librdkafka(),
        acks=1,
        overrides={
            "message.timeout.ms": 30_000,
            "queue.buffering.max.messages": 100_000,
            **(producer_config or {}),
        },
    )


class FeedbackWriter:
    """The worker's end of the feedback topic: records handed to librdkafka, never awaited.

    Best effort by design: a full queue or a delivery failure loses the record, counts it
    in ``feedback_errors`` and logs at most once a minute, so feedback never slows down or
    stops the handling of requests. A topic that does not exist is said once and looked
    for again every 30 s; meanwhile records are not produced (librdkafka would hold each
    for ``message.timeout.ms``) but counted as lost.
    Caller: the worker (``report`` from the event loop, as librdkafka's produce is
    thread-safe; ``open``, ``poll`` and ``close`` from the consumer thread, which serves
    the delivery reports). Affects: the feedback topic, ``metrics``.
    """

    def __init__(self, topic: str, config: dict[str, Any], metrics: WorkerMetrics) -> None:
        self.topic = topic
        self._config = config
        self._metrics = metrics
        self._producer: _KafkaProducer | None = None
        # Failures come from both threads (produce on the loop, delivery reports on the
        # consumer thread).
        self._lock = threading.Lock()
        self._lost = 0  # since the last warning
        self._warned = -FEEDBACK_WARNING_INTERVAL  # monotonic time of that warning
        self._exists = True  # False while the topic is known not to exist
        self._next_check = 0.0

    def open(self) -> None:
        self._producer = _KafkaProducer(self._config)
        self._check_topic(timeout=5.0)

    def poll(self) -> None:
        if self._producer is None:
            return
        self._producer.poll(0)
        if not self._exists and time.monotonic() >= self._next_check:
            self._check_topic(timeout=0.5)

    def _check_topic(self, timeout: float) -> None:
        assert self._producer is not None
        self._next_check = time.monotonic() + FEEDBACK_TOPIC_CHECK_INTERVAL
        try:
            metadata = self._producer.list_topics(self.topic, timeout=timeout)
        except KafkaException:
            return  # no answer: keep producing, delivery reports will tell
        info = metadata.topics.get(self.topic)
        error = None if info is None else info.error
        exists = info is not None and (
            error is None
            or error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
        )
        if not exists and self._exists:
            log.warning(
                "feedback topic %s does not exist: no feedback until it does "
                "(fairstream topics create --feedback-topic %s, or --no-feedback)",
                self.topic,
                self.topic,
            )
        elif exists and not self._exists:
            log.info("feedback topic %s exists now: reporting outcomes", self.topic)
        self._exists = exists

    def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for what is queued; count what is left as lost."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        left = producer.flush(timeout)
        if left:
            self._metrics.feedback_errors.inc(left)
        self._lost_some(left, "not delivered by shutdown", force=True)

    def report(self, report: OutcomeReport) -> None:
        """Queue the feedback record of ``report``."""
        producer = self._producer
        if producer is None:
            return
        if not self._exists:
            self._metrics.feedback_errors.inc()  # said once when the topic was found missing
            return
        try:
            record = report.record()
            producer.produce(
                self.topic,
                encode_feedback(record),
                feedback_key(record),
                on_delivery=self._delivered,
            )
        except FeedbackError as exc:
            # An egress record outside the contract (no key, a request id over 1 KB).
            log.debug("no feedback for %s: %s", where(report.request), exc)
            self._failed("outside the feedback contract")
        except (BufferError, KafkaException) as exc:
            self._failed(f"not queued: {exc}")  # a full queue is not worth blocking for
        else:
            self._metrics.feedback_records.inc()

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failed(err.str())

    def _failed(self, reason: str) -> None:
        self._metrics.feedback_errors.inc()
        self._lost_some(1, reason)

    def _lost_some(self, count: int, reason: str, *, force: bool = False) -> None:
        with self._lock:
            self._lost += count
            now = time.monotonic()
            if not self._lost or not (force or now - self._warned >= FEEDBACK_WARNING_INTERVAL):
                return
            lost, self._lost, self._warned = self._lost, 0, now
        log.warning(
            "%d feedback record(s) for topic %s lost (%s); does the topic exist? "
            "(fairstream topics create --feedback-topic %s)",
            lost,
            self.topic,
            reason,
            self.topic,
        )
