"""Per-tenant Prometheus series, bounded: the scheduler's metrics and the workers' alike.

At each scrape the ``k`` tenants with the largest value get a label of their own and the rest
are summed under ``tenant="__other__"`` (``OTHER``): a deployment with 100,000 tenants
exports at most ``k + 1`` series per metric.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

__all__ = ["OTHER", "top_tenants"]

OTHER = "__other__"


def top_tenants(values: Mapping[str, int], k: int) -> tuple[list[tuple[str, int]], int]:
    """The ``k`` tenants with the largest values, and the sum of all the others.

    A tenant literally named ``__other__`` is counted with the others (a label of its own
    would duplicate their series).
    """
    named = ((t, v) for t, v in values.items() if t != OTHER)
    top = heapq.nlargest(k, named, key=lambda kv: kv[1])
    return top, sum(values.values()) - sum(v for _, v in top)
