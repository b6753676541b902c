"""benchmarks.fairness_scenarios: the rebuilt trigger.dev scenarios, their runs through the
core, and the "Fairness scenarios" section of docs/benchmarks.md (no broker)."""

from __future__ import annotations

import itertools
import json
import shlex
from collections import Counter

import pytest
from click.testing import CliRunner

from benchmarks.fairness_doc import HEADING, PUBLISHED, section, table, with_section
from benchmarks.fairness_scenarios import run_core, simulate_command, write_traces
from benchmarks.fairness_workloads import MODES, SCENARIOS, arrivals, measure, tenant_of
from fairstream.cli import main as cli_main

BY_NAME = {s.name: s for s in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_run_arrives_sorted_with_its_hold(scenario):
    trace = arrivals(scenario, "seed-a")
    owner = tenant_of(scenario)
    counts = Counter(owner[a.tenant] for a in trace)
    assert counts == {t.name: t.runs for t in scenario.tenants}
    assert [a.t for a in trace] == sorted(a.t for a in trace)
    assert all(a.hold >= 1 and a.hold == int(a.hold) for a in trace)
    assert len({a.id for a in trace}) == len(trace)


def test_seeds_decide_the_draws_and_the_same_seed_the_same_trace():
    skew = BY_NAME["key-splitting"]
    assert arrivals(skew, "seed-a") == arrivals(skew, "seed-a")
    assert arrivals(skew, "seed-a") != arrivals(skew, "seed-b")


def test_keys_follow_the_scenario():
    skew = arrivals(BY_NAME["adversarial skew"], "seed-a")
    heavy_keys = {a.tenant for a in skew if a.tenant.startswith("heavy")}
    assert heavy_keys == {f"heavy/{i}" for i in range(30)}
    split = {a.tenant for a in arrivals(BY_NAME["key-splitting, 100 ids"], "seed-a")}
    assert len(split) == 101
    assert "light" in split
    assert all(k.startswith("org/") for k in split - {"light"})


def test_poisson_tenants_arrive_spread_out_and_bulk_ones_at_once():
    trace = arrivals(BY_NAME["trickle"], "seed-a")
    bulk = [a.t for a in trace if a.tenant == "bulk"]
    trickle = [a.t for a in trace if a.tenant == "trickle-1"]
    assert set(bulk) == {0}
    assert trickle[0] == 0
    # 29 gaps of mean 40 ticks: far from 0, and each at least a tick.
    assert 400 < trickle[-1] < 2500
    assert all(b > a for a, b in itertools.pairwise(trickle))


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_serves_every_run_within_the_slots(mode):
    scenario = BY_NAME["weighted"]
    services = run_core(scenario, "seed-a", mode)
    assert len(services) == sum(t.runs for t in scenario.tenants)
    assert all(s.served >= s.arrived for s in services)


def test_fifo_serves_the_earlier_tie_first_and_starves_the_light_tenants():
    m = measure(
        BY_NAME["adversarial skew"], run_core(BY_NAME["adversarial skew"], "seed-a", "fifo")
    )
    assert m["worst"] == 0.0


def test_groups_give_the_organisation_its_share_not_one_per_id():
    scenario = BY_NAME["key-splitting, 100 ids"]
    drr = measure(scenario, run_core(scenario, "seed-a", "drr"))
    groups = measure(scenario, run_core(scenario, "seed-a", "groups"))
    assert drr["org_worst"] < 0.1  # light takes most: 1 share of 101 is the org's 100
    assert groups["org_worst"] == pytest.approx(1.0, abs=0.05)
    assert groups["light_wait"] < drr["light_wait"] / 10


def test_heavy_idle_is_work_conserving_in_every_mode():
    scenario = BY_NAME["heavy-idle"]
    spans = {m: measure(scenario, run_core(scenario, "seed-a", m))["makespan"] for m in MODES}
    assert len(set(spans.values())) == 1


def test_weighted_drr_honours_the_weights():
    scenario = BY_NAME["weighted"]
    assert measure(scenario, run_core(scenario, "seed-a", "drr"))["worst"] > 0.95


def test_the_table_puts_published_figures_beside_ours():
    core = {"weighted": {"drr": {"worst": 0.5}}}
    rows = table(core, {"weighted": {"drr": {"worst": 0.25}}})
    weighted = next(r for r in rows if r.startswith("| weighted | worst"))
    cells = [c.strip() for c in weighted.strip("|").split("|")]
    assert cells[2:6] == ["0.703", "-", "1.000", "0.990"]
    assert cells[6:] == ["-", "0.500", "-", "0.250", "-"]
    assert all(name in BY_NAME for name, _ in PUBLISHED)


def test_the_section_replaces_an_older_one_or_goes_before_raw_results():
    text = section({"status": "ok", "core": {}, "e2e": None})
    assert text.startswith(HEADING)
    doc = "# Benchmarks\n\n## Results\n\nx\n\n## Raw results\n\n{}\n"
    once = with_section(doc, text)
    assert once.index(HEADING) < once.index("## Raw results")
    assert with_section(once, text) == once
    newer = with_section(once, HEADING + "\n\nnewer\n")
    assert "newer" in newer
    assert newer.count(HEADING) == 1
    assert "## Raw results" in newer
    assert "The phase failed" in section({"status": "error", "error": "boom"})


@pytest.mark.parametrize("mode", ["drr", "groups"])
def test_fairstream_simulate_replays_a_written_trace_as_the_benchmark_does(tmp_path, mode):
    scenario = BY_NAME["key-splitting"]
    command = next(
        c
        for c in write_traces(tmp_path)
        if "key-splitting.jsonl" in c and (("--tenant-group-separator" in c) == (mode == "groups"))
    )
    args = shlex.split(command)[2:]  # after "fairstream simulate"
    result = CliRunner().invoke(cli_main, ["simulate", *args])
    assert result.exit_code == 0, result.output
    cli = [json.loads(line) for line in result.stdout.splitlines()]
    owner = tenant_of(scenario)
    ours = run_core(scenario, "seed-a", mode)
    assert [(owner[d["tenant"]], d["t_departure"]) for d in cli] == [
        (s.group, s.served) for s in ours
    ]


def test_weights_reach_the_simulate_command():
    command = simulate_command(BY_NAME["weighted"], "w.jsonl", "drr")
    assert command.endswith("--max-concurrency 4 --weights big=3")
