"""Credit from the egress group's lag in the scheduler (``--egress-group``): the reader turns
the group's committed offsets and egress's end offsets into a ``LagChange`` (an admin
client stands in for the broker), and the emitter applies it from its mailbox: the bound
limits the slots, the lag frees the oldest. Time is a ManualClock."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from fairstream.config import Settings
from fairstream.core import ManualClock
from fairstream.scheduler.feedback.egress_lag import MARGIN, STALE, EgressLagReader
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import ConcurrencyChange, LagChange
from fairstream.scheduler.metrics import Metrics
from tests.unit.scheduler.test_emit_rule import make, push, sent
from tests.unit.test_config import settings_of

__all__ = ["make"]  # the fixture


def done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


class Admin:
    """What the reader asks of an AdminClient: one egress topic of ``ends`` partitions, the
    group's ``committed`` offsets; ``failing`` makes every request fail."""

    def __init__(self, ends: dict[int, int], committed: dict[int, int]) -> None:
        self.ends = ends
        self.committed = committed
        self.failing = False

    def list_topics(self, topic: str, timeout: float) -> Any:
        partitions = dict.fromkeys(self.ends)
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})

    def list_offsets(self, asked: dict[TopicPartition, Any], **_: Any) -> dict[Any, Any]:
        if self.failing:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return {tp: done(SimpleNamespace(offset=self.ends[tp.partition])) for tp in asked}

    def list_consumer_group_offsets(self, asked: list[Any], **_: Any) -> dict[str, Any]:
        group = asked[0].group_id
        tps = []
        for tp in asked[0].topic_partitions:
            offset = self.committed.get(tp.partition, -1001)
            tps.append(TopicPartition(tp.topic, tp.partition, offset))
        return {group: done(SimpleNamespace(topic_partitions=tps))}


def reader(clock: ManualClock) -> tuple[EgressLagReader, Handoff, Metrics]:
    handoff, metrics = Handoff(), Metrics()
    lag = EgressLagReader(
        {"bootstrap.servers": "127.0.0.1:9"}, "egress", "workers", handoff, metrics, clock=clock
    )
    return lag, handoff, metrics


def gauges(metrics: Metrics) -> tuple[float | None, float | None]:
    get = metrics.registry.get_sample_value
    return get("fairstream_egress_lag"), get("fairstream_egress_lag_bound")


def test_an_absent_group_leaves_the_emitter_unlimited() -> None:
    clock = ManualClock(10.0)
    lag, handoff, metrics = reader(clock)
    admin = Admin({0: 100, 1: 50}, {})
    for _ in range(5):
        assert lag.sample(admin) is None  # type: ignore[arg-type]
        clock.advance(0.1)
    assert not handoff.controls
    assert gauges(metrics) == (-1, -1)


def test_a_committing_group_gives_a_bound_and_its_lag() -> None:
    clock = ManualClock(10.0)
    lag, handoff, metrics = reader(clock)
    # Partition 0: 10 records and a marker waiting; partition 1: caught up.
    admin = Admin({0: 31, 1: 8}, {0: 20, 1: 7})
    change = lag.sample(admin)  # type: ignore[arg-type]
    assert change == LagChange(bound=4, lag=10, at=10.0 - MARGIN)
    assert list(handoff.controls) == [change]
    assert gauges(metrics) == (10, 4)


def test_a_failed_read_keeps_the_bound_a_while_then_drops_it() -> None:
    clock = ManualClock(10.0)
    lag, _, metrics = reader(clock)
    admin = Admin({0: 31}, {0: 20})
    assert lag.sample(admin) is not None  # type: ignore[arg-type]
    admin.failing = True
    clock.advance(1.0)
    assert lag.sample(admin) is None  # type: ignore[arg-type]
    assert metrics.registry.get_sample_value("fairstream_egress_lag_errors_total") == 1
    assert gauges(metrics) == (10, 4)  # the last bound holds
    clock.advance(STALE)
    change = lag.sample(admin)  # type: ignore[arg-type]
    assert change is not None
    assert (change.bound, change.lag) == (None, None)
    assert gauges(metrics) == (-1, -1)


def test_the_emitter_limits_by_the_bound_and_frees_by_the_lag(make: Any) -> None:
    emitter = make()  # owns 2 of 4 partitions: half the group's slots, half its lag
    for offset in range(20):
        push(emitter, "A", offset)
    emitter._control(LagChange(bound=8, lag=0, at=emitter.clock.now()))
    assert emitter.rule.inflight.limit == 4
    emitter._emit_some()
    assert len(sent(emitter)) == 4
    assert emitter._emit_some() == 0  # the slots are held
    emitter.clock.advance(1.0)
    # The group consumed all but 2 of the group's 4 (this instance's part: 1): 3 freed.
    emitter._control(LagChange(bound=8, lag=2, at=emitter.clock.now()))
    assert len(emitter.rule.inflight) == 1
    emitter._emit_some()
    assert len(sent(emitter)) == 7
    # A sample from before those 3 were released frees none of them, only older ones.
    emitter._control(LagChange(bound=8, lag=0, at=emitter.clock.now() - 0.5))
    assert len(emitter.rule.inflight) == 3
    assert emitter.metrics.registry.get_sample_value("fairstream_concurrency_in_flight") == 3
    # Unknown: unlimited, and the slots still held wait for news.
    emitter._control(LagChange(bound=None, lag=None, at=emitter.clock.now()))
    assert emitter.rule.inflight.limit is None
    emitter._emit_some()
    assert len(sent(emitter)) == 20


def test_the_least_of_the_limits_applies(make: Any) -> None:
    emitter = make()
    emitter._control(ConcurrencyChange(40))
    emitter._control(LagChange(bound=8, lag=0, at=0.0))
    assert emitter.rule.inflight.limit == 4
    emitter._control(LagChange(bound=400, lag=0, at=0.0))
    assert emitter.rule.inflight.limit == 20  # the feedback's
    emitter._control(ConcurrencyChange(None))
    assert emitter.rule.inflight.limit == 200
    fixed = make(max_concurrency=6)
    fixed._control(LagChange(bound=400, lag=0, at=0.0))
    assert fixed.rule.inflight.limit == 3
    fixed._control(LagChange(bound=2, lag=0, at=0.0))
    assert fixed.rule.inflight.limit == 1
    fixed._control(LagChange(bound=None, lag=None, at=0.0))
    assert fixed.rule.inflight.limit == 3


def test_the_setting_from_flags_and_environment() -> None:
    assert Settings().egress_group is None
    assert settings_of([]).egress_group is None
    assert settings_of([], env={"FAIRSTREAM_EGRESS_GROUP": ""}).egress_group is None
    assert settings_of(["--egress-group", "workers"]).egress_group == "workers"
    env = {"FAIRSTREAM_EGRESS_GROUP": "workers"}
    assert settings_of([], env=env).egress_group == "workers"
