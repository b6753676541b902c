"""The paid-API phases of ``make bench`` in docs/benchmarks.md: ``api_view.targets`` and
``api_adaptive.targets`` judge each run against its targets (a censored p99 never meets one,
a failed run yields no row), and their tables say a failed run as such."""

from __future__ import annotations

from typing import Any

from benchmarks import api_adaptive, api_view
from benchmarks.report import markdown
from benchmarks.tables import result_tables
from benchmarks.targets import targets

PLAYOUT = "0.25 s"


def _strict(rate: float, refused: float, accepted: float) -> dict[str, Any]:
    stamps = {"p50_s": 0.251, "p99_s": 0.262, "max_s": 0.3}
    return {
        "status": "ok",
        "rate": rate,
        "burst": 5.0,
        "playout_delay": PLAYOUT,
        "backlog_records": 7205,
        "window_s": [2.0, 8.0],
        "calls": int(rate * 6),
        "started_per_s": rate,
        "refused": refused,
        "accepted_per_s": round(accepted * rate, 1),
        "accepted_of_rate": accepted,
        "start_after_stamp": stamps,
        "visible_after_stamp": stamps,
        "refused_at_stamps": 0.0,
        "stamp_gaps_short": 0.0,
    }


def _quiet(p99: float, censored: int, unserved: int, busy: float) -> dict[str, Any]:
    return {
        "status": "ok",
        "scenario": "slow-workers",
        "rate": 100.0,
        "workers": 2,
        "concurrency": 1,
        "call_s": 0.1,
        "api_slots": None,
        "noisy_records": 3000,
        "quiet_tenants": 8,
        "drain_s": 10.0,
        "playout_delay": PLAYOUT,
        "window_s": 20.0,
        "quiet_sent": 160,
        "quiet_wait": {"p50_s": 0.2, "p99_s": p99, "max_s": p99 + 0.1},
        "quiet_wait_censored": censored,
        "quiet_p99_less_call_s": round(p99 - 0.1, 3),
        "quiet_unserved_at_end": unserved,
        "quiet_unserved_at_deadline": unserved,
        "busy": busy,
        "calls_per_s": 19.8,
        "noisy_calls": 240,
        "egress_per_s": 20.1,
        "downstream_at_end": 3,
    }


API_VIEW = {
    "status": "ok",
    "quick": True,
    "strict": {
        "200/5": _strict(200.0, 0.002, 0.998),
        "50/1": _strict(50.0, 0.05, 0.95),
        "2000/200": {"status": "error", "error": "RuntimeError('the API saw no call')"},
    },
    "quiet": {
        "slow-workers": _quiet(0.4, 0, 0, 0.99),
        # p99 under the bound, but a lower bound: 2 requests were never taken.
        "queueing-api": _quiet(0.45, 2, 2, 0.9),
    },
}


def _window(mean: float, worst: float, refused: float, capacity: float) -> dict[str, Any]:
    return {
        "window_s": [10.0, 30.0],
        "capacity": capacity,
        "mean": mean,
        "worst_5s": worst,
        "refused": refused,
        "met": False,  # the targets are judged again from the figures
    }


API_ADAPTIVE = {
    "status": "ok",
    "targets": api_adaptive.TARGETS,
    "shape": (0.1, 0.002, 8),
    "runs": {
        "constant": {
            "status": "ok",
            "playout_delay": PLAYOUT,
            "schedule": [(0.0, 300.0)],
            "end_s": 30.0,
            "windows": {"300/s from 10 s": _window(0.96, 0.9, 0.01, 300.0)},
            "refused_all": 0.02,
            "per_second": {"ok": [], "refused": []},
        },
        "changes": {
            "status": "ok",
            "playout_delay": PLAYOUT,
            "schedule": [(0.0, 300.0), (20.0, 150.0)],
            "end_s": 40.0,
            "windows": {
                "300/s from 10 s": _window(0.95, 0.88, 0.02, 300.0),
                "150/s from 30 s": _window(0.9, 0.8, 0.05, 150.0),
            },
            "refused_all": 0.03,
            "per_second": {"ok": [], "refused": []},
        },
    },
}

RESULTS = {"api_view": API_VIEW, "api_adaptive": API_ADAPTIVE}


def _rows(rows: list[Any], part: str) -> list[tuple[str, str, bool | None, str]]:
    return [row for row in rows if part in row[0]]


def test_strict_rows_meet_or_miss_refused_and_accepted_and_a_failed_row_has_none() -> None:
    rows = api_view.targets(RESULTS)
    met = [(name.split(": ")[1], ok) for name, _m, ok, _b in _rows(rows, "strict bucket R/B 200/5")]
    assert met == [("refused <= 1%", True), ("accepted >= 0.97x R", True)]
    missed = _rows(rows, "strict bucket R/B 50/1")
    assert [ok for _n, _m, ok, _b in missed] == [False, False]
    assert missed[0][1].startswith("5.0% (50 calls/s; playout delay 0.25 s)")
    assert missed[1][3] == "0.020x"
    assert not _rows(rows, "2000/200")


def test_quiet_scenarios_are_judged_on_p99_unserved_and_busy() -> None:
    rows = api_view.targets(RESULTS)
    slow = _rows(rows, "API view, slow-workers")
    assert [ok for _n, _m, ok, _b in slow] == [True, True, True]
    assert "(0.6 s)" in slow[0][0]
    queueing = _rows(rows, "API view, queueing-api")
    p99, unserved, busy = queueing
    assert p99[1].startswith(">= 0.450 s (2 of 160 never taken")
    assert p99[2] is False  # under the bound, but only a lower bound
    assert (unserved[1], unserved[2]) == ("2 of 160 not taken", False)
    assert (busy[2], busy[3]) == (False, "0.050x")


def test_each_adaptive_window_is_one_row_naming_what_it_missed() -> None:
    rows = api_adaptive.targets(RESULTS)
    assert [(ok, by) for _n, _m, ok, by in rows] == [
        (True, ""),
        (True, ""),
        (False, "missed: mean, worst 5 s, refused"),
    ]
    assert rows[2][0].startswith("adaptive rate at the API (changes, 150/s from 30 s)")
    assert rows[2][1] == "mean 0.900x, worst 5 s 0.800x, refused 5.0% (playout delay 0.25 s)"


def test_a_failed_or_missing_phase_gives_no_targets_and_a_failed_line() -> None:
    failed = {"status": "error", "error": "TimeoutError()"}
    broken = {"api_view": failed, "api_adaptive": failed}
    assert api_view.targets(broken) == []
    assert api_adaptive.targets(broken) == []
    assert api_view.targets({}) == api_adaptive.targets({}) == []
    assert api_view.table({}) == api_adaptive.table({}) == []
    assert api_view.table(broken)[-1] == "**The paid API's view**: failed: TimeoutError()"
    assert api_adaptive.table(broken)[-1].endswith("failed: TimeoutError()")


def test_the_tables_have_a_row_per_run_and_say_a_failed_one() -> None:
    lines = api_view.table(RESULTS)
    assert "| 2000/200 | failed: RuntimeError('the API saw no call') | | | | | | |" in lines
    assert (
        "| 200/5 | 0.25 s | 200/s | 0.2% | 0.998x | 0.0% (0.0%) | 0.251 / 0.262 / 0.300 s "
        "| 0.251 / 0.262 / 0.300 s |"
    ) in lines
    queueing = next(line for line in lines if line.startswith("| queueing-api"))
    assert "| >= 0.200 / >= 0.450 / >= 0.550 s | >= 0.350 s | 2 / 2 |" in queueing
    adaptive = [line for line in api_adaptive.table(RESULTS) if line.startswith("| c")]
    assert len(adaptive) == 3
    assert adaptive[2] == (
        "| changes | 150/s from 30 s | 150/s | 0.900x | 0.800x | 5.0% | 3.0% | 0.25 s |"
    )


def test_run_all_reports_both_phases_in_its_targets_and_results() -> None:
    rows = targets(RESULTS)
    assert rows == [*api_view.targets(RESULTS), *api_adaptive.targets(RESULTS)]
    tables = result_tables(RESULTS)
    assert api_view.table(RESULTS)[1] in tables
    assert api_adaptive.table(RESULTS)[1] in tables
    document = markdown(
        {
            "date": "2026-12-03 11:00 UTC",
            "mode": "quick",
            "seconds": 1,
            "command": "run_all",
            "machine": {
                "nproc": 2,
                "cpu": "test",
                "memory_gib": 24,
                "python": "3.11",
                "confluent_kafka": "2.16",
                "librdkafka": "2.16",
                "kafka_broker": "4.1.1",
            },
            "results": RESULTS,
        }
    )
    assert "| API view, queueing-api: API busy >= 0.95x | 0.900x (19.8 calls/s) | missed |" in (
        document
    )


def test_idle_latency_is_judged_against_twice_the_floor_plus_the_delay() -> None:
    from benchmarks import api_latency

    def result(fs: float) -> dict[str, Any]:
        return {
            "api_latency": {
                "floor": {"latency": {"p99_s": 0.1}},
                "fairstream": {"latency": {"p99_s": fs}, "playout_delay_s": 0.1},
            }
        }

    (met,) = api_latency.targets(result(0.3))
    (missed,) = api_latency.targets(result(0.31))
    assert met[2] is True
    assert missed[2] is False
    assert "bound 0.300 s" in met[1]
    assert api_latency.targets({"api_latency": {"status": "error"}}) == []
