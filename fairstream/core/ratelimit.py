"""Rate limiting by token bucket: the per-tenant cap and the global egress limiter.

``TokenBucket`` is the pure algorithm: every method takes ``now`` so it never reads a clock.
``EgressLimiter`` binds one or two buckets (records per second, cost units per second) to
an injected ``Clock`` for the service loop, and can be retuned live when this instance's
share of the group's rate changes on rebalance.

The guarantee, tested as a property: over any window of ``w`` seconds a bucket lets at most
``rate * w + burst`` units through. The one exception is a single request larger than the
burst, which would otherwise wait forever: it is let through when the bucket is full and
leaves the bucket in debt, so the bound becomes ``rate * w + max(burst, largest request)``.
"""

from __future__ import annotations

import math
from typing import Final

from fairstream.core.clock import Clock

__all__ = ["EgressLimiter", "TokenBucket"]

# Floating-point slack, in tokens. A caller that waits exactly ``wait_time()`` seconds must
# then succeed; without slack, rounding can leave the bucket 1e-16 short and spin the caller.
_EPSILON: Final = 1e-9


def _check_rate(name: str, value: object) -> float:
    """``value`` as a float when it is a positive finite number (not a bool), else a
    ValueError that says why. Typed ``object``, as the parameters it checks: compiled
    (``fairstream.native``), a parameter typed ``float`` would take ``True`` as 1.0 and refuse
    a string with a TypeError of its own before this check could say what is wrong."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class TokenBucket:
    """A token bucket of ``burst`` tokens refilled at ``rate`` tokens per second.

    It starts full. Tokens are floats, so rates below one per second work.
    """

    __slots__ = ("_burst", "_rate", "_tokens", "_updated")

    def __init__(
        self, rate: object, burst: object, now: float, tokens: float | None = None
    ) -> None:
        """``rate`` (tokens/s) and ``burst`` (tokens): positive finite numbers, checked
        (``_check_rate``)."""
        self._rate = _check_rate("rate", rate)
        self._burst = _check_rate("burst", burst)
        self._tokens = self._burst if tokens is None else min(float(tokens), self._burst)
        self._updated = now

    @property
    def rate(self) -> float:
        """Tokens added per second."""
        return self._rate

    @property
    def burst(self) -> float:
        """Size of the bucket: the most tokens that can be taken back to back."""
        return self._burst

    def _refill(self, now: float) -> float:
        elapsed = now - self._updated
        if elapsed > 0:
            tokens = self._tokens + elapsed * self._rate
            self._tokens = tokens if tokens < self._burst else self._burst
            self._updated = now
        return self._tokens

    def available(self, now: float) -> float:
        """Tokens in the bucket at ``now`` (negative while in debt)."""
        return self._refill(now)

    def try_take(self, amount: float, now: float) -> bool:
        """Take ``amount`` tokens if the bucket has them at ``now``; say whether it did.

        A request larger than the bucket is granted when the bucket is full, leaving debt.

        Caller: the scheduler (per-tenant caps) and ``EgressLimiter``.
        Affects: the tokens in the bucket.
        """
        tokens = self._refill(now)
        if tokens + _EPSILON >= amount or (
            amount > self._burst and tokens + _EPSILON >= self._burst
        ):
            self._tokens = tokens - amount
            return True
        return False

    def wait_time(self, amount: float, now: float) -> float:
        """Seconds from ``now`` until ``try_take(amount)`` would succeed; 0.0 if it would now."""
        tokens = self._refill(now)
        needed = amount if amount <= self._burst else self._burst
        missing = needed - tokens
        if missing <= _EPSILON:
            return 0.0
        return missing / self._rate

    def reconfigure(self, rate: object, burst: object, now: float) -> None:
        """Change rate and burst from ``now`` on, keeping the tokens earned so far.

        Tokens up to ``now`` accrue at the old rate; a smaller burst trims the bucket.

        Caller: the scheduler on a policy change; ``EgressLimiter.set_rate``.
        Affects: rate, burst and tokens.
        """
        checked_rate, checked_burst = _check_rate("rate", rate), _check_rate("burst", burst)
        self._refill(now)
        self._rate = checked_rate
        self._burst = checked_burst
        self._tokens = min(self._tokens, self._burst)

    def __repr__(self) -> str:
        return (
            f"TokenBucket(rate={self._rate!r}, burst={self._burst!r}, "
            f"tokens={self._tokens!r}, updated={self._updated!r})"
        )


class EgressLimiter:
    """The global egress limit of one scheduler instance, in records/s and/or cost/s.

    Both limits apply at once when both are set; a limit left at None does not apply. A
    send is allowed only when every configured bucket has enough tokens, and then takes
    from all of them together.

    ``fairstream.core.emission.EmissionRule`` is its user: it waits for a record token
    before picking, then for the picked record's cost tokens. Waiting after the pick is what
    lets the cost limit see the cost. The rule passes ``now`` explicitly: its schedule's
    slot, which may be behind the clock (a late caller catching up), never going back.
    """

    __slots__ = ("_clock", "_cost", "_records")

    def __init__(
        self,
        clock: Clock,
        rate: float | None,
        burst: float = 1,
        cost_rate: float | None = None,
        cost_burst: float | None = None,
    ) -> None:
        """Limit to ``rate`` records/s (bursts of ``burst``) and ``cost_rate`` cost units/s.

        ``cost_burst`` defaults to one second's worth of ``cost_rate`` (at least 1).
        """
        self._clock = clock
        now = clock.now()
        self._records = self._make_bucket("rate", rate, burst, now)
        self._cost = self._make_bucket("cost_rate", cost_rate, cost_burst, now)

    @staticmethod
    def _make_bucket(
        name: str, rate: float | None, burst: float | None, now: float
    ) -> TokenBucket | None:
        if rate is None:
            return None
        checked = _check_rate(name, rate)
        return TokenBucket(checked, max(1.0, checked) if burst is None else burst, now)

    @property
    def rate(self) -> float | None:
        """Records per second, or None when records are not limited."""
        return None if self._records is None else self._records.rate

    @property
    def burst(self) -> float | None:
        """Records that may go back to back, or None when records are not limited."""
        return None if self._records is None else self._records.burst

    @property
    def cost_rate(self) -> float | None:
        """Cost units per second, or None when cost is not limited."""
        return None if self._cost is None else self._cost.rate

    @property
    def cost_burst(self) -> float | None:
        """Cost units that may go back to back, or None when cost is not limited."""
        return None if self._cost is None else self._cost.burst

    def try_acquire(self, records: int = 1, cost: int = 1, now: float | None = None) -> bool:
        """Take tokens for ``records`` records of total ``cost`` if all limits allow it at
        ``now`` (default: the clock's time).

        Caller: the emission rule (``fairstream.core.emission``), before a picked record goes.
        Affects: the tokens of every configured bucket (all or none).
        """
        if now is None:
            now = self._clock.now()
        records_bucket, cost_bucket = self._records, self._cost
        if records_bucket is not None and records_bucket.wait_time(records, now) > 0:
            return False
        if cost_bucket is not None and cost_bucket.wait_time(cost, now) > 0:
            return False
        if records_bucket is not None:
            records_bucket.try_take(records, now)
        if cost_bucket is not None:
            cost_bucket.try_take(cost, now)
        return True

    def wait_time(self, records: int = 1, cost: int = 1, now: float | None = None) -> float:
        """Seconds from ``now`` (default: the clock's time) until ``try_acquire(records,
        cost)`` would succeed; 0.0 if it would now."""
        if now is None:
            now = self._clock.now()
        wait = 0.0
        if self._records is not None:
            wait = self._records.wait_time(records, now)
        if self._cost is not None:
            wait = max(wait, self._cost.wait_time(cost, now))
        return wait

    def set_rate(
        self,
        rate: float | None,
        burst: float | None = None,
        cost_rate: float | None = None,
        cost_burst: float | None = None,
        now: float | None = None,
    ) -> None:
        """Retune the limits live, e.g. when this instance's share of the group rate changes.

        Tokens earned so far are kept (trimmed to a smaller burst); None for ``rate`` or
        ``cost_rate`` lifts that limit; None for a burst keeps the current one (or, for a
        limit that did not exist, uses the constructor's default).

        ``now`` (default: the clock's time) is when the new limits start.

        Caller: the emission rule's ``set_share`` (on rebalance, a new group share or
        adaptive rate). Affects: the buckets' rates, bursts and tokens.
        """
        if now is None:
            now = self._clock.now()
        self._records = self._retune(self._records, "rate", rate, burst, default_burst=1.0, now=now)
        self._cost = self._retune(
            self._cost, "cost_rate", cost_rate, cost_burst, default_burst=None, now=now
        )

    def _retune(
        self,
        bucket: TokenBucket | None,
        name: str,
        rate: float | None,
        burst: float | None,
        *,
        default_burst: float | None,
        now: float,
    ) -> TokenBucket | None:
        if rate is None:
            return None
        if bucket is None:
            return self._make_bucket(name, rate, burst if burst is not None else default_burst, now)
        _check_rate(name, rate)
        bucket.reconfigure(rate, bucket.burst if burst is None else burst, now)
        return bucket

    def __repr__(self) -> str:
        return (
            f"EgressLimiter(rate={self.rate!r}, burst={self.burst!r}, "
            f"cost_rate={self.cost_rate!r}, cost_burst={self.cost_burst!r})"
        )
