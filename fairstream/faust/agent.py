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
own producer, outside Faust's transactions (``fairstream.faust._app.DirectSender``): feedback
reaches the scheduler without waiting for Faust's next commit, and a crash before that
commit repeats the event's outcome (a second feedback record, possibly a second dead
letter), as with ``fairstream.Worker``.

Many calls at once, at-least-once. The agent reads egress with acks off
(``stream.noack()``) and runs up to ``max_in_flight`` calls at once, started in the order
of their start times (below). It acks an event itself, only when its call has ended (ok or
dead-lettered) and every event before it in its partition has been acked. Faust's
consumer does not commit only the acked prefix: it commits to the end of the first run of
consecutive acked offsets and checks the offsets below that run loosely (not at all before
its first commit of the partition), so an unacked event with an acked one after it could
be committed past; the agent never lets that happen. Faust also counts the record after a
transaction marker as acked, acked or not, and commits across one marker per commit only:
``fairstream.faust._app.commit_across_markers`` corrects both on the app's consumer. A
crash re-delivers the unacked events: those still waiting, running, or finished behind an
unfinished one. A request id already running or waiting in the agent is skipped as a
duplicate too, acked in its turn. The agent holds at most ``HELD_PER_SLOT x
max_in_flight`` events (waiting, running or finished behind an earlier one); with that
many, it reads no further until one is acked.

Paced starts, when ``playout_delay`` is set. Each call starts at ``start_at(start_ms,
arrived, playout_delay)`` (``fairstream.sdk.worker.pacing``): the record's start stamp
(``fairstream-start-ms``, written under a rate) plus the delay, or at once when it arrives
after that or has no stamp; and never sooner after the previous paced call than their
stamps are apart (``pacing.Spacing``: a late start pushes the next ones, up to a slack).
Events whose moment has not come wait in a ``Playout`` heap, without a slot; they take one,
earliest start first, once their moment has come. The default delay is
``fairstream.Worker``'s (``pacing.PLAYOUT_DELAY``, 0.1 s, says how it was chosen); off
(None or 0) every call starts as its event arrives.

Faust's own ``concurrency`` (actors per agent) stays 1 by default: each actor acks in its
own order, and with more than one, two actors handling one partition would ack it out of
order, which lets Faust commit past an event still running.

Caller: a Faust worker (the agent runs on the app's event loop). Affects: the feedback and
dead-letter topics, ``stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import faust
from faust.types import EventT, StreamT

from fairstream import wire
from fairstream.config import DEFAULT_DLQ, DEFAULT_EGRESS
from fairstream.faust._app import DirectSender, check_app, commit_across_markers
from fairstream.sdk.worker.calling import (
    Begin,
    Ending,
    OutcomeReport,
    Retrying,
    is_async_handler,
)
from fairstream.sdk.worker.handler import RawHeaders, Request, request_of, where
from fairstream.sdk.worker.pacing import (
    PLAYOUT_DELAY,
    Playout,
    hold_until,
    start_at,
    timer_wait,
)
from fairstream.sdk.worker.retry import backoff_delay
from fairstream.sdk.worker.tracking import RecentIds
from fairstream.wire.feedback import (
    DEFAULT_FEEDBACK_TOPIC,
    FeedbackError,
    Outcome,
    encode_feedback,
    feedback_key,
)

__all__ = ["ActorWindow", "AgentStats", "HeldEvent", "PaidApiAgent", "request_from_event"]

log = logging.getLogger("fairstream.faust")

MAX_DETAIL_CHARS = 2000

# Events an actor holds (waiting for their start, running, or finished behind an earlier
# one of their partition) per in-flight slot; with that many it reads no further. Bounds
# the agent's memory and how far the events read run ahead of the commit point.
HELD_PER_SLOT = 32

# Turns of the loop the starter gives the reader at most, each time it looks, to take in
# what Faust has buffered (``_Actor._drained``): a reader that takes events in on every
# turn (a fast stream) cannot hold the calls back for longer.
DRAIN_TURNS = 256


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


@dataclass(eq=False, slots=True)
class HeldEvent:
    """One egress event an actor holds, from its arrival until it is acked."""

    event: EventT[bytes]
    request: Request
    due: float  # when its call may start (epoch s, the agent's wall clock)
    call: bool = True  # False: skipped (a duplicate), never called
    started: bool = False
    done: bool = False  # its call ended (or it was skipped): ackable in its turn


class ActorWindow:
    """The events one actor holds: which calls start now, which events may be acked. Pure.

    ``hold`` takes an event in at its start time (``start_at`` with ``playout_delay``, kept
    apart from the previous paced start as their stamps are, ``pacing.Spacing``; None or 0:
    on arrival); ``startable`` hands out those whose moment has come, earliest first, while
    fewer than ``max_in_flight`` run; ``began`` tells it when a handed-out call actually
    began; ``finish`` ends one and returns the events now safe to
    ack: the finished ones at the head of its partition, in offset order, so no acked event
    ever has an unacked one before it in its partition.

    Caller: one actor's loop. Affects: this object only.
    """

    def __init__(
        self,
        max_in_flight: int,
        playout_delay: float | None,
        wall_clock: Callable[[], float],
        max_held: int,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.playout_delay = playout_delay
        self.max_held = max_held
        self._wall = wall_clock
        self._playout: Playout[HeldEvent] = Playout()  # calls whose moment has not come
        self._ready: deque[HeldEvent] = deque()  # moment come, waiting for a slot, in start order
        self._partitions: dict[tuple[str, int], deque[HeldEvent]] = {}  # in offset order
        self.running = 0  # calls started and not finished
        self.held = 0  # events held: not acked yet

    def full(self) -> bool:
        """True when the actor should read no further before an event is acked."""
        return self.held >= self.max_held

    def hold(self, event: EventT[bytes], request: Request, *, call: bool = True) -> HeldEvent:
        """Take ``event`` in; its call starts at its moment, or never (``call=False``: a
        duplicate, to be finished at once and acked in its turn)."""
        now = self._wall()
        delay = self.playout_delay
        due = now if not delay else start_at(request.start_ms, now, delay)
        held = HeldEvent(event, request, due, call)
        message = event.message
        self._partitions.setdefault((message.topic, message.partition), deque()).append(held)
        self.held += 1
        if call:
            self._playout.push(due, held, self._stamp(request))
        return held

    def _stamp(self, request: Request) -> float | None:
        """The request's start stamp in seconds when it is paced, else None."""
        if not self.playout_delay or request.start_ms is None:
            return None
        return request.start_ms / 1000

    def paced(self, held: HeldEvent) -> bool:
        """Whether ``held``'s call is paced: its start waits at a ``gate`` and says when it
        ``began``."""
        return self._stamp(held.request) is not None

    def gate(self, held: HeldEvent, now: float) -> float:
        """When paced ``held``'s call (handed out by ``startable``, its lead early) may
        begin, on the wall clock, asked at ``now``: ``Playout.gate``."""
        stamp = self._stamp(held.request)
        assert stamp is not None, "only a paced call has a gate"
        return self._playout.gate(stamp, held.due, now)

    def began(self, held: HeldEvent, at: float) -> None:
        """Paced ``held``'s call begins at ``at`` (its task got to run after ``startable``
        handed it out, and waited out its ``gate``): the next paced call keeps its distance
        from this moment. The caller looks again (``startable``) once the call is under way:
        the next one may be due at once (it catches up, ``Playout.began``)."""
        stamp = self._stamp(held.request)
        assert stamp is not None, "only a paced call says when it began"
        self._playout.began(stamp, at)

    def startable(self) -> list[HeldEvent]:
        """The events whose calls start now, in order of their start times; each takes a
        slot (``running``) until ``finish``."""
        self._ready.extend(self._playout.pop_due(self._wall()))
        started: list[HeldEvent] = []
        while self._ready and self.running < self.max_in_flight:
            held = self._ready.popleft()
            held.started = True
            started.append(held)
            self.running += 1
        return started

    def next_due(self) -> float | None:
        """When the next call may start for want of time (None: none waits for time, or
        every slot is taken and a finishing call is what frees the next start); on the wall
        clock, which ``startable`` reads: a wake-up before it starts nothing."""
        if self._ready or self.running >= self.max_in_flight:
            return None
        return self._playout.next_due()

    def waiting(self) -> int:
        """Events held whose call has not started."""
        return len(self._playout) + len(self._ready)

    def finish(self, held: HeldEvent) -> list[EventT[bytes]]:
        """End ``held``: its call ended, or it is a duplicate; returns the events now safe
        to ack, in offset order (none while an earlier event of its partition is held)."""
        if held.done or (held.call and not held.started):
            raise ValueError(f"{where(held.request)}: finished twice or before it started")
        held.done = True
        if held.call:
            self.running -= 1
        message = held.event.message
        key = (message.topic, message.partition)
        queue = self._partitions[key]
        ackable: list[EventT[bytes]] = []
        while queue and queue[0].done:
            ackable.append(queue.popleft().event)
        if not queue:
            del self._partitions[key]
        self.held -= len(ackable)
        return ackable


class PaidApiAgent(Retrying):
    """Registers a Faust agent on the egress topic that calls ``handler`` for each request.

    ``PaidApiAgent(app, handler, egress_topic=..., dlq_topic=..., feedback_topic=...)``;
    ``feedback_topic=None`` reports nothing. ``remember`` bounds the request ids kept for
    duplicate detection (the least recently seen go first). ``agent`` is the Faust agent.
    Read egress committed-only with ``processing_guarantee="exactly_once"`` on the app (see
    ``fairstream.faust``).

    ``max_in_flight``: calls running at once per actor (a call holds its slot through its
    retries). A backlogged tenant gets up to ``max_in_flight / latency`` calls/s: give it at
    least the API's rate times its latency (20 calls/s of 0.2 s: 4; 10/s of 2 s: 20). The
    default, 16, covers most APIs without overshooting a modest concurrency limit; a plain
    (non-async) handler runs in a thread pool of that size. ``playout_delay``: each call
    starts that many seconds after the record's start stamp (``fairstream-start-ms``);
    0.1 by default, as for ``fairstream.Worker``; None or 0: as it arrives.
    ``wall_clock``: the epoch-seconds clock pacing reads (tests pass their own).
    ``concurrency``: Faust actors; leave it at 1 (see the module docstring).
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
        max_in_flight: int = 16,
        playout_delay: float | None = PLAYOUT_DELAY,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        check_app(app, "fairstream.faust.PaidApiAgent")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        if playout_delay is not None and playout_delay < 0:
            raise ValueError(f"playout_delay must be None or at least 0, got {playout_delay}")
        if backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError(
                f"need 0 <= backoff_initial <= backoff_max, got {backoff_initial}, {backoff_max}"
            )
        self.app = app
        self.handler = handler
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.seen = RecentIds(remember)
        self.stats = AgentStats()
        self._is_async = is_async_handler(handler)
        self.max_in_flight = max_in_flight
        self.playout_delay = playout_delay
        self._wall = wall_clock
        # Request ids held by an actor and not finished: a second copy is a duplicate too.
        self._pending: Counter[str] = Counter()
        if not self._is_async:  # the loop's default executor has too few threads
            self._pool = ThreadPoolExecutor(
                max_in_flight * concurrency, thread_name_prefix="fairstream-agent"
            )
        raw: dict[str, Any] = {
            "key_type": bytes,
            "value_type": bytes,
            "key_serializer": "raw",
            "value_serializer": "raw",
        }
        self.egress = app.topic(egress_topic, **raw)
        self.dlq_topic = dlq_topic
        self.feedback_topic = feedback_topic
        self.sender = DirectSender(app)
        self.agent = app.agent(
            self.egress,
            name=name or f"fairstream-paid-api.{egress_topic}",
            concurrency=concurrency,
        )(self._consume)

    async def _consume(self, stream: StreamT[bytes]) -> None:
        """One actor: read events, start their calls in their time, ack them in order."""
        if not commit_across_markers(self.app.consumer):
            log.warning(
                "this Faust version's consumer is not the one fairstream.faust knows: its "
                "commits may fall behind transactional egress (see docs/faust.md)"
            )
        # A Stream method the StreamT stubs leave out.
        await _Actor(self, cast(Any, stream).noack()).run()

    def admit(self, window: ActorWindow, event: EventT[bytes]) -> HeldEvent:
        """Take ``event`` into ``window``: to be called, or skipped as a duplicate (a request
        id handled lately, or held and not finished)."""
        request = request_from_event(event)
        rid = request.request_id
        if rid in self.seen or self._pending[rid] > 0:
            self.stats.duplicates += 1
            log.debug("skipped %s: seen lately", where(request))
            return window.hold(event, request, call=False)
        self._pending[rid] += 1
        return window.hold(event, request)

    async def call(self, held: HeldEvent, begin: Begin | None = None) -> str:
        """Run the calls of an admitted event; returns ``ok`` or ``dead-lettered``.
        ``begin``: awaited right before its first call (the actor's paced gate)."""
        rid = held.request.request_id
        try:
            outcome = await self._handle(held.event, held.request, begin)
            self.seen.add(rid)
        finally:
            self._pending[rid] -= 1
            if self._pending[rid] <= 0:
                del self._pending[rid]
        return outcome

    async def process(self, event: EventT[bytes]) -> str:
        """Handle one egress event at once (no pacing, no ack: the agent's actors do both);
        returns ``ok``, ``dead-lettered`` or ``duplicate``."""
        request = request_from_event(event)
        if request.request_id in self.seen or self._pending[request.request_id] > 0:
            self.stats.duplicates += 1
            log.debug("skipped %s: seen lately", where(request))
            return "duplicate"
        outcome = await self._handle(event, request)
        self.seen.add(request.request_id)
        return outcome

    async def _handle(
        self, event: EventT[bytes], request: Request, begin: Begin | None = None
    ) -> str:
        ending = await self._calls(request, _sleep, begin)
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
                OutcomeReport(request, Outcome.DEAD_LETTERED, ending.attempt, ending.latency)
            )
            return Outcome.DEAD_LETTERED.value

    async def _report(self, report: OutcomeReport) -> None:
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


class _Actor:
    """One actor of the agent: reads the stream (acks off), starts calls as its ``ActorWindow``
    says, acks what the window releases; a call that fails unexpectedly (a bug, not the
    handler: its errors are the retry rule's) ends the actor with that error, its event
    unacked. Stopping (Faust cancels the actor) cancels the running calls, unacked.
    """

    def __init__(self, agent: PaidApiAgent, stream: StreamT[bytes]) -> None:
        self.agent = agent
        self.stream = stream
        limit = agent.max_in_flight
        self.window = ActorWindow(limit, agent.playout_delay, agent._wall, HELD_PER_SLOT * limit)
        self.wake = asyncio.Event()  # an event held or a call finished: the starter looks
        self.room = asyncio.Event()  # events acked: the reader may read on
        self.calls: set[asyncio.Task[None]] = set()
        self.read = 0  # events taken in so far (``_drained``)
        self.failure: BaseException | None = None
        self.reader: asyncio.Task[Any] | None = None

    async def run(self) -> None:
        self.reader = asyncio.current_task()
        starter = asyncio.create_task(self._start_calls())
        starter.add_done_callback(self._ended)
        try:
            async for event in self.stream.events():
                while self.window.full():
                    self.room.clear()
                    await self.room.wait()
                held = self.agent.admit(self.window, event)
                self.read += 1
                if not held.call:
                    await self._ack(self.window.finish(held))
                self.wake.set()
        except asyncio.CancelledError:
            if self.failure is not None:
                raise self.failure from None
            raise
        finally:
            starter.cancel()
            for task in self.calls:
                task.cancel()
            await asyncio.gather(starter, *self.calls, return_exceptions=True)

    async def _start_calls(self) -> None:
        window = self.window
        while True:
            await self._drained()
            self.wake.clear()  # only this task clears it: no wake-up is lost
            for held in window.startable():
                task = asyncio.create_task(self._call(held))
                self.calls.add(task)
                task.add_done_callback(self.calls.discard)
            due = window.next_due()
            timeout = None if due is None else timer_wait(due - self.agent._wall())
            with contextlib.suppress(TimeoutError):  # then the next start time has come
                await asyncio.wait_for(self.wake.wait(), timeout)

    async def _drained(self) -> None:
        """Wait while the reader takes in what Faust has buffered: Faust hands events over
        one per turn of the loop, and a starter that ran between them started a late
        record before an earlier-stamped one of the same tenant, read next from another
        partition, was held (a record past its moment is due at once). So late records
        read together start in the order of their stamps. Ends at the first turn that
        took nothing in (the reader waits for Faust, or for room), ``DRAIN_TURNS`` at most."""
        for _ in range(DRAIN_TURNS):
            read = self.read
            await asyncio.sleep(0)
            if self.read == read:
                return

    def _ended(self, starter: asyncio.Task[None]) -> None:
        """The starter never ends on its own: if it failed, end the actor with its error."""
        if not starter.cancelled() and starter.exception() is not None:
            self._fail(starter.exception())

    def _fail(self, exc: BaseException | None) -> None:
        self.failure = exc
        if self.reader is not None:
            self.reader.cancel()

    async def _begin(self, held: HeldEvent) -> Callable[[], None]:
        """Hold ``held``'s first call at its gate; return its mark, called right before the
        handler (``Calling._call``): it says the call began, then."""
        window = self.window
        await hold_until(lambda now: window.gate(held, now), self.agent._wall, asyncio.sleep)
        return functools.partial(self._began, held)

    def _began(self, held: HeldEvent) -> None:
        # The starter looks again once the handler is under way: a catch-up goes at once.
        # Scheduled first, so that the clock is read last, a step from the handler.
        asyncio.get_running_loop().call_soon(self.wake.set)
        self.window.began(held, self.agent._wall())

    async def _call(self, held: HeldEvent) -> None:
        try:
            # Only a paced call waits at a gate and wakes the starter when it begins.
            begin = functools.partial(self._begin, held) if self.window.paced(held) else None
            await self.agent.call(held, begin)
        except Exception as exc:
            log.exception("the paid-API agent failed on %s", where(held.request))
            self._fail(exc)
            return
        await self._ack(self.window.finish(held))
        self.room.set()
        self.wake.set()

    async def _ack(self, events: list[EventT[bytes]]) -> None:
        for event in events:
            await self.stream.ack(event)


async def _sleep(delay: float) -> bool:
    """The agent's wait before a next call: it never gives a request up."""
    await asyncio.sleep(delay)
    return True
