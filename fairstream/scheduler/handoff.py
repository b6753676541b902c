"""The one queue between the ingest thread and the emitter thread.

The ingest thread parses records and answers the group's rebalance callbacks; the emitter
thread owns everything that decides and writes: the fair core, each partition's progress,
the transactional producer. Everything the ingest side learns reaches the emitter through
this queue, in the order it happened: records, then a revocation, then the records of a new
assignment. One owner and one ordered queue mean no lock around the core and no race between
a revocation and the records it covers.

Records travel as plain tuples (``Parsed``), the cheapest thing CPython can build and
inspect per record; everything else is a small control object.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from fairstream import contract
from fairstream.scheduler.progress import PartitionProgress

# (partition, offset, tenant, cost, deadline_ms, enqueued_ms, message, invalid): tenant is
# None and invalid says why when the record breaks the ingest contract.
Parsed = tuple[int, int, str | None, int, int | None, int, Message, contract.Invalid | None]

HIGH_WATER = 50_000  # parsed records waiting before the ingest thread stops reading
LOW_WATER = 10_000  # ... and when it starts again


@dataclass
class Assign:
    """Partitions now owned, with the progress recovered for each. ``rewind``: the answer to
    a rewind the emitter asked for after an aborted transaction."""

    progress: dict[int, PartitionProgress]
    rewind: bool = False


@dataclass
class Revoke:
    """Partitions leaving: commit what was emitted for them, then forget them.
    ``lost``: the group already gave them away (session expired): abort instead."""

    partitions: list[int]
    lost: bool = False
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Heard:
    """A partition reached the end of its log: the warm-up need not wait for it."""

    partition: int


@dataclass
class PolicyChange:
    """A record of the policy topic (``value`` None: a tombstone)."""

    key: bytes | None
    value: bytes | None


@dataclass
class Stop:
    """Commit what is open and stop. Set ``done`` when the producer is closed."""

    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Call:
    """Run ``fn`` on the emitter thread (reads of the core for /tenants and /metrics)."""

    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class Handoff:
    """A deque (thread-safe appends and pops in CPython) plus two events.

    ``wake`` tells the emitter something arrived; ``room`` tells the ingest thread it may read
    again after the queue reached ``HIGH_WATER`` (the emitter is behind).
    """

    def __init__(self) -> None:
        self.queue: deque[Any] = deque()
        self.wake = threading.Event()
        self.room = threading.Event()
        self.room.set()

    def put(self, item: Any) -> None:
        self.queue.append(item)
        self.wake.set()

    def put_many(self, items: Iterable[Any]) -> None:
        self.queue.extend(items)
        if len(self.queue) >= HIGH_WATER:
            self.room.clear()
        self.wake.set()

    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn`` on the emitter thread, ahead of queued records; wait for its result."""
        call = Call(fn)
        self.queue.appendleft(call)
        self.wake.set()
        if not call.done.wait(timeout):
            raise TimeoutError("the emitter thread did not answer")
        if call.error is not None:
            raise call.error
        return call.result

    def take(self, limit: int) -> list[Any]:
        """Up to ``limit`` items, oldest first. Caller: the emitter."""
        queue = self.queue
        n = min(limit, len(queue))
        items = [queue.popleft() for _ in range(n)]
        if len(queue) <= LOW_WATER:
            self.room.set()
        return items

    def __len__(self) -> int:
        return len(self.queue)
