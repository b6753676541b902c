"""/tenants' entitlements: by weight among the tenants waiting for a share, per class; and what
/metrics reads of the emitter (a scrape, copied on its thread)."""

from __future__ import annotations

import pytest

from fairstream.adapters.tenant_series import OTHER
from fairstream.core import FairScheduler, ManualClock
from fairstream.scheduler.observe import (
    Observed,
    add_shares,
    backlog_top,
    entitlements,
    tenant_state,
)
from tests.unit.scheduler.parts import commit


def row(tenant, backlog, rate, weight=1.0, priority=0, paused=False, cap=None):
    return {
        "tenant": tenant,
        "backlog": backlog,
        "rate": rate,
        "weight": weight,
        "priority": priority,
        "paused": paused,
        "rate_cap": cap,
    }


def test_waiting_tenants_are_entitled_by_weight_and_quiet_ones_not():
    rows = [
        row("bulk", 900, 20.0, weight=2),
        row("noisy", 800, 10.0),
        row("quiet", 1, 2.0),  # one record in hand: it drains at once
        row("idle", 0, 0.0),
    ]
    entitlements(rows)
    by = {r["tenant"]: r for r in rows}
    assert by["bulk"]["entitlement"] == pytest.approx(2 / 3)
    assert by["noisy"]["entitlement"] == pytest.approx(1 / 3)
    assert by["bulk"]["backlogged_share"] == pytest.approx(2 / 3)
    assert by["quiet"]["entitlement"] is None
    assert by["idle"]["backlogged_share"] is None


def test_classes_paused_tenants_and_new_arrivals():
    rows = [
        row("urgent", 100, 30.0, priority=0),
        row("batch-a", 100, 0.0, priority=1),
        row("batch-b", 300, 0.0, priority=1, weight=3),
        row("paused", 500, 0.0, paused=True),
        row("new", 50, 0.0),  # just arrived: no rate yet, but waiting
    ]
    entitlements(rows)
    by = {r["tenant"]: r for r in rows}
    assert by["urgent"]["entitlement"] == pytest.approx(0.5)
    assert by["new"]["entitlement"] == pytest.approx(0.5)
    assert by["batch-a"]["entitlement"] == pytest.approx(0.25)
    assert by["batch-b"]["entitlement"] == pytest.approx(0.75)
    assert by["batch-a"]["backlogged_share"] is None  # its class received nothing
    assert by["paused"]["entitlement"] is None


def test_states():
    assert tenant_state(row("a", 5, 1.0, paused=True), 1.0) == "paused"
    assert tenant_state(row("a", 5, 2.0, cap=2.0), 2.0) == "capped"
    assert tenant_state(row("a", 5, 1.0, cap=2.0), 1.0) == "backlogged"
    assert tenant_state(row("a", 0, 0.0), 0.0) == "idle"


def test_a_scrape_is_a_copy_the_emitter_goes_on_without():
    """/metrics reads the emitter's numbers from a scrape (taken on its thread), never its
    live dicts: what the emitter does next does not show in (or break) a scrape."""
    core: FairScheduler[int] = FairScheduler(clock=ManualClock())
    core.push("a", 1)
    core.push("a", 2)
    observed = Observed()
    commit(observed, {"a": 3})
    observed.cost("a", 2, 5)
    scrape = observed.scrape(core, in_flight=7, payload_bytes=64)
    commit(observed, {"a": 1, "b": 1})
    observed.cost("a", 2, 9)
    core.push("b", 3)
    assert scrape.backlog_by_tenant == {"a": 2, OTHER: 0}
    assert scrape.emitted_by_tenant == {"a": 3}
    assert scrape.cost_by_tenant == {"a": [2, 5]}
    assert (scrape.backlog, scrape.in_flight, scrape.payload_bytes) == (2, 7, 64)


def test_shares_states_and_entitlements_are_added_to_the_rows():
    rows = [row("a", 50, 1.0), row("b", 0, 1.0)]
    add_shares(rows, {"a": 30.0, "b": 10.0}, 40.0)
    assert [(r["rate"], r["share"], r["state"]) for r in rows] == [
        (30.0, 0.75, "backlogged"),
        (10.0, 0.25, "idle"),
    ]
    assert rows[0]["entitlement"] == 1.0
    assert rows[1]["entitlement"] is None


def test_a_tenant_far_behind_is_backlogged_and_entitled_while_its_memory_backlog_is_empty():
    # Its records wait in the ingest log (``in_log``), read again nearer its turn: between
    # two reads its backlog in memory can be empty, and it still waits for its share.
    far = {**row("far", 0, 10.0), "in_log": 40_000}
    rows = [far, row("busy", 900, 10.0), {**row("done", 0, 10.0), "in_log": 0}]
    add_shares(rows, {"far": 10.0, "busy": 10.0, "done": 10.0}, 30.0)
    by = {r["tenant"]: r for r in rows}
    assert by["far"]["state"] == "backlogged"
    assert by["far"]["entitlement"] == pytest.approx(0.5)
    assert by["busy"]["entitlement"] == pytest.approx(0.5)
    assert by["done"]["state"] == "idle"
    assert by["done"]["entitlement"] is None


def test_with_tenant_groups_each_row_says_its_group():
    from fairstream.core import GroupScheduler
    from fairstream.scheduler.policies.tenant_groups import by_separator

    clock = ManualClock()
    flat: FairScheduler[int] = FairScheduler(clock)
    flat.push("acme/alice", 1)
    [only] = Observed().tenant_stats(flat, 10, ready=True, partitions=[0], rate_limit=None)[
        "tenants"
    ]
    assert "group" not in only  # no groups: the rows as before
    grouped: GroupScheduler[int] = GroupScheduler(clock, group_of=by_separator("/"))
    grouped.push("acme/alice", 1)
    grouped.push("solo", 2)
    grouped.set_group("solo", "globex")
    grouped.push("loner", 3)
    stats = Observed().tenant_stats(grouped, 10, ready=True, partitions=[0], rate_limit=None)
    assert {r["tenant"]: r["group"] for r in stats["tenants"]} == {
        "acme/alice": "acme",
        "solo": "globex",
        "loner": None,
    }


def test_a_scrape_names_the_largest_backlogs_and_sums_the_rest() -> None:
    # A copy of every backlog was a dict of a million entries at each scrape refresh: the
    # scrape keeps the largest (what the metrics name) and the others' sum.
    core: FairScheduler[int] = FairScheduler(ManualClock())
    for i in range(300):
        for _ in range(i % 7 + 1):
            core.push(f"t{i}", i)
    core.push(OTHER, 0)  # a tenant of that name counts with the others
    top = backlog_top(core, 10)
    assert len(top) == 11
    assert sum(top.values()) == len(core)
    named = {t: n for t, n in top.items() if t != OTHER}
    assert min(named.values()) == 7
    assert all(core.backlog(t)[0] == n for t, n in named.items())


def test_a_probe_shares_the_load_of_tenants_alike() -> None:
    # The auditor keeps a probe's loads for a whole window: a million one-record tenants of
    # the default policy share one tuple, and a tenant unlike them has its own.
    core: FairScheduler[int] = FairScheduler(ManualClock())
    for i in range(100):
        core.push(f"t{i}", i)
    core.push("big", 1)
    core.push("big", 2)
    loads = Observed().probe(core, 5, backlogged=True).backlogged
    assert loads is not None
    assert len({id(loads[f"t{i}"]) for i in range(100)}) == 1
    assert loads["t0"] == (1, 1.0, 0, False, None)
    assert loads["big"] == (2, 1.0, 0, False, None)
