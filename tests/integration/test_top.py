"""``fairstream top --once`` against a running scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.policies import produce, set_policy


def test_top_shows_shares_against_entitlements(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=2).create()
    set_policy(kafka_bootstrap, deployment.topics.policy, b"gold", weight=3)
    scheduler = SchedulerProcess(deployment, tmp_path, "--rate", "80").start().wait_ready()
    egress = TopicReader(kafka_bootstrap, deployment.topics.egress)
    try:
        produce(kafka_bootstrap, deployment.topics.ingest, [b"gold", b"bronze"], 400)
        egress.read_until(40, timeout=30)
        url = f"http://127.0.0.1:{scheduler.web_port}"
        out = subprocess.run(
            [sys.executable, "-m", "fairstream", "top", "--scheduler", url, "--once", "--json",
             "--interval", "2"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        table = subprocess.run(
            [sys.executable, "-m", "fairstream", "top", "--scheduler", url, "--once"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    finally:
        egress.close()
        scheduler.terminate()
    rows = {row["tenant"]: row for row in json.loads(out.stdout)}
    print("\n" + table.stdout)
    assert rows["gold"]["entitlement"] == 0.75
    assert rows["bronze"]["entitlement"] == 0.25
    assert 0.6 <= rows["gold"]["share"] <= 0.9
    assert 60 <= rows["gold"]["emitted_per_s"] + rows["bronze"]["emitted_per_s"] <= 100
    assert rows["gold"]["dwell_p99"] is not None
    assert "gold" in table.stdout
    assert "entitled" in table.stdout
