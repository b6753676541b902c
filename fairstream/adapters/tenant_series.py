"""Per-tenant Prometheus series, bounded: the scheduler's metrics and the workers' alike.

At each scrape the ``k`` tenants with the largest value get a label of their own and the rest
are summed under ``tenant="__other__"`` (``OTHER``): a deployment with 100,000 tenants
exports at most ``k + 1`` series per metric.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter

__all__ = ["OTHER", "top_named", "top_of", "top_tenants"]

OTHER = "__other__"


def top_tenants(values: Mapping[str, int], k: int) -> tuple[list[tuple[str, int]], int]:
    """The ``k`` tenants with the largest values, and the sum of all the others.

    A tenant literally named ``__other__`` is counted with the others (a label of its own
    would duplicate their series).
    """
    # The selection runs in C over the items as they are (a filter and a key in Python cost
    # four times the selection, at each scrape of 100,000 tenants).
    largest = heapq.nlargest(k + 1, values.items(), key=itemgetter(1))
    return top_named(largest, k, sum(values.values()))


def top_of(values: Iterable[tuple[str, int]], k: int) -> tuple[list[tuple[str, int]], int]:
    """``top_tenants`` of (tenant, value) pairs read once, never all held: for values that
    are not in a mapping already (every tenant's backlog, made as they are read)."""
    total = 0

    def counted() -> Iterator[tuple[str, int]]:
        nonlocal total
        for pair in values:
            total += pair[1]
            yield pair

    largest = heapq.nlargest(k + 1, counted(), key=itemgetter(1))
    return top_named(largest, k, total)


def top_named(
    largest: list[tuple[str, int]], k: int, total: int
) -> tuple[list[tuple[str, int]], int]:
    """``top_of``'s answer from the ``k + 1`` largest (tenant, value) pairs, largest first,
    and the sum of all values: at most ``k`` named (never a tenant named __other__, hence
    one more than k), and the sum of the others."""
    top = [(t, v) for t, v in largest if t != OTHER][:k]
    return top, total - sum(v for _, v in top)
