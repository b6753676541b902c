"""Faults injected by tests into a running scheduler process (never set in production).

``FAIRSTREAM_TEST_FAULTS`` is a comma-separated list of ``kind:name=value``:

- ``fail:<thread>=N``: the supervised thread ``<thread>`` (``policies``, ``trim``,
  ``feedback``, ``audit``, ``group``) raises ``InjectedFault`` at the start of each of its
  first N runs, as an unexpected error inside it would;
- ``hold:commit=S``: the emitter's next commit waits S seconds first, once, as a commit
  held by a slow broker would;
- ``hold:revoke=S``: the emitter waits S seconds before it commits its first revocation,
  once, as a slow emitter would (to outlast ``--revoke-wait``);
- ``miss:readback=N``: the payload fetcher's first N reads of the log find nothing, as
  reads from a slow broker would (what follows is real: the log start is asked).

The integration tests use them to show the failure policy (``supervise``) and that
``/metrics`` answers during a long commit; unset, each check is one dict lookup.
"""

from __future__ import annotations

import os
import threading
import time

ENV = "FAIRSTREAM_TEST_FAULTS"


class InjectedFault(RuntimeError):
    """The error a ``fail:`` fault raises."""


def _parse(text: str) -> dict[str, float]:
    faults: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        if ":" not in key or not value:
            raise ValueError(f"{ENV}: {item!r} is not kind:name=value")
        faults[key] = float(value)
    return faults


_faults = _parse(os.environ.get(ENV, ""))
_lock = threading.Lock()


def fail(thread: str) -> None:
    """Raise ``InjectedFault`` if a ``fail:<thread>`` fault has runs left."""
    if not _faults:
        return
    key = f"fail:{thread}"
    with _lock:
        left = _faults.get(key, 0)
        if left <= 0:
            return
        _faults[key] = left - 1
    raise InjectedFault(f"injected failure of the {thread} thread ({ENV})")


def take(what: str) -> bool:
    """Whether a ``miss:<what>`` fault has a miss left (and use it)."""
    if not _faults:
        return False
    key = f"miss:{what}"
    with _lock:
        left = _faults.get(key, 0)
        if left <= 0:
            return False
        _faults[key] = left - 1
    return True


def hold(what: str) -> None:
    """Wait as long as a ``hold:<what>`` fault says, once."""
    if not _faults:
        return
    with _lock:
        seconds = _faults.pop(f"hold:{what}", 0)
    if seconds > 0:
        time.sleep(seconds)
