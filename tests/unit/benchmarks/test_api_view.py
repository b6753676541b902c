"""The API-view benchmark's pure parts (``benchmarks.api_view``): the strict API's token
bucket, the queueing API's FIFO slots, and the window, percentile and busy arithmetic its
figures come from."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.api_view import (
    QuietApi,
    QuietSetUp,
    SlotQueue,
    Taken,
    TokenBucket,
    api_server,
    busy_fraction,
    count_in,
    measure_quiet,
    refused_share,
    short_gaps,
    stats,
)


def test_a_full_bucket_lets_its_burst_through_then_refuses() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]


def test_tokens_accrue_in_continuous_time_and_a_fraction_is_not_a_token() -> None:
    # Times that are exact in binary: the API's float arithmetic is what is tested.
    bucket = TokenBucket(rate=4, burst=1)
    assert bucket.take(0.0)
    assert not bucket.take(0.125)  # half a token
    assert bucket.take(0.25)  # a whole one (0.5 + 0.5)
    assert not bucket.take(0.25)


def test_the_bucket_holds_no_more_than_its_burst_after_a_long_pause() -> None:
    bucket = TokenBucket(rate=100, burst=2)
    assert bucket.take(0.0)
    assert bucket.take(0.0)
    assert [bucket.take(1000.0) for _ in range(3)] == [True, True, False]


def test_a_clock_read_out_of_order_adds_no_tokens() -> None:
    bucket = TokenBucket(rate=4, burst=1)
    assert bucket.take(5.0)
    assert not bucket.take(4.0)  # earlier than the last call: nothing accrues
    assert not bucket.take(5.125)  # half a token since 5.0, not since 4.0
    assert bucket.take(5.25)


def test_a_tolerance_lets_a_call_a_hair_early_through_and_no_more() -> None:
    # Whole-ms stamps read as float epoch seconds: 20 ms apart computes as 0.01999998 s.
    times = [1_796_283_778.326, 1_796_283_778.346]
    strict = TokenBucket(rate=50, burst=1)
    assert [strict.take(t) for t in times] == [True, False]
    tolerant = TokenBucket(rate=50, burst=1, tolerance=1e-6)
    assert [tolerant.take(t) for t in times] == [True, True]
    assert not tolerant.take(times[1] + 0.019)  # a whole ms early is still refused
    assert short_gaps(times, 50) == 1.0
    assert short_gaps(times, 50, tolerance=1e-6) == 0.0


def test_a_bucket_needs_a_positive_rate_and_room_for_a_call() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket(rate=0, burst=1)
    with pytest.raises(ValueError, match="burst >= 1"):
        TokenBucket(rate=10, burst=0.5)


def test_an_exact_schedule_passes_and_clumps_of_it_are_refused() -> None:
    rate, burst = 200.0, 5.0
    # The midpoint of each slot: float steps landing a hair early do not cost a token.
    even = [(i + 0.5) / rate for i in range(2000)]
    assert refused_share(even, rate, burst) == 0.0
    # The same calls landing 20 at a time every 0.1 s: 5 of each clump get through (the
    # bucket refills between clumps, at most to its burst), 15 are refused.
    clumps = sorted(0.1 * (i // 20) for i in range(2000))
    assert refused_share(clumps, rate, burst) == pytest.approx(0.75)
    assert refused_share([], rate, burst) == 0.0


def test_short_gaps_are_those_below_one_over_the_rate() -> None:
    # Whole-ms stamps of a 50/s schedule whose slots are not whole ms: 19 and 21 ms gaps.
    assert short_gaps([0.0, 0.019, 0.040, 0.059, 0.080], 50) == 0.5
    assert short_gaps([0.0, 0.020, 0.040], 50) == 0.0
    assert short_gaps([1.0], 50) == 0.0


def test_percentiles_interpolate_between_ranks_and_none_for_no_values() -> None:
    figures = stats([0.4, 0.1, 0.2, 0.3])
    assert figures == {"p50_s": 0.25, "p99_s": 0.397, "max_s": 0.4}
    assert stats([]) is None


def test_a_window_counts_its_start_and_not_its_end() -> None:
    times = [1.0, 2.0, 2.5, 3.0, 4.0]
    assert count_in(times, 2.0, 3.0) == 2
    assert count_in(times, 0.0, 10.0) == 5
    assert count_in(times, 5.0, 6.0) == 0


def test_busy_counts_only_call_time_inside_the_window() -> None:
    calls = [(0.0, 2.0), (1.0, 1.5), (2.5, 5.0)]  # 1.0 + 0.5 + 0.5 inside [1, 3)
    assert busy_fraction(calls, 1.0, 3.0, capacity=2) == pytest.approx(2.0 / 4.0)
    assert busy_fraction([(0.0, 10.0)] * 3, 1.0, 3.0, capacity=3) == pytest.approx(1.0)


def test_quiet_waits_count_a_request_never_taken_as_a_lower_bound() -> None:
    set_up = QuietSetUp(workers=1, concurrency=1, call_s=0.1, slots=None)
    sent = [1.0, 2.0, 3.0]
    calls = [
        Taken("noisy", None, 0.5, 1.5),
        Taken("q-a", 1.0, 1.5, 1.6),  # waited 0.5 s
        Taken("q-b", 2.0, 2.2, 2.3),  # waited 0.2 s
        # 3.0 never taken: counts as waiting until the deadline (20 - 3 = 17 s)
    ]
    result = measure_quiet(calls, sent, set_up, 0.0, 10.0, 20.0, [0.1, 0.9, 1.9, 12.0])
    assert result["quiet_wait"]["max_s"] == 17.0
    assert result["quiet_wait_censored"] == 1
    assert result["quiet_unserved_at_end"] == 1
    assert result["quiet_unserved_at_deadline"] == 1
    assert result["busy"] == pytest.approx((1.0 + 0.1 + 0.1) / 10.0)
    assert result["egress_per_s"] == 0.3  # three stamps in [0, 10)
    assert result["downstream_at_end"] == 0  # 3 released by 10 s, 3 taken


def test_the_api_fifo_grants_slots_in_arrival_order() -> None:
    async def scenario() -> list[int]:
        slots = SlotQueue(2)
        order: list[int] = []

        async def call(n: int) -> None:
            await slots.acquire()
            order.append(n)
            await asyncio.sleep(0.01)
            slots.release()

        tasks = []
        for n in range(6):
            tasks.append(asyncio.create_task(call(n)))
            await asyncio.sleep(0)  # each reaches the queue before the next one starts
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
        assert slots.waiting == 0
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5]


def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    async def scenario() -> bool:
        slots = SlotQueue(1)
        await slots.acquire()
        gone = asyncio.create_task(slots.acquire())
        after = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)
        gone.cancel()
        slots.release()  # handed to the cancelled waiter first, which passes it on
        await asyncio.wait_for(after, timeout=10)
        return after.done() and not after.cancelled()

    assert asyncio.run(scenario())


def test_the_api_server_shares_one_fifo_between_callers_and_drops_a_malformed_call() -> None:
    # The Faust workers are other processes: they reach the queueing API over TCP, and the
    # server's one slot serves them one at a time, each call taken after the last ended.
    api = QuietApi(0.02, SlotQueue(1))

    async def call(address: str, line: bytes) -> bytes:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(line)
        await writer.drain()
        answer = await reader.readline()
        writer.close()
        return answer

    async def callers(address: str) -> list[bytes]:
        lines = (b"a 1.5\n", b"b -\n", b"bad\n")
        return await asyncio.gather(*(call(address, line) for line in lines))

    with api_server(api) as address:
        answers = asyncio.run(callers(address))
    assert answers == [b"ok\n", b"ok\n", b""]  # the malformed call is closed unanswered
    taken = sorted(api.snapshot(), key=lambda c: c.taken)
    assert sorted((c.tenant, str(c.sent)) for c in taken) == [("a", "1.5"), ("b", "None")]
    assert taken[0].ended is not None
    assert taken[1].taken >= taken[0].ended
