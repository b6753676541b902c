"""The read-back's decision (``fetch.PayloadFetcher.get``): a record not read is ``Gone``
only when the log start is past it; otherwise the partition backs off and says so."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from fairstream.core import ManualClock
from fairstream.scheduler.emitter import fetch
from fairstream.scheduler.emitter.fetch import Gone, PayloadFetcher


class Watermarks:
    def __init__(self) -> None:
        self.low = 0
        self.fail = False
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
        return self.low, 100


@pytest.fixture
def fetcher(monkeypatch: pytest.MonkeyPatch) -> tuple[PayloadFetcher, Watermarks, list[int]]:
    f = PayloadFetcher({}, "ingest", clock=ManualClock(100.0))
    marks = Watermarks()
    reads: list[int] = []
    found: dict[int, Message] = {}

    def read(
        partition: int, offset: int, patience: float | None
    ) -> tuple[Message | None, str, bool]:
        reads.append(offset)
        return found.get(offset), "not read within 2 s", False

    monkeypatch.setattr(f, "_reader", lambda: marks)
    monkeypatch.setattr(f, "_read", read)
    f.found = found  # type: ignore[attr-defined]
    return f, marks, reads


def test_a_patient_read_not_done_yet_is_neither_gone_nor_a_failure(fetcher) -> None:
    f, marks, reads = fetcher
    marks.low = 5  # the log start would say gone: a read not done yet never asks it
    assert f.get(0, 3, 0.01) is None
    assert f.failing == {}
    assert f.retry_in(0) == 0.0
    assert reads == [3]


def test_a_record_below_the_log_start_is_gone_with_the_log_start(fetcher) -> None:
    f, marks, _ = fetcher
    marks.low = 5
    assert f.get(0, 3) == Gone(5)
    assert f.failing == {}


def test_a_record_the_log_still_holds_backs_off_and_is_never_gone(fetcher) -> None:
    f, marks, reads = fetcher
    clock = f.clock
    marks.low = 5
    assert f.get(0, 7) is None  # the log starts at 5: it holds 7, the broker was slow
    failing = f.failing[0]
    assert (failing.attempts, failing.offset) == (1, 7)
    assert "the log still holds it (log start 5)" in failing.error
    assert f.retry_in(0) == pytest.approx(fetch.BACKOFF)
    # Within the backoff: no read, no question to the broker, an answer at once.
    assert f.get(0, 8) is None
    assert reads == [7]
    # The broker away: the log start is unknown, which is not "gone" either.
    clock.advance(fetch.BACKOFF)
    marks.fail = True
    assert f.get(0, 7) is None
    assert f.failing[0].attempts == 2
    assert "log start unknown" in f.failing[0].error
    assert f.retry_in(0) == pytest.approx(2 * fetch.BACKOFF)
    # Back: the record is read, the partition is well again.
    clock.advance(10)
    marks.fail = False
    msg = Message(topic="ingest", partition=0, offset=7, key=b"a", value=b"v")
    f.found[7] = msg  # type: ignore[attr-defined]
    assert f.get(0, 7) is msg
    assert f.failing == {}


def test_the_backoff_is_capped(fetcher) -> None:
    f, _, _ = fetcher
    clock = f.clock
    for _ in range(12):
        assert f.get(1, 0) is None
        delay = f.retry_in(1)
        clock.advance(fetch.MAX_BACKOFF)
    assert delay == pytest.approx(fetch.MAX_BACKOFF)  # the twelfth backoff: capped
    assert f.retry_in(1) == pytest.approx(0.0)
    assert f.failing[1].attempts == 12
    f.forget(1)
    assert f.failing == {}
