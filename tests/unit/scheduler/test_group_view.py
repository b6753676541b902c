"""PeerView: the group rate split without wall clocks, and the safe share.

A list stands for the coordination topic's one partition: each view reads it in order from
its own position, as the group thread's consumer does. Time is a ManualClock shared by the
views (each host's monotonic clock; their offsets never matter, only durations).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from fairstream.core import ManualClock
from fairstream.core.shares import ClassDemand
from fairstream.scheduler.coordination.shares import RENEW_EVERY, THREAD_LEASE, DemandExchange
from fairstream.scheduler.coordination.view import (
    DELIVERY_TIMEOUT,
    LEASE,
    RAISE_DELAY,
    STALE,
    PeerView,
    Report,
)
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import Call, InstanceDemand, ShareChange
from fairstream.scheduler.metrics import Metrics

RATE = 100.0
BUSY = {0: ClassDemand(1.0)}
IDLE: dict[int, ClassDemand] = {}


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None]] = []
        self.positions: dict[str, int] = {}

    def publish(
        self, view: PeerView, demand: dict[int, ClassDemand], parts: tuple[int, ...]
    ) -> Report:
        report = view.report(demand, parts)
        self.records.append((view.instance, report.encode()))
        view.acked(report.seq)
        return report

    def read(self, view: PeerView) -> None:
        start = self.positions.get(view.instance, 0)
        for key, value in self.records[start:]:
            view.received(key, value)
        self.positions[view.instance] = len(self.records)


def decide_all(
    clock: ManualClock, log: Log, views: dict[PeerView, Any], rounds: int = 4
) -> dict[str, Any]:
    """Rounds of publish, read, decide (past the raise delay): each view's last decision."""
    out: dict[str, Any] = {}
    for _ in range(rounds):
        for view, (demand, owned) in views.items():
            log.publish(view, demand, owned)
        for view in views:
            log.read(view)
        for view, (demand, owned) in views.items():
            view.decide(demand, owned, RATE)
        clock.advance(RAISE_DELAY + 0.01)
        for view, (demand, owned) in views.items():
            out[view.instance] = view.decide(demand, owned, RATE)
    return out


def settle(
    clock: ManualClock,
    log: Log,
    views: dict[PeerView, tuple[dict[int, ClassDemand], tuple[int, ...]]],
    rounds: int = 4,
) -> dict[str, float]:
    """Rounds of publish, read, decide (each past the raise delay); the last rates."""
    return {instance: d.rate for instance, d in decide_all(clock, log, views, rounds).items()}


def test_alone_it_starts_at_its_safe_share_and_then_coordinates() -> None:
    clock = ManualClock(1000.0)
    view = PeerView("a", 4, clock)
    assert not view.coordinated()
    assert view.reason() == "starting: no report of this instance read back yet"
    first = view.decide(BUSY, (0, 1), RATE)
    assert first.rate == 0  # a raise waits for the raise delay
    clock.advance(RAISE_DELAY)
    assert view.decide(BUSY, (0, 1), RATE).rate == pytest.approx(RATE / 2)  # 2 of 4 partitions
    log = Log()
    rates = settle(clock, log, {view: (BUSY, (0, 1, 2, 3))})
    assert view.coordinated()
    assert view.reason() is None
    assert rates["a"] == pytest.approx(RATE)


def test_a_peers_wall_clock_plays_no_part() -> None:
    clock = ManualClock(50.0)
    log = Log()
    a, b = PeerView("a", 4, clock), PeerView("b", 4, clock)
    settle(clock, log, {a: (BUSY, (0, 1)), b: (BUSY, (2, 3))})
    # b's host clock is a day behind: its reports' sent_ms say so; nobody looks.
    late = Report("b", 1, (2, 3), BUSY, True, b.run, 999)
    log.records.append(("b", late.encode()))
    log.publish(a, BUSY, (0, 1))
    log.read(a)
    log.records.append(("b", Report("b", 1, (2, 3), BUSY, True, b.run, 1000).encode()))
    log.read(a)
    assert set(a.live()) == {"b"}
    rates = settle(clock, log, {a: (BUSY, (0, 1)), b: (BUSY, (2, 3))})
    assert rates == {"a": pytest.approx(RATE / 2), "b": pytest.approx(RATE / 2)}


def test_a_reader_that_fell_behind_counts_no_old_report() -> None:
    clock = ManualClock()
    log = Log()
    a, b = PeerView("a", 2, clock), PeerView("b", 2, clock)
    settle(clock, log, {a: (BUSY, (0,)), b: (BUSY, (1,))})
    log.publish(b, BUSY, (1,))  # b's last report, then b goes silent
    clock.advance(STALE + 1)
    log.read(a)  # a reads it only now: received just now, but written before a's last echo
    assert "b" not in a.live()


def test_an_unwritable_topic_leaves_the_safe_share_not_silence() -> None:
    clock = ManualClock()
    log = Log()
    a, b = PeerView("a", 4, clock), PeerView("b", 4, clock)
    # a has one busy tenant, b has three: a's demand share (1/4) is below its partition share.
    b_busy = {0: ClassDemand(3.0)}
    rates = settle(clock, log, {a: (BUSY, (0, 1)), b: (b_busy, (2, 3))})
    assert rates["a"] == pytest.approx(RATE / 4)
    # From now on a's reports never reach the topic.
    for _ in range(int((LEASE + 1) / 0.1)):
        report = a.report(BUSY, (0, 1))
        a.failed(report.seq, "Broker: Message size too large")
        log.publish(b, b_busy, (2, 3))
        log.read(a)
        log.read(b)
        clock.advance(0.1)
        a_rate = a.decide(BUSY, (0, 1), RATE).rate
        b_rate = b.decide(b_busy, (2, 3), RATE).rate
        assert a_rate + b_rate <= RATE + 1e-6
        assert a_rate == pytest.approx(RATE / 4)  # never above what b leaves it, never 0
    assert not a.coordinated()
    assert a.reason() == "cannot publish reports: Broker: Message size too large"
    # b stopped counting a: it reserves a's two partitions and takes its own half.
    assert "a" not in b.live()
    assert b.decide(b_busy, (2, 3), RATE).rate == pytest.approx(RATE / 2)
    # Once every peer must have aged a's last coordinated report out, a takes its half.
    clock.advance(DELIVERY_TIMEOUT + STALE)
    a.decide(BUSY, (0, 1), RATE)
    clock.advance(RAISE_DELAY)
    assert a.decide(BUSY, (0, 1), RATE).rate == pytest.approx(RATE / 2)


def test_an_instance_that_reads_nothing_says_so_and_peers_reserve_its_partitions() -> None:
    clock = ManualClock()
    log = Log()
    a, b = PeerView("a", 3, clock), PeerView("b", 3, clock)
    settle(clock, log, {b: (BUSY, (1, 2))})
    a.read_failed("Broker: Topic authorization failed")
    for _ in range(5):
        log.publish(a, BUSY, (0,))  # a can publish, never reads
        log.publish(b, BUSY, (1, 2))
        log.read(b)
        clock.advance(RAISE_DELAY + 0.01)
        a_rate = a.decide(BUSY, (0,), RATE).rate
        b_rate = b.decide(BUSY, (1, 2), RATE).rate
        assert a_rate + b_rate <= RATE + 1e-6
    assert a.reason() == "cannot read reports: Broker: Topic authorization failed"
    assert a_rate == pytest.approx(RATE / 3)
    assert "a" not in b.live()  # its reports say it is not coordinated
    assert b_rate == pytest.approx(2 * RATE / 3)


def test_partitions_no_report_lists_are_reserved() -> None:
    clock = ManualClock()
    log = Log()
    a = PeerView("a", 4, clock)
    rates = settle(clock, log, {a: (BUSY, (0, 1, 2))})
    assert rates["a"] == pytest.approx(3 * RATE / 4)  # partition 3's owner is unknown


def test_a_killed_peers_share_is_not_taken_before_its_partitions_move() -> None:
    clock = ManualClock()
    log = Log()
    a, b = PeerView("a", 2, clock), PeerView("b", 2, clock)
    settle(clock, log, {a: (BUSY, (0,)), b: (BUSY, (1,))})
    rates = settle(clock, log, {a: (BUSY, (0,))}, rounds=int(STALE / RAISE_DELAY) + 2)
    assert "b" not in a.live()
    assert rates["a"] == pytest.approx(RATE / 2)
    rates = settle(clock, log, {a: (BUSY, (0, 1))})  # the survivor got b's partition
    assert rates["a"] == pytest.approx(RATE)


def test_rejoining_waits_for_a_coordinated_report_to_come_back() -> None:
    clock = ManualClock()
    log = Log()
    a = PeerView("a", 1, clock)
    report = log.publish(a, BUSY, (0,))
    assert not report.coordinated  # sent before anything was read back
    log.read(a)
    assert a.reads()
    assert not a.coordinated()
    assert a.reason() == "rejoining: waiting for a coordinated report of this instance to come back"
    assert log.publish(a, BUSY, (0,)).coordinated
    log.read(a)
    assert a.coordinated()


def test_an_earlier_run_of_this_instance_is_no_peer_and_no_echo() -> None:
    clock = ManualClock()
    log = Log()
    old = PeerView("a", 1, clock, run="old")
    log.publish(old, BUSY, (0,))
    new = PeerView("a", 1, clock, run="new")
    new.report(BUSY, (0,))  # seq 1, as old's was
    log.read(new)
    assert not new.reads()
    assert new.peers == {}


def test_reports_never_read_back_are_not_kept_forever() -> None:
    clock = ManualClock()
    view = PeerView("a", 1, clock)
    for _ in range(10_000):
        view.failed(view.report(BUSY, (0,)).seq, "Broker: Message size too large")
        clock.advance(0.5)
    assert len(view._sent) <= LEASE / 0.5 + 1


def test_a_report_says_when_it_was_sent_by_the_views_own_clock() -> None:
    clock = ManualClock(5.0)
    view = PeerView("a", 1, clock)
    clock.advance(1.5)
    assert view.report(BUSY, (0,)).sent_ms == clock.epoch_ms()  # for people: one clock


def group_shares(
    handoff: Handoff,
    demand: Callable[[], InstanceDemand],
    partitions: int = 1,
    clock: ManualClock | None = None,
) -> DemandExchange:
    """A group thread's part whose clients are made, never polled."""
    return DemandExchange(
        {"bootstrap.servers": "127.0.0.1:9"},
        "app",
        "a",
        RATE,
        handoff,
        Metrics(),
        demand=demand,
        partitions=partitions,
        clock=clock or ManualClock(0.0),
    )


def test_the_emitters_lease_is_a_time_on_the_clock_the_group_thread_is_given() -> None:
    clock = ManualClock(50.0)
    handoff = Handoff()
    shares = group_shares(handoff, lambda: InstanceDemand(BUSY, (0,)), clock=clock)
    try:
        shares._apply(BUSY, (0,))
        clock.advance(RENEW_EVERY)
        shares._apply(BUSY, (0,))
    finally:
        shares._consumer.close()
    leases = [c.lease_until for c in handoff.controls if isinstance(c, ShareChange)]
    assert leases == [50.0 + THREAD_LEASE, 50.0 + RENEW_EVERY + THREAD_LEASE]


def test_the_group_rate_follows_the_adapted_fraction_read_with_the_demand() -> None:
    """The feedback thread hands the adapted rate to the emitter only; the group thread
    reads it back with the demand (no thread sets another's attribute)."""
    handoff = Handoff()
    answers = [InstanceDemand(BUSY, (0,), 0.5), InstanceDemand({}, (0, 1), 0.75)]
    shares = group_shares(handoff, lambda: answers.pop(0), partitions=2)

    def emitter() -> None:  # answers the group thread's calls, as the emitter's loop does
        for _ in range(2):
            while not handoff.controls:
                handoff.wake.wait(1.0)
            call = handoff.controls.popleft()
            assert isinstance(call, Call)
            call.result = call.fn()
            call.done.set()

    thread = threading.Thread(target=emitter)
    thread.start()
    try:
        assert shares._read_demand({}, ()) == (BUSY, (0,))
        assert shares.rate == pytest.approx(RATE * 0.5)
        assert shares._read_demand(BUSY, (0,)) == ({}, (0, 1))
        assert shares.rate == pytest.approx(RATE * 0.75)
    finally:
        thread.join(5)
        shares._consumer.close()


def test_a_busy_emitter_leaves_the_last_demand_and_rate_standing() -> None:
    shares = group_shares(_Unanswered(), lambda: InstanceDemand({}, (), 0.1))
    try:
        assert shares._read_demand(BUSY, (0,)) == (BUSY, (0,))
        assert shares.rate == RATE
    finally:
        shares._consumer.close()


def test_a_busy_emitter_leaves_the_last_demand_with_the_partitions_it_owns_now() -> None:
    # The emitter took over a dead peer's partitions and is busy committing: its published
    # snapshot says so, and the group stops reserving their share for the dead peer.
    shares = DemandExchange(
        {"bootstrap.servers": "127.0.0.1:9"},
        "app",
        "a",
        RATE,
        _Unanswered(),
        Metrics(),
        demand=lambda: InstanceDemand({}, (), 0.1),
        partitions=4,
        owned=lambda: (0, 1, 2, 3),
        clock=ManualClock(0.0),
    )
    try:
        assert shares._read_demand(BUSY, (2, 3)) == (BUSY, (0, 1, 2, 3))
    finally:
        shares._consumer.close()


class _Unanswered(Handoff):
    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        raise TimeoutError("the emitter thread did not answer")


def test_a_reports_budget_claims_round_trip_and_an_older_report_has_none() -> None:
    from fairstream.core.budget import ClaimKey
    from fairstream.scheduler.coordination.view import Claim

    key = ClaimKey("org", "cost", "day", False, "UTC", 1_767_225_600_000)
    claims = (Claim(key, 1000, 420, 500, 2.0),)
    report = Report("a", 1, (0, 1), BUSY, claims=claims)
    assert Report.decode(report.encode()).claims == claims
    older = b'{"v":3,"instance":"b","sent_ms":1,"partitions":[2],"demand":{}}'
    assert Report.decode(older).claims == ()


def test_two_instances_claim_a_group_budget_through_the_log_and_never_exceed_it() -> None:
    from fairstream.core.budget import ClaimKey
    from fairstream.scheduler.messages import Spend

    clock = ManualClock()
    log = Log()
    day = 1_767_225_600_000
    views = [PeerView(name, 4, clock) for name in ("a", "b")]
    spent = {"a": 0, "b": 0}

    def budgets(view: PeerView) -> tuple[Spend, ...]:
        key = ClaimKey("org", "cost", "day", False, "UTC", day)
        return (Spend(key, 100, spent[view.instance], 1.0),)

    def in_force(view: PeerView) -> int:
        return sum(e.claim for e in view.claims_in_force())

    for _ in range(30):
        for view in views:
            log.read(view)
            # Each spends up to 10 a turn, as far as its claim in force allows.
            me = view.instance
            spent[me] = max(spent[me], min(spent[me] + 10, in_force(view)))
            assert spent["a"] + spent["b"] <= 100
            claims = view.plan_claims(budgets(view))
            report = view.report(BUSY, (0,) if view.instance == "a" else (1,), claims)
            log.records.append((view.instance, report.encode()))
    assert spent["a"] + spent["b"] == 100  # between them, all of it, and no more
    assert spent["a"] >= 40  # a came first, and b's demand took half of what was left
    assert spent["b"] >= 40
