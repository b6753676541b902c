"""What an instance tells people: emitted counts and recent dwell per tenant (``Observed``),
what is wrong with it now (``Conditions``: readiness reasons any thread can raise), and how
often a read over every tenant may run on the emitter thread (``Reused``).

The counting itself, once per committed transaction per tenant in it, is ``tallies``'
(compiled), and bounded there. Caller: the emitter thread (the only writer); read for
``/tenants`` and by the audit thread (``fairstream.scheduler.audit.auditor``) through the same
thread (``Handoff.call``). Everything here is derived when it is read, never per record:
``committed`` runs once per committed transaction, the rest when ``/tenants`` or the auditor
asks.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fairstream.adapters.tenant_series import OTHER, top_named, top_of
from fairstream.analysis.stats import percentile
from fairstream.analysis.tree import Entry, entitle, waiting_records
from fairstream.core import Clock, Core, FairScheduler, GroupScheduler
from fairstream.core.budget import BudgetState
from fairstream.scheduler.tallies import (
    EMITTED_TENANTS,
    Tallies,
    Tally,
    TenantLoad,
    busiest,
    tenant_loads,
)
from fairstream.scheduler.tenant_tree import GroupCounts, TreeSnapshot

SCRAPE_TENANTS = 100  # largest backlogs named in a scrape (``backlog_top``)
COST_TENANTS = 10_000  # tenants whose declared and measured costs are kept

R = TypeVar("R")


@dataclass(frozen=True)
class Scrape:
    """The emitter's numbers for one ``/metrics`` scrape (``Emitter.scrape``), taken on its
    thread and published whole: copies, which the metrics collectors read on theirs."""

    # The SCRAPE_TENANTS largest backlogs, the rest summed under OTHER (``backlog_top``):
    # the metrics name at most ``top_tenants`` (20) of them.
    backlog_by_tenant: dict[str, int]
    emitted_by_tenant: dict[str, int]
    cost_by_tenant: dict[str, list[int]]  # declared, reported
    backlog: int  # records in the fair core
    in_flight: int  # records in the open transaction
    payload_bytes: int  # payload bytes held (``--buffer-memory``)
    tree: TreeSnapshot | None = None  # the tenant groups' (``tenant_tree``); None: flat core
    noisy_tenants: int = 0  # demoted as noisy (``demotions``)
    oldest_quiet_age: float | None = None  # s, among tenants not noisy nor paused
    # The budgets nearest their limit (``emitter.budgets``), and the tenants waiting for one.
    budgets: tuple[BudgetState, ...] = ()
    budget_waiting: int = 0


def backlog_top(core: Core[Any], k: int) -> dict[str, int]:
    """The ``k`` largest backlogs (records) by tenant, and the others' sum under ``OTHER``
    (``top_of``): the scrape's copy. O(tenants) in time, O(k) in memory: a copy of every
    backlog was a dict of a million entries at each scrape refresh."""
    if type(core) is FairScheduler:  # one pass inside the core (``largest_backlogs``)
        named, rest = top_named(core.largest_backlogs(k + 1), k, len(core))
    else:
        named, rest = top_of(((t, core.backlog(t)[0]) for t in core.tenants()), k)
    top = dict(named)
    top[OTHER] = rest
    return top


NO_SCRAPE = Scrape({}, {}, {}, 0, 0, 0)  # before the first scrape, or with the emitter gone


@dataclass(frozen=True)
class Probe:
    """One look at the emitter for the auditor (see ``Observed.probe``)."""

    counts: dict[str, int]  # records committed per tenant since the previous probe
    busiest: list[str]  # the tenants with the largest counts, largest first (``busiest``)
    dwell_p99: dict[str, float]  # p99 dwell of those records, for the busiest tenants
    backlogged: dict[str, TenantLoad] | None  # every backlogged tenant, when asked for
    # With tenant groups (a grouped core): ``counts`` per group, and (with ``backlogged``)
    # every backlogged group's load and the group of each backlogged grouped tenant.
    group_counts: dict[str, int] | None = None
    groups: dict[str, TenantLoad] | None = None
    group_of: dict[str, str] | None = None


class Observed:
    def __init__(self, *, emitted_tenants: int = EMITTED_TENANTS) -> None:
        # Records committed per tenant, and their newest dwell times (compiled: ``tallies``).
        self.tallies = Tallies(emitted_tenants)
        # Cost the workers reported against what the records declared, per tenant (the
        # COST_TENANTS most recently reported): how far declared costs are from real usage.
        self.cost_by_tenant: dict[str, list[int]] = {}
        # Records emitted per tenant group, and the groups' snapshot (``tenant_tree``).
        self.groups = GroupCounts()

    @property
    def emitted_by_tenant(self) -> dict[str, int]:
        """Records committed per tenant since the start (``Tallies.emitted``)."""
        return self.tallies.emitted

    @property
    def dwell_by_tenant(self) -> OrderedDict[str, list[float] | deque[float]]:
        """The newest dwell times of the latest emitters, latest last (``Tallies.dwell``)."""
        return self.tallies.dwell

    def cost(self, tenant: str, declared: int, reported: int) -> None:
        """One request's declared and measured cost (feedback)."""
        sums = self.cost_by_tenant.pop(tenant, None) or [0, 0]
        sums[0] += declared
        sums[1] += reported
        self.cost_by_tenant[tenant] = sums  # re-inserted: the dict is in report order
        if len(self.cost_by_tenant) > COST_TENANTS:
            del self.cost_by_tenant[next(iter(self.cost_by_tenant))]

    def _costs(self, tenant: str) -> list[int] | None:
        return self.cost_by_tenant.get(tenant)

    def committed(self, tally: Tally) -> int:
        """A committed transaction's egress records, each with its tenant and dwell time
        (seconds), in emission order. Counts them and keeps the newest (``Tallies``), and
        under tenant groups counts them for their groups; returns how many it held."""
        if not self.groups.flat:
            self.groups.emitted(tally.counts())
        return self.tallies.committed(tally)

    def probe(self, core: Core[Any], top: int, *, backlogged: bool) -> Probe:
        """What was committed since the last probe, per tenant, and the ``top`` busiest with
        the dwell p99 of each; with ``backlogged``, every tenant with a backlog and its policy.

        Caller: the auditor, through ``Handoff.call``. O(tenants emitted since the last
        probe), plus O(backlogged tenants) when ``backlogged``.
        """
        counts = self.tallies.take_since_probe()
        self.groups.file(core)  # each second, so that few counts wait unfiled
        names = busiest(counts, top)
        dwell: dict[str, float] = {}
        for tenant in names:
            samples = self.dwell_by_tenant.get(tenant)
            if samples:
                # The newest `count` dwell times are (about) those of the records counted.
                newest = list(samples)[-min(counts[tenant], len(samples)) :]
                dwell[tenant] = percentile(newest, 99)
        loads = tenant_loads(core) if backlogged else None
        if not isinstance(core, GroupScheduler):
            return Probe(counts, names, dwell, loads)
        return Probe(counts, names, dwell, loads, *_group_probe(core, counts, loads))

    def scrape(self, core: Core[Any], in_flight: int, payload_bytes: int) -> Scrape:
        """Copies of what ``/metrics`` shows (on the emitter thread: ``Handoff.call``)."""
        return Scrape(
            backlog_top(core, SCRAPE_TENANTS),
            dict(self.emitted_by_tenant),
            {t: list(c) for t, c in self.cost_by_tenant.items()},
            len(core),
            in_flight,
            payload_bytes,
            self.groups.snapshot(core, self.emitted_by_tenant),
        )

    def tenant_stats(
        self,
        core: Core[Any],
        limit: int,
        *,
        ready: bool,
        partitions: list[int],
        rate_limit: float | None,
    ) -> dict[str, Any]:
        """A snapshot for ``fairstream top`` and the console: the instance, and its busiest
        tenants.

        Tenants: the ``limit`` largest backlogs plus the ``limit`` latest emitters (their
        rates, shares and entitlements are added by ``SchedulerService.tenant_stats``); with
        tenant groups in use, each row says the tenant's ``group`` (None: in none), and
        ``tree_snapshot`` holds the groups' snapshot (``tenant_tree.add_tree`` makes the
        ``groups`` of ``/tenants`` of it, on the caller's thread).
        """
        backlogged = sorted(
            ((t, *core.backlog(t)) for t in core.tenants()),
            key=lambda row: row[1],
            reverse=True,
        )[:limit]
        names = [t for t, _, _ in backlogged]
        names += [t for t in reversed(self.dwell_by_tenant) if t not in names][:limit]
        rows = []
        for tenant in names:
            records, cost = core.backlog(tenant)
            policy = core.policy(tenant)
            samples = self.dwell_by_tenant.get(tenant)
            ordered = sorted(samples) if samples else []
            rows.append(
                {
                    "tenant": tenant,
                    "backlog": records,
                    "backlog_cost": cost,
                    "emitted": self.emitted_by_tenant.get(tenant, 0),
                    "weight": policy.weight,
                    "priority": policy.priority,
                    "paused": policy.paused,
                    "rate_cap": policy.rate_cap,
                    "dwell_p50": percentile(ordered, 50, presorted=True) if ordered else None,
                    "dwell_p99": percentile(ordered, 99, presorted=True) if ordered else None,
                    "cost_declared": costs[0]
                    if (costs := self.cost_by_tenant.get(tenant))
                    else None,
                    "cost_reported": costs[1] if costs else None,
                }
            )
        stats: dict[str, Any] = {
            "ready": ready,
            "partitions": partitions,
            "rate_limit": rate_limit,
            "backlog": len(core),
            "emitted": sum(self.emitted_by_tenant.values()),
            "tenants": rows,
        }
        if isinstance(core, GroupScheduler):
            for tenant, row in zip(names, rows, strict=True):
                row["group"] = core.group_of(tenant)
            stats["tree_snapshot"] = self.groups.snapshot(core, self.emitted_by_tenant)
        return stats


def _group_probe(
    core: GroupScheduler[Any], counts: dict[str, int], loads: dict[str, TenantLoad] | None
) -> tuple[dict[str, int], dict[str, TenantLoad] | None, dict[str, str] | None]:
    """A probe's group part (see ``Probe``): O(tenants counted), plus O(backlogged) with
    ``loads``."""
    by_group: dict[str, int] = {}
    for tenant, count in counts.items():
        group = core.group_of(tenant)
        if group is not None:
            by_group[group] = by_group.get(group, 0) + count
    if loads is None:
        return by_group, None, None
    group_of = {t: g for t in loads if (g := core.group_of(t)) is not None}
    groups: dict[str, TenantLoad] = {}
    for group in core.groups():
        policy = core.group_policy(group)
        groups[group] = (
            core.group_backlog(group)[0],
            policy.weight,
            policy.priority,
            policy.paused,
            policy.rate_cap,
        )
    return by_group, groups, group_of


def add_shares(rows: list[dict[str, Any]], rates: Mapping[str, float], total: float) -> None:
    """Each tenant row's egress ``rate`` (the auditor's), ``share`` of the instance's egress,
    ``state``, ``entitlement`` and ``backlogged_share``, in place: what ``/tenants`` adds
    to the emitter's snapshot (``Observed.tenant_stats``) on the caller's thread."""
    for row in rows:
        rate = rates.get(row["tenant"], 0.0)
        row["rate"] = rate
        row["share"] = rate / total if total else None
        row["state"] = tenant_state(row, rate)
    entitlements(rows)


def entitlements(rows: list[dict[str, Any]]) -> None:
    """Each listed tenant's ``entitlement`` and ``backlogged_share``, in place.

    A tenant waits for a share when it is not paused and its backlog (in memory and in the
    ingest log: ``waiting``) would take more than ``WAITING`` seconds at its current rate (a
    quiet tenant with a record in hand does not). Its entitlement is its weight over the
    weight of the waiting tenants of its priority class: what a weighted fair scheduler owes
    it of what they receive together; its ``backlogged_share`` is what it did receive of
    that, over the last seconds. Others have neither (None): what a quiet tenant takes is its
    own, not anyone's shortfall. (One level of ``fairstream.analysis.tree``; with tenant
    groups, ``tenant_tree.add_tree`` puts the tree's in their place.)
    """
    entries = [
        Entry(
            r["tenant"],
            r["weight"],
            r["priority"],
            bool(r.get("paused")),
            waiting_records(r),
            r.get("rate", 0.0),
        )
        for r in rows
    ]
    for r, at in zip(rows, entitle(entries), strict=True):
        r["entitlement"], r["backlogged_share"] = at.entitlement, at.backlogged_share


def tenant_state(row: dict[str, Any], rate: float) -> str:
    """paused, capped (served at its rate cap), backlogged (records waiting, in memory or in
    the ingest log: ``waiting_records``) or idle: as ``fairstream top``."""
    cap = row.get("rate_cap")
    if row.get("paused"):
        return "paused"
    if cap is not None and rate >= 0.95 * cap:
        return "capped"
    return "backlogged" if waiting_records(row) else "idle"


@dataclass(frozen=True)
class Condition:
    """Something an operator should know about this instance now: ``name`` (a machine
    word, the metric's label), ``reason`` (a sentence), and whether it makes the instance
    unready (``/readyz`` 503) or only degraded (``/readyz`` stays 200 and says so)."""

    name: str
    reason: str
    blocks_ready: bool = False


class Conditions:
    """Readiness reasons, from any thread: the one place ``/readyz`` and the
    ``fairstream_condition`` metric read what is wrong.

    Two ways in: ``set``/``clear`` from the thread that sees the condition start and end
    (the supervisor of a restarting thread, the group thread's coordination), or ``watch``
    a probe that is asked at each read (state another thread owns and publishes by a
    reference swap, such as the emitter's read-back failures). Thread-safe; the probes must
    be cheap and must not block (they run on the web's threads).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set: dict[str, Condition] = {}
        self._probes: dict[str, Callable[[], Condition | None]] = {}

    def set(self, name: str, reason: str, *, blocks_ready: bool = False) -> None:
        with self._lock:
            self._set[name] = Condition(name, reason, blocks_ready)

    def clear(self, name: str) -> None:
        with self._lock:
            self._set.pop(name, None)

    def watch(self, name: str, probe: Callable[[], Condition | None]) -> None:
        with self._lock:
            self._probes[name] = probe

    def current(self) -> list[Condition]:
        """The conditions now, set ones first, each name once."""
        with self._lock:
            found = dict(self._set)
            probes = list(self._probes.items())
        for name, probe in probes:
            if name in found:
                continue
            try:
                condition = probe()
            except Exception as exc:  # a broken probe is a condition too, never a 500
                condition = Condition(name, f"its probe failed: {exc!r}")
            if condition is not None:
                found[name] = condition
        return list(found.values())

    def blocking(self) -> list[Condition]:
        return [c for c in self.current() if c.blocks_ready]


SHARE = 0.05  # of the emitter thread's time that reads over every tenant may take at most


class Reused(Generic[R]):
    """The result of ``read``, a read of the emitter's state over every backlogged tenant
    (a scrape, this instance's demand), made again only once it is paid for: a read that
    took ``c`` seconds is answered from its result until ``c / SHARE`` seconds later.

    Why: with a few thousand tenants a read takes a millisecond or less and is made at
    almost every ask; with a million it takes most of a second, and a scrape every 0.2 s
    (or a demand every 0.5 s) would leave the emitter no time for records: at 1,000,000
    one-record tenants at --rate 1, absorption stopped at 729,282. Reused, such a read is
    at most 14-20 s old, and the emitter keeps 95% of its time.

    Time is ``clock``'s (the emitter's, injected: a test's manual clock makes every read
    fresh). Caller: the emitter thread only."""

    def __init__(self, read: Callable[[], R], clock: Clock) -> None:
        self._read = read
        self._clock = clock
        self._result: R | None = None
        self._until = -math.inf

    def __call__(self) -> R:
        now = self._clock.now()
        if self._result is not None and now < self._until:
            return self._result
        result = self._read()
        self._result = result
        self._until = now + (self._clock.now() - now) / SHARE
        return result
