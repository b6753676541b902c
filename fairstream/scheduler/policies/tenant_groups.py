"""Tenant groups in the scheduler: which group each tenant is in, the groups' policies, and
which fair core schedules them (``fairstream.core.hierarchy``).

A tenant group (an organisation) shares the egress with the other groups and ungrouped
tenants by its weight; its members share what it gets by theirs. So one organisation
spreading its load over many tenant ids gets its group's share, not one share per id.

Where a tenant's group comes from, the first found wins:

1. its policy record's ``group`` (``fairstream tenants set TENANT --group GROUP``);
2. the key convention ``--tenant-group-separator``: with ``/``, tenant ``acme/alice`` is in
   group ``acme`` (what comes before the first separator; none when there is none, or
   nothing before it);
3. none: the tenant is scheduled on its own, exactly as without groups.

No ingest header names a group: a producer could put itself in any group it likes (out of
its own organisation's share, into another's).

A group's own policy is a ``TenantPolicy`` on the policy topic too, under the key
``GROUP_KEY_PREFIX`` + its id; the prefix alone holds every group's default (else the
built-in ``TenantPolicy()``: weight 1, no caps). Its weight, priority, rate cap, pause,
``max_backlog``, ``max_backlog_cost`` and ``max_concurrency`` apply to the group as a whole
(its slots are counted over its members, each instance applying its part by ingest
partitions owned, as of ``--max-concurrency``: ``fairstream.core.groupslots``).

Across instances (``--share-by demand``), a group's members may be backlogged on several
instances: each gives its core the instance's part of the group's rate cap and weight
(``shares.GroupParts``, from the group thread: ``set_parts``), so that the parts of the cap
add up to the cap over the instances. The demand reported is of the policies as set
(``policy``), not of the parts.

The core: a ``FairScheduler`` while nothing is grouped (a flat ``GroupScheduler`` costs
about 20% more per push and pick), a ``GroupScheduler`` once anything is: the separator
set (from the start), or a policy record naming a group, or a group's policy (from that
record on: ``UseGroups``, the backlog moves into the new core in order, ``regroup``). It
does not go back to a flat core while the process runs; a rewind rebuilds the core
(``Policies.new_core``) from what is known then.

Caller: ``Policies`` (the emitter thread) keeps a ``TenantGroups``; the emitter does the
actions (``act``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from fairstream.core import DEFAULT_POLICY, Clock, Core, FairScheduler, GroupScheduler, TenantPolicy
from fairstream.core.admission import room
from fairstream.core.emission import EmissionRule
from fairstream.core.shares import WHOLE, GroupParts
from fairstream.wire.policy import PolicyRecord

__all__ = [
    "GROUP_ACTIONS",
    "GroupAction",
    "GroupDefaultPolicy",
    "GroupRoom",
    "SetGroup",
    "SetGroupPolicy",
    "TenantGroups",
    "UseGroups",
    "act",
    "by_separator",
    "regroup",
]

log = logging.getLogger("fairstream.policies")

GRAIN = 1e-4  # parts are rounded down to this (and no lower): the core is not retuned for less


class SetGroup(NamedTuple):
    """``tenant`` is in ``group`` now (None: its key convention's, else none)."""

    tenant: str
    group: str | None


class SetGroupPolicy(NamedTuple):
    """``group`` follows ``policy`` now (None: the groups' default)."""

    group: str
    policy: TenantPolicy | None


class GroupDefaultPolicy(NamedTuple):
    """Every group without a policy of its own follows ``policy`` now."""

    policy: TenantPolicy


class UseGroups(NamedTuple):
    """The core must schedule groups from now on: a ``GroupScheduler`` replaces a flat one."""


GroupAction = SetGroup | SetGroupPolicy | GroupDefaultPolicy | UseGroups
GROUP_ACTIONS = (SetGroup, SetGroupPolicy, GroupDefaultPolicy, UseGroups)


def by_separator(separator: str | None) -> Callable[[str], str | None] | None:
    """The key convention: a tenant id's group is what comes before the first
    ``separator`` (None: no separator in it, or nothing before it). None without one."""
    if not separator:
        return None

    def group_of(tenant: str) -> str | None:
        head, found, _ = tenant.partition(separator)
        return head if found and head else None

    return group_of


class TenantGroups:
    """The groups as the policy topic and the settings say. Caller: ``Policies``."""

    def __init__(self, separator: str | None) -> None:
        self.group_of = by_separator(separator)
        self.assigned: dict[str, str] = {}  # tenant -> group, from the tenants' records
        self.policies: dict[str, TenantPolicy] = {}  # groups' own
        self.default: TenantPolicy = DEFAULT_POLICY  # every other group's
        self._default_given = False  # the groups' default came from the policy topic
        self.parts: GroupParts = WHOLE  # this instance's part of each group (``set_parts``)

    @property
    def enabled(self) -> bool:
        """Whether anything is grouped: then the core is a ``GroupScheduler``."""
        return (
            self.group_of is not None
            or bool(self.assigned)
            or bool(self.policies)
            or self._default_given
        )

    def new_core(self, clock: Clock, quantum: float, default: TenantPolicy) -> Core[Any]:
        """A flat core, or (``enabled``) one of groups with every group and group policy
        known so far; the caller sets the tenants' policies. Caller: ``Policies.new_core``."""
        if not self.enabled:
            flat: FairScheduler[Any] = FairScheduler(clock, quantum=quantum, default_policy=default)
            return flat
        core: GroupScheduler[Any] = GroupScheduler(
            clock,
            quantum=quantum,
            default_policy=default,
            group_default_policy=self._default_in_core(),
            group_of=self.group_of,
        )
        for group in set(self.policies) | set(self.parts.groups):
            core.set_group_policy(group, self._in_core(group))
        for tenant, group in self.assigned.items():
            core.set_group(tenant, group)
        return core

    def group_record(self, group: str, record: PolicyRecord | None) -> list[GroupAction]:
        """Take in a group's policy record (``group`` "" : the groups' default; a
        tombstone: back to the default). What the emitter must do, in order."""
        was = self.enabled
        actions: list[GroupAction]
        if not group:
            self.default = DEFAULT_POLICY if record is None else record.policy
            self._default_given = record is not None
            # Groups with a part of their own follow the default through it.
            actions = [GroupDefaultPolicy(self._default_in_core())]
            actions += [
                SetGroupPolicy(g, self._in_core(g))
                for g in self.parts.groups
                if g not in self.policies
            ]
            log.info("groups' default policy: %s", self.default)
        else:
            if record is None:
                self.policies.pop(group, None)
            else:
                self.policies[group] = record.policy
            actions = [SetGroupPolicy(group, self._in_core(group))]
            log.info("policy of group %r: %s", group, record.policy if record else "defaults")
        if record is not None and record.group is not None:
            log.warning("group %r's policy names a group (%r): ignored", group, record.group)
        return [UseGroups()] if self.enabled and not was else actions

    def policy(self, group: str) -> TenantPolicy:
        """``group``'s policy as set (its own, else the groups' default), whatever part of
        it this instance takes: what the demand reports say."""
        return self.policies.get(group, self.default)

    def set_parts(self, parts: GroupParts) -> list[GroupAction]:
        """This instance takes ``parts`` of the groups' weights and rate caps from now on
        (the group thread's ``ShareChange``); what the emitter must do, for the groups
        whose policy in the core changes. O(groups listed, before and now)."""
        parts = _grained(parts)
        old, self.parts = self.parts, parts
        if parts == old:
            return []
        actions: list[GroupAction] = []
        groups = set(old.groups) | set(parts.groups)
        if parts.cap != old.cap:
            if self.default.rate_cap is not None:
                actions.append(GroupDefaultPolicy(self._default_in_core()))
            groups.update(g for g, p in self.policies.items() if p.rate_cap is not None)
        for group in sorted(groups):
            if parts.of(group) != old.of(group):
                actions.append(SetGroupPolicy(group, self._in_core(group)))
        return actions

    def take_parts(self, parts: GroupParts, rule: EmissionRule[Any]) -> None:
        """``set_parts``, done in the rule's core at once. Caller: the emitter, for the
        group thread's ``ShareChange``."""
        for action in self.set_parts(parts):
            act(rule, action, lambda: rule.core)  # (no UseGroups: no new core is built)

    def _default_in_core(self) -> TenantPolicy:
        """The groups' default as the core gets it: with this instance's part of the cap of
        every group it holds no part of its own for."""
        default, cap = self.default, self.parts.cap
        if cap == 1.0 or default.rate_cap is None:
            return default
        return default.replace(rate_cap=default.rate_cap * cap)

    def _in_core(self, group: str) -> TenantPolicy | None:
        """The policy the core gets for ``group``, with this instance's part of its weight
        and rate cap (None: the core's group default says it)."""
        own = self.policies.get(group)
        weight, cap = self.parts.of(group)
        if own is None and (weight, cap) == (1.0, self.parts.cap):
            return None
        base = own or self.default
        if weight == 1.0 and (cap == 1.0 or base.rate_cap is None):
            if own is None and base.rate_cap is not None and self.parts.cap != 1.0:
                return base  # the whole default, not the core's (a part of it)
            return own
        return base.replace(
            weight=base.weight * weight,
            rate_cap=None if base.rate_cap is None else base.rate_cap * cap,
        )

    def tenant_record(self, tenant: str, record: PolicyRecord | None) -> list[GroupAction]:
        """Take in the group a tenant's policy record names (a tombstone, or no group: its
        key convention's, else none)."""
        group = None if record is None else record.group
        if self.assigned.get(tenant) == group:
            return []
        was = self.enabled
        if group is None:
            del self.assigned[tenant]
        else:
            self.assigned[tenant] = group
        log.info("tenant %r: in group %r", tenant, group)
        return self._actions(was, SetGroup(tenant, group))

    def _actions(self, was: bool, action: GroupAction) -> list[GroupAction]:
        # Turning groups on, the new core is built with everything known: nothing else to do.
        return [UseGroups()] if self.enabled and not was else [action]


def _grained(parts: GroupParts) -> GroupParts:
    """``parts`` rounded down to ``GRAIN``, and no lower (a rate cap or a weight is
    positive): small moves of the shares leave the core as it is."""

    def down(x: float) -> float:
        return x if x >= 1.0 else max(GRAIN, math.floor(x / GRAIN) * GRAIN)

    cap = down(parts.cap)
    groups = {g: (down(w), down(c)) for g, (w, c) in parts.groups.items()}
    return GroupParts(cap, {g: part for g, part in groups.items() if part != (1.0, cap)})


class GroupRoom:
    """The room left in tenant groups' backlogs under their policies' ``max_backlog`` and
    ``max_backlog_cost``, over one batch of admissions: worked out once per group from the
    core, counted down by each member's record admitted (as the tenants' own room is, in
    ``Backlog.index``). The core's ``admit`` (``admission.admit`` with ``group``) says why
    one is refused. Only groups with a cap are tracked; a flat core has none."""

    __slots__ = ("_groups", "of")

    def __init__(self) -> None:
        self.of: dict[str, list[float]] = {}  # tenant -> its group's room (records, cost)
        self._groups: dict[str, list[float]] = {}

    def add(self, core: Core[Any], tenant: str) -> None:
        """Track the room of ``tenant``'s group, if it is in one with a backlog cap."""
        if type(core) is not GroupScheduler:
            return
        group = core.group_of(tenant)
        if group is None:
            return
        left = self._groups.get(group)
        if left is None:
            policy = core.group_policy(group)
            if policy.max_backlog is None and policy.max_backlog_cost is None:
                return
            left = self._groups[group] = room(policy, *core.group_backlog(group))
        self.of[tenant] = left

    def full(self, tenant: str, cost: int) -> bool:
        """Whether ``tenant``'s group has no room for a record of ``cost``."""
        left = self.of.get(tenant)
        return left is not None and (left[0] < 1 or left[1] < cost)

    def take(self, tenant: str, cost: int) -> None:
        """A record of ``tenant`` of ``cost`` was admitted."""
        left = self.of.get(tenant)
        if left is not None:
            left[0] -= 1
            left[1] -= cost


def regroup(rule: EmissionRule[Any], core: GroupScheduler[Any]) -> int:
    """Move what waits in the rule's core (and the pick it holds for its cost tokens, at
    its tenant's head) into ``core``, each tenant's records in order, and drive ``core``
    from now on; how many records moved. O(records waiting), once per process at most."""
    old = rule.core
    held = rule.cancel()
    moved = 0
    for tenant in list(old.tenants()):
        for pick in old.take_backlog(tenant):
            core.push(tenant, pick[1], pick[2])
            moved += 1
    if held is not None:
        core.push_front(held[0], held[1], held[2])
        moved += 1
    rule.replace_core(core)
    return moved


def act(rule: EmissionRule[Any], action: GroupAction, new_core: Callable[[], Core[Any]]) -> None:
    """Do a group action in the rule's core (``new_core`` builds the core as the policies
    say, for ``UseGroups``). A flat core has no groups: the other actions wait in the
    policies for the core that will (``TenantGroups.new_core``). Caller: the emitter."""
    core = rule.core
    if isinstance(action, UseGroups):
        if not isinstance(core, GroupScheduler):
            grouped = new_core()
            assert isinstance(grouped, GroupScheduler)
            moved = regroup(rule, grouped)
            log.info("tenant groups in use: %d waiting records moved to the grouped core", moved)
        return
    if not isinstance(core, GroupScheduler):
        return
    if isinstance(action, SetGroup):
        core.set_group(action.tenant, action.group)
    elif isinstance(action, SetGroupPolicy):
        core.set_group_policy(action.group, action.policy)
    else:
        core.set_group_default_policy(action.policy)
