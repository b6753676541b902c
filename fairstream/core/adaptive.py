"""Adapting egress to what the paid API says: an AIMD rate and per-tenant pauses.

``AdaptiveRate`` turns the workers' api-scope feedback into the egress rate, between a
``floor`` and a ``ceiling`` (``--min-rate`` and ``--rate``):

- **Multiplicative decrease** on a rate-limited outcome, at most once per ``interval``
  (one overload answers with a batch of 429s: they count once): to ``rate * decrease``,
  and no higher than ``headroom`` times the API's measured throughput (the ok calls
  reported over the last ``window`` seconds), so a rate far above the API's capacity comes
  down to it in one step, not in many. 429s that go on right after a decrease mean
  requests stuck retrying keep the API saturated: each further decrease in a row cuts
  twice as deep, down to half the measured throughput, so the backlog drains. Between two
  decreases, a 429 still brings the rate down to what the measured throughput says if
  that is lower: a first cut made on a few calls' evidence is refined within a fraction
  of a second, not after ``interval``.
- **Hold**: a reported Retry-After stops all egress until it has passed (``held_for``);
  one report holds for at most ``max_hold``.
- **Additive increase** while the feedback stays clean (no rate-limited outcome and no
  decrease for ``interval`` seconds, no hold) and the rate is in use (the calls reported
  over the last ``window`` reach ``utilization`` of it; a rate nobody uses is not raised on
  no evidence). Up to the *knee*, ``headroom`` times the throughput measured at the last
  decrease, the rate climbs fast (back within about two seconds); above it, it probes for
  more: slowly at first (``probe`` of the knee per second), doubling its speed every
  ``doubling`` seconds up to ``increase``, as TCP CUBIC probes around the last loss. The
  API's limit is found again without hitting it hard, and a limit that went up is
  reached within seconds.
- **No feedback, no change**: the rate starts at the ceiling and moves only on feedback.

``TenantPauses`` keeps tenant-scope limits: a tenant whose own upstream quota said
Retry-After is paused until then, and ``expire`` says whose pause has ended.

Both are pure: time comes from an injected ``Clock`` or as ``now``, in that clock's
seconds. A caller translating a feedback record's wall-clock times (``reported_at``,
``scheduled_at``) puts them on this clock first.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Final

from fairstream.core.clock import Clock

__all__ = ["AdaptiveRate", "TenantPauses"]

_BUCKETS: Final = 10  # sub-buckets of the sliding window
# Below this many ok + rate-limited calls in the window, the API's share is too noisy to
# trust: the decrease is the plain multiplicative one.
_MIN_SAMPLES: Final = 10


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _fraction(name: str, value: float, *, inclusive_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    low_ok = value >= 0 if inclusive_low else value > 0
    if not (low_ok and value <= 1):
        bounds = "[0, 1]" if inclusive_low else "(0, 1]"
        raise ValueError(f"{name} must be in {bounds}, got {value!r}")
    return float(value)


class _Window:
    """Counts of ok, rate-limited and other calls over the last ``span`` seconds."""

    __slots__ = ("_buckets", "_start", "_width", "span")

    def __init__(self, span: float) -> None:
        self.span = span
        self._width = span / _BUCKETS
        self._start: float | None = None  # the first count: a young window is shorter
        # (bucket index, ok, limited, other), oldest first
        self._buckets: deque[list[float]] = deque()

    def _bucket(self, now: float) -> list[float]:
        index = math.floor(now / self._width)
        buckets = self._buckets
        if not buckets or buckets[-1][0] < index:
            buckets.append([index, 0, 0, 0])
        self._prune(now)
        return buckets[-1]

    def _prune(self, now: float) -> None:
        oldest = math.floor(now / self._width) - _BUCKETS + 1
        buckets = self._buckets
        while buckets and buckets[0][0] < oldest:
            buckets.popleft()

    def add(self, now: float, ok: int = 0, limited: int = 0, other: int = 0) -> None:
        if self._start is None:
            self._start = now
        bucket = self._bucket(now)
        bucket[1] += ok
        bucket[2] += limited
        bucket[3] += other

    def counts(self, now: float) -> tuple[float, float, float]:
        """(ok, limited, other) over the window ending at ``now``."""
        self._prune(now)
        ok = limited = other = 0.0
        for bucket in self._buckets:
            ok += bucket[1]
            limited += bucket[2]
            other += bucket[3]
        return ok, limited, other

    def seconds(self, now: float) -> float:
        """How long the window ending at ``now`` is (shorter while it is young)."""
        # The buckets kept cover from the start of the oldest one to now.
        covered = now - (math.floor(now / self._width) - _BUCKETS + 1) * self._width
        start = now if self._start is None else self._start
        return max(self._width, min(covered, now - start))


class AdaptiveRate:
    """The egress rate of the whole group, adapted to the API's rate-limited feedback.

    Not thread-safe: one owner (the scheduler's feedback reader and emitter share it under
    the caller's lock, or one thread does both).
    """

    __slots__ = (
        "_ceiling",
        "_clock",
        "_decrease",
        "_doubling",
        "_floor",
        "_headroom",
        "_held",
        "_hold_until",
        "_increase",
        "_interval",
        "_knee",
        "_last_decrease",
        "_last_limited",
        "_max_hold",
        "_probe",
        "_probed",
        "_rate",
        "_streak",
        "_updated",
        "_utilization",
        "_window",
        "decreases",
        "rate_limited",
    )

    def __init__(
        self,
        clock: Clock,
        ceiling: float,
        floor: float | None = None,
        *,
        decrease: float = 0.9,
        increase: float | None = None,
        probe: float = 1 / 300,
        doubling: float = 3.0,
        interval: float = 1.0,
        window: float | None = None,
        headroom: float = 0.95,
        utilization: float = 0.5,
        max_hold: float = 300.0,
    ) -> None:
        """``ceiling``: the configured ``--rate``; ``floor``: ``--min-rate``, default 1% of it.

        ``decrease``: factor of a multiplicative decrease. ``increase``: records/s added per
        clean second below the knee, and the fastest probe (default: ceiling / 50, so the
        whole range takes under a minute). ``probe``: the speed the probe above the knee
        starts with, as a fraction of the knee per second (default 1/300: 1 record/s per
        second at 300/s), doubling every ``doubling`` seconds up to ``increase``.
        ``interval``: the shortest time between two decreases, and the clean time before
        increasing. ``window``: seconds of feedback the API's throughput and the
        utilization are measured over (default ``2 * interval``). ``headroom``: the
        fraction of the measured throughput a decrease aims at. ``utilization``: the
        fraction of the rate the reported calls must reach for an increase (0: increase
        whether or not the rate is used). ``max_hold``: the longest hold one Retry-After
        can ask for.
        """
        self._clock = clock
        self._ceiling = _positive("ceiling", ceiling)
        self._floor = self._ceiling / 100 if floor is None else _positive("floor", floor)
        if self._floor > self._ceiling:
            raise ValueError(f"floor {floor!r} is above the ceiling {ceiling!r}")
        self._decrease = _fraction("decrease", decrease)
        if self._decrease == 1:
            raise ValueError("decrease must be below 1: a decrease must decrease")
        self._increase = self._ceiling / 50 if increase is None else _positive("increase", increase)
        self._probe = _fraction("probe", probe)
        self._doubling = _positive("doubling", doubling)
        self._interval = _positive("interval", interval)
        self._headroom = _fraction("headroom", headroom)
        self._utilization = _fraction("utilization", utilization, inclusive_low=True)
        self._max_hold = _positive("max_hold", max_hold)
        now = clock.now()
        self._window = _Window(
            2 * self._interval if window is None else _positive("window", window)
        )
        self._rate = self._ceiling
        self._knee = self._ceiling  # below it the rate climbs fast; above it, it probes
        self._probed = 0.0  # seconds spent probing above the knee since the last decrease
        self._updated = now
        self._last_decrease = -math.inf
        self._last_limited = -math.inf
        self._streak = 0  # decreases in a row, each within 2 intervals of the one before
        self._hold_until = -math.inf
        self._held: deque[tuple[float, float]] = deque()  # hold spans within the window
        self.decreases = 0  # multiplicative decreases made
        self.rate_limited = 0  # api-scope rate-limited outcomes reported

    @property
    def ceiling(self) -> float:
        return self._ceiling

    @property
    def floor(self) -> float:
        return self._floor

    def _now(self, now: float | None) -> float:
        return self._clock.now() if now is None else now

    def _advance(self, now: float) -> None:
        """Add the increase earned since the last update, from when it became clean."""
        if now <= self._updated:
            return
        clean_from = max(
            self._updated,
            self._last_decrease + self._interval,
            self._last_limited + self._interval,
            self._hold_until,
        )
        if now > clean_from and self._rate < self._ceiling and self._in_use(now):
            self._climb(now - clean_from)
        self._updated = now

    def _climb(self, seconds: float) -> None:
        """``seconds`` of increase: linear up to the knee, then a probe that starts slowly
        and doubles its speed every ``doubling`` s (up to the linear speed)."""
        fast = self._increase
        rate = self._rate
        if rate < self._knee:
            # Back to a rate the API took lately within about two seconds.
            speed = max(fast, self._knee / 2)
            step = min(seconds, (self._knee - rate) / speed)
            rate += speed * step
            seconds -= step
        if seconds > 0:
            start, doubling = min(fast, self._probe * self._knee), self._doubling
            # Probe seconds after which the speed reaches the linear one.
            capped = doubling * math.log2(fast / start)
            p0 = self._probed
            p1 = p0 + seconds
            if p0 < capped:
                until = min(p1, capped)
                rate += (
                    start
                    * doubling
                    / math.log(2)
                    * (2 ** (until / doubling) - 2 ** (p0 / doubling))
                )
                p0 = until
            rate += fast * (p1 - p0)
            self._probed = p1
        self._rate = min(self._ceiling, rate)

    def _in_use(self, now: float) -> bool:
        if self._utilization == 0:
            return True
        ok, _, other = self._window.counts(now)
        # Calls the API took (or failed for reasons of their own), per second egress was
        # sending. Not the rate-limited ones: a refused request is retried by its worker
        # without the scheduler, so its 429s multiply with the retries, not with the rate.
        calls_per_second = (ok + other) / self._sending_seconds(now)
        return calls_per_second >= self._utilization * self._rate

    def _sending_seconds(self, now: float) -> float:
        """Seconds of the window ending at ``now`` during which egress was not held."""
        span = self._window.seconds(now)
        start = now - span
        held = self._held
        while held and held[0][1] <= start:
            held.popleft()
        holding = sum(min(end, now) - max(begin, start) for begin, end in held if begin < now)
        return max(span - holding, span / _BUCKETS)

    def rate(self, now: float | None = None) -> float:
        """The egress rate now, in records/s (what the token bucket should be set to).

        Caller: the scheduler, before pacing egress. Affects: the additive increase due.
        """
        now = self._now(now)
        self._advance(now)
        return self._rate

    def held_for(self, now: float | None = None) -> float:
        """Seconds until egress may resume after a Retry-After; 0.0 when it may now."""
        return max(0.0, self._hold_until - self._now(now))

    def on_ok(self, count: int = 1, now: float | None = None) -> None:
        """``count`` calls went through. Caller: the feedback reader. Affects: the window."""
        now = self._now(now)
        self._advance(now)
        self._window.add(now, ok=count)

    def on_other(self, count: int = 1, now: float | None = None) -> None:
        """``count`` calls that used the rate and say nothing about the API's capacity (a
        failed call, a tenant-scope limit). Caller: the feedback reader."""
        now = self._now(now)
        self._advance(now)
        self._window.add(now, other=count)

    def on_rate_limited(self, retry_after: float | None = None, now: float | None = None) -> bool:
        """One api-scope rate-limited outcome; True if it lowered the rate.

        ``retry_after``: seconds from ``now`` the API asked for, if any (the caller
        subtracts the time the feedback took to arrive).

        Caller: the feedback reader. Affects: the rate, the hold, the window.
        """
        now = self._now(now)
        self._advance(now)
        self._window.add(now, limited=1)
        self.rate_limited += 1
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            self._hold(now, now + min(retry_after, self._max_hold))
        self._last_limited = now
        measured = self._measured_knee(now)
        since = now - self._last_decrease
        if since < self._interval:
            # The same overload: no new cut, but a lower measurement refines the last one.
            if measured is None or measured >= self._rate:
                return False
            self._rate = self._knee = max(self._floor, measured)
            return True
        # Still rate-limited right after a decrease: the overload outlasted it (requests
        # stuck retrying keep the API saturated until a spare capacity drains them), so
        # each further decrease in a row cuts twice as deep.
        self._streak = self._streak + 1 if since < 2 * self._interval else 1
        target = self._rate * self._decrease ** (2 ** min(self._streak - 1, 6))
        knee = target
        if measured is not None:
            # Half the measured throughput drains a backlog of retries at half the API's
            # pace: deeper cuts would only cost.
            knee = measured
            target = min(max(target, knee / 2), knee)
        # A decrease decreases: aiming at the measurement never raises the rate.
        target = min(target, self._rate)
        self._rate = max(self._floor, min(self._ceiling, target))
        self._knee = max(self._rate, min(self._ceiling, knee))
        self._probed = 0.0
        self._last_decrease = now
        self.decreases += 1
        return True

    def _measured_knee(self, now: float) -> float | None:
        """``headroom`` times what the API let through lately, when there is enough to
        tell: the rate to come back to quickly after a cut. Calls that went through, not
        the share of 429s: retried requests multiply the rate-limited calls, not the load.
        """
        ok, limited, _ = self._window.counts(now)
        if ok + limited < _MIN_SAMPLES:
            return None
        # Over the whole window, holds included: while egress is held the workers go on
        # calling the API with what they were sent before (and with retries), so the calls
        # that went through measure the API itself, not the seconds egress was sending.
        return self._headroom * ok / self._window.seconds(now)

    def _hold(self, now: float, until: float) -> None:
        if until <= self._hold_until:
            return
        held = self._held
        if held and held[-1][1] >= now:  # overlaps the last span: extend it
            held[-1] = (held[-1][0], until)
        else:
            held.append((now, until))
        self._hold_until = until

    def __repr__(self) -> str:
        return (
            f"AdaptiveRate(rate={self._rate!r}, floor={self._floor!r}, "
            f"ceiling={self._ceiling!r}, decreases={self.decreases!r})"
        )


class TenantPauses:
    """Tenants paused by their own upstream quota (tenant-scope rate limits), until when.

    ``pause`` extends a pause, never shortens it. ``expire(now)`` returns the tenants whose
    pause has ended (each once), for the caller to resume; a pause asks for at most
    ``max_pause`` seconds. Memory is O(paused tenants) plus superseded heap entries, which
    ``expire`` drops.
    """

    __slots__ = ("_heap", "_max_pause", "_until")

    def __init__(self, max_pause: float = 300.0) -> None:
        self._max_pause = _positive("max_pause", max_pause)
        self._until: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def pause(self, tenant: str, retry_after: float, now: float) -> bool:
        """Pause ``tenant`` for ``retry_after`` s from ``now``; True if that pauses it
        longer than before (a new pause or an extension).

        Caller: the feedback reader, on a tenant-scope rate-limited outcome.
        Affects: the tenant's pause.
        """
        if isinstance(retry_after, bool) or not isinstance(retry_after, int | float):
            raise ValueError(f"retry_after must be seconds, got {retry_after!r}")
        if not math.isfinite(retry_after) or retry_after <= 0:
            return False
        until = now + min(float(retry_after), self._max_pause)
        if until <= self._until.get(tenant, -math.inf):
            return False
        self._until[tenant] = until
        heapq.heappush(self._heap, (until, tenant))
        return True

    def paused_until(self, tenant: str) -> float | None:
        """When ``tenant``'s pause ends, or None when it is not paused (or not expired yet
        by ``expire``)."""
        return self._until.get(tenant)

    def is_paused(self, tenant: str, now: float) -> bool:
        until = self._until.get(tenant)
        return until is not None and now < until

    def expire(self, now: float) -> list[str]:
        """The tenants whose pause ended by ``now``, in the order they ended; forgotten.

        Caller: the scheduler loop, to resume them. Affects: the pauses.
        """
        heap, until = self._heap, self._until
        ended: list[str] = []
        while heap and heap[0][0] <= now:
            at, tenant = heapq.heappop(heap)
            if until.get(tenant) == at:  # not superseded by a later extension
                del until[tenant]
                ended.append(tenant)
        return ended

    def next_expiry(self) -> float | None:
        """When the earliest pause ends, or None when no tenant is paused."""
        heap, until = self._heap, self._until
        while heap and until.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded
        return heap[0][0] if heap else None

    def __len__(self) -> int:
        return len(self._until)

    def __contains__(self, tenant: object) -> bool:
        return tenant in self._until
