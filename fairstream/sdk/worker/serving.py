"""The worker on the caller's event loop: ``await worker.serve()`` and ``async with worker``.

``Worker.run`` runs the handlers on an event loop of the worker's own; ``serve`` lends it the
application's running loop instead, so that async handlers share it with the application's
own tasks and clients (a FastAPI app's, say), and runs the consumer (``Worker._run_on``) on a
thread of its own. Its end (or failure) comes back to the awaiting coroutine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Self

__all__ = ["Hook", "Serving"]

# ``on_startup`` / ``on_shutdown``: awaited on the handlers' loop.
Hook = Callable[[], Coroutine[Any, Any, None]]


class Serving:
    """Mixed into ``Worker``, which provides ``_run_on``, ``stop`` and the state below."""

    _serving: asyncio.Future[None] | None
    _on_running: Callable[[], object] | None

    # Worker's own (defined there; declared here for the type checker).
    def _run_on(self, loop: asyncio.AbstractEventLoop) -> None:
        raise NotImplementedError("Worker._run_on")

    def stop(self) -> None:
        raise NotImplementedError("Worker.stop")

    async def serve(self) -> None:
        """``run`` on the caller's event loop: async handlers (and the hooks) run on it,
        beside the application's own tasks; the consumer runs on a thread of its own. Ends
        after ``stop()`` (or a cancellation, which stops the worker and waits for it to
        drain and commit before it is re-raised).

        Caller: a coroutine of the application (``await worker.serve()``, or ``async with
        worker:``). Affects: as ``run``.
        """
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def consume() -> None:
            try:
                self._run_on(loop)
            except BaseException as exc:  # handed to the awaiting coroutine
                loop.call_soon_threadsafe(_settle, ended, exc)
            else:
                loop.call_soon_threadsafe(_settle, ended, None)

        threading.Thread(target=consume, name="fairstream-worker-consumer", daemon=True).start()
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            self.stop()
            await ended
            raise

    async def __aenter__(self) -> Self:
        """Serve on the running loop until the block ends; entered once subscribed."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        self._on_running = lambda: loop.call_soon_threadsafe(_settle, started, None)
        self._serving = asyncio.ensure_future(self.serve())
        await asyncio.wait({self._serving, started}, return_when=asyncio.FIRST_COMPLETED)
        if self._serving.done():  # it could not start: say why
            self._serving.result()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()
        serving, self._serving = self._serving, None
        if serving is not None:
            await serving


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
