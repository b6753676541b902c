"""trigger.dev's fairness scenarios as workloads, shared by the runs through the core
(``benchmarks.fairness_scenarios``), the runs on the broker (``benchmarks.fairness_e2e``) and
the table of docs/benchmarks.md (``benchmarks.fairness_doc``): each scenario's tenants and
slots (``SCENARIOS``), the trace a seed draws from it (``arrivals``), the tenant each tenant id
belongs to (``tenant_of``), and the study's metrics over a run's services (``measure``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from fairstream.analysis.contention import Contention, Service, contention
from fairstream.analysis.reference import Arrival

SEPARATOR = "/"
MODES = ("fifo", "drr", "groups")  # the three ways each scenario runs through the core


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant of a scenario: ``runs`` spread round robin over ``keys`` tenant ids,
    all at ``start`` or Poisson at ``poisson`` per 1,000 ticks; ``org``: the organisation
    whose tenant id it is (its key is ``org/name``)."""

    name: str
    runs: int
    weight: float = 1.0
    keys: int = 1
    poisson: float | None = None
    hold_mean: float = 25.0
    start: float = 0.0
    org: str | None = None

    def key(self, run: int) -> str:
        if self.org is not None:
            return f"{self.org}{SEPARATOR}{self.name}"
        return f"{self.name}{SEPARATOR}{run % self.keys}" if self.keys > 1 else self.name


@dataclass(frozen=True, slots=True)
class Scenario:
    """A workload, its slots, the light tenants whose wait is the headline, and where in
    trigger.dev's PR it comes from."""

    name: str
    concurrency: int
    tenants: tuple[Tenant, ...]
    light: tuple[str, ...]
    source: str

    def weights(self) -> dict[str, float]:
        return {t.name: t.weight for t in self.tenants}

    def orgs(self) -> dict[str, str]:
        """Tenant -> organisation (the tenant itself when it has none)."""
        return {t.name: t.org or t.name for t in self.tenants}


def _sybil(count: int, runs_each: int) -> tuple[Tenant, ...]:
    return tuple(Tenant(f"heavy-{i}", runs_each, org="org") for i in range(count))


_LIGHT5 = tuple(f"light-{i}" for i in range(1, 6))
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "adversarial skew",
        5,
        (Tenant("heavy", 250, keys=30), *(Tenant(n, 20) for n in _LIGHT5)),
        _LIGHT5,
        "fairness-spike adversarialSkew",
    ),
    Scenario(
        "key-splitting",
        4,
        (*_sybil(10, 30), Tenant("light", 20, poisson=40)),
        ("light",),
        "fairness-spike-ck ckSybil",
    ),
    Scenario(
        "key-splitting, 100 ids",
        4,
        (*_sybil(100, 3), Tenant("light", 20, poisson=40)),
        ("light",),
        "ckSybil, its 300 runs over 100 ids",
    ),
    Scenario(
        "trickle",
        4,
        (Tenant("bulk", 240), *(Tenant(f"trickle-{i}", 30, poisson=25) for i in (1, 2))),
        ("trickle-1",),
        "fairness-spike-ck ckTrickle",
    ),
    Scenario("heavy-idle", 4, (Tenant("heavy", 200),), ("heavy",), "fairness-spike-ck ckHeavyIdle"),
    Scenario(
        "weighted",
        4,
        (Tenant("big", 300, weight=3, hold_mean=30), Tenant("small", 300, hold_mean=30)),
        ("small",),
        "fairness-spike weighted",
    ),
)


def _exp(rng: random.Random, mean: float) -> int:
    """The study's ``expSample``: an exponential draw, rounded, at least 1 tick."""
    return max(1, round(-math.log(1 - rng.random()) * mean))


def arrivals(scenario: Scenario, seed: str) -> list[Arrival]:
    """The scenario's runs as a trace, as the study's ``buildWorkload`` and ``expandEvents``
    make them: per tenant in order, a Poisson gap (after the first run) then a hold drawn
    for each run; sorted by time, then tenant, then run id (FIFO's order at a tie)."""
    rng = random.Random(f"{scenario.name}:{seed}")
    out: list[tuple[float, str, str, Arrival]] = []
    for tenant in scenario.tenants:
        cursor = tenant.start
        for i in range(tenant.runs):
            if tenant.poisson is not None and i > 0:
                cursor += _exp(rng, 1000 / tenant.poisson)
            hold = _exp(rng, tenant.hold_mean)
            key = tenant.key(i)
            run_id = f"{key}#{i}"
            out.append((cursor, tenant.name, run_id, Arrival(cursor, key, run_id, hold=hold)))
    out.sort(key=lambda e: e[:3])
    return [e[3] for e in out]


def tenant_of(scenario: Scenario) -> dict[str, str]:
    """Tenant id (key) -> the scenario's tenant: the grain the study measures at."""
    return {t.key(i): t.name for t in scenario.tenants for i in range(min(t.runs, max(t.keys, 1)))}


def measure(scenario: Scenario, services: list[Service]) -> dict[str, float]:
    """The study's numbers for one run; for key-splitting also at the organisation grain."""
    c: Contention = contention(services, scenario.weights())
    out = {
        "worst": c.worst_share_over_weight,
        "jain": c.jain,
        "light_wait": c.mean_wait_of(scenario.light),
        "makespan": c.makespan,
    }
    orgs = scenario.orgs()
    if set(orgs.values()) != set(orgs):
        org = contention([Service(orgs[s.group], s.arrived, s.served) for s in services])
        out["org_worst"] = org.worst_share_over_weight
    return out
