"""How long the emitter waits when it sent nothing (``loop.idle_seconds``, ``Emitter._idle``):
never spinning while its next commit is far off, and never waiting while records wait."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import pytest

from fairstream.scheduler.emitter.loop import Emitter, idle_seconds
from fairstream.scheduler.messages import Call
from fairstream.scheduler.records import Parsed
from tests.unit.scheduler.test_emit_rule import make

__all__ = ["make"]  # the fixture

NOW = 100.0


def test_waiting_for_news_with_records_in_the_transaction_waits_until_the_intervals_commit() -> (
    None
):
    # The soonest commit (a fifth of the interval) passed; only a paced emitter takes it.
    seconds = idle_seconds(
        NOW, math.inf, paced=False, holding=3, soonest=NOW - 0.01, interval=NOW + 0.07
    )
    assert seconds == pytest.approx(0.07)


def test_paced_with_records_in_the_transaction_waits_until_the_soonest_commit() -> None:
    seconds = idle_seconds(NOW, 0.5, paced=True, holding=3, soonest=NOW + 0.02, interval=NOW + 0.08)
    assert seconds == pytest.approx(0.02)


def test_paced_with_an_empty_transaction_waits_for_the_token_within_the_interval() -> None:
    seconds = idle_seconds(NOW, 0.002, paced=True, holding=0, soonest=NOW - 1, interval=NOW + 0.08)
    assert seconds == pytest.approx(0.002)
    assert idle_seconds(NOW, 5.0, paced=True, holding=0, soonest=NOW, interval=NOW + 9) == 0.1


class Wake:
    """``Handoff.wake`` that says how long it was waited on instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def clear(self) -> None:
        pass

    def set(self) -> None:
        pass

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return False


@pytest.fixture
def emitter(make: Any) -> Emitter:
    em: Emitter = make()
    em.handoff.wake = Wake()  # type: ignore[assignment]
    return em


def handed(em: Emitter, count: int) -> None:
    """``count`` records waiting in partition 0's handoff queue."""
    em.queues[0] = deque(
        Parsed(0, offset, "t", 1, None, 1000, b"v", None) for offset in range(count)
    )


def waits(em: Emitter) -> list[float]:
    return em.handoff.wake.waits  # type: ignore[attr-defined,no-any-return]


def test_nothing_handed_over_waits_the_whole_time(emitter: Emitter) -> None:
    emitter._idle(0.05)
    assert waits(emitter) == [0.05]


def test_records_waiting_end_the_wait_at_once(emitter: Emitter) -> None:
    handed(emitter, 3)
    emitter._idle(0.05)
    assert waits(emitter) == []


def test_a_control_ends_the_wait_at_once(emitter: Emitter) -> None:
    emitter.handoff.controls.append(Call(lambda: None))
    emitter._idle(0.05)
    assert waits(emitter) == []


def test_no_time_left_means_no_wait(emitter: Emitter) -> None:
    emitter._idle(0.0)
    emitter._idle(-0.01)
    assert waits(emitter) == []
