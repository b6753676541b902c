"""The runtime records of ``GroupScheduler``: a group's key in the outer scheduler, the
slots of its outer queue, and the group itself with its staged records (see
``fairstream.core.hierarchy`` for how a decision uses them).

Internal to the core; apart only to keep each module readable, as ``rings`` is for
``deficit``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from typing import Final, Generic, TypeVar

from fairstream.core.deficit import FairScheduler
from fairstream.core.rings import Pick

__all__ = ["STAGED", "Group", "GroupKey", "Slot"]

T = TypeVar("T")

STAGED: Final = 2  # records a group keeps picked ahead in its outer queue


class GroupKey(str):
    """A group's key in the outer scheduler: equal only to the key of the same group, never
    to a tenant id (a plain ``str``), whatever the names."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is GroupKey and str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return f"group {str.__repr__(self)}"


class Slot(Generic[T]):
    """One entry of a group's outer queue: a record its inner scheduler picked (staged), or
    void (its record went back to the inner queue; it is staged again or skipped)."""

    __slots__ = ("group", "pick")

    def __init__(self, group: Group[T], pick: Pick[T] | None) -> None:
        self.group = group
        self.pick = pick


class Group(Generic[T]):
    """Runtime state of one group: its members' scheduler and its staged records."""

    __slots__ = ("cost", "due", "inner", "key", "live", "name", "records", "slots")

    def __init__(self, name: str, inner: FairScheduler[T]) -> None:
        self.name = name
        self.key = GroupKey(name)
        self.inner = inner
        self.slots: deque[Slot[T]] = deque()  # in the order of the outer queue
        self.live = 0  # slots holding a record: always a prefix of ``slots``
        self.records = 0  # records waiting, staged included
        self.cost = 0  # their total cost
        self.due: float | None = None  # when a starved group may stage again (heap entry)

    def staged(self) -> Iterator[Pick[T]]:
        """The staged records, in the order they go (at most ``STAGED``)."""
        for slot in itertools.islice(self.slots, self.live):
            pick = slot.pick
            assert pick is not None
            yield pick

    def holds(self, tenant: str) -> bool:
        """Whether a record of ``tenant`` is staged. O(STAGED)."""
        slots = self.slots
        for i in range(self.live):
            pick = slots[i].pick
            if pick is not None and pick[0] == tenant:
                return True
        return False

    def unstage(self, tenant: str | None) -> list[Pick[T]]:
        """Take ``tenant``'s staged records (every member's: None) out of the group's slots,
        in order; the others move up, the freed slots at the end turn void."""
        staged = list(self.staged())
        mine = [p for p in staged if tenant is None or p[0] == tenant]
        if mine:
            rest = [p for p in staged if tenant is not None and p[0] != tenant]
            for i, slot in enumerate(self.slots):
                slot.pick = rest[i] if i < len(rest) else None
            self.live = len(rest)
        return mine

    def restore(self, picks: list[Pick[T]]) -> None:
        """Put unstaged records back at the heads of their inner queues, in order, and
        refund their inner deficits (they were not sent)."""
        inner = self.inner
        for pick in reversed(picks):
            inner.push_front(*pick)
        for pick in picks:
            inner.charge(pick[0], -pick[2])
