"""The messages between the scheduler's threads: what one thread hands another, and the
snapshots a thread reads from another. Every cross-thread exchange is one of these, through
the emitter's mailbox (``handoff.Handoff``) or by a ``Call`` the emitter answers.

- ingest -> emitter: ``Assign``, ``Revoke``, ``Heard`` (records travel as ``Parsed``);
- the service -> emitter: ``Stop``; any thread -> emitter: ``Call`` (a read on its thread);
- policies -> emitter: ``PolicyChange``, ``PoliciesRead``;
- feedback -> emitter: ``FeedbackBatch``, ``AdaptiveChange``, ``ConcurrencyChange``;
- egress-lag -> emitter: ``LagChange``;
- group -> emitter: ``ShareChange``; emitter -> group (answering its ``Call``):
  ``InstanceDemand``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fairstream.core.budget import ClaimKey
from fairstream.core.shares import WHOLE, ClassDemand, GroupParts
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.records import Parsed

__all__ = [
    "AdaptiveChange",
    "Assign",
    "Call",
    "ConcurrencyChange",
    "FeedbackBatch",
    "Heard",
    "InstanceDemand",
    "LagChange",
    "PoliciesRead",
    "PolicyChange",
    "Revoke",
    "ShareChange",
    "Stop",
]


@dataclass
class Assign:
    """Partitions now owned, with the progress recovered for each and the queue their
    records will arrive in. ``rewind``: the answer to a rewind the emitter asked for after an
    aborted transaction. ``metadata``: the member's group metadata (generation) read in the
    callback: what the emitter commits with from now on."""

    progress: dict[int, PartitionProgress]
    queues: dict[int, deque[Parsed]] = field(default_factory=dict)
    rewind: bool = False
    metadata: Any = None


@dataclass
class Revoke:
    """Partitions leaving: commit what was emitted for them, then forget them.
    ``lost``: the group already gave them away (session expired): abort instead.
    ``metadata``: the group metadata of the generation that still owns them (read in the
    revocation callback). ``given_up``: set by the ingest thread when it stopped waiting
    (``--revoke-wait``) and let the partitions go: the emitter must abort, not commit."""

    partitions: list[int]
    lost: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    metadata: Any = None
    given_up: threading.Event = field(default_factory=threading.Event)


@dataclass
class Heard:
    """A partition reached the end of its log: the warm-up need not wait for it."""

    partition: int


@dataclass
class Stop:
    """Commit what is open and stop. Set ``done`` when the producer is closed.

    ``cause``: the ingest thread failed and stops the emitter on its way out; the emitter
    then ends as failed with that cause, so that the instance's fatal reason is the ingest
    thread's and not an emitter that "ended without being stopped".
    """

    done: threading.Event = field(default_factory=threading.Event)
    cause: str | None = None


@dataclass
class Call:
    """Run ``fn`` on the emitter thread (reads of the core for /tenants and /metrics)."""

    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


@dataclass
class PolicyChange:
    """A record of the policy topic (``value`` None: a tombstone)."""

    key: bytes | None
    value: bytes | None


@dataclass
class PoliciesRead:
    """The policy topic was read to its end as it stood when its reader started (or it does
    not exist): every policy recorded before then has been handed over, ahead of this, so
    the emitter may emit without sending a paused tenant's record it did not know of."""


@dataclass
class FeedbackBatch:
    """What the emitter applies: measured-cost charges, tenant pauses, and the request ids
    settled (their slots free) or still being worked on (their leases renewed)."""

    # tenant, declared cost, measured cost, and when it was charged (its scheduled-ms stamp,
    # epoch ms; 0: not stamped)
    charges: list[tuple[str, int, int, int]] = field(default_factory=list)
    pauses: list[tuple[str, float]] = field(default_factory=list)  # tenant, seconds
    settled: list[bytes] = field(default_factory=list)  # request ids, as stamped on egress
    renewed: list[bytes] = field(default_factory=list)


@dataclass(frozen=True)
class AdaptiveChange:
    """The group rate as a fraction of ``--rate``, and no egress before ``hold_until``."""

    factor: float
    hold_until: float  # by the reader's clock (the emitter's)


@dataclass(frozen=True)
class ConcurrencyChange:
    """The group's concurrency limit as the feedback shows it (``ConcurrencyLimit``;
    None: unlimited). ``learning``: None because nothing is known (no sample yet, or all
    forgotten), not because a limit stands aside for 429s; the emitter's start-up window
    then applies."""

    limit: int | None
    learning: bool = False


@dataclass(frozen=True)
class LagChange:
    """The egress group's bound on what waits downstream (None: unlimited), its lag (None:
    unknown), both in offsets, and the clock time (the emitter's) the lag includes the
    slots taken by."""

    bound: int | None
    lag: int | None
    at: float


class Spend(NamedTuple):
    """A tenant group's budget in this window as this instance sees it (``key``), its limit,
    what this instance's partitions spent of it, and the weight of the group's members
    backlogged here."""

    key: ClaimKey
    limit: int
    spent: int
    weight: float


class Exchanged(NamedTuple):
    """This instance's claim in force on a tenant group's budget in one window
    (``fairstream.core.budget.ClaimBook``): what it may spend of it."""

    key: ClaimKey
    claim: int


@dataclass(frozen=True)
class ShareChange:
    """The emitter's new share of the group rate, and until when it may emit (by the group
    thread's clock, the emitter's): the group thread renews that lease while it runs,
    whatever the coordination's state. ``parts``: this instance's part of each tenant
    group's weight and rate cap (``shares.GroupParts``; the emitter gives them to its core
    through ``TenantGroups.set_parts``). ``factor``: the adapted rate's fraction of --rate
    the share was computed with (``InstanceDemand.rate_factor``), so that a cut the feedback
    makes later applies to it at once (``Pacing.apply``)."""

    rate: float
    fraction: float
    lease_until: float
    parts: GroupParts = WHOLE
    factor: float = 1.0
    # This instance's claims in force on tenant groups' budgets (``PeerView.claims_in_force``).
    budgets: tuple[Exchanged, ...] = ()


@dataclass(frozen=True)
class InstanceDemand:
    """What the group thread reads from the emitter (``Handoff.call``), each
    ``DEMAND_EVERY``: the backlogged demand per priority class, the partitions owned, and
    the adapted rate as a fraction of ``--rate`` (the feedback thread hands it to the
    emitter; 1.0 without feedback)."""

    classes: dict[int, ClassDemand]
    partitions: tuple[int, ...]
    rate_factor: float = 1.0
    # Each tenant group's budget in force, with what this instance's partitions spent of
    # it (``Spend``): the group thread claims the budgets from it.
    spend: tuple[Spend, ...] = ()
