"""What the emitter counts per tenant: the records of the open transaction (``Tally``) and
what each committed transaction held (``Tallies``); for the fairness audit, every backlogged
tenant's load (``tenant_loads``), the busiest tenants of a probe (``busiest``) and counts
added up over a window (``add_counts``);
for the dwell histogram, each committed record's bucket (``bucket_dwells``).

The tallies and the audit's passes run over tenants, not records, yet with many tenants of
a record or two that is about once a record: at 100,000 such tenants a transaction's tally
was a tenth of the emitter's time. ``bucket_dwells`` runs once per committed record.
Compiled (``fairstream.native``); ``observe.Observed`` owns a ``Tallies`` and reads it.

Callers: the emitter thread (``Observed`` on it: the checkpoint at each commit, the
auditor's probe and the scrapes through ``Handoff.call``; ``bucket_dwells`` through the dwell
histogram's ``metrics.CheapHistogram.observe_lists`` at each commit); ``add_counts`` the
auditor, on dicts of its own (its window on the audit thread, the rates on a web handler's).
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter, neg
from typing import Any, cast

from fairstream.adapters.tenant_series import OTHER
from fairstream.core import Core, FairScheduler
from fairstream.core.tenant import TenantPolicy

__all__ = [
    "DWELL_SAMPLES",
    "DWELL_TENANTS",
    "EMITTED_TENANTS",
    "Tallies",
    "Tally",
    "TenantLoad",
    "add_counts",
    "bucket_dwells",
    "busiest",
    "tenant_loads",
]

DWELL_TENANTS = 1000  # tenants whose recent dwell times are kept, most recent emitters
EMITTED_TENANTS = 100_000  # tenants whose emitted counts are kept one by one
DWELL_SAMPLES = 256  # recent dwell times kept per tenant

# A backlogged tenant at a fairness-window boundary: backlog (records), weight, priority
# class, paused, rate cap (records/s or None).
TenantLoad = tuple[int, float, int, bool, float | None]


class Tally:
    """The open transaction's egress records, one entry each in emission order: the tenant
    (``tenants``) and the dwell time in seconds (``seconds``, the same index).

    Flat, so that the per-record path appends to two lists and nothing else: a list per
    tenant per transaction, in a dict keyed by tenant, cost a list and a dict entry per record
    with many tenants of a record or two, then a pass per tenant at the commit (at 100,000
    such tenants, most of what a tenant cost beyond a record). The commit groups what needs
    grouping (``Tallies.committed``); ``counts`` and ``by_tenant`` give the other views.
    Owned by the emitter's checkpoint; not changed once its transaction ends."""

    __slots__ = ("_counts", "seconds", "tenants")

    def __init__(self) -> None:
        self.tenants: list[str] = []
        self.seconds: list[float] = []
        self._counts: Counter[str] | None = None

    def record(self, tenant: str, seconds: float) -> None:
        """One egress record of ``tenant`` that waited ``seconds``. (The sender appends to
        the lists itself, once per record; this is for everyone else.)"""
        self.tenants.append(tenant)
        self.seconds.append(seconds)
        self._counts = None

    def counts(self) -> Counter[str]:
        """Records per tenant (counted in C: ``Counter`` over the list), counted once: ask
        when the transaction has ended (the tenant groups and the demotion tracker both
        ask at its commit). Read it, do not change it."""
        if self._counts is None:
            self._counts = Counter(self.tenants)
        return self._counts

    def by_tenant(self) -> dict[str, list[float]]:
        """Each tenant's dwell times in emission order, tenants in order of their first
        record."""
        grouped: dict[str, list[float]] = {}
        for tenant, seconds in zip(self.tenants, self.seconds, strict=True):
            grouped.setdefault(tenant, []).append(seconds)
        return grouped

    def __len__(self) -> int:
        return len(self.seconds)


class Tallies:
    """Records committed per tenant: since the start (``emitted``), since the auditor's last
    probe (``since_probe``), and the newest dwell times (seconds) of the latest emitters
    (``dwell``, latest last).

    Bounded: ``emitted`` keeps the ``limit`` tenants that emitted most and folds the others
    into ``OTHER`` (every total stays right); ``dwell`` keeps ``DWELL_SAMPLES`` of each of the
    ``DWELL_TENANTS`` latest; ``since_probe`` holds the tenants of one probe interval.

    The counts are ``Counter``s, added to in C, one increment per record
    (``Counter.update`` over a transaction's ``Tally.tenants``). A tenant new among the
    latest keeps the list its commit grouped for it; one that emits again gets a deque of its
    own, extended from then on. (A deque made for every tenant new among the latest, and freed
    when it left them, was half the cost of a transaction's tally over thousands of tenants
    of a record or two.)"""

    def __init__(self, limit: int = EMITTED_TENANTS) -> None:
        self.limit = limit
        self.emitted: Counter[str] = Counter()
        self.since_probe: Counter[str] = Counter()
        self.dwell: OrderedDict[str, list[float] | deque[float]] = OrderedDict()

    def committed(self, tally: Tally) -> int:
        """A committed transaction's records (``tally``, not changed after this call):
        counts them per tenant and keeps the newest dwell times; returns how many it held."""
        tenants = tally.tenants
        self.emitted.update(tenants)
        self.since_probe.update(tenants)
        if len(self.emitted) > self.limit:
            self._fold()
        newest = _newest_by_tenant(tenants, tally.seconds)
        by_tenant = self.dwell
        for tenant in reversed(newest):  # the latest emitter last
            seconds = newest[tenant]
            seconds.reverse()  # oldest first
            samples = by_tenant.get(tenant)
            if samples is None:
                by_tenant[tenant] = seconds
                if len(by_tenant) > DWELL_TENANTS:
                    by_tenant.popitem(last=False)
            else:
                by_tenant.move_to_end(tenant)
                if len(seconds) >= DWELL_SAMPLES:
                    by_tenant[tenant] = seconds
                elif isinstance(samples, deque):
                    samples.extend(seconds)
                else:  # kept as its commit grouped it: a deque of its own from now on
                    kept = deque(samples, maxlen=DWELL_SAMPLES)
                    kept.extend(seconds)
                    by_tenant[tenant] = kept
        return len(tenants)

    def take_since_probe(self) -> dict[str, int]:
        """The counts since the last probe; the next ones start from none."""
        counts, self.since_probe = self.since_probe, Counter()
        return counts

    def _fold(self) -> None:
        """Keep the counts of the half of ``limit`` tenants that emitted most; fold the rest
        into __other__ (the metrics' label for everyone else), so that churning tenants
        cannot grow this without bound while every total stays right."""
        emitted = self.emitted
        keep = Counter(dict(heapq.nlargest(self.limit // 2, emitted.items(), key=itemgetter(1))))
        folded = sum(emitted.values()) - sum(keep.values())
        keep[OTHER] = keep.get(OTHER, 0) + folded
        self.emitted = keep


def _newest_by_tenant(tenants: list[str], seconds: list[float]) -> dict[str, list[float]]:
    """The dwell times of the latest ``DWELL_TENANTS`` tenants of a transaction (its records'
    ``tenants`` and ``seconds``), at most ``DWELL_SAMPLES`` each, newest first; the latest
    emitter first. One pass from the newest record back, through a dict of at most
    ``DWELL_TENANTS``: the records of the others are passed over."""
    newest: dict[str, list[float]] = {}
    i = len(tenants)
    while i:
        i -= 1
        tenant = tenants[i]
        kept = newest.get(tenant)
        if kept is None:
            if len(newest) >= DWELL_TENANTS:
                continue
            newest[tenant] = kept = []
        if len(kept) < DWELL_SAMPLES:
            kept.append(seconds[i])
    return newest


def busiest(counts: dict[str, int], k: int) -> list[str]:
    """The ``k`` tenants with the largest counts, largest first, ties by name: what sorting
    every tenant by (-count, name) gives, without sorting every tenant.

    One pass of a heap of k, in C, over (-count, tenant) pairs. (Sorting every tenant at or
    above the k-th largest count sorted all of them when most were tied, as 100,000 tenants
    of two records each are.)"""
    pairs = zip(map(neg, counts.values()), counts, strict=True)
    return [tenant for _, tenant in heapq.nsmallest(k, pairs)]


def add_counts(into: dict[str, int], counts: Mapping[str, int]) -> None:
    """Add ``counts`` into ``into``, tenant by tenant (the auditor's window at each probe, a
    hundred thousand tenants a second at 100,000 tenants, and its rates over the last
    samples; compiled)."""
    for tenant, count in counts.items():
        into[tenant] = into.get(tenant, 0) + count


def bucket_dwells(bounds: list[float], counts: list[int], dwells: Iterable[list[float]]) -> float:
    """Count each dwell time of ``dwells`` in ``counts`` under the first of the ascending
    ``bounds`` it does not exceed (``counts[len(bounds)]``: above them all), as
    ``bisect_left`` places it; returns their sum. The dwell histogram's observations, once
    per egress record: compiled, a binary search over the bounds inline (interpreted, with
    a call to ``bisect`` per value, it took about 2.5 times as long)."""
    total = 0.0
    n = len(bounds)
    for seconds in dwells:
        for d in seconds:
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) >> 1
                if bounds[mid] < d:
                    lo = mid + 1
                else:
                    hi = mid
            counts[lo] += 1
            total += d
    return total


def tenant_loads(core: Core[Any]) -> dict[str, TenantLoad]:
    """Every backlogged tenant's load (``TenantLoad``), for a fairness window's boundary.

    Tenants with as many records under one policy share one load: the auditor keeps it a
    whole window, and a million one-record tenants of the default policy made a million
    equal tuples (96 bytes each). The loads are handled as objects here, so that compiled
    they stay the shared tuples (a value typed as a tuple is boxed again at each store)."""
    loads: dict[str, object] = {}
    by_policy: dict[int, dict[int, object]] = {}
    last: TenantPolicy | None = None
    shared: dict[int, object] = {}
    for tenant, records, policy in _backlogs(core):
        if not records:
            continue
        if policy is not last:  # most neighbours follow one policy (the default)
            last = policy
            shared = by_policy.setdefault(id(policy), {})
        load = shared.get(records)
        if load is None:
            # Boxed once, here (typed ``object``: ``load`` would be narrowed to the tuple,
            # compiled held unboxed and boxed again at each store).
            made: object = (records, policy.weight, policy.priority, policy.paused, policy.rate_cap)
            shared[records] = load = made
        loads[tenant] = load
    return cast(dict[str, TenantLoad], loads)


def _backlogs(core: Core[Any]) -> Iterator[tuple[str, int, TenantPolicy]]:
    if type(core) is FairScheduler:  # one pass inside the core
        yield from core.backlogs()
        return
    for tenant in core.tenants():
        yield tenant, core.backlog(tenant)[0], core.policy(tenant)
