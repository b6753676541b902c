"""Concurrency slots: the requests released to the paid API and not settled yet.

Many paid APIs limit the calls in progress, not only the calls per second (a self-hosted
model serves N sequences at once; SaaS APIs cap parallel requests). ``InFlight`` counts
them: a request takes a slot when the scheduler releases it (``acquire``) and gives it back
when a worker reports it settled (``release``, on a final feedback outcome: ok or
dead-lettered). There is a group limit (``limit``, this instance's part of
``--max-concurrency``) and a per-tenant one (the policy's ``max_concurrency``, given by the
caller at each ``acquire``). A slot may also be counted for a tenant group (``group``
at ``acquire``: the group the tenant was in when the slot was taken, whatever group it is
in when the slot is given back), so that a group's ``max_concurrency`` can be applied.

A completion can be lost (a worker killed with -9, feedback that never arrives): every slot
has a lease of ``lease`` seconds from its release, renewed by the request's intermediate
feedback (a failed attempt that will be retried, a 429). A slot whose lease ran out is
given back by ``expire`` and counted in ``expired``: a lost completion holds a slot for at
most one lease, never forever. The lease should be longer than the API's slowest call plus
the worker's retries, or a slow call's slot is given back while it still runs.

Slots are keyed by request id: acquiring a key already held (the same request released
again, after an aborted transaction) renews its lease and counts once.

All leases have the same length, so they end in the order they were last renewed: a deque
of ``(expires, key)``, with entries superseded by a renewal or a release skipped when they
reach its head, and compacted when they outnumber the live slots.

Pure: no I/O; time is given by the caller. Not thread-safe: one owner calls every method.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Final, NamedTuple

__all__ = ["DEFAULT_LEASE", "Held", "InFlight", "split_limit"]

DEFAULT_LEASE: Final = 60.0  # seconds a slot is held without a completion
_COMPACT_AT: Final = 1024  # superseded deque entries tolerated beyond twice the live slots


def split_limit(limit: int | None, share: float) -> int | None:
    """This instance's part of a group limit: ``floor(limit * share)``, so the parts of
    instances whose shares add up to at most 1 add up to at most ``limit``."""
    if limit is None:
        return None
    if not math.isfinite(share) or share < 0:
        raise ValueError(f"share must be a finite number >= 0, got {share!r}")
    # A tiny epsilon: 20 * (1/3 * 3) must stay 20, not 19.
    return max(0, min(limit, math.floor(limit * share + 1e-9)))


class Held(NamedTuple):
    """One held slot: its tenant, its lease's end, and the group it counts for (None: none)."""

    tenant: str
    expires: float
    group: str | None


class InFlight:
    """The held slots: per request id its tenant, lease end and group, counted per tenant
    and per group.

    ``limit``: slots this instance may hold (None: unlimited). ``lease``: seconds a slot
    is held without news of its request.
    """

    __slots__ = ("_by_group", "_by_tenant", "_order", "_slots", "expired", "lease", "limit")

    def __init__(self, limit: int | None = None, lease: float = DEFAULT_LEASE) -> None:
        if isinstance(lease, bool) or not isinstance(lease, int | float):
            raise ValueError(f"lease must be a number of seconds, got {lease!r}")
        if not math.isfinite(lease) or lease <= 0:
            raise ValueError(f"lease must be a positive finite number of seconds, got {lease!r}")
        self.lease = float(lease)
        self.limit: int | None = None
        self.set_limit(limit)
        self._slots: dict[Hashable, Held] = {}
        self._by_tenant: dict[str, int] = {}
        self._by_group: dict[str, int] = {}
        self._order: deque[tuple[float, Hashable]] = deque()
        self.expired = 0  # slots given back because their lease ran out, ever

    def set_limit(self, limit: int | None) -> None:
        """Hold at most ``limit`` slots from now on (slots held above it stay until they
        are given back). Caller: the owner, when its share of the group changes."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValueError(f"limit must be an integer >= 0 or None, got {limit!r}")
        self.limit = limit

    # -- counts ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Slots held, over all tenants."""
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def of(self, tenant: str) -> int:
        """Slots ``tenant`` holds."""
        return self._by_tenant.get(tenant, 0)

    @property
    def full(self) -> bool:
        """Whether every slot of this instance is held (no request may be released)."""
        limit = self.limit
        return limit is not None and len(self._slots) >= limit

    def tenant_full(self, tenant: str, limit: int | None) -> bool:
        """Whether ``tenant`` holds ``limit`` slots or more (None: never)."""
        return limit is not None and self._by_tenant.get(tenant, 0) >= limit

    def by_tenant(self) -> dict[str, int]:
        """Slots held per tenant (a copy)."""
        return dict(self._by_tenant)

    def of_group(self, group: str) -> int:
        """Slots counted for ``group`` (taken while their tenant was in it)."""
        return self._by_group.get(group, 0)

    def by_group(self) -> dict[str, int]:
        """Slots counted per group (a copy)."""
        return dict(self._by_group)

    def next_expiry(self) -> float:
        """When the earliest lease ends (``math.inf`` when no slot is held)."""
        order, slots = self._order, self._slots
        while order:
            expires, key = order[0]
            slot = slots.get(key)
            if slot is not None and slot.expires == expires:
                return expires
            order.popleft()  # released or renewed since
        return math.inf

    def taken_by(self, when: float) -> list[Hashable]:
        """The keys of the slots taken at or before ``when`` and not renewed since, oldest
        first (a renewed slot counts as taken when it was renewed).

        Caller: the owner, to give back the oldest slots the egress group's lag shows
        consumed (``fairstream.core.lagbound``)."""
        lease = self.lease
        return [key for key, slot in self._slots.items() if slot.expires - lease <= when]

    # -- changes -----------------------------------------------------------------------------

    def acquire(self, key: Hashable, tenant: str, now: float, group: str | None = None) -> bool:
        """``tenant``'s request ``key`` takes a slot until ``now + lease``, counted for
        ``group`` too (the tenant's group now; None: none); False (and the lease renewed,
        tenant and group kept) when it holds one already. The caller checks the limits
        first (``full``, ``tenant_full``): a slot is taken even above them.

        Caller: the owner, when it releases a request."""
        expires = now + self.lease
        slots = self._slots
        slot = slots.get(key)
        if slot is not None:
            slots[key] = Held(slot.tenant, expires, slot.group)
            self._order.append((expires, key))
            self._compact()
            return False
        slots[key] = Held(tenant, expires, group)
        self._order.append((expires, key))
        by_tenant = self._by_tenant
        by_tenant[tenant] = by_tenant.get(tenant, 0) + 1
        if group is not None:
            by_group = self._by_group
            by_group[group] = by_group.get(group, 0) + 1
        return True

    def renew(self, key: Hashable, now: float) -> bool:
        """Extend the lease of ``key``'s slot to ``now + lease``; False when it holds none.

        Caller: the owner, on intermediate feedback about the request (it is still worked on).
        """
        slot = self._slots.get(key)
        if slot is None:
            return False
        expires = now + self.lease
        if expires > slot.expires:
            self._slots[key] = slot._replace(expires=expires)
            self._order.append((expires, key))
            self._compact()
        return True

    def release(self, key: Hashable) -> str | None:
        """Give back ``key``'s slot; the tenant that held it, or None when it held none (a
        request released before the limit applied, by another instance, or expired).

        Caller: the owner, on a final outcome of the request."""
        slot = self.give_back(key)
        return None if slot is None else slot.tenant

    def give_back(self, key: Hashable) -> Held | None:
        """``release``, returning the slot given back (its tenant and group), or None."""
        slot = self._slots.pop(key, None)
        if slot is None:
            return None
        self._drop(slot)
        self._compact()
        return slot

    def expire(self, now: float) -> list[str]:
        """Give back every slot whose lease ended by ``now``; the tenants that held them
        (one entry per slot), each counted in ``expired``.

        Caller: the owner, when ``next_expiry`` has passed."""
        return [slot.tenant for slot in self.expire_slots(now)]

    def expire_slots(self, now: float) -> list[Held]:
        """``expire``, returning the slots given back (their tenants and groups)."""
        order, slots = self._order, self._slots
        ended: list[Held] = []
        while order and order[0][0] <= now:
            expires, key = order.popleft()
            slot = slots.get(key)
            if slot is not None and slot.expires == expires:
                del slots[key]
                self._drop(slot)
                ended.append(slot)
        self.expired += len(ended)
        return ended

    def release_all(self, keys: Iterable[Hashable]) -> list[str]:
        """``release`` each of ``keys``; the tenants whose slots were given back."""
        tenants = []
        for key in keys:
            tenant = self.release(key)
            if tenant is not None:
                tenants.append(tenant)
        return tenants

    def _drop(self, slot: Held) -> None:
        _count_down(self._by_tenant, slot.tenant)
        if slot.group is not None:
            _count_down(self._by_group, slot.group)

    def _compact(self) -> None:
        order, slots = self._order, self._slots
        if len(order) <= 2 * len(slots) + _COMPACT_AT:
            return
        # Keep the live entries; their order (by expiry) is preserved.
        self._order = deque((e, k) for e, k in order if (s := slots.get(k)) and s.expires == e)


def _count_down(counts: dict[str, int], name: str) -> None:
    left = counts[name] - 1
    if left:
        counts[name] = left
    else:
        del counts[name]
