"""Two deployments on one cluster sharing one feedback topic, on the real broker: each
scheduler adapts to its own workers' 429s only.

Deployment A (scheduler, workers, an API that takes everything) and deployment B (another
scheduler, another egress topic, a worker whose API refuses every call with a 429) report to
the same feedback topic, as two deployments that keep the default ``fairstream.feedback``
do. B's 429s bring B's adaptive rate down; A reads them, counts them as ``foreign`` and its
rate stays at ``--rate``, its egress going on. Then one 429 that names A's egress topic,
written straight to the topic, does bring A's rate down: A filters by egress topic, it does
not simply miss B's records.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from fairstream import RateLimited, Request, Worker
from fairstream.wire.feedback import Feedback, Outcome, Scope, encode_feedback, feedback_key
from fairstream_dev.harness.kafka import unique, wait_until
from fairstream_dev.harness.paid_api import FEEDBACK, api_handler, feedback_loop
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess

RATE = 200.0
B_REFUSALS = 20  # B's 429s A must have read (and ignored) before it is judged


def refuse(request: Request) -> None:
    """Deployment B's API: every call is a 429 for the whole API."""
    raise RateLimited(retry_after=0.1)


def test_another_deployments_429s_do_not_throttle_this_one(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    with feedback_loop(
        kafka_bootstrap,
        tmp_path,
        api_handler(None),
        "--rate",
        str(RATE),
        "--feedback-topic",
        FEEDBACK,
        partitions=2,
        concurrency=8,
    ) as a:
        shared = a.feedback_topic
        b = Deployment(kafka_bootstrap, partitions=2).create()
        assert b.topics.egress != a.deployment.topics.egress
        b_scheduler = SchedulerProcess(
            b, tmp_path, "--rate", str(RATE), "--feedback-topic", shared, name="sched-b"
        )
        b_worker = Worker(
            refuse,
            bootstrap=kafka_bootstrap,
            egress_topic=b.topics.egress,
            dlq_topic=b.topics.dlq,
            group_id=unique("b-workers"),
            concurrency=4,
            commit_interval=0.2,
            feedback_topic=shared,
        )
        errors: list[BaseException] = []

        def run_b_worker() -> None:
            try:
                b_worker.run()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run_b_worker, daemon=True, name="worker-b")
        thread.start()
        try:
            wait_until(
                lambda: len(b_worker.assignment) == 2 or bool(errors),
                60,
                "B's worker owns B's egress partitions",
                interval=0.1,
            )
            assert not errors, errors
            b_scheduler.start().wait_ready()

            a.produce({"acme": int(RATE) * 30})  # A busy throughout: its rate is in use
            b_producer = Producer(
                {"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"}
            )
            for i in range(20):
                b_producer.produce(b.topics.ingest, value=b"b-%d" % i, key=b"zeta")
            assert b_producer.flush(10) == 0

            def foreign() -> float:
                return (
                    a.scheduler.metric("fairstream_feedback_errors_total", 'reason="foreign"') or 0
                )

            def b_rate() -> float:
                return b_scheduler.metric("fairstream_adaptive_rate") or RATE

            a.run_until(
                lambda: foreign() >= B_REFUSALS and b_rate() < RATE,
                40,
                lambda: (
                    f"B's 429s read by A ({foreign():g} of {B_REFUSALS}) and B's rate cut "
                    f"({b_rate():g} of {RATE:g})"
                ),
            )
            b_limited = b_scheduler.metric("fairstream_feedback_rate_limited_total")
            b_cut = b_rate()
            # A's egress goes on at its rate while B's 429s arrive.
            emitted = len(a.scheduled())
            a.run_until(lambda: len(a.scheduled()) >= emitted + 50, 20, "A's egress goes on")
            # Every sample of A's rate so far: B's 429s arrived all along.
            a_rates = [r for _, r in a.samples if r is not None]
            a_foreign = foreign()
            a_limited = a.metric("fairstream_feedback_rate_limited_total")

            # A 429 naming A's own egress topic is A's: it cuts A's rate.
            own = Feedback(
                request_id="a-429",
                tenant="acme",
                outcome=Outcome.RATE_LIMITED,
                declared_cost=1,
                reported_at_ms=int(time.time() * 1000),
                scope=Scope.API,
                egress_topic=a.deployment.topics.egress,
            )
            producer = Producer({"bootstrap.servers": kafka_bootstrap})
            producer.produce(shared, encode_feedback(own), feedback_key(own))
            assert producer.flush(10) == 0
            a.run_until(
                lambda: (a.metric("fairstream_adaptive_rate") or RATE) < RATE,
                20,
                "A's own 429 cuts A's rate",
            )
            a_own_limited = a.metric("fairstream_feedback_rate_limited_total")
        finally:
            b_worker.stop()
            thread.join(60)
            if b_scheduler.alive():
                b_scheduler.terminate()
    assert not errors, errors
    print(
        f"\ntwo deployments, one feedback topic: B's worker reported "
        f"{b_worker.stats.rate_limited} 429s; B's rate cut to {b_cut:g} of {RATE:g} "
        f"(rate_limited_total {b_limited}); A counted {a_foreign:g} foreign records, "
        f"its rate stayed in [{min(a_rates):g}, {max(a_rates):g}] "
        f"(rate_limited_total {a_limited}), then its own 429 made it {a_own_limited}"
    )
    assert b_limited is not None
    assert b_limited >= 1
    assert a_rates
    assert set(a_rates) == {RATE}, a_rates
    assert not a_limited  # none of B's 429s were counted by A
    assert a_own_limited == 1
