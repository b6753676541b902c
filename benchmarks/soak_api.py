"""The soak's simulated paid API: the handler its ``fairstream worker`` processes call.

``fairstream worker --handler soak_api:handle`` (run from ``benchmarks/``). Each call takes
a short random time, like a remote call, and fails now and then (``TransientAPIError``, as a
503 from an API would), so that the worker's retries are exercised. A call that succeeds
appends one line to the file named by ``FAIRSTREAM_SOAK_HANDLED``:

    <time ns> TAB <payload> TAB <request id> TAB <pid> LF

with a single ``os.write`` on an ``O_APPEND`` descriptor, so that a kill -9 leaves whole
lines only: a line is a request the API served. ``benchmarks/soak.py`` counts them.
"""

from __future__ import annotations

import os
import random
import threading
import time

from fairstream import Request

FAILURE_RATE = float(os.environ.get("FAIRSTREAM_SOAK_FAILURE_RATE", "0.01"))
LATENCY_S = (0.0005, 0.003)  # a call takes this long, uniformly

_lock = threading.Lock()
_fd: int | None = None
_rng = random.Random(os.environ.get("FAIRSTREAM_SOAK_SEED", "0") + f"-{os.getpid()}")


class TransientAPIError(Exception):
    """The simulated API answered 503: try again later."""


def _handled_fd() -> int:
    global _fd  # noqa: PLW0603 (one descriptor per process, opened on first use)
    with _lock:
        if _fd is None:
            _fd = os.open(
                os.environ["FAIRSTREAM_SOAK_HANDLED"], os.O_WRONLY | os.O_CREAT | os.O_APPEND
            )
        return _fd


def handle(request: Request) -> None:
    with _lock:
        latency = _rng.uniform(*LATENCY_S)
        fails = _rng.random() < FAILURE_RATE
    time.sleep(latency)  # the remote call
    if fails:
        raise TransientAPIError("simulated 503 Service Unavailable")
    line = b"%d\t%s\t%s\t%d\n" % (
        time.time_ns(),
        request.payload,
        request.request_id.encode(),
        os.getpid(),
    )
    os.write(_handled_fd(), line)
