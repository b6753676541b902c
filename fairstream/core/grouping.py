"""The runtime records of ``GroupScheduler``: a group's key in the outer scheduler, the
slots of its outer queue, the group itself with its staged records (see
``fairstream.core.hierarchy`` for how a decision uses them), and the groups' policies with
the groups held out of the pick (``GroupPolicies``).

Internal to the core; apart only to keep each module readable, as ``rings`` is for
``deficit``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar

from fairstream.core.deficit import FairScheduler
from fairstream.core.rings import Pick
from fairstream.core.tenant import TenantPolicy

__all__ = ["STAGED", "Group", "GroupKey", "GroupPolicies", "Slot"]

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


class GroupPolicies:
    """The groups' policies: each group's own (``own``), the ``default`` of the others, and
    the groups ``held`` out of the pick whatever their policy says (the emission rule holds
    a group whose concurrency slots are all taken). ``listener`` is told of each policy
    change, after the core applied it: the group's id, or None for the default."""

    __slots__ = ("default", "held", "listener", "own")

    def __init__(self, default: TenantPolicy) -> None:
        self.own: dict[str, TenantPolicy] = {}
        self.default = default
        self.held: set[str] = set()
        self.listener: Callable[[str | None], None] | None = None

    def of(self, group: str) -> TenantPolicy:
        """The policy in force for ``group``: its own, else the default."""
        return self.own.get(group, self.default)

    def outer(self, group: str) -> TenantPolicy:
        """The policy ``group``'s entry of the outer level gets: paused while held."""
        policy = self.own.get(group, self.default)
        return policy.replace(paused=True) if group in self.held else policy

    def set(self, group: str, policy: TenantPolicy | None) -> None:
        """``group``'s own ``policy`` (None: the default again)."""
        if policy is None:
            self.own.pop(group, None)
        elif not isinstance(policy, TenantPolicy):
            raise TypeError(f"policy must be a TenantPolicy or None, got {policy!r}")
        else:
            self.own[group] = policy

    def set_default(self, policy: TenantPolicy) -> None:
        """The policy of every group without one of its own."""
        if not isinstance(policy, TenantPolicy):
            raise TypeError(f"policy must be a TenantPolicy, got {policy!r}")
        self.default = policy

    def kept(self, group: str) -> bool:
        """Whether ``group`` is worth keeping without a backlog: it has a policy of its own,
        or the default's rate cap has buckets refilling."""
        return group in self.own or self.default.rate_cap is not None

    def hold(self, group: str, held: bool) -> None:
        """Hold ``group`` out of the pick (``held``), or let it back."""
        if held:
            self.held.add(group)
        else:
            self.held.discard(group)

    def tell(self, group: str | None) -> None:
        """Tell the listener that ``group``'s policy (None: the default) changed."""
        listener = self.listener
        if listener is not None:
            listener(group)

    @property
    def limits_concurrency(self) -> bool:
        """Whether any group's policy in force has a ``max_concurrency``. O(own policies)."""
        return self.default.max_concurrency is not None or any(
            p.max_concurrency is not None for p in self.own.values()
        )
