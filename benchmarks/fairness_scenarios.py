"""trigger.dev's fairness scenarios (PR 4353) re-run on fairstream, beside its published figures.

trigger.dev's fair-queueing spike ranked dequeue disciplines on a logical clock: each
scenario's tenants submit runs (all at once, or Poisson), ``concurrency`` slots serve them,
each run holds its slot for an exponential time (mean ``hold_mean`` ticks, at least 1).
Its scenarios (``fairness-spike/harness/scenarios.ts`` and, for the concurrency-key ones,
``fairness-spike-ck/capsFairness.bench.test.ts`` at commit 1afa1476df, the revision whose
CAPS_FINDINGS.md holds the published figures) are rebuilt here with the same
parameters. Five of them:

- adversarial skew: one tenant owns 30 keys (250 runs), five light tenants 20 runs each;
- key-splitting (``ckSybil``): one organisation spreads 300 runs over 10 keys, one light key
  trickles 20 runs in; and the same 300 runs over 100 keys (ours, not in the study);
- trickle (``ckTrickle``): a bulk backlog of 240, two keys trickle 30 runs each in;
- heavy-idle (``ckHeavyIdle``): one key alone with 200 runs (work conservation);
- weighted: two tenants of 300 runs, weights 3 and 1.

Each runs through fairstream's pure core exactly as ``fairstream simulate --max-concurrency``
does (``fairstream.cli.simulate.replay``: the emission rule's concurrency slots, with a
``ManualClock`` in ticks), three ways: FIFO (one queue), flat DRR (one share per tenant
id), and tenant groups (the separator ``/``: a tenant's keys, or the organisation's ids, in
one group). The metrics are the study's (``fairstream.analysis.contention``). A subset
(key-splitting, both, and weighted) also runs end to end on the broker
(``benchmarks.fairness_e2e``).

    .venv/bin/python -m benchmarks.fairness_scenarios [--bootstrap HOST:PORT] [--core-only]
        [--update-doc] [--write-traces DIR]

Prints one table; ``--update-doc`` writes it into docs/benchmarks.md's "Fairness scenarios";
``--write-traces`` writes each scenario's seed-a trace for ``fairstream simulate`` (and
prints the commands).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairstream.analysis.contention import Contention, Service, contention
from fairstream.analysis.reference import Arrival
from fairstream.cli.simulate import replay

SEEDS = ("seed-a", "seed-b", "seed-c")  # the study's three seeds (its draws are not ours)
SEPARATOR = "/"
MODES = ("fifo", "drr", "groups")


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


def run_core(scenario: Scenario, seed: str, mode: str) -> list[Service]:
    """The scenario through fairstream's core in ``mode``: the services at the tenant grain."""
    trace = arrivals(scenario, seed)
    owner = tenant_of(scenario)
    weights = scenario.weights()
    if mode == "fifo":
        trace = [Arrival(a.t, "fifo", a.id, hold=a.hold) for a in trace]
        key_weights: dict[str, float] = {}
    else:
        key_weights = {k: weights[t] for k, t in owner.items() if weights[t] != 1}
    key_of = {a.id: a.id.rpartition("#")[0] for a in trace}
    departures = replay(
        trace,
        max_concurrency=scenario.concurrency,
        weights=key_weights,
        group_separator=SEPARATOR if mode == "groups" else None,
        group_weights={
            t.name: t.weight for t in scenario.tenants if t.keys > 1 and mode == "groups"
        },
    )
    return [Service(owner[key_of[d.id]], d.t_arrival, d.t_departure) for d in departures]


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


def simulate_command(scenario: Scenario, path: str, mode: str) -> str:
    """The ``fairstream simulate`` command that replays ``path`` as ``run_core`` in ``mode``
    (groups or flat DRR) does."""
    command = f"fairstream simulate --trace {path} --max-concurrency {scenario.concurrency}"
    weights = ",".join(
        f"{t.key(0)}={t.weight:g}" for t in scenario.tenants if t.weight != 1 and t.keys == 1
    )
    if weights:
        command += f" --weights {weights}"
    return command + (f" --tenant-group-separator {SEPARATOR}" if mode == "groups" else "")


def write_traces(directory: Path) -> list[str]:
    """Each scenario's seed-a trace as JSON lines in ``directory``; the commands to run."""
    directory.mkdir(parents=True, exist_ok=True)
    commands = []
    for scenario in SCENARIOS:
        path = directory / (scenario.name.replace(", ", "-").replace(" ", "-") + ".jsonl")
        with path.open("w", encoding="utf-8") as out:
            for a in arrivals(scenario, SEEDS[0]):
                record = {"t": a.t, "tenant": a.tenant, "id": a.id, "hold": a.hold}
                out.write(json.dumps(record) + "\n")
        commands += [simulate_command(scenario, str(path), m) for m in ("drr", "groups")]
    return commands


def mean_over(runs: Iterable[Mapping[str, float]]) -> dict[str, float]:
    runs = list(runs)
    return {k: sum(r[k] for r in runs) / len(runs) for k in runs[0]}


def core_results() -> dict[str, dict[str, dict[str, float]]]:
    """Per scenario, per mode: the mean over the seeds of each metric."""
    return {
        s.name: {m: mean_over(measure(s, run_core(s, seed, m)) for seed in SEEDS) for m in MODES}
        for s in SCENARIOS
    }


# trigger.dev's published figures: (baseline, per-key cap, SFQ, DRR), None where not run.
# FINDINGS.md (adversarial skew, weighted: contention worst share/weight and Jain, means of 3
# seeds; light wait: results/adversarialSkew.json and weighted.json, seed-a) and
# CAPS_FINDINGS.md at 1afa1476df (means of 3 seeds).
PUBLISHED: dict[tuple[str, str], tuple[float | None, ...]] = {
    ("adversarial skew", "worst"): (0.288, None, 1.000, 0.978),
    ("adversarial skew", "jain"): (0.311, None, 1.000, 0.997),
    ("adversarial skew", "light_wait"): (1380, None, 319, 323),
    ("key-splitting", "light_wait"): (1767, 1718, 462, 496),
    ("key-splitting", "worst"): (0.000, 0.367, 0.690, 0.690),
    ("key-splitting", "makespan"): (2067, 2148, 2068, 2071),
    ("trickle", "light_wait"): (1107, 19, 17, 23),
    ("trickle", "worst"): (0.279, 0.922, 0.909, 0.790),
    ("trickle", "makespan"): (1940, 3038, 1942, 1941),
    ("heavy-idle", "makespan"): (1240, 2507, 1240, 1240),
    ("heavy-idle", "light_wait"): (633, 1291, 633, 633),
    ("weighted", "worst"): (0.703, None, 1.000, 0.990),
    ("weighted", "jain"): (0.827, None, 1.000, 1.000),
    ("weighted", "light_wait"): (2712, None, 3366, 3369),
}
METRICS = {
    "worst": "worst tenant's share / weight (contention)",
    "org_worst": "worst organisation's share / weight",
    "jain": "Jain's index (contention)",
    "light_wait": "light tenants' mean wait (ticks)",
    "makespan": "total drain time (ticks)",
}
ROWS: dict[str, tuple[str, ...]] = {
    "adversarial skew": ("worst", "jain", "light_wait", "makespan"),
    "key-splitting": ("light_wait", "worst", "org_worst", "makespan"),
    # Per id, 3 runs each are too few for a share (the study's volume caveat): no "worst".
    "key-splitting, 100 ids": ("light_wait", "org_worst", "makespan"),
    "trickle": ("light_wait", "worst", "makespan"),
    "heavy-idle": ("makespan", "light_wait"),
    "weighted": ("worst", "jain", "light_wait", "makespan"),
}
HEADER = (
    "scenario",
    "metric",
    "trigger.dev baseline",
    "per-key cap",
    "SFQ",
    "DRR",
    "fairstream FIFO",
    "fairstream DRR",
    "fairstream groups",
    "end to end DRR",
    "end to end groups",
)


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if metric in ("worst", "org_worst", "jain") else f"{value:,.0f}"


def table(core: Mapping[str, Any], e2e: Mapping[str, Any] | None = None) -> list[str]:
    """The markdown table: published figures, then the core's three modes, then the broker's."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * 2 + " ---: |" * 9]
    for name, metrics in ROWS.items():
        for metric in metrics:
            published = PUBLISHED.get((name, metric), (None,) * 4)
            ours = [core.get(name, {}).get(m, {}).get(metric) for m in MODES]
            run = (e2e or {}).get(name, {})
            broker = [run.get(m, {}).get(metric) for m in ("drr", "groups")]
            cells = [_fmt(v, metric) for v in (*published, *ours, *broker)]
            lines.append(f"| {name} | {METRICS[metric]} | " + " | ".join(cells) + " |")
    return lines


def phase(
    bootstrap: str | None, workdir: Path, quick: bool = False, _cleanup: object = None
) -> dict[str, Any]:
    """run_all's ``fairness_scenarios`` phase: the core's runs, and the broker's subset
    when ``bootstrap`` is given, with dominant-resource fairness beside cost alone
    (``benchmarks.dominant``; ``quick`` changes nothing: the scenarios are small)."""
    result: dict[str, Any] = {"status": "ok", "core": core_results(), "e2e": None}
    if bootstrap is not None:
        from benchmarks.dominant import run_drf
        from benchmarks.fairness_e2e import run_e2e

        result["e2e"] = run_e2e(bootstrap, workdir)
        result["drf"] = run_drf(bootstrap, workdir)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--core-only", action="store_true", help="no broker: the core only")
    parser.add_argument("--update-doc", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument("--write-traces", type=Path, help="write the traces for simulate here")
    args = parser.parse_args()
    if args.write_traces:
        print("\n".join(write_traces(args.write_traces)))
    from benchmarks.fairness_doc import section, update_doc

    if args.core_only:
        result = phase(None, Path("."))
    else:
        from benchmarks.common import Broker

        broker = Broker.find(args.bootstrap)
        try:
            result = phase(broker.bootstrap, Path(tempfile.mkdtemp(prefix="fairstream-fair-")))
        finally:
            broker.stop()
    text = section(result)
    print(text)
    if args.update_doc:
        update_doc(text)


if __name__ == "__main__":
    main()
