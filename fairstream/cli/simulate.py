"""``fairstream simulate``: replay an arrival trace through the real scheduling core.

The what-if tool: given who sent what when, how long would each tenant's records wait at a
given egress rate, burst, concurrency limit, weights, tenant groups and quantum? It drives
the service's own emission rule (``fairstream.core.emission``: pacing, concurrency slots,
``FairScheduler``'s pick or ``GroupScheduler``'s, cost tokens) with a ``ManualClock``, so a
day of traffic replays in seconds and the same trace always gives the same answer.

Input, one JSON object per line, sorted by ``t`` (seconds)::

    {"t": 0.0, "tenant": "acme/alice", "id": "r1", "cost": 3, "hold": 0.2, "group": "acme"}

``cost`` is optional (default 1); ``hold`` (default 0) is how long the paid API works on the
request, the seconds it holds one of ``--max-concurrency`` slots; ``group`` names the
record's tenant group (else ``--tenant-group-separator`` decides, as in the scheduler, else
none). With a limit of concurrency and no ``--rate``, the replay is bound by slots alone.

Output: one JSON line per departure on stdout, in departure order,
``{"id", "tenant", "t_arrival", "t_departure"}``; a per-tenant summary on stderr.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import click

from fairstream.analysis.reference import Arrival
from fairstream.analysis.stats import FairShareTracker, jain_index, percentile
from fairstream.cli.weights import parse_weights
from fairstream.core import FairScheduler, GroupScheduler, ManualClock, TenantPolicy
from fairstream.core.emission import EmissionRule, Expire, Wait
from fairstream.scheduler.policies.tenant_groups import by_separator

__all__ = ["Arrival", "Departure", "parse_trace", "replay", "simulate"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Departure:
    """One record sent to the simulated egress."""

    id: str
    tenant: str
    cost: int
    t_arrival: float
    t_departure: float
    group: str | None = None  # the tenant group it was scheduled in

    @property
    def dwell(self) -> float:
        """Seconds between arrival and departure."""
        return self.t_departure - self.t_arrival


def _trace_error(lineno: int, message: str) -> click.BadParameter:
    return click.BadParameter(f"line {lineno}: {message}", param_hint="'--trace'")


def parse_trace(lines: Iterable[str]) -> list[Arrival]:
    """Parse and check JSON-lines arrivals; blank lines are skipped.

    Raises click.BadParameter naming the line for malformed input or an unsorted ``t``.
    """
    arrivals: list[Arrival] = []
    previous_t = -math.inf
    previous_line = 0
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _trace_error(lineno, f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise _trace_error(lineno, f"expected a JSON object, got {line[:40]!r}")
        t = obj.get("t")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise _trace_error(lineno, f"'t' must be a finite number of seconds, got {t!r}")
        if t < 0:
            raise _trace_error(lineno, f"'t' must not be negative, got {t!r}")
        tenant = obj.get("tenant")
        if not isinstance(tenant, str) or not tenant:
            raise _trace_error(lineno, f"'tenant' must be a non-empty string, got {tenant!r}")
        record_id = obj.get("id")
        if not isinstance(record_id, str):
            raise _trace_error(lineno, f"'id' must be a string, got {record_id!r}")
        cost = obj.get("cost", 1)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise _trace_error(lineno, f"'cost' must be a positive integer, got {cost!r}")
        hold = obj.get("hold", 0.0)
        if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 <= hold < math.inf:
            raise _trace_error(lineno, f"'hold' must be a finite number >= 0, got {hold!r}")
        group = obj.get("group")
        if group is not None and (not isinstance(group, str) or not group):
            raise _trace_error(lineno, f"'group' must be a non-empty string, got {group!r}")
        if t < previous_t:
            raise _trace_error(
                lineno,
                f"t={t!r} is earlier than t={previous_t!r} on line {previous_line}; "
                "the trace must be sorted by t",
            )
        previous_t, previous_line = t, lineno
        arrivals.append(Arrival(float(t), tenant, record_id, cost, float(hold), group))
    return arrivals


# Slots are given back by the trace's holds, never by a lease: a lease longer than any trace.
_NO_LEASE = 1e15


def _core(
    clock: ManualClock,
    quantum: float,
    weights: dict[str, float],
    group_weights: dict[str, float],
    group_of: Callable[[str], str | None] | None,
    grouped: bool,
) -> FairScheduler[Arrival] | GroupScheduler[Arrival]:
    """The service's choice: a flat ``FairScheduler`` unless something is grouped."""
    core: FairScheduler[Arrival] | GroupScheduler[Arrival]
    if grouped or group_of is not None or group_weights:
        core = GroupScheduler(clock, quantum=quantum, group_of=group_of)
        for group, weight in group_weights.items():
            core.set_group_policy(group, TenantPolicy(weight=weight))
    else:
        core = FairScheduler(clock, quantum=quantum)
    for tenant, weight in weights.items():
        core.set_policy(tenant, TenantPolicy(weight=weight))
    return core


class _Busy:
    """The requests holding slots: a heap of (done, departure number, request id)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []

    def start(self, arrival: Arrival, now: float, number: int) -> None:
        heapq.heappush(self._heap, (now + arrival.hold, number, arrival.id))

    def next_done(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def settle(self, rule: EmissionRule[Arrival], now: float) -> None:
        """Give the slots of the requests done by ``now`` back to ``rule``."""
        heap, done = self._heap, []
        while heap and heap[0][0] <= now:
            done.append(heapq.heappop(heap)[2])
        if done:
            rule.settled(done)


GROUP_ROW = "group "  # the summary's rows of groups: "group acme"


class _Judged:
    """Who the fairness summary judges, as the core shares the egress: each tenant, or
    with groups the outer level's entries (a group, or a tenant in none). Feeds the
    tracker (if any) and remembers each backlogged tenant's group."""

    def __init__(
        self,
        tracker: FairShareTracker | None,
        core: FairScheduler[Arrival] | GroupScheduler[Arrival],
        weights: dict[str, float],
        group_weights: dict[str, float],
    ) -> None:
        self._tracker = tracker
        self._core = core
        self._weights = weights
        self._group_weights = group_weights
        self._group: dict[str, str | None] = {}

    def pushed(self, tenant: str) -> None:
        core = self._core
        group = core.group_of(tenant) if isinstance(core, GroupScheduler) else None
        self._group[tenant] = group
        if self._tracker is not None:
            if group is None:
                self._tracker.backlogged(tenant, self._weights.get(tenant, 1.0))
            else:
                self._tracker.backlogged(GROUP_ROW + group, self._group_weights.get(group, 1.0))

    def served(self, tenant: str, cost: int) -> str | None:
        """A record of ``tenant`` departed; its group."""
        group = self._group[tenant]
        if self._tracker is not None:
            judged = tenant if group is None else GROUP_ROW + group
            self._tracker.served(judged, cost)
            if self._emptied(tenant, group):
                self._tracker.idle(judged)
        return group

    def _emptied(self, tenant: str, group: str | None) -> bool:
        core = self._core
        if group is None or not isinstance(core, GroupScheduler):
            return tenant not in core
        return core.group_backlog(group)[0] == 0


def replay(
    arrivals: list[Arrival],
    *,
    rate: float | None = None,
    burst: float = 1,
    weights: dict[str, float] | None = None,
    quantum: float = 1,
    tracker: FairShareTracker | None = None,
    max_concurrency: int | None = None,
    group_separator: str | None = None,
    group_weights: dict[str, float] | None = None,
) -> Iterable[Departure]:
    """Yield the departures of ``arrivals`` through the core at ``rate`` records/s (None:
    unpaced) with at most ``max_concurrency`` requests in flight (None: unlimited).

    A record departs only when the emission rule answers a pick; when it answers wait, time
    jumps to the next event: the next arrival, the next request done (its ``hold`` after
    its departure, under ``max_concurrency``), or the end of the wait. Requests done and
    arrivals at or before a departure's time count for it. ``group_separator`` groups
    tenants by key as the scheduler's ``--tenant-group-separator`` does (a record's own
    ``group`` goes first); ``group_weights`` weigh the groups. ``tracker``, if given, is fed
    backlog and service events for the fairness summary: of each tenant, or, when anything
    is grouped, of each group (``GROUP_ROW`` + its id) and each tenant in none.
    """
    if rate is None and max_concurrency is None:
        raise ValueError("replay needs a rate, a concurrency limit or both")
    weights = weights or {}
    clock = ManualClock(arrivals[0].t if arrivals else 0.0)
    grouped = any(a.group is not None for a in arrivals)
    group_of = by_separator(group_separator)
    core = _core(clock, quantum, weights, group_weights or {}, group_of, grouped)
    # The service's rule, with the simulated clock: a record goes only when it says so.
    rule = EmissionRule(
        core,
        clock,
        rate=rate,
        burst=burst,
        max_concurrency=max_concurrency,
        concurrency_lease=_NO_LEASE,
    )
    busy = _Busy()
    judged = _Judged(tracker, core, weights, group_weights or {})
    pending = sent = 0
    while pending < len(arrivals) or len(core) or rule.pending is not None:
        now = clock.now()
        busy.settle(rule, now)
        while pending < len(arrivals) and arrivals[pending].t <= now:
            arrival = arrivals[pending]
            if isinstance(core, GroupScheduler):
                core.push(arrival.tenant, arrival, arrival.cost, arrival.group)
            else:
                core.push(arrival.tenant, arrival, arrival.cost)
            judged.pushed(arrival.tenant)
            pending += 1
        step = rule.next()
        if isinstance(step, Wait):
            # It may arrive, or a slot be given back, in time to compete.
            due = min(
                now + step.seconds,
                arrivals[pending].t if pending < len(arrivals) else math.inf,
                busy.next_done(),
            )
            if due == math.inf:
                break  # nothing will change any more (caps or pause, which the CLI never sets)
            # Never stand still: a wait below the clock's resolution still moves it.
            clock.set(due if due > now else math.nextafter(now, math.inf))
            continue
        if isinstance(step, Expire):
            continue  # trace records have no deadline
        group = judged.served(step.tenant, step.cost)
        arrival = step.item
        if max_concurrency is not None:
            rule.started(step.tenant, arrival.id, now)
            busy.start(arrival, now, sent)
        sent += 1
        yield Departure(arrival.id, arrival.tenant, arrival.cost, arrival.t, now, group)


def _summary(
    departures: list[Departure],
    weights: dict[str, float],
    tracker: FairShareTracker,
    group_weights: dict[str, float] | None = None,
) -> list[str]:
    """One row per tenant, then (with groups) one per group over its members; fair_share is
    of what the tracker judged: a tenant in no group, or a group."""
    rows: dict[str, list[float]] = {}
    for d in departures:
        rows.setdefault(d.tenant, []).append(d.dwell)
    if not rows:
        return ["no arrivals in the trace"]
    group_rows: dict[str, list[float]] = {}
    for d in departures:
        if d.group is not None:
            group_rows.setdefault(GROUP_ROW + d.group, []).append(d.dwell)
    row_weights = dict(weights)
    row_weights.update({GROUP_ROW + g: w for g, w in (group_weights or {}).items()})
    ratios = tracker.ratios()
    width = max(6, *(len(t) for t in (*rows, *group_rows)))
    lines = [
        f"{'tenant':<{width}} {'weight':>7} {'count':>8} {'dwell_p50':>10} "
        f"{'dwell_p99':>10} {'dwell_max':>10} {'fair_share':>10}"
    ]
    for name, times in [*sorted(rows.items()), *sorted(group_rows.items())]:
        dwell = sorted(times)
        share = ratios.get(name)
        lines.append(
            f"{name:<{width}} {row_weights.get(name, 1.0):>7g} {len(dwell):>8} "
            f"{percentile(dwell, 50, presorted=True):>10.3f} "
            f"{percentile(dwell, 99, presorted=True):>10.3f} {dwell[-1]:>10.3f} "
            f"{'-' if share is None else format(share, '.3f'):>10}"
        )
    if ratios:
        judged = "groups and ungrouped tenants" if group_rows else "tenants"
        lines.append(
            f"Jain's index over {len(ratios)} backlogged {judged}: "
            f"{jain_index(ratios.values()):.4f} "
            "(fair_share: service / weighted fair share while backlogged; 1 is fair)"
        )
    return lines


def _option(flag: str, **kw: Any) -> Callable[[F], F]:
    """An option of ``simulate``, read from ``FAIRSTREAM_SIMULATE_<FLAG>`` too (--help shows
    it): every option of the command has its variable, named the same way."""
    variable = "FAIRSTREAM_SIMULATE_" + flag.removeprefix("--").replace("-", "_").upper()
    return click.option(flag, envvar=variable, show_envvar=True, **kw)


@click.command("simulate")
@_option(
    "--trace",
    type=click.File("r", encoding="utf-8"),
    required=True,
    help='Arrivals as JSON lines {"t", "tenant", "id", "cost"?, "hold"?, "group"?}, sorted '
    "by t; - for stdin.",
)
@_option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Egress rate in records per second. [default: unpaced; needs --max-concurrency]",
)
@_option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Requests in flight at most; each holds a slot for its trace record's hold seconds. "
    "[default: unlimited]",
)
@_option(
    "--burst",
    type=click.FloatRange(min=1),
    default=1.0,
    show_default=True,
    help="Records the egress may send back to back after a quiet period.",
)
@_option(
    "--weights",
    default=None,
    help="tenant=w,... or a file (JSON object, or tenant=w lines). Others weigh 1.",
)
@_option(
    "--tenant-group-separator",
    default=None,
    help="Tenant groups by key, as the scheduler's option: with /, tenant acme/alice is in "
    "group acme. A trace record's group goes first. [default: none]",
)
@_option(
    "--quantum",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Base quantum in cost units; a tenant's quantum is weight x quantum.",
)
def simulate(
    trace: IO[str],
    rate: float | None,
    max_concurrency: int | None,
    burst: float,
    weights: str | None,
    tenant_group_separator: str | None,
    quantum: float,
) -> None:
    """Replay an arrival trace through the scheduling core with a simulated clock.

    Prints one JSON line per departure, {"id", "tenant", "t_arrival", "t_departure"}, in
    departure order, then a per-tenant summary on stderr: count, dwell time p50, p99 and
    max (seconds), the share of fair service received, and Jain's index.

    \b
    Example:
      fairstream simulate --trace arrivals.jsonl --rate 50 --burst 5 --weights acme=2
      fairstream simulate --trace calls.jsonl --max-concurrency 4 --tenant-group-separator /
    """
    if rate is None and max_concurrency is None:
        raise click.UsageError("give --rate, --max-concurrency or both")
    tenant_weights = parse_weights(weights)
    arrivals = parse_trace(trace)
    tracker = FairShareTracker()
    departures: list[Departure] = []
    for departure in replay(
        arrivals,
        rate=rate,
        burst=burst,
        weights=tenant_weights,
        quantum=quantum,
        tracker=tracker,
        max_concurrency=max_concurrency,
        group_separator=tenant_group_separator or None,
    ):
        departures.append(departure)
        click.echo(
            json.dumps(
                {
                    "id": departure.id,
                    "tenant": departure.tenant,
                    "t_arrival": departure.t_arrival,
                    "t_departure": round(departure.t_departure, 9),
                }
            )
        )
    for line in _summary(departures, tenant_weights, tracker):
        click.echo(line, err=True)
