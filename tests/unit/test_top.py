"""``fairstream top``'s arithmetic: rates, shares and entitlements from two snapshots."""

from __future__ import annotations

from fairstream.cli.top import compute_rows, feedback_of, instances_of, render, table


def snap(*tenants: dict[str, object]) -> dict[str, object]:
    return {"ready": True, "backlog": sum(t["backlog"] for t in tenants), "tenants": list(tenants)}  # type: ignore[misc]


def tenant(
    name: str, emitted: int, backlog: int, weight: float = 1, **extra: object
) -> dict[str, object]:
    return {
        "tenant": name,
        "emitted": emitted,
        "backlog": backlog,
        "weight": weight,
        "priority": 0,
        "paused": False,
        "rate_cap": None,
        "dwell_p99": 0.25,
        **extra,
    }


def test_rates_shares_and_entitlements_across_instances() -> None:
    before = [snap(tenant("a", 100, 50, weight=3)), snap(tenant("b", 10, 50))]
    after = [snap(tenant("a", 130, 40, weight=3)), snap(tenant("b", 20, 45))]
    rows = {r.tenant: r for r in compute_rows(before, after, 2.0)}
    assert rows["a"].emitted_per_s == 15.0
    assert rows["b"].emitted_per_s == 5.0
    assert rows["a"].share == 0.75
    assert rows["a"].entitlement == 0.75
    assert rows["b"].entitlement == 0.25
    assert rows["a"].state == "backlogged"


def test_paused_capped_idle_and_new_tenants() -> None:
    before = [snap(tenant("capped", 0, 9, rate_cap=5.0), tenant("p", 0, 3, paused=True))]
    after = [
        snap(
            tenant("capped", 10, 9, rate_cap=5.0),
            tenant("p", 0, 3, paused=True),
            tenant("idle", 4, 0),
            tenant("new", 7, 0),
        )
    ]
    rows = {r.tenant: r for r in compute_rows(before, after, 2.0)}
    assert rows["capped"].state == "capped"
    assert rows["p"].state == "paused"
    assert rows["p"].entitlement is None, "a paused tenant is entitled to nothing"
    assert rows["capped"].entitlement == 1.0
    assert rows["idle"].state == "idle"
    assert rows["new"].emitted_per_s == 0.0, "no earlier count: no rate yet"


def test_a_scheduler_that_does_not_answer_is_counted() -> None:
    after = [snap(tenant("a", 1, 1)), None]
    rows = compute_rows([None, None], after, 1.0)
    text = render(rows, after, ["http://x:1", "http://y:2"]).splitlines()[0]
    assert "1/2 schedulers answering" in text


def test_instances_merge_the_freshest_report_of_each() -> None:
    row = {"partitions": [0], "demand_weight": 1.0, "capped_tenants": 0, "rate_share": 100.0}
    a = {**row, "instance": "a", "report_age_s": 0.5}
    b = {**row, "instance": "b", "report_age_s": 0.2, "partitions": [1]}
    stale_b = {**b, "report_age_s": 1.4, "rate_share": 5.0}
    snapshots = [
        {"backlog": 0, "tenants": [], "instances": [a, stale_b]},
        {"backlog": 0, "tenants": [], "instances": [a, b]},
        None,
    ]
    merged = instances_of(snapshots)
    assert [i["instance"] for i in merged] == ["a", "b"]
    assert merged[1]["rate_share"] == 100.0
    assert instances_of([{"tenants": []}, None]) == []
    render([], snapshots, ["u1", "u2", "u3"])  # renders the instances table without error


def adaptive(rate: float, limited: int, held: float = 0.0) -> dict[str, float]:
    return {
        "rate": rate,
        "ceiling": 1000.0,
        "floor": 10.0,
        "held_for_s": held,
        "rate_limited_total": limited,
    }


def test_the_adaptive_rate_and_429s_per_second() -> None:
    before = [None, {**snap(), "adaptive": adaptive(900.0, 10)}]
    after = [snap(), {**snap(), "adaptive": adaptive(310.0, 50, held=0.4)}]
    feedback = feedback_of(before, after, 2.0)
    assert feedback is not None
    assert feedback.rate == 310.0
    assert feedback.rate_limited_per_s == 20.0
    header = render([], after, ["http://x:1", "http://y:2"], feedback).splitlines()[1]
    assert header == "adaptive rate 310.0/s of --rate 1000, held 0.4 s, 20.0 429s/s reported"


def test_no_feedback_topic_no_feedback_line() -> None:
    assert feedback_of([snap()], [snap()], 1.0) is None
    assert "adaptive" not in render([], [snap()], ["http://x:1"])


def test_measured_against_declared_cost_per_tenant() -> None:
    before = [snap(tenant("heavy", 0, 5), tenant("light", 0, 5))]
    after = [
        snap(
            tenant("heavy", 10, 5, cost_declared=10, cost_reported=100),
            tenant("light", 10, 5, cost_declared=10, cost_reported=10),
            tenant("nofeedback", 3, 0),
        )
    ]
    rows = compute_rows(before, after, 1.0)
    by = {r.tenant: r for r in rows}
    assert (by["heavy"].cost_declared, by["heavy"].cost_reported) == (10, 100)
    assert by["nofeedback"].cost_reported is None
    lines = render(rows, after, ["http://x:1"]).splitlines()
    header = next(line for line in lines if line.startswith("tenant"))
    assert header.endswith("cost measured/declared")
    costs = {
        line.split()[0]: line.rsplit("  ", 1)[1].strip()
        for line in lines[lines.index(header) + 1 :]
    }
    assert costs == {"heavy": "100/10 (10.00x)", "light": "10/10 (1.00x)", "nofeedback": "-"}


def test_the_table_aligns_its_columns() -> None:
    lines = table([("tenant", "<"), ("out/s", ">")], [("a", "1.0"), ("long-name", "100.5")])
    assert lines == ["tenant     out/s", "a            1.0", "long-name  100.5"]
    text = render(
        compute_rows([snap(tenant("a", 0, 1))], [snap(tenant("a", 10, 1))], 1.0),
        [snap(tenant("a", 10, 1))],
        ["http://x:1"],
    )
    assert text.splitlines()[2].split() == [
        "tenant",
        "state",
        "weight",
        "backlog",
        "out/s",
        "share",
        "entitled",
        "dwell",
        "p99",
    ]
    assert text.splitlines()[3].split() == [
        "a",
        "backlogged",
        "1",
        "1",
        "10.0",
        "100%",
        "100%",
        "250",
        "ms",
    ]


def group(name: str, emitted: int, backlog: int, *members: dict[str, object], weight: float = 1):
    return {
        "group": name,
        "weight": weight,
        "priority": 0,
        "paused": False,
        "rate_cap": None,
        "backlog": backlog,
        "emitted": emitted,
        "members": list(members),
    }


def grouped(groups: list[dict[str, object]], *tenants: dict[str, object]) -> dict[str, object]:
    return {**snap(*tenants), "groups": groups}


def test_the_groups_tree_across_instances() -> None:
    """Group acme's two users live on two instances; its rate is their sum, its entitlement
    is among acme and the ungrouped solo, and its users' within acme (weights 3:1)."""
    alice = tenant("acme/alice", 0, 100, weight=3, group="acme")
    bob = tenant("acme/bob", 0, 100, group="acme")
    solo = tenant("solo", 0, 100)
    before = [
        grouped([group("acme", 0, 100, alice)], alice, solo),
        grouped([group("acme", 0, 100, bob)], bob),
    ]
    alice2, bob2 = {**alice, "emitted": 30}, {**bob, "emitted": 10}
    after = [
        grouped([group("acme", 30, 100, alice2)], alice2, {**solo, "emitted": 40}),
        grouped([group("acme", 10, 100, bob2)], bob2),
    ]
    rows = compute_rows(before, after, 2.0)
    assert [(r.kind, r.tenant) for r in rows] == [
        ("group", "acme"),
        ("member", "acme/alice"),
        ("member", "acme/bob"),
        ("tenant", "solo"),
    ]
    acme, a, b, s = rows
    assert (acme.emitted_per_s, acme.backlog, acme.share, acme.entitlement) == (20.0, 200, 0.5, 0.5)
    assert (a.share, a.entitlement, a.group) == (0.75, 0.75, "acme")
    assert (b.share, b.entitlement) == (0.25, 0.25)
    assert (s.share, s.entitlement, s.group) == (0.5, 0.5, None)
    text = render(rows, after, ["a", "b"])
    assert "acme (group)" in text
    assert "  acme/alice" in text
    assert "within the group" in text
    assert "40.0 records/s out" in text  # a group's and its members' records counted once


def test_without_groups_the_rows_are_flat() -> None:
    rows = compute_rows([snap(tenant("a", 0, 5))], [snap(tenant("a", 4, 5))], 1.0)
    assert [(r.kind, r.group) for r in rows] == [("tenant", None)]


def test_budgets_show_the_tightest_and_a_tenant_waiting_for_one() -> None:
    def budget(scope: str, text: str, limit: int, spent: int) -> dict[str, object]:
        return {
            "scope": scope,
            "budget": text,
            "limit": limit,
            "spent": spent,
            "remaining": max(0, limit - spent),
            "resets_at_ms": 0,
            "on_exhausted": "wait",
        }

    before = [snap(tenant("a", 0, 5), tenant("b", 0, 5))]
    after = [
        snap(
            tenant(
                "a",
                10,
                5,
                budgets=[budget("a", "1000/day", 1000, 1000), budget("a", "50/minute", 50, 3)],
                budget_waiting=True,
            ),
            tenant("b", 10, 5, budgets=[budget("group:org", "100/hour", 100, 40)]),
            tenant("c", 1, 0),
        )
    ]
    rows = {r.tenant: r for r in compute_rows(before, after, 1.0)}
    assert rows["a"].state == "budget"
    assert rows["a"].budget == "1000/1000/day"
    assert rows["b"].budget == "40/100/hour (group:org)"
    assert rows["c"].budget is None
    lines = render(list(rows.values()), after, ["http://x:1"]).splitlines()
    header = next(line for line in lines if line.startswith("tenant"))
    assert header.endswith("budget spent/limit")


def test_records_waiting_in_the_log_show_beside_the_backlog_in_memory() -> None:
    # A tenant far behind: part of its backlog waits in the ingest log (``in_log``), and its
    # memory backlog may even be empty between two reads; it is still backlogged, entitled.
    far = tenant("far", 100, 0, in_log=40_000)
    near = tenant("near", 10, 5, in_log=0)
    before = [snap(tenant("far", 90, 0, in_log=41_000), tenant("near", 5, 5))]
    after = [{**snap(far, near), "in_log": 40_000}]
    rows = {r.tenant: r for r in compute_rows(before, after, 1.0)}
    assert rows["far"].state == "backlogged"
    assert rows["far"].entitlement == 0.5
    assert rows["far"].in_log == 40_000
    text = render(list(rows.values()), after, ["http://a"])
    assert "5 records buffered, 40000 waiting in the ingest log" in text
    header = text.splitlines()[2]
    assert header.split()[:5] == ["tenant", "state", "weight", "backlog", "in"]
    assert "40000" in next(line for line in text.splitlines() if line.startswith("far"))


def test_no_column_for_the_log_while_nothing_waits_there() -> None:
    after = [snap(tenant("a", 1, 1))]
    text = render(compute_rows(after, after, 1.0), after, ["http://a"])
    assert "in log" not in text
    assert "waiting in the ingest log" not in text
