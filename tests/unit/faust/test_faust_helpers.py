"""fairstream.faust without a broker: the app checks, the ingest record, the Request of an
event, the paid-API agent's decisions (retries, rate limits, dead letters, duplicates) with
its topics replaced by recorders, and the policy table's reading of policy records.

The end-to-end run on a real broker with a real Faust worker is
tests/integration/test_faust.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from faust.events import Event
from faust.types.tuples import Message

from fairstream import RateLimited, Request, Usage, wire
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.faust import IngestWriter, PaidApiAgent, PolicyTable, request_from_event
from fairstream.wire.feedback import Feedback, Outcome, Scope, decode_feedback
from fairstream.wire.policy import DEFAULT_POLICY_KEY, PolicyRecord, encode_policy


def app(**settings: Any) -> faust.App:
    return faust.App("fairstream-unit", broker="kafka://127.0.0.1:1", **settings)


def event(
    app_: faust.App,
    key: bytes | None = b"acme",
    value: bytes = b"prompt",
    headers: list[tuple[str, bytes]] | None = None,
    offset: int = 7,
) -> Event:
    message = Message("fs.egress", 3, offset, 0.0, 0, headers, key, value, None)
    return Event(app_, key, value, headers, message)


class Recorder:
    """Stands in for the app's producer (``DirectSender``): keeps what was sent per topic and
    acknowledges at once."""

    def __init__(self) -> None:
        self.sent: dict[str, list[tuple[bytes | None, bytes | None, Any]]] = {}

    async def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Any
    ) -> asyncio.Future[None]:
        self.sent.setdefault(topic, []).append((key, value, headers))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def feedback(self) -> list[Feedback]:
        return [decode_feedback(v, key=k) for k, v, _ in self.sent.get("fs.feedback", [])]

    def dead_letters(self) -> list[tuple[bytes | None, bytes | None, Any]]:
        return self.sent.get("fs.dlq", [])


def agent_with(handler: Any, **kwargs: Any) -> tuple[PaidApiAgent, Recorder]:
    agent = PaidApiAgent(
        app(),
        handler,
        dlq_topic="fs.dlq",
        feedback_topic="fs.feedback",
        backoff_initial=0.0,
        backoff_max=0.0,
        name="unit",
        **kwargs,
    )
    sent = Recorder()
    agent.sender = sent  # type: ignore[assignment]
    return agent, sent


# -- the app checks ------------------------------------------------------------------------


def test_the_confluent_driver_is_refused_because_it_drops_headers() -> None:
    with pytest.raises(ValueError, match="drops message headers"):
        IngestWriter(faust.App("x", broker="confluent://127.0.0.1:1"))
    with pytest.raises(ValueError, match="confluent driver"):
        PaidApiAgent(faust.App("y", broker="confluent://127.0.0.1:1"), lambda r: None)


def test_a_custom_partitioner_is_refused() -> None:
    def by_length(key: bytes | None, partitions: Any, available: Any) -> int:
        return len(key or b"") % len(partitions)

    with pytest.raises(ValueError, match="murmur2"):
        IngestWriter(app(producer_partitioner=by_length))


# -- ingest --------------------------------------------------------------------------------


def test_ingest_builds_the_contract_record() -> None:
    ingest = IngestWriter(app(), "fs.ingest")
    sent = Recorder()
    ingest.sender = sent  # type: ignore[assignment]
    asyncio.run(
        ingest.send(
            "acme",
            b"payload",
            cost=5,
            request_id="r-1",
            deadline=1_800_000_000_000,
            headers={"trace": "t"},
        )
    )
    ((key, value, headers),) = sent.sent["fs.ingest"]
    assert (key, value) == (b"acme", b"payload")
    assert headers == [
        ("trace", b"t"),
        (wire.COST, b"5"),
        (wire.REQUEST_ID, b"r-1"),
        (wire.DEADLINE_MS, b"1800000000000"),
    ]
    assert isinstance(wire.validate_ingest(key, value, headers), wire.Valid)
    assert ingest.topic == "fs.ingest"


@pytest.mark.parametrize(
    ("tenant", "payload", "kwargs", "error"),
    [
        ("", b"x", {}, ValueError),
        ("acme", "text", {}, TypeError),
        ("acme", b"x", {"cost": 0}, ValueError),
        ("acme", b"x", {"headers": {"fairstream-cost": "2"}}, ValueError),
    ],
)
def test_ingest_refuses_what_the_scheduler_would_dead_letter(
    tenant: str, payload: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    ingest = IngestWriter(app())
    with pytest.raises(error):
        asyncio.run(ingest.send(tenant, payload, **kwargs))


# -- the Request of an event ---------------------------------------------------------------


def test_request_from_event_reads_the_egress_headers() -> None:
    headers = [
        ("trace", b"a"),
        (wire.REQUEST_ID, b"r-9"),
        (wire.COST, b"4"),
        (wire.SCHEDULED_MS, b"1000"),
        (wire.ENQUEUED_MS, b"900"),
        (wire.DEADLINE_MS, b"5000"),
        ("trace", b"b"),  # duplicates kept, in order
    ]
    request = request_from_event(event(app(), headers=headers))
    assert request == Request(
        tenant="acme",
        payload=b"prompt",
        request_id="r-9",
        cost=4,
        headers=tuple(headers),
        enqueued_ms=900,
        scheduled_ms=1000,
        deadline_ms=5000,
        topic="fs.egress",
        partition=3,
        offset=7,
    )
    assert request.header("trace") == b"b"


def test_request_from_event_defaults_without_headers() -> None:
    request = request_from_event(event(app(), headers=None))
    assert request.request_id == "fs.egress-3-7"
    assert request.cost == 1
    assert request.scheduled_ms is None


# -- the agent -----------------------------------------------------------------------------


def test_ok_reports_usage_and_a_repeated_request_id_is_skipped() -> None:
    calls: list[Request] = []

    async def handler(request: Request) -> Usage:
        calls.append(request)
        return Usage(cost=12)

    agent, sent = agent_with(handler)
    headers = [(wire.REQUEST_ID, b"r-1"), (wire.COST, b"3"), (wire.SCHEDULED_MS, b"1000")]

    async def run() -> list[str]:
        first = await agent.process(event(agent.egress.app, headers=headers, offset=1))
        again = await agent.process(event(agent.egress.app, headers=headers, offset=2))
        return [first, again]

    assert asyncio.run(run()) == ["ok", "duplicate"]
    assert len(calls) == 1
    (record,) = sent.feedback()
    assert (record.request_id, record.tenant, record.outcome) == ("r-1", "acme", Outcome.OK)
    assert (record.declared_cost, record.cost, record.scheduled_at_ms) == (3, 12, 1000)
    assert record.egress_topic == "fs.egress"  # names its deployment (the event's topic)
    assert agent.stats.ok == 1
    assert agent.stats.duplicates == 1
    assert agent.stats.feedback_records == 1
    assert not sent.dead_letters()


def test_rate_limited_is_reported_and_retried_without_using_an_attempt() -> None:
    refusals = [RateLimited(retry_after=0.0), RateLimited(scope="tenant")]
    attempts: list[int] = []

    def handler(request: Request) -> None:  # a plain function: run in the executor
        attempts.append(request.attempt)
        if refusals:
            raise refusals.pop(0)

    agent, sent = agent_with(handler, max_attempts=1)
    assert asyncio.run(agent.process(event(agent.egress.app))) == "ok"
    assert attempts == [1, 1, 1]
    outcomes = [(f.outcome, f.scope) for f in sent.feedback()]
    assert outcomes == [
        (Outcome.RATE_LIMITED, Scope.API),
        (Outcome.RATE_LIMITED, Scope.TENANT),
        (Outcome.OK, None),
    ]
    assert agent.stats.rate_limited == 2


def test_the_last_failed_attempt_dead_letters_with_the_original_record() -> None:
    async def handler(request: Request) -> None:
        raise RuntimeError(f"boom {request.attempt}")

    agent, sent = agent_with(handler, max_attempts=2)
    headers = [(wire.REQUEST_ID, b"r-2"), ("trace", b"t")]
    assert asyncio.run(agent.process(event(agent.egress.app, headers=headers))) == ("dead-lettered")
    ((key, value, dlq_headers),) = sent.dead_letters()
    assert (key, value) == (b"acme", b"prompt")
    assert dlq_headers[:2] == headers
    found = dict(dlq_headers)
    assert found[wire.DLQ_REASON] == wire.HANDLER_FAILED.encode()
    assert b"RuntimeError: boom 2" in found[wire.DLQ_DETAIL]
    outcomes = [(f.outcome, f.attempt) for f in sent.feedback()]
    assert outcomes == [(Outcome.FAILED, 1), (Outcome.FAILED, 2), (Outcome.DEAD_LETTERED, 2)]
    assert agent.stats.dead_lettered == 1
    assert agent.stats.failed_attempts == 2


def test_a_rate_limit_past_the_deadline_dead_letters_as_expired() -> None:
    async def handler(request: Request) -> None:
        raise RateLimited(retry_after=3600)

    agent, sent = agent_with(handler)
    deadline = str(wire.now_ms() + 60_000).encode()
    result = asyncio.run(
        agent.process(event(agent.egress.app, headers=[(wire.DEADLINE_MS, deadline)]))
    )
    assert result == "dead-lettered"
    assert dict(sent.dead_letters()[0][2])[wire.DLQ_REASON] == wire.EXPIRED.encode()


def test_without_a_feedback_topic_nothing_is_reported() -> None:
    agent = PaidApiAgent(app(), lambda r: None, feedback_topic=None, name="quiet")
    assert agent.feedback_topic is None
    assert asyncio.run(agent.process(event(agent.egress.app))) == "ok"
    assert agent.stats.feedback_records == 0


def test_agent_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        PaidApiAgent(app(), lambda r: None, max_attempts=0)
    with pytest.raises(ValueError, match="backoff"):
        PaidApiAgent(app(), lambda r: None, backoff_initial=2.0, backoff_max=1.0)


# -- the policy table ----------------------------------------------------------------------


def test_policy_table_applies_records_tombstones_and_the_defaults() -> None:
    table = PolicyTable(app(), "fs.policy")
    assert table.policy("acme") == DEFAULT_POLICY
    heavy = TenantPolicy(weight=3)
    table.apply(b"acme", encode_policy(PolicyRecord(heavy, updated_at_ms=1)))
    table.apply(DEFAULT_POLICY_KEY, encode_policy(PolicyRecord(TenantPolicy(weight=2), 1)))
    assert table["acme"] == heavy
    assert dict(table) == {"acme": heavy}  # the defaults record is not a tenant
    assert table.policy("globex") == TenantPolicy(weight=2)
    assert table.get("globex") is None
    record = table.record("acme")
    assert record is not None
    assert record.updated_at_ms == 1
    table.apply(b"acme", None)  # a tombstone: back to the defaults
    assert table.policy("acme") == TenantPolicy(weight=2)
    assert len(table) == 0
    table.apply(b"acme", b"not avro")
    table.apply(None, b"x")
    assert table.errors == 2
    # A tenant group's policy is not a tenant's (and its key is no UTF-8).
    table.apply(b"\xffgroup:acme", encode_policy(PolicyRecord(TenantPolicy(weight=5), 1)))
    assert dict(table) == {}
    assert "acme" not in table
    with pytest.raises(KeyError):
        table[""]


def test_a_rebuild_fills_its_own_dict_until_it_is_swapped_in() -> None:
    table = PolicyTable(app(), "fs.policy")
    table.apply(b"acme", encode_policy(PolicyRecord(TenantPolicy(weight=3), 1)))
    rebuild: dict[bytes, PolicyRecord] = {}
    table.apply(b"globex", encode_policy(PolicyRecord(TenantPolicy(weight=2), 2)), rebuild)
    assert dict(table) == {"acme": TenantPolicy(weight=3)}  # the table serves what it had
    assert list(rebuild) == [b"globex"]
    assert not table.ready


def test_a_begin_is_awaited_before_the_first_call_only_and_its_mark_runs_next_to_it() -> None:
    # The paced gate (``Begin``): awaited before the first call, its mark called right
    # before the handler; a retry after a rate limit goes through neither.
    steps: list[str] = []

    async def handler(request: Request) -> None:
        steps.append(f"handler {request.attempt}")
        if request.attempt == 1 and "limited" not in steps:
            steps.append("limited")
            raise RateLimited(retry_after=0.0)

    async def begin() -> Any:
        steps.append("gate")
        await asyncio.sleep(0)
        return lambda: steps.append("mark")

    async def sleep(delay: float) -> bool:
        return True

    agent, _ = agent_with(handler, max_attempts=1)
    request = request_from_event(event(agent.egress.app))
    ending = asyncio.run(agent._calls(request, sleep, begin))
    assert ending is not None
    assert ending.reason is None
    assert steps == ["gate", "mark", "handler 1", "limited", "handler 1"]
