"""The API's gate (``Calling._api_wait``): a 429 at API scope with a Retry-After holds every
call of the worker until it has passed (``API_GATE_MAX`` at most), the other requests' calls
included; a tenant-scope 429 or a 429 without a Retry-After holds nobody else; a request
whose deadline would pass while it waits is dead-lettered as ``expired``. Run on a fake
clock, broker-free."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from fairstream import wire
from fairstream.sdk.worker.calling import API_GATE_MAX, Ending, OutcomeReport, Retrying
from fairstream.sdk.worker.handler import RateLimited, Request


@dataclass
class Counts:
    rate_limited: int = 0
    failed_attempts: int = 0


@dataclass
class Api:
    """A handler whose answers are scripted per request id, stamping each call's time."""

    clock: list[float]
    refuse: dict[str, list[RateLimited]] = field(default_factory=dict)
    calls: list[tuple[float, str]] = field(default_factory=list)

    async def __call__(self, request: Request) -> None:
        self.calls.append((self.clock[0], request.request_id))
        answers = self.refuse.get(request.request_id)
        if answers:
            raise answers.pop(0)


class Worker(Retrying):
    """A ``Retrying`` whose clock and pauses are fake: a pause moves the clock on."""

    def __init__(self, api: Api) -> None:
        self.handler = api
        self._is_async = True
        self.backoff_initial = 0.1
        self.backoff_max = 1.0
        self.max_attempts = 3
        self.stats = Counts()
        self._log = logging.getLogger("test")
        self._jitter = lambda: 0.0
        self.now = api.clock
        self._clock = lambda: self.now[0]
        self.pauses: list[float] = []
        self.reports: list[OutcomeReport] = []

    async def _report(self, report: OutcomeReport) -> None:
        self.reports.append(report)

    async def pause(self, delay: float) -> bool:
        self.pauses.append(delay)
        self.now[0] += delay
        return True

    def run(self, request: Request) -> Ending | None:
        return asyncio.run(self._calls(request, self.pause))


def request(rid: str, deadline_ms: int | None = None) -> Request:
    return Request(
        tenant="t",
        payload=b"",
        request_id=rid,
        cost=1,
        headers=(),
        enqueued_ms=None,
        scheduled_ms=None,
        deadline_ms=deadline_ms,
        topic="egress",
        partition=0,
        offset=0,
    )


def test_an_api_retry_after_holds_the_other_requests_calls_until_it_has_passed() -> None:
    clock = [100.0]
    api = Api(clock, refuse={"a": [RateLimited(0.5)]})
    worker = Worker(api)
    ending = worker.run(request("a"))  # refused at 100.0, called again at 100.5
    assert ending is not None
    assert ending.reason is None
    assert api.calls == [(100.0, "a"), (100.5, "a")]
    # A new refusal at 100.5 closes the gate until 101.0: "b", due at 100.7, waits.
    api.refuse["c"] = [RateLimited(0.5)]
    clock[0] = 100.5
    assert worker.run(request("c")) is not None
    clock[0] = 100.7
    ending = worker.run(request("b"))
    assert ending is not None
    assert ending.reason is None
    assert api.calls[-1] == (101.0, "b")
    assert abs(worker.pauses[-1] - 0.3) < 1e-9


def test_a_tenant_scope_limit_or_a_bare_429_holds_no_other_call() -> None:
    clock = [10.0]
    api = Api(clock, refuse={"a": [RateLimited(5.0, scope="tenant")], "b": [RateLimited()]})
    worker = Worker(api)
    worker.run(request("a"))
    worker.run(request("b"))
    before = len(worker.pauses)
    clock[0] = 20.0
    worker.run(request("c"))
    assert api.calls[-1] == (20.0, "c")
    assert len(worker.pauses) == before  # "c" went straight through
    assert worker._api_wait() == 0.0


def test_a_request_whose_deadline_passes_behind_the_gate_is_dead_lettered_as_expired() -> None:
    clock = [0.0]
    api = Api(clock, refuse={"a": [RateLimited(0.8)]})
    worker = Worker(api)
    asyncio.run(worker._attempt(request("a")))  # refused: the gate closes for 0.8 s
    soon = int(time.time() * 1000) + 300  # 0.3 s from now, on the wall clock
    ending = worker.run(request("b", deadline_ms=soon))
    assert ending is not None
    assert ending.reason == wire.EXPIRED
    assert "Retry-After" in ending.detail
    assert [rid for _, rid in api.calls] == ["a"]  # "b" was never called


def test_a_long_retry_after_holds_the_other_calls_for_api_gate_max_at_most() -> None:
    clock = [0.0]
    api = Api(clock, refuse={"a": [RateLimited(3600.0)]})
    worker = Worker(api)
    asyncio.run(worker._attempt(request("a")))  # refused for an hour: the scheduler's hold
    assert worker._api_wait() == API_GATE_MAX
    ending = worker.run(request("b"))
    assert ending is not None
    assert ending.reason is None
    assert api.calls[-1] == (API_GATE_MAX, "b")
