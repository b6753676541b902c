"""The DRF benchmark's table (``benchmarks.dominant.table``): both modes side by side, and a
failed run said as such, not left out."""

from __future__ import annotations

from benchmarks.dominant import table

RUN = {"cheap": 0.9096, "costly": 0.9105, "ratio": 0.999, "records": {"cheap": 1818, "costly": 182}}


def test_both_modes_are_rows_side_by_side() -> None:
    lines = table({"cost": {**RUN, "cheap": 0.99, "ratio": 9.9}, "dominant": RUN})
    rows = [line for line in lines if line.startswith("| `--fairness")]
    assert rows == [
        "| `--fairness cost` (default) | 0.990 | 0.910 | 9.900 | 1818, 182 |",
        "| `--fairness dominant` | 0.910 | 0.910 | 0.999 | 1818, 182 |",
    ]


def test_a_failed_or_missing_run_says_so() -> None:
    lines = table({"cost": {"error": "TimeoutError()"}})
    assert "| `--fairness cost` (default) | failed: TimeoutError() | | | |" in lines
    assert "| `--fairness dominant` | failed: not run | | | |" in lines
