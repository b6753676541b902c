"""``fairstream audit`` on a recorded noisy-neighbour run gives the demo's verdict.

The run is the demo itself (a real scheduler, shortened): its table and verdict come from
what its simulated paid API saw; the audit reads back only the egress topic's headers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def run(*args: str, timeout: float) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "fairstream", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def table(lines: list[str], title: str) -> dict[str, list[str]]:
    """The per-tenant table printed after ``title``: tenant -> its cells."""
    start = lines.index(title) + 2  # the title, then the header
    rows: dict[str, list[str]] = {}
    for line in lines[start:]:
        cells = line.split()
        if len(cells) != 8:
            break
        rows[cells[0]] = cells
    return rows


def verdict(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("verdict: "))


def test_audit_of_a_demo_run_gives_the_demos_verdict(kafka_bootstrap: str, tmp_path: Path) -> None:
    demo = run(
        "demo",
        "--bootstrap",
        kafka_bootstrap,
        "--duration",
        "8",
        "--burst",
        "600",
        "--rate",
        "50",
        "--workdir",
        str(tmp_path / "demo"),
        timeout=300,
    )
    print(demo[-2500:])
    match = re.search(r"^topics (demo-[0-9a-f]+)\.\* on ", demo, re.MULTILINE)
    assert match, demo[:500]
    demo_lines = demo.splitlines()
    png = tmp_path / "audit.png"
    audit = run(
        "audit",
        "--bootstrap",
        kafka_bootstrap,
        "--egress-topic",
        f"{match.group(1)}.egress",
        "--since",
        "15m",
        "--window",
        "5s",
        "--png",
        str(png),
        timeout=300,
    )
    print(audit)
    audit_lines = audit.splitlines()

    # Same verdict, and a fair one: the quiet tenants waited as in the ideal schedule.
    assert verdict(audit_lines) == verdict(demo_lines)
    assert verdict(audit_lines).startswith("verdict: fair: the quiet tenants (quiet-1, ")

    # The same records, tenant by tenant.
    demo_rows = table(demo_lines, "dwell time (arrival to service start) per tenant:")
    audit_rows = table(audit_lines, "dwell time (enqueued to scheduled) per tenant:")
    assert set(audit_rows) == set(demo_rows) == {"noisy", *(f"quiet-{i}" for i in range(1, 6))}
    for tenant, cells in demo_rows.items():
        assert audit_rows[tenant][1] == cells[1], tenant  # the count
    # Windows: while the burst drained, noisy alone was backlogged throughout (Jain 1.000).
    header = next(i for i, line in enumerate(audit_lines) if line.startswith("window (UTC)"))
    windows = audit_lines[header + 1 : audit_lines.index("", header)]
    assert any(line.split()[3] == "1.000" for line in windows), windows
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
