"""The contract's rules as the producer's side meets them: a check per rule that returns
the value it was given when the contract accepts it, and raises ``ValueError``/``TypeError``
(naming the caller's wrong value) when not. Tenant and group ids, costs, request ids,
deadlines, and the clock of epoch milliseconds the records carry. Callers: the SDK, the
command line, the policy writer.

Each rule itself, saying what is wrong in a sentence for the scheduler to turn into a dead
letter, is ``verdicts``' (compiled); a check here asks it, so that the two sides cannot
disagree. Pure, but for ``now_ms``.
"""

from __future__ import annotations

import time
from datetime import datetime

from fairstream.wire.records import MAX_COST, MAX_EPOCH_MS, MAX_TENANT_BYTES
from fairstream.wire.verdicts import group_problem, request_id_problem

__all__ = [
    "check_cost",
    "check_group",
    "check_request_id",
    "deadline_ms",
    "now_ms",
    "tenant_key",
    "utf8_bytes",
]


def now_ms() -> int:
    """The wall clock in epoch milliseconds, as records carry it."""
    return time.time_ns() // 1_000_000


# -- tenant and group ids ----------------------------------------------------------------


def check_group(group: str) -> str:
    """``group`` when it is a tenant-group id; TypeError/ValueError else."""
    if not isinstance(group, str):
        raise TypeError(f"group must be a str, got {type(group).__name__}")
    problem = group_problem(group)
    if problem is not None:
        raise ValueError(problem)
    return group


def utf8_bytes(name: str, text: str, limit: int) -> bytes:
    """``text`` in UTF-8 when that is 1 to ``limit`` bytes; ValueError (naming it) else."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise ValueError(f"{name} is not encodable as UTF-8: {exc}") from None
    if not 1 <= len(raw) <= limit:
        raise ValueError(f"{name} must be 1 to {limit} UTF-8 bytes, got {len(raw)}")
    return raw


def tenant_key(tenant: str) -> bytes:
    """The record key of ``tenant``; ValueError when the contract refuses it."""
    if not isinstance(tenant, str):
        raise TypeError(f"tenant must be a str, got {type(tenant).__name__}")
    return utf8_bytes("the tenant id", tenant, MAX_TENANT_BYTES)


# -- costs and request ids ---------------------------------------------------------------


def check_cost(cost: int) -> int:
    """``cost`` when it is a whole number from 1 to ``MAX_COST``; TypeError/ValueError else."""
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise TypeError(f"cost must be an int, got {type(cost).__name__}")
    if not 1 <= cost <= MAX_COST:
        raise ValueError(f"cost must be between 1 and {MAX_COST}, got {cost}")
    return cost


def check_request_id(request_id: str) -> str:
    """``request_id`` when the contract accepts it; TypeError/ValueError else."""
    if not isinstance(request_id, str):
        raise TypeError(f"request_id must be a str, got {type(request_id).__name__}")
    problem = request_id_problem(request_id)
    if problem is not None:
        raise ValueError(problem)
    return request_id


# -- deadlines ---------------------------------------------------------------------------


def deadline_ms(deadline: datetime | int) -> int:
    """Epoch milliseconds of a deadline given as an aware datetime or as epoch ms."""
    if isinstance(deadline, datetime):
        if deadline.tzinfo is None or deadline.utcoffset() is None:
            raise ValueError("deadline must be a timezone-aware datetime (e.g. tzinfo=UTC)")
        ms = int(deadline.timestamp() * 1000)
    elif isinstance(deadline, int) and not isinstance(deadline, bool):
        ms = deadline
    else:
        raise TypeError(
            f"deadline must be a datetime or epoch milliseconds (int), "
            f"got {type(deadline).__name__}"
        )
    if not 1 <= ms <= MAX_EPOCH_MS:
        raise ValueError(f"deadline must be after the epoch, got {ms} ms")
    return ms
