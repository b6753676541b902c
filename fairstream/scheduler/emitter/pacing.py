"""What the emission rule is told from outside the emitter's data path.

This instance's share of the group's rate (``--share-by demand``: the fraction the group
thread computed, ``coordination.shares``; ``--share-by partitions``: the ingest partitions
owned, times the adapted rate, ``feedback.reader``) and of its concurrency limit (always by
partitions owned), and what the paid API reported back: measured costs charged, tenants
paused by their own quota, concurrency slots settled or renewed, the concurrency limit found
from the feedback (without ``--max-concurrency``) and the start-up window before it, and the
egress group's lag and its bound (``--egress-group``: ``feedback.egress_lag``). The rule retunes
its buckets; the gauges follow.

Caller: the emitter thread (``Emitter``), which applies the group's, the feedback reader's
and the adaptive rate's hand-overs here, in mailbox order.
"""

from __future__ import annotations

import logging
import math
from operator import attrgetter
from typing import Any

from fairstream.config import Settings
from fairstream.core import Core, RecordClock
from fairstream.core.credit import StartupWindow
from fairstream.core.emission import EmissionRule
from fairstream.scheduler.messages import (
    AdaptiveChange,
    ConcurrencyChange,
    FeedbackBatch,
    LagChange,
    ShareChange,
)
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Observed
from fairstream.scheduler.records import Parsed
from fairstream.scheduler.recovery import holding_id
from fairstream.wire.partition import partition_of

__all__ = ["Pacing", "new_rule"]

log = logging.getLogger("fairstream.emitter")


class Pacing:
    """The rule's shares, the adapted rate and the concurrency slots' gauges."""

    def __init__(
        self, settings: Settings, partitions: int, rule: EmissionRule[Parsed], metrics: Metrics
    ) -> None:
        self.rule = rule
        self.metrics = metrics
        self.partitions = partitions
        self.rate = settings.rate
        # Group-wide shares (--share-by demand): set by ShareChange from the group thread.
        self.group_shares = settings.share_by == "demand" and (
            settings.rate is not None or settings.cost_rate is not None
        )
        self.fraction: float | None = None
        self._share_factor = 1.0  # the adapted fraction ``fraction`` was computed with
        if self.group_shares:
            rule.lease(0.0)  # nothing goes before the group thread sets a share
        # Feedback from the paid API (``feedback.reader``): the adapted rate as a fraction of
        # --rate, applied here when the group does not share by demand.
        self.adaptive = 1.0
        # An explicit --max-concurrency is kept: a limit found from the feedback never
        # replaces it (the service then builds no finder; this guards the rule anyway).
        # Slots are counted from the start-up window's first release on (or the first limit
        # found, without the window). Workers that report nothing would hold the window's
        # slots until their lease ran out (counted as lost completions): when it opens for
        # lack of feedback, they are given back.
        self.fixed_concurrency = settings.max_concurrency is not None
        # The group's limit is the least of the fixed one, the one found from the feedback,
        # the egress group's lag bound and the start-up window (None: unlimited); the rule is
        # told when it moves.
        self._fixed = settings.max_concurrency
        self._found: int | None = None
        self._lag_bound: int | None = None
        # Until the feedback finds a limit, a few slots (``StartupWindow``): releasing at
        # --rate for the first hold queued a second of releases in egress and the API.
        # Under a rate only: without one, the fastest release is asked for.
        paced = settings.rate is not None or settings.cost_rate is not None
        self.startup = (
            StartupWindow.for_rate(settings.rate)
            if paced
            and settings.feedback_topic
            and settings.adaptive_concurrency
            and not self._fixed
            else None
        )
        self._applied = settings.max_concurrency
        self._slot_share = 0.0  # this instance's part of the limit (owned partitions)
        self._lease_expiries = 0  # concurrency slots' lease expiries counted so far
        self._set_limit()

    def apply(self, owned: int) -> None:
        """Take this instance's share of the group rate, ``owned`` ingest partitions owned:
        by demand, the fraction the group thread computed; with ``--share-by partitions``,
        in proportion to the partitions owned, times the adapted rate."""
        by_partitions = owned / self.partitions if self.partitions else 0.0
        if self.group_shares:
            # The group's fraction includes the adapted rate it read with this instance's
            # demand (every DEMAND_EVERY). A cut since then applies here at once: 0.2 s
            # late, it let a probe's overshoot reach the API that much longer (a hidden
            # capacity's window went from 2-3% of calls refused to 6%). A raise waits for
            # the group's next share, which raises no sooner than a peer's cut.
            cut = min(1.0, self.adaptive / self._share_factor) if self._share_factor > 0 else 1.0
            share = (self.fraction or 0.0) * cut
        else:
            share = by_partitions * self.adaptive
        self.rule.set_share(share)
        # Concurrency is split by owned partitions (``--share-by partitions``' split of the
        # rate), whatever --share-by says: the parts cannot add up to more than the limit,
        # need no exchange, and do not follow the adapted rate.
        self.rule.set_concurrency_share(by_partitions)
        # A tenant group's budget: with the instances' exchange, each spends its claim
        # (``ClaimBook``) and nothing before it has one; without, its share by partitions.
        self.rule.ledger.share = 0.0 if self.group_shares else by_partitions
        self._slot_share = by_partitions
        self.count_slots()
        self.metrics.group_share.set(share)
        self.metrics.rate_share.set(0 if self.rate is None else self.rate * share)

    def adapted(self, change: AdaptiveChange, owned: int) -> None:
        """The feedback reader adapted the rate (and may hold emission for a Retry-After)."""
        self.adaptive = change.factor
        self.rule.hold(change.hold_until)
        self.apply(owned)

    def limited(self, change: ConcurrencyChange) -> None:
        """The feedback reader found the group's concurrency limit (None: unlimited)."""
        if self.fixed_concurrency:
            return
        self._found = change.limit
        startup = self.startup
        if startup is not None:
            if change.learning:
                startup.rearm()
            else:
                startup.found()
        self._set_limit()
        self.count_slots()

    def startup_limit(self) -> int | None:
        """The group's slots the start-up window allows now (None: it does not limit)."""
        startup = self.startup
        return None if startup is None else startup.limit

    def review_startup(self, now: float) -> None:
        """Widen the start-up window as it says, and open it when no limit was found
        within its timeout of the first release: the workers report nothing (or calls are
        longer than that). The slots it held are then given back: no settlement would free
        them. Caller: the emitter, each round while the window is armed."""
        startup, rule = self.startup, self.rule
        assert startup is not None
        if not startup.review(now, len(rule.inflight)):
            return
        self._set_limit()
        if startup.limit is None:
            log.info(
                "no concurrency limit found from the feedback within %.0f s of the first "
                "release: releasing without one (do the workers report outcomes on the "
                "feedback topic?)",
                startup.timeout,
            )
            if self._lag_bound is None:
                rule.settled(rule.inflight.taken_by(math.inf))
            # Else the egress group's lag frees them (``lagged``): given back here too, each
            # record still waiting downstream was released a second time (the quiet
            # tenants' wait behind plain consumers went from 0.45 s to 0.98 s at that moment).
        self.count_slots()

    def lagged(self, change: LagChange) -> None:
        """The egress lag reader sampled the egress group (``--egress-group``): its bound
        limits the slots like a concurrency limit, and its lag frees them. Of the slots
        taken by the sample's time, all but this instance's part of the lag (by owned
        partitions, as the limit is split) are given back, oldest first: the group
        committed past them. Slots taken later are not in the sample; they stay."""
        self._lag_bound = change.bound
        self._set_limit()
        rule = self.rule
        if change.lag is not None and len(rule.inflight):
            mine = math.ceil(change.lag * self._slot_share)
            taken = rule.inflight.taken_by(change.at)
            if len(taken) > mine:
                rule.settled(taken[: len(taken) - mine])
        self.count_slots()

    def _set_limit(self) -> None:
        startup = self.startup_limit()
        limits = [n for n in (self._fixed, self._found, self._lag_bound, startup) if n is not None]
        limit = min(limits) if limits else None
        if limit != self._applied:
            self._applied = limit
            self.rule.set_max_concurrency(limit)

    def shared(self, change: ShareChange, owned: int) -> None:
        """The group thread computed this instance's share, leased until a time."""
        self.fraction = change.fraction
        self._share_factor = change.factor
        self.rule.lease(change.lease_until)
        self.apply(owned)

    def feedback(self, batch: FeedbackBatch, observed: Observed, now: float, now_ms: int) -> None:
        """Charge measured costs (under ``--fairness dominant``, in the dominant-resource
        charge's terms) to the tenants' deficits and settle them in their budgets, pause
        tenants whose own quota pushed back, settle and renew concurrency slots."""
        rule = self.rule
        core = rule.core
        dominant = rule.dominant
        budgeted, ledger, refunded = rule.budgeted, rule.ledger, False
        for tenant, declared, cost, charged_ms in batch.charges:
            observed.cost(tenant, declared, cost)
            if cost != declared:
                extra = cost - declared if dominant is None else dominant.correction(declared, cost)
                if extra:
                    core.charge(tenant, extra)
                if budgeted:
                    charges = rule.charges(tenant)
                    if charges:
                        partition = partition_of(tenant, self.partitions)
                        charged = charged_ms or now_ms
                        ledger.settle(charges, cost - declared, charged, now_ms, partition)
                        refunded = refunded or cost < declared
        if refunded:
            rule.release_budget_holds()  # the refunds may have made room
        for tenant, seconds in batch.pauses:
            if rule.pause(tenant, seconds, now):
                log.info("tenant %r paused for %.1f s (its upstream quota)", tenant, seconds)
        if batch.settled or batch.renewed:
            rule.renew(batch.renewed, now)
            freed = rule.settled(batch.settled)
            startup = self.startup
            if freed and startup is not None and startup.armed:
                startup.settled()
            self.count_slots()

    def counts_slots(self) -> bool:
        """Whether concurrency slots are counted (a limit exists, or slots are still held):
        the feedback reader hands completions over only then. The emitter publishes it for
        that thread once a round (``Emitter.counts_slots``)."""
        rule = self.rule
        return rule.tracking or len(rule.inflight) > 0

    def add_slots(self, stats: dict[str, Any]) -> None:
        """Add the concurrency slots to tenant stats (``Observed.tenant_stats``) when they
        are counted: this instance's, and each listed tenant's."""
        if not self.counts_slots():
            return
        inflight = self.rule.inflight
        stats["concurrency"] = {
            "in_flight": len(inflight),
            "limit": inflight.limit,
            "lease_s": inflight.lease,
            "lease_expired_total": inflight.expired,
        }
        for row in stats.get("tenants", []):
            row["in_flight"] = inflight.of(row["tenant"])

    def count_slots(self) -> None:
        """The concurrency gauges, and the lease expiries since the last look."""
        inflight = self.rule.inflight
        self.metrics.concurrency_in_flight.set(len(inflight))
        limit = inflight.limit
        self.metrics.concurrency_limit.set(-1 if limit is None else limit)
        expired = inflight.expired - self._lease_expiries
        if expired:
            self._lease_expiries = inflight.expired
            self.metrics.concurrency_lease_expired.inc(expired)


def new_rule(settings: Settings, core: Core[Parsed], clock: RecordClock) -> EmissionRule[Parsed]:
    """The emission rule over ``core`` as the settings say (``fairstream.core.emission``)."""
    return EmissionRule(
        core,
        clock,
        rate=settings.rate,
        burst=settings.effective_burst,
        cost_rate=settings.cost_rate,
        deadline=attrgetter("deadline"),
        enqueued=attrgetter("enqueued"),
        on_resume=_resumed,
        max_concurrency=settings.max_concurrency,
        concurrency_lease=settings.concurrency_lease,
        dominant=settings.fairness == "dominant",
        partition_of=ingest_partition,
    )


def ingest_partition(entry: Parsed) -> int:
    """The ingest partition of a record, waiting in its ingest log or in that partition's
    holding log (``holding_id``): the partition whose progress carries its budget spend."""
    partition = entry.partition
    return partition if partition >= 0 else holding_id(partition)


def _resumed(tenant: str) -> None:
    log.info("tenant %r resumed after a pause (its upstream quota, or a read-back)", tenant)
