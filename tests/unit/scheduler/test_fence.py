"""Fencing a dead peer's transactional id: who is silent (``PeerView.silent``, facts of the
coordination log), whom to fence (``Fencer``) and how its outcome is counted.

A list stands for the coordination topic's one partition, each view reading it in order;
time is a ManualClock (durations only).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from fairstream.core import ManualClock
from fairstream.core.shares import ClassDemand
from fairstream.scheduler.coordination.fence import Fencer, fence_in_background
from fairstream.scheduler.coordination.shares import HEARTBEAT, DemandExchange
from fairstream.scheduler.coordination.view import SILENCE, PeerView, Report
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import InstanceDemand
from fairstream.scheduler.metrics import Metrics

BUSY = {0: ClassDemand(1.0)}


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None]] = []
        self.positions: dict[str, int] = {}

    def publish(self, view: PeerView, parts: tuple[int, ...]) -> Report:
        report = view.report(BUSY, parts)
        self.records.append((view.instance, report.encode()))
        view.acked(report.seq)
        return report

    def read(self, view: PeerView) -> None:
        for key, value in self.records[self.positions.get(view.instance, 0) :]:
            view.received(key, value)
        self.positions[view.instance] = len(self.records)


def views(clock: ManualClock) -> tuple[Log, PeerView, PeerView]:
    """a (partitions 0, 1) and b (2, 3), each having read the other after an echo."""
    log = Log()
    a = PeerView("app-a", 4, clock, transactional_id="app-a")
    b = PeerView("app-b", 4, clock, transactional_id="app-b")
    for _ in range(2):
        log.publish(a, (0, 1))
        log.publish(b, (2, 3))
        log.read(a)
        log.read(b)
    return log, a, b


def quiet_for(clock: ManualClock, log: Log, view: PeerView, seconds: float) -> None:
    """``view`` alone publishes and reads itself back, every half second, for ``seconds``."""
    elapsed = 0.0
    while elapsed < seconds:
        clock.advance(0.5)
        elapsed += 0.5
        log.publish(view, (0, 1))
        log.read(view)


def test_a_report_says_its_senders_transactional_id_and_earlier_ones_read_as_unknown() -> None:
    report = Report("app-a", 1, (0,), BUSY, transactional_id="app-a")
    assert Report.decode(report.encode()).transactional_id == "app-a"
    earlier = b'{"v":3,"instance":"x","sent_ms":1,"partitions":[0],"demand":{}}'
    assert Report.decode(earlier).transactional_id == ""
    assert b"txn" not in Report("x", 1, (0,), BUSY).encode()


def test_a_peer_that_wrote_nothing_for_the_silence_is_silent() -> None:
    clock = ManualClock(10.0)
    log, a, _b = views(clock)
    quiet_for(clock, log, a, SILENCE - 0.5)
    assert a.silent() == {}
    quiet_for(clock, log, a, 1.0)
    assert set(a.silent()) == {"app-b"}
    assert a.silent()["app-b"].partitions == (2, 3)


def test_a_peer_that_keeps_reporting_is_never_silent() -> None:
    clock = ManualClock(10.0)
    log, a, b = views(clock)
    for _ in range(int(3 * SILENCE / HEARTBEAT)):
        clock.advance(HEARTBEAT)
        log.publish(b, (2,))  # it rebalanced: fewer partitions, still reporting
        log.publish(a, (0, 1, 3))
        log.read(a)
    assert a.silent() == {}


def test_silence_needs_this_instance_to_read_itself_back() -> None:
    clock = ManualClock(10.0)
    log, a, _b = views(clock)
    for _ in range(int(2 * SILENCE)):
        clock.advance(1.0)
        log.publish(a, (0, 1))  # sent, never read back: a knows nothing newer of the log
    assert a.silent() == {}


def test_reports_read_before_the_first_echo_and_tombstones_are_not_silence() -> None:
    clock = ManualClock(10.0)
    log = Log()
    # An old report of an instance long gone, in the log when a starts.
    log.records.append(("app-old", report("app-old", (0,)).encode()))
    a = PeerView("app-a", 4, clock, transactional_id="app-a")
    log.publish(a, (0, 1))
    log.read(a)
    # An instance heard after a's echo that left (SIGTERM): it settled what it had open.
    log.records.append(("app-left", report("app-left", (1,)).encode()))
    log.read(a)
    log.records.append(("app-left", None))
    quiet_for(clock, log, a, 2 * SILENCE)
    assert a.silent() == {}


def report(
    instance: str, parts: tuple[int, ...], run: str = "r1", txn: str | None = None
) -> Report:
    return Report(
        instance, 1, parts, BUSY, run=run, transactional_id=instance if txn is None else txn
    )


def test_the_new_owner_of_a_silent_peers_partitions_fences_it_once_per_run() -> None:
    fencer = Fencer("app-a")
    silent = {"app-b": report("app-b", (2, 3))}
    assert fencer.due(silent, (0, 1)) == []  # not ours (yet): whoever owns them fences
    assert [r.transactional_id for r in fencer.due(silent, (0, 1, 2))] == ["app-b"]
    assert fencer.due(silent, (0, 1, 2, 3)) == []  # once
    again = {"app-b": report("app-b", (2, 3), run="r2")}  # restarted, then silent again
    assert [r.run for r in fencer.due(again, (2,))] == ["r2"]


def test_never_its_own_id_nor_a_peer_that_names_none() -> None:
    fencer = Fencer("app-a")
    silent = {
        "app-x": report("app-x", (0,), txn="app-a"),  # claims this instance's id
        "app-old": report("app-old", (1,), txn=""),  # an earlier release: id not said
    }
    assert fencer.due(silent, (0, 1)) == []


@pytest.mark.parametrize("fails", [False, True])
def test_a_fence_runs_on_its_own_thread_and_its_outcome_is_counted(fails: bool) -> None:
    metrics = Metrics()
    shares = DemandExchange(
        {"bootstrap.servers": "127.0.0.1:9"},  # never polled here
        "app",
        "app-a",
        100.0,
        Handoff(),
        metrics,
        demand=lambda: InstanceDemand(BUSY, (0,)),
        partitions=4,
        transactional_id="app-a",
    )
    calls: list[tuple[str, float]] = []

    def fencing(config: Mapping[str, Any], txn: str, timeout: float) -> None:
        assert threading.current_thread() is not threading.main_thread()
        calls.append((txn, timeout))
        if fails:
            raise RuntimeError("the broker is away")

    try:
        silent = report("app-b", (2,))
        outcome_of = functools.partial(shares._fenced, silent)
        thread = fence_in_background({}, silent, outcome_of, 5.0, fencing)
        thread.join(10)
    finally:
        shares._consumer.close()
    assert calls == [("app-b", 5.0)]
    outcome = "failed" if fails else "fenced"
    assert metrics.group_fences.labels(outcome)._value.get() == 1
