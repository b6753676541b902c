"""The scheduling decision: weighted deficit round robin between tenants, in priority classes.

``FairScheduler`` holds one FIFO queue of lightweight items per backlogged tenant and answers
"which record goes next?" in O(1). It knows nothing about Kafka: the service keeps the
records durably and gives the scheduler a handle per record (an offset, a sequence number).

How a decision is made
----------------------
Strict priority between classes (0 first); within a class, weighted deficit round robin
(Shreedhar and Varghese, 1996). Each backlogged tenant sits in the class's ring. A visit to
the tenant at the head of the ring adds its quantum (``weight * quantum``) to its deficit;
the tenant then sends head records while the head's cost fits in the deficit, one record per
``pick``. When the next head does not fit, the visit ends and the tenant goes to the tail;
when its queue empties it leaves the ring and its deficit is forgotten (set to 0), so an
idle tenant cannot save up credit. A tenant that becomes backlogged joins at the tail. With
unit costs and weight 1 this is plain round robin: serve one, back to the tail.

Rounds, and records that cost more than a quantum
-------------------------------------------------
Textbook DRR walks the ring visiting tenants that cannot afford their head record yet,
which costs O(cost / quantum) visits per record. Here the ring is a calendar of rounds
instead: when a visit ends with the head costing ``c`` and a deficit ``d``, the tenant
needs ``k = ceil((c - d) / quantum)`` more visits, so it is filed directly in the ring of
round ``current + k``; the ``k - 1`` visits in between would not have sent anything. Its
deficit is credited lazily, ``(round - credited_round) * quantum``, when it reaches the
head. When every ring of the current and next round is empty, the class jumps straight to
the earliest non-empty round. Every tenant therefore receives exactly one quantum per round
while backlogged, as in textbook DRR, and each ``pick`` does O(1) work: a constant number of
deque operations, plus a heap operation (O(log R), R the number of distinct future rounds,
at most ``ceil(max cost / min quantum)``) only when a tenant skips rounds. With every cost
at most its tenant's quantum, the order of decisions is exactly textbook DRR; when a tenant
skips rounds, the order inside a round can differ from textbook DRR (it is filed behind the
tenants already in that round's ring), not the amount anyone is served.

Guarantee (Shreedhar and Varghese, lemma 2): counting rounds from the moment a tenant became
backlogged with deficit 0, after its K-th round it has been served a cost S with
``K * Q - M < S <= K * Q`` (Q its quantum, M the largest record cost).

Caps, pause and policy changes
------------------------------
A tenant with a rate cap that has no token when its turn comes is parked with its deficit
intact, out of the ring, until its bucket refills; it then resumes at the head of its
class's ring, so the wait for tokens does not also cost it a round. Parking is a heap
operation, O(log parked tenants). A paused tenant keeps its backlog but leaves the ring;
resuming puts it at the tail with deficit 0, like any tenant that becomes backlogged.
``set_policy`` applies to the existing backlog at once: new quantum from the next credit,
new class (joining at its tail), new cap, pause.

Leaving a ring early (pause, class change, removal) would cost O(n) in a deque, so the
tenant's record object is retired instead: a fresh one takes over its queue and the old one,
still referenced by the ring, is skipped when it reaches the head.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import Counter, deque
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, Generic, TypeVar

from fairstream.core.admission import ADMITTED, Decision, admit, over_limits, room
from fairstream.core.clock import Clock
from fairstream.core.ratelimit import TokenBucket
from fairstream.core.rings import (
    ACTIVE,
    PARKED,
    PAUSED,
    RETIRED,
    SLACK,
    ClassRings,
    Pick,
    TenantRecord,
    new_pick,
)
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicies, TenantPolicy

__all__ = ["FairScheduler", "Pick"]

_POLICY = attrgetter("policy")

T = TypeVar("T")


class FairScheduler(TenantPolicies, Generic[T]):
    """Per-tenant FIFO queues and the weighted-DRR decision of which item goes next.

    ``T`` is whatever the caller uses to find a record again (an offset, a sequence number).
    Tenants are strings. Time is read from ``clock`` only where rate caps need it, and a
    caller that already read the clock can pass ``now`` instead.

    Not thread-safe: one owner (the service's scheduler loop) calls every method.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        quantum: object = 1,
        default_policy: TenantPolicy = DEFAULT_POLICY,
    ) -> None:
        """``quantum`` is the base quantum in cost units, a positive number; a tenant's is
        ``weight * quantum``.

        The entry points that check their arguments (``quantum``, ``push``'s cost,
        ``charge``'s amount) take any value and say what is wrong with it: compiled
        (``fairstream.native``), a parameter typed ``int`` or ``float`` would refuse a value
        of another type with its own TypeError before the check, and take True as 1.
        """
        if isinstance(quantum, bool) or not isinstance(quantum, int | float) or not quantum > 0:
            raise ValueError(f"quantum must be a positive number of cost units, got {quantum!r}")
        if quantum == float("inf"):
            raise ValueError("quantum must be finite")
        self._clock = clock
        self._quantum = float(quantum)
        self._default = default_policy
        self._policies: dict[str, TenantPolicy] = {}  # explicit policies only
        self._buckets: dict[str, TokenBucket] = {}  # rate-capped tenants' token buckets
        self._tenants: dict[str, TenantRecord[T]] = {}  # backlogged tenants only
        self._classes: dict[int, ClassRings[T]] = {}  # classes with live ring members
        self._order: list[ClassRings[T]] = []  # the same, highest priority first
        # Tenants out of tokens, a heap: (token due, seq, tenant).
        self._parked: list[tuple[float, int, TenantRecord[T]]] = []
        # Buckets of idle tenants under a capped default policy, dropped once full again:
        # (time full, seq, tenant, bucket). A full bucket is the same as a new one.
        self._idle_buckets: list[tuple[float, int, str, TokenBucket]] = []
        self._seq = itertools.count()
        self._len = 0
        self._restore: Callable[[str, Any], T] | None = None  # see ``store_as``

    # -- queues ----------------------------------------------------------------------------

    def push(self, tenant: str, item: T, cost: object = 1) -> None:
        """Append ``item`` of ``cost`` (a positive int) to the tail of ``tenant``'s queue.

        Does not check admission (see ``admit``): the service also pushes when rebuilding
        from durable state, which must not drop anything.

        Caller: the service, for each record accepted into a tenant's durable buffer.
        Affects: the tenant's queue and backlog; a tenant that was idle joins the tail of
        its class's ring (unless paused).
        """
        if type(cost) is not int or cost < 1:
            raise ValueError(f"cost must be a positive integer, got {cost!r}")
        t = self._tenants.get(tenant)
        if t is None:
            t = self._new_tenant(tenant)
        t.append(item, cost)
        t.cost += cost
        self._len += 1

    def push_admitted(self, tenant: str, item: T, cost: int) -> int:
        """``push``, if ``tenant``'s backlog has room for ``item`` under its policy
        (``admission.over_limits``): ``ADMITTED``; else nothing changes, and which limit it
        meets (``NO_ROOM``, ``NO_COST_ROOM``).

        Caller: the service, for each record it indexes: the rule checked against the
        tenant's own record, without a room worked out per tenant per batch (most of a
        million tenants send one record). Affects: as ``push``, when admitted.
        """
        if type(cost) is not int or cost < 1:  # before the rule compares it
            raise ValueError(f"cost must be a positive integer, got {cost!r}")
        t = self._tenants.get(tenant)
        if t is None:
            verdict = over_limits(self._policies.get(tenant, self._default), 0, 0, cost)
            if verdict != ADMITTED:
                return verdict
            t = self._new_tenant(tenant)
        else:
            verdict = over_limits(t.policy, len(t), t.cost, cost)
            if verdict != ADMITTED:
                return verdict
        t.append(item, cost)  # ``push``, on the record just looked up
        t.cost += cost
        self._len += 1
        return verdict

    def store_as(self, restore: Callable[[str, Any], T] | None) -> None:
        """Let the caller push items in a stored form of its own (say, packed into one bytes
        object, for records that wait by the million): ``restore(tenant, stored)`` gives the
        item back, wherever one leaves the core (``pick``, ``peek``, ``remove_tenant``,
        ``take_backlog``), and must return an item not in stored form unchanged. None: items
        leave as pushed (only once none waits in stored form).

        Caller: the service, before it pushes an item in stored form. Affects: how items
        leave, not which or when."""
        self._restore = restore

    def push_front(self, tenant: str, item: T, cost: object = 1) -> None:
        """Put ``item`` back at the head of ``tenant``'s queue: a pick the service could not
        send now (its payload could not be read back yet), so that it goes first, before
        the tenant's later items, whenever the tenant is picked again.

        Caller: the service, with the item of a ``Pick`` it just took. Affects: as ``push``.
        """
        self.push(tenant, item, cost)
        t = self._tenants[tenant]
        t.appendleft(t.pop())  # the item just appended goes to the head: O(1)

    def charge(self, tenant: str, amount: object) -> bool:
        """Charge a backlogged ``tenant``'s deficit ``amount`` more cost units (a negative
        amount refunds), e.g. the measured cost of a request minus the cost it declared.

        A charge can take the deficit below zero: the tenant then sits out the rounds that
        pay it back, so its share follows what its requests really cost. A refund is given
        in full: it returns what a record sent was charged beyond its cost, never credit
        for time spent idle (a tenant that leaves the ring forgets its deficit, refunds for
        it included). Keeping only part of each refund (say, up to one quantum) would
        charge every tenant more than its requests cost, by amounts that differ from one
        tenant to the next: two tenants of the same costs would drift apart without bound. A
        tenant without a backlog (or paused) keeps no deficit to charge: False, and nothing
        changes.

        Caller: the emission rule and the emitter's feedback, for each measured cost; the
        tenant groups, for records taken back unsent. Affects: the tenant's deficit; a
        refund to a tenant sitting out rounds moves it to the round it can now afford (a
        charge takes effect at its next visit).
        """
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise ValueError(f"amount must be a number of cost units, got {amount!r}")
        if not math.isfinite(amount):
            raise ValueError(f"amount must be finite, got {amount!r}")
        t = self._tenants.get(tenant)
        if t is None or t.state == PAUSED:
            return False
        t.deficit -= amount
        if amount < 0 and t.state == ACTIVE:
            self._refile(t)
        return True

    def remove_tenant(self, tenant: str) -> list[T]:
        """Drop ``tenant``'s whole queue and return its items, oldest first.

        The tenant's policy and rate-cap bucket stay: they are configuration, not backlog.

        Caller: the service, when the tenant's partition is revoked or its backlog purged.
        Affects: the tenant's queue (gone), the ring, the total backlog.
        """
        return [pick.item for pick in self.take_backlog(tenant)]

    def take_backlog(self, tenant: str) -> list[Pick[T]]:
        """``remove_tenant``, returning the whole ``Pick`` (tenant, item, cost) of each item,
        oldest first: for a caller that pushes them again elsewhere (``GroupScheduler``
        moving a tenant to another group).

        Caller: ``remove_tenant``, ``GroupScheduler``. Affects: as ``remove_tenant``.
        """
        t = self._tenants.pop(tenant, None)
        if t is None:
            return []
        if t.state == ACTIVE:
            self._leave_ring(t)
        t.state = RETIRED
        picks = t.items()
        self._len -= len(picks)
        restore = self._restore
        if restore is not None:
            picks = [new_pick(Pick, (tenant, restore(tenant, p.item), p.cost)) for p in picks]
        t.clear()  # the retired record may linger in a ring; do not keep items alive
        self._forget_bucket(tenant)
        return picks

    # -- decisions -------------------------------------------------------------------------

    def pick(self, now: float | None = None) -> Pick[T] | None:  # noqa: PLR0915 (flat hot path)
        """Remove and return the next item to send, or None when no tenant is eligible.

        Eligible: backlogged, not paused, and (if rate-capped) holding a token at ``now``.
        ``now`` defaults to the clock's time; it is only read when some tenant is capped.

        Caller: the service's scheduler loop, once the global egress limiter allows a send.
        Affects: the picked tenant's queue, deficit and place in the ring; tokens of a
        capped tenant; parked tenants whose tokens are due rejoin the ring.
        """
        # The hot path of the whole project, hence one flat function with local names.
        restore = self._restore
        if self._buckets:
            now = self._caps_due(now)
        order = self._order
        i = 0
        while i < len(order):
            cls = order[i]  # strict priority: a class is tried only if those above had nothing
            ring = cls.current
            while True:
                if not ring:
                    if not cls.advance():
                        break
                    ring = cls.current
                t = ring[0]
                if t.state != ACTIVE:  # a retired record left behind in the ring
                    ring.popleft()
                    continue
                round_ = cls.round
                deficit = t.deficit
                if t.credited != round_:
                    deficit += (round_ - t.credited) * t.quantum
                    t.credited = round_
                cost = t.first_cost
                assert cost  # a tenant in a ring has a backlog
                if deficit + SLACK < cost:
                    t.deficit = deficit
                    ring.popleft()
                    self._file_next(cls, t, cost)
                    continue
                bucket = t.bucket
                if bucket is not None:
                    if now is None:
                        now = self._clock.now()
                    if not bucket.try_take(1, now):
                        self._out_of_tokens(ring, t, deficit, now)
                        if cls.size == 0:
                            break
                        continue
                # The first item taken, inline (``TenantRecord``).
                item = t.first
                if restore is not None:
                    item = restore(t.name, item)
                head = new_pick(Pick, (t.name, item, cost))
                rest = t.rest
                if not rest:
                    t.first, t.first_cost = None, 0
                elif type(rest) is tuple:  # a second item, the last (``TenantRecord``)
                    t.first, t.first_cost = rest
                    t.rest = None
                else:
                    t.first = rest.popleft()  # type: ignore[union-attr]  # a deque
                    t.first_cost = rest.popleft()  # type: ignore[union-attr]
                t.cost -= cost
                self._len -= 1
                if not t.first_cost:
                    # Backlog gone: leave the ring, forget the deficit (no saving up credit).
                    ring.popleft()
                    t.state = RETIRED
                    del self._tenants[t.name]
                    cls.size -= 1
                    if cls.size == 0:
                        self._drop_class(cls)
                    if bucket is not None:
                        self._forget_bucket(t.name)
                    return head
                deficit -= cost
                t.deficit = deficit
                cost = t.first_cost
                if deficit + SLACK < cost:
                    # Visit over. Usually the next quantum is enough: file at the tail inline.
                    ring.popleft()
                    if cost - deficit <= t.quantum + SLACK:
                        t.round = round_ + 1
                        cls.upcoming.append(t)
                    else:
                        self._file_next(cls, t, cost)
                return head
            if i < len(order) and order[i] is cls:
                i += 1
        return None

    def next_eligible_in(self, now: float | None = None) -> float | None:
        """Seconds until ``pick`` may return an item: 0.0 if it may now, None if it never
        will without a push, resume or policy change (nothing backlogged, or all paused).

        A capped tenant still in the ring counts as eligible until a ``pick`` finds it out of
        tokens and parks it; the next call then reports its wait.

        Caller: the service's scheduler loop, to sleep when ``pick`` returned None.
        Affects: nothing (drops stale bookkeeping only).
        """
        if self._order:
            return 0.0
        parked = self._parked
        while parked and parked[0][2].state != PARKED:
            heapq.heappop(parked)
        if not parked:
            return None
        if now is None:
            now = self._clock.now()
        return max(0.0, parked[0][0] - now)

    # -- policies --------------------------------------------------------------------------

    @property
    def quantum(self) -> float:
        """The base quantum, in cost units; a tenant's quantum is ``weight * quantum``."""
        return self._quantum

    def set_policy(self, tenant: str, policy: TenantPolicy | None) -> None:
        """Give ``tenant`` its own ``policy``, or None to follow the default policy again.

        Applies to the existing backlog at once: the new weight from the tenant's next
        quantum, a new priority class by moving the tenant to the tail of that class's ring,
        a new rate cap from now on (tokens earned so far are kept), pause by taking the
        tenant out of the ring (its backlog stays), resume by putting it at the tail.

        Caller: the service, for each record of the policy topic.
        Affects: the stored policy; the tenant's quantum, class, bucket and ring membership.
        """
        if policy is None:
            self._policies.pop(tenant, None)
            policy = self._default
        elif not isinstance(policy, TenantPolicy):
            raise TypeError(f"policy must be a TenantPolicy or None, got {policy!r}")
        else:
            self._policies[tenant] = policy
        self._reconfigure(tenant, policy)

    def set_default_policy(self, policy: TenantPolicy) -> None:
        """Replace the default policy, applying it to every tenant without its own.

        Costs O(backlogged tenants + capped tenants): meant for rare configuration changes.

        Caller: the service, for the policy topic's default key.
        Affects: as ``set_policy``, for every tenant following the default.
        """
        if not isinstance(policy, TenantPolicy):
            raise TypeError(f"policy must be a TenantPolicy, got {policy!r}")
        self._default = policy
        followers = {name for name in self._tenants if name not in self._policies}
        followers.update(name for name in self._buckets if name not in self._policies)
        for name in followers:
            self._reconfigure(name, policy)

    def _reconfigure(self, tenant: str, policy: TenantPolicy) -> None:
        bucket = self._buckets.get(tenant)
        if policy.rate_cap is None:
            if bucket is not None:
                del self._buckets[tenant]
                bucket = None
        else:
            now = self._clock.now()
            if bucket is None:
                bucket = self._buckets[tenant] = TokenBucket(policy.rate_cap, policy.cap_burst, now)
            else:
                bucket.reconfigure(policy.rate_cap, policy.cap_burst, now)
        t = self._tenants.get(tenant)
        if t is None:
            if bucket is not None and tenant not in self._policies:
                self._forget_bucket(tenant)
            return
        old = t.policy
        t.policy = policy
        t.bucket = bucket
        t.quantum = policy.weight * self._quantum
        if policy.paused:
            if t.state != PAUSED:
                t = self._detach(t)
                t.state = PAUSED
                t.deficit = 0.0
            return
        if t.state == PAUSED:
            t.deficit = 0.0
            self._join_tail(t)
        elif t.state == PARKED:
            # The due time in the heap belongs to the old cap; file the tenant afresh.
            t = self._detach(t)
            self._join_head_or_park(t)
        elif old.priority != policy.priority:
            t = self._detach(t)
            t.deficit = 0.0
            self._join_tail(t)
        elif old.weight != policy.weight:
            self._refile(t)

    def _refile(self, t: TenantRecord[T]) -> None:
        """After a quantum change or a refund, move a tenant that skips rounds to its new
        round."""
        cls = t.cls
        assert cls is not None
        if t.round <= cls.round + 1:
            return  # it will be visited within a round and credited at the new quantum
        assert t.first_cost  # filed in a round: backlogged
        need = t.first_cost - t.deficit
        target = max(cls.round + 1, t.credited + self._rounds_needed(need, t.quantum))
        if target != t.round:
            # Retire the record still filed in the old round; the successor takes its place.
            fresh = t.successor()
            fresh.credited = t.credited
            fresh.state = ACTIVE
            fresh.cls = cls
            self._tenants[t.name] = fresh
            cls.file(fresh, target)

    # -- admission and introspection ---------------------------------------------------------

    def admit(self, tenant: str, cost: int = 1) -> Decision:
        """Whether a new record of ``cost`` may join ``tenant``'s backlog under its policy.

        Caller: the service, before buffering an ingest record. Affects: nothing.
        """
        records, waiting = self.backlog(tenant)
        return admit(tenant, self.policy(tenant), records, waiting, cost)

    def backlog(self, tenant: str) -> tuple[int, int]:
        """``(records, total cost)`` waiting for ``tenant``."""
        t = self._tenants.get(tenant)
        if t is None:
            return (0, 0)
        return (len(t), t.cost)

    def room(self, tenant: str) -> list[float]:
        """``[records, cost]`` ``tenant`` may still add to its backlog under its policy's
        ``max_backlog`` and ``max_backlog_cost`` (inf: no limit), as a new list the caller
        counts down. Caller: the service, once per tenant per batch of records indexed."""
        policy = self._policies.get(tenant, self._default)
        t = self._tenants.get(tenant)
        return room(policy, 0, 0) if t is None else room(policy, len(t), t.cost)

    def peek(self, tenant: str) -> T | None:
        """``tenant``'s oldest waiting item, left in place (None: no backlog). O(1).

        Caller: the service, looking for whose record pins a partition's low-water mark."""
        t = self._tenants.get(tenant)
        if t is None or not t.first_cost:
            return None
        return t.first if self._restore is None else self._restore(tenant, t.first)

    def holds_any_back(self) -> bool:
        """Whether some backlogged tenant may be held back (``held_back``): a tenant waiting
        for its cap's token, tenants in more than one class, or a paused tenant with a
        backlog. Never False when one is; O(explicit policies), not O(tenants).

        Caller: the service, before it looks for a held-back tenant among all of them."""
        if self._parked or len(self._classes) > 1:
            return True
        if not self._tenants:
            return False
        if self._default.paused:
            return True
        tenants = self._tenants
        return any(p.paused and name in tenants for name, p in self._policies.items())

    def held_back(self, tenant: str) -> bool:
        """Whether ``tenant`` has a backlog that no pick can take now: paused, waiting for a
        token of its rate cap, or in a class below the highest one with tenants to serve
        (strict priority). O(classes)."""
        t = self._tenants.get(tenant)
        if t is None or not t.first_cost:
            return False
        if t.state in (PAUSED, PARKED):
            return True
        return bool(self._classes) and t.policy.priority > min(self._classes)

    def idle(self, now: float | None = None) -> bool:
        """Whether this scheduler holds nothing a fresh one with the same policies would not:
        no backlog, and no rate-cap bucket still refilling (a tenant following the default
        keeps its bucket until it is full; a tenant's own capped policy keeps it always).

        Caller: ``GroupScheduler``, before it forgets an emptied group. Affects: drops the
        buckets that are full again.
        """
        if self._tenants:
            return False
        if self._idle_buckets:
            self._caps_due(now)  # with no backlog, nothing is parked: this drops full buckets
        return not self._buckets

    def tenants(self) -> Iterator[str]:
        """The backlogged tenants (paused ones included), in no particular order."""
        return iter(list(self._tenants))

    # -- surveys: one pass over every backlogged tenant, without a method call per tenant ----
    # A scrape, a demand report and the oldest quiet record each read every backlogged
    # tenant; through ``tenants`` and ``backlog`` or ``policy`` that cost 0.3-0.7 us a tenant,
    # a second of the emitter's time at a million tenants.

    def largest_backlogs(self, k: int) -> list[tuple[str, int]]:
        """The ``k`` tenants with the most items waiting, with how many, most first (ties in
        no particular order); paused ones included. O(backlogged tenants)."""
        return [(t.name, len(t)) for t in heapq.nlargest(k, self._tenants.values(), key=len)]

    def heads(self) -> Iterator[tuple[str, Any]]:
        """Each backlogged, unpaused tenant with its oldest item as it was pushed (in the
        caller's stored form, if it has one: see ``store_as``), in no particular order.

        A generator function, not a generator expression: compiled (``fairstream.native``),
        an expression is made a list first, a million tuples at a million tenants."""
        for t in self._tenants.values():
            if not t.policy.paused:
                yield t.name, t.first

    def oldest_head(self, key: Callable[[Any], float]) -> float | None:
        """The least ``key`` of the oldest item of each backlogged, unpaused tenant (the item
        as stored: see ``store_as``); None when none waits. What ``heads`` and a ``min`` give,
        in one pass without a tuple per tenant (a scrape asks: the oldest quiet record)."""
        oldest: float | None = None
        for t in self._tenants.values():
            if not t.policy.paused:
                at = key(t.first)
                if oldest is None or at < oldest:
                    oldest = at
        return oldest

    def backlogs(self) -> Iterator[tuple[str, int, TenantPolicy]]:
        """Each backlogged tenant (paused ones included) with how many items it has waiting
        and the policy in force for it, in no particular order. A generator function (see
        ``heads``)."""
        for t in self._tenants.values():
            yield t.name, len(t), t.policy

    def policy_counts(self) -> list[tuple[TenantPolicy, int]]:
        """The policies in force for the backlogged tenants (paused ones included), each with
        how many tenants it applies to. Counted by identity: tenants following the default,
        or sharing a policy object, count under one entry."""
        policies = list(map(_POLICY, self._tenants.values()))
        by_id = dict(zip(map(id, policies), policies, strict=True))
        return [(by_id[key], n) for key, n in Counter(map(id, policies)).items()]

    def current_round(self, priority: int = 0) -> int:
        """The round number of a priority class (0 once the class has no backlogged tenant).

        Rounds only grow while the class has tenants in its ring; the counter restarts
        when the class empties. For tests of the fairness bound.
        """
        cls = self._classes.get(priority)
        return 0 if cls is None else cls.round

    def __len__(self) -> int:
        """Total records waiting, over all tenants."""
        return self._len

    def __contains__(self, tenant: object) -> bool:
        """Whether ``tenant`` has a backlog."""
        return tenant in self._tenants

    def __repr__(self) -> str:
        return (
            f"<FairScheduler records={self._len} tenants={len(self._tenants)} "
            f"classes={[c.priority for c in self._order]} parked={len(self._parked)}>"
        )

    # -- ring membership ---------------------------------------------------------------------

    def _new_tenant(self, name: str) -> TenantRecord[T]:
        """A tenant becoming backlogged (its first item still to append): it joins the tail
        of its class's ring, unless paused."""
        policy = self._policies.get(name, self._default)
        bucket: TokenBucket | None = None
        if policy.rate_cap is not None:
            bucket = self._buckets.get(name)
            if bucket is None:
                bucket = self._buckets[name] = TokenBucket(
                    policy.rate_cap, policy.cap_burst, self._clock.now()
                )
        t: TenantRecord[T] = TenantRecord(name, policy, policy.weight * self._quantum, bucket)
        self._tenants[name] = t
        if policy.paused:
            t.state = PAUSED
            return t
        # _join_tail, inline: with many tenants of a record or two, once per record.
        cls = self._classes.get(policy.priority) or self._class(policy.priority)
        t.state = ACTIVE
        t.cls = cls
        t.credited = round_ = cls.round
        cls.size += 1
        t.round = round_ + 1  # ClassRings.file, at the ring's tail
        cls.upcoming.append(t)
        return t

    def _class(self, priority: int) -> ClassRings[T]:
        cls = self._classes.get(priority)
        if cls is None:
            cls = self._classes[priority] = ClassRings(priority)
            bisect.insort(self._order, cls, key=lambda c: c.priority)
        return cls

    def _drop_class(self, cls: ClassRings[T]) -> None:
        # An empty class may still hold retired records in its rings; dropping it frees them.
        del self._classes[cls.priority]
        self._order.remove(cls)

    def _join_tail(self, t: TenantRecord[T]) -> None:
        """A tenant becoming backlogged (or resumed, or moved) joins the tail of its class."""
        cls = self._class(t.policy.priority)
        t.state = ACTIVE
        t.cls = cls
        t.credited = cls.round
        cls.size += 1
        cls.file(t, cls.round + 1)

    def _join_head(self, t: TenantRecord[T]) -> None:
        """A tenant resuming an interrupted visit goes first, with the deficit it has."""
        cls = self._class(t.policy.priority)
        t.state = ACTIVE
        t.cls = cls
        t.credited = cls.round
        t.round = cls.round
        cls.size += 1
        cls.current.appendleft(t)

    def _join_head_or_park(self, t: TenantRecord[T]) -> None:
        bucket = t.bucket
        if bucket is None:
            self._join_head(t)
            return
        now = self._clock.now()
        if bucket.wait_time(1, now) > 0:
            self._park(t, now)
        else:
            self._join_head(t)

    def _file_next(self, cls: ClassRings[T], t: TenantRecord[T], cost: int) -> None:
        """End ``t``'s visit: file it in the first round whose quantum lets it send ``cost``."""
        need = cost - t.deficit
        quantum = t.quantum
        if need <= quantum + SLACK:
            t.round = cls.round + 1
            cls.upcoming.append(t)
        else:
            cls.file(t, cls.round + self._rounds_needed(need, quantum))

    @staticmethod
    def _rounds_needed(need: float, quantum: float) -> int:
        """Fewest rounds of ``quantum`` that cover ``need`` (at least 1), robust to rounding."""
        if need <= quantum + SLACK:
            return 1
        rounds = int(-(-need // quantum))
        if (rounds - 1) * quantum + SLACK >= need:
            rounds -= 1
        return rounds

    def _leave_ring(self, t: TenantRecord[T]) -> None:
        cls = t.cls
        assert cls is not None
        cls.size -= 1
        if cls.size == 0:
            self._drop_class(cls)

    def _detach(self, t: TenantRecord[T]) -> TenantRecord[T]:
        """Take ``t`` out of its ring or the parked heap in O(1) by retiring its record.

        Returns the record to use from now on, in no container (state to be set by caller).
        """
        if t.state == PAUSED:
            return t
        if t.state == ACTIVE:
            self._leave_ring(t)
        fresh = t.successor()
        self._tenants[t.name] = fresh
        return fresh

    # -- rate caps ---------------------------------------------------------------------------

    def _park(self, t: TenantRecord[T], now: float) -> None:
        """Out of the ring (caller took it out) until its bucket has a token; the deficit
        stays as it is."""
        assert t.bucket is not None
        t.state = PARKED
        due = now + t.bucket.wait_time(1, now)
        heapq.heappush(self._parked, (due, next(self._seq), t))

    def _out_of_tokens(
        self, ring: deque[TenantRecord[T]], t: TenantRecord[T], deficit: float, now: float
    ) -> None:
        """``t``, at the head of ``ring``, has no token for its head record: its visit ends
        with ``deficit`` and it waits out of the ring (``_park``)."""
        t.deficit = deficit
        ring.popleft()
        self._leave_ring(t)
        self._park(t, now)

    def _caps_due(self, now: float | None) -> float:
        """The time of a pick (the clock's when ``now`` is None), once the parked tenants
        whose token is due have rejoined their rings and idle buckets full again are gone."""
        if now is None:
            now = self._clock.now()
        parked = self._parked
        if parked and parked[0][0] <= now:
            due: list[TenantRecord[T]] = []
            while parked and parked[0][0] <= now:
                t = heapq.heappop(parked)[2]
                if t.state == PARKED:
                    due.append(t)
            # Earliest due first: file them at the head in reverse order.
            for t in reversed(due):
                self._join_head(t)
        idle = self._idle_buckets
        while idle and idle[0][0] <= now:
            _, _, tenant, bucket = heapq.heappop(idle)
            if (
                tenant not in self._tenants
                and tenant not in self._policies
                and self._buckets.get(tenant) is bucket
            ):
                del self._buckets[tenant]
        return now

    def _forget_bucket(self, tenant: str) -> None:
        """An idle tenant following a capped default keeps its bucket only until it is full."""
        if tenant in self._policies:
            return
        bucket = self._buckets.get(tenant)
        if bucket is None:
            return
        now = self._clock.now()
        full_in = bucket.wait_time(bucket.burst, now)
        heapq.heappush(self._idle_buckets, (now + full_in, next(self._seq), tenant, bucket))
