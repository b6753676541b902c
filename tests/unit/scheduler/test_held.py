"""Holds on the partitions an instance writes (``held``): a last stable offset that stands
still behind its end for the patience is a transaction left open. The emitter is asked to
sweep once per hold; a hold that outlives the sweep is reported as another producer's. A
manual clock, and an admin client that answers from dicts."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition

from fairstream.core import ManualClock
from fairstream.scheduler.held import HeldReader, HeldWatch, held_patience
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Conditions

E0, E1 = ("egress", 0), ("egress", 1)


def test_patience_is_three_transaction_timeouts_and_at_least_30_s():
    assert held_patience(10.0) == 30.0
    assert held_patience(60.0) == 180.0


def test_a_hold_counts_after_the_patience_and_is_reported_once():
    watch = HeldWatch(30.0)
    assert watch.observe(0.0, {E0: 5, E1: 9}, {E0: 9, E1: 9}) == []
    assert watch.observe(29.0, {E0: 5, E1: 9}, {E0: 12, E1: 9}) == []
    assert watch.observe(30.0, {E0: 5, E1: 9}, {E0: 12, E1: 9}) == [E0]
    assert watch.held == {E0}
    assert watch.observe(60.0, {E0: 5, E1: 9}, {E0: 14, E1: 9}) == []  # reported already
    assert watch.held == {E0}


def test_a_moving_last_stable_offset_is_no_hold():
    watch = HeldWatch(30.0)
    for second in range(0, 100, 10):  # transactions commit: it moves, behind the end
        assert watch.observe(float(second), {E0: second}, {E0: second + 3}) == []
    assert watch.held == set()


def test_a_hold_ends_when_the_partition_is_stable_and_a_new_one_counts_afresh():
    watch = HeldWatch(30.0)
    watch.observe(0.0, {E0: 5}, {E0: 9})
    assert watch.observe(30.0, {E0: 5}, {E0: 9}) == [E0]
    assert watch.observe(31.0, {E0: 10}, {E0: 10}) == []  # closed: stable at its end
    assert watch.held == set()
    watch.observe(40.0, {E0: 10}, {E0: 20})
    assert watch.observe(69.0, {E0: 10}, {E0: 20}) == []
    assert watch.observe(70.0, {E0: 10}, {E0: 20}) == [E0]


class Admin:
    """``list_topics`` and ``list_offsets`` answered from what the test sets."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.stable: dict[tuple[str, int], int] = {}

    def list_topics(self, timeout: float) -> Any:
        topic = SimpleNamespace(error=None, partitions={0: None, 1: None})
        return SimpleNamespace(topics={"egress": topic})

    def list_offsets(self, asked: dict[TopicPartition, Any], **kwargs: Any) -> Any:
        level = kwargs["isolation_level"]
        answer = self.ends if level == IsolationLevel.READ_UNCOMMITTED else self.stable
        futures = {}
        for tp in asked:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(offset=answer[(tp.topic, tp.partition)]))
            futures[tp] = future
        return futures


def test_the_reader_asks_for_one_sweep_then_names_another_producers_hold(caplog):
    clock = ManualClock(0.0)
    asked: list[list[tuple[str, int]]] = []
    metrics = Metrics()
    conditions = Conditions()
    reader = HeldReader(
        ("egress", "missing"), 30.0, metrics, asked.append, clock.now, conditions=conditions
    )
    admin = Admin()
    admin.ends = {E0: 9, E1: 4}
    admin.stable = {E0: 5, E1: 4}
    reader.round(admin)  # type: ignore[arg-type]
    clock.advance(30)
    with caplog.at_level(logging.WARNING, logger="fairstream.held"):
        reader.round(admin)  # type: ignore[arg-type]
    assert asked == [[E0]]
    assert "sweeps its own" in caplog.text
    assert metrics.held_output._value.get() == 1
    [held] = conditions.current()
    assert (held.name, held.blocks_ready) == ("held-output", False)
    assert "egress[0] at 5" in held.reason
    clock.advance(29)
    reader.round(admin)  # type: ignore[arg-type]
    assert "another producer" not in caplog.text  # the sweep has a patience to act
    clock.advance(1)
    with caplog.at_level(logging.ERROR, logger="fairstream.held"):
        reader.round(admin)  # type: ignore[arg-type]
        reader.round(admin)  # type: ignore[arg-type]
    assert asked == [[E0]]  # no second sweep for the same hold
    assert caplog.text.count("another producer") == 1
    assert "abort --topic egress --partition 0 --start-offset 5" in caplog.text
    admin.stable = {E0: 9, E1: 4}  # someone aborted it
    reader.round(admin)  # type: ignore[arg-type]
    assert metrics.held_output._value.get() == 0
    assert conditions.current() == []


def test_an_unanswered_read_is_no_hold():
    class Silent(Admin):
        def list_offsets(self, asked: dict[TopicPartition, Any], **kwargs: Any) -> Any:
            futures = {}
            for tp in asked:
                future: Future[Any] = Future()
                future.set_exception(TimeoutError("no answer"))
                futures[tp] = future
            return futures

    asked: list[list[tuple[str, int]]] = []
    reader = HeldReader(("egress",), 30.0, Metrics(), asked.append, ManualClock(0.0).now)
    reader.round(Silent())  # type: ignore[arg-type]
    assert asked == []
