"""The emission rule: when the next record may go, which one, and what it costs.

``EmissionRule`` answers one question, "what next?", for whoever drives it (the service's
emitter thread, the ``simulate`` command, tests):

- a ``Pick`` (tenant, item, cost): send ``item`` now; its record and cost tokens are taken;
- an ``Expire`` (tenant, item, cost): ``item`` was picked but its deadline has passed: do
  not send it (the service dead-letters it), no tokens are taken;
- a ``Wait`` (seconds): nothing may go for that long; ``math.inf`` when nothing will until
  something changes (a push, a policy, a share, a lease).

How the answer is made, in order:

1. Hold: after the paid API asked for a pause (Retry-After, ``hold``), nothing goes.
2. Lease: a rule given a lease (``lease``) sends nothing once it has run out (the group's
   demand exchange has not confirmed this instance's share for a while).
3. Tenant pauses whose time is up end: the tenant gets its own policy back.
   Concurrency slots whose lease ran out are given back.
4. Concurrency: while this instance's slots of ``--max-concurrency`` are all held, nothing
   goes (``Wait`` until the earliest lease ends; a completion, ``settled``, is news).
   A tenant holding its policy's ``max_concurrency`` slots is out of the pick, as a paused
   tenant is, until one of its slots is given back; so is a tenant group whose members
   hold its group policy's ``max_concurrency`` (``fairstream.core.groupslots``).
5. Pacing: wait for a record token *before* deciding who goes. A decision taken early
   would pass over tenants that become backlogged while it waits. The buckets are asked at
   the pacer's own time (see "The virtual schedule" below), not at the caller's.
6. Pick: ``FairScheduler.pick`` (weighted DRR, classes, per-tenant caps), or
   ``GroupScheduler.pick`` (the same, groups first). With ``dominant`` and both limits,
   the picked tenant is charged its dominant use on top of the cost
   (``fairstream.core.dominant``).
7. Expiry at emit time: a picked item whose deadline (``deadline(item)``, epoch ms) is
   before ``now_ms`` is answered ``Expire``.
   Budgets (``fairstream.core.budget``): a picked item's declared cost is reserved in its
   tenant's budgets and its tenant group's (``ledger``). When one has no room, the item
   is answered ``Exhausted`` (its budget says dead-letter), or goes back to the head of
   its tenant's queue and the tenant leaves the pick until the budget has room (wait),
   and the pick is made again among the others.
8. Cost tokens: only a picked record's cost is known, so its cost tokens are taken after
   the pick. When they are short, the pick is held and the answer is ``Wait``; the next
   calls answer for the held pick first (no other tenant overtakes it).

The virtual schedule: a caller that is late (it woke up late, a commit or a read-back held
it) must not lose the slots it missed while a backlog waited, or a bucket of one token
delivers a fraction of the rate (measured before: 0.86x at ``--burst 1``). So the pacer keeps
a clock of its own, ``slot``: the time each pick is *scheduled at*. A pick takes its tokens
at ``slot``, not at ``now``: after a late call the missed slots go back to back, each
stamped with its own slot (``stamp_ms``), until the schedule has caught up with ``now``.
The buckets only ever see ``slot``, which never goes back, so over the slots (the
``fairstream-scheduled-ms`` stamps) every window ``w`` holds at most ``rate * w + burst``
records: the token bucket's own guarantee. What is caught up is bounded:

- at most ``catch_up`` seconds of schedule (0.5 s by default; a slot older than that is
  lost), plus the time the caller says it spent on work it had to do (``excuse``: a commit,
  which under load was seen to take 0.5-2.5 s), so at the moment records are produced the
  bound is ``rate * (w + catch_up + that work) + burst``; read_committed consumers see
  records per commit anyway, so a slow commit delays what they see by as much either way;
- only while a backlog waited: once nothing could be picked (the core empty, every tenant
  capped or paused, every concurrency slot held), or when the lease ran out, the schedule
  restarts at ``now``; after a hold it restarts no earlier than the hold's end; a new share
  starts it at ``now``;
- a pick is never scheduled before its record was enqueued (``enqueued``, epoch ms), so a
  record that arrived during the commit is not stamped before it existed.

The rate share: an instance sends its ``share`` of the group rate (``set_share``). The
limiter's buckets are retuned, never replaced, so tokens spent before a change stay spent:
repeated rebalances cannot hand out a fresh burst each time.

Concurrency slots (``fairstream.core.inflight``): a released record takes a slot when the
caller reports it sent (``started``, with its request id) and gives it back when a worker
reports it settled (``settled``) or its lease runs out. The DRR keeps picking by weight among
the tenants with free slots, so with every slot busy a tenant's share of the slots follows
its weight. Slots are counted only while a limit exists (``tracking``): the instances'
(``--max-concurrency``, or the one found from the feedback at run time,
``set_max_concurrency``), the default policy's, a tenant's, or a tenant group's (its own
policy's or the groups' default); requests released before a limit applied hold none.
A tenant group's slots are counted for the group the tenant was in when each was taken
(``fairstream.core.groupslots`` says how groups are held, and split between instances).

Pure: no Kafka, no threads, no I/O; time comes from the injected ``Clock`` (buckets, holds,
pauses) and from the caller (``now_ms``, the wall clock deadlines are written in).
Not thread-safe: one owner calls every method.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Final, Generic, NamedTuple, TypeVar, cast

from fairstream.core.adaptive import TenantPauses
from fairstream.core.budget import BudgetLedger, Charges, Refusal, group_scope
from fairstream.core.clock import Clock
from fairstream.core.deficit import FairScheduler
from fairstream.core.dominant import DominantCharge
from fairstream.core.groupslots import GroupSlots
from fairstream.core.hierarchy import GroupScheduler
from fairstream.core.inflight import DEFAULT_LEASE, InFlight, split_limit
from fairstream.core.ratelimit import EgressLimiter
from fairstream.core.rings import Pick
from fairstream.core.tenant import TenantPolicy

__all__ = ["EmissionRule", "Exhausted", "Expire", "Wait"]

T = TypeVar("T")

# A share of zero still needs a positive rate for the buckets: this fraction of the group
# rate, which in practice sends nothing and keeps the tokens the buckets hold.
_NO_SHARE: Final = 1e-6


class Expire(NamedTuple, Generic[T]):
    """``item`` of ``tenant`` was picked after its deadline: it must not be sent."""

    tenant: str
    item: T
    cost: int


class Exhausted(NamedTuple, Generic[T]):
    """``item`` of ``tenant`` does not fit a budget whose policy dead-letters what does not
    (``refusal`` says which): it must not be sent (the service dead-letters it)."""

    tenant: str
    item: T
    cost: int
    refusal: Refusal


class Wait(NamedTuple):
    """Nothing may be sent for ``seconds`` (``math.inf``: until something changes)."""

    seconds: float


WAIT_FOR_NEWS: Final = Wait(math.inf)

CATCH_UP: Final = 0.5  # seconds of missed schedule a late caller may still catch up

# Wall-clock minus monotonic time, in ms, is re-anchored when the readings move back by more
# than this (a wall-clock step); readings only a little low are a caller descheduled between
# its two clock reads, not a step.
_STEP_MS: Final = 100.0
MAX_EXCUSED: Final = 10.0  # seconds of excused work owed at most (an overloaded caller)


class EmissionRule(Generic[T]):
    """Pace, pick, expire, cost tokens, hold, tenant pauses and the rate share, over one
    ``FairScheduler`` or ``GroupScheduler`` (see the module docstring for the order of the
    checks).

    ``rate`` and ``cost_rate`` are the rates of the whole group (None: unlimited), ``burst``
    and ``cost_burst`` its bursts (``cost_burst`` defaults to one second of ``cost_rate``);
    this rule sends ``share`` of them (1 until ``set_share``). ``deadline`` tells an item's
    deadline in epoch ms (None: it has none); without it nothing expires. ``on_resume`` is
    told each tenant whose pause has ended (for a log line). ``max_concurrency`` is the
    group's limit of requests in flight (None: unlimited), of which this rule holds
    ``set_concurrency_share``'s part; ``concurrency_lease`` the seconds a slot is held
    without news of its request. ``dominant``: with both ``rate`` and ``cost_rate``, share
    by dominant resource (``fairstream.core.dominant``), not by cost alone.
    ``partition_of`` tells an item's ingest partition, whose progress carries the budget
    spend it makes (None: all 0).
    """

    __slots__ = (
        "_alarm",
        "_base",
        "_budget_due",
        "_budget_held",
        "_budget_tenants",
        "_budgeted",
        "_burst",
        "_catch_up",
        "_clock",
        "_concurrency_share",
        "_cost_burst",
        "_cost_rate",
        "_deadline",
        "_dominant",
        "_enqueued",
        "_excused",
        "_found_limit",
        "_full",
        "_group_limit",
        "_hold_until",
        "_idle",
        "_lease_until",
        "_limited",
        "_limited_tenants",
        "_limiter",
        "_next_resume",
        "_now",
        "_offset",
        "_on_resume",
        "_partition_of",
        "_pending",
        "_rate",
        "_share",
        "_slot",
        "budget_waits",
        "core",
        "groups",
        "inflight",
        "ledger",
        "pauses",
        "stamp_ms",
    )

    def __init__(
        self,
        core: FairScheduler[T] | GroupScheduler[T],
        clock: Clock,
        *,
        rate: float | None = None,
        burst: float = 1.0,
        cost_rate: float | None = None,
        cost_burst: float | None = None,
        deadline: Callable[[T], int | None] | None = None,
        enqueued: Callable[[T], int] | None = None,
        catch_up: float = CATCH_UP,
        max_pause: float = 300.0,
        on_resume: Callable[[str], None] | None = None,
        max_concurrency: int | None = None,
        concurrency_lease: float = DEFAULT_LEASE,
        dominant: bool = False,
        partition_of: Callable[[T], int] | None = None,
    ) -> None:
        self.core = core
        self._clock = clock
        self._now = clock.now
        self._rate = rate
        self._burst = float(burst)
        self._cost_rate = cost_rate
        if cost_burst is None:
            cost_burst = max(1.0, float(cost_rate)) if cost_rate is not None else 1.0
        self._cost_burst = float(cost_burst)
        self._limiter = EgressLimiter(clock, rate, burst, cost_rate, cost_burst)
        self._limited = rate is not None or cost_rate is not None
        drf = DominantCharge(rate, cost_rate)
        self._dominant = drf if dominant and drf.active else None
        self._share = 1.0
        self._deadline = deadline
        self._enqueued = enqueued
        if not math.isfinite(catch_up) or catch_up < 0:
            raise ValueError(f"catch_up must be a finite number >= 0, got {catch_up!r}")
        self._catch_up = float(catch_up)
        self._slot = clock.now()  # the pacer's clock: the slot of the last pick
        self._idle = True  # nothing could be picked at the last look: no catching up
        self._excused = 0.0  # seconds of the caller's necessary work, owed beyond catch_up
        self._offset = -math.inf  # wall-clock ms minus monotonic ms (see _stamp)
        self.stamp_ms = 0  # the slot of the last Pick in epoch ms (see next)
        self._hold_until = -math.inf
        self._lease_until = math.inf
        self.pauses = TenantPauses(max_pause)
        self._next_resume = math.inf  # when the earliest tenant pause ends
        self._alarm = math.inf  # the earlier of the lease's end and the next resume
        self._base: dict[str, TenantPolicy | None] = {}  # paused tenants' own policies
        self._pending: Pick[T] | None = None  # picked, waiting for its cost tokens
        self._on_resume = on_resume
        self._group_limit = max_concurrency
        self._concurrency_share = 1.0
        self._found_limit = False  # the group limit comes from set_max_concurrency
        self.inflight = InFlight(max_concurrency, concurrency_lease)
        self._full: set[str] = set()  # tenants out of the pick: their slots are all held
        self._limited_tenants: set[str] = set()  # tenants whose own policy limits slots
        self.groups = GroupSlots(self.inflight)  # tenant groups held for their slots
        self.groups.attach(core)
        self.ledger = BudgetLedger()  # what tenants and tenant groups spent, per window
        self._partition_of = partition_of  # an item's ingest partition: its spend's
        self._budget_tenants: set[str] = set()  # tenants whose own policy has budgets
        self._budgeted = False  # whether any policy in force has a budget
        # Tenants out of the pick until a budget has room: tenant -> clock time; and a heap
        # of (time, tenant), entries superseded by a later hold skipped.
        self._budget_held: dict[str, float] = {}
        self._budget_due: list[tuple[float, str]] = []
        self.budget_waits = 0  # picks put back for a budget, since the start
        self.budgets_changed()

    # -- the decision ------------------------------------------------------------------------

    def next(self, now_ms: int = 0) -> Pick[T] | Expire[T] | Exhausted[T] | Wait:
        """What to do now: send a ``Pick``, drop an ``Expire`` or an ``Exhausted``, or
        ``Wait``.

        ``now_ms`` is the wall-clock time in epoch ms that deadlines are compared with.
        After a ``Pick`` under a rate or cost limit, ``stamp_ms`` is its slot on the virtual
        schedule in epoch ms (at most ``catch_up`` before ``now_ms``): the time the caller
        stamps the record with. Unlimited, the caller stamps it with ``now_ms``.

        Caller: the emitter loop, and ``simulate``, once per record.
        Affects: the core (a pick), the limiter's tokens, the schedule, the held pick, ended
        pauses.
        """
        # The per-record path of the service: flat, local names, no allocation on a send.
        now = self._now()
        if now < self._hold_until:
            return Wait(self._hold_until - now)
        if now >= self._alarm:  # a lease ran out, or a tenant pause ended
            if now >= self._lease_until:
                self._idle = True  # what the lease did not allow is not owed afterwards
                return WAIT_FOR_NEWS
            self._resume(now)
        if self._limited:
            return self._paced(now, now_ms)
        pick = self._pending
        if pick is None:
            gate = self._slots_wait(now)
            if gate is not None:
                return gate
            picked = self.core.pick(now) if not self._budgeted else self._budget_pick(now, now_ms)
            if picked is None:
                later = self._later(now)
                return WAIT_FOR_NEWS if later is None or later == math.inf else Wait(later)
            if type(picked) is Exhausted:
                return picked
            pick = cast(Pick[T], picked)
        else:
            self._pending = None
        deadline_of = self._deadline
        if deadline_of is not None:
            deadline = deadline_of(pick[1])
            if deadline is not None and now_ms > deadline:
                return Expire(*pick)
        self.stamp_ms = now_ms
        return pick

    def _paced(self, now: float, now_ms: int) -> Pick[T] | Expire[T] | Exhausted[T] | Wait:  # noqa: PLR0915 (flat hot path)
        """``next`` under a rate or cost limit: the tokens are taken at the slot."""
        limiter = self._limiter
        # The slot: the schedule's own time, behind ``now`` by what a late caller missed
        # while a backlog waited, never more than catch_up, never before a hold's end.
        floor = now if self._idle else now - self._catch_up
        excused = self._excused
        if excused:
            if self._slot >= floor:
                self._excused = 0.0  # caught up
            else:
                floor -= excused
        slot = max(self._slot, floor, self._hold_until)
        pick = self._pending
        if pick is None:
            gate = self._slots_wait(now)
            if gate is not None:
                # The workers hold every slot: the slots of the schedule missed meanwhile
                # are not owed, or each completion would release a burst of them (the API
                # saw one as a spike of 429s).
                self._idle = True
                self._slot = slot
                return gate
            due = slot + limiter.wait_time(1, 1, slot)
            if due > now:
                self._slot = slot
                return Wait(due - now)
            slot = due
            core = self.core
            picked = core.pick(now) if not self._budgeted else self._budget_pick(now, now_ms)
            if picked is None:
                self._idle = True
                self._slot = slot
                later = self._later(now)
                return WAIT_FOR_NEWS if later is None or later == math.inf else Wait(later)
            if type(picked) is Exhausted:
                self._slot = slot  # it takes no token: the slot is the next record's
                return picked
            pick = cast(Pick[T], picked)
            dominant = self._dominant
            if dominant is not None:
                extra = dominant.extra(pick[2])
                if extra:
                    core.charge(pick[0], extra)
        else:
            self._pending = None
        self._idle = False
        item = pick[1]
        deadline_of = self._deadline
        if deadline_of is not None:
            deadline = deadline_of(item)
            if deadline is not None and now_ms > deadline:
                self._slot = slot
                return Expire(*pick)
        slot = self._not_before_arrival(item, slot, now, now_ms)
        cost = pick[2]
        if not limiter.try_acquire(1, cost, slot):
            due = slot + limiter.wait_time(1, cost, slot)
            if due > now:
                self._pending = pick
                self._slot = slot
                return Wait(due - now)
            slot = due
            if not limiter.try_acquire(1, cost, slot):
                # The wait was below the clock's resolution (a large clock value): one
                # step of it is more than the tokens missing.
                slot = math.nextafter(slot, math.inf)
                if not limiter.try_acquire(1, cost, slot):
                    self._pending = pick
                    self._slot = min(slot, now)
                    return Wait(limiter.wait_time(1, cost, slot) or 1e-6)
        self._slot = slot
        self.stamp_ms = self._stamp(slot, now, now_ms)
        return pick

    # -- budgets -------------------------------------------------------------------------------

    def _budget_pick(self, now: float, now_ms: int) -> Pick[T] | Exhausted[T] | None:
        """``core.pick`` under budgets: the first pick whose declared cost its budgets have
        room for, reserved; an ``Exhausted`` for one whose full budget dead-letters; None
        when nothing may be picked. A pick that must wait goes back to the head of its
        tenant's queue, and the tenant leaves the pick until its budget has room. An item
        past its deadline is not charged: it is expired, not sent."""
        core, ledger, deadline_of = self.core, self.ledger, self._deadline
        while True:
            pick = core.pick(now)
            if pick is None:
                return None
            tenant, item, cost = pick
            if deadline_of is not None:
                deadline = deadline_of(item)
                if deadline is not None and now_ms > deadline:
                    return pick
            charges = self.charges(tenant)
            if not charges:
                return pick
            refusal = ledger.reserve(charges, cost, now_ms, self._partition(item))
            if refusal is None:
                return pick
            if refusal.budget.on_exhausted == "dead-letter":
                return Exhausted(tenant, item, cost, refusal)
            core.push_front(tenant, item, cost)
            self.budget_waits += 1
            self._hold_for_budget(tenant, now + max(0.001, (refusal.fits_at_ms - now_ms) / 1000))

    def charges(self, tenant: str) -> Charges:
        """The budgets a record of ``tenant`` is charged to: the tenant's policy's, and its
        tenant group's (its own policy's, else the groups' default)."""
        policy = self.core.policy(tenant)
        grouped = self.groups.core  # the core, when it has tenant groups
        group = None if grouped is None else grouped.group_of(tenant)
        if grouped is None or group is None:
            return ((tenant, policy.budgets),) if policy.budgets else ()
        group_budgets = grouped.group_policy(group).budgets
        if not group_budgets:
            return ((tenant, policy.budgets),) if policy.budgets else ()
        if not policy.budgets:
            return ((group_scope(group), group_budgets),)
        return ((tenant, policy.budgets), (group_scope(group), group_budgets))

    def _hold_for_budget(self, tenant: str, until: float) -> None:
        """``tenant`` out of the pick until ``until`` (its budget has room by then)."""
        self._budget_held[tenant] = until
        heapq.heappush(self._budget_due, (until, tenant))
        if tenant not in self._base:
            self._base[tenant] = self.core.own_policy(tenant)
            self._set_paused(tenant)
        self._reschedule()

    def _release_budget_holds(self, now: float) -> None:
        """Tenants whose budget hold is due, back in the pick (unless held otherwise)."""
        due, held = self._budget_due, self._budget_held
        while due and due[0][0] <= now:
            until, tenant = heapq.heappop(due)
            if held.get(tenant) == until:
                del held[tenant]
                self._restore(tenant)

    def _restore(self, tenant: str) -> None:
        """``tenant``'s own policy back in the core, unless something still holds it out of
        the pick (its upstream quota's pause, its concurrency slots, its budget)."""
        if (
            tenant in self._base
            and tenant not in self.pauses
            and tenant not in self._full
            and tenant not in self._budget_held
        ):
            self.core.set_policy(tenant, self._base.pop(tenant))

    def budgets_changed(self) -> None:
        """A policy in force may have gained or lost budgets (the defaults, a tenant group's
        own or default policy): whether any budget applies is found again, and tenants held
        for a budget come back to be charged by the new ones.

        Caller: the service, after each policy record; this rule, for tenants' own policies.
        Affects: whether picks are charged; the budget holds.
        """
        self._budgeted = self._any_budget()
        self.release_budget_holds()

    def _any_budget(self) -> bool:
        """Whether a policy in force has a budget: a tenant's own, the defaults', a tenant
        group's own or the groups' default. O(groups with a policy of their own)."""
        if self._budget_tenants or self.core.default_policy.budgets:
            return True
        grouped = self.groups.core
        if grouped is None:
            return False
        policies = grouped.group_policies
        return bool(policies.default.budgets) or any(p.budgets for p in policies.own.values())

    def release_budget_holds(self) -> None:
        """Every tenant held for a budget back in the pick, to be charged again: a budget
        changed, or a refund may have made room.

        Caller: the service, on measured costs below the declared ones. Affects: the holds.
        """
        if not self._budget_held:
            return
        held = list(self._budget_held)
        self._budget_held.clear()
        self._budget_due.clear()
        for tenant in held:
            self._restore(tenant)
        self._reschedule()

    @property
    def budgeted(self) -> bool:
        """Whether any policy in force has a budget: picks are then charged."""
        return self._budgeted

    def budget_held(self) -> dict[str, float]:
        """Tenants out of the pick for a budget, and until when (clock time)."""
        return dict(self._budget_held)

    def refund(self, tenant: str, item: T, cost: int, now_ms: int) -> None:
        """A pick that was charged did not go (back in its tenant's queue, or a dead letter
        for a reason of its own): its reservation is given back.

        Caller: the service, for a record it put back. Affects: the ledger.
        """
        if self._budgeted:
            charges = self.charges(tenant)
            if charges:
                self.ledger.unreserve(charges, cost, now_ms, self._partition(item))

    def _partition(self, item: T) -> int:
        """The ingest partition whose progress carries ``item``'s budget spend."""
        partition_of = self._partition_of
        return 0 if partition_of is None else partition_of(item)

    def _not_before_arrival(self, item: T, slot: float, now: float, now_ms: int) -> float:
        """``slot``, or later: not scheduled before it existed (a record that arrived while
        the caller was late). A later slot only has more tokens, and the schedule stays
        monotonic."""
        enqueued_of = self._enqueued
        if enqueued_of is not None and now_ms > 0:
            arrived = now - (now_ms - enqueued_of(item)) / 1000
            if arrived > slot:
                return min(arrived, now)
        return slot

    def _slots_wait(self, now: float) -> Wait | None:
        """While this instance's concurrency slots are all held: how long to wait (a
        completion, ``settled``, is news; the earliest lease's end at last). Leases that ran
        out are given back first. None when a slot is free, or no limit is tracked."""
        if not self.tracking:
            return None
        inflight = self.inflight
        expiry = inflight.next_expiry()
        if now >= expiry:
            self._expire(now)
            expiry = inflight.next_expiry()
        if inflight.full:
            return WAIT_FOR_NEWS if expiry == math.inf else Wait(expiry - now)
        return None

    def _later(self, now: float) -> float | None:
        """When the core, which had nothing to pick, may have something: a tenant's cap,
        pause or budget hold ending, or a lease giving a tenant out of the pick for its
        slots one back."""
        core = self.core
        later = core.next_eligible_in(now) if len(core) else None
        if self.tracking and (self._full or self.groups.full):
            expiry = self.inflight.next_expiry() - now
            later = expiry if later is None else min(later, expiry)
        if self._next_resume < math.inf and len(core):
            # A tenant paused (its upstream quota) or held for its budget comes back then.
            due = max(0.0, self._next_resume - now)
            later = due if later is None else min(later, due)
        return later

    def _stamp(self, slot: float, now: float, now_ms: int) -> int:
        """``slot`` (clock time) in epoch ms: through one wall-minus-monotonic offset, so the
        stamps keep the spacing of the slots (reading both clocks per pick would jitter them
        by a millisecond, enough to break the window bound at 2,000/s). The offset is the
        largest reading (the wall clock is read first, so a reading is never above the true
        offset), re-anchored when the readings drop by more than _STEP_MS (a step back)."""
        reading = now_ms - now * 1000.0
        offset = self._offset
        if reading > offset or reading < offset - _STEP_MS:
            self._offset = offset = reading
        return int(slot * 1000.0 + offset)

    def direct(self) -> bool:
        """Whether ``next`` comes down, for now, to the fair pick and expiry at emit time:
        no rate or cost limit, no hold, no lease ending, no pause ending, no pick held for
        its cost tokens, no concurrency limit. Then the caller may call ``core.pick()``
        itself and compare the item's deadline with its ``now_ms`` (``Expire`` when past
        it): the same answers as ``next``, without its checks per record. Valid until
        something changes (a hold, a lease, a pause, a share, a limit) or time passes; the
        service asks again before each batch.

        Caller: the emitter loop, once per batch. Affects: nothing.
        """
        if self._limited or self._pending is not None or self.tracking or self._budgeted:
            return False
        now = self._now()
        return self._hold_until <= now < self._alarm

    def excuse(self, seconds: float) -> None:
        """The caller spent ``seconds`` on work it had to do (a commit) while a backlog may
        have waited: those slots are owed in full, beyond ``catch_up``, until caught up (at
        most ``MAX_EXCUSED`` seconds).

        Caller: the emitter, after each commit. Affects: the schedule.
        """
        if seconds > 0 and not self._idle:
            self._excused = min(self._excused + seconds, MAX_EXCUSED)

    def forgo(self) -> None:
        """Owe nothing for the time until the next call: the caller held emission back on
        purpose (warming up, rewinding), so the slots meanwhile are not caught up.

        Caller: the emitter, while it may not emit. Affects: the schedule.
        """
        self._idle = True
        self._excused = 0.0

    @property
    def dominant(self) -> DominantCharge | None:
        """The dominant-resource charge in force (``dominant`` and both limits), else None:
        the feedback reader charges measured costs with its ``correction`` then."""
        return self._dominant

    @property
    def pending(self) -> Pick[T] | None:
        """The pick held for its cost tokens, if any: no longer in the core, not yet sent."""
        return self._pending

    def cancel(self) -> Pick[T] | None:
        """Forget the held pick (its partition went away, it was purged) and return it.

        Caller: the service, when the records a pick stands for are no longer its own.
        Affects: the held pick.
        """
        pick, self._pending = self._pending, None
        return pick

    def replace_core(self, core: FairScheduler[T] | GroupScheduler[T]) -> None:
        """Drive ``core`` from now on (the service rebuilt it): the held pick is forgotten,
        tenants still paused are paused in the new core too.

        Caller: the service, after a rewind. Affects: the core, the held pick.
        """
        self.core = core
        self._pending = None
        self.groups.attach(core)
        for tenant in self._base:
            self._base[tenant] = core.own_policy(tenant)
            self._set_paused(tenant)

    # -- hold, lease and the rate share --------------------------------------------------------

    def hold(self, until: float) -> None:
        """Send nothing before ``until`` (clock time): the paid API asked for a pause.

        Caller: the service, on the adaptive rate's Retry-After hold. Affects: the hold.
        """
        self._hold_until = until

    def lease(self, until: float) -> None:
        """Send nothing from ``until`` (clock time) on, unless the lease is renewed.

        Caller: the service, each time the group acknowledges this instance's demand.
        Affects: the lease.
        """
        self._lease_until = until
        self._alarm = min(until, self._next_resume)

    @property
    def rate(self) -> float | None:
        """Records per second this rule sends at most now (its share of the group's), or
        None when records are not limited."""
        return self._limiter.rate

    @property
    def cost_rate(self) -> float | None:
        """Cost units per second this rule sends at most now, or None when not limited."""
        return self._limiter.cost_rate

    @property
    def share(self) -> float:
        """The fraction of the group's rate this rule sends."""
        return self._share

    def set_share(self, share: object) -> None:
        """Send ``share`` (0 to 1, or above for an over-committed instance) of the group rate
        and burst from now on. Tokens spent stay spent; a smaller burst trims the buckets.

        Caller: the service, on a rebalance, a new group share or a new adaptive rate.
        Affects: the limiter's rates and bursts. (``share`` is typed ``object``: checked here,
        compiled as well as from source; see ``ratelimit._check_rate``.)
        """
        if isinstance(share, bool) or not isinstance(share, int | float):
            raise ValueError(f"share must be a number, got {share!r}")
        if not math.isfinite(share) or share < 0:
            raise ValueError(f"share must be a finite number >= 0, got {share!r}")
        if float(share) == self._share:
            return  # the group repeats a share with each lease: nothing changes
        self._share = float(share)
        # A new share starts the schedule now: slots missed at the old share are not caught
        # up at the new one (another instance may have sent them meanwhile).
        now = self._slot = self._clock.now()
        self._excused = 0.0
        rate, cost_rate = self._rate, self._cost_rate
        if share == 0:
            scale, burst, cost_burst = _NO_SHARE, 1.0, 1.0
        else:
            scale = share
            burst = max(1.0, self._burst * share)
            cost_burst = max(1.0, self._cost_burst * share)
        self._limiter.set_rate(
            None if rate is None else rate * scale,
            burst=burst,
            cost_rate=None if cost_rate is None else cost_rate * scale,
            cost_burst=cost_burst,
            now=now,
        )

    # -- tenant pauses -------------------------------------------------------------------------

    def pause(self, tenant: str, seconds: float, now: float | None = None) -> bool:
        """Pause ``tenant`` for ``seconds`` (its own upstream quota pushed back); True when
        that pauses it longer than before. Its backlog stays; its policy comes back after.

        Caller: the service, on the feedback's tenant-scope rate limits.
        Affects: the pauses; the tenant's policy in the core (paused).
        """
        if now is None:
            now = self._clock.now()
        if not self.pauses.pause(tenant, seconds, now):
            return False
        if tenant not in self._base:
            self._base[tenant] = self.core.own_policy(tenant)
            self._set_paused(tenant)
        self._reschedule()
        return True

    def set_policy(self, tenant: str, policy: TenantPolicy | None) -> None:
        """Give ``tenant`` its own ``policy`` (None: the default) in the core; a tenant
        paused by its upstream quota stays paused and gets ``policy`` when the pause ends.

        Caller: the service, for each policy record. Affects: the core's policy of tenant.
        """
        if policy is not None and policy.max_concurrency is not None:
            self._limited_tenants.add(tenant)
        else:
            self._limited_tenants.discard(tenant)
        had_budgets = tenant in self._budget_tenants
        if policy is not None and policy.budgets:
            self._budget_tenants.add(tenant)
        else:
            self._budget_tenants.discard(tenant)
        if tenant in self._base:
            self._base[tenant] = policy
            self._set_paused(tenant)
        else:
            self.core.set_policy(tenant, policy)
        # A new limit may fill the tenant's slots, or free them.
        if self.inflight.tenant_full(tenant, self.core.policy(tenant).max_concurrency):
            self._block(tenant)
        elif tenant in self._full:
            self._unblock(tenant)
        if had_budgets or tenant in self._budget_tenants:
            self._budgeted = self._any_budget()
            if self._budget_held.pop(tenant, None) is not None:
                self._restore(tenant)  # charged again, by its new budgets
                self._reschedule()

    def _set_paused(self, tenant: str) -> None:
        core = self.core
        base = self._base[tenant]
        core.set_policy(
            tenant, (core.default_policy if base is None else base).replace(paused=True)
        )

    def _resume(self, now: float) -> None:
        for tenant in self.pauses.expire(now):
            if tenant in self._base and tenant not in self._full:
                self._restore(tenant)
                if self._on_resume is not None and tenant not in self._base:
                    self._on_resume(tenant)
        if self._budget_due:
            self._release_budget_holds(now)
        self._reschedule()

    def _reschedule(self) -> None:
        """The next pause or budget hold to end, and the alarm that wakes the rule for it
        (or for a lease): after a hold or pause is added or taken away."""
        self._next_resume = self._earliest_resume()
        self._alarm = min(self._lease_until, self._next_resume)

    def _earliest_resume(self) -> float:
        expiry = self.pauses.next_expiry()
        due = self._budget_due
        while due and self._budget_held.get(due[0][1]) != due[0][0]:
            heapq.heappop(due)  # superseded by a later hold, or released
        budget = due[0][0] if due else math.inf
        return min(math.inf if expiry is None else expiry, budget)

    # -- concurrency slots ---------------------------------------------------------------------

    @property
    def tracking(self) -> bool:
        """Whether a concurrency limit exists (the instances', the default policy's, a
        tenant's or a tenant group's): then the caller reports each record it sends
        (``started``)."""
        return (
            self._group_limit is not None
            or bool(self._limited_tenants)
            or self.core.default_policy.max_concurrency is not None
            or self.groups.limited
        )

    def set_concurrency_share(self, share: float) -> None:
        """Hold at most ``floor(max_concurrency * share)`` slots from now on: this
        instance's part of the group's limit (the parts of instances whose shares add up to
        1 add up to at most the limit), and as much of each tenant group's.

        Caller: the service, when the partitions it owns change. Affects: the slot limits.
        """
        self._concurrency_share = share
        self.inflight.set_limit(self._slot_part())
        self.groups.set_share(share)

    def set_max_concurrency(self, limit: object) -> None:
        """The group's limit of requests in flight is ``limit`` from now on (None:
        unlimited), of which this rule holds its share's part, at least one slot while it
        has a share (a limit found at run time may be smaller than the instances: none may
        be left unable to release the requests that measure it). Slots held above it stay
        until given back; slots taken before a limit existed were not counted.

        Caller: the service, on the adaptive concurrency limit. Affects: the slot limits.
        (``limit`` is typed ``object``: checked here, compiled as well as from source.)
        """
        checked: int | None = None
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"limit must be an integer >= 1 or None, got {limit!r}")
            checked = limit
        self._group_limit = checked
        self._found_limit = True
        self.inflight.set_limit(self._slot_part())

    def _slot_part(self) -> int | None:
        """This instance's part of the group's limit: rounded down; at least one slot for
        a limit found at run time (``set_max_concurrency``) while it has a share."""
        share = self._concurrency_share
        part = split_limit(self._group_limit, share)
        if part == 0 and share > 0 and self._found_limit:
            return 1
        return part

    def started(self, tenant: str, key: Hashable, now: float | None = None) -> None:
        """``tenant``'s record of request id ``key`` was sent: it holds a slot until a
        worker reports it settled or its lease ends, counted for the tenant's group too. A
        tenant (or group) whose slots are now all held leaves the pick.

        Caller: the service, for each record it sends while ``tracking``, before the next
        ``next``. Affects: the slots; the tenant's place in the pick.
        """
        if now is None:
            now = self._now()
        inflight, groups = self.inflight, self.groups
        group = groups.group_of(tenant)
        if inflight.acquire(key, tenant, now, group):
            limit = self.core.policy(tenant).max_concurrency
            if limit is not None and inflight.of(tenant) >= limit:
                self._block(tenant)
            groups.taken(group)

    def settled(self, keys: Iterable[Hashable]) -> int:
        """Workers reported the requests ``keys`` settled: their slots are free; how many
        were held here (a request released elsewhere, or before a limit, holds none).

        Caller: the service, on final feedback outcomes. Affects: the slots; tenants and
        groups back in the pick.
        """
        freed = 0
        inflight, full, groups = self.inflight, self._full, self.groups
        for key in keys:
            slot = inflight.give_back(key)
            if slot is not None:
                freed += 1
                if slot.tenant in full:
                    self._unblock(slot.tenant)
                groups.given_back(slot.group)
        return freed

    def renew(self, keys: Iterable[Hashable], now: float | None = None) -> None:
        """The requests ``keys`` are still being worked on (a failed attempt to be retried,
        a 429): their leases start again.

        Caller: the service, on intermediate feedback outcomes. Affects: the leases.
        """
        if now is None:
            now = self._now()
        for key in keys:
            self.inflight.renew(key, now)

    def _expire(self, now: float) -> None:
        for slot in self.inflight.expire_slots(now):
            if slot.tenant in self._full:
                self._unblock(slot.tenant)
            self.groups.given_back(slot.group)

    def _block(self, tenant: str) -> None:
        self._full.add(tenant)
        if tenant not in self._base:
            self._base[tenant] = self.core.own_policy(tenant)
            self._set_paused(tenant)

    def _unblock(self, tenant: str) -> None:
        """Back in the pick if its slots allow (and no upstream pause holds it)."""
        if self.inflight.tenant_full(tenant, self.core.policy(tenant).max_concurrency):
            return
        self._full.discard(tenant)
        self._restore(tenant)
