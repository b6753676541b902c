"""Automatic demotion in the scheduler (``--demote-share``, ``--demote-backlog``): which
tenants are noisy now, fed and asked by the emitter, with what it exports.

The decisions are the pure core's (``fairstream.core.demotion``): a tenant taking more than
``--demote-share`` of this instance's recent egress records, or holding more than
``--demote-backlog`` records, is noisy; quiet for ``--demote-quiet`` seconds, it is not.
``Demotions`` feeds it and asks it, and says what changed; ``Policies.demotion`` says
what that does to the tenant's policy (one class down, ``demoted``, or its own again), and
the emitter does it in the core: "policies return what to do; the emitter does it".

Cost: nothing per record. The egress is counted once per committed transaction, per
tenant in it (the checkpoint's tally, ``committed``), so the window holds what
read_committed consumers were given; ``review`` runs every ``REVIEW_EVERY`` seconds
(O(tenants in the window + noisy tenants), plus O(backlogged tenants) with
``--demote-backlog``). Without either option the emitter holds no ``Demotions`` at all.

Each instance judges its own egress and backlogs: a share is of this instance's egress,
and a tenant's noisy state stays with the instance (a partition moving to another
instance starts it afresh there).

Caller: the emitter thread, the only owner (as of the core).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from fairstream.config import Settings
from fairstream.core import Clock, Core, FairScheduler
from fairstream.core.demotion import Change, Demotion, DemotionPolicy
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Scrape
from fairstream.scheduler.policies.reader import Policies, PolicyAction
from fairstream.scheduler.records import enqueued_of

__all__ = [
    "REVIEW_EVERY",
    "Demotions",
    "demotion_policy",
    "mark_demoted",
    "oldest_quiet_age",
    "with_demotion",
]

log = logging.getLogger("fairstream.emitter")

REVIEW_EVERY = 0.25  # seconds between two reviews: a few a second, never per record


def demotion_policy(settings: Settings) -> DemotionPolicy | None:
    """The core's policy as the ``--demote-*`` options say (None: demotion is off)."""
    if not settings.demotes:
        return None
    return DemotionPolicy(
        share=settings.demote_share,
        backlog=settings.demote_backlog,
        window=settings.demote_window,
        quiet=settings.demote_quiet,
        min_egress=float(settings.demote_min_egress),
    )


class Demotions:
    """The noisy tenants of this instance: its recent egress, the reviews, the counters."""

    def __init__(self, policy: DemotionPolicy, clock: Clock, metrics: Metrics) -> None:
        self.demotion = Demotion(policy, clock)
        self.by_backlog = policy.backlog is not None
        self.metrics = metrics
        self.next_review = 0.0  # when the emitter reviews next (its clock)

    @classmethod
    def of(cls, settings: Settings, clock: Clock, metrics: Metrics) -> Demotions | None:
        """The emitter's demotions as the ``--demote-*`` options say; None when off."""
        policy = demotion_policy(settings)
        return None if policy is None else cls(policy, clock, metrics)

    def committed(self, counts: Mapping[str, int], now: float) -> None:
        """A transaction committed ``counts[tenant]`` egress records per tenant (the
        checkpoint's tally, counted). Caller: the emitter, once per commit."""
        sent = self.demotion.sent
        for tenant, records in counts.items():
            sent(tenant, records, now)

    def review(
        self,
        core: Core[Any],
        policies: Policies,
        now: float,
        in_log: Mapping[str, int] | None = None,
    ) -> list[PolicyAction]:
        """What the emitter must do in ``core`` now: the policies (``Policies.demotion``) of
        the tenants turned noisy, one class down, and of those quiet long enough, their own
        again. ``in_log``: per tenant, its records waiting in the ingest log (``spill``),
        part of its backlog. Caller: the emitter, every ``REVIEW_EVERY`` seconds
        (``next_review``).
        Affects: the noisy set, ``policies``' demoted tenants, the counters."""
        return [
            action
            for change in self.changes(core, now, in_log)
            for action in policies.demotion(change)
        ]

    def changes(
        self, core: Core[Any], now: float, in_log: Mapping[str, int] | None = None
    ) -> list[Change]:
        """Who turns noisy and who is quiet long enough now, with ``core``'s backlogs (and
        ``in_log``, the records waiting in the log); the next review is due
        ``REVIEW_EVERY`` seconds on."""
        self.next_review = now + REVIEW_EVERY
        backlogs = {t: core.backlog(t)[0] for t in core.tenants()} if self.by_backlog else {}
        if self.by_backlog and in_log:
            for tenant, waiting in in_log.items():
                backlogs[tenant] = backlogs.get(tenant, 0) + waiting
        changes = self.demotion.review(backlogs, now)
        for tenant, demote in changes:
            if demote:
                self.metrics.demotions.inc()
                log.info(
                    "tenant %r is noisy (%.0f%% of recent egress, %d records waiting): "
                    "demoted one class",
                    tenant,
                    100 * self.demotion.share(tenant, now),
                    backlogs.get(tenant, core.backlog(tenant)[0]),
                )
            else:
                self.metrics.promotions.inc()
                log.info("tenant %r is quiet again: promoted back to its own class", tenant)
        return changes

    def __contains__(self, tenant: object) -> bool:
        """Whether ``tenant`` is noisy (demoted)."""
        return tenant in self.demotion

    @property
    def noisy_count(self) -> int:
        return self.demotion.noisy_count


def with_demotion(
    scrape: Scrape, core: Core[Any], demotions: Demotions | None, now_ms: int
) -> Scrape:
    """``scrape`` with the noisy tenants counted and the oldest quiet record's age
    (``oldest_quiet_age``). Caller: ``Emitter.scrape``, on the emitter thread."""
    return dataclasses.replace(
        scrape,
        noisy_tenants=0 if demotions is None else demotions.noisy_count,
        oldest_quiet_age=oldest_quiet_age(core, demotions, now_ms),
    )


def mark_demoted(rows: list[dict[str, Any]], demotions: Demotions | None) -> None:
    """Say in each ``/tenants`` row (``Observed.tenant_stats``) whether it is ``demoted``."""
    for row in rows:
        row["demoted"] = demotions is not None and row["tenant"] in demotions


def _heads(core: Core[Any]) -> Iterator[tuple[str, float]]:
    """Each backlogged, unpaused tenant with when its oldest record was enqueued (epoch s)."""
    if type(core) is FairScheduler:  # one pass inside the core, records as stored
        for tenant, stored in core.heads():
            yield tenant, enqueued_of(stored) / 1000
        return
    for tenant in core.tenants():
        head = core.peek(tenant)
        if head is not None and not core.policy(tenant).paused:
            yield tenant, head.enqueued / 1000


def oldest_quiet_age(core: Core[Any], demotions: Demotions | None, now_ms: int) -> float | None:
    """The age (seconds at ``now_ms``, epoch ms) of the oldest record waiting among tenants
    neither noisy nor paused (without demotion no tenant is noisy); None: none waits.
    What demotion protects. O(backlogged tenants): at a scrape, on the emitter thread."""
    now = now_ms / 1000
    if demotions is not None:
        return demotions.demotion.oldest_quiet_age(_heads(core), now)
    if type(core) is FairScheduler:  # one pass inside the core, records as stored
        oldest_ms = core.oldest_head(enqueued_of)
        oldest = None if oldest_ms is None else oldest_ms / 1000
    else:
        oldest = min((enqueued for _, enqueued in _heads(core)), default=None)
    return None if oldest is None else max(0.0, now - oldest)
