"""The overflow queue (``backlog.Overflow``) and its letters' headers, without a broker."""

from __future__ import annotations

from confluent_kafka import Message

from fairstream import wire
from fairstream.scheduler.emitter.backlog import Overflow, _held
from fairstream.scheduler.emitter.egress import FOOTPRINT, dead_letter
from fairstream.scheduler.records import Letter, Parsed
from fairstream.wire.dead_letter import dead_letter_headers


def record(partition: int, offset: int, value: bytes = b"v" * 100) -> Message:
    return Message(topic="ingest", partition=partition, offset=offset, key=b"t", value=value)


def test_dropping_partitions_keeps_the_rest_and_recounts_what_is_held() -> None:
    overflow = Overflow(budget=10_000)
    for partition in (0, 1, 0, 2):
        msg = record(partition, len(overflow))
        overflow.letters.append(
            Letter("t", Parsed(partition, 0, "t", 1, None, 0, msg, None), wire.BACKLOG_FULL, "")
        )
        overflow.held += _held(msg)
    # One letter kept without its payload (over the budget): it holds nothing.
    overflow.letters.append(
        Letter("t", Parsed(1, 9, "t", 1, None, 0, None, None), wire.BACKLOG_FULL, "")
    )
    overflow.drop({0})
    assert [letter.entry.partition for letter in overflow.letters] == [1, 2, 1]
    assert overflow.held == 2 * (FOOTPRINT + 100)
    overflow.clear()
    assert len(overflow) == 0
    assert overflow.held == 0


def test_a_runs_shared_headers_with_its_own_coordinates_are_the_full_dead_letters() -> None:
    """``send_letters`` builds a run's headers once and adds each letter's partition and
    offset: the same headers, in the same order, as ``dead_letter`` gives that letter."""
    detail = "tenant 't' has 100000 records waiting (max-backlog 100000)"
    fixed = dead_letter_headers([], wire.BACKLOG_FULL, detail, ("ingest", 0, 0))[:-2]
    for partition, offset in ((0, 0), (3, 12_345_678)):
        msg = record(partition, offset)
        quick = [
            *fixed,
            (wire.DLQ_PARTITION, b"%d" % partition),
            (wire.DLQ_OFFSET, b"%d" % offset),
        ]
        source = ("ingest", partition, offset)
        key, value, full = dead_letter("t", msg, wire.BACKLOG_FULL, detail, source, 1_048_588)
        assert (key, value) == (msg.key(), msg.value())
        assert quick == full
