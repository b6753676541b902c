"""``fairstream audit``'s analysis, on departures from the real core (simulate) and from FIFO.

The broker-reading part runs in tests/integration/test_audit.py against a recorded demo run.
"""

from __future__ import annotations

import click
import pytest

from fairstream.analysis.reference import fifo_starts
from fairstream.cli.audit import (
    Record,
    analyse,
    measured_rate,
    parse_duration,
    parse_time,
    window_table,
)
from fairstream.cli.demo import Scenario
from fairstream.cli.simulate import Arrival as TraceArrival
from fairstream.cli.simulate import replay

T0 = 1_700_000_000.0  # an epoch, as in the headers
SCENARIO = Scenario(rate=50, duration=20, burst_at=2, burst=600)


def drr_records() -> list[Record]:
    arrivals = [TraceArrival(a.t, a.tenant, a.id) for a in SCENARIO.arrivals()]
    return [
        Record(d.id, d.tenant, T0 + d.t_arrival, T0 + d.t_departure)
        for d in replay(arrivals, rate=SCENARIO.rate)
    ]


def fifo_records() -> list[Record]:
    arrivals = SCENARIO.arrivals()
    starts = fifo_starts(arrivals, SCENARIO.rate)
    return [Record(a.id, a.tenant, T0 + a.t, T0 + starts[a.id]) for a in arrivals]


def audit_of(records: list[Record], rate: float | None = None):
    start = min(r.scheduled for r in records)
    end = max(r.scheduled for r in records) + 0.001
    return analyse(
        records,
        start=start,
        end=end,
        window=5.0,
        rate=rate or measured_rate(records) or 1.0,
        weights={},
    )


def test_the_cores_schedule_is_judged_fair_and_jain_is_one_while_two_are_backlogged():
    records = drr_records()
    assert measured_rate(records) == pytest.approx(50, rel=0.05)
    result = audit_of(records)
    assert result.verdict.fair, result.verdict.line()
    assert result.verdict.quiet == ("quiet-1", "quiet-2", "quiet-3", "quiet-4", "quiet-5")
    assert result.verdict.line().startswith("fair: ")
    judged = [w for w in result.windows if w.jain is not None]
    assert judged, window_table(result.windows)
    assert all(w.jain == pytest.approx(1.0) for w in judged)
    assert all(w.quiet_p99 is not None and w.quiet_p99 < 0.2 for w in result.windows[1:3])
    assert sum(w.scheduled for w in result.windows) == len(records)


def test_fifo_is_judged_unfair_to_the_quiet_tenants():
    result = audit_of(fifo_records(), rate=SCENARIO.rate)
    assert not result.verdict.fair
    assert result.verdict.line().startswith("unfair: quiet tenants ")
    # While the burst drains, noisy is the only tenant backlogged throughout a window.
    table = window_table(result.windows)
    assert "quiet dwell p99" in table
    assert max(w.quiet_p99 or 0 for w in result.windows) > 5


def test_no_burst_is_no_contention():
    calm = Scenario(rate=50, duration=10, burst=1)
    arrivals = [TraceArrival(a.t, a.tenant, a.id) for a in calm.arrivals()]
    records = [
        Record(d.id, d.tenant, T0 + d.t_arrival, T0 + d.t_departure)
        for d in replay(arrivals, rate=calm.rate)
    ]
    result = audit_of(records, rate=calm.rate)
    assert result.verdict.line().startswith("no contention")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("1h", 3600), ("2d", 172800), ("500ms", 0.5), ("30", 30)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_times_are_durations_ago_or_iso():
    assert parse_time("1h", 10_000) == 6_400
    assert parse_time("2023-11-14T22:13:20Z", 0) == 1_700_000_000
    assert parse_time("2023-11-14T22:13:20", 0) == 1_700_000_000  # naive means UTC
    with pytest.raises(click.BadParameter):
        parse_time("yesterday", 0)
    with pytest.raises(click.BadParameter):
        parse_duration("0s")
