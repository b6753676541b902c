"""The share tree of tenant groups: each level's share against its entitlement.

Two levels, as ``fairstream.core.hierarchy.GroupScheduler`` schedules them:

- the outer level: the groups (organisations) and the ungrouped tenants, each one entry
  with its own weight and priority class (an ungrouped tenant is a group of one);
- the inner level: each group's members, among themselves.

At either level an entry *waits for a share* when it is not paused and its backlog would
take more than ``WAITING`` seconds to drain at its current rate (a quiet entry with a record
in hand does not). Its *entitlement* is its weight over the weight of the waiting entries of
its priority class at its level: what a weighted fair scheduler owes it of what they receive
together; its *backlogged share* is what it did receive of that (its rate over theirs).
Others have neither (None): what a quiet entry takes is its own, not anyone's shortfall. A
grouped tenant's overall entitlement is its group's times its own within the group.

Shared by ``/tenants`` and the metrics (``fairstream.scheduler.observe``, from the emitter's
snapshot and the auditor's rates), ``fairstream top`` and ``fairstream audit``. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "WAITING",
    "Entitled",
    "Entry",
    "GroupNode",
    "MemberNode",
    "entitle",
    "share_tree",
    "waiting_records",
    "waits",
]

WAITING = 1.0  # s: a backlog that takes longer than this to drain at its rate waits for a share


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry at one level: a group (its policy's weight, class and pause; its members'
    backlog and rate summed), an ungrouped tenant, or a group's member."""

    name: str
    weight: float = 1.0
    priority: int = 0
    paused: bool = False
    backlog: int = 0  # records waiting
    rate: float = 0.0  # records/s out, recently


@dataclass(frozen=True, slots=True)
class Entitled:
    """An entry's ``entitlement`` and ``backlogged_share`` at its level (None: it does not
    wait for a share, or its class received nothing)."""

    entitlement: float | None = None
    backlogged_share: float | None = None

    def times(self, inner: Entitled) -> Entitled:
        """Overall, of a member: its group's part times its own within the group."""
        return Entitled(
            _product(self.entitlement, inner.entitlement),
            _product(self.backlogged_share, inner.backlogged_share),
        )


NOT_ENTITLED = Entitled()


def _product(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a * b


def waits(entry: Entry) -> bool:
    """Whether ``entry`` waits for a share (see the module docstring)."""
    return not entry.paused and entry.backlog > max(1.0, entry.rate * WAITING)


def waiting_records(row: Mapping[str, Any]) -> int:
    """A tenant row's records waiting (a row of ``/tenants``): its backlog in memory and what
    waits for it in the ingest log (``in_log``: a tenant far behind, read again nearer its
    turn; a scheduler from before it counted those gives none). Its memory backlog alone can
    be empty between two reads of the log."""
    return int(row.get("backlog", 0)) + int(row.get("in_log", 0))


def entitle(entries: Iterable[Entry]) -> list[Entitled]:
    """Each entry's entitlement and backlogged share among ``entries`` (one level), in
    their order (a group and a tenant may share a name). O(n)."""
    listed = list(entries)
    waiting = [waits(e) for e in listed]
    weight: dict[int, float] = {}
    received: dict[int, float] = {}
    for e, w in zip(listed, waiting, strict=True):
        if w:
            weight[e.priority] = weight.get(e.priority, 0.0) + e.weight
            received[e.priority] = received.get(e.priority, 0.0) + e.rate
    result = []
    for e, w in zip(listed, waiting, strict=True):
        pool = received.get(e.priority, 0.0)
        result.append(
            Entitled(e.weight / weight[e.priority], e.rate / pool if pool else None)
            if w
            else NOT_ENTITLED
        )
    return result


@dataclass(frozen=True, slots=True)
class MemberNode:
    """A group's member: its ``share`` of the group's egress and its entitlement within the
    group (``within``), and overall (``overall``: the group's part times its own)."""

    entry: Entry
    share: float | None
    within: Entitled
    overall: Entitled


@dataclass(frozen=True, slots=True)
class GroupNode:
    """A group: its ``share`` of the egress and its entitlement among the outer entries,
    and its members."""

    entry: Entry
    share: float | None
    entitled: Entitled
    members: tuple[MemberNode, ...]


def share_tree(
    groups: Sequence[Entry],
    members: Mapping[str, Sequence[Entry]],
    ungrouped: Sequence[Entry],
    total: float,
) -> tuple[list[GroupNode], dict[str, Entitled]]:
    """The tree: ``groups`` (their backlog and rate their members' sums, as the caller
    counts them), each one's ``members[group]``, and the ungrouped tenants, out of ``total``
    records/s of egress. Returns the groups' nodes (in the order given) and each ungrouped
    tenant's entitlement at the outer level. O(groups + members + ungrouped)."""
    outer = entitle([*groups, *ungrouped])
    nodes = []
    for group, at in zip(groups, outer, strict=False):
        inner = members.get(group.name, ())
        within = entitle(inner)
        nodes.append(
            GroupNode(
                group,
                group.rate / total if total else None,
                at,
                tuple(
                    MemberNode(
                        m,
                        m.rate / group.rate if group.rate else None,
                        w,
                        at.times(w),
                    )
                    for m, w in zip(inner, within, strict=True)
                ),
            )
        )
    return nodes, dict(zip((t.name for t in ungrouped), outer[len(groups) :], strict=True))
