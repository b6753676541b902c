"""What the worker's consumer thread keeps track of: commit positions of its partitions,
per-tenant ordering of the records it hands out, and the bounded memory of recently seen
request ids. Pure: the unit tests drive these directly.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PartitionProgress", "RecentIds", "TenantQueues"]

T = TypeVar("T")


class PartitionProgress:
    """Offsets of one partition handed out during one assignment, and how far it may commit.

    The commit position is the first offset not yet done: every record before it succeeded,
    was dead-lettered or skipped as a duplicate. An abandoned record (its partition was
    revoked, or the worker stopped, before it finished) blocks the position for good: the
    next owner of the partition processes it again.

    Caller: the worker's consumer thread (add, resolve, commit_position); the event loop
    only reads ``live``. Affects: this object only.
    """

    __slots__ = ("_next", "_pending", "_resolved", "committed", "live")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()  # offsets handed out, in order, not yet committable
        self._resolved: dict[int, bool] = {}  # offset in _pending -> done (True) / abandoned
        self._next: int | None = None  # the offset after the highest one handed out
        self.committed: int | None = None  # the last position committed for this assignment
        self.live = True  # False once the partition is revoked or the worker stops

    def add(self, offset: int) -> bool:
        """Record that ``offset`` was handed out; False for an offset seen already."""
        if self._next is not None and offset < self._next:
            return False
        self._pending.append(offset)
        self._next = offset + 1
        return True

    def resolve(self, offset: int, done: bool) -> None:
        """Mark a handed-out offset done (it may be committed past) or abandoned (never)."""
        if self._pending and self._pending[0] <= offset and offset not in self._resolved:
            self._resolved[offset] = done

    def commit_position(self) -> int | None:
        """The offset to commit (the next one to read), or None before any record."""
        pending, resolved = self._pending, self._resolved
        while pending and resolved.get(pending[0]) is True:
            del resolved[pending.popleft()]
        if pending:
            return pending[0]
        return self._next

    @property
    def unresolved(self) -> int:
        """Records handed out that are neither done nor abandoned yet."""
        return len(self._pending) - len(self._resolved)


class TenantQueues(Generic[T]):
    """FIFO queues per tenant, at most one item of a tenant out at a time.

    ``take`` hands out the earliest-pushed item whose tenant has nothing out; ``done``
    returns the tenant's turn. Records of one tenant therefore run one after another in
    arrival order, records of different tenants run side by side, a slow tenant holds up no
    one else, and otherwise the order is the arrival (egress) order the scheduler chose:
    with one item out at a time it is exactly that order.

    Caller: the worker's event loop. Affects: this object only.
    """

    def __init__(self) -> None:
        self._queues: dict[str, deque[tuple[int, T]]] = {}  # tenants with queued items
        # (sequence of the head item, tenant) of the tenants with queued items and nothing
        # out: the heap order is the arrival order of their heads.
        self._ready: list[tuple[int, str]] = []
        self._busy: set[str] = set()  # tenants with an item out
        self._seq = 0
        self._size = 0

    def __len__(self) -> int:
        """Items queued (not counting those out)."""
        return self._size

    @property
    def out(self) -> int:
        """Items taken and not yet done."""
        return len(self._busy)

    def push(self, tenant: str, item: T) -> None:
        self._seq += 1
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
            if tenant not in self._busy:
                heapq.heappush(self._ready, (self._seq, tenant))
        queue.append((self._seq, item))
        self._size += 1

    def take(self) -> tuple[str, T] | None:
        """The next item to run, or None when every queued tenant has an item out."""
        if not self._ready:
            return None
        _, tenant = heapq.heappop(self._ready)
        queue = self._queues[tenant]
        _, item = queue.popleft()
        if not queue:
            del self._queues[tenant]
        self._busy.add(tenant)
        self._size -= 1
        return tenant, item

    def done(self, tenant: str) -> None:
        """The tenant's item out has finished; its next item (if any) becomes ready."""
        self._busy.discard(tenant)
        queue = self._queues.get(tenant)
        if queue:
            heapq.heappush(self._ready, (queue[0][0], tenant))

    def purge(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the queued items matching ``predicate`` (items out stay out)."""
        removed: list[T] = []
        for tenant in list(self._queues):
            kept: deque[tuple[int, T]] = deque()
            for entry in self._queues[tenant]:
                if predicate(entry[1]):
                    removed.append(entry[1])
                else:
                    kept.append(entry)
            if kept:
                self._queues[tenant] = kept
            else:
                del self._queues[tenant]
        # Heads may have changed: rebuild the ready heap from what is left.
        self._ready = [(q[0][0], t) for t, q in self._queues.items() if t not in self._busy]
        heapq.heapify(self._ready)
        self._size -= len(removed)
        return removed


class RecentIds:
    """The last ``capacity`` request ids seen, least recently seen evicted first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, request_id: str) -> None:
        self._ids[request_id] = None
        self._ids.move_to_end(request_id)
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
