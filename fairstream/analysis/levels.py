"""Fairness at each level of tenant groups, per window: the groups (and ungrouped tenants)
against their entitlement among themselves, and each group's members against theirs within
the group. What ``fairstream audit`` prints with ``--tenant-group-separator``.

The rule of ``fairstream.analysis.stats.window_fairness``, applied once per level:

- the outer level: each group is one entry, backlogged throughout a window when its members'
  busy periods (merged) cover it, served the records of all its members; an ungrouped tenant
  is an entry of its own. Judged by the groups' weights (``group_weights``) and the ungrouped
  tenants' (``weights``);
- the inner level: within each group, its members backlogged throughout the window, by
  their ``weights``. A group with one member judged has nothing to compare.

So an organisation spreading its load over many tenant ids is judged as one entry at the
outer level: a key-splitting attack shows as the other entries' shortfall there. Pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fairstream.analysis.stats import (
    NO_CONTENTION,
    WindowFairness,
    backlogged_throughout,
    busy_periods,
    window_fairness,
)

__all__ = ["GROUP_MARK", "LevelWindow", "level_table", "level_windows"]

GROUP_MARK = "group "  # the outer level's name of a group (a tenant may share its name)


@dataclass(frozen=True)
class LevelWindow:
    """One window judged at both levels: ``outer`` over the groups (named ``GROUP_MARK`` +
    id) and ungrouped tenants, ``inner`` per group with two members or more judged."""

    start: float
    end: float
    outer: WindowFairness
    inner: dict[str, WindowFairness] = field(default_factory=dict)

    @property
    def worst_group(self) -> tuple[str, WindowFairness] | None:
        """The group whose members were split least fairly (lowest Jain), if any judged."""
        judged = [(g, f) for g, f in self.inner.items() if f.jain is not None]
        return min(judged, key=lambda gf: (gf[1].jain or 0.0, gf[0])) if judged else None


def level_windows(
    spans: Mapping[str, Sequence[tuple[float, float]]],
    group_of: Callable[[str], str | None],
    *,
    start: float,
    end: float,
    window: float,
    weights: Mapping[str, float],
    group_weights: Mapping[str, float],
) -> list[LevelWindow]:
    """Per window of ``window`` seconds from ``start`` to ``end``: both levels judged.

    ``spans`` holds each tenant's records as (enqueued, scheduled) in epoch seconds;
    ``group_of`` names a tenant's group (None: ungrouped). O(windows x tenants x log n).
    """
    departures = {t: sorted(s for _, s in v) for t, v in spans.items()}
    periods = {t: busy_periods(v) for t, v in spans.items()}
    members: dict[str, list[str]] = {}
    ungrouped: list[str] = []
    for tenant in spans:
        group = group_of(tenant)
        if group is None:
            ungrouped.append(tenant)
        else:
            members.setdefault(group, []).append(tenant)
    group_periods = {
        g: busy_periods(p for t in ts for p in periods[t]) for g, ts in members.items()
    }
    outer_weights = {GROUP_MARK + g: group_weights.get(g, 1.0) for g in members}
    outer_weights.update({t: weights.get(t, 1.0) for t in ungrouped})
    result: list[LevelWindow] = []
    a = start
    while a < end:
        b = min(a + window, end)
        served = {
            t: bisect.bisect_left(d, b) - bisect.bisect_left(d, a) for t, d in departures.items()
        }
        outer: dict[str, float] = {
            t: served[t] for t in ungrouped if backlogged_throughout(periods[t], a, b)
        }
        inner: dict[str, WindowFairness] = {}
        for g, ts in members.items():
            if backlogged_throughout(group_periods[g], a, b):
                outer[GROUP_MARK + g] = sum(served[t] for t in ts)
            judged = {t: served[t] for t in ts if backlogged_throughout(periods[t], a, b)}
            if len(judged) > 1:
                fairness = window_fairness(judged, weights)
                if fairness is not NO_CONTENTION:
                    inner[g] = fairness
        result.append(LevelWindow(a, b, window_fairness(outer, outer_weights), inner))
        a = b
    return result


def _jain(f: WindowFairness) -> str:
    return "-" if f.jain is None else f"{f.jain:.3f}"


def level_table(windows: Sequence[LevelWindow], clock: Callable[[float], str]) -> str:
    """The audit's table: per window (``clock`` prints a time), the outer level's entries
    judged, Jain's index and worst shortfall, and the group whose members were split least
    fairly, with its Jain's index and its worst member's shortfall. Windows where neither
    level had anything to judge are left out (and counted)."""
    lines = [
        f"{'window (UTC)':<18} {'entries':>7} {'Jain':>6}   {'worst shortfall':<28} "
        f"{'least fair group':<20} {'Jain':>6}   worst member shortfall"
    ]
    empty = 0
    for w in windows:
        least = w.worst_group
        if w.outer.jain is None and least is None:
            empty += 1
            continue
        worst = f"{w.outer.worst} {w.outer.shortfall:.0%}" if w.outer.worst else "-"
        group, inner = least if least else ("-", NO_CONTENTION)
        member = f"{inner.worst} {inner.shortfall:.0%}" if inner.worst else "-"
        lines.append(
            f"{clock(w.start)}-{clock(w.end)}  {w.outer.tenants:>7} {_jain(w.outer):>6}   "
            f"{worst:<28} {group:<20} {_jain(inner):>6}   {member}"
        )
    if empty:
        lines.append(f"({empty} windows with nothing backlogged throughout left out)")
    return "\n".join(lines)
