"""Tenant groups' concurrency slots: which groups are out of the pick because their members
hold all the slots their policy's ``max_concurrency`` allows.

The emission rule (``fairstream.core.emission``) keeps one ``GroupSlots`` beside its
``InFlight``. A slot is counted for the group its tenant was in when the slot was taken
(``InFlight.acquire``'s ``group``), and given back to that same group, wherever the tenant
has moved since: a group's count never goes below zero and never keeps a slot its members
gave back. A tenant that moves keeps counting its old slots against its old group until
they are freed; its new slots count for its new group.

A group whose count reaches its limit is held out of the outer pick
(``GroupScheduler.hold_group``: it keeps its staged records and sends nothing, as a paused
group does) until a slot of its is given back (settled, or its lease ran out) or its limit
rises (a policy change, told by ``GroupPolicies.listener``). Its members keep sharing what
it sends by their weights, so with every slot busy they share its slots by weight.

Several instances: each applies ``split_limit(max_concurrency, share)`` of a group's limit,
``share`` being the instance's part of ``--max-concurrency`` (the ingest partitions it
owns). The parts add up to at most the limit whatever the members' partitions, with no
exchange; the price is that a group whose members all live on one instance gets only that
instance's part there, and a part below one slot (a limit smaller than the number of
instances) holds the group on that instance once it has taken one slot there. Set a
group's ``max_concurrency`` to a multiple of the instance count.

Pure: no I/O, no clock (the rule gives back the slots). Not thread-safe: one owner.
"""

from __future__ import annotations

from typing import Any

from fairstream.core.hierarchy import GroupScheduler
from fairstream.core.inflight import InFlight, split_limit

__all__ = ["GroupSlots"]

_NONE: set[str] = set()  # the held groups of no core (never added to)


class GroupSlots:
    """The groups held out of the pick for their concurrency slots (``full``: the core's
    ``GroupPolicies.held``), in the core last ``attach``-ed (a flat core has no groups:
    nothing is held).

    Caller: ``EmissionRule``, on each slot taken and given back, and on a new share.
    """

    __slots__ = ("core", "inflight", "limited", "share")

    def __init__(self, inflight: InFlight) -> None:
        self.inflight = inflight
        self.share = 1.0  # this instance's part of every group's limit
        self.core: GroupScheduler[Any] | None = None
        self.limited = False  # a group's policy in force limits its slots

    def attach(self, core: object) -> None:
        """Follow ``core`` from now on (a ``GroupScheduler``, else no groups): told of its
        group policy changes, the groups at their limit held there.

        Affects: the old core's listener, the new core's holds, ``limited``."""
        old = self.core
        was = set(self.full)
        if old is not None and old.group_policies.listener == self.changed:
            old.group_policies.listener = None
        if not isinstance(core, GroupScheduler):
            self.core, self.limited = None, False
            return
        self.core = core
        policies = core.group_policies
        policies.listener = self.changed
        self.limited = policies.limits_concurrency
        self._review(was | set(policies.own))

    @property
    def full(self) -> set[str]:
        """The groups held out of the pick (the core's own set: read, do not change)."""
        core = self.core
        return _NONE if core is None else core.group_policies.held

    def group_of(self, tenant: str) -> str | None:
        """The group a slot of ``tenant`` taken now counts for (None: none)."""
        core = self.core
        return None if core is None else core.group_of(tenant)

    def limit(self, group: str) -> int | None:
        """The slots ``group`` may hold on this instance (None: unlimited)."""
        core = self.core
        if core is None:
            return None
        return split_limit(core.group_policy(group).max_concurrency, self.share)

    def taken(self, group: str | None) -> None:
        """A slot was taken for ``group`` (None: none): held once it holds its limit."""
        if group is None:
            return
        limit = self.limit(group)
        if limit is not None and group not in self.full and self.inflight.of_group(group) >= limit:
            self.check(group)

    def given_back(self, group: str | None) -> None:
        """A slot of ``group`` (None: none) was given back: a held group may go again."""
        if group is not None and group in self.full:
            self.check(group)

    def check(self, group: str) -> None:
        """Hold ``group`` or let it back, as its slots and its limit say now."""
        core = self.core
        if core is None:
            return
        limit = self.limit(group)
        full = limit is not None and self.inflight.of_group(group) >= limit
        if full != (group in core.group_policies.held):
            core.hold_group(group, full)

    def set_share(self, share: float) -> None:
        """Apply ``share`` of each group's limit from now on (``split_limit``)."""
        if share != self.share:
            self.share = share
            if self.core is not None:
                self._review(set(self.core.group_policies.own))

    def changed(self, group: str | None) -> None:
        """``group``'s policy changed (None: the groups' default): its limit may hold it or
        let it back. Caller: the core (``GroupPolicies.listener``)."""
        core = self.core
        if core is None:
            return
        self.limited = core.group_policies.limits_concurrency
        if group is None:
            self._review(set(core.groups()))
        else:
            self.check(group)

    def _review(self, groups: set[str]) -> None:
        """``check`` ``groups``, the groups holding slots and those held."""
        for group in groups | set(self.inflight.by_group()) | self.full:
            self.check(group)
