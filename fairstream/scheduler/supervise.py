"""One failure policy for every long-lived thread of the service: restart with backoff,
then fatal; or fatal at once for a thread that cannot run twice.

The emitter and ingest threads own the instance's state, and the group thread leaves the
group for good when its run ends: their first failure is fatal (``restart=False``). The
policies, trim, feedback and audit threads each follow something (a topic, the committed
marks, the emitter) on a loop of their own and start afresh on each run. None of them may
end silently: a purge or a policy change would silently stop applying while ``/healthz``
says 200. So each runs under ``Supervisor.run``:

- the thread's body (its ``run``) returns only when the service stops it; an exception, or
  a return while not stopping, is a failure;
- a failure is logged with its traceback, counted (``fairstream_thread_restarts_total
  {thread}``), raised as a condition (``fairstream_condition{name="thread-<name>"}``,
  named in ``/readyz``, degraded, not unready), and the body runs again after a backoff
  (``BACKOFF`` doubling up to ``MAX_BACKOFF``);
- a run that lasted ``HEALTHY_RUN`` seconds clears the count; ``MAX_RESTARTS``
  failures in a row are fatal: the service's ``fail`` turns ``/healthz`` 503 and the
  process exits non-zero, so that the orchestrator restarts all of it.

Each restarted body must be restartable: it opens what it needs (its consumer) at the
start of a run and closes it at the end. ``fairstream_thread_up{thread}`` is 1 while a body
runs. A ``FatalError`` (fenced, a producer that cannot be renewed) is reported by its own
words: it already says what happened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fairstream.errors import Error
from fairstream.scheduler import faults
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Conditions

log = logging.getLogger("fairstream.scheduler")

BACKOFF = 1.0  # seconds before the first restart
MAX_BACKOFF = 30.0
HEALTHY_RUN = 60.0  # seconds a run must last to clear the failure count
MAX_RESTARTS = 5  # failures in a row before the instance gives up (fatal)


class FatalError(Error):
    """The instance cannot go on (fenced by a newer instance, a broken producer).
    ``fenced``: another producer with this transactional id took over."""

    def __init__(self, message: str, *, fenced: bool = False) -> None:
        super().__init__(message)
        self.fenced = fenced


class Supervisor:
    def __init__(
        self,
        metrics: Metrics,
        conditions: Conditions,
        on_fatal: Callable[[str], None],
        stopping: threading.Event,
        *,
        clock: Callable[[], float] = time.monotonic,
        backoff: float = BACKOFF,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        self._metrics = metrics
        self._conditions = conditions
        self._on_fatal = on_fatal
        self._stopping = stopping
        self._clock = clock
        self._backoff = backoff
        self._max_restarts = max_restarts

    def thread(
        self, name: str, body: Callable[[], None], *, restart: bool = True
    ) -> threading.Thread:
        """A daemon thread running ``body`` under this policy (``restart`` False: its
        first failure is fatal, for a body that cannot run twice)."""
        return threading.Thread(target=self.run, args=(name, body, restart), name=name, daemon=True)

    def run(self, name: str, body: Callable[[], None], restart: bool = True) -> None:
        """Run ``body`` until the service stops; restart it on failure (see the module)."""
        limit = self._max_restarts if restart else 0
        failures = 0
        delay = self._backoff
        up = self._metrics.thread_up.labels(name)
        while not self._stopping.is_set():
            started = self._clock()
            up.set(1)
            try:
                faults.fail(name)
                body()
            except FatalError as exc:
                self._on_fatal(str(exc))
                return
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.exception("the %s thread failed", name)
            else:
                if self._stopping.is_set():
                    break
                error = "it ended without being stopped"
                log.error("the %s thread ended without being stopped", name)
            finally:
                up.set(0)
            if self._clock() - started >= HEALTHY_RUN:
                failures, delay = 0, self._backoff
            failures += 1
            if failures > limit:
                self._on_fatal(
                    f"the {name} thread failed ({error})"
                    if not restart
                    else f"the {name} thread failed {failures} times in a row (last: {error})"
                )
                return
            self._metrics.thread_restarts.labels(name).inc()
            self._conditions.set(
                f"thread-{name}",
                f"the {name} thread failed ({error}); restart {failures} of at most "
                f"{limit} in {delay:.0f} s",
            )
            if self._stopping.wait(delay):
                break
            delay = min(MAX_BACKOFF, delay * 2)
            log.warning("restarting the %s thread", name)
            self._conditions.clear(f"thread-{name}")
