"""Where a worker writes besides calling the API: the dead-letter topic and the feedback
topic. ``Outputs`` is shared by ``fairstream.Worker`` and ``fairstream.ShareWorker``.

Dead letters are awaited, record by record, on the handlers' event loop: a record is
committed past (or rejected) only once the broker has its dead letter. Feedback is best
effort (``FeedbackWriter``). Threads: ``open``, ``poll`` and ``close`` run on the consumer
thread, which serves both producers' delivery reports; ``dead_letter`` and ``report`` run on
the handlers' loop (librdkafka's produce is thread-safe).
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import Producer as _KafkaProducer

from fairstream.sdk.worker.calling import OutcomeReport
from fairstream.sdk.worker.feedback import FeedbackWriter
from fairstream.sdk.worker.handler import RawHeaders

__all__ = ["Outputs"]


class Outputs:
    """A worker's dead-letter producer and its feedback writer (None: feedback off)."""

    def __init__(
        self, dlq_topic: str, producer_config: dict[str, Any], feedback: FeedbackWriter | None
    ) -> None:
        self.dlq_topic = dlq_topic
        self.feedback = feedback
        self._config = producer_config
        self._dlq: _KafkaProducer | None = None

    def open(self) -> None:
        self._dlq = _KafkaProducer(self._config)
        if self.feedback is not None:
            self.feedback.open()

    def poll(self) -> None:
        """Serve the delivery reports of both producers (the dead letters wait for theirs)."""
        assert self._dlq is not None
        self._dlq.poll(0)
        if self.feedback is not None:
            self.feedback.poll()

    def close(self, *, wait: bool = True) -> None:
        """Deliver what is queued: dead letters for up to 30 s, feedback for up to 5 s;
        without ``wait`` (refused credentials: nothing would arrive) not at all."""
        assert self._dlq is not None
        self._dlq.flush(30 if wait else 0)
        if self.feedback is not None:
            self.feedback.close(5 if wait else 0)

    def dead_letter(
        self, key: bytes | None, value: bytes | None, headers: RawHeaders
    ) -> asyncio.Future[KafkaError | Exception | None]:
        """Produce one dead letter; the future resolves on the running loop to None once the
        broker has it, else to the error (of its delivery, or of a produce that could not
        queue it: a full queue, a record too large)."""
        assert self._dlq is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[KafkaError | Exception | None] = loop.create_future()

        def settle(err: KafkaError | Exception | None) -> None:
            if not future.done():
                future.set_result(err)

        def delivered(err: KafkaError | None, msg: Message) -> None:
            # Runs on the consumer thread, which polls the producer.
            loop.call_soon_threadsafe(settle, err)

        try:
            self._dlq.produce(
                self.dlq_topic, value, key, headers=list(headers), on_delivery=delivered
            )
        except (BufferError, KafkaException) as exc:
            settle(exc)
        return future

    def report(self, report: OutcomeReport) -> None:
        """``FeedbackWriter.report``, when feedback is on (it never waits)."""
        if self.feedback is not None:
            self.feedback.report(report)
