"""``fairstream simulate`` with concurrency slots (``--max-concurrency``, a record's
``hold``) and tenant groups (``--tenant-group-separator``, a record's ``group``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fairstream.cli import main
from fairstream.cli.simulate import parse_trace, replay


def lines(*records: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def run(args: list[str], stdin: str):
    return CliRunner().invoke(main, ["simulate", *args], input=stdin)


def departures(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_slots_bound_the_replay_without_a_rate():
    # Two slots, every request holds one for 1 s: two depart at 0, two at 1, two at 2.
    trace = lines(*({"t": 0, "tenant": "A", "id": f"a{i}", "hold": 1} for i in range(6)))
    result = run(["--trace", "-", "--max-concurrency", "2"], stdin=trace)
    assert result.exit_code == 0, result.output
    assert [d["t_departure"] for d in departures(result.stdout)] == [0, 0, 1, 1, 2, 2]


def test_a_short_hold_gives_its_slot_back_first():
    trace = lines(
        {"t": 0, "tenant": "A", "id": "long", "hold": 10},
        {"t": 0, "tenant": "A", "id": "short", "hold": 2},
        {"t": 0, "tenant": "A", "id": "next", "hold": 1},
    )
    out = departures(run(["--trace", "-", "--max-concurrency", "2"], stdin=trace).stdout)
    assert [(d["id"], d["t_departure"]) for d in out] == [("long", 0), ("short", 0), ("next", 2)]


def test_slots_go_by_weight_among_backlogged_tenants():
    trace = lines(
        *({"t": 0, "tenant": "A", "id": f"a{i}", "hold": 1} for i in range(8)),
        *({"t": 0, "tenant": "B", "id": f"b{i}", "hold": 1} for i in range(8)),
    )
    result = run(["--trace", "-", "--max-concurrency", "4", "--weights", "A=3"], stdin=trace)
    first_eight = [d["tenant"] for d in departures(result.stdout)[:8]]
    assert first_eight.count("A") == 6


def test_rate_and_slots_together():
    # --rate 10 alone would send one every 0.1 s; one slot held 1 s binds first.
    trace = lines(*({"t": 0, "tenant": "A", "id": f"a{i}", "hold": 1} for i in range(3)))
    result = run(["--trace", "-", "--rate", "10", "--max-concurrency", "1"], stdin=trace)
    assert [d["t_departure"] for d in departures(result.stdout)] == [0, 1, 2]


def test_neither_rate_nor_slots_is_a_usage_error():
    result = run(["--trace", "-"], stdin=lines({"t": 0, "tenant": "A", "id": "a"}))
    assert result.exit_code == 2
    assert "--rate, --max-concurrency or both" in result.stderr
    with pytest.raises(ValueError, match="rate, a concurrency limit"):
        list(replay(parse_trace([])))


def _split_org() -> str:
    """An organisation spreading 30 records over three ids, and one solo tenant of 10."""
    return lines(
        *({"t": 0, "tenant": f"org/u{i % 3}", "id": f"o{i}"} for i in range(30)),
        *({"t": 0, "tenant": "solo", "id": f"s{i}"} for i in range(10)),
    )


def test_the_separator_gives_an_organisation_one_share():
    flat = departures(run(["--trace", "-", "--rate", "10"], stdin=_split_org()).stdout)
    grouped = departures(
        run(
            ["--trace", "-", "--rate", "10", "--tenant-group-separator", "/"], stdin=_split_org()
        ).stdout
    )
    # Flat: four tenant ids, solo gets a quarter; grouped: org and solo halves.
    assert [d["tenant"] for d in flat[:20]].count("solo") == 5
    assert [d["tenant"] for d in grouped[:20]].count("solo") == 10
    # Inside the group its ids go round robin.
    org = [d["tenant"] for d in grouped if d["tenant"] != "solo"][:6]
    assert sorted(org) == ["org/u0", "org/u0", "org/u1", "org/u1", "org/u2", "org/u2"]


def test_a_trace_group_column_groups_without_a_separator():
    trace = lines(
        *({"t": 0, "tenant": f"u{i % 4}", "id": f"o{i}", "group": "org"} for i in range(20)),
        *({"t": 0, "tenant": "solo", "id": f"s{i}"} for i in range(10)),
    )
    out = departures(run(["--trace", "-", "--rate", "10"], stdin=trace).stdout)
    assert [d["tenant"] for d in out[:10]].count("solo") == 5


def test_group_weights_in_the_replay_api():
    arrivals = parse_trace(_split_org().splitlines())
    out = list(replay(arrivals, rate=10, group_separator="/", group_weights={"org": 3}))
    assert [d.tenant for d in out[:20]].count("solo") == 5


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"hold": -1}, "'hold' must be a finite number >= 0"),
        ({"hold": "1"}, "'hold' must be a finite number >= 0"),
        ({"hold": True}, "'hold' must be a finite number >= 0"),
        ({"group": ""}, "'group' must be a non-empty string"),
        ({"group": 3}, "'group' must be a non-empty string"),
    ],
)
def test_bad_hold_or_group(record: dict[str, object], message: str):
    trace = lines({"t": 0, "tenant": "A", "id": "a", **record})
    result = run(["--trace", "-", "--max-concurrency", "1"], stdin=trace)
    assert result.exit_code == 2
    assert message in result.stderr


def test_with_groups_the_summary_judges_groups_and_ungrouped_tenants():
    result = run(
        ["--trace", "-", "--rate", "10", "--tenant-group-separator", "/"], stdin=_split_org()
    )
    rows = {
        line.split()[0] + (" " + line.split()[1] if line.startswith("group ") else ""): line
        for line in result.stderr.splitlines()[1:-1]
    }
    assert set(rows) == {"org/u0", "org/u1", "org/u2", "solo", "group org"}
    assert rows["group org"].split()[3] == "30"  # the members' records together
    assert rows["org/u0"].split()[-1] == "-"  # a member is judged within its group's share
    # org and solo were both backlogged while solo's 10 went: each got half, as fair.
    assert rows["solo"].split()[-1] == "1.000"
    assert rows["group org"].split()[-1] == "1.000"
    assert "over 2 backlogged groups and ungrouped tenants: 1.0000" in result.stderr


def test_departures_name_their_group():
    arrivals = parse_trace(_split_org().splitlines())
    out = list(replay(arrivals, rate=10, group_separator="/"))
    assert {d.tenant: d.group for d in out} == {
        "org/u0": "org",
        "org/u1": "org",
        "org/u2": "org",
        "solo": None,
    }
