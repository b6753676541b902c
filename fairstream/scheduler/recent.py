"""The request ids this instance emitted lately, so that feedback can be told apart.

A worker's feedback record names the request it is about. A reported cost is charged to a
tenant's deficit only when the request is one this instance emitted: feedback about a
request nobody emitted (a replayed topic, a worker of another deployment, a forged record)
is counted as ``unknown-request`` and ignored, and feedback about another instance's
request is left to that instance.

Memory is bounded, in two generations of ``capacity`` ids each (default 200,000, about 20
MB a generation): the newest ids go into the young one; when it is full it becomes the old
one and the previous old one is forgotten. So the last ``capacity`` ids are always
remembered, and at most twice as many. A request whose feedback comes after that many later
requests went out counts as unknown; at a paid API's pace (hundreds to thousands of
requests a second) that is minutes.

Two sets, not a set and a deque of arrival order: ``add`` runs once per egress record, and
one set insertion is half the work of the ordered variant (measured on the emitter).

Thread-safety: the emitter adds, the feedback reader asks; each call reads or swaps a
reference and touches one set, atomic under the GIL.
"""

from __future__ import annotations

CAPACITY = 200_000


class RecentRequests:
    __slots__ = ("_old", "_young", "capacity")

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity!r}")
        self.capacity = capacity
        self._young: set[bytes] = set()
        self._old: frozenset[bytes] | set[bytes] = frozenset()

    def add(self, request_id: bytes) -> None:
        """Remember ``request_id``; forget the old generation once the young one is full.
        Caller: the emitter, once per egress record."""
        young = self._young
        young.add(request_id)
        if len(young) >= self.capacity:
            self._old = young
            self._young = set()

    def __contains__(self, request_id: object) -> bool:
        if isinstance(request_id, str):
            request_id = request_id.encode()
        return request_id in self._young or request_id in self._old

    def __len__(self) -> int:
        return len(self._young | self._old)
