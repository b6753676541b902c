"""The helper threads' failure policy (``supervise``) and the readiness reasons
(``observe.Conditions``)."""

from __future__ import annotations

import threading

import pytest

from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Condition, Conditions
from fairstream.scheduler.supervise import FatalError, Supervisor


def _value(metrics: Metrics, name: str, thread: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"thread": thread})


def _supervisor(max_restarts: int = 3) -> tuple[Supervisor, Metrics, Conditions, list[str]]:
    metrics, conditions, fatal = Metrics(), Conditions(), []
    stopping = threading.Event()

    def on_fatal(reason: str) -> None:
        fatal.append(reason)
        stopping.set()

    sup = Supervisor(
        metrics, conditions, on_fatal, stopping, backoff=0.0, max_restarts=max_restarts
    )
    return sup, metrics, conditions, fatal


def test_a_failing_body_is_restarted_and_counted() -> None:
    sup, metrics, conditions, fatal = _supervisor()
    runs: list[int] = []
    seen: list[list[Condition]] = []

    def body() -> None:
        runs.append(1)
        seen.append(conditions.current())
        if len(runs) <= 2:
            raise RuntimeError(f"boom {len(runs)}")
        sup._stopping.set()  # the service stops it while it runs: a clean end

    sup.run("policies", body)
    assert len(runs) == 3
    assert fatal == []
    assert _value(metrics, "fairstream_thread_restarts_total", "policies") == 2
    assert _value(metrics, "fairstream_thread_up", "policies") == 0
    assert conditions.current() == []  # cleared on each restart


def test_too_many_failures_in_a_row_are_fatal() -> None:
    sup, metrics, _, fatal = _supervisor(max_restarts=3)
    runs: list[int] = []

    def body() -> None:
        runs.append(1)
        raise ValueError("always")

    sup.run("trim", body)
    assert len(runs) == 4
    assert fatal == ["the trim thread failed 4 times in a row (last: ValueError: always)"]
    assert _value(metrics, "fairstream_thread_restarts_total", "trim") == 3


def test_a_body_that_ends_by_itself_is_a_failure() -> None:
    sup, _, _, fatal = _supervisor(max_restarts=1)
    sup.run("feedback", lambda: None)
    assert fatal == [
        "the feedback thread failed 2 times in a row (last: it ended without being stopped)"
    ]


def test_a_body_that_cannot_restart_is_fatal_at_once() -> None:
    sup, metrics, _, fatal = _supervisor()

    def body() -> None:
        raise OSError("gone")

    sup.run("group", body, restart=False)
    assert fatal == ["the group thread failed (OSError: gone)"]
    assert _value(metrics, "fairstream_thread_restarts_total", "group") is None


@pytest.mark.parametrize("restart", [True, False])
def test_a_fatal_error_ends_the_instance_in_its_own_words(restart: bool) -> None:
    """The emitter's FatalError (fenced, a producer it cannot renew) already says why: fatal
    at once, restartable or not, with its message alone."""
    sup, metrics, conditions, fatal = _supervisor()

    def body() -> None:
        raise FatalError("fenced by a newer producer with this transactional id", fenced=True)

    sup.run("emitter", body, restart=restart)
    assert fatal == ["fenced by a newer producer with this transactional id"]
    assert _value(metrics, "fairstream_thread_restarts_total", "emitter") is None
    assert _value(metrics, "fairstream_thread_up", "emitter") == 0
    assert conditions.current() == []


def test_a_body_that_returns_once_stopped_is_not_a_failure() -> None:
    sup, _, _, fatal = _supervisor()
    stopping = sup._stopping

    def body() -> None:
        stopping.set()  # the service stopped it meanwhile (a Stop reached the emitter)

    sup.run("emitter", body, restart=False)
    assert fatal == []


def test_conditions_set_and_probed_say_what_blocks_readiness() -> None:
    conditions = Conditions()
    state: dict[str, Condition | None] = {"probe": None}
    conditions.watch("readback", lambda: state["probe"])
    conditions.set("coordination", "cannot write the coordination topic", blocks_ready=True)
    assert [c.name for c in conditions.current()] == ["coordination"]
    assert [c.name for c in conditions.blocking()] == ["coordination"]
    state["probe"] = Condition("readback", "partition 0 unreadable since 3 s")
    assert [c.name for c in conditions.current()] == ["coordination", "readback"]
    conditions.clear("coordination")
    assert conditions.blocking() == []

    def broken() -> Condition | None:
        raise KeyError("x")

    conditions.watch("broken", broken)
    reasons = {c.name: c.reason for c in conditions.current()}
    assert "its probe failed" in reasons["broken"]
