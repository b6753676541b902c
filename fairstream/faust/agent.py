"""``fairstream.faust.PaidApiAgent``: a Faust agent that calls the paid API for each egress
record, the way ``fairstream.Worker`` does.

For each event of the egress topic: a ``fairstream.Request`` (``request_from_event``); a
request id seen lately is skipped as a duplicate (the at-least-once side of egress, see
``fairstream.faust``); the handler is called (``async def`` on the loop, a plain function
in the loop's default executor) and:

- returns None or a ``Usage``: outcome ``ok``, with the measured cost;
- raises ``RateLimited``: reported at once (scope, Retry-After) and called again after the
  Retry-After or the backoff, without using up an attempt; dead-lettered as ``expired``
  when the next try would come after the request's deadline;
- raises anything else: reported as ``failed``, retried with exponential backoff up to
  ``max_attempts``, then dead-lettered as ``handler-failed``.

That rule, and the call and its report, are the worker's own
(``fairstream.sdk.worker.calling.Retrying``).

Each outcome goes to the feedback topic as ``fairstream.wire.feedback`` encodes it, keyed by
tenant, at once (best effort: a failed send is counted in ``stats.feedback_errors`` and
logged, it never holds up the requests). A dead letter carries the original key, value and
headers plus the reason and a sentence (``fairstream.wire.dead_letter_headers``) and is
awaited: the agent does not move on before the broker has it. Both go through the app's
own producer, outside Faust's transactions (``fairstream.faust._app.Sender``): feedback
reaches the scheduler without waiting for Faust's next commit, and a crash before that
commit repeats the event's outcome (a second feedback record, possibly a second dead
letter), as with ``fairstream.Worker``.

The agent handles one event at a time per actor (``concurrency``, 1 by default): Faust
acknowledges an event when its actor takes the next one, and with more than one actor it
commits past events still in flight (faust issue 606), so a crash then loses them. Use
more partitions and worker processes for parallel calls, or accept that loss knowingly.

Caller: a Faust worker (the agent runs on the app's event loop). Affects: the feedback and
dead-letter topics, ``stats``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import EventT, StreamT

from fairstream import wire
from fairstream.config import DEFAULT_DLQ, DEFAULT_EGRESS
from fairstream.faust._app import Sender, check_app
from fairstream.sdk.worker.calling import Ending, Report, Retrying, is_async_handler
from fairstream.sdk.worker.handler import RawHeaders, Request, request_of, where
from fairstream.sdk.worker.retry import backoff_delay
from fairstream.sdk.worker.tracking import RecentIds
from fairstream.wire.feedback import (
    DEFAULT_FEEDBACK_TOPIC,
    FeedbackError,
    Outcome,
    encode_feedback,
    feedback_key,
)

__all__ = ["AgentStats", "PaidApiAgent", "request_from_event"]

log = logging.getLogger("fairstream.faust")

MAX_DETAIL_CHARS = 2000


def request_from_event(event: EventT[bytes], attempt: int = 1) -> Request:
    """The handler's view of one egress event (missing headers get the defaults).

    Reads ``event.message.headers``, the list as it came (``event.headers`` is a dict that
    keeps one value per name).
    """
    message = event.message
    raw = message.headers or []
    items = raw.items() if isinstance(raw, Mapping) else raw
    headers: RawHeaders = [
        (str(k), v.encode("utf-8") if isinstance(v, str) else v) for k, v in items
    ]
    key, value = message.key, message.value
    return request_of(
        message.topic,
        message.partition,
        message.offset,
        key if isinstance(key, bytes) else None,
        value if isinstance(value, bytes) else b"",
        headers,
        attempt,
    )


@dataclass
class AgentStats:
    """Counts since the agent started (read them for logs, metrics or tests)."""

    ok: int = 0  # requests the handler succeeded on
    dead_lettered: int = 0
    duplicates: int = 0  # events skipped: their request id was handled lately
    rate_limited: int = 0  # calls refused with RateLimited
    failed_attempts: int = 0  # calls that raised anything else
    feedback_records: int = 0  # feedback records queued
    feedback_errors: int = 0  # feedback records not queued or not delivered


class PaidApiAgent(Retrying):
    """Registers a Faust agent on the egress topic that calls ``handler`` for each request.

    ``PaidApiAgent(app, handler, egress_topic=..., dlq_topic=..., feedback_topic=...)``;
    ``feedback_topic=None`` reports nothing. ``remember`` bounds the request ids kept for
    duplicate detection (the least recently seen go first). ``agent`` is the Faust agent.
    Read egress committed-only with ``processing_guarantee="exactly_once"`` on the app (see
    ``fairstream.faust``).
    """

    _log = log
    stats: AgentStats

    def __init__(
        self,
        app: faust.App,
        handler: Callable[[Request], Any],
        *,
        egress_topic: str = DEFAULT_EGRESS,
        dlq_topic: str = DEFAULT_DLQ,
        feedback_topic: str | None = DEFAULT_FEEDBACK_TOPIC,
        max_attempts: int = 3,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        remember: int = 100_000,
        name: str | None = None,
        concurrency: int = 1,
    ) -> None:
        check_app(app, "fairstream.faust.PaidApiAgent")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError(
                f"need 0 <= backoff_initial <= backoff_max, got {backoff_initial}, {backoff_max}"
            )
        self.handler = handler
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.seen = RecentIds(remember)
        self.stats = AgentStats()
        self._is_async = is_async_handler(handler)
        raw: dict[str, Any] = {
            "key_type": bytes,
            "value_type": bytes,
            "key_serializer": "raw",
            "value_serializer": "raw",
        }
        self.egress = app.topic(egress_topic, **raw)
        self.dlq_topic = dlq_topic
        self.feedback_topic = feedback_topic
        self.sender = Sender(app)
        self.agent = app.agent(
            self.egress,
            name=name or f"fairstream-paid-api.{egress_topic}",
            concurrency=concurrency,
        )(self._consume)

    async def _consume(self, stream: StreamT[bytes]) -> None:
        async for event in stream.events():
            await self.process(event)

    async def process(self, event: EventT[bytes]) -> str:
        """Handle one egress event; returns ``ok``, ``dead-lettered`` or ``duplicate``."""
        request = request_from_event(event)
        if request.request_id in self.seen:
            self.stats.duplicates += 1
            log.debug("skipped %s: seen lately", where(request))
            return "duplicate"
        outcome = await self._handle(event, request)
        self.seen.add(request.request_id)
        return outcome

    async def _handle(self, event: EventT[bytes], request: Request) -> str:
        ending = await self._calls(request, _sleep)
        assert ending is not None  # _sleep never gives a request up
        if ending.reason is not None:
            return await self._dead_letter(event, request, ending)
        self.stats.ok += 1
        return Outcome.OK.value

    async def _dead_letter(self, event: EventT[bytes], request: Request, ending: Ending) -> str:
        """Write the record to the dead-letter topic; retry until the broker has it."""
        assert ending.reason is not None
        reason, detail = ending.reason, ending.detail[:MAX_DETAIL_CHARS]
        headers = wire.dead_letter_headers(request.headers, reason, detail)
        message = event.message
        tries = 0
        while True:
            tries += 1
            try:
                sent = await self.sender.send(
                    self.dlq_topic, message.key, message.value, list(headers)
                )
                await sent
            except Exception as exc:  # the producer's errors; try again, never drop it
                log.error("dead letter for %s not delivered: %r", where(request), exc)
                await asyncio.sleep(backoff_delay(tries, 0.1, self.backoff_max))
                continue
            log.warning("dead-lettered %s as %s: %s", where(request), reason, detail)
            self.stats.dead_lettered += 1
            await self._report(
                Report(request, Outcome.DEAD_LETTERED, ending.attempt, ending.latency)
            )
            return Outcome.DEAD_LETTERED.value

    async def _report(self, report: Report) -> None:
        """Queue the feedback record of ``report`` (when feedback is on)."""
        if self.feedback_topic is None:
            return
        request = report.request
        try:
            record = report.record()
            sent = await self.sender.send(
                self.feedback_topic, feedback_key(record), encode_feedback(record), None
            )
        except FeedbackError as exc:  # an egress record outside the contract (no key...)
            self.stats.feedback_errors += 1
            log.debug("no feedback for %s: %s", where(request), exc)
        except Exception as exc:  # advisory: never hold up the request for it
            self.stats.feedback_errors += 1
            log.warning("feedback for %s not queued: %r", where(request), exc)
        else:
            self.stats.feedback_records += 1
            if isinstance(sent, asyncio.Future):
                sent.add_done_callback(self._feedback_delivered)

    def _feedback_delivered(self, sent: asyncio.Future[Any]) -> None:
        if sent.cancelled() or sent.exception() is not None:
            self.stats.feedback_errors += 1  # advisory: counted, not retried
            log.debug("a feedback record was not delivered: %r", sent)


async def _sleep(delay: float) -> bool:
    """The agent's wait before a next call: it never gives a request up."""
    await asyncio.sleep(delay)
    return True
