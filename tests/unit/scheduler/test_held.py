"""Holds on the partitions an instance writes (``held``): a last stable offset that stands
still behind its end for the patience is a transaction left open, reported once per hold (a
log line with the commands, a gauge, a readiness condition). A manual clock, and an admin
client that answers from dicts."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition

from fairstream.core import ManualClock
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Conditions
from fairstream.scheduler.retention.held import HeldReader, HeldWatch, held_patience

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


def test_a_hold_is_reported_once_and_cleared_when_it_ends(caplog):
    clock = ManualClock(0.0)
    metrics = Metrics()
    conditions = Conditions()
    reader = HeldReader(("egress", "missing"), 30.0, metrics, clock.now, conditions=conditions)
    admin = Admin()
    admin.ends = {E0: 9, E1: 4}
    admin.stable = {E0: 5, E1: 4}
    reader.round(admin)  # type: ignore[arg-type]
    assert conditions.current() == []
    clock.advance(30)
    with caplog.at_level(logging.ERROR, logger="fairstream.held"):
        reader.round(admin)  # type: ignore[arg-type]
        clock.advance(30)
        reader.round(admin)  # type: ignore[arg-type]
    assert caplog.text.count("no coordinator will close") == 1
    assert "describe-producers --topic egress --partition 0" in caplog.text
    assert "abort --topic egress --partition 0 --start-offset 5" in caplog.text
    assert metrics.held_output._value.get() == 1
    [held] = conditions.current()
    assert (held.name, held.blocks_ready) == ("held-output", False)
    assert "egress[0] at 5" in held.reason
    admin.stable = {E0: 9, E1: 4}  # its producer wrote there again
    reader.round(admin)  # type: ignore[arg-type]
    assert metrics.held_output._value.get() == 0
    assert conditions.current() == []


def test_a_partition_gone_from_the_reading_is_no_longer_held():
    watch = HeldWatch(30.0)
    watch.observe(0.0, {E0: 5, E1: 1}, {E0: 9, E1: 3})
    assert watch.observe(30.0, {E0: 5, E1: 1}, {E0: 9, E1: 3}) == [E0, E1]
    assert watch.observe(31.0, {E1: 1}, {E1: 3}) == []  # E0's topic deleted, say
    assert watch.held == {E1}


def test_an_unanswered_read_is_no_hold():
    class Silent(Admin):
        def list_offsets(self, asked: dict[TopicPartition, Any], **kwargs: Any) -> Any:
            futures = {}
            for tp in asked:
                future: Future[Any] = Future()
                future.set_exception(TimeoutError("no answer"))
                futures[tp] = future
            return futures

    metrics = Metrics()
    reader = HeldReader(("egress",), 30.0, metrics, ManualClock(0.0).now)
    reader.round(Silent())  # type: ignore[arg-type]
    assert metrics.held_output._value.get() == 0
