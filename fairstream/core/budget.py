"""Budgets over time: how much a tenant (or a tenant group) may spend per minute, hour, day
or month, and the ledger that charges records against them.

A paid API bills by the day and the month, and a reseller sells quotas ("1,000,000 tokens a
day", "50 requests a minute"). A ``Budget`` is one such quota: a ``limit`` of cost units
(or records) per ``window``. A window is calendar-aligned in a time zone (the day starts at
local midnight, the month on the 1st) or rolling (the last 24 hours at any moment). A
policy may hold several budgets; a record goes only when every one of them has room.

How a record is charged (``BudgetLedger``):

- **Reserve at emission.** The record's declared cost is charged when it is picked, before
  it is sent (``reserve``). A record whose cost would take a budget past its limit is
  refused: the caller keeps it waiting until the window resets, or dead-letters it
  (``on_exhausted``). Charging before the call is what bounds the spend: a budget charged
  after the call lets every request in flight through (a litellm budget of 100 tokens per
  minute let 663 through under concurrency).
- **Settle after the call.** The worker's measured cost corrects the charge (``settle``,
  measured minus declared). A correction up can take a window past its limit, by at most
  what the requests in flight were under-declared; the excess is carried into the next
  window, which pays it back. A refund for a record charged in a window that has closed is
  not given to the new one (it would let the new window spend more than its limit).

Spend is kept per budget *key* (unit, window, rolling, zone), not per limit: raising a
day's limit at noon keeps the morning's spend.

A rolling window keeps its spend in 60 buckets of a sixtieth of the window each; spend
leaves the window a whole bucket at a time, when the bucket's end is a window old (it is
counted a little longer, never shorter). A rolling month is 30 days.

Pure: no I/O beyond reading time-zone rules; time is given by the caller as epoch
milliseconds (wall-clock time: windows are calendar time). Not thread-safe: one owner.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Final, Literal, NamedTuple, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "BUDGET_EXHAUSTED",
    "Budget",
    "BudgetKey",
    "BudgetLedger",
    "BudgetState",
    "Charges",
    "ClaimBook",
    "ClaimKey",
    "Entry",
    "Refusal",
    "Scope",
    "format_budget",
    "group_scope",
    "parse_budget",
    "plan_claim",
    "scope_name",
    "window_bounds",
]

Window = Literal["minute", "hour", "day", "month"]
Unit = Literal["cost", "records"]
OnExhausted = Literal["wait", "dead-letter"]

WINDOWS: Final[tuple[Window, ...]] = ("minute", "hour", "day", "month")
UNITS: Final[tuple[Unit, ...]] = ("cost", "records")
ON_EXHAUSTED: Final[tuple[OnExhausted, ...]] = ("wait", "dead-letter")
BUDGET_EXHAUSTED: Final = "budget-exhausted"  # the dead-letter reason

_MINUTE_MS: Final = 60_000
ROLLING_MS: Final[dict[str, int]] = {
    "minute": _MINUTE_MS,
    "hour": 60 * _MINUTE_MS,
    "day": 24 * 60 * _MINUTE_MS,
    "month": 30 * 24 * 60 * _MINUTE_MS,
}
BUCKETS: Final = 60  # a rolling window's buckets
MAX_BUDGETS: Final = 8  # budgets one policy may hold


@cache
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


class BudgetKey(NamedTuple):
    """What a spend counter is kept for: a budget without its limit and its choice."""

    unit: Unit
    window: Window
    rolling: bool
    time_zone: str


@dataclass(frozen=True, slots=True)
class Budget:
    """A limit of ``limit`` ``unit``s (cost units, or records) per ``window``.

    - ``window``: ``minute``, ``hour``, ``day`` or ``month``.
    - ``rolling``: False (the default) aligns the window on the calendar in ``time_zone``
      (an IANA zone name; UTC by default); True counts the last minute, hour, day or 30
      days at every moment (the zone is then unused).
    - ``on_exhausted``: what becomes of a record that would take the budget past its limit:
      ``wait`` (it stays in the backlog, the tenant out of the pick, until the window has
      room) or ``dead-letter`` (it goes to the dead-letter topic with reason
      ``budget-exhausted``).
    """

    limit: int
    window: Window = "day"
    unit: Unit = "cost"
    rolling: bool = False
    time_zone: str = "UTC"
    on_exhausted: OnExhausted = "wait"
    # The spend counter it reads, made once: asked for at every record's reservation.
    key: BudgetKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise ValueError(f"a budget's limit must be an integer >= 1, got {self.limit!r}")
        if self.window not in WINDOWS:
            raise ValueError(f"a budget's window must be one of {WINDOWS}, got {self.window!r}")
        if self.unit not in UNITS:
            raise ValueError(f"a budget's unit must be one of {UNITS}, got {self.unit!r}")
        if not isinstance(self.rolling, bool):
            raise ValueError(f"rolling must be true or false, got {self.rolling!r}")
        if self.on_exhausted not in ON_EXHAUSTED:
            raise ValueError(
                f"on_exhausted must be one of {ON_EXHAUSTED}, got {self.on_exhausted!r}"
            )
        if not isinstance(self.time_zone, str) or not self.time_zone:
            raise ValueError(f"time_zone must be an IANA zone name, got {self.time_zone!r}")
        try:
            _zone(self.time_zone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {self.time_zone!r}: {exc}") from None
        # The spend counter this budget reads: unit, window, rolling, zone (none if rolling).
        zone = "" if self.rolling else self.time_zone
        object.__setattr__(self, "key", BudgetKey(self.unit, self.window, self.rolling, zone))

    def charge_of(self, cost: int) -> int:
        """What one record of ``cost`` charges this budget."""
        return cost if self.unit == "cost" else 1

    def __str__(self) -> str:
        return format_budget(self)


def check_budgets(budgets: object) -> tuple[Budget, ...]:
    """``budgets`` as a tuple of ``Budget``, at most ``MAX_BUDGETS``, no two with one key."""
    if not isinstance(budgets, tuple | list):
        raise ValueError(f"budgets must be a tuple of Budget, got {budgets!r}")
    seen: set[BudgetKey] = set()
    for budget in budgets:
        if not isinstance(budget, Budget):
            raise ValueError(f"budgets must be a tuple of Budget, got {budget!r}")
        if budget.key in seen:
            raise ValueError(f"two budgets count the same spend: {format_budget(budget)}")
        seen.add(budget.key)
    if len(budgets) > MAX_BUDGETS:
        raise ValueError(f"a policy holds at most {MAX_BUDGETS} budgets, got {len(budgets)}")
    return tuple(budgets)


_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(rolling[- ])?(minute|hour|day|month)\s*((?:,[^,]+)*)$")


def parse_budget(text: str) -> Budget:
    """A budget from its text form, ``LIMIT/WINDOW[,OPTION...]``:

    - ``WINDOW``: ``minute``, ``hour``, ``day`` or ``month``; ``rolling-day`` (and so on)
      for a rolling window;
    - options: ``records`` (count records, not cost), ``cost`` (the default),
      ``dead-letter`` or ``wait`` (the default), ``tz=ZONE`` (an IANA zone; UTC by default).

    ``1000/day``, ``50/minute,records``, ``1000000/month,tz=Europe/Paris,dead-letter``,
    ``5000/rolling-hour``. ValueError, saying what is wrong, for anything else.
    """
    match = _TEXT.match(text)
    if match is None:
        raise ValueError(
            f"a budget is LIMIT/WINDOW[,OPTION...] (for example 1000/day, 50/minute,records, "
            f"1000000/month,tz=Europe/Paris,dead-letter, 5000/rolling-hour), got {text!r}"
        )
    limit, rolling, window, options = match.groups()
    unit: str = "cost"
    on_exhausted: str = "wait"
    zone = "UTC"
    for option in (o.strip() for o in options.split(",")[1:]):
        if option in UNITS:
            unit = option
        elif option in ON_EXHAUSTED:
            on_exhausted = option
        elif option.startswith("tz="):
            zone = option.removeprefix("tz=")
        else:
            raise ValueError(
                f"unknown budget option {option!r} in {text!r}: records, cost, wait, "
                f"dead-letter or tz=ZONE"
            )
    return Budget(
        int(limit),
        cast(Window, window),
        cast(Unit, unit),
        rolling is not None,
        zone,
        cast(OnExhausted, on_exhausted),
    )


def format_budget(budget: Budget) -> str:
    """The text form ``parse_budget`` reads (defaults left out)."""
    text = f"{budget.limit}/{'rolling-' if budget.rolling else ''}{budget.window}"
    if budget.unit != "cost":
        text += f",{budget.unit}"
    if budget.on_exhausted != "wait":
        text += f",{budget.on_exhausted}"
    if not budget.rolling and budget.time_zone != "UTC":
        text += f",tz={budget.time_zone}"
    return text


# The last calendar window found per key (a memo of a pure function, safe from any thread):
# most calls fall in it, and the counters of every
# scope then share its two ints (epoch ms take 32 bytes each) instead of holding their own.
_LAST_WINDOW: dict[BudgetKey, tuple[int, int]] = {}


def window_bounds(key: BudgetKey, now_ms: int) -> tuple[int, int]:
    """The calendar window of ``key`` that holds ``now_ms``: its start and end in epoch ms
    (end excluded). Local time, so a day in a zone with daylight saving is 23 or 25 hours
    on the days the clocks change. A rolling key's window is ``(now - length, now]``."""
    if key.rolling:
        return now_ms - ROLLING_MS[key.window], now_ms
    last = _LAST_WINDOW.get(key)
    if last is not None and last[0] <= now_ms < last[1]:
        return last
    bounds = _calendar_window(key, now_ms)
    if len(_LAST_WINDOW) > 1024:  # keys of budgets long gone
        _LAST_WINDOW.clear()
    _LAST_WINDOW[key] = bounds
    return bounds


def _current_start(key: BudgetKey, now_ms: int) -> int:
    """The start of ``key``'s current window, as claims name it: 0 for a rolling window
    (every instant starts one)."""
    return 0 if key.rolling else window_bounds(key, now_ms)[0]


def _calendar_window(key: BudgetKey, now_ms: int) -> tuple[int, int]:
    zone = _zone(key.time_zone)
    local = dt.datetime.fromtimestamp(now_ms / 1000, zone)
    if key.window == "minute":
        start = local.replace(second=0, microsecond=0)
        end = start + dt.timedelta(minutes=1)
    elif key.window == "hour":
        start = local.replace(minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(hours=1)
    elif key.window == "day":
        start = local.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + dt.timedelta(days=1)  # wall-clock arithmetic: the next local midnight
    else:
        start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    if key.window in ("minute", "hour"):
        # A minute or an hour is an interval of absolute time (an hour that the clocks
        # repeat is two hours, not one of two): start from the instant, not the wall clock.
        start_ms = math.floor(start.timestamp() * 1000)
        length = _MINUTE_MS if key.window == "minute" else 60 * _MINUTE_MS
        return start_ms, start_ms + length
    return round(start.timestamp() * 1000), round(end.replace(fold=0).timestamp() * 1000)


# Whose spend: a tenant id, or ("group", a tenant-group id). A tuple, so that no tenant id
# can name a group's counter.
Scope = str | tuple[str, str]
# The budgets a record is charged to: each scope it counts for, with that scope's budgets.
Charges = Sequence[tuple[Scope, tuple[Budget, ...]]]


def group_scope(group: str) -> tuple[str, str]:
    """The scope of a tenant group's budgets."""
    return ("group", group)


def scope_name(scope: Scope) -> str:
    """A scope as the console and the metrics show it: the tenant id, or ``group:`` and
    the group id."""
    return scope if isinstance(scope, str) else f"{scope[0]}:{scope[1]}"


class Refusal(NamedTuple):
    """A record that does not fit: the budget and whose (``scope``) it is, what it has left,
    and when (epoch ms) the record of ``cost`` would fit, as far as time alone frees room
    (a refund may free it earlier)."""

    scope: Scope
    budget: Budget
    remaining: int
    fits_at_ms: int


class BudgetState(NamedTuple):
    """One budget as the console, ``/tenants`` and the metrics show it."""

    scope: Scope
    budget: Budget
    spent: int
    remaining: int
    resets_at_ms: int  # the current window's end (rolling: when the oldest spend leaves)
    resets: int  # windows closed so far


@dataclass(slots=True)
class _Counter:
    """The spend of one scope under one budget key from one ingest partition's records."""

    start_ms: int = 0  # the current window's bounds (calendar windows)
    end_ms: int = 0
    spent: int = 0
    resets: int = 0
    # A rolling window's spend: [start_ms, spent] per bucket; None for a calendar window (a
    # deque costs about 600 bytes, and a tenant under a default budget has a counter).
    buckets: deque[list[int]] | None = None

    def roll(self, key: BudgetKey, limit: int, now_ms: int) -> None:
        """A rolling window's buckets older than the window let go (calendar windows roll
        over all partitions together: ``_Spend.roll``)."""
        oldest = now_ms - ROLLING_MS[key.window]
        width = ROLLING_MS[key.window] // BUCKETS
        buckets = self.buckets
        while buckets and buckets[0][0] + width <= oldest:
            self.spent -= buckets.popleft()[1]
            self.resets += 1

    def add(self, key: BudgetKey, amount: int, now_ms: int) -> None:
        self.spent += amount
        if key.rolling:
            width = ROLLING_MS[key.window] // BUCKETS
            start = now_ms - now_ms % width
            buckets = self.buckets
            if buckets is None:
                buckets = self.buckets = deque()
            if buckets and buckets[-1][0] >= start:
                buckets[-1][1] += amount
            else:
                buckets.append([start, amount])


def _windows_between(key: BudgetKey, end_ms: int, now_ms: int) -> int:
    """How many calendar windows of ``key`` ended from the one ending at ``end_ms`` up to
    ``now_ms`` (at least 1; at most 100: an overrun larger than that is forgiven)."""
    windows = 1
    while windows < 100:
        end_ms = window_bounds(key, end_ms)[1]
        if end_ms > now_ms:
            break
        windows += 1
    return windows


@dataclass(slots=True)
class _Spend:
    """The spend of one scope under one budget key: a counter per ingest partition whose
    records were charged (a tenant's all come from one; a tenant group's members may come
    from several), so that each partition's part is committed with its progress and moves
    with it on a rebalance.

    A tenant group's members may sit on several instances. Each instance spends up to
    its *claim* on the group's budget (``claim``, ``BudgetLedger.coordinate``): claims are
    raised and given back through the instances' exchange, where one log orders them, so
    that the valid claims never add up to more than the limit (``ClaimBook``). Without a
    claim for the current window, an instance may spend its share of the limit by the
    ingest partitions it owns (``BudgetLedger.share``): those shares add up to at most the
    limit too."""

    # The counters per partition: the first inline (a tenant's only one: a dict per tenant
    # under a default budget cost 200 bytes more), the others in ``more``.
    first: int = -1
    one: _Counter | None = None
    more: dict[int, _Counter] | None = None
    claim: int | None = None  # this instance's claim in force on a group's budget
    claim_start: int = 0  # the window it is for (calendar windows; 0: rolling)

    def get(self, partition: int) -> _Counter | None:
        if partition == self.first:
            return self.one
        more = self.more
        return None if more is None else more.get(partition)

    def counter(self, partition: int) -> _Counter:
        """``partition``'s counter, made if it has none."""
        counter = self.get(partition)
        if counter is None:
            counter = _Counter()
            if self.one is None:
                self.first, self.one = partition, counter
            else:
                if self.more is None:
                    self.more = {}
                self.more[partition] = counter
        return counter

    def pop(self, partition: int) -> None:
        if partition == self.first:
            self.first, self.one = -1, None
            if self.more:  # another partition's counter takes the inline place
                self.first = next(iter(self.more))
                self.one = self.more.pop(self.first)
        elif self.more is not None:
            self.more.pop(partition, None)

    def items(self) -> list[tuple[int, _Counter]]:
        out = [] if self.one is None else [(self.first, self.one)]
        if self.more:
            out.extend(self.more.items())
        return out

    def counters(self) -> list[_Counter]:
        out = [] if self.one is None else [self.one]
        if self.more:
            out.extend(self.more.values())
        return out

    @property
    def empty(self) -> bool:
        return self.one is None

    def roll(self, key: BudgetKey, limit: int, now_ms: int) -> None:
        """Bring every part to ``now_ms``. A calendar window that ended is replaced by the
        current one, carrying what all parts together spent past the limit (per window that
        passed), shared among the parts as they spent it."""
        one = self.one
        if one is not None and self.more is None and one.start_ms <= now_ms < one.end_ms:
            return  # the common case: one counter, in its window
        counters = self.counters()
        if key.rolling:
            for counter in counters:
                counter.roll(key, limit, now_ms)
            return
        stale = [c for c in counters if c.end_ms <= now_ms or now_ms < c.start_ms]
        if not stale:
            return
        start, end = window_bounds(key, now_ms)
        # (A wall clock set back into an earlier window keeps what was spent.)
        ended = [c for c in stale if c.end_ms and c.end_ms <= now_ms]
        if ended:
            total = sum(c.spent for c in ended)
            debt = max(0, total - limit * _windows_between(key, ended[0].end_ms, now_ms))
            left = debt
            for counter in ended:
                share = debt * counter.spent // total if total > 0 else 0
                counter.spent, left = share, left - share
                counter.resets += 1
            if left:
                max(ended, key=lambda c: c.spent).spent += left
        for counter in stale:
            counter.start_ms, counter.end_ms = start, end

    @property
    def local(self) -> int:
        """What this instance's partitions spent."""
        one, more = self.one, self.more
        local = 0 if one is None else one.spent
        return local + sum(c.spent for c in more.values()) if more else local

    def room(self, scope: Scope, key: BudgetKey, limit: int, share: float, now_ms: int) -> int:
        """What this instance may still charge ``scope`` in the current window."""
        local = self.local
        if isinstance(scope, str):  # a tenant's records all come from one partition
            return limit - local
        claim = self.claim
        if claim is not None:
            start = _current_start(key, now_ms)
            if self.claim_start != start:  # an earlier window's
                claim = self.claim = None
        if claim is None:
            return math.floor(limit * share + 1e-9) - local
        return min(claim, limit) - local

    @property
    def resets(self) -> int:
        return max((c.resets for c in self.counters()), default=0)

    def window_end(self, key: BudgetKey, now_ms: int) -> int:
        """The current window's end (rolling: when the oldest spend leaves it)."""
        if key.rolling:
            starts = [c.buckets[0][0] for c in self.counters() if c.buckets]
            width = ROLLING_MS[key.window] // BUCKETS
            return min(starts) + width + ROLLING_MS[key.window] if starts else now_ms
        return window_bounds(key, now_ms)[1]

    def fits_at(self, key: BudgetKey, limit: int, charge: int, now_ms: int) -> int:
        """When (epoch ms) ``charge`` fits, as time alone frees room."""
        if not key.rolling:
            # The next window carries what is over the limit; with an overrun beyond one
            # window, the window after that.
            carried = max(0, self.local - limit)
            end, windows = window_bounds(key, now_ms)[1], 1
            while carried + charge > limit and windows < 100:
                carried = max(0, carried - limit)
                end, windows = window_bounds(key, end)[1], windows + 1
            return end
        need = self.local + charge - limit
        width = ROLLING_MS[key.window] // BUCKETS
        buckets = sorted(b for c in self.counters() for b in c.buckets or ())
        for start, amount in buckets:
            need -= amount
            if need <= 0:
                return start + width + ROLLING_MS[key.window]
        return now_ms + ROLLING_MS[key.window]


# An exported counter: scope kind ("t": a tenant, "g": a tenant group), scope name, the
# budget key (unit, window, rolling, zone), the window (start, end, epoch ms), spent,
# windows closed, rolling buckets ([start, spent], ...).
Entry = tuple[str, str, str, str, bool, str, int, int, int, int, list[list[int]]]


def _last(counter: _Counter) -> int:
    """The time of ``counter``'s latest spend: its newest bucket (rolling), else its
    window's start."""
    return counter.buckets[-1][0] if counter.buckets else counter.start_ms


class BudgetLedger:
    """The spend of every scope (a tenant, or a tenant group) under every budget key, per
    ingest partition.

    Scopes are a tenant id or a tenant group's ``group_scope``. ``reserve`` charges a
    record's declared cost to every budget it is under, or to none when one refuses;
    ``settle`` corrects a charge with the measured cost. The ledger keeps no budgets:
    each call passes the budgets in force, so a changed policy applies at the next record.

    Each charge names the ingest partition of its record: a partition's spend is exported
    with its progress at each commit (``export``; ``dirty`` says which changed), restored
    with it when the partition is assigned (``restore``) and dropped when it goes
    (``drop``): the spend is committed exactly once with the records that made it.
    """

    __slots__ = ("_by_partition", "_open", "_spends", "dirty", "share")

    def __init__(self) -> None:
        # This instance's part of the ingest partitions: of a tenant group's budget, what it
        # may spend until the instances exchange their spend (``coordinate``).
        self.share = 1.0
        self._spends: dict[tuple[Scope, BudgetKey], _Spend] = {}
        # Which (scope, key) each partition has a counter under: an export, a restore or a
        # drop visits those only.
        self._by_partition: dict[int, set[tuple[Scope, BudgetKey]]] = {}
        # The reservations since the last ``committed``: undone by ``rewound``.
        self._open: list[tuple[Charges, int, int]] = []
        self.dirty: set[int] = set()  # partitions whose spend changed since exported

    def _spend(self, scope: Scope, key: BudgetKey) -> _Spend:
        both = (scope, key)
        spend = self._spends.get(both)
        if spend is None:
            spend = self._spends[both] = _Spend()
        return spend

    def refusal(self, charges: Charges, cost: int, now_ms: int) -> Refusal | None:
        """The first budget of ``charges`` (scope, its budgets) that a record of ``cost``
        would take past its limit, or None when all have room. Charges nothing."""
        for scope, budgets in charges:
            for budget in budgets:
                key = budget.key
                spend = self._spend(scope, key)
                spend.roll(key, budget.limit, now_ms)
                charge = budget.charge_of(cost)
                room = spend.room(scope, key, budget.limit, self.share, now_ms)
                if charge > room:
                    return Refusal(
                        scope,
                        budget,
                        max(0, room),
                        spend.fits_at(key, budget.limit, charge, now_ms),
                    )
        return None

    def reserve(
        self, charges: Charges, cost: int, now_ms: int, partition: int = 0
    ) -> Refusal | None:
        """Charge a record of declared ``cost`` (of ingest ``partition``) to every budget of
        ``charges`` (scope, its budgets) when all have room; else charge none and say which
        refused."""
        charges = tuple(charges)
        refusal = self.refusal(charges, cost, now_ms)
        if refusal is None:
            self.charge(charges, cost, now_ms, partition)
            self._open.append((charges, cost, partition))
        return refusal

    def _add(
        self, scope: Scope, budget: Budget, amount: int, now_ms: int | None, partition: int
    ) -> _Counter:
        key = budget.key
        spend = self._spend(scope, key)
        if now_ms is not None:
            spend.roll(key, budget.limit, now_ms)
        counter = spend.get(partition)
        if counter is None:
            counter = spend.counter(partition)
            self._by_partition.setdefault(partition, set()).add((scope, key))
        if not counter.end_ms and not key.rolling:  # a new part: the current window
            counter.start_ms, counter.end_ms = window_bounds(key, now_ms or _last(counter))
        if amount < 0:
            amount = -min(-amount, counter.spent)
        counter.add(key, amount, now_ms if now_ms is not None else _last(counter))
        self.dirty.add(partition)
        return counter

    def unreserve(
        self, charges: Charges, cost: int, now_ms: int | None, partition: int = 0
    ) -> None:
        """Give back a reservation of ``cost`` for a record that did not go (back in its
        queue, or its transaction aborted): what it charged each budget, from the current
        window's spend of its partition (never below zero). ``now_ms`` None: the counters
        are not brought to a time first (a rewind, just after the reservations)."""
        for scope, budgets in charges:
            for budget in budgets:
                self._add(scope, budget, -budget.charge_of(cost), now_ms, partition)

    def committed(self) -> None:
        """The reservations made so far went out with a committed transaction: they stay."""
        self._open.clear()

    def rewound(self) -> int:
        """The transaction they went out with was aborted: the reservations made since the
        last ``committed`` are given back (their records go again, and are charged again
        then); how many."""
        undone = len(self._open)
        for charges, cost, partition in reversed(self._open):
            self.unreserve(charges, cost, None, partition)
        self._open.clear()
        return undone

    def charge(self, charges: Charges, cost: int, now_ms: int, partition: int = 0) -> None:
        """Charge a record of ``cost`` to every budget of ``charges``, room or not."""
        for scope, budgets in charges:
            for budget in budgets:
                self._add(scope, budget, budget.charge_of(cost), now_ms, partition)

    def settle(
        self,
        charges: Charges,
        delta: int,
        charged_ms: int,
        now_ms: int,
        partition: int = 0,
    ) -> None:
        """Correct the charge of a record (of ingest ``partition``) charged at
        ``charged_ms`` by ``delta`` cost units (measured minus declared). Only cost budgets
        are corrected. A refund (``delta`` < 0) for a record charged in a window that has
        closed is not given (the closed window kept its spend; the new one must not spend
        more than its limit)."""
        if not delta:
            return
        for scope, budgets in charges:
            for budget in budgets:
                if budget.unit != "cost":
                    continue
                key = budget.key
                if delta < 0:
                    if key.rolling:
                        if charged_ms <= now_ms - ROLLING_MS[key.window]:
                            continue
                    elif charged_ms < window_bounds(key, now_ms)[0]:
                        continue
                self._add(scope, budget, delta, now_ms, partition)

    def spent(self, scope: Scope, budget: Budget, now_ms: int) -> int:
        """What this instance's partitions spent of ``scope``'s ``budget`` in its current
        window."""
        key = budget.key
        spend = self._spends.get((scope, key))
        if spend is None:
            return 0
        spend.roll(key, budget.limit, now_ms)
        return spend.local

    def local(self, scope: Scope, budget: Budget, now_ms: int) -> tuple[int, int]:
        """``spent``, with the current window's start (0: rolling): what this instance
        reports to the others."""
        key = budget.key
        start = _current_start(key, now_ms)
        return self.spent(scope, budget, now_ms), start

    def coordinate(
        self, scope: Scope, budget: Budget, window_start: int, claim: int, now_ms: int
    ) -> bool:
        """This instance's claim in force on a tenant group's ``budget`` for the window
        starting at ``window_start`` (0: rolling), from the instances' exchange: it spends
        up to it. A claim for another window than the current one is ignored. Whether the
        claim rose (room may have come)."""
        key = budget.key
        start = _current_start(key, now_ms)
        if window_start != start:
            return False
        spend = self._spend(scope, key)
        spend.roll(key, budget.limit, now_ms)
        before = spend.claim if spend.claim_start == start else None
        spend.claim, spend.claim_start = max(0, claim), start
        return before is None or spend.claim > before

    def state(self, scope: Scope, budgets: tuple[Budget, ...], now_ms: int) -> list[BudgetState]:
        """Each of ``budgets`` as ``scope`` stands under it."""
        rows = []
        for budget in budgets:
            key = budget.key
            spend = self._spend(scope, key)
            spend.roll(key, budget.limit, now_ms)
            spent = spend.local
            rows.append(
                BudgetState(
                    scope,
                    budget,
                    spent,
                    max(0, budget.limit - spent),
                    spend.window_end(key, now_ms),
                    spend.resets,
                )
            )
        return rows

    # -- what a partition's progress carries --------------------------------------------------

    def export(self, partition: int) -> list[Entry]:
        """The spend of ``partition``'s records, for its progress snapshot."""
        self.dirty.discard(partition)
        out: list[Entry] = []
        for scope, key in sorted(self._by_partition.get(partition, ()), key=repr):
            kind, name = ("t", scope) if isinstance(scope, str) else ("g", scope[1])
            spend = self._spends.get((scope, key))
            counter = None if spend is None else spend.get(partition)
            if counter is None or (not counter.spent and not counter.buckets):
                continue
            out.append(
                (
                    kind,
                    name,
                    key.unit,
                    key.window,
                    key.rolling,
                    key.time_zone,
                    counter.start_ms,
                    counter.end_ms,
                    counter.spent,
                    counter.resets,
                    [list(b) for b in counter.buckets or ()],
                )
            )
        return out

    def restore(self, partition: int, entries: list[Entry]) -> None:
        """``partition``'s spend as its committed progress has it (replacing what was
        counted for it): the partition was assigned, or recovered after an abort."""
        self.drop({partition})
        for kind, name, unit, window, rolling, zone, start, end, spent, resets, buckets in entries:
            scope: Scope = name if kind == "t" else group_scope(name)
            key = BudgetKey(cast(Unit, unit), cast(Window, window), bool(rolling), zone)
            counter = self._spend(scope, key).counter(partition)
            self._by_partition.setdefault(partition, set()).add((scope, key))
            counter.start_ms, counter.end_ms = start, end
            counter.spent, counter.resets = spent, resets
            counter.buckets = deque([list(b) for b in buckets]) if buckets else None
        self.dirty.discard(partition)

    def drop(self, partitions: set[int]) -> None:
        """Forget the spend of ``partitions`` (no longer this instance's)."""
        for partition in partitions:
            for scope, key in self._by_partition.pop(partition, ()):
                spend = self._spends.get((scope, key))
                if spend is None:
                    continue
                spend.pop(partition)
                if spend.empty and spend.claim is None:
                    del self._spends[scope, key]
        self.dirty -= partitions

    def prune(self, now_ms: int) -> int:
        """Drop the counters with nothing spent in their current window (a scope that spends
        again starts a fresh one, the same as a kept empty one); how many scopes are left."""
        for (scope, key), spend in list(self._spends.items()):
            if key.rolling:
                spend.roll(key, 0, now_ms)
            for partition, counter in spend.items():
                if not counter.spent and not counter.buckets:
                    spend.pop(partition)
                    self._by_partition.get(partition, set()).discard((scope, key))
            if spend.empty and spend.claim is None:
                del self._spends[scope, key]
        return len(self.scopes_set())

    def scopes_set(self) -> set[Scope]:
        """The scopes with a counter."""
        return {scope for scope, _ in self._spends}

    def scopes(self) -> Iterator[Scope]:
        """The scopes with a counter."""
        return iter(self.scopes_set())

    def __len__(self) -> int:
        """How many (scope, budget key) counters there are."""
        return len(self._spends)


class ClaimKey(NamedTuple):
    """A tenant group's budget in one window, as the instances claim it: the group, the
    budget's key (unit, window, rolling, zone) and the window's start (epoch ms; 0:
    rolling)."""

    group: str
    unit: str
    window: str
    rolling: bool
    time_zone: str
    window_start: int

    @classmethod
    def of(cls, group: str, key: BudgetKey, window_start: int) -> ClaimKey:
        return cls(group, key.unit, key.window, key.rolling, key.time_zone, window_start)

    def budget_key(self) -> BudgetKey:
        """The budget key it is a window of."""
        return BudgetKey(
            cast(Unit, self.unit), cast(Window, self.window), self.rolling, self.time_zone
        )


class ClaimBook:
    """Which instances' claims on tenant groups' budgets are valid, decided in the order of
    one log that every instance reads (the coordination topic's single partition).

    An instance spends a group's budget up to its claim. Giving back (a claim lower than the
    instance's valid one) is always valid. A raise is valid when, at its place in the log,
    it and the other instances' valid claims add up to at most the limit the raise names;
    else the instance keeps its claim before the raise. Every reader takes the same records
    in the same order, so all agree on every claim's validity, and an instance spends a raise
    only once it has read it back valid: the claims in force never add up to more than the
    limit, whatever the instances' timing. A report lists an instance's claims; one it no
    longer lists, or the instance's tombstone (it left, or was fenced), gives them back.

    Pure: no I/O. Not thread-safe: one owner (the group thread).
    """

    __slots__ = ("_claims", "_spent", "_weights")

    def __init__(self) -> None:
        self._claims: dict[ClaimKey, dict[str, int]] = {}
        self._spent: dict[ClaimKey, dict[str, int]] = {}  # what each reported spent
        self._weights: dict[ClaimKey, dict[str, float]] = {}  # its members' weight there

    def record(
        self, instance: str, claims: Iterable[tuple[ClaimKey, int, int, int, float]]
    ) -> None:
        """``instance``'s report, at its place in the log: each claim as (key, limit, spent,
        claim, the weight of the group's members backlogged there)."""
        listed = set()
        for key, limit, spent, claim, weight in claims:
            listed.add(key)
            book = self._claims.setdefault(key, {})
            self._spent.setdefault(key, {})[instance] = spent
            self._weights.setdefault(key, {})[instance] = weight
            current = book.get(instance, 0)
            if (
                claim <= current
                or sum(c for i, c in book.items() if i != instance) + claim <= limit
            ):
                book[instance] = claim
        for key in [k for k in self._claims if k not in listed]:
            self._forget(key, instance)

    def drop(self, instance: str) -> None:
        """``instance``'s tombstone: its claims are given back."""
        for key in list(self._claims):
            self._forget(key, instance)

    def _forget(self, key: ClaimKey, instance: str) -> None:
        book = self._claims.get(key)
        if book is not None:
            book.pop(instance, None)
            self._spent.get(key, {}).pop(instance, None)
            self._weights.get(key, {}).pop(instance, None)
            if not book:
                del self._claims[key]
                self._spent.pop(key, None)
                self._weights.pop(key, None)

    def claim(self, key: ClaimKey, instance: str) -> int:
        """``instance``'s valid claim (0: none)."""
        return self._claims.get(key, {}).get(instance, 0)

    def others(self, key: ClaimKey, instance: str) -> tuple[int, int]:
        """The other instances' valid claims and reported spend, summed."""
        claims = sum(c for i, c in self._claims.get(key, {}).items() if i != instance)
        spent = sum(c for i, c in self._spent.get(key, {}).items() if i != instance)
        return claims, spent

    def others_weight(self, key: ClaimKey, instance: str) -> float:
        """The weight of the group's members backlogged on the other instances."""
        return sum(w for i, w in self._weights.get(key, {}).items() if i != instance)

    def keys(self) -> list[ClaimKey]:
        return list(self._claims)


def plan_claim(
    claim: int, limit: int, spent: int, others_claims: int, others_spent: int, part: float
) -> int:
    """The claim an instance asks for next on a tenant group's budget: what it spent plus its
    ``part`` (its share of the group's demand, 0 without members backlogged here) of what
    all instances have left. Above its ``claim``, as far as the limit left unclaimed allows
    (a raise, valid only if the log says so: ``ClaimBook``); below it, down to that target
    but never below what it spent (a give-back, valid at once)."""
    target = spent + math.floor(part * max(0, limit - spent - others_spent) + 1e-9)
    if claim > target:
        return max(spent, target)
    if claim < target:
        return min(target, claim + max(0, limit - others_claims - claim))
    return claim
