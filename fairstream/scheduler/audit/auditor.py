"""The fairness audit of a running instance, and the recent history the console draws.

A thread of its own: every ``TICK`` it probes the emitter (``Observed.probe`` through
``Handoff.call``, so nothing is computed on the emitter's hot path and nothing is shared
without its owner) for the records committed per tenant since the last probe. From those it
keeps:

- each tenant's egress rate over the last ``RATE_SPAN`` seconds (``/tenants``);
- ``HISTORY`` seconds of per-second samples of the busiest tenants' egress rates and dwell
  p99 (the console's charts);
- per fairness window (``--fairness-window``, 10 s by default): Jain's index over the
  tenants backlogged throughout the window, each one's service divided by its weighted
  share, and the largest shortfall of any of them (``fairstream_fairness_*`` metrics).

A tenant was backlogged throughout a window when it was served fewer records during the
window than it had waiting at its start: per-tenant FIFO means its queue never emptied.
Counts are of committed records (a commit interval's worth may land in the next window).
Paused tenants, tenants held at their rate cap and tenants gone at the window's end (their
partition moved) are not judged.

With tenant groups (a grouped core) each window is judged at both levels, as the
scheduler shares the egress: the verdict (and the ``fairstream_fairness_*`` metrics) is over
the outer entries, the groups (named ``group <id>``) and the ungrouped tenants, each group
backlogged throughout when it was served fewer records than its members had waiting at the
start, by its group policy's weight; and ``members`` says which group's members were split
least fairly among themselves (the same rule, within each group, by their weights).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from fairstream.adapters.tenant_series import OTHER
from fairstream.analysis.levels import GROUP_MARK
from fairstream.analysis.stats import WindowFairness, window_fairness
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Probe
from fairstream.scheduler.tallies import TenantLoad, add_counts

TICK = 1.0  # seconds between probes
RATE_SPAN = 10.0  # seconds over which a tenant's egress rate is reported
HISTORY = 300  # per-second samples kept for the console's charts (5 minutes)
CHART_TENANTS = 8  # busiest tenants of each sample named in the history; the rest summed
CAPPED = 0.95  # a tenant served at this fraction of its rate cap or more is held by it


class Auditor:
    """Caller: ``SchedulerService`` (``run`` on the audit thread); ``rates``, ``fairness``
    and ``history`` are read by the web handlers' threads.

    ``probe(backlogged)`` returns the emitter's ``Probe`` (None while there is no emitter).
    """

    def __init__(
        self,
        probe: Callable[[bool], Probe | None],
        metrics: Metrics,
        window: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._probe = probe
        self._metrics = metrics
        self.window = window
        self._clock = clock
        self._wall = wall
        self._stop = threading.Event()
        self._lock = threading.Lock()  # guards what the web threads read
        self._recent: deque[tuple[float, float, dict[str, int]]] = deque()  # (at, span, counts)
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self._samples = 0  # taken so far: ``rates`` are kept for the one they were made at
        self._rates: tuple[int, tuple[Mapping[str, float], float]] | None = None
        self._fairness: dict[str, Any] | None = None
        self._last: float | None = None  # clock at the previous probe
        self._window_end = 0.0
        self._window_opened = 0.0
        self._window_start: dict[str, TenantLoad] | None = None
        self._window_served: dict[str, int] = {}
        # With tenant groups: the groups' loads and the tenants' groups at the window's
        # start, and the records served per group since.
        self._window_groups: tuple[dict[str, TenantLoad], dict[str, str]] | None = None
        self._window_group_served: dict[str, int] = {}
        metrics.fairness_jain.set(math.nan)

    # -- the audit thread ------------------------------------------------------------------

    def run(self) -> None:
        """Tick until ``stop``. A failing tick ends the run: the service's supervisor logs
        it, raises the thread's condition and runs this again after a backoff (fatal after
        repeated failures), as for every restartable thread; the new run starts its
        fairness window afresh."""
        self._start_over()
        while not self._stop.wait(TICK):
            self.tick()

    def stop(self) -> None:
        self._stop.set()

    def _start_over(self) -> None:
        """Forget the open window and the last probe: the next probe opens a new one."""
        self._last = None
        self._window_start = None
        self._window_served = {}
        self._window_groups = None

    def tick(self) -> None:
        """Probe once; close the fairness window when it is due."""
        now = self._clock()
        boundary = now >= self._window_end
        try:
            probe = self._probe(boundary)
        except TimeoutError:
            probe = None
        if probe is None:  # no emitter, or a busy one: start over, never guess
            self._start_over()
            return
        if self._last is not None:
            self._sample(now, now - self._last, probe)
            add_counts(self._window_served, probe.counts)
            add_counts(self._window_group_served, probe.group_counts or {})
        self._last = now
        if probe.backlogged is not None:
            if self._window_start is not None:
                self._judge(probe, now)
            self._window_start = probe.backlogged
            self._window_served = {}
            self._window_group_served = {}
            self._window_groups = (
                None if probe.groups is None else (probe.groups, probe.group_of or {})
            )
            self._window_opened = now
            self._window_end = now + self.window

    def _sample(self, now: float, span: float, probe: Probe) -> None:
        counts = probe.counts
        top = probe.busiest[:CHART_TENANTS]  # chosen once, with their dwell (``tallies.busiest``)
        rates = {t: counts[t] / span for t in top}
        rest = sum(counts.values()) - sum(counts[t] for t in top)
        if rest:
            rates[OTHER] = rest / span
        sample = {
            "t": int(self._wall() * 1000),
            "rate": {t: round(r, 3) for t, r in rates.items()},
            "dwell_p99": {t: round(d, 4) for t, d in probe.dwell_p99.items() if t in rates},
        }
        with self._lock:
            self._recent.append((now, span, counts))
            while self._recent and self._recent[0][0] - self._recent[0][1] < now - RATE_SPAN:
                self._recent.popleft()
            self._samples += 1
            self._history.append(sample)

    def _judge(self, probe: Probe, now: float) -> None:
        end = probe.backlogged or {}
        start = self._window_start or {}
        served = self._window_served
        seconds = now - self._window_opened
        judged: dict[str, float] = {}
        weights: dict[str, float] = {}
        classes: dict[str, int] = {}
        for tenant, (backlog, *_) in start.items():
            got = served.get(tenant, 0)
            if got >= backlog or tenant not in end:
                continue  # its queue emptied during the window, or it moved away
            _, weight, priority, paused, cap = end[tenant]
            if paused or (cap is not None and got >= CAPPED * cap * seconds):
                continue
            judged[tenant] = got
            weights[tenant] = weight
            classes[tenant] = priority
        members: dict[str, Any] | None = None
        if self._window_groups is not None and probe.groups is not None:
            levels = self._levels(judged, weights, classes, probe.groups, seconds)
            result, members = levels
        else:
            result = window_fairness(judged, weights, classes)
        metrics = self._metrics
        metrics.fairness_windows.inc()
        metrics.fairness_tenants.set(result.tenants)
        metrics.fairness_jain.set(math.nan if result.jain is None else result.jain)
        metrics.fairness_shortfall.set(result.shortfall)
        with self._lock:
            self._fairness = {
                "window_seconds": round(seconds, 3),
                "ended": int(self._wall() * 1000),
                "backlogged_tenants": result.tenants,
                "jain": result.jain,
                "worst_tenant": result.worst,
                "shortfall": result.shortfall,
                "shortfall_records": result.shortfall_units,
            }
            if members is not None or self._window_groups is not None:
                self._fairness["members"] = members

    def _levels(
        self,
        judged: dict[str, float],
        weights: dict[str, float],
        classes: dict[str, int],
        end: dict[str, TenantLoad],
        seconds: float,
    ) -> tuple[WindowFairness, dict[str, Any] | None]:
        """Both levels of a window with tenant groups: the outer entries' verdict, and the
        group whose members (those of ``judged``) were split least fairly, if any."""
        assert self._window_groups is not None
        start, group_of = self._window_groups
        served = self._window_group_served
        outer = {t: n for t, n in judged.items() if t not in group_of}
        outer_weights = {t: weights[t] for t in outer}
        outer_classes = {t: classes[t] for t in outer}
        for group, (backlog, *_) in start.items():
            got = served.get(group, 0)
            if got >= backlog or group not in end:
                continue
            _, weight, priority, paused, cap = end[group]
            if paused or (cap is not None and got >= CAPPED * cap * seconds):
                continue
            key = GROUP_MARK + group
            outer[key], outer_weights[key], outer_classes[key] = got, weight, priority
        worst: dict[str, Any] | None = None
        inner: dict[str, dict[str, float]] = {}
        for tenant, count in judged.items():
            if tenant in group_of:
                inner.setdefault(group_of[tenant], {})[tenant] = count
        for group, counts in sorted(inner.items()):
            f = window_fairness(counts, weights, classes) if len(counts) > 1 else None
            if f is None or f.jain is None or (worst is not None and f.jain >= worst["jain"]):
                continue
            worst = {
                "group": group,
                "members": f.tenants,
                "jain": f.jain,
                "worst_tenant": f.worst,
                "shortfall": f.shortfall,
            }
        return window_fairness(outer, outer_weights, outer_classes), worst

    # -- reads (any thread) ----------------------------------------------------------------

    def rates(self) -> tuple[Mapping[str, float], float]:
        """Records per second per tenant over the last ``RATE_SPAN`` seconds, and in all.

        Worked out once per sample (O(tenants served in the span)) and shared by the web
        threads that ask until the next one: read-only."""
        with self._lock:
            samples, kept = self._samples, self._rates
            if kept is not None and kept[0] == samples:
                return kept[1]
            recent = list(self._recent)
        span = sum(s for _, s, _ in recent)
        totals: dict[str, int] = {}
        for _, _, counts in recent:
            add_counts(totals, counts)
        rates: tuple[Mapping[str, float], float]
        if span <= 0:
            rates = ({}, 0.0)
        else:
            rates = ({t: c / span for t, c in totals.items()}, sum(totals.values()) / span)
        with self._lock:
            if self._samples == samples:  # no sample came in meanwhile
                self._rates = (samples, rates)
        return rates

    def fairness(self) -> dict[str, Any] | None:
        """The last closed window's verdict (None before the first one closes)."""
        with self._lock:
            return None if self._fairness is None else dict(self._fairness)

    def history(self, since_ms: int) -> list[dict[str, Any]]:
        """The per-second samples taken after ``since_ms`` (epoch ms), oldest first."""
        with self._lock:
            return [s for s in self._history if s["t"] > since_ms]
