"""Dwell per tenant, as the demo and ``fairstream audit`` report it: p99s and the table.

A dwell is the time a record waited: from its arrival (the demo's producer sending it, the
``fairstream-enqueued-ms`` header) to its service (a worker starting it, the
``fairstream-scheduled-ms`` header). Both commands collect them per tenant as ``Dwell``
(tenant -> [(arrival, dwell)], seconds) for fairstream, for FIFO and for the ideal (GPS)
schedule of the same arrivals, and print them side by side with ``summary_table``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TypeAlias

from fairstream.analysis.reference import Arrival
from fairstream.analysis.stats import percentile

Dwell: TypeAlias = dict[str, list[tuple[float, float]]]  # tenant -> [(arrival, dwell)]


def p99_by_tenant(dwell: Mapping[str, list[tuple[float, float]]]) -> dict[str, float]:
    """tenant -> p99 of the dwell times in ``dwell`` (tenant -> [(arrival, dwell)])."""
    return {t: percentile([d for _, d in v], 99) for t, v in dwell.items() if v}


def by_noisy_first(tenants: Iterable[str]) -> list[str]:
    """The demo's order of tenants: the noisy one first, then the others by name."""
    return sorted(tenants, key=lambda t: (t != "noisy", t))


def summary_table(
    arrivals: list[Arrival],
    fair: Mapping[str, list[tuple[float, float]]],
    fifo: Mapping[str, list[tuple[float, float]]],
    gps: Mapping[str, list[float]],
) -> str:
    """Per tenant: count, and dwell p50/p99 through fairstream, FIFO and the ideal (GPS).

    ``fair`` and ``fifo``: tenant -> [(arrival, dwell)]; ``gps``: tenant -> [dwell].
    Caller: the demo, and ``fairstream audit`` (with FIFO as a model of the same arrivals).
    """
    lines = [
        f"{'tenant':<10} {'count':>6}   {'fairstream p50':>14} {'p99':>7}   "
        f"{'FIFO p50':>9} {'p99':>7}   {'ideal (GPS) p50':>15} {'p99':>7}"
    ]
    counts: dict[str, int] = defaultdict(int)
    for a in arrivals:
        counts[a.tenant] += 1

    def stat(values: list[float], q: float) -> str:
        return f"{percentile(values, q):.2f}s" if values else "-"

    for tenant in by_noisy_first(counts):
        f = [d for _, d in fair.get(tenant, [])]
        q = [d for _, d in fifo.get(tenant, [])]
        g = gps.get(tenant, [])
        lines.append(
            f"{tenant:<10} {counts[tenant]:>6}   {stat(f, 50):>14} {stat(f, 99):>7}   "
            f"{stat(q, 50):>9} {stat(q, 99):>7}   {stat(g, 50):>15} {stat(g, 99):>7}"
        )
    return "\n".join(lines)
