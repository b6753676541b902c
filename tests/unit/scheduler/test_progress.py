"""PartitionProgress and the progress record codec (fairstream/scheduler/progress.py).

The model used by the property tests: the log delivers offsets in increasing order
(``observe``); offsets it skips are gaps and count as settled; the emitter settles each
delivered offset once, in any order. Then the low-water mark is the lowest delivered offset
not settled (or ``next`` when every delivered offset is), and the ranges are exactly the
settled offsets above the mark, merged into maximal half-open runs.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.config.topics import CHUNK_BYTES, PROGRESS_TOPIC_BYTES
from fairstream.scheduler.progress import (
    FORMAT_VERSION,
    HoldingProgress,
    PartitionProgress,
    ProgressFormatError,
    Snapshot,
    assemble,
    chunk_key,
    decode,
    decode_chunk,
    encode,
    encode_chunks,
)

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None)


def runs(offsets: set[int]) -> list[tuple[int, int]]:
    """``offsets`` as maximal half-open ranges, in order."""
    out: list[tuple[int, int]] = []
    for offset in sorted(offsets):
        if out and out[-1][1] == offset:
            out[-1] = (out[-1][0], offset + 1)
        else:
            out.append((offset, offset + 1))
    return out


# -- examples ---------------------------------------------------------------------------------


def test_settling_in_order_moves_the_mark() -> None:
    prog = PartitionProgress(0)
    for offset in range(5):
        prog.observe(offset)
    assert prog.lwm == 0
    assert prog.next == 5
    for offset in range(5):
        prog.settle(offset)
        assert prog.lwm == offset + 1
        assert prog.ranges() == []


def test_settling_out_of_order_keeps_ranges_until_the_gap_closes() -> None:
    prog = PartitionProgress(10)
    for offset in range(10, 20):
        prog.observe(offset)
    prog.settle(15)
    prog.settle(13)
    prog.settle(14)  # joins [13, 14) and [15, 16)
    prog.settle(18)
    assert prog.lwm == 10
    assert prog.ranges() == [(13, 16), (18, 19)]
    assert prog.settled_above == 2
    prog.settle(11)
    prog.settle(12)  # [11, 16) now
    assert prog.ranges() == [(11, 16), (18, 19)]
    prog.settle(10)  # the mark runs over everything settled behind it
    assert prog.lwm == 16
    assert prog.ranges() == [(18, 19)]
    prog.settle(17)
    prog.settle(16)
    assert prog.lwm == 19
    assert prog.ranges() == []


def test_settling_any_order_ends_at_next() -> None:
    prog = PartitionProgress(0)
    for offset in range(8):
        prog.observe(offset)
    for offset in (7, 0, 5, 2, 6, 1, 3, 4):
        prog.settle(offset)
    assert prog.lwm == 8 == prog.next
    assert prog.ranges() == []


def _model(lwm: int, settled: set[int]) -> tuple[int, list[tuple[int, int]]]:
    """The mark and the ranges above it, from a plain set of settled offsets."""
    while lwm in settled:
        lwm += 1
    ranges: list[tuple[int, int]] = []
    for offset in sorted(o for o in settled if o > lwm):
        if ranges and ranges[-1][1] == offset:
            ranges[-1] = (ranges[-1][0], offset + 1)
        else:
            ranges.append((offset, offset + 1))
    return lwm, ranges


@given(
    st.integers(0, 5),
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 4)), max_size=8),
    st.permutations(list(range(40))),
)
@settings(max_examples=200, deadline=None)
def test_settling_in_any_order_matches_a_set_of_settled_offsets(
    lwm: int, ranges: list[tuple[int, int]], order: list[int]
) -> None:
    # Each offset is settled once (the emitter's rule): none already in a settled range.
    prog = PartitionProgress(lwm)
    settled: set[int] = set()
    for start, length in ranges:
        if settled.isdisjoint(range(start, start + length)):
            prog.settle_range(start, start + length)
            settled.update(range(start, start + length))
    assert (prog.lwm, prog.ranges()) == _model(lwm, settled)
    for offset in (o for o in order if o not in settled):
        prog.settle(offset)
        settled.add(offset)
        assert (prog.lwm, prog.ranges()) == _model(lwm, settled)


def test_skipped_offsets_are_gaps() -> None:
    prog = PartitionProgress(0)
    prog.observe(0)
    prog.observe(3)  # 1 and 2 were transaction markers or aborted records
    assert prog.lwm == 0
    assert prog.ranges() == [(1, 3)]
    prog.settle(0)
    assert prog.lwm == 3  # the gap is settled, so the mark goes past it
    prog.settle(3)
    prog.observe(10)
    assert prog.lwm == 10
    assert prog.next == 11


def test_a_gap_at_the_mark_moves_it() -> None:
    prog = PartitionProgress(5)
    prog.observe(9)  # 5..8 never delivered: nothing below 9 is left to settle
    assert prog.lwm == 9
    assert prog.ranges() == []


def test_observing_again_changes_nothing() -> None:
    prog = PartitionProgress(0)
    prog.observe(0)
    prog.observe(1)
    changes = prog.changes
    prog.observe(0)
    prog.observe(1)
    assert prog.next == 2
    assert prog.lwm == 0
    assert prog.changes == changes


def test_settle_range_merges_overlaps() -> None:
    prog = PartitionProgress(0)
    prog.settle_range(5, 8)
    prog.settle_range(7, 12)
    prog.settle_range(20, 22)
    prog.settle_range(12, 14)  # touches [5, 12)
    assert prog.ranges() == [(5, 14), (20, 22)]
    prog.settle_range(3, 21)  # swallows both
    assert prog.ranges() == [(3, 22)]
    prog.settle_range(0, 3)
    assert prog.lwm == 22
    assert prog.ranges() == []


def test_settling_below_the_mark_is_ignored() -> None:
    prog = PartitionProgress(10)
    changes = prog.changes
    prog.settle(3)
    prog.settle_range(0, 10)
    prog.settle_range(7, 7)
    assert prog.lwm == 10
    assert prog.ranges() == []
    assert prog.changes == changes


def test_every_settlement_counts_as_a_change() -> None:
    prog = PartitionProgress(0)
    for offset in range(3):
        prog.observe(offset)
    seen = prog.changes
    prog.settle(2)
    assert prog.changes > seen
    seen = prog.changes
    prog.settle(0)
    assert prog.changes > seen


def test_negative_mark_is_refused() -> None:
    with pytest.raises(ValueError, match="low-water mark"):
        PartitionProgress(-1)


def test_recovered_ranges_are_settled_and_skipped() -> None:
    prog = PartitionProgress(100, [(102, 105), (90, 101), (110, 111)])
    # A range reaching below the mark is cut to the mark; (90, 101) becomes [100, 101),
    # which sits at the mark, so the mark moves over it.
    assert prog.lwm == 101
    assert prog.ranges() == [(102, 105), (110, 111)]
    skipped = [offset for offset in range(100, 115) if prog.recovered(offset)]
    assert skipped == [100, 102, 103, 104, 110]


def test_recovered_replay_then_settling_the_rest() -> None:
    # As the emitter does after a restart: read the log again from the mark, skip what is
    # recovered (observe only), settle the others as they are emitted.
    prog = PartitionProgress(50, [(52, 54), (56, 57)])
    emitted = []
    for offset in range(50, 60):
        if prog.recovered(offset):
            prog.observe(offset)
            continue
        prog.observe(offset)
        emitted.append(offset)
    assert emitted == [50, 51, 54, 55, 57, 58, 59]
    assert prog.lwm == 50
    for offset in reversed(emitted):
        prog.settle(offset)
    assert prog.lwm == 60
    assert prog.ranges() == []


def test_recovered_with_nothing_settled() -> None:
    prog = PartitionProgress(7)
    assert not any(prog.recovered(offset) for offset in range(7, 20))


def test_recovered_ranges_ending_below_the_mark_are_dropped() -> None:
    prog = PartitionProgress(10, [(0, 5), (5, 10)])
    assert prog.lwm == 10
    assert prog.ranges() == []
    assert not prog.recovered(10)


# -- the codec --------------------------------------------------------------------------------


def test_round_trip() -> None:
    ranges = [(12, 15), (200, 201), (1 << 40, (1 << 40) + 3)]
    record = encode("app-sched-1:42", 10, ranges)
    assert record[0] == FORMAT_VERSION
    assert decode(record) == ("app-sched-1:42", 10, ranges)


def test_round_trip_without_ranges_and_with_unicode_token() -> None:
    assert decode(encode("", 0, [])) == ("", 0, [])
    assert decode(encode("äpp-ø:1", 5, [])) == ("äpp-ø:1", 5, [])


def test_round_trip_of_a_partition_progress() -> None:
    prog = PartitionProgress(1000)
    for offset in range(1000, 1100):
        prog.observe(offset)
    for offset in range(1001, 1100, 3):
        prog.settle(offset)
    token, lwm, ranges = decode(encode("t:1", prog.lwm, prog.ranges()))
    assert (token, lwm, ranges) == ("t:1", prog.lwm, prog.ranges())
    again = PartitionProgress(lwm, ranges)
    assert again.lwm == prog.lwm
    assert again.ranges() == prog.ranges()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(bytes([FORMAT_VERSION + 1]) + b"\x00\x00\x00", id="newer-version"),
        pytest.param(b"\x00\x00\x00\x00", id="version-zero"),
        pytest.param(bytes([FORMAT_VERSION]), id="version-only"),
        pytest.param(bytes([FORMAT_VERSION, 0x80]), id="number-cut"),
        pytest.param(bytes([FORMAT_VERSION]) + b"\xff" * 12 + b"\x01", id="number-too-long"),
        pytest.param(bytes([FORMAT_VERSION, 0, 5]), id="no-range-count"),
        pytest.param(bytes([FORMAT_VERSION, 0, 5, 2, 1]), id="ranges-missing"),
    ],
)
def test_bad_bytes_raise(data: bytes) -> None:
    with pytest.raises(ProgressFormatError):
        decode(data)


def test_trailing_bytes_raise() -> None:
    with pytest.raises(ProgressFormatError):
        decode(encode("t", 3, [(5, 6)]) + b"\x00")


def test_truncated_records_raise() -> None:
    record = encode("token:7", 300, [(400, 700), (900, 1000)])
    for cut in range(len(record)):
        with pytest.raises(ProgressFormatError):
            decode(record[:cut])


def test_format_error_is_a_value_error() -> None:
    assert issubclass(ProgressFormatError, ValueError)


# -- properties -------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[tuple[str, int]]]:
    """A start mark and a sequence of ("observe", gap) / ("settle", pick) operations."""
    start = draw(st.integers(0, 1000))
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("observe"), st.integers(0, 4)),  # gap before the offset
                st.tuples(st.just("settle"), st.integers(0, 1 << 16)),  # which unsettled
            ),
            max_size=120,
        )
    )
    return start, ops


@PROPERTY_SETTINGS
@given(histories())
def test_progress_matches_a_set_model(history: tuple[int, list[tuple[str, int]]]) -> None:
    start, ops = history
    prog = PartitionProgress(start)
    next_offset = start
    settled: set[int] = set()  # gaps and settled deliveries, at or above start
    delivered_unsettled: list[int] = []
    for op, arg in ops:
        if op == "observe":
            offset = next_offset + arg
            settled.update(range(next_offset, offset))  # the gap
            prog.observe(offset)
            next_offset = offset + 1
            delivered_unsettled.append(offset)
        elif delivered_unsettled:
            offset = delivered_unsettled.pop(arg % len(delivered_unsettled))
            prog.settle(offset)
            settled.add(offset)
        lwm = min(delivered_unsettled, default=next_offset)
        assert prog.lwm == lwm
        assert prog.next == next_offset
        assert prog.ranges() == runs({o for o in settled if o > lwm})
        assert prog.settled_above == len(prog.ranges())
        assert decode(encode("t", prog.lwm, prog.ranges())) == ("t", prog.lwm, prog.ranges())


@PROPERTY_SETTINGS
@given(
    histories(),
    st.sets(st.integers(0, 1200), max_size=40),
    st.integers(1, 12),
)
def test_ranges_listed_now_and_then_match_a_set_model(
    history: tuple[int, list[tuple[str, int]]], recovered: set[int], every: int
) -> None:
    # As commits list them: only now and then, ranges stored and merged away in between; a
    # restart's recovered ranges there from the start, and ranges from settle_range too.
    start, ops = history
    prog = PartitionProgress(start, runs(recovered))
    settled = {o for o in recovered if o >= start}
    next_offset = start
    delivered_unsettled: list[int] = []
    for i, (op, arg) in enumerate(ops):
        if op == "observe":
            offset = next_offset + arg
            while offset in settled:  # a recovered offset is not delivered again
                offset += 1
            prog.observe(offset)
            settled.update(range(next_offset, offset))  # the gap (recovered or skipped)
            next_offset = max(next_offset, offset + 1)
            delivered_unsettled.append(offset)
        elif delivered_unsettled:
            offset = delivered_unsettled.pop(arg % len(delivered_unsettled))
            if arg % 5 == 0:
                prog.settle_range(offset, offset + 1)
            else:
                prog.settle(offset)
            settled.add(offset)
        if i % every == 0:
            lwm = prog.lwm
            assert prog.ranges() == runs({o for o in settled if o > lwm})
    lwm = start
    while lwm in settled:
        lwm += 1
    assert prog.lwm == lwm
    assert prog.ranges() == runs({o for o in settled if o > lwm})
    assert prog.settled_above == len(prog.ranges())


@st.composite
def recoveries(draw: st.DrawFn) -> tuple[int, set[int], int]:
    mark = draw(st.integers(0, 200))
    settled = draw(st.sets(st.integers(0, 300), max_size=80))
    end = draw(st.integers(mark, 320))
    return mark, settled, end


@PROPERTY_SETTINGS
@given(recoveries())
def test_recovery_skips_exactly_what_was_settled(case: tuple[int, set[int], int]) -> None:
    mark, settled, end = case
    prog = PartitionProgress(mark, runs(settled))
    above = {o for o in settled if o >= mark}
    # The mark moves over a recovered run that starts at it.
    expected_lwm = mark
    while expected_lwm in above:
        expected_lwm += 1
    assert prog.lwm == expected_lwm
    assert prog.ranges() == runs({o for o in above if o > expected_lwm})
    # Replaying the log from the committed mark: every settled offset is skipped, and
    # settling the others in log order leaves the partition fully settled.
    for offset in range(mark, end):
        is_recovered = prog.recovered(offset)
        assert is_recovered == (offset in above), offset
        prog.observe(offset)
        if not is_recovered:
            prog.settle(offset)
    final = max(end, expected_lwm)
    while final in above:  # recovered runs right after the replayed part join the mark
        final += 1
    assert prog.lwm == final
    assert prog.ranges() == runs({o for o in above if o > prog.lwm})


@PROPERTY_SETTINGS
@given(
    st.text(max_size=40),
    st.integers(0, 1 << 62),
    st.lists(st.tuples(st.integers(1, 1 << 20), st.integers(1, 1 << 20)), max_size=30),
)
def test_codec_round_trip(token: str, lwm: int, steps: list[tuple[int, int]]) -> None:
    ranges = []
    previous = lwm
    for gap, length in steps:
        ranges.append((previous + gap, previous + gap + length))
        previous += gap + length
    assert decode(encode(token, lwm, ranges)) == (token, lwm, ranges)


@PROPERTY_SETTINGS
@given(st.binary(max_size=64))
def test_decode_never_fails_otherwise(data: bytes) -> None:
    """Arbitrary bytes decode or raise ProgressFormatError, never anything else."""
    try:
        token, lwm, ranges = decode(data)
    except ProgressFormatError:
        return
    assert isinstance(token, str)
    assert lwm >= 0
    assert all(start <= end for start, end in ranges)


# -- recovery at scale, gaps around recovered ranges, chunks ----------------------------------


def test_recovering_many_ranges_is_linear() -> None:
    # 200,000 ranges (the paused-tenant pattern): rebuilt in one pass. Counted, not timed:
    # no settle_range call, whose overlap search made the rebuild quadratic.
    ranges = [(3 * i + 1, 3 * i + 3) for i in range(200_000)]
    calls = 0
    original = PartitionProgress.settle_range

    def counting(self: PartitionProgress, start: int, end: int) -> None:
        nonlocal calls
        calls += 1
        original(self, start, end)

    PartitionProgress.settle_range = counting  # type: ignore[method-assign]
    try:
        prog = PartitionProgress(0, ranges)
    finally:
        PartitionProgress.settle_range = original  # type: ignore[method-assign]
    assert calls == 0
    assert prog.lwm == 0
    assert prog.settled_above == 200_000
    assert prog.ranges() == ranges


@st.composite
def replays(draw: st.DrawFn) -> tuple[int, set[int], set[int]]:
    """A mark, the offsets settled before a restart, and the offsets the log skips on the
    replay (transaction markers), some of them inside recovered ranges."""
    mark = draw(st.integers(0, 50))
    settled = draw(st.sets(st.integers(0, 200), max_size=80))
    skipped = draw(st.sets(st.integers(0, 220), max_size=40))
    return mark, settled, skipped


@PROPERTY_SETTINGS
@given(replays())
def test_gaps_around_recovered_ranges_match_a_set_model(
    case: tuple[int, set[int], set[int]],
) -> None:
    mark, settled, skipped = case
    prog = PartitionProgress(mark, runs(settled))
    done = {o for o in settled if o >= mark}
    for offset in range(mark, 220):
        if offset in skipped:
            continue  # never delivered: a gap, settled when the next one comes
        if prog.recovered(offset):
            prog.observe(offset)
            assert offset in done
            continue
        prog.observe(offset)
        done.update(o for o in range(mark, offset) if o in skipped)
        if offset % 3:  # some are settled, the others stay unsettled
            prog.settle(offset)
            done.add(offset)
        lwm, ranges = _model(mark, done)
        assert (prog.lwm, prog.ranges()) == (lwm, ranges)


def test_a_snapshot_too_large_for_one_record_is_chunked() -> None:
    ranges = [(10 * i + 5, 10 * i + 7) for i in range(50_000)]
    hold_ranges = [(1_000_000 + 4 * i, 1_000_000 + 4 * i + 1) for i in range(20_000)]
    snapshot = Snapshot("app:9", 3, ranges, 999_990, hold_ranges, {"slow": 7, "ü": 1})
    records = encode_chunks(snapshot, limit=16 * 1024)
    assert len(records) > 1
    assert all(len(r) <= 16 * 1024 for r in records)
    chunks = [decode_chunk(r) for r in records]
    assert {c.count for c in chunks} == {len(records)}
    assert assemble(reversed(chunks)) == snapshot
    assert assemble(chunks[1:]) is None  # one missing: not a snapshot
    assert chunk_key(4, 0) == b"4"
    assert chunk_key(4, 2) == b"4.2"


def test_a_snapshot_of_the_default_limit_fits_the_progress_topic() -> None:
    # Worst case: every delta a 64-bit number.
    ranges = [(i << 40, (i << 40) + (1 << 39)) for i in range(1, 100_000)]
    records = encode_chunks(Snapshot("t", 0, ranges))
    assert all(len(r) <= CHUNK_BYTES < PROGRESS_TOPIC_BYTES for r in records)
    assert assemble(decode_chunk(r) for r in records) == Snapshot("t", 0, ranges)


def test_format_1_records_are_still_read() -> None:
    record = bytes([1, 3]) + b"a:1" + bytes([10, 1, 2, 3])  # token, mark 10, one range
    chunk = decode_chunk(record)
    assert (chunk.token, chunk.lwm, chunk.ranges, chunk.count) == ("a:1", 10, [(12, 15)], 1)


def test_holding_progress_counts_parked_records_down_as_they_settle() -> None:
    hold = HoldingProgress(0, parked={"slow": 1})
    hold.add_parked("slow")
    hold.add_parked("capped")
    for offset, tenant in ((0, "slow"), (1, "slow"), (2, "capped")):
        hold.observe(offset)
        hold.own(offset, tenant)
    hold.settle(1)
    assert hold.parked == {"slow": 1, "capped": 1}
    hold.settle(0)
    hold.settle(2)
    assert hold.parked == {}
    assert hold.lwm == 3


def test_a_holding_logs_gaps_settle_as_ranges_and_its_records_one_by_one() -> None:
    """A holding log's gap (transaction markers) settles as a range of nobody's records; its
    parked records settle one at a time, each one less parked for its tenant."""
    hold = HoldingProgress(0, parked={"acme": 2})
    hold.own(0, "acme")
    hold.observe(0)
    hold.own(3, "acme")
    hold.observe(3)  # offsets 1 and 2 were markers: a gap
    hold.settle(3)
    assert hold.parked == {"acme": 1}
    assert hold.ranges() == [(1, 4)]
    hold.settle(0)
    assert hold.parked == {}
    assert (hold.lwm, hold.ranges()) == (4, [])


# -- budget spend (format 3) ------------------------------------------------------------------


def _entry(i: int) -> list[object]:
    return ["t", f"tenant-{i}", "cost", "day", False, "UTC", 0, 86_400_000, i, 0, []]


def test_budget_spend_rides_with_the_snapshot() -> None:
    rolling = ["g", "org", "records", "hour", True, "", 0, 0, 7, 2, [[60_000, 3], [120_000, 4]]]
    snapshot = Snapshot("t:9", 10, [(12, 15)], budgets=[_entry(1), rolling])
    [record] = encode_chunks(snapshot)
    assert record[0] == 3
    assert assemble([decode_chunk(record)]) == snapshot


def test_many_budget_entries_are_cut_over_chunks_and_put_together() -> None:
    entries = [_entry(i) for i in range(500)]
    ranges = [(i * 10, i * 10 + 1) for i in range(1, 200)]
    snapshot = Snapshot("t:2", 0, ranges, budgets=entries)
    records = encode_chunks(snapshot, limit=4096)
    assert len(records) > 5
    assert all(len(r) <= 4096 + 64 for r in records)
    chunks = [decode_chunk(r) for r in reversed(records)]
    assert assemble(chunks) == snapshot
    assert assemble(chunks[1:]) is None  # a chunk missing: not used


def test_a_format_2_record_still_reads_with_no_budget_spend() -> None:
    # Format 2 (the release before budgets): token "t", chunk 0 of 1, marks 10 and 0, no
    # parked tenant, one ingest range [12, 15), no holding range.
    record = bytes([2, 1]) + b"t" + bytes([0, 1, 10, 0, 0, 1, 2, 3, 0])
    chunk = decode_chunk(record)
    assert (chunk.token, chunk.lwm, chunk.ranges, chunk.budgets) == ("t", 10, [(12, 15)], [])
