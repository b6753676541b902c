"""An ingest message read against the ingest contract: a ``records.Parsed``.

The one parse, for a record read the first time (the ingest thread, ``ingest.member``) and
for one read again from the log (``emitter.spill``): its tenant (the key, validated once per
tenant and cached), its cost and deadline (its headers), its enqueued time (the producer's
timestamp), and how the backlog holds its payload (``records.Held``); or why it breaks the
contract (``wire.Invalid``), for a dead letter. Compiled with the other per-record modules
(``fairstream.native``).

Pure: no Kafka client call but the message's accessors; no clock but ``wire.now_ms``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import KafkaError, Message

from fairstream import wire
from fairstream.scheduler.records import Parsed, headed, new, passed_over
from fairstream.wire.dead_letter import HeaderList
from fairstream.wire.verdicts import header_terms

__all__ = ["TENANT_CACHE", "parse"]

TENANT_CACHE = 100_000  # tenant ids whose keys were validated (a dict lookup per record)


def parse(  # noqa: PLR0915 (flat hot path)
    partition: int,
    messages: list[Message],
    queue: deque[Parsed],
    tenants: dict[bytes, str],
    heard: Callable[[int], None],
    failed: Callable[[KafkaError], None],
    passing: dict[bytes, str] | None = None,
) -> None:
    """Records of ``partition`` to ``Parsed`` tuples at the end of ``queue``; the end of
    the partition to ``heard``, a consumer error to ``failed``. ``tenants``: the keys
    validated so far (their tenant ids), added to. ``passing``: the keys (and tenant ids)
    of the tenants whose records are passed over, not parsed: each run of them at
    consecutive offsets joins the queue as one ``passed_over`` (``emitter.spill``). Once
    per ingest record: flat."""
    # A record's offset is an int (confluent-kafka types it int | None for errors).
    append: Callable[[Any], None] = queue.append
    # The run being passed over: its key, tenant, first offset and end (run_tenant None: none).
    run_key: bytes | None = None
    run_tenant: str | None = None
    run_first = 0
    run_end = 0
    now_ms: object = wire.now_ms()
    # The last producer timestamp seen. Typed object, as ``enqueued``: compiled
    # (``fairstream.native``), an int variable holds its value unboxed, and each record's
    # tuple would get an int object of its own.
    shared: object = -1
    enqueued: object
    for msg in messages:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                heard(partition)
            else:
                failed(err)
            continue
        key = msg.key()
        if passing is not None:
            passed = passing.get(key) if key is not None else None
            if passed is not None:
                # A tenant far behind: its record waits in the log, read again nearer its
                # turn. A key and an offset are all it costs here.
                at = cast(int, msg.offset())
                if run_tenant is not None and at == run_end and key == run_key:
                    run_end = at + 1
                    continue
                if run_tenant is not None:
                    append(passed_over(partition, run_first, run_tenant, run_end - run_first))
                run_key, run_tenant, run_first, run_end = key, passed, at, at + 1
                continue
            if run_tenant is not None:  # the run ends: it goes first, in log order
                append(passed_over(partition, run_first, run_tenant, run_end - run_first))
                run_tenant = None
        headers = msg.headers()
        tenant = tenants.get(key) if key is not None else None
        kind, timestamp = msg.timestamp()
        if kind != 0 and timestamp > 0:
            if timestamp != shared:
                shared = timestamp
            # Neighbours share a millisecond: one int object for them all (32 bytes a
            # record that waits in the backlog).
            enqueued = shared
        else:
            enqueued = now_ms
        value = msg.value()
        if headers is None and value is not None:
            if tenant is None and key is not None:
                # A tenant first seen (or past the cache): no headers, so its id is all
                # there is to check (``validate_ingest`` says what is wrong, if anything).
                tenant = wire.tenant_of(key)
                if tenant is not None and len(tenants) < TENANT_CACHE:
                    tenants[key] = tenant
            if tenant is not None:
                # The common case: a tenant id, no headers, a payload, held as its value
                # alone (``records.Held``).
                append(
                    new(Parsed, (partition, msg.offset(), tenant, 1, None, enqueued, value, None))
                )
                continue
        # With headers of its own (one without took the path above). A tenant known: what
        # its headers say, as it is (``header_terms``), with no verdict built; otherwise, or
        # when a header breaks the contract, the verdict, which says why.
        cost: int = 1
        until: int | None = None
        checked = False
        if tenant is not None and value is not None and headers is not None:
            cost, until, _, problem = header_terms(cast(wire.Headers, headers))
            checked = problem is None
        if not checked:
            verdict = wire.validate_ingest(key, value, cast(wire.Headers, headers or []), tenant)
            if isinstance(verdict, wire.Invalid):
                append(
                    new(Parsed, (partition, msg.offset(), None, 1, None, enqueued, msg, verdict))
                )
                continue
            if key is not None and len(tenants) < TENANT_CACHE:
                tenants[key] = verdict.tenant
            tenant, cost, until = verdict.tenant, verdict.cost, verdict.deadline_ms
        # Valid: held as its value and headers (``records.Headed``), its footprint reckoned
        # now, while it is in the CPU's caches; the message is let go.
        kept = headed(value, cast(HeaderList, headers or []))
        append(new(Parsed, (partition, msg.offset(), tenant, cost, until, enqueued, kept, None)))
    if run_tenant is not None:
        append(passed_over(partition, run_first, run_tenant, run_end - run_first))
