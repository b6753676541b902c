"""The contract's rules, one place each: tenant and group ids, costs, request ids, integer headers,
deadlines, and the clock of epoch milliseconds the records carry.

Each rule comes as a function that says what is wrong (a sentence) or nothing, so that the
scheduler can turn it into a dead letter, and as a checking function that raises
``ValueError``/``TypeError`` for the producer side (SDK, command line, policy writer).
Pure, but for ``now_ms``.
"""

from __future__ import annotations

import time
from datetime import datetime

from fairstream.wire.records import MAX_COST, MAX_EPOCH_MS, MAX_REQUEST_ID_BYTES, MAX_TENANT_BYTES

__all__ = [
    "check_cost",
    "check_group",
    "check_request_id",
    "deadline_ms",
    "group_problem",
    "header_int",
    "now_ms",
    "request_id_problem",
    "tenant_key",
    "tenant_of",
    "tenant_problem",
    "utf8_bytes",
]


def now_ms() -> int:
    """The wall clock in epoch milliseconds, as records carry it."""
    return time.time_ns() // 1_000_000


# -- tenant ids --------------------------------------------------------------------------


def tenant_problem(key: bytes) -> str | None:
    """Why ``key`` is not a tenant id (1 to 255 bytes of UTF-8), or None when it is one."""
    return _id_problem("the tenant id", key)


def tenant_of(key: bytes) -> str | None:
    """The tenant id ``key`` spells, or None when it is not one (``tenant_problem`` says
    why). Once per new tenant on the ingest path: one decode, no sentence."""
    if not 1 <= len(key) <= MAX_TENANT_BYTES:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _id_problem(name: str, raw: bytes) -> str | None:
    # The rule is ``tenant_of``'s; this only says which part of it ``raw`` breaks.
    if tenant_of(raw) is not None:
        return None
    if not 1 <= len(raw) <= MAX_TENANT_BYTES:
        return f"{name} must be 1 to {MAX_TENANT_BYTES} UTF-8 bytes, got {len(raw)}"
    return f"{name} is not valid UTF-8: {raw[:40]!r}"


def group_problem(group: bytes | str) -> str | None:
    """Why ``group`` is not a tenant-group id (1 to 255 bytes of UTF-8, as a tenant id), or
    None when it is one."""
    if isinstance(group, str):
        try:
            group = group.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates
            return f"the group id is not encodable as UTF-8: {exc}"
    return _id_problem("the group id", group)


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


def request_id_problem(request_id: str) -> str | None:
    """Why ``request_id`` is not a request id (1 to 1,024 ASCII bytes), or None."""
    if not request_id:
        return "the request id must not be empty"
    if not request_id.isascii():
        return f"the request id must be ASCII, got {request_id[:40]!r}"
    if len(request_id) > MAX_REQUEST_ID_BYTES:
        return f"the request id is {len(request_id)} bytes; at most {MAX_REQUEST_ID_BYTES} allowed"
    return None


def check_request_id(request_id: str) -> str:
    """``request_id`` when the contract accepts it; TypeError/ValueError else."""
    if not isinstance(request_id, str):
        raise TypeError(f"request_id must be a str, got {type(request_id).__name__}")
    problem = request_id_problem(request_id)
    if problem is not None:
        raise ValueError(problem)
    return request_id


# -- integer headers ---------------------------------------------------------------------


def header_int(name: str, raw: bytes | None, limit: int) -> int | str:
    """The value of integer header ``name``: ASCII digits (white space around them
    allowed) of a number from 1 to ``limit``; otherwise a sentence saying what is wrong.

    The one rule for ``fairstream-cost`` (limit ``MAX_COST``) and the epoch-ms headers
    (``MAX_EPOCH_MS``), on ingest (a dead letter) and in the worker (the default).
    """
    if raw is None:
        return f"header {name} has no value"
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return f"header {name} is not ASCII: {raw[:40]!r}"
    stripped = text.strip()
    if not stripped.isdigit():
        return f"header {name} must be a positive integer, got {text[:40]!r}"
    # Length first: int() refuses (raises on) strings of more than 4,300 digits.
    if len(stripped) > len(str(limit)) or not 1 <= int(stripped) <= limit:
        return f"header {name} must be between 1 and {limit}, got {stripped[:40]}"
    return int(stripped)


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
