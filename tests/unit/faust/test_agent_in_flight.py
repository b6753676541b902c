"""The paid-API agent's many calls at once, without a broker: which calls start (slots,
paced start times on an injected clock, start order by stamp), and which events are acked
(only once their call ended and every earlier event of their partition was acked), first on
``ActorWindow`` alone, then on an actor reading a stand-in for Faust's stream; and Faust's
commits across egress's transaction markers (``commit_across_markers``).

The real Faust worker on a real broker is tests/integration/test_faust.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from types import MethodType
from typing import Any

import faust
import pytest
from faust.events import Event
from faust.transport.consumer import Consumer
from faust.types.tuples import Message
from intervaltree import IntervalTree

from fairstream import Request, Usage, wire
from fairstream.faust import PaidApiAgent
from fairstream.faust._app import commit_across_markers
from fairstream.faust.agent import HELD_PER_SLOT, ActorWindow, HeldEvent, request_from_event
from fairstream.sdk.worker.pacing import GATE_MARGIN, PLAYOUT_DELAY

T0 = 1_700_000_000.0  # the fake wall clock's start (epoch s)


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def app() -> faust.App:
    return faust.App("fairstream-unit-inflight", broker="kafka://127.0.0.1:1")


APP = app()


def event(
    offset: int,
    partition: int = 0,
    request_id: str | None = None,
    start_ms: int | None = None,
) -> Event:
    headers: list[tuple[str, bytes]] = []
    if request_id is not None:
        headers.append((wire.REQUEST_ID, request_id.encode()))
    if start_ms is not None:
        headers.append((wire.START_MS, str(start_ms).encode()))
    message = Message("fs.egress", partition, offset, 0.0, 0, headers, b"acme", b"p", None)
    return Event(APP, b"acme", b"p", headers, message)


def offsets(events: list[Any]) -> list[tuple[int, int]]:
    return [(e.message.partition, e.message.offset) for e in events]


def window(
    clock: Callable[[], float] | None = None,
    max_in_flight: int = 8,
    delay: float | None = None,
    max_held: int = 100,
) -> ActorWindow:
    return ActorWindow(max_in_flight, delay, clock or Clock(), max_held)


def hold(w: ActorWindow, e: Event, call: bool = True) -> HeldEvent:
    return w.hold(e, request_from_event(e), call=call)


# -- ActorWindow: acks ---------------------------------------------------------------------


def test_an_event_is_acked_only_after_every_earlier_one_of_its_partition() -> None:
    w = window()
    a1, a2, a3 = (hold(w, event(o)) for o in (1, 2, 3))
    b5 = hold(w, event(5, partition=1))
    assert w.startable() == [a1, a2, a3, b5]
    assert w.finish(a2) == []  # 1 still runs: acking 2 would let Faust commit past 1
    assert offsets(w.finish(b5)) == [(1, 5)]  # another partition: not held back
    assert w.finish(a3) == []
    assert offsets(w.finish(a1)) == [(0, 1), (0, 2), (0, 3)]
    assert (w.held, w.running) == (0, 0)


def test_a_duplicate_is_acked_in_its_turn_and_takes_no_slot() -> None:
    w = window(max_in_flight=1)
    first = hold(w, event(1, request_id="r"))
    again = hold(w, event(2, request_id="r"), call=False)
    assert w.startable() == [first]
    assert w.finish(again) == []  # behind the running one
    assert offsets(w.finish(first)) == [(0, 1), (0, 2)]
    assert w.startable() == []


def test_an_event_cannot_be_finished_twice_or_before_its_call_started() -> None:
    w = window(max_in_flight=1)
    first, second = hold(w, event(1)), hold(w, event(2))
    w.startable()
    with pytest.raises(ValueError, match="finished twice or before it started"):
        w.finish(second)
    w.finish(first)
    with pytest.raises(ValueError, match="finished twice or before it started"):
        w.finish(first)


def test_the_window_is_full_at_max_held_events_not_yet_acked() -> None:
    w = window(max_held=2)
    first = hold(w, event(1))
    hold(w, event(2))
    assert w.full()
    w.startable()
    w.finish(first)
    assert not w.full()


# -- ActorWindow: slots and paced starts ---------------------------------------------------


def test_calls_start_while_slots_are_free_and_in_arrival_order_without_pacing() -> None:
    w = window(max_in_flight=2)
    held = [hold(w, event(o)) for o in range(4)]
    assert w.startable() == held[:2]
    assert w.startable() == []
    assert w.next_due() is None  # slots taken: a finishing call frees the next start
    w.finish(held[1])
    assert w.startable() == [held[2]]


def test_each_call_starts_at_its_stamp_plus_the_playout_delay() -> None:
    clock = Clock()
    w = window(clock, max_in_flight=8, delay=0.25)
    stamp = int(T0 * 1000)
    early = hold(w, event(1, start_ms=stamp - 100))  # starts at T0 + 0.15
    unstamped = hold(w, event(2))  # no stamp: starts on arrival
    on_time = hold(w, event(3, start_ms=stamp))  # T0 + 0.25
    ahead = hold(w, event(4, start_ms=stamp + 3_600_000))  # clock skew: arrival + 0.25
    late = hold(w, event(5, start_ms=stamp - 60_000))  # arrived after its moment
    assert w.startable() == [late, unstamped]  # by start time: late's passed first
    assert w.waiting() == 3
    assert w.running == 2
    assert w.next_due() == pytest.approx(T0 + 0.15)
    clock.now = T0 + 0.15
    assert w.startable() == [early]
    clock.now = T0 + 0.25
    # Equal start times: in arrival order. ``ahead``'s stamp, an hour after ``on_time``'s,
    # does not hold it: spacing never holds a call more than a slack past its moment.
    assert w.startable() == [on_time, ahead]
    assert w.next_due() is None
    assert w.waiting() == 0


def test_without_a_playout_delay_a_stamped_call_starts_on_arrival() -> None:
    for delay in (None, 0.0):
        w = window(max_in_flight=8, delay=delay)
        ahead = hold(w, event(1, start_ms=int(T0 * 1000) + 60_000))
        assert w.startable() == [ahead]
        assert not w.paced(ahead)  # no gate, no wake-up when it begins


def test_only_a_stamped_call_under_a_playout_delay_is_paced() -> None:
    w = window(max_in_flight=8, delay=0.1)
    stamped = hold(w, event(1, start_ms=int(T0 * 1000)))
    bare = hold(w, event(2))
    assert w.paced(stamped)
    assert not w.paced(bare)


def test_calls_start_in_stamp_order_whatever_the_arrival_order() -> None:
    clock = Clock()
    w = window(clock, max_in_flight=1, delay=0.25)
    stamp = int(T0 * 1000)
    later = hold(w, event(1, partition=0, start_ms=stamp - 50))
    sooner = hold(w, event(7, partition=1, start_ms=stamp - 200))
    clock.now = T0 + 1
    assert w.startable() == [sooner]
    w.finish(sooner)
    assert w.startable() == [later]


def test_a_late_start_pushes_the_next_paced_call_by_its_lateness() -> None:
    clock = Clock()
    w = window(clock, max_in_flight=8, delay=0.1)
    stamp = int(T0 * 1000)
    first = hold(w, event(1, start_ms=stamp))  # due T0 + 0.1
    second = hold(w, event(2, start_ms=stamp + 20))  # due T0 + 0.12
    clock.now = T0 + 0.101  # the wake-up came 1 ms late
    assert w.startable() == [first]
    w.began(first, T0 + 0.1012)  # and its call began 0.2 ms after that
    # 20 ms after, as the stamps are: handed out its lead (2% of 20 ms) before, to be held
    # the rest at its gate.
    assert w.next_due() == pytest.approx(T0 + 0.1212 - 0.0004)
    clock.now = T0 + 0.1207
    assert w.startable() == []
    clock.now = T0 + 0.1208
    assert w.startable() == [second]
    # Its gate: 20 ms after the first began, and the margin for the API's reading.
    assert w.gate(second, clock.now) == pytest.approx(T0 + 0.1212 + GATE_MARGIN)


# -- an actor on a stand-in stream ---------------------------------------------------------


class Stream:
    """Stands in for Faust's stream: events as the test puts them, the acks recorded."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[Event] = asyncio.Queue()
        self.acked: list[tuple[int, int]] = []
        self.acks_enabled = True

    def noack(self) -> Stream:
        self.acks_enabled = False
        return self

    async def events(self) -> AsyncIterator[Event]:
        while True:
            await asyncio.sleep(0)  # as Faust's stream does before each event
            yield await self.incoming.get()

    async def ack(self, e: Event) -> bool:
        self.acked.append((e.message.partition, e.message.offset))
        return True


class Gated:
    """An async handler whose calls wait until the test opens their request id's gate."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []
        self.running = 0
        self.most = 0

    def gate(self, request_id: str) -> asyncio.Event:
        return self.gates.setdefault(request_id, asyncio.Event())

    async def __call__(self, request: Request) -> Usage:
        self.started.append(request.request_id)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.gate(request.request_id).wait()
        finally:
            self.running -= 1
        return Usage(cost=1)


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def settle() -> None:
    """Let every ready task run (a few turns of the loop, no timing)."""
    for _ in range(20):
        await asyncio.sleep(0)


def agent_for(handler: Any, **kwargs: Any) -> PaidApiAgent:
    agent = PaidApiAgent(app(), handler, feedback_topic=None, name="inflight", **kwargs)
    return agent


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_many_calls_run_at_once_and_events_are_acked_in_order_after_their_calls() -> None:
    handler = Gated()
    agent = agent_for(handler, max_in_flight=4, playout_delay=None)
    stream = Stream()

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        for o in range(10):
            stream.incoming.put_nowait(event(o, request_id=f"r{o}"))
        await until(lambda: handler.running == 4, "4 calls running")
        await settle()
        assert handler.started == ["r0", "r1", "r2", "r3"]  # no more than the slots
        assert stream.acked == []
        handler.gate("r2").set()
        await until(lambda: "r4" in handler.started, "the freed slot taken")
        await settle()
        assert stream.acked == []  # r2 ended, but r0 and r1 run: not acked yet
        handler.gate("r0").set()
        await until(lambda: stream.acked == [(0, 0)], "r0 acked alone")
        handler.gate("r1").set()
        await until(lambda: stream.acked == [(0, 0), (0, 1), (0, 2)], "r1 then r2 acked")
        for o in range(3, 10):
            handler.gate(f"r{o}").set()
        await until(lambda: len(stream.acked) == 10, "every event acked")
        assert stream.acked == [(0, o) for o in range(10)]
        actor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await actor

    run(scenario)
    assert not stream.acks_enabled  # the agent acks itself
    assert handler.most == 4
    assert agent.stats.ok == 10


def test_stopping_cancels_the_running_calls_and_leaves_them_unacked() -> None:
    handler = Gated()
    agent = agent_for(handler, max_in_flight=4, playout_delay=None)
    stream = Stream()

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        for o in range(6):
            stream.incoming.put_nowait(event(o, partition=o % 2, request_id=f"r{o}"))
        await until(lambda: handler.running == 4, "4 calls running")
        handler.gate("r1").set()  # partition 1's first: acked
        handler.gate("r2").set()  # behind r0, still running: not acked
        await until(lambda: stream.acked == [(1, 1)], "r1 acked")
        await until(lambda: handler.running == 4, "r4 and r5 started")
        actor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await actor
        assert handler.running == 0  # the calls were cancelled with the actor

    run(scenario)
    # What a crash re-delivers: everything after the last acked event of each partition.
    assert stream.acked == [(1, 1)]
    assert agent.stats.ok == 2


def test_a_request_id_already_running_is_skipped_and_acked_after_it() -> None:
    handler = Gated()
    agent = agent_for(handler, max_in_flight=4, playout_delay=None)
    stream = Stream()

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        stream.incoming.put_nowait(event(1, request_id="same"))
        stream.incoming.put_nowait(event(2, request_id="same"))
        stream.incoming.put_nowait(event(3, request_id="other"))
        await until(lambda: agent.stats.duplicates == 1, "the copy skipped")
        handler.gate("other").set()
        await until(lambda: agent.stats.ok == 1, "the other request done")
        await settle()
        assert stream.acked == []  # all behind the running one
        handler.gate("same").set()
        await until(lambda: len(stream.acked) == 3, "all three acked")
        actor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await actor

    run(scenario)
    assert handler.started == ["same", "other"]
    assert stream.acked == [(0, 1), (0, 2), (0, 3)]


def test_a_call_waiting_for_its_start_time_leaves_its_slot_to_a_later_record() -> None:
    handler = Gated()
    clock = Clock()
    agent = agent_for(handler, max_in_flight=2, playout_delay=0.25, wall_clock=clock)
    stream = Stream()

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        stamp = int(T0 * 1000)
        stream.incoming.put_nowait(event(1, partition=0, request_id="paced", start_ms=stamp))
        stream.incoming.put_nowait(event(2, partition=1, request_id="bare"))  # no stamp
        await until(lambda: handler.started == ["bare"], "the unstamped call started")
        await settle()
        assert handler.started == ["bare"]  # the clock has not reached T0 + 0.25
        clock.now = T0 + 0.25
        handler.gate("bare").set()  # its end wakes the actor, which looks at the clock
        await until(lambda: handler.started == ["bare", "paced"], "the paced call started")
        handler.gate("paced").set()
        await until(lambda: len(stream.acked) == 2, "both acked")
        actor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await actor

    run(scenario)


def test_late_events_read_together_start_in_stamp_order_across_partitions() -> None:
    # One tenant's records spread over three partitions, all past their moment (a slow
    # commit), read partition by partition: Faust hands them over one per turn of the loop,
    # and a starter that ran between them started each on its own, out of stamp order.
    handler = Gated()
    clock = Clock(T0 + 10)
    agent = agent_for(handler, max_in_flight=1, playout_delay=0.1, wall_clock=clock)
    stream = Stream()
    stamp = int(T0 * 1000)
    stamps = {0: [1, 4], 1: [2, 5], 2: [3, 6]}

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        for p, part_stamps in stamps.items():
            for o, s in enumerate(part_stamps):
                stream.incoming.put_nowait(
                    event(o, partition=p, request_id=f"s{s}", start_ms=stamp + s)
                )
        for s in range(1, 7):
            await until(lambda s=s: f"s{s}" in handler.started, f"s{s} started")
            handler.gate(f"s{s}").set()
        await until(lambda: len(stream.acked) == 6, "every event acked")
        actor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await actor

    run(scenario)
    assert handler.started == [f"s{s}" for s in range(1, 7)]


def test_a_dead_lettered_event_is_acked_and_an_agent_failure_leaves_its_event_unacked() -> None:
    async def failing(request: Request) -> None:
        raise RuntimeError("400")

    agent = agent_for(failing, max_attempts=1, playout_delay=None, backoff_initial=0.0)

    class Sent:
        async def send(self, *args: Any) -> asyncio.Future[None]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

    agent.sender = Sent()  # type: ignore[assignment]
    stream = Stream()

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        stream.incoming.put_nowait(event(1, request_id="bad"))
        await until(lambda: stream.acked == [(0, 1)], "the dead-lettered event acked")

        async def broken(*args: Any) -> str:
            raise KeyError("a bug")

        agent._handle = broken  # type: ignore[method-assign,assignment]
        stream.incoming.put_nowait(event(2, request_id="next"))
        with pytest.raises(KeyError, match="a bug"):
            await asyncio.wait_for(actor, 5)

    run(scenario)
    assert agent.stats.dead_lettered == 1
    assert stream.acked == [(0, 1)]


def test_in_flight_arguments_are_checked_and_bound_what_an_actor_holds() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        agent_for(lambda r: None, max_in_flight=0)
    with pytest.raises(ValueError, match="playout_delay"):
        agent_for(lambda r: None, playout_delay=-1.0)
    agent = agent_for(lambda r: None)
    assert (agent.max_in_flight, agent.playout_delay) == (16, PLAYOUT_DELAY)


def test_an_actor_reads_no_further_while_it_holds_its_limit_of_unacked_events() -> None:
    handler = Gated()
    agent = agent_for(handler, max_in_flight=1, playout_delay=None)
    stream = Stream()
    limit = HELD_PER_SLOT  # times max_in_flight = 1

    async def scenario() -> None:
        actor = asyncio.create_task(agent._consume(stream))  # type: ignore[arg-type]
        for o in range(limit + 5):
            stream.incoming.put_nowait(event(o, request_id=f"r{o}"))
        # It holds `limit` events and has read one more, which waits for room.
        await until(lambda: stream.incoming.qsize() == 4, "the actor holding its limit")
        await settle()
        assert stream.incoming.qsize() == 4
        assert handler.started == ["r0"]
        for o in range(limit + 5):
            handler.gate(f"r{o}").set()
        await until(lambda: len(stream.acked) == limit + 5, "every event acked")
        actor.cancel()
        with pytest.raises(asyncio.CancelledError):
            await actor

    run(scenario)
    assert stream.acked == [(0, o) for o in range(limit + 5)]


# -- Faust's commit across transaction markers ---------------------------------------------


class Bookkeeping:
    """What faust-streaming 0.15's consumer keeps per partition for its commits; its own
    ``_new_offset`` runs on it (bound here), as the real consumer's does."""

    def __init__(self) -> None:
        self._acked: dict[str, list[int]] = defaultdict(list)
        self._acked_index: dict[str, set[int]] = defaultdict(set)
        self._gap: dict[str, IntervalTree] = defaultdict(IntervalTree)
        self._committed_offset: dict[str, int | None] = defaultdict(lambda: None)
        self._new_offset = MethodType(Consumer._new_offset, self)

    def read(self, tp: str, offsets: list[int]) -> None:
        """Records read at ``offsets``: a jump is a gap, noted as Faust's fetch loop does."""
        for before, offset in itertools.pairwise(offsets):
            if offset - before > 1:
                self._gap[tp].addi(before + 1, offset + 1)  # up to and including `offset`

    def ack(self, tp: str, offset: int) -> None:
        self._acked[tp].append(offset)
        self._acked_index[tp].add(offset)


# Records of one egress partition: transactions of 5, 4 and 2 records, each followed by its
# commit marker (offsets 5, 10 and 13).
RECORDS = [0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12]


def test_faust_alone_commits_one_transaction_of_egress_per_commit() -> None:
    faust_only = Bookkeeping()
    faust_only.read("tp", RECORDS)
    for offset in RECORDS:
        faust_only.ack("tp", offset)
    assert faust_only._new_offset("tp") == 7  # stops at the record after the first marker


def test_commits_go_across_markers_and_never_past_an_unacked_record() -> None:
    consumer = Bookkeeping()
    assert commit_across_markers(consumer)
    assert commit_across_markers(consumer)  # once: applying it again changes nothing
    consumer.read("tp", RECORDS)
    for offset in RECORDS[:-2]:  # 11 and 12 still running
        consumer.ack("tp", offset)
    assert consumer._new_offset("tp") == 10
    consumer.ack("tp", 12)  # out of order: 11 is not acked, so nothing past it
    assert consumer._new_offset("tp") == 11  # past the marker at 10, not past 11
    consumer.ack("tp", 11)
    assert consumer._new_offset("tp") == 13


def test_faust_alone_would_commit_past_an_unacked_record_after_a_marker() -> None:
    faust_only = Bookkeeping()
    faust_only.read("tp", RECORDS)
    for offset in [*RECORDS[:-2], 12]:  # 11 still running
        faust_only.ack("tp", offset)
    assert faust_only._new_offset("tp") == 7
    assert faust_only._new_offset("tp") == 13  # past 11, never acked


def test_the_fix_applies_to_the_consumer_of_a_faust_app_and_not_to_anything_else() -> None:
    assert commit_across_markers(app().consumer)
    assert not commit_across_markers(object())
