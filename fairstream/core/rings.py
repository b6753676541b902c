"""The runtime records of ``FairScheduler``: a backlogged tenant, and a priority class's
calendar of rounds (see ``fairstream.core.deficit`` for how a decision uses them).

Both are internal to the core; they are apart only to keep each module readable.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Generic, NamedTuple, TypeVar, cast

from fairstream.core.ratelimit import TokenBucket
from fairstream.core.tenant import TenantPolicy

__all__ = [
    "ACTIVE",
    "DETACHED",
    "PARKED",
    "PAUSED",
    "RETIRED",
    "SLACK",
    "ClassRings",
    "Pick",
    "TenantRecord",
    "new_pick",
]

T = TypeVar("T")

# Tolerance for comparing float deficits (weights and quanta may be floats): a tenant that is
# owed 0.9999999999 of a unit-cost record because of rounding is owed the record.
SLACK: Final = 1e-9

# Where a tenant's runtime record is. Exactly one container (a ring or the parked heap)
# references a live record, so every transition either pops it or retires it.
ACTIVE: Final = 0  # in a ring of its class
PARKED: Final = 1  # rate-capped, waiting for a token, in the parked heap
PAUSED: Final = 2  # backlogged but paused, in no container
RETIRED: Final = 3  # superseded or removed; stale references are skipped
DETACHED: Final = 4  # being moved between containers, in none


class Pick(NamedTuple, Generic[T]):
    """One scheduling decision: send ``item`` of ``tenant``, which costs ``cost``."""

    tenant: str
    item: T
    cost: int


# Pick(...) goes through a Python-level __new__; tuple.__new__ does the same work in half
# the time, and push is on the per-record path.
new_pick = cast("Callable[[type[Pick[Any]], tuple[str, Any, int]], Pick[Any]]", tuple.__new__)


Rest = deque[Any] | tuple[Any, int]  # ``TenantRecord.rest``, once there is one


class TenantRecord(Generic[T]):
    """Runtime state of one backlogged tenant. Exists only while it has a backlog.

    Its queue is ``first`` and ``first_cost`` (the oldest item and its cost; a cost of 0:
    empty) and ``rest`` (the others, oldest first, as item, cost, item, cost...): None until
    a second item arrives, a 2-tuple while there are two, a deque from a third on. Most
    tenants of a million have one record or two; a deque costs about 760 bytes even when it
    holds one, and 0.3 us to make (a tuple 64 bytes, 0.08 us); a pick 72. A pick is made
    once per item, when it is taken: the items in ``rest`` cost two slots each, and no
    object. ``len``, ``items``, ``append``, ``appendleft`` and ``pop`` are the queue's
    operations; ``FairScheduler`` pushes and takes the first item inline, once per record."""

    __slots__ = (
        "bucket",
        "cls",
        "cost",
        "credited",
        "deficit",
        "first",
        "first_cost",
        "name",
        "policy",
        "quantum",
        "rest",
        "round",
        "state",
    )

    def __init__(
        self, name: str, policy: TenantPolicy, quantum: float, bucket: TokenBucket | None
    ) -> None:
        self.name = name
        self.policy = policy
        self.quantum = quantum
        self.bucket = bucket
        self.first: T | None = None  # the oldest item waiting,
        self.first_cost = 0  # and its cost (0: nothing waits)
        # The items after it (item, cost, item, cost...), once there were two.
        self.rest: Rest | None = None
        self.cost = 0  # total cost waiting
        self.deficit = 0.0
        self.credited = 0  # last round of self.cls whose quantum is in self.deficit
        self.round = 0  # round of the ring holding this record, while ACTIVE
        self.cls: ClassRings[T] | None = None
        self.state = DETACHED

    def __len__(self) -> int:
        """Items waiting."""
        if not self.first_cost:
            return 0
        return 1 + (len(self.rest) >> 1 if self.rest else 0)

    def head(self) -> Pick[T] | None:
        """The oldest item waiting, as a pick (None: nothing waits)."""
        if not self.first_cost:
            return None
        return new_pick(Pick, (self.name, self.first, self.first_cost))

    def items(self) -> list[Pick[T]]:
        """The items waiting, oldest first."""
        head = self.head()
        if head is None:
            return []
        rest = self.rest
        if not rest:
            return [head]
        name, flat = self.name, list(rest)
        return [head, *(new_pick(Pick, (name, *flat[i : i + 2])) for i in range(0, len(flat), 2))]

    def append(self, item: T, cost: int) -> None:
        """``item`` of ``cost`` at the tail (``cost``, the total, is the caller's to count)."""
        if not self.first_cost:
            self.first, self.first_cost = item, cost
            return
        rest = self.rest
        if rest is None:
            self.rest = (item, cost)
        elif type(rest) is tuple:
            self.rest = deque((*rest, item, cost))
        else:
            rest.extend((item, cost))  # type: ignore[union-attr]  # a deque

    def appendleft(self, pick: Pick[T]) -> None:
        """``pick`` at the head."""
        if self.first_cost:
            rest = self.rest
            if type(rest) is not deque:  # none or one item behind: a deque now, once
                rest = self.rest = deque(rest or ())
            rest.extendleft((self.first_cost, self.first))  # extendleft reverses; O(1)
        self.first, self.first_cost = pick[1], pick[2]

    def pop(self) -> Pick[T]:
        """Take the tail (there is one)."""
        rest = self.rest
        if type(rest) is tuple:
            self.rest = None
            return new_pick(Pick, (self.name, *rest))
        if rest:
            assert isinstance(rest, deque)
            cost = rest.pop()
            return new_pick(Pick, (self.name, rest.pop(), cost))
        tail = self.head()
        assert tail is not None
        self.first, self.first_cost = None, 0
        return tail

    def clear(self) -> None:
        """Forget every item."""
        self.first, self.first_cost, self.rest = None, 0, None

    def successor(self) -> TenantRecord[T]:
        """A fresh record taking over this one's queue; this one is retired."""
        fresh: TenantRecord[T] = TenantRecord(self.name, self.policy, self.quantum, self.bucket)
        fresh.first, fresh.first_cost, fresh.rest = self.first, self.first_cost, self.rest
        fresh.cost = self.cost
        fresh.deficit = self.deficit
        self.state = RETIRED
        return fresh


class ClassRings(Generic[T]):
    """The rings of one priority class: a calendar of rounds of tenants."""

    __slots__ = ("current", "later", "later_rounds", "priority", "round", "size", "upcoming")

    def __init__(self, priority: int) -> None:
        self.priority = priority
        self.round = 0
        self.current: deque[TenantRecord[T]] = deque()  # round `round`, head being visited
        self.upcoming: deque[TenantRecord[T]] = deque()  # round `round + 1`: the ring's tail
        self.later: dict[int, deque[TenantRecord[T]]] = {}  # rounds beyond, for costly heads
        self.later_rounds: list[int] = []  # heap of the keys of `later`
        self.size = 0  # live (ACTIVE) tenants in the rings

    def advance(self) -> bool:
        """Make the next non-empty round current; False when every ring is empty."""
        spare = self.current
        if self.upcoming:
            self.round += 1
            self.current = self.upcoming
        else:
            later = self.later
            while self.later_rounds:
                round_ = heapq.heappop(self.later_rounds)
                ring = later.pop(round_, None)
                if ring is not None:
                    break
            else:
                return False
            self.round = round_
            self.current = ring
        nxt = self.later.pop(self.round + 1, None)
        self.upcoming = spare if nxt is None else nxt
        return True

    def file(self, tenant: TenantRecord[T], round_: int) -> None:
        """Append ``tenant`` to the ring of ``round_`` (> current round)."""
        tenant.round = round_
        if round_ == self.round + 1:
            self.upcoming.append(tenant)
            return
        ring = self.later.get(round_)
        if ring is None:
            ring = self.later[round_] = deque()
            heapq.heappush(self.later_rounds, round_)
        ring.append(tenant)
