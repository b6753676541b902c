"""What the worker keeps track of: commit positions of its partitions (consumer thread),
the order in which it starts the records it fetched, per tenant and overall (event loop),
and the bounded memory of recently seen request ids. Pure: the unit tests drive these
directly.

Offsets complete in any order (``CommitPosition`` commits only the contiguous done
prefix), so how many records of a tenant run at once (``TenantQueues``' ``per_tenant``)
never changes what is committed.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Generic, Literal, TypeVar, get_args

__all__ = ["ORDERINGS", "CommitPosition", "Ordering", "RecentIds", "TenantQueues", "per_tenant"]

T = TypeVar("T")

# How a worker orders one tenant's records (``Worker(ordering=...)``, ``--ordering``):
# "start": calls start in egress order, many at once, finishing in any order;
# "completion": one at a time, each started after the previous one finished.
Ordering = Literal["start", "completion"]
ORDERINGS: tuple[Ordering, ...] = get_args(Ordering)


def per_tenant(ordering: str) -> int | None:
    """The ``TenantQueues`` limit of an ordering: None (no limit) or 1; a clear error for a
    name that is not one."""
    if ordering == "start":
        return None
    if ordering == "completion":
        return 1
    raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}, got {ordering!r}")


class CommitPosition:
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
    """FIFO queues per tenant, at most ``per_tenant`` items of a tenant out at a time.

    ``take`` hands out the earliest-pushed item whose tenant has fewer than ``per_tenant``
    items out; ``done`` returns one of the tenant's turns. A tenant's items are therefore
    handed out in arrival order, and otherwise in the arrival (egress) order the scheduler
    chose, as far as the tenants' limits allow.

    - ``per_tenant=1`` (the worker's ``ordering="completion"``): a tenant's records run one
      after another, each after the previous one finished; a slow tenant holds up no one
      else.
    - ``per_tenant=None`` (``ordering="start"``): no limit per tenant: items are handed out
      in exactly the arrival order, whatever their tenant, as fast as ``take`` is called.

    Caller: the worker's event loop. Affects: this object only.
    """

    def __init__(self, per_tenant: int | None = 1) -> None:
        if per_tenant is not None and per_tenant < 1:
            raise ValueError(f"per_tenant must be at least 1 or None, got {per_tenant}")
        self.per_tenant = per_tenant
        self._queues: dict[str, deque[tuple[int, T]]] = {}  # tenants with queued items
        # (sequence of the head item, tenant) of the tenants with queued items and fewer
        # than per_tenant out, each at most once: the heap order is the arrival order of
        # their heads.
        self._ready: list[tuple[int, str]] = []
        self._busy: dict[str, int] = {}  # tenants with items out -> how many
        self._out = 0
        self._seq = 0
        self._size = 0

    def __len__(self) -> int:
        """Items queued (not counting those out)."""
        return self._size

    @property
    def out(self) -> int:
        """Items taken and not yet done."""
        return self._out

    def out_of(self, tenant: str) -> int:
        """The tenant's items taken and not yet done."""
        return self._busy.get(tenant, 0)

    def _open(self, tenant: str) -> bool:
        """True when the tenant may have one more item out."""
        return self.per_tenant is None or self._busy.get(tenant, 0) < self.per_tenant

    def push(self, tenant: str, item: T) -> None:
        self._seq += 1
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
            if self._open(tenant):
                heapq.heappush(self._ready, (self._seq, tenant))
        queue.append((self._seq, item))
        self._size += 1

    def take(self) -> tuple[str, T] | None:
        """The next item to run, or None when no queued tenant may have one more out."""
        if not self._ready:
            return None
        _, tenant = heapq.heappop(self._ready)
        queue = self._queues[tenant]
        _, item = queue.popleft()
        self._busy[tenant] = self._busy.get(tenant, 0) + 1
        self._out += 1
        self._size -= 1
        if not queue:
            del self._queues[tenant]
        elif self._open(tenant):  # still below its limit: its next item is ready at once
            heapq.heappush(self._ready, (queue[0][0], tenant))
        return tenant, item

    def done(self, tenant: str) -> None:
        """One of the tenant's items out has finished; its next item (if any) may become
        ready."""
        count = self._busy.get(tenant, 0)
        if count <= 0:
            return  # nothing out: a stray report changes nothing
        was_open = self._open(tenant)
        self._out -= 1
        if count == 1:
            del self._busy[tenant]
        else:
            self._busy[tenant] = count - 1
        queue = self._queues.get(tenant)
        if queue and not was_open:  # it was at its limit, so not in the heap
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
        self._ready = [(q[0][0], t) for t, q in self._queues.items() if self._open(t)]
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
