"""trigger.dev's fairness scenarios (PR 4353) re-run on fairstream, beside its published figures.

trigger.dev's fair-queueing spike ranked dequeue disciplines on a logical clock: each
scenario's tenants submit runs (all at once, or Poisson), ``concurrency`` slots serve them,
each run holds its slot for an exponential time (mean ``hold_mean`` ticks, at least 1).
Its scenarios (``fairness-spike/harness/scenarios.ts`` and, for the concurrency-key ones,
``fairness-spike-ck/capsFairness.bench.test.ts`` at commit 1afa1476df, the revision whose
CAPS_FINDINGS.md holds the published figures) are rebuilt with the same parameters in
``benchmarks.fairness_workloads``. Five of them:

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
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.fairness_workloads import (
    MODES,
    SCENARIOS,
    SEPARATOR,
    Scenario,
    arrivals,
    measure,
    tenant_of,
)
from fairstream.analysis.contention import Service
from fairstream.analysis.reference import Arrival
from fairstream.cli.simulate import replay

SEEDS = ("seed-a", "seed-b", "seed-c")  # the study's three seeds (its draws are not ours)


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
