"""``fairstream simulate`` end to end through click, and its parsing helpers."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fairstream.cli import main
from fairstream.cli.simulate import Arrival, parse_trace, replay, simulate
from fairstream.cli.weights import parse_weights


def lines(*records: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


REFERENCE = lines(
    *({"t": 0.0, "tenant": "A", "id": f"A{i}"} for i in range(10)),
    {"t": 0.25, "tenant": "B", "id": "B1"},
    {"t": 0.25, "tenant": "C", "id": "C1", "cost": 1},
)


def run(args: list[str], stdin: str | None = None, env: dict[str, str] | None = None):
    runner = CliRunner()
    return runner.invoke(main, ["simulate", *args], input=stdin, env=env)


def departures(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_reference_trace_from_stdin():
    result = run(["--trace", "-", "--rate", "10"], stdin=REFERENCE)
    assert result.exit_code == 0, result.output
    out = departures(result.stdout)
    assert [d["id"] for d in out][:6] == ["A0", "A1", "A2", "A3", "B1", "C1"]
    assert out[0] == {"id": "A0", "tenant": "A", "t_arrival": 0.0, "t_departure": 0.0}
    # One record every 0.1 s; B1 and C1 arrived at 0.25 and go in the next two slots
    # after A3 (which took the 0.3 slot: A was at the head of the ring).
    assert [d["t_departure"] for d in out] == pytest.approx([i / 10 for i in range(12)])
    assert out[4]["t_departure"] == pytest.approx(0.4)
    assert len(out) == 12
    assert "A0" not in result.stderr


def test_summary_on_stderr():
    result = run(["--trace", "-", "--rate", "10"], stdin=REFERENCE)
    summary = result.stderr.splitlines()
    assert summary[0].split() == [
        "tenant",
        "weight",
        "count",
        "dwell_p50",
        "dwell_p99",
        "dwell_max",
        "fair_share",
    ]
    rows = {line.split()[0]: line.split() for line in summary[1:4]}
    assert rows["A"][2] == "10"
    assert rows["A"][5] == "1.100"  # A9 left at 1.1 s
    assert rows["B"][2] == "1"
    assert rows["B"][3] == "0.150"  # arrived 0.25, left 0.4
    assert "Jain's index over 3 backlogged tenants" in summary[-1]


def test_weights_burst_and_quantum(tmp_path: Path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        lines(
            *({"t": 0, "tenant": "heavy", "id": f"h{i}"} for i in range(6)),
            *({"t": 0, "tenant": "light", "id": f"l{i}"} for i in range(6)),
        )
    )
    result = run(["--trace", str(trace), "--rate", "2", "--burst", "4", "--weights", "heavy=2"])
    assert result.exit_code == 0, result.output
    out = departures(result.stdout)
    assert [d["id"] for d in out][:6] == ["h0", "h1", "l0", "h2", "h3", "l1"]
    # Four back to back (the burst), then one every 0.5 s.
    assert [d["t_departure"] for d in out][:6] == [0, 0, 0, 0, 0.5, 1.0]


def test_costs_and_quantum():
    trace = lines(
        {"t": 0, "tenant": "big", "id": "b0", "cost": 4},
        *({"t": 0, "tenant": "small", "id": f"s{i}"} for i in range(4)),
    )
    result = run(["--trace", "-", "--rate", "100", "--quantum", "2"], stdin=trace)
    assert [d["id"] for d in departures(result.stdout)] == ["s0", "s1", "b0", "s2", "s3"]


def test_options_from_environment(tmp_path: Path):
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"B": 3}))
    trace = lines(
        *({"t": 0, "tenant": "A", "id": f"a{i}"} for i in range(4)),
        *({"t": 0, "tenant": "B", "id": f"b{i}"} for i in range(4)),
    )
    env = {"FAIRSTREAM_SIMULATE_RATE": "4", "FAIRSTREAM_SIMULATE_WEIGHTS": str(weights)}
    result = run(["--trace", "-"], stdin=trace, env=env)
    assert result.exit_code == 0, result.output
    assert [d["id"] for d in departures(result.stdout)][:5] == ["a0", "b0", "b1", "b2", "a1"]


def test_help_shows_env_vars():
    result = run(["--help"])
    assert result.exit_code == 0
    for name in ("TRACE", "RATE", "BURST", "WEIGHTS", "QUANTUM"):
        assert f"FAIRSTREAM_SIMULATE_{name}" in result.output


def test_empty_trace():
    result = run(["--trace", "-", "--rate", "1"], stdin="\n")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no arrivals" in result.stderr


def test_idle_gap_jumps_clock():
    trace = lines({"t": 5, "tenant": "A", "id": "x"}, {"t": 100, "tenant": "A", "id": "y"})
    out = departures(run(["--trace", "-", "--rate", "1"], stdin=trace).stdout)
    assert [d["t_departure"] for d in out] == [5, 100]


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        ('{"t": 0, "tenant": "A", "id": "x"}\nnot json\n', "line 2: not valid JSON"),
        ("[1, 2]\n", "line 1: expected a JSON object"),
        ('{"tenant": "A", "id": "x"}\n', "line 1: 't' must be a finite number"),
        ('{"t": -1, "tenant": "A", "id": "x"}\n', "line 1: 't' must not be negative"),
        ('{"t": 0, "tenant": "", "id": "x"}\n', "line 1: 'tenant' must be a non-empty string"),
        ('{"t": 0, "tenant": "A", "id": 7}\n', "line 1: 'id' must be a string"),
        ('{"t": 0, "tenant": "A", "id": "x", "cost": 0}\n', "line 1: 'cost' must be a positive"),
        (
            '{"t": 2, "tenant": "A", "id": "x"}\n\n{"t": 1, "tenant": "A", "id": "y"}\n',
            "line 3: t=1 is earlier than t=2 on line 1; the trace must be sorted by t",
        ),
    ],
)
def test_malformed_trace_errors(trace, message):
    result = run(["--trace", "-", "--rate", "1"], stdin=trace)
    assert result.exit_code == 2
    assert "Invalid value for '--trace'" in result.stderr
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("A=0", "weight of 'A' must be a positive number"),
        ("A=x", "weight of 'A' must be a number"),
        ("A=2,B", "expected tenant=weight, got 'B'"),
        ("=2", "empty tenant name"),
        ("nonsense", "is neither a file nor tenant=weight pairs"),
    ],
)
def test_bad_weights(weights, message):
    result = run(["--trace", "-", "--rate", "1", "--weights", weights], stdin=REFERENCE)
    assert result.exit_code == 2
    assert "Invalid value for '--weights'" in result.stderr
    assert message in result.stderr


def test_weights_files(tmp_path: Path):
    plain = tmp_path / "weights.txt"
    plain.write_text("# comment\nacme = 2\n\nglobex=0.5\n")
    assert parse_weights(str(plain)) == {"acme": 2.0, "globex": 0.5}
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{nope")
    with pytest.raises(click.BadParameter, match="not valid JSON"):
        parse_weights(str(bad_json))
    bad_line = tmp_path / "bad.txt"
    bad_line.write_text("acme=2\nglobex=-1\n")
    with pytest.raises(click.BadParameter, match="line 2: weight of 'globex'"):
        parse_weights(str(bad_line))
    assert parse_weights(None) == {}
    assert parse_weights("a=1, b=3") == {"a": 1.0, "b": 3.0}


def test_bad_rate_is_a_usage_error():
    result = run(["--trace", "-", "--rate", "0"], stdin=REFERENCE)
    assert result.exit_code == 2
    assert "--rate" in result.stderr


def test_command_object_is_importable_lazily():
    assert isinstance(simulate, click.Command)


def test_replay_api_matches_fluid_share_for_equal_tenants():
    arrivals = parse_trace(
        json.dumps({"t": 0, "tenant": t, "id": f"{t}{i}"}) for i in range(50) for t in "XYZ"
    )
    out = list(replay(arrivals, rate=100))
    assert len(out) == 150
    assert all(isinstance(a, Arrival) for a in arrivals)
    assert {d.tenant for d in out[:3]} == {"X", "Y", "Z"}
    assert out[-1].t_departure == pytest.approx(1.49)
