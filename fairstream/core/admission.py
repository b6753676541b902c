"""Admission control: whether a new record may join its tenant's backlog.

Decisions are values, not exceptions: the service turns a rejection into a dead-letter
record carrying ``reason`` (a short machine word) and ``detail`` (a human sentence).
Nothing here has state; the scheduler supplies the tenant's current backlog.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from fairstream.core.tenant import TenantPolicy

__all__ = [
    "ACCEPT",
    "ADMITTED",
    "BACKLOG_FULL",
    "NO_COST_ROOM",
    "NO_ROOM",
    "Decision",
    "admit",
    "backlog_full",
    "over_limits",
    "room",
]

BACKLOG_FULL: Final = "backlog-full"
"""Reason: the tenant already holds as many records, or as much cost, as its policy allows.

The contract's dead-letter reason is ``fairstream.wire.records.BACKLOG_FULL``; core imports
nothing outside itself, so this is a copy, pinned to it by tests/unit/wire/test_wire_purity.py."""


@dataclass(frozen=True, slots=True)
class Decision:
    """Accept, or reject with a ``reason`` word and a ``detail`` sentence."""

    accepted: bool
    reason: str | None = None
    detail: str | None = None

    @classmethod
    def reject(cls, reason: str, detail: str) -> Decision:
        """A rejection for ``reason`` (e.g. ``BACKLOG_FULL``), explained by ``detail``."""
        return cls(False, reason, detail)

    def __bool__(self) -> bool:
        return self.accepted


ACCEPT: Final = Decision(True)
"""The one accepting decision; compare with ``decision.accepted`` or truthiness."""

# ``over_limits``'s answers: admitted, or not, for want of room for a record (its
# ``max_backlog``) or for its cost (its ``max_backlog_cost``).
ADMITTED, NO_ROOM, NO_COST_ROOM = 0, 1, 2


def over_limits(policy: TenantPolicy, backlog_records: int, backlog_cost: int, cost: int) -> int:
    """The one backlog rule: whether a record of ``cost`` may join a backlog of
    ``backlog_records`` and ``backlog_cost`` under ``policy``'s ``max_backlog`` and
    ``max_backlog_cost`` (``ADMITTED``), else which limit it meets (``NO_ROOM``,
    ``NO_COST_ROOM``). ``admit`` says why in words; ``room`` counts it down over a batch."""
    limit = policy.max_backlog
    if limit is not None and backlog_records + 1 > limit:
        return NO_ROOM
    cost_limit = policy.max_backlog_cost
    if cost_limit is not None and backlog_cost + cost > cost_limit:
        return NO_COST_ROOM
    return ADMITTED


def admit(
    tenant: str,
    policy: TenantPolicy,
    backlog_records: int,
    backlog_cost: int,
    cost: int = 1,
    *,
    group: str | None = None,
) -> Decision:
    """Decide whether a record of ``cost`` may join ``tenant``'s backlog under ``policy``;
    with ``group``, whether it may join that group's backlog under the group's ``policy``
    (its ``max_backlog`` and ``max_backlog_cost`` over all of the group's members, the
    backlog given).

    A paused tenant still accepts records: pausing stops sending, not buffering.
    """
    who = f"tenant {tenant!r}" if group is None else f"group {group!r} of tenant {tenant!r}"
    return _admit(who, policy, backlog_records, backlog_cost, cost)


def room(policy: TenantPolicy, backlog_records: int, backlog_cost: int) -> list[float]:
    """``[records, cost]`` that may still join a backlog of ``backlog_records`` and
    ``backlog_cost`` under ``policy``'s ``max_backlog`` and ``max_backlog_cost`` (inf: no
    limit), as a new list a caller counts down over a batch of admissions."""
    records, cost = policy.max_backlog, policy.max_backlog_cost
    return [
        math.inf if records is None else records - backlog_records,
        math.inf if cost is None else cost - backlog_cost,
    ]


def backlog_full(who: str, backlog_records: int, max_backlog: int | None) -> Decision:
    """The refusal of a record because ``who`` (``admit``'s words: a tenant, or a tenant's
    group) already holds ``backlog_records``, as many records as its ``max_backlog`` allows.
    Also the emitter's, when the records waiting in the ingest log count too."""
    return Decision.reject(
        BACKLOG_FULL,
        f"{who} already has {backlog_records} records waiting, "
        f"the most its policy allows (max_backlog={max_backlog})",
    )


def _admit(
    who: str, policy: TenantPolicy, backlog_records: int, backlog_cost: int, cost: int
) -> Decision:
    """``over_limits``, for a tenant or a group, in words (``who`` names it in the detail)."""
    verdict = over_limits(policy, backlog_records, backlog_cost, cost)
    if verdict == ADMITTED:
        return ACCEPT
    if verdict == NO_ROOM:
        return backlog_full(who, backlog_records, policy.max_backlog)
    cost_limit = policy.max_backlog_cost
    assert cost_limit is not None  # NO_COST_ROOM: there is one
    if cost > cost_limit:
        detail = (
            f"a record of cost {cost} can never fit the backlog of {who} "
            f"(max_backlog_cost={cost_limit})"
        )
    else:
        detail = (
            f"{who} has cost {backlog_cost} waiting; a record of cost {cost} "
            f"would exceed its policy's max_backlog_cost={cost_limit}"
        )
    return Decision.reject(BACKLOG_FULL, detail)
