"""The service's thread map (``scheduler/service.py``'s docstring) is true of the code: every
long-lived thread the service makes is a row of the table, runs under the one failure policy
(``supervise``) with the row's outcome, and nothing else is started. The clients are made,
never polled (nothing listens at the bootstrap address)."""

from __future__ import annotations

import re

import pytest

from fairstream.config import Settings
from fairstream.config.kafka import KafkaConnection
from fairstream.scheduler import service as service_module
from fairstream.scheduler.emitter.loop import Limits
from fairstream.scheduler.service import SchedulerService

NOWHERE = "127.0.0.1:1"


def table() -> dict[str, str]:
    """Thread name -> its failure outcome, from the docstring's table."""
    doc = service_module.__doc__ or ""
    body = doc.split("Thread map", 1)[1].split("\n\n")[1]
    rows: dict[str, str] = {}
    for line in body.splitlines():
        match = re.match(r"(\w+)(?: \(\w+\))?\s{2,}(fatal|restarted|exits)\s", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


@pytest.mark.parametrize("full", [False, True], ids=["alone", "feedback-and-group-shares"])
def test_every_thread_the_service_makes_is_in_the_map(full: bool) -> None:
    extra = {"feedback_topic": "fb", "share_by": "demand", "rate": 10.0} if full else {}
    settings = Settings(kafka=KafkaConnection(bootstrap=NOWHERE), **{"feedback_topic": "", **extra})
    service = SchedulerService(settings, 4, limits=Limits(), retention_ms=None)
    rows = table()
    made = {t.name for t in service._threads}
    assert made <= set(rows), f"threads missing from the map: {made - set(rows)}"
    optional = {"feedback", "group"}
    assert made == set(rows) - {"main"} - (set() if full else optional)
    # The failure outcome in the table is the one the supervisor runs each thread with.
    for thread in service._threads:
        assert thread._target == service.supervisor.run  # type: ignore[attr-defined]
        restart = thread._args[2]  # type: ignore[attr-defined]
        assert rows[thread.name] == ("restarted" if restart else "fatal"), thread.name
    assert not any(t.is_alive() for t in service._threads)  # made, not started
    assert service.join(0.1)  # nothing started: nothing to wait for
