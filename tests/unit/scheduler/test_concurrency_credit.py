"""The adaptive concurrency limit in the scheduler: the feedback reader feeds it from final
outcomes and hands the limit to the emitter as a ``ConcurrencyChange``; the emitter's rule
takes it, unless --max-concurrency is fixed. No broker: records are decoded from bytes;
time is a ManualClock."""

from __future__ import annotations

from typing import Any

import pytest

from fairstream.config import Settings
from fairstream.core import ConcurrencyLimit, ManualClock
from fairstream.scheduler.feedback.reader import FeedbackReader
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import ConcurrencyChange, FeedbackBatch, LagChange
from fairstream.scheduler.metrics import Metrics
from fairstream.wire.feedback import Feedback, Outcome, Scope, encode_feedback, feedback_key
from tests.unit.scheduler.test_emit_rule import make, push, sent

__all__ = ["make"]  # the fixture


def reader(clock: ManualClock) -> tuple[FeedbackReader, Handoff, Metrics, ConcurrencyLimit]:
    handoff, metrics = Handoff(), Metrics()
    credit = ConcurrencyLimit(clock, idle=60.0)
    fr = FeedbackReader(
        {"bootstrap.servers": "127.0.0.1:9"},  # never polled here
        "feedback",
        handoff,
        metrics,
        ceiling=100.0,
        floor=None,
        clock=clock,
        concurrency=credit,
    )
    return fr, handoff, metrics, credit


def report(
    clock: ManualClock,
    request_id: str,
    outcome: Outcome = Outcome.OK,
    *,
    sojourn: float | None = 0.3,
    latency: float = 0.1,
    scope: Scope | None = None,
) -> tuple[bytes, bytes]:
    """A report made now, of a request released ``sojourn`` seconds ago."""
    now_ms = clock.epoch_ms()
    fb = Feedback(
        request_id=request_id,
        tenant="acme",
        outcome=outcome,
        declared_cost=1,
        latency=latency,
        reported_at_ms=now_ms,
        scheduled_at_ms=None if sojourn is None else now_ms - int(sojourn * 1000),
        **({"scope": scope, "retry_after": 0.5} if scope is not None else {}),
    )
    return feedback_key(fb), encode_feedback(fb)


def changes(handoff: Handoff) -> list[ConcurrencyChange]:
    return [item for item in handoff.controls if isinstance(item, ConcurrencyChange)]


def gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("fairstream_concurrency_adaptive_limit")


def test_no_final_feedback_with_a_release_time_no_limit() -> None:
    clock = ManualClock(10.0)
    fr, handoff, metrics, credit = reader(clock)
    fr._publish_limit(clock.now())
    batch = FeedbackBatch()
    fr._read(*report(clock, "r1", sojourn=None), batch)  # a worker that knows no stamp
    fr._read(*report(clock, "r2", Outcome.FAILED), batch)  # not final: a retry follows
    clock.advance(1.0)
    fr._publish_limit(clock.now())
    assert changes(handoff) == []
    assert credit.limit is None
    assert gauge(metrics) == -1


def test_final_outcomes_give_the_emitter_a_limit_and_it_goes_when_feedback_stops() -> None:
    clock = ManualClock(10.0)
    fr, handoff, metrics, credit = reader(clock)
    batch = FeedbackBatch()
    for i in range(11):  # a window of completions (1 s): the rate can be told
        outcome = Outcome.DEAD_LETTERED if i == 3 else Outcome.OK
        fr._read(*report(clock, f"r{i}", outcome), batch)
        clock.advance(0.1)
    fr._publish_limit(clock.now())
    [change] = changes(handoff)
    assert change.limit is not None
    assert change.limit >= 2
    assert gauge(metrics) == change.limit
    assert credit.base_wait == pytest.approx(0.2)  # the sojourn less the call
    fr._publish_limit(clock.now())
    assert len(changes(handoff)) == 1  # handed over when it moves only
    clock.advance(61.0)
    fr._publish_limit(clock.now())
    assert changes(handoff)[-1] == ConcurrencyChange(None, learning=True)
    assert gauge(metrics) == -1


def test_an_api_scope_429_sets_the_limit_aside() -> None:
    clock = ManualClock(10.0)
    fr, handoff, _, _ = reader(clock)
    batch = FeedbackBatch()
    for i in range(11):
        fr._read(*report(clock, f"r{i}"), batch)
        clock.advance(0.1)
    fr._publish_limit(clock.now())
    assert changes(handoff)[-1].limit is not None
    fr._read(*report(clock, "r-429", Outcome.RATE_LIMITED, scope=Scope.API), batch)
    clock.advance(0.3)
    fr._publish_limit(clock.now())
    assert changes(handoff)[-1] == ConcurrencyChange(None)


def test_the_emitter_applies_the_limit_from_its_mailbox(make: Any) -> None:
    emitter = make()  # owns 2 of 4 partitions: half the group's slots
    for offset in range(10):
        push(emitter, "A", offset)
    emitter._control(ConcurrencyChange(4))
    assert emitter.rule.inflight.limit == 2
    assert emitter.counts_slots() is False  # published at the next round
    emitter._emit_some()
    assert len(sent(emitter)) == 2
    assert emitter._emit_some() == 0  # the slots are held
    assert emitter.metrics.registry.get_sample_value("fairstream_concurrency_limit") == 2
    emitter._control(ConcurrencyChange(None))
    assert emitter.rule.inflight.limit is None
    emitter._emit_some()
    assert len(sent(emitter)) == 10


def test_slots_are_counted_from_the_first_limit_on(make: Any) -> None:
    # Counted before it, each request released to workers that report nothing would hold
    # a slot until its lease ran out, counted as a lost completion.
    emitter = make(rate=1000)  # owns 2 of 4 partitions: 500/s here
    assert not emitter.rule.tracking
    for offset in range(10):
        push(emitter, "A", offset)
    emitter.clock.advance(1.0)
    emitter._emit_some()
    assert len(sent(emitter)) == 10  # no limit yet: as before
    assert len(emitter.rule.inflight) == 0
    for offset in range(10, 16):
        push(emitter, "A", offset)
    emitter._control(ConcurrencyChange(8))  # 4 here; the 10 released before hold none
    emitter.clock.advance(1.0)
    emitter._emit_some()
    assert len(sent(emitter)) == 14
    assert emitter._emit_some() == 0
    emitter._control(FeedbackBatch(settled=[rid for _, rid in sent(emitter)[10:12]]))
    emitter._emit_some()
    assert len(sent(emitter)) == 16


def test_nothing_is_counted_before_a_limit(make: Any) -> None:
    assert not make().rule.tracking
    assert not make(rate=1000).rule.tracking
    assert not make(rate=1000, adaptive_concurrency=False).rule.tracking
    assert not make(rate=1000, feedback_topic="").rule.tracking


def test_a_fixed_max_concurrency_is_kept(make: Any) -> None:
    emitter = make(max_concurrency=4)
    emitter._control(ConcurrencyChange(40))
    assert emitter.rule.inflight.limit == 2
    emitter._control(ConcurrencyChange(None))
    assert emitter.rule.inflight.limit == 2


def test_the_setting_is_on_by_default_and_can_be_turned_off() -> None:
    assert Settings().adaptive_concurrency
    assert not Settings(adaptive_concurrency=False).adaptive_concurrency


# -- the start-up window: a few slots until the feedback finds a limit ----------------------------


def started(make: Any) -> Any:
    """An emitter with feedback on (no limit found yet) and 100 records of one tenant: the
    start-up window is 8 slots group-wide, 4 here (2 of 4 partitions owned)."""
    emitter = make(rate=100, burst=100, feedback_topic="fb")
    for offset in range(100):
        push(emitter, "A", offset)
    emitter.clock.advance(5.0)  # tokens for all of them: only the slots hold them back
    return emitter


def test_before_a_limit_is_found_the_start_up_window_holds_releases(make: Any) -> None:
    # Released at --rate for the first hold, a second of releases queued in egress and in
    # an API that queues, ahead of every quiet tenant.
    emitter = started(make)
    assert emitter.pacing.startup.limit == 8
    emitter._emit_some()
    assert len(sent(emitter)) == 4
    assert emitter._emit_some() == 0
    emitter._control(FeedbackBatch(settled=[rid for _, rid in sent(emitter)[:3]]))
    assert emitter.pacing.startup.heard  # the feedback flows: no more doubling
    emitter._emit_some()
    assert len(sent(emitter)) == 7  # settled slots are free again
    emitter._control(ConcurrencyChange(40))  # found: the window is done, 20 here
    assert emitter.pacing.startup.limit is None
    emitter._emit_some()
    assert len(sent(emitter)) == 7 + 16  # 20 in flight: the 4 held and 16 more
    assert len(emitter.rule.inflight) == 20


def test_without_feedback_the_window_doubles_then_opens_and_gives_its_slots_back(
    make: Any,
) -> None:
    emitter = started(make)
    clock, pacing = emitter.clock, emitter.pacing
    emitter._emit_some()
    pacing.review_startup(clock.now())  # the first release: the window's time starts
    assert len(sent(emitter)) == 4
    clock.advance(1.5)
    pacing.review_startup(clock.now())
    assert emitter.rule.inflight.limit == 8  # 16 group-wide
    emitter._emit_some()
    assert len(sent(emitter)) == 8
    clock.advance(6.5)  # 8 s after the first release: nothing reported, the window opens
    pacing.review_startup(clock.now())
    assert pacing.startup.limit is None
    assert not pacing.startup.armed
    assert len(emitter.rule.inflight) == 0  # no settlement would ever free them
    assert not emitter.rule.tracking
    for _ in range(3):
        clock.advance(1.0)  # 50 tokens a second here
        emitter._emit_some()
    assert len(sent(emitter)) == 100
    assert len(emitter.rule.inflight) == 0


def test_with_an_egress_group_the_window_opens_and_its_lag_still_holds_the_slots(
    make: Any,
) -> None:
    # Plain consumers (--egress-group) report nothing: the window opens after its timeout.
    # The records it let go still wait downstream, in the group's lag: their slots stay
    # taken until the lag frees them. Given back, each was released a second time.
    emitter = started(make)
    clock, pacing = emitter.clock, emitter.pacing
    emitter._emit_some()
    pacing.review_startup(clock.now())
    assert len(sent(emitter)) == 4
    emitter._control(LagChange(bound=12, lag=8, at=clock.now()))  # 4 of them here, waiting
    assert len(emitter.rule.inflight) == 4
    clock.advance(8.0)
    pacing.review_startup(clock.now())
    assert pacing.startup.limit is None
    assert len(emitter.rule.inflight) == 4  # the lag still holds them
    emitter._emit_some()
    assert len(emitter.rule.inflight) == 6  # this instance's half of the bound of 12
    emitter._control(LagChange(bound=12, lag=2, at=clock.now()))  # the group consumed
    assert len(emitter.rule.inflight) == 1


def test_a_settled_request_stops_the_doubling_but_not_the_timeout(make: Any) -> None:
    emitter = started(make)
    clock, pacing = emitter.clock, emitter.pacing
    emitter._emit_some()
    pacing.review_startup(clock.now())
    emitter._control(FeedbackBatch(settled=[sent(emitter)[0][1]]))
    clock.advance(3.0)
    pacing.review_startup(clock.now())
    assert emitter.rule.inflight.limit == 4  # not doubled: a limit is on its way
    clock.advance(5.0)  # none came (an API refusing calls keeps it aside): open
    pacing.review_startup(clock.now())
    assert pacing.startup.limit is None


def test_a_limit_that_forgot_everything_arms_the_window_again(make: Any) -> None:
    emitter = started(make)
    emitter._control(ConcurrencyChange(10))
    assert emitter.rule.inflight.limit == 5
    emitter._control(ConcurrencyChange(None))  # standing aside for 429s: no window
    assert emitter.rule.inflight.limit is None
    emitter._control(ConcurrencyChange(12))
    emitter._control(ConcurrencyChange(None, learning=True))  # idle: nothing known again
    assert emitter.rule.inflight.limit == 4


def test_no_window_without_a_rate_feedback_or_with_a_fixed_limit(make: Any) -> None:
    assert make(feedback_topic="fb").pacing.startup is None  # the fastest release is asked
    assert make(rate=100, feedback_topic="").pacing.startup is None
    assert make(rate=100, feedback_topic="fb", adaptive_concurrency=False).pacing.startup is None
    assert make(rate=100, feedback_topic="fb", max_concurrency=4).pacing.startup is None
