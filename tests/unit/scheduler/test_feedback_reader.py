"""The feedback reader's decisions on single records: which reported costs are charged,
which are counted as unknown and ignored, what is left of a Retry-After. No broker: records
are decoded from bytes; time is a ManualClock (the reader's, the emitter's in the service)."""

from __future__ import annotations

import pytest

from fairstream.core import ManualClock
from fairstream.core.clock import EPOCH_MS
from fairstream.scheduler.feedback.reader import FeedbackReader
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import AdaptiveChange, FeedbackBatch
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.recent import RecentRequests
from fairstream.wire.feedback import Feedback, Outcome, Scope, encode_feedback, feedback_key
from fairstream.wire.partition import murmur2, partition_of

PARTITIONS = 4


def reader(
    recent: RecentRequests | None,
    owned: set[int] | None = None,
    clock: ManualClock | None = None,
    egress_topic: str | None = None,
) -> tuple[FeedbackReader, Metrics]:
    metrics = Metrics()
    ownership = None if owned is None else (lambda: (PARTITIONS, owned))
    return (
        FeedbackReader(
            {"bootstrap.servers": "127.0.0.1:9"},  # never polled here
            "feedback",
            Handoff(),
            metrics,
            ceiling=100.0,
            floor=None,
            recent=recent,
            ownership=ownership,
            clock=clock or ManualClock(),
            egress_topic=egress_topic,
        ),
        metrics,
    )


def record(request_id: str, tenant: str = "acme", cost: int = 10) -> tuple[bytes, bytes]:
    fb = Feedback(
        request_id=request_id,
        tenant=tenant,
        outcome=Outcome.OK,
        declared_cost=1,
        reported_at_ms=EPOCH_MS,  # the ManualClock's wall clock at 0
        cost=cost,
    )
    return feedback_key(fb), encode_feedback(fb)


def unknown(metrics: Metrics) -> float:
    return (
        metrics.registry.get_sample_value(
            "fairstream_feedback_errors_total", {"reason": "unknown-request"}
        )
        or 0.0
    )


def test_a_cost_for_a_request_emitted_here_is_charged() -> None:
    recent = RecentRequests()
    recent.add(b"ingest-0-17")
    fr, metrics = reader(recent, owned={partition_of("acme", PARTITIONS)})
    batch = FeedbackBatch()
    fr._read(*record("ingest-0-17"), batch)
    assert batch.charges == [("acme", 1, 10, 0)]
    assert unknown(metrics) == 0


def test_a_cost_for_a_request_nobody_emitted_is_counted_and_ignored() -> None:
    fr, metrics = reader(RecentRequests(), owned={partition_of("acme", PARTITIONS)})
    batch = FeedbackBatch()
    fr._read(*record("forged-1"), batch)
    fr._read(*record("forged-2"), batch)
    assert batch.charges == []
    assert unknown(metrics) == 2


def test_another_instances_tenant_is_left_to_that_instance() -> None:
    mine = partition_of("acme", PARTITIONS)
    fr, metrics = reader(RecentRequests(), owned=set(range(PARTITIONS)) - {mine})
    batch = FeedbackBatch()
    fr._read(*record("elsewhere-1"), batch)
    assert batch.charges == []
    assert unknown(metrics) == 0  # not ours to judge


def test_without_a_memory_of_requests_every_cost_is_charged() -> None:
    fr, _ = reader(None)
    batch = FeedbackBatch()
    fr._read(*record("anything"), batch)
    assert batch.charges == [("acme", 1, 10, 0)]


def test_recent_requests_remember_the_last_capacity_and_at_most_twice_as_many() -> None:
    recent = RecentRequests(capacity=3)
    for i in range(5):
        recent.add(b"r%d" % i)
    recent.add(b"r4")  # again: no second entry
    # r0-r2 filled the first generation; r3 and r4 are in the second: the last 3 are known.
    assert [r in recent for r in ("r0", "r1", "r2", "r3", "r4")] == [True] * 5
    assert len(recent) == 5
    recent.add(b"r5")  # the second generation is full: the first (r0-r2) is forgotten
    assert [r in recent for r in ("r0", "r2", "r3", "r5")] == [False, False, True, True]
    for i in range(6, 100):
        recent.add(b"r%d" % i)
        assert all(b"r%d" % j in recent for j in range(i - 2, i + 1))  # the last 3, always
        assert len(recent) <= 6
    with pytest.raises(ValueError, match="capacity"):
        RecentRequests(capacity=0)


@pytest.mark.parametrize(
    ("key", "expected"),
    [  # Kafka's own test vectors (clients/src/test/.../utils/UtilsTest.java)
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def outcome(request_id: str, result: Outcome) -> tuple[bytes, bytes]:
    fb = Feedback(
        request_id=request_id,
        tenant="acme",
        outcome=result,
        declared_cost=1,
        reported_at_ms=EPOCH_MS,
    )
    return feedback_key(fb), encode_feedback(fb)


def test_final_outcomes_free_slots_and_retried_attempts_renew_them() -> None:
    fr, _ = reader(None)
    batch = FeedbackBatch()
    fr._read(*outcome("r-ok", Outcome.OK), batch)
    fr._read(*outcome("r-dead", Outcome.DEAD_LETTERED), batch)
    fr._read(*outcome("r-failed", Outcome.FAILED), batch)
    assert batch.settled == [b"r-ok", b"r-dead"]
    assert batch.renewed == [b"r-failed"]


def test_no_slots_counted_no_request_ids_handed_over() -> None:
    fr = FeedbackReader(
        {"bootstrap.servers": "127.0.0.1:9"},
        "feedback",
        Handoff(),
        Metrics(),
        ceiling=None,
        floor=None,
        slots=lambda: False,
        clock=ManualClock(),
    )
    batch = FeedbackBatch()
    fr._read(*outcome("r-ok", Outcome.OK), batch)
    assert (batch.settled, batch.renewed) == ([], [])


def rate_limited(scope: Scope, retry_after: float, reported_at_ms: int) -> tuple[bytes, bytes]:
    fb = Feedback(
        request_id="r-429",
        tenant="acme",
        outcome=Outcome.RATE_LIMITED,
        declared_cost=1,
        reported_at_ms=reported_at_ms,
        scope=scope,
        retry_after=retry_after,
    )
    return feedback_key(fb), encode_feedback(fb)


def test_a_tenants_retry_after_counts_from_its_report_by_the_readers_clock() -> None:
    clock = ManualClock(10.0)
    fr, _ = reader(None, clock=clock)
    reported = clock.epoch_ms()
    clock.advance(0.5)  # the record took half a second to reach the reader
    batch = FeedbackBatch()
    fr._read(*rate_limited(Scope.TENANT, 2.0, reported), batch)
    assert batch.pauses == [("acme", 1.5)]  # exact: one clock, no sleep


def test_an_api_hold_ends_on_the_readers_clock() -> None:
    clock = ManualClock(10.0)
    fr, _ = reader(None, clock=clock)
    fr._read(*rate_limited(Scope.API, 3.0, clock.epoch_ms()), FeedbackBatch())
    fr._publish(clock.now())
    [change] = [c for c in fr.handoff.controls if isinstance(c, AdaptiveChange)]
    assert change.hold_until == fr.view.hold_until == pytest.approx(13.0)
    assert change.factor < 1  # a 429 lowered the rate


def test_the_api_is_measured_by_when_calls_ended_not_when_reports_arrived() -> None:
    """A second of calls at 50/s whose reports all arrive at once (one fetched batch),
    then a 429: the cut aims at the 50/s they went through at, not at a burst of 50 in
    the instant they arrived."""
    clock = ManualClock(10.0)
    fr, _ = reader(None, clock=clock)
    start = clock.epoch_ms()
    clock.advance(1.0)
    for i in range(50):
        fb = Feedback(
            request_id=f"r-{i}",
            tenant="acme",
            outcome=Outcome.OK,
            declared_cost=1,
            reported_at_ms=start + 20 * (i + 1),
        )
        fr._read(feedback_key(fb), encode_feedback(fb), FeedbackBatch())
    fr._read(*rate_limited(Scope.API, 0.0, clock.epoch_ms()), FeedbackBatch())
    assert fr.adaptive is not None
    assert fr.adaptive.rate() == pytest.approx(0.97 * 50, rel=0.1)


def test_a_late_report_of_a_retry_after_that_has_passed_holds_nothing() -> None:
    """A 429 asking for 0.1 s, whose report arrives 0.8 s after the call: the Retry-After
    passed long ago. It holds nothing, and is not taken for a long hold (which would stop
    the API being measured): a later 429 still cuts to the throughput measured."""
    clock = ManualClock(10.0)
    fr, _ = reader(None, clock=clock)
    assert fr.adaptive is not None

    def calls(seconds: float, per_second: int) -> None:
        start = clock.epoch_ms()
        clock.advance(seconds)
        for i in range(int(seconds * per_second)):
            fb = Feedback(
                request_id=f"r-{start}-{i}",
                tenant="acme",
                outcome=Outcome.OK,
                declared_cost=1,
                reported_at_ms=start + round(1000 * (i + 1) / per_second),
            )
            fr._read(feedback_key(fb), encode_feedback(fb), FeedbackBatch())

    calls(1.0, 50)
    fr._read(*rate_limited(Scope.API, 0.1, clock.epoch_ms() - 800), FeedbackBatch())
    assert fr.adaptive.held_for() == 0.0
    calls(1.5, 20)  # the API takes 20/s now
    fr._read(*rate_limited(Scope.API, 0.0, clock.epoch_ms()), FeedbackBatch())
    assert fr.adaptive.rate() == pytest.approx(0.97 * 20, rel=0.15)


# -- one deployment's feedback: the egress topic it names ----------------------------------


def other(
    egress_topic: str | None, result: Outcome, scope: Scope | None = None
) -> tuple[bytes, bytes]:
    fb = Feedback(
        request_id=f"r-{result.value}",
        tenant="acme",
        outcome=result,
        declared_cost=1,
        reported_at_ms=EPOCH_MS,
        cost=10 if result is Outcome.OK else None,
        scope=scope,
        retry_after=2.0 if scope is not None else None,
        egress_topic=egress_topic,
    )
    return feedback_key(fb), encode_feedback(fb)


def sample(metrics: Metrics, name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_another_deployments_feedback_is_counted_and_ignored_whole() -> None:
    """Deployment B's records on the feedback topic A shares: its 429s neither cut nor hold
    A's rate, its tenant 429s pause nothing, its costs charge nothing, its request ids settle
    and renew nothing."""
    clock = ManualClock(10.0)
    fr, metrics = reader(None, clock=clock, egress_topic="a.egress")
    assert fr.adaptive is not None
    batch = FeedbackBatch()
    for _ in range(5):
        fr._read(*other("b.egress", Outcome.RATE_LIMITED, Scope.API), batch)
    fr._read(*other("b.egress", Outcome.RATE_LIMITED, Scope.TENANT), batch)
    fr._read(*other("b.egress", Outcome.OK), batch)
    fr._read(*other("b.egress", Outcome.FAILED), batch)
    assert batch == FeedbackBatch()
    assert fr.adaptive.rate() == 100.0
    assert fr.adaptive.held_for() == 0.0
    foreign = {"reason": "foreign"}
    assert sample(metrics, "fairstream_feedback_errors_total", foreign) == 8
    assert sample(metrics, "fairstream_feedback_rate_limited_total", {}) == 0
    assert sample(metrics, "fairstream_feedback_records_total", {"outcome": "ok"}) == 0


def test_this_deployments_feedback_is_used() -> None:
    clock = ManualClock(10.0)
    fr, metrics = reader(None, clock=clock, egress_topic="a.egress")
    assert fr.adaptive is not None
    batch = FeedbackBatch()
    fr._read(*other("a.egress", Outcome.OK), batch)
    fr._read(*other("a.egress", Outcome.RATE_LIMITED, Scope.TENANT), batch)
    fr._read(*other("a.egress", Outcome.RATE_LIMITED, Scope.API), batch)
    assert batch.charges == [("acme", 1, 10, 0)]
    assert batch.pauses == [("acme", 2.0)]
    assert batch.settled == [b"r-ok"]
    assert fr.adaptive.rate() < 100.0
    assert fr.adaptive.held_for() == pytest.approx(2.0)
    assert sample(metrics, "fairstream_feedback_rate_limited_total", {}) == 1
    assert sample(metrics, "fairstream_feedback_errors_total", {"reason": "foreign"}) == 0


def test_a_record_naming_no_egress_topic_is_used_as_before() -> None:
    """A worker before the field (a v1 record) names no egress topic: its 429 counts."""
    clock = ManualClock(10.0)
    fr, metrics = reader(None, clock=clock, egress_topic="a.egress")
    assert fr.adaptive is not None
    fr._read(*other(None, Outcome.RATE_LIMITED, Scope.API), FeedbackBatch())
    assert fr.adaptive.rate() < 100.0
    assert sample(metrics, "fairstream_feedback_errors_total", {"reason": "foreign"}) == 0


def test_a_reader_told_no_egress_topic_uses_every_record() -> None:
    fr, metrics = reader(None, clock=ManualClock(10.0))
    assert fr.adaptive is not None
    fr._read(*other("b.egress", Outcome.RATE_LIMITED, Scope.API), FeedbackBatch())
    assert fr.adaptive.rate() < 100.0
    assert sample(metrics, "fairstream_feedback_errors_total", {"reason": "foreign"}) == 0
