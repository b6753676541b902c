"""Issue 12, "What it must show", on the real broker: the scheduler follows what the paid
API tells the workers (``fairstream_dev.harness.paid_api`` simulates the API inside the
workers' handlers).

1. A hidden capacity of 50 calls/s behind ``--rate 1000``: the 429s bring the adaptive rate
   down towards it, and it rises again once they stop (the goodput it reaches, and how fast
   it follows changes, are measured by ``benchmarks.api_adaptive``).
2. Two tenants declare cost 1, one really costs 10: with feedback their shares of reported
   cost are equal; without (scheduler or worker side off), shares follow record counts.
3. A tenant-scope rate limit pauses that tenant alone; it resumes afterwards.

A capacity is per second, so its windows are in seconds after the API's first call (the
API's own clock); cost shares are over a window of calls counted in the order the API took
them; a pause is per second too, counted on egress records by ``fairstream-scheduled-ms``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fairstream import RateLimited, Request
from fairstream.analysis.stats import jain_index
from fairstream.wire.feedback import Feedback, Outcome, encode_feedback, feedback_key
from fairstream_dev.harness.paid_api import (
    FEEDBACK,
    PaidApi,
    api_handler,
    feedback_loop,
    scheduled_counts,
)

# -- 1. a hidden capacity ------------------------------------------------------------------

# The API refuses past 50 calls/s for its first LIFT_AT seconds, then takes everything. How
# much of the capacity the adaptive rate uses (behind 300/s), and how fast it follows changes,
# are figures: benchmarks.api_adaptive measures them (make bench). This test waits on what
# must happen, and the workers calling the API run in its process, beside other tests: on a
# busy CI machine they called 126/s, so a capacity of 300/s refused nothing and the test
# waited for 429s that never came. 50/s is well under what they call however busy.
CAPACITY = 50.0
LIFT_AT = 20.0
TENANTS = [f"t{i:02d}" for i in range(16)]


def test_429s_bring_the_adaptive_rate_down_to_a_hidden_capacity_and_it_rises_when_they_stop(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    api = PaidApi([(0.0, CAPACITY), (LIFT_AT, 1e9)])
    with feedback_loop(
        kafka_bootstrap,
        tmp_path,
        api_handler(api),
        "--rate",
        "1000",
        "--feedback-topic",
        FEEDBACK,
    ) as loop:
        loop.produce(dict.fromkeys(TENANTS, 1500))

        def adaptive() -> float:
            return loop.metric("fairstream_adaptive_rate") or 0.0

        # The API's 429s reach the scheduler through the workers' feedback, and the rate comes
        # down from --rate 1000 towards the capacity.
        def state() -> str:
            calls = api.window(0.0, api.elapsed())
            return (
                f"the adaptive rate below {2 * CAPACITY:g} under the API's 429s: it is "
                f"{adaptive():g}; the API had {len(calls)} calls in {api.elapsed():.1f} s, "
                f"{sum(not c.ok for c in calls)} refused; the scheduler read "
                f"{loop.metric('fairstream_feedback_rate_limited_total') or 0:g} 429s"
            )

        loop.run_until(lambda: 0 < adaptive() < 2 * CAPACITY, LIFT_AT, state)
        assert (loop.metric("fairstream_feedback_rate_limited_total") or 0) > 0
        found = adaptive()
        assert api.goodput(0.0, api.elapsed()) > 0
        # Once the API takes everything, no 429 comes back and the rate climbs past what it
        # found (probing), towards --rate.
        loop.run_until(
            lambda: api.elapsed() > LIFT_AT and adaptive() > 1.5 * found,
            LIFT_AT + 60,
            f"the adaptive rate above {1.5 * found:.0f} once the 429s stopped",
        )
        print(f"\nadaptive rate: {found:.0f}/s under the 429s, {adaptive():.0f}/s after them")


# -- 2. measured cost ------------------------------------------------------------------------

COST_RATE = 200
COSTS = {"light": 1, "heavy": 10}
# Judged on calls, not seconds: after the first 1,000 (measured costs reach the scheduler and
# its books settle), the next 1,500.
COST_CALLS = (1000, 2500)


@pytest.mark.parametrize("feedback", ["on", "scheduler-off", "worker-off"])
def test_measured_cost_makes_shares_follow_real_usage(
    kafka_bootstrap: str, tmp_path: Path, feedback: str
) -> None:
    """light and heavy both declare cost 1; heavy's calls report Usage(cost=10)."""
    api = PaidApi(1e9, latency=0.0)  # takes everything: only the costs matter here
    topic = "" if feedback == "scheduler-off" else FEEDBACK
    with feedback_loop(
        kafka_bootstrap,
        tmp_path,
        api_handler(api, COSTS),
        "--rate",
        str(COST_RATE),
        "--feedback-topic",
        topic,
        worker_feedback=feedback != "worker-off",
    ) as loop:
        loop.produce(dict.fromkeys(COSTS, COST_CALLS[1]))  # enough for either to take all
        loop.run_until(
            lambda: len(api.calls) >= COST_CALLS[1],
            60,
            lambda: f"{COST_CALLS[1]} calls (have {len(api.calls)})",
        )
        _, body = loop.scheduler.get("/tenants")
    seen = {
        r["tenant"]: (r["cost_declared"], r["cost_reported"]) for r in json.loads(body)["tenants"]
    }
    calls = [c for c in api.calls[COST_CALLS[0] : COST_CALLS[1]] if c.ok]
    records = {t: sum(c.tenant == t for c in calls) for t in COSTS}
    cost = {t: records[t] * COSTS[t] for t in COSTS}
    total = sum(cost.values())
    jain_cost = jain_index(cost.values())
    jain_records = jain_index(records.values())
    print(
        f"\nmeasured cost, feedback {feedback}: calls {records}, reported cost {cost} "
        f"(shares {', '.join(f'{t} {c / total:.3f}' for t, c in cost.items())}), "
        f"Jain on cost {jain_cost:.3f}, on records {jain_records:.3f} "
        f"(calls {COST_CALLS[0]} to {COST_CALLS[1]}); "
        f"/tenants declared, reported: {seen}"
    )
    if feedback == "on":
        assert jain_cost >= 0.95
        # /tenants shows the measured against the declared cost of the same requests.
        declared, reported = seen["heavy"]
        assert declared
        assert reported == 10 * declared
        assert seen["light"][0] == seen["light"][1]
    else:
        # Shares follow record counts: equal records, costs 10:1 (Jain 121/202 = 0.60).
        assert jain_records >= 0.95
        assert jain_cost < 0.7
        assert seen["heavy"] == (None, None)  # nothing measured


# -- 3. a tenant-scope limit -----------------------------------------------------------------

PAUSE_RATE = 150
PAUSE_TENANTS = ("limited", "other-1", "other-2")
RETRY_AFTER = 2.0


# Alone (serial): the pause must reach the scheduler within 0.5 s of the 429, and the others
# keep 80% of --rate meanwhile; tests beside it slow both.
@pytest.mark.serial
def test_a_tenant_scope_limit_pauses_that_tenant_alone(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The 200th call of tenant "limited" is refused with RateLimited(retry_after=2,
    scope="tenant"): the scheduler stops emitting its records for about 2 s while the
    others go on, then it resumes."""
    limited_at: list[float] = []  # when the tenant's quota said no (epoch s)
    seen = {"n": 0}
    lock = threading.Lock()

    def quota(request: Request) -> None:
        if request.tenant != "limited":
            return
        with lock:
            seen["n"] += 1
            if seen["n"] == 200:
                limited_at.append(time.time())
                raise RateLimited(retry_after=RETRY_AFTER, scope="tenant")

    with feedback_loop(
        kafka_bootstrap,
        tmp_path,
        api_handler(None, before=quota),
        "--rate",
        str(PAUSE_RATE),
        "--feedback-topic",
        FEEDBACK,
    ) as loop:
        loop.produce(dict.fromkeys(PAUSE_TENANTS, PAUSE_RATE * 10))

        seen_paused: list[bool] = []

        def resumed() -> bool:
            if limited_at and not seen_paused:
                _, body = loop.scheduler.get("/tenants")
                rows = json.loads(body or "{}").get("tenants", [])
                if any(r["tenant"] == "limited" and r["paused"] for r in rows):
                    seen_paused.append(True)  # /tenants shows it paused meanwhile
            return bool(limited_at) and any(
                t == "limited" and at >= limited_at[0] + RETRY_AFTER for at, t in loop.scheduled()
            )

        loop.run_until(resumed, 60, "tenant 'limited' limited, then emitted again")
        # Egress past the window counted after the resumption (up to +RETRY_AFTER + 1.5 s).
        counted_until = limited_at[0] + RETRY_AFTER + 1.5
        loop.run_until(
            lambda: any(at >= counted_until for at, _ in loop.scheduled()),
            10,
            "egress scheduled past the window counted after the resumption",
        )
    at = limited_at[0]
    # While paused: from when the feedback surely arrived to before the pause can end.
    paused = scheduled_counts(loop, at + 0.5, at + RETRY_AFTER - 0.2)
    before = scheduled_counts(loop, at - 1.5, at)
    after = scheduled_counts(loop, at + RETRY_AFTER + 0.3, at + RETRY_AFTER + 1.5)
    stamps = sorted(s for s, t in loop.scheduled() if t == "limited")
    gap = max(b - a for a, b in itertools.pairwise(stamps) if b > at - 1)
    print(
        f"\ntenant-scope limit at +0: egress per tenant in [-1.5, 0) s {dict(before)}, "
        f"paused [+0.5, +{RETRY_AFTER - 0.2:g}) s {dict(paused)}, after "
        f"[+{RETRY_AFTER + 0.3:g}, +{RETRY_AFTER + 1.5:g}) s {dict(after)}; "
        f"longest gap in 'limited' egress {gap:.2f} s"
    )
    assert paused["limited"] == 0
    assert seen_paused, "/tenants never showed tenant 'limited' paused"
    window = RETRY_AFTER - 0.7
    for tenant in ("other-1", "other-2"):
        # The others keep flowing, and take what the limited tenant does not use.
        assert paused[tenant] >= 0.4 * PAUSE_RATE * window, tenant
    assert after["limited"] > 0


# -- 4. bad feedback --------------------------------------------------------------------------


def test_bad_feedback_is_counted_and_ignored_and_the_scheduler_goes_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Garbage, an absurd cost and a cost for a request nobody emitted land on the feedback
    topic among the workers' real records: each is counted under its reason, none is
    charged, and egress goes on."""
    api = PaidApi(1e9, latency=0.0)
    with feedback_loop(
        kafka_bootstrap,
        tmp_path,
        api_handler(api),
        "--rate",
        "100",
        "--feedback-topic",
        FEEDBACK,
    ) as loop:
        loop.produce({"acme": 3000})
        loop.run_until(lambda: len(loop.scheduled()) >= 100, 60, "egress under way")

        def forged(request_id: str, cost: int) -> Feedback:
            return Feedback(
                request_id=request_id,
                tenant="acme",
                outcome=Outcome.OK,
                declared_cost=1,
                reported_at_ms=int(time.time() * 1000),
                cost=cost,
            )

        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(loop.feedback_topic, b"\x00not avro at all", b"acme")
        for record in (forged("nobody-sent-this", 10), forged("nor-this", 1_000_000)):
            producer.produce(loop.feedback_topic, encode_feedback(record), feedback_key(record))
        assert producer.flush(10) == 0

        def errors(reason: str) -> float:
            return loop.metric("fairstream_feedback_errors_total", f'reason="{reason}"') or 0.0

        loop.run_until(
            lambda: all(errors(r) >= 1 for r in ("malformed", "absurd-cost", "unknown-request")),
            30,
            lambda: (
                "each bad record counted: "
                + ", ".join(
                    f"{r} {errors(r)}" for r in ("malformed", "absurd-cost", "unknown-request")
                )
            ),
        )
        emitted = len(loop.scheduled())
        loop.run_until(lambda: len(loop.scheduled()) >= emitted + 100, 30, "egress goes on")
        counts = {r: errors(r) for r in ("malformed", "absurd-cost", "unknown-request")}
        _, body = loop.scheduler.get("/tenants")
        assert loop.scheduler.alive()
    # The workers' own feedback (real requests, cost 1) is never counted as bad.
    assert counts == {"malformed": 1, "absurd-cost": 1, "unknown-request": 1}, counts
    row = next(r for r in json.loads(body)["tenants"] if r["tenant"] == "acme")
    assert row["cost_reported"] == row["cost_declared"], row  # nothing forged was charged
