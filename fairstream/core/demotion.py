"""Automatic demotion: a noisy tenant goes one priority class down, and back once quiet.

DRR already bounds what a flooding tenant costs its neighbours to one round. Demotion goes
further, as SQS fair queues do for noisy neighbours: while a tenant takes more than a
configured share of the recent egress, or holds more than a configured backlog, it is
*noisy* and scheduled one class below its own, so every quiet tenant's record is served
ahead of it (strict priority); it still gets whatever the quiet ones leave. Once it has
been quiet for a while it is promoted back.

- Recent egress: a sliding window of ``window`` seconds, kept in ``buckets`` buckets (so
  the window is exact to within one bucket). ``sent`` counts what the caller sends:
  records, cost or dominant charges, as long as it counts one way.
- Noisy: a share of the window above ``share``, once the window holds ``min_egress`` at
  least (a lone tenant trickling into an idle egress is not noisy), or a backlog above
  ``backlog`` records.
- Quiet (hysteresis): a share of at most ``quiet_share`` (default ``share / 2``) or a window
  below ``min_egress``, and a backlog of at most ``quiet_backlog`` (default ``backlog // 2``).
  A noisy tenant quiet for ``quiet`` seconds in a row is promoted; noisy again meanwhile,
  its quiet time starts over.

What demotion means, for the caller to apply (``demoted``): one class down at the level
where the entity is scheduled. In a ``GroupScheduler`` a grouped tenant goes down inside
its group (it yields to its group-mates, its group keeps its share); a ``Demotion`` over
group ids demotes groups at the outer level. See ``fairstream.core.hierarchy``.

This module only decides (``review`` returns the changes) and never touches a scheduler.
Metrics, as SQS publishes them: the count of noisy tenants (``noisy_count``) and the age of
the oldest record among quiet tenants (``oldest_quiet_age``, given each tenant's oldest).

Cost: ``sent`` O(1) amortised (each entry enters and leaves the window once); ``review``
O(tenants in the window + backlogs given + noisy tenants), meant to run a few times a
second, not per record. Pure: time from the injected clock or the caller's ``now``.
Not thread-safe: one owner calls every method.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from fairstream.core.clock import Clock
from fairstream.core.tenant import TenantPolicy

__all__ = ["Change", "Demotion", "DemotionPolicy", "demoted"]

_TINY = 1e-9  # window sums below this are rounding left-overs of subtraction


def _positive(name: str, value: object, *, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ValueError(
            f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}"
        )


def _count(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{name} must be an integer or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class DemotionPolicy:
    """When a tenant is noisy, and when quiet again (see the module docstring).

    ``share``: fraction of the window's egress above which a tenant is noisy (None: not
    by share); ``backlog``: records waiting above which it is (None: not by backlog); at
    least one of them is set. ``window`` and ``quiet`` are seconds; ``buckets`` the
    window's resolution; ``min_egress`` what the window must hold for shares to count.
    """

    share: float | None = 0.5
    backlog: int | None = None
    window: float = 10.0
    quiet: float = 30.0
    quiet_share: float | None = None
    quiet_backlog: int | None = None
    min_egress: float = 0.0
    buckets: int = 10

    def __post_init__(self) -> None:
        if self.share is None and self.backlog is None:
            raise ValueError("demotion needs a share or a backlog threshold (or both)")
        if self.share is not None:
            _positive("share", self.share)
            if self.share > 1:
                raise ValueError(f"share is a fraction of the egress, at most 1: {self.share!r}")
        if self.quiet_share is not None:
            _positive("quiet_share", self.quiet_share, zero=True)
            if self.share is None or self.quiet_share > self.share:
                raise ValueError(
                    f"quiet_share ({self.quiet_share!r}) needs a share at least as large "
                    f"(share={self.share!r})"
                )
        _count("backlog", self.backlog)
        _count("quiet_backlog", self.quiet_backlog)
        if self.backlog is not None and self.backlog < 1:
            raise ValueError(f"backlog must be at least 1 record, got {self.backlog!r}")
        if self.quiet_backlog is not None and (
            self.backlog is None or not 0 <= self.quiet_backlog <= self.backlog
        ):
            raise ValueError(
                f"quiet_backlog ({self.quiet_backlog!r}) needs a backlog at least as large "
                f"(backlog={self.backlog!r}), and is 0 or more"
            )
        _positive("window", self.window)
        _positive("quiet", self.quiet, zero=True)
        _positive("min_egress", self.min_egress, zero=True)
        _count("buckets", self.buckets)
        if self.buckets < 1:
            raise ValueError(f"buckets must be at least 1, got {self.buckets!r}")

    @property
    def quiet_share_in_force(self) -> float | None:
        """The share at or below which a noisy tenant counts as quiet (None: any)."""
        if self.share is None:
            return None
        return self.share / 2 if self.quiet_share is None else self.quiet_share

    @property
    def quiet_backlog_in_force(self) -> int | None:
        """The backlog at or below which a noisy tenant counts as quiet (None: any)."""
        if self.backlog is None:
            return None
        return self.backlog // 2 if self.quiet_backlog is None else self.quiet_backlog


class Change(NamedTuple):
    """A decision of ``review``: demote ``tenant`` one class now (``demote`` True), or
    promote it back to its own class (False)."""

    tenant: str
    demote: bool


def demoted(policy: TenantPolicy) -> TenantPolicy:
    """``policy`` one class down: what a demoted tenant (or group) is scheduled under."""
    return policy.replace(priority=policy.priority + 1)


class Demotion:
    """Each tenant's share of the recent egress and its noisy/quiet state.

    Names are opaque: tenant ids, or group ids for a ``Demotion`` over groups.
    """

    __slots__ = (
        "_clock",
        "_noisy",
        "_ring",
        "_start",
        "_sums",
        "_total",
        "_width",
        "policy",
    )

    def __init__(self, policy: DemotionPolicy, clock: Clock) -> None:
        if not isinstance(policy, DemotionPolicy):
            raise TypeError(f"policy must be a DemotionPolicy, got {policy!r}")
        self.policy = policy
        self._clock = clock
        self._width = policy.window / policy.buckets
        self._start = clock.now()  # start of the newest bucket
        self._ring: deque[dict[str, float]] = deque({} for _ in range(policy.buckets))
        self._sums: dict[str, float] = {}  # per name, over the window
        self._total = 0.0
        self._noisy: dict[str, float | None] = {}  # noisy name -> quiet since (None: not)

    # -- the window ----------------------------------------------------------------------------

    def sent(self, tenant: str, amount: float = 1.0, now: float | None = None) -> None:
        """``tenant`` was sent ``amount`` (records, cost: one unit throughout) at ``now``.

        Caller: the emitter, per record sent (or per batch, summed). O(1) amortised.
        """
        if now is None:
            now = self._clock.now()
        if now >= self._start + self._width:
            self._roll(now)
        bucket = self._ring[-1]
        bucket[tenant] = bucket.get(tenant, 0.0) + amount
        sums = self._sums
        sums[tenant] = sums.get(tenant, 0.0) + amount
        self._total += amount

    def _roll(self, now: float) -> None:
        steps = int((now - self._start) // self._width)
        ring, sums = self._ring, self._sums
        if steps >= len(ring):
            for bucket in ring:
                bucket.clear()
            sums.clear()
            self._total = 0.0
        else:
            total = self._total
            for _ in range(steps):
                for name, amount in ring.popleft().items():
                    left = sums[name] - amount
                    if left <= _TINY:
                        del sums[name]
                    else:
                        sums[name] = left
                    total -= amount
                ring.append({})
            self._total = max(0.0, total) if sums else 0.0
        self._start += steps * self._width

    def share(self, tenant: str, now: float | None = None) -> float:
        """``tenant``'s fraction of the window's egress (0 when the window is empty)."""
        self._advance(now)
        total = self._total
        return self._sums.get(tenant, 0.0) / total if total > 0 else 0.0

    @property
    def total(self) -> float:
        """What the window holds, over every name (as of the last call given a time)."""
        return self._total

    def _advance(self, now: float | None) -> float:
        if now is None:
            now = self._clock.now()
        if now >= self._start + self._width:
            self._roll(now)
        return now

    # -- decisions -----------------------------------------------------------------------------

    def review(self, backlogs: Mapping[str, int], now: float | None = None) -> list[Change]:
        """Who turns noisy now (demote) and who has been quiet long enough (promote).

        ``backlogs``: records waiting per backlogged tenant (those absent have none).
        Caller: the emitter, a few times a second; it applies the changes (``demoted``).
        Affects: the noisy set.
        """
        now = self._advance(now)
        policy = self.policy
        total = self._total
        counted = total > 0 and total >= policy.min_egress
        changes: list[Change] = []
        noisy = self._noisy
        if policy.share is not None and counted:
            above = policy.share * total
            for name, amount in self._sums.items():
                if amount > above and name not in noisy:
                    noisy[name] = None
                    changes.append(Change(name, True))
        if policy.backlog is not None:
            for name, records in backlogs.items():
                if records > policy.backlog and name not in noisy:
                    noisy[name] = None
                    changes.append(Change(name, True))
        quiet_share = policy.quiet_share_in_force
        quiet_backlog = policy.quiet_backlog_in_force
        for name, since in list(noisy.items()):
            quiet = (
                quiet_share is None
                or not counted
                or self._sums.get(name, 0.0) <= quiet_share * total
            ) and (quiet_backlog is None or backlogs.get(name, 0) <= quiet_backlog)
            if not quiet:
                noisy[name] = None
            elif since is None:
                noisy[name] = now
                if policy.quiet == 0:
                    del noisy[name]
                    changes.append(Change(name, False))
            elif now - since >= policy.quiet:
                del noisy[name]
                changes.append(Change(name, False))
        return changes

    def forget(self, tenant: str) -> bool:
        """Forget ``tenant``'s noisy state (its backlog was removed, it is gone); True when
        it was noisy (the caller gives it its own class back). Its egress stays counted."""
        return self._noisy.pop(tenant, False) is not False

    # -- state and metrics ---------------------------------------------------------------------

    def __contains__(self, tenant: object) -> bool:
        """Whether ``tenant`` is noisy (demoted)."""
        return tenant in self._noisy

    @property
    def noisy(self) -> frozenset[str]:
        """The noisy (demoted) names."""
        return frozenset(self._noisy)

    @property
    def noisy_count(self) -> int:
        """How many are noisy: a gauge, as SQS's count of noisy groups."""
        return len(self._noisy)

    def quiet_since(self, tenant: str) -> float | None:
        """When a noisy ``tenant``'s current quiet time began (None: not quiet, or not
        noisy)."""
        return self._noisy.get(tenant)

    def oldest_quiet_age(self, heads: Iterable[tuple[str, float]], now: float) -> float | None:
        """The age at ``now`` of the oldest record among quiet tenants, from ``(tenant, time
        its oldest record was enqueued)`` pairs (in ``now``'s clock); None: no quiet tenant
        has a record. What demotion protects: it should stay small while noisy ones flood.
        """
        noisy = self._noisy
        oldest: float | None = None
        for tenant, enqueued in heads:
            if tenant not in noisy and (oldest is None or enqueued < oldest):
                oldest = enqueued
        return None if oldest is None else max(0.0, now - oldest)

    def __repr__(self) -> str:
        return f"<Demotion noisy={sorted(self._noisy)} window total={self._total:g}>"
