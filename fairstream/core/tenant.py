"""What a tenant is allowed: the ``TenantPolicy`` value and its validation.

A policy says how much of the egress a tenant deserves (weight), which priority class it
is scheduled in, how much backlog it may hold, how fast it may go on its own (rate cap),
how many of its calls may be in flight at once, whether it is paused, and what it may
spend per minute, hour, day or month (``budgets``, ``fairstream.core.budget``). Policies are
immutable values; the scheduler applies a new one to a tenant's existing backlog at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from fairstream.core.budget import Budget, check_budgets

__all__ = ["DEFAULT_POLICY", "TenantPolicies", "TenantPolicy"]


def _is_number(value: object) -> bool:
    # bool is an int subclass; True as a weight is a bug in the caller, not a weight of 1.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_positive_finite(name: str, value: object) -> None:
    if not _is_number(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    assert isinstance(value, int | float)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _check_optional_count(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1 (None means unlimited), got {value!r}")


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """How one tenant is scheduled. Every field has a default; ``TenantPolicy()`` is the default.

    - ``weight``: share of the egress relative to other backlogged tenants of the same
      priority class; the tenant's quantum is ``weight * base quantum`` cost units per round.
    - ``priority``: the priority class, 0 being the highest. A class is served only when no
      higher class has an eligible tenant.
    - ``max_backlog``: most records the tenant may have waiting; None is unlimited.
    - ``max_backlog_cost``: most total cost the tenant may have waiting; None is unlimited.
    - ``rate_cap``: most records per second the tenant may be sent at, whatever its share;
      None is uncapped. ``cap_burst`` is how many records it may send back to back after a
      quiet period (the token bucket's size, at least 1).
    - ``paused``: a paused tenant keeps its backlog and is not scheduled.
    - ``max_concurrency``: most of the tenant's requests in flight at once (released and
      not reported settled by a worker, ``fairstream.core.inflight``); None is unlimited.
    - ``budgets``: what the tenant may spend per window (``fairstream.core.budget``); a
      record goes only when each has room. Empty: no budget.
    """

    weight: float = 1
    priority: int = 0
    max_backlog: int | None = None
    max_backlog_cost: int | None = None
    rate_cap: float | None = None
    cap_burst: float = 1
    paused: bool = False
    max_concurrency: int | None = None
    budgets: tuple[Budget, ...] = ()

    def __post_init__(self) -> None:
        _check_positive_finite("weight", self.weight)
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ValueError(f"priority must be an integer, got {self.priority!r}")
        if self.priority < 0:
            raise ValueError(f"priority must be 0 (highest) or more, got {self.priority!r}")
        _check_optional_count("max_backlog", self.max_backlog)
        _check_optional_count("max_backlog_cost", self.max_backlog_cost)
        if self.rate_cap is not None:
            _check_positive_finite("rate_cap", self.rate_cap)
        _check_positive_finite("cap_burst", self.cap_burst)
        if self.cap_burst < 1:
            raise ValueError(
                f"cap_burst must be at least 1 record, or a capped tenant could never send; "
                f"got {self.cap_burst!r}"
            )
        _check_optional_count("max_concurrency", self.max_concurrency)
        if not isinstance(self.paused, bool):
            raise ValueError(f"paused must be true or false, got {self.paused!r}")
        if type(self.budgets) is not tuple or self.budgets:
            # A list given by a caller is kept as a tuple: the policy stays hashable.
            object.__setattr__(self, "budgets", check_budgets(self.budgets))

    def replace(self, **changes: Any) -> TenantPolicy:
        """Return a copy with ``changes`` applied (and validated)."""
        return replace(self, **changes)


DEFAULT_POLICY = TenantPolicy()
"""The policy of every tenant nobody configured: weight 1, class 0, no limits."""


class TenantPolicies:
    """Each tenant's own policy, else the default: what both fair cores answer
    (``FairScheduler``, ``GroupScheduler``), which set ``_policies`` and ``_default``."""

    _policies: dict[str, TenantPolicy]  # explicit policies only
    _default: TenantPolicy

    def policy(self, tenant: str) -> TenantPolicy:
        """The policy in force for ``tenant``: its own, else the default."""
        return self._policies.get(tenant, self._default)

    def own_policy(self, tenant: str) -> TenantPolicy | None:
        """``tenant``'s own policy, or None when it follows the default."""
        return self._policies.get(tenant)

    @property
    def default_policy(self) -> TenantPolicy:
        """The policy of every tenant without one of its own."""
        return self._default
