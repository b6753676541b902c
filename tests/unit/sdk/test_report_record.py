"""``OutcomeReport.record``, the one place the Worker, the ShareWorker and the Faust agent build a
feedback record: it names the egress topic the request was read from, so that a scheduler
can tell its own deployment's feedback from another's on a shared feedback topic."""

from __future__ import annotations

from typing import Any

import pytest

from fairstream import wire
from fairstream.sdk.worker.calling import OutcomeReport
from fairstream.sdk.worker.handler import request_of
from fairstream.wire.feedback import Outcome, Scope, decode_feedback, encode_feedback, feedback_key


@pytest.mark.parametrize(
    "report",
    [
        {"outcome": Outcome.OK, "cost": 7},
        {"outcome": Outcome.RATE_LIMITED, "scope": Scope.API, "retry_after": 0.5},
        {"outcome": Outcome.FAILED},
        {"outcome": Outcome.DEAD_LETTERED},
    ],
)
def test_every_outcome_names_the_egress_topic_it_was_read_from(report: dict[str, Any]) -> None:
    req = request_of(
        "team-b.egress", 2, 41, b"acme", b"prompt", [(wire.REQUEST_ID, b"r-1"), (wire.COST, b"3")]
    )
    record = OutcomeReport(req, attempt=1, latency=0.01, **report).record()
    assert record.egress_topic == "team-b.egress"
    assert (record.request_id, record.tenant, record.declared_cost) == ("r-1", "acme", 3)
    decoded = decode_feedback(encode_feedback(record), key=feedback_key(record))
    assert decoded.egress_topic == "team-b.egress"
