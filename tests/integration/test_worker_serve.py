"""fairstream.Worker on the caller's event loop against a real broker: ``async with`` and
``await serve()`` run async handlers on the application's loop, beside its own tasks, with
the startup and shutdown hooks on that loop; cancelling ``serve`` drains and commits."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from fairstream import Request
from fairstream_dev.harness.kafka import wait_until
from tests.integration.workers import Setup, egress_record, feed


def test_async_with_runs_handlers_on_the_callers_loop(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", f"r-{i}", b"x") for i in range(20)])
    seen: list[tuple[str, int]] = []
    events: list[str] = []
    shared: dict[str, Any] = {}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        app_thread = threading.get_ident()

        async def startup() -> None:
            assert asyncio.get_running_loop() is loop
            shared["client"] = object()  # what a shared HTTP client would be
            events.append("startup")

        async def shutdown() -> None:
            assert asyncio.get_running_loop() is loop
            events.append("shutdown")

        async def handler(request: Request) -> None:
            # On the application's loop and thread, with the client startup made.
            assert asyncio.get_running_loop() is loop
            assert shared["client"] is not None
            seen.append((request.request_id, threading.get_ident()))
            await asyncio.sleep(0)

        worker = s.worker(handler, concurrency=8, on_startup=startup, on_shutdown=shutdown)
        async with worker:
            assert worker.running
            while len(seen) < 20:  # the application's own task goes on meanwhile
                await asyncio.sleep(0.05)
        assert not worker.running
        assert {thread for _, thread in seen} == {app_thread}

    asyncio.run(main())
    assert sorted(rid for rid, _ in seen) == sorted(f"r-{i}" for i in range(20))
    assert events == ["startup", "shutdown"]
    assert s.committed() == [20]


def test_cancelling_serve_drains_and_commits(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)
    feed(kafka_bootstrap, s.egress, [egress_record("acme", f"r-{i}", b"x") for i in range(5)])
    done: list[str] = []

    async def handler(request: Request) -> None:
        done.append(request.request_id)

    async def main() -> None:
        worker = s.worker(handler)
        task = asyncio.create_task(worker.serve())
        while len(done) < 5:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not worker.running

    asyncio.run(main())
    # Cancelled after every record was handled: the drain committed all of them.
    wait_until(lambda: s.committed() == [5], 30, lambda: f"committed {s.committed()}")


def test_a_failing_startup_hook_ends_serve_with_its_error(kafka_bootstrap: str) -> None:
    s = Setup(kafka_bootstrap)

    async def startup() -> None:
        raise RuntimeError("no API key")

    async def handler(request: Request) -> None:
        raise AssertionError("never called")

    async def main() -> None:
        with pytest.raises(RuntimeError, match="no API key"):
            async with s.worker(handler, on_startup=startup):
                raise AssertionError("entered although the worker could not start")

    asyncio.run(main())
