"""Dominant-resource fairness between the egress's two limits: records/s and cost/s.

With both ``--rate`` (records per second) and ``--cost-rate`` (cost units per second) set,
the egress has two resources. A tenant of many cheap requests uses up the record limit, a
tenant of few costly ones the cost limit. DRR charging cost alone (the charge without this
module) gives both the same cost per round: the cheap tenant's records then take most of
the record limit, so its share of the resource that binds it is many times the costly
tenant's. Dominant-resource fairness (Ghodsi et al., "Dominant Resource Fairness", NSDI
2011) equalises each tenant's *dominant share*: the larger of its fraction of the record
limit and its fraction of the cost limit.

A record of ``cost`` takes ``1 / rate`` seconds of the record limit and ``cost / cost_rate``
of the cost limit; its dominant use is the larger. In cost units (times ``cost_rate``),
with ``balance = cost_rate / rate`` (the cost at which a record uses both limits equally):

    charge(records, cost) = max(records * balance, cost)

A record costing exactly ``balance`` is charged its cost, as without DRF; a costlier one
too (cost is its dominant resource); a cheaper one is charged ``balance`` (its record slot
is). With one limit set (or none) the charge is the cost: exactly the charge without DRF.

How the DRR gets the charge: a pick is made on the record's declared cost, as always (the
cost tokens of ``--cost-rate`` are taken on that cost too, ``Pick.cost`` is unchanged);
``extra(cost)`` is charged to the tenant's deficit right after (``FairScheduler.charge``,
``GroupScheduler.charge``: tenant and group), so over its rounds a tenant pays its dominant
use. Measured cost from feedback corrects it as the measured-cost charge does, in the same
units: ``correction(declared, measured)``. With one limit both reduce to today's charges
(0 and ``measured - declared``).

Pure: no state but the two rates. Caller: the emission rule (``EmissionRule(dominant=True)``)
and the service's feedback reader.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["DominantCharge", "dominant_shares"]


def _check_rate(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number or None, got {value!r}")


class DominantCharge:
    """The DRR charge of records under a record limit ``rate`` and a cost limit
    ``cost_rate`` (either None: unlimited). ``active`` only with both."""

    __slots__ = ("balance",)

    def __init__(self, rate: float | None = None, cost_rate: float | None = None) -> None:
        _check_rate("rate", rate)
        _check_rate("cost_rate", cost_rate)
        # The cost at which one record uses both limits equally; None: one limit or none.
        self.balance: float | None = (
            None if rate is None or cost_rate is None else float(cost_rate) / float(rate)
        )

    @property
    def active(self) -> bool:
        """Whether both limits are set (else every charge is the cost)."""
        return self.balance is not None

    def charge(self, records: float, cost: float) -> float:
        """The DRR charge, in cost units, of ``records`` records costing ``cost`` in all:
        ``max(records * balance, cost)``; ``cost`` with one limit."""
        balance = self.balance
        if balance is None:
            return cost
        return max(records * balance, cost)

    def extra(self, cost: float) -> float:
        """What to charge a tenant on top of one picked record's ``cost`` (0 with one limit,
        or for a record costing ``balance`` or more). Caller: the emission rule, per pick."""
        balance = self.balance
        if balance is None or cost >= balance:
            return 0.0
        return balance - cost

    def correction(self, declared: float, measured: float) -> float:
        """The charge for a record that declared ``declared`` and really cost ``measured``:
        ``charge(1, measured) - charge(1, declared)`` (with one limit, ``measured -
        declared``, as ``cost_correction`` gives). Caller: the feedback reader."""
        return self.charge(1, measured) - self.charge(1, declared)

    def __repr__(self) -> str:
        return f"DominantCharge(balance={self.balance!r})"


def dominant_shares(
    records: Mapping[str, float],
    costs: Mapping[str, float],
    rate: float,
    cost_rate: float,
    seconds: float,
) -> dict[str, float]:
    """Each tenant's dominant share of ``seconds`` of egress: the larger of its records over
    ``rate * seconds`` and its cost over ``cost_rate * seconds``. For tests and metrics."""
    names = set(records) | set(costs)
    return {
        name: max(
            records.get(name, 0) / (rate * seconds), costs.get(name, 0) / (cost_rate * seconds)
        )
        for name in names
    }
