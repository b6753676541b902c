"""The request ids this instance emitted lately, so that feedback can be told apart.

A worker's feedback record names the request it is about. A reported cost is charged to a
tenant's deficit only when the request is one this instance emitted: feedback about a
request nobody emitted (a replayed topic, a worker of another deployment, a forged record)
is counted as ``unknown-request`` and ignored, and feedback about another instance's
request is left to that instance.

Memory is bounded: the last ``capacity`` ids (default 200,000, about 20 MB). A request
whose feedback comes after that many later requests went out counts as unknown too; at a
paid API's pace (hundreds to thousands of requests a second) that is minutes.

Thread-safety: the emitter adds, the feedback reader asks; each call is a few operations
on a deque and a set, atomic under the GIL.
"""

from __future__ import annotations

from collections import deque

CAPACITY = 200_000


class RecentRequests:
    __slots__ = ("_ids", "_order", "capacity")

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity!r}")
        self.capacity = capacity
        self._ids: set[bytes] = set()
        self._order: deque[bytes] = deque()

    def add(self, request_id: bytes) -> None:
        """Remember ``request_id``; forget the oldest beyond ``capacity``. Caller: the
        emitter, once per egress record."""
        ids = self._ids
        if request_id in ids:
            return
        ids.add(request_id)
        order = self._order
        order.append(request_id)
        if len(order) > self.capacity:
            ids.discard(order.popleft())

    def __contains__(self, request_id: object) -> bool:
        if isinstance(request_id, str):
            request_id = request_id.encode()
        return request_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)
