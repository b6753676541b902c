"""What an instance remembers about its tenants for people: emitted counts and recent dwell.

Bounded: the last ``DWELL_SAMPLES`` dwell times of the ``DWELL_TENANTS`` latest emitters.
Caller: the emitter thread (the only writer); read for ``/tenants`` through the same thread.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from typing import Any

from fairstream.core import FairScheduler, percentile

DWELL_TENANTS = 1000  # tenants whose recent dwell times are kept, most recent emitters
DWELL_SAMPLES = 256  # recent dwell times kept per tenant


class Observed:
    def __init__(self) -> None:
        self.emitted_by_tenant: dict[str, int] = defaultdict(int)
        self.dwell_by_tenant: OrderedDict[str, deque[float]] = OrderedDict()

    def emitted(self, counts: dict[str, int]) -> None:
        """Count a committed transaction's egress records per tenant."""
        for tenant, count in counts.items():
            self.emitted_by_tenant[tenant] += count

    def dwell(self, tenant: str, seconds: float) -> None:
        samples = self.dwell_by_tenant.get(tenant)
        if samples is None:
            samples = self.dwell_by_tenant[tenant] = deque(maxlen=DWELL_SAMPLES)
            if len(self.dwell_by_tenant) > DWELL_TENANTS:
                self.dwell_by_tenant.popitem(last=False)
        else:
            self.dwell_by_tenant.move_to_end(tenant)
        samples.append(seconds)

    def tenant_stats(
        self,
        core: FairScheduler[Any],
        limit: int,
        *,
        ready: bool,
        partitions: list[int],
        rate_limit: float | None,
    ) -> dict[str, Any]:
        """A snapshot for ``fairstream top``: the instance, and its busiest tenants.

        Tenants: the ``limit`` largest backlogs plus the ``limit`` latest emitters.
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
                    "dwell_p99": percentile(list(samples), 99) if samples else None,
                }
            )
        return {
            "ready": ready,
            "partitions": partitions,
            "rate_limit": rate_limit,
            "backlog": len(core),
            "emitted": sum(self.emitted_by_tenant.values()),
            "tenants": rows,
        }
