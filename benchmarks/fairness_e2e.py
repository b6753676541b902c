"""The end-to-end subset of the fairness scenarios (``benchmarks.fairness_scenarios``): the
same traces (seed-a) produced in real time into a real scheduler on the broker, the same
metrics read back from the egress records.

The scenarios' paid API serves ``concurrency`` runs at once for ``hold_mean`` ticks each;
end to end it is a rate instead, the same capacity: ``--rate concurrency / hold_mean`` per
tick, ``--burst 1``, with one tick ``TICK_MS`` ms (so key-splitting runs at 64 records/s).
A run's arrival is its record's ``fairstream-enqueued-ms`` and its service the
``fairstream-scheduled-ms`` stamp, both in ticks from the first arrival. Modes: flat DRR
(no groups) and tenant groups (``--tenant-group-separator /``). Weights go on the policy
topic before the scheduler starts.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.common import delete_all, log, new_deployment, start_scheduler
from benchmarks.fairness_workloads import (
    SCENARIOS,
    SEPARATOR,
    Scenario,
    arrivals,
    measure,
    tenant_of,
)
from fairstream import wire
from fairstream.analysis.contention import Service
from fairstream.core import TenantPolicy
from fairstream.wire.policy import PolicyRecord, encode_policy
from fairstream_dev.harness.scheduler import Deployment, TopicReader

E2E_SCENARIOS = ("key-splitting", "key-splitting, 100 ids", "weighted")
TICK_MS = 2.5
PARTITIONS = 4


def _policies(d: Deployment, scenario: Scenario) -> None:
    producer = Producer({"bootstrap.servers": d.bootstrap, "acks": "all"})
    for t in scenario.tenants:
        if t.weight != 1:
            record = PolicyRecord(
                TenantPolicy(weight=t.weight), updated_at_ms=int(time.time() * 1000)
            )
            producer.produce(d.topics.policy, key=t.key(0).encode(), value=encode_policy(record))
    producer.flush(30)


def _produce(bootstrap: str, topic: str, scenario: Scenario, t0: float) -> int:
    """The seed-a trace in real time (one tick = TICK_MS); the count produced."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "partitioner": "murmur2_random"}
    )
    trace = arrivals(scenario, "seed-a")
    for a in trace:
        delay = t0 + a.t * TICK_MS / 1000 - time.time()
        if delay > 0:
            producer.poll(0)
            time.sleep(delay)
        producer.produce(topic, key=a.tenant.encode(), value=a.id.encode())
    producer.flush(30)
    return len(trace)


def services(messages: list[Any], owner: dict[str, str]) -> list[Service]:
    """Each egress record as a service at the scenario's tenant grain, in ticks."""
    rows = []
    for msg in messages:
        headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
        rows.append(
            (
                owner[headers[wire.TENANT]],
                int(headers[wire.ENQUEUED_MS]),
                int(headers[wire.SCHEDULED_MS]),
            )
        )
    first = min(r[1] for r in rows)
    return [Service(g, (e - first) / TICK_MS, (s - first) / TICK_MS) for g, e, s in rows]


def run_mode(
    bootstrap: str, workdir: Path, scenario: Scenario, mode: str, cleanup: list[Callable[[], None]]
) -> dict[str, float]:
    d = new_deployment(bootstrap, "fairness", PARTITIONS)
    cleanup.append(functools.partial(delete_all, d))
    _policies(d, scenario)
    hold = scenario.tenants[0].hold_mean
    rate = scenario.concurrency / hold * 1000 / TICK_MS
    args = ["--rate", f"{rate:g}", "--burst", "1"]
    if mode == "groups":
        args += ["--tenant-group-separator", SEPARATOR]
    name = f"fairness-{scenario.name.replace(' ', '-').replace(',', '')}-{mode}"
    scheduler = start_scheduler(d, workdir, name, args, cleanup)
    scheduler.wait_ready(timeout=120)
    reader = TopicReader(bootstrap, d.topics.egress)
    cleanup.append(reader.close)
    count = _produce(bootstrap, d.topics.ingest, scenario, time.time() + 0.5)
    reader.read_until(count, timeout=count / rate + 60)
    result = measure(scenario, services(reader.messages, tenant_of(scenario)))
    result["rate"] = rate
    return result


def run_e2e(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Per scenario of ``E2E_SCENARIOS``, per mode: the measured numbers (or the error)."""
    out: dict[str, Any] = {}
    for scenario in (s for s in SCENARIOS if s.name in E2E_SCENARIOS):
        modes = ("drr", "groups") if scenario.name.startswith("key-splitting") else ("drr",)
        for mode in modes:
            cleanup: list[Callable[[], None]] = []
            try:
                result: dict[str, Any] = run_mode(bootstrap, workdir, scenario, mode, cleanup)
            except Exception as exc:  # one failed run must not lose the others' numbers
                result = {"error": repr(exc)[:300]}
            finally:
                for undo in reversed(cleanup):
                    with contextlib.suppress(Exception):
                        undo()
            out.setdefault(scenario.name, {})[mode] = result
            log(f"fairness {scenario.name} {mode}: {result}")
    return out
