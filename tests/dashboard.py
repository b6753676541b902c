"""The Grafana dashboard shipped in the Helm chart, read the way its tests need it: the unit
test (tests/unit/deploy/test_dashboard.py) and the browser test against a running scheduler
(tests/integration/test_console.py) check its queries against what the scheduler exports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "fairstream"
DASHBOARD = CHART / "dashboards" / "fairstream.json"
METRIC = re.compile(r"\bfairstream_[a-z0-9_]+")


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) of every query on the dashboard."""
    return [(p["title"], t["expr"]) for p in data["panels"] for t in p.get("targets", [])]
