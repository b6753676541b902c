"""``--fairness dominant`` in the emitter: the rule charges dominant use (``core.dominant``)
and measured costs from feedback are charged in the same terms. A ManualClock, no broker."""

from __future__ import annotations

from typing import Any

import pytest

from fairstream.config import Settings
from fairstream.config.setting import SettingsError
from fairstream.scheduler.emitter.loop import Emitter
from fairstream.scheduler.messages import FeedbackBatch
from tests.unit.scheduler.test_emit_rule import make

__all__ = ["make"]  # the fixture


def charges(emitter: Emitter, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """What the core is charged from now on."""
    charged: list[tuple[str, float]] = []

    def charge(tenant: str, amount: float) -> bool:
        charged.append((tenant, amount))
        return True

    monkeypatch.setattr(emitter.rule.core, "charge", charge)
    return charged


def feedback(emitter: Emitter, *reports: tuple[str, int, int]) -> None:
    emitter._control(FeedbackBatch(charges=[(*report, 0) for report in reports]))


def test_dominant_fairness_needs_both_limits() -> None:
    with pytest.raises(SettingsError, match="--fairness dominant needs both --rate and"):
        Settings(fairness="dominant", rate=100)
    with pytest.raises(SettingsError, match="--fairness must be one of cost, dominant"):
        Settings(fairness="drf")
    assert Settings().fairness == "cost"


def test_by_cost_measured_costs_are_charged_as_they_differ(make: Any, monkeypatch: Any) -> None:
    emitter = make(rate=100, cost_rate=1000)
    assert emitter.rule.dominant is None
    charged = charges(emitter, monkeypatch)
    feedback(emitter, ("A", 1, 5), ("B", 30, 30), ("C", 40, 10))
    assert charged == [("A", 4), ("C", -30)]


def test_dominant_measured_costs_are_charged_in_dominant_terms(make: Any, monkeypatch: Any) -> None:
    emitter = make(rate=100, cost_rate=1000, fairness="dominant")  # a record uses both at 10
    dominant = emitter.rule.dominant
    assert dominant is not None
    assert dominant.balance == 10
    charged = charges(emitter, monkeypatch)
    # 1 -> 5: both under the balance, the record slot was the dominant use: no correction.
    # 1 -> 30: charged 30 instead of 10. 40 -> 10: charged 10 instead of 40.
    feedback(emitter, ("A", 1, 5), ("B", 1, 30), ("C", 40, 10))
    assert charged == [("B", 20), ("C", -30)]
