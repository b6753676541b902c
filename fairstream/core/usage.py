"""Measured cost: what a request really cost, against what it declared.

A record is charged its declared cost (``fairstream-cost``, the admission estimate) when it
is scheduled. A worker reports the real cost afterwards (``fairstream.Usage`` on the
feedback topic); ``cost_correction`` turns the pair into the extra charge for the tenant's
deficit (``FairScheduler.charge``), so that shares follow real usage. A report nobody
should believe is refused (None), for the caller to count and ignore.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["MAX_COST", "cost_correction"]

# The contract's largest cost is fairstream.wire.records.MAX_COST; core imports nothing outside
# itself, so this is a copy, pinned to it by tests/unit/wire/test_wire_purity.py.
MAX_COST: Final = 2**31 - 1


def _is_cost(value: object) -> bool:
    return type(value) is int and 1 <= value <= MAX_COST


def cost_correction(
    declared: int, reported: int | None, *, max_ratio: float | None = None
) -> int | None:
    """Cost units to charge on top of the declared cost: ``reported - declared`` (negative
    when the request cost less than it declared); 0 when no cost was reported.

    None when the report is not believable: either cost is not an integer from 1 to
    ``MAX_COST``, or (with ``max_ratio``) the reported cost is more than ``max_ratio``
    times the declared one, or less than its ``1 / max_ratio``.

    Caller: the scheduler's feedback reader. Affects: nothing.
    """
    if max_ratio is not None and (
        isinstance(max_ratio, bool)
        or not isinstance(max_ratio, int | float)
        or not math.isfinite(max_ratio)
        or max_ratio < 1
    ):
        raise ValueError(f"max_ratio must be a finite number of at least 1, got {max_ratio!r}")
    if not _is_cost(declared):
        return None
    if reported is None:
        return 0
    if not _is_cost(reported):
        return None
    if max_ratio is not None and not declared / max_ratio <= reported <= declared * max_ratio:
        return None
    return reported - declared
