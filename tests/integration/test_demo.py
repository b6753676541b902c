"""``fairstream demo`` end to end, shortened: it runs, compares, and draws."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The quiet tenants' p99 against a bound: alone (make test).
pytestmark = [pytest.mark.integration, pytest.mark.serial]


def test_demo_prints_the_comparison_and_writes_the_plot(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairstream",
            "demo",
            "--bootstrap",
            kafka_bootstrap,
            "--duration",
            "6",
            "--burst",
            "200",
            "--rate",
            "50",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    print(result.stdout[-2500:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    table = lines[lines.index("dwell time (arrival to service start) per tenant:") + 1 :]
    assert "fairstream p50" in table[0]
    assert "FIFO p50" in table[0]
    assert "ideal (GPS) p50" in table[0]
    rows = {line.split()[0]: line.split() for line in table[1:7]}
    assert set(rows) == {"noisy", "quiet-1", "quiet-2", "quiet-3", "quiet-4", "quiet-5"}
    # The quiet tenants' p99 through fairstream is far below FIFO's.
    for tenant in ("quiet-1", "quiet-2", "quiet-3", "quiet-4", "quiet-5"):
        fair_p99, fifo_p99 = float(rows[tenant][3][:-1]), float(rows[tenant][5][:-1])
        assert fair_p99 < 1.0
        assert fair_p99 < fifo_p99
    # The paid API's side, for both: makespan and utilization while requests waited.
    api = lines[lines.index(next(line for line in lines if line.startswith("the paid API"))) :]
    assert api[0].split()[-4:] == ["fairstream", "FIFO", "ideal", "(GPS)"]
    rows_api = {line.split()[0]: line.split()[-3:] for line in api[1:4]}
    assert set(rows_api) == {"makespan", "utilization", "calls/s"}
    for value in rows_api["utilization"]:
        assert value.endswith("%")
        assert float(value[:-1]) > 0
    for value in rows_api["makespan"]:
        assert float(value[:-1]) > 0
    png = tmp_path / "noisy-neighbour-dwell.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {png}" in result.stdout
