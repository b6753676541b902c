"""Calling a paid-API handler: one call, timed and reported (``Calling``), and the retry rule
around it (``Retrying``), as ``fairstream.Worker`` and ``fairstream.faust.PaidApiAgent``
apply it; ``fairstream.ShareWorker`` calls and reports through ``Calling`` and decides per
delivery itself.

The rule: a handler that raises ``RateLimited`` is called again after its ``retry_after``
plus a random share of it that grows while it keeps being refused (or the backoff), without
using up an attempt, unless that call would come after the
request's deadline: then the request is to be dead-lettered as ``expired``. A handler that
raises anything else is called again after the exponential backoff, ``max_attempts`` calls
in all; then the request is to be dead-lettered as ``handler-failed``. Every call is
reported (``ok`` with the cost a ``Usage`` gave, ``rate-limited`` with its scope and
Retry-After, ``failed``) as an ``OutcomeReport`` through the class's own ``_report``, and so is a
dead letter; ``OutcomeReport.record`` is its feedback record.

Light on purpose (no Kafka client): the Faust agent imports it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from fairstream import wire
from fairstream.sdk.worker.handler import Handler, RateLimited, Request, Usage, where
from fairstream.sdk.worker.retry import backoff_delay, expires_before, rate_limited_delay
from fairstream.wire.feedback import Feedback, Scope
from fairstream.wire.feedback import Outcome as Reported

if TYPE_CHECKING:
    from fairstream.sdk.worker.metrics import WorkerMetrics

__all__ = [
    "Begin",
    "Calling",
    "Ending",
    "HandlerCall",
    "OutcomeReport",
    "Retrying",
    "is_async_handler",
]

# Awaited right before a request's first call (a paced call's gate: ``pacing.hold_until``);
# what it returns is called at the call's very start, the handler's first line next (the
# paced call's mark: when it began, as near as the worker can read the API's clock).
Begin = Callable[[], Awaitable[Callable[[], None]]]


@dataclass(frozen=True, slots=True)
class OutcomeReport:
    """What the feedback topic is told about ``request``: one call (ok, rate-limited,
    failed) or its dead letter, at ``attempt``, after a call of ``latency`` s; with the cost
    the handler reported (``Usage``), a rate limit's scope and Retry-After."""

    request: Request
    outcome: Reported
    attempt: int
    latency: float
    cost: int | None = None
    scope: Scope | None = None
    retry_after: float | None = None

    def record(self) -> Feedback:
        """The feedback record (raises ``FeedbackError`` for an egress record outside the
        contract: no key, a request id over 1 KB)."""
        request = self.request
        return Feedback(
            request_id=request.request_id,
            tenant=request.tenant,
            outcome=self.outcome,
            declared_cost=request.cost,
            reported_at_ms=wire.now_ms(),
            attempt=self.attempt,
            cost=self.cost,
            latency=self.latency,
            scheduled_at_ms=request.scheduled_ms,
            scope=self.scope,
            retry_after=self.retry_after,
            # Names the deployment: a scheduler ignores feedback from another one's egress.
            egress_topic=request.topic,
        )


def is_async_handler(handler: Handler) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one: called on the loop."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__
    )


@dataclass(frozen=True, slots=True)
class HandlerCall:
    """One call of the handler: how long it took, what it returned or raised."""

    latency: float
    result: Any = None
    error: Exception | None = None


class Calling:
    """Calls the handler once and reports the call (see the module docstring).

    Mixed into ``Handling`` (``fairstream.Worker``), ``ShareWorker`` and ``PaidApiAgent``,
    which set the attributes below and say how a report travels (``_report``).
    """

    handler: Handler
    _is_async: bool  # is_async_handler(handler)
    backoff_initial: float
    backoff_max: float
    # Uniform draws from [0, 1) that spread the retries of rate-limited calls beyond their
    # Retry-After (``retry.rate_limited_delay``); a test gives its own.
    _jitter: Callable[[], float] = random.random
    # Where plain-function handlers run; None: the loop's default executor.
    _pool: Executor | None = None
    # The workers' Prometheus metrics (calls running, their seconds, rate limits, retries);
    # the Faust agent keeps none.
    metrics: WorkerMetrics | None = None

    async def _report(self, report: OutcomeReport) -> None:
        """Tell the feedback topic (when feedback is on)."""
        raise NotImplementedError

    async def _call(self, request: Request, mark: Callable[[], None] | None = None) -> Any:
        """Call the handler once; return what it returned (a ``Usage``, or anything).
        ``mark``, if any, is called right before the handler."""
        if mark is not None:
            mark()
        if self._is_async:
            return await self.handler(request)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._pool, self.handler, request)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _attempt(self, request: Request, begin: Begin | None = None) -> HandlerCall:
        """Call the handler with ``request`` (its ``attempt`` is the one reported), time the
        call and report it: ok (with the cost), rate-limited (scope, Retry-After), failed.
        ``begin``, if any, is awaited as the last wait before the handler (a paced call's
        gate), and what it returns is called right before the handler (``_call``), so that
        the moment it reads is the handler's within microseconds. The metrics come before
        the gate (a paced call counts as running while it waits its last fraction of a
        millisecond there), the latency's start after it."""
        metrics = self.metrics
        if metrics is not None:
            metrics.running.inc()
        mark = None if begin is None else await begin()
        started = time.perf_counter()
        result: Any = None
        error: Exception | None = None
        try:
            result = await self._call(request, mark)
        except Exception as exc:
            error = exc
        finally:
            latency = time.perf_counter() - started
            if metrics is not None:
                metrics.running.dec()
                metrics.handler_seconds.observe(latency)
        attempt = request.attempt
        if isinstance(error, RateLimited):
            if metrics is not None:
                metrics.rate_limited.inc()
            report = OutcomeReport(request, Reported.RATE_LIMITED, attempt, latency)
            await self._report(
                replace(report, scope=Scope(error.scope), retry_after=error.retry_after)
            )
        elif error is not None:
            await self._report(OutcomeReport(request, Reported.FAILED, attempt, latency))
        else:
            cost = result.cost if isinstance(result, Usage) else None
            await self._report(OutcomeReport(request, Reported.OK, attempt, latency, cost=cost))
        return HandlerCall(latency, result, error)

    def _after_rate_limit(
        self, request: Request, exc: RateLimited, limited: int
    ) -> tuple[float, str | None]:
        """The wait before calling again after the ``limited``-th rate-limited call in a row;
        with it the dead letter's sentence when that call would come after the request's
        deadline, else None."""
        delay = rate_limited_delay(
            exc.retry_after, limited, self.backoff_initial, self.backoff_max, self._jitter()
        )
        if not expires_before(request.deadline_ms, time.time() * 1000, delay):
            return delay, None
        return delay, (
            f"rate-limited ({exc.scope}) {limited} time(s) in a row; the next try, "
            f"in {delay:g} s, would come after the deadline "
            f"({wire.DEADLINE_MS} {request.deadline_ms})"
        )


class Counts(Protocol):
    """The counters ``Retrying`` keeps (``WorkerStats``, ``AgentStats``)."""

    rate_limited: int
    failed_attempts: int


@dataclass(frozen=True, slots=True)
class Ending:
    """How the calls for one request ended: ``reason`` None when the handler succeeded, else
    the dead-letter reason and its sentence; the last call's attempt and latency."""

    attempt: int
    latency: float
    reason: str | None = None
    detail: str = ""


class Retrying(Calling):
    """The retry rule of the module docstring around ``Calling``'s calls."""

    max_attempts: int
    stats: Counts
    _log: logging.Logger  # the owner's logger

    async def _calls(
        self,
        request: Request,
        pause: Callable[[float], Awaitable[bool]],
        begin: Begin | None = None,
    ) -> Ending | None:
        """Call the handler for ``request`` until it succeeds or the request is to be
        dead-lettered; None when ``pause`` (the wait before a next call, False to stop
        waiting) gave the request up. ``begin``: awaited right before the first call
        (``_attempt``)."""
        attempt = 1
        limited = 0  # rate-limited calls in a row
        while True:
            call = await self._attempt(replace(request, attempt=attempt), begin)
            begin = None
            exc = call.error
            if exc is None:
                return Ending(attempt, call.latency)
            if isinstance(exc, RateLimited):
                limited += 1
                self.stats.rate_limited += 1
                delay, expired = self._after_rate_limit(request, exc, limited)
                if expired is not None:
                    return Ending(attempt, call.latency, wire.EXPIRED, expired)
                self._log.debug(
                    "%s rate-limited (%s); retry in %g s", where(request), exc.scope, delay
                )
            else:
                limited = 0
                self.stats.failed_attempts += 1
                self._log.warning(
                    "handler failed on %s (attempt %d of %d): %r",
                    where(request),
                    attempt,
                    self.max_attempts,
                    exc,
                )
                if attempt >= self.max_attempts:
                    detail = (
                        f"handler failed {self.max_attempts} time(s); last error: "
                        f"{type(exc).__name__}: {exc}"
                    )
                    return Ending(attempt, call.latency, wire.HANDLER_FAILED, detail)
                if self.metrics is not None:
                    self.metrics.retries.inc()
                delay = backoff_delay(attempt, self.backoff_initial, self.backoff_max)
                attempt += 1
            if not await pause(delay):
                return None
