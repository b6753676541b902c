"""The one queue between the ingest thread and the emitter thread.

The ingest thread parses records and answers the group's rebalance callbacks; the emitter
thread owns everything that decides and writes: the fair core, each partition's progress,
the transactional producer. Everything the ingest side learns reaches the emitter through
this queue, in the order it happened: records, then a revocation, then the records of a new
assignment. One owner and one ordered queue mean no lock around the core and no race between
a revocation and the records it covers.

Records travel as ``Parsed`` NamedTuples (``records``), a tuple's cost to build and
inspect per record, in one queue per partition; everything else is a small control object
in a queue of its own (``messages``: every message between the scheduler's threads).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from fairstream.scheduler.messages import Call
from fairstream.scheduler.records import Parsed

__all__ = ["IN_FLIGHT", "Handoff", "high_water"]


# Parsed records waiting for the emitter, over all partitions, before a partition is not
# read; each partition's share of it, within these bounds (``high_water``). Shared, not per
# partition: 20,000 per partition let an instance of 12 partitions hold 240,000 (about
# 70 MB) in flight, and more partitions more.
IN_FLIGHT = 60_000
HIGH_WATER_BOUNDS = (4096, 20_000)


def high_water(partitions: int) -> int:
    """Records one of ``partitions`` partitions may have waiting before it is not read."""
    share = IN_FLIGHT // max(1, partitions)
    return min(max(share, HIGH_WATER_BOUNDS[0]), HIGH_WATER_BOUNDS[1])


class Handoff:
    """Per-partition record queues and one control queue, plus a wake-up event.

    CPython's deque appends and pops are thread-safe. Records wait in a queue of their
    partition, so the emitter takes them round robin between partitions: a burst waiting in
    one partition's queue never holds back the records of another. Controls (assignments,
    revocations, policies, calls) wait in their own queue and are applied before records.

    The ingest thread opens a fresh queue for a partition when it is assigned (or rewound)
    and hands it to the emitter inside the ``Assign``: the emitter takes records only from
    the queues it was handed, so a record can never be applied before its partition's
    assignment, nor a record read before a revocation or rewind after it. While a
    partition's queue holds its ``high_water`` records the ingest thread leaves its reader
    alone.
    """

    def __init__(self) -> None:
        self.records: dict[int, deque[Parsed]] = {}
        # Per ingest partition, the keys (and tenant ids) of tenants so far behind that the
        # ingest thread passes their records over (``emitter.spill``): written by the
        # emitter, replaced whole at each change (the ingest thread reads a snapshot).
        self.passing: dict[int, dict[bytes, str]] = {}
        self.controls: deque[Any] = deque()
        self.wake = threading.Event()
        self._turn = 0  # where the next round robin over partitions starts

    def put(self, item: Any) -> None:
        """A control item, applied by the emitter before any record it has not taken yet."""
        self.controls.append(item)
        self.wake.set()

    def open(self, partition: int) -> deque[Parsed]:
        """A fresh queue for a partition (newly assigned, or read again after a rewind)."""
        queue: deque[Parsed] = deque()
        self.records[partition] = queue
        return queue

    def close(self, partition: int) -> None:
        self.records.pop(partition, None)

    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn`` on the emitter thread, ahead of queued records; wait for its result."""
        call = Call(fn)
        self.controls.appendleft(call)
        self.wake.set()
        if not call.done.wait(timeout):
            raise TimeoutError("the emitter thread did not answer")
        if call.error is not None:
            raise call.error
        return call.result

    def take_records(self, queues_of: dict[int, deque[Parsed]], limit: int) -> list[Parsed]:
        """Up to ``limit`` records from ``queues_of`` (the emitter's), round robin between
        partitions, oldest first within one. Caller: the emitter."""
        queues = [q for q in queues_of.values() if q]
        if not queues:
            return []
        share = max(64, limit // len(queues))
        self._turn = (self._turn + 1) % len(queues)
        out: list[Parsed] = []
        for queue in queues[self._turn :] + queues[: self._turn]:
            popleft = queue.popleft
            for _ in range(min(share, len(queue))):
                out.append(popleft())
        return out

    def pending(self, queues_of: dict[int, deque[Parsed]]) -> bool:
        """Whether anything waits for the emitter."""
        return bool(self.controls) or any(queues_of.values())

    def backlog(self, partition: int) -> int:
        queue = self.records.get(partition)
        return len(queue) if queue is not None else 0
