"""Dominant-resource fairness between --rate and --cost-rate, on the real broker.

Two tenants: ``cheap`` sends many requests of cost 1, ``costly`` few of cost 100. The egress
has both limits, --rate 400 records/s and --cost-rate 4,000 cost/s, so a record costing
less than 10 uses the record limit more than the cost limit. A tenant's dominant share is
the larger of its fraction of each limit. By cost alone (the default), DRR gives both the
same cost per round: cheap sends 100 records per costly one and takes 99% of the record
limit, costly 10% of the cost limit. With --fairness dominant both get the same dominant
share: about 91% each, both limits used up (363.6 cheap and 36.4 costly records/s).

Judged on the egress in scheduling order over a window of records (after the settling), as
``test_tenant_groups``: the dominant shares' ratio does not depend on the window's duration
(both are over the same seconds), so no duration enters an assertion. The workload and the
shares are ``benchmarks.dominant``'s, which prints the same runs for docs/benchmarks.md.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.dominant import COST_RATE, MARGIN, RATE, SETTLE, WINDOW, backlog, dominant_shares
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess, TopicReader
from tests.integration.policies import departures, scheduled_s

pytestmark = pytest.mark.integration


def run(bootstrap: str, tmp_path: Path, *args: str) -> dict[str, float]:
    deployment = Deployment(bootstrap, partitions=2).create()
    scheduler = SchedulerProcess(
        deployment,
        tmp_path,
        "--rate",
        str(RATE),
        "--cost-rate",
        str(COST_RATE),
        *args,
        name="-".join(["sched", *args]).replace("--", ""),
    ).start()
    egress = TopicReader(bootstrap, deployment.topics.egress)
    try:
        scheduler.wait_ready()
        backlog(bootstrap, deployment.topics.ingest)
        egress.read_until(SETTLE + WINDOW + MARGIN, timeout=90)
        records = departures(egress)[SETTLE : SETTLE + WINDOW]
    finally:
        egress.close()
        scheduler.terminate()
    shares = dominant_shares(records)
    kinds = Counter((m.key() or b"").decode() for m in records)
    seconds = scheduled_s(records[-1]) - scheduled_s(records[0])  # printed only
    print(
        f"\n{' '.join(args) or '--fairness cost (default)'}: over {WINDOW} records "
        f"({seconds:.2f} s of stamps), cheap {kinds['cheap']} records, costly "
        f"{kinds['costly']}; dominant shares: cheap {shares['cheap']:.3f}, costly "
        f"{shares['costly']:.3f}, ratio {shares['cheap'] / shares['costly']:.3f}"
    )
    return shares


def test_dominant_shares_are_equal_with_dominant_fairness_and_not_without(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    dominant = run(kafka_bootstrap, tmp_path, "--fairness", "dominant")
    assert abs(dominant["cheap"] / dominant["costly"] - 1) <= 0.05
    by_cost = run(kafka_bootstrap, tmp_path)
    ratio = by_cost["cheap"] / by_cost["costly"]
    assert abs(ratio - 1) > 0.05
    # Far from it: about 10x (0.99 of the record limit against 0.099 of the cost limit).
    assert ratio > 5
