"""When the worker calls a handler again: exponential backoff after a failure, the API's
Retry-After after a rate limit, and whether a retry would come after the deadline. Pure.
"""

from __future__ import annotations

__all__ = ["backoff_delay", "expires_before", "rate_limited_delay"]


def rate_limited_delay(
    retry_after: float | None,
    consecutive: int,
    initial: float,
    maximum: float,
    jitter: float = 0.0,
) -> float:
    """Seconds to wait after the ``consecutive``-th rate-limited call in a row (1-based).

    The API's ``retry_after`` when it gave one above 0, plus ``jitter`` (a uniform draw from
    [0, 1), the caller's) times a span that doubles with each refusal in a row:
    ``retry_after * (2 ** consecutive - 1)``, at most ``maximum``. Otherwise the usual
    backoff. A Retry-After of 0 (or an HTTP date already past, as clock skew makes it)
    counts as none, so that an API answering "0" cannot make the worker call it in a tight
    loop.

    Why the jitter: an API at its limit refuses every call it cannot take, and tells each
    the moment of its next free token. Requests refused together that all come back at that
    moment meet the calls started on schedule there, and most are refused again: measured
    behind a hidden capacity, three refusals in four were retries. Spread over a span that
    grows while they keep being refused (full jitter, as AWS's SDKs back off), they come
    back as tokens free up. Never before the Retry-After: the API's word is a floor.
    """
    if retry_after is not None and retry_after > 0:
        span = min(maximum, retry_after * (2.0 ** min(consecutive, 30) - 1.0))
        return retry_after + max(0.0, min(jitter, 1.0)) * max(0.0, span)
    return backoff_delay(consecutive, initial, maximum)


def expires_before(deadline_ms: int | None, now_ms: float, delay: float) -> bool:
    """True when a request with ``deadline_ms`` would be past it once ``delay`` s passed."""
    return deadline_ms is not None and now_ms + delay * 1000.0 >= deadline_ms


def backoff_delay(attempt: int, initial: float, maximum: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based) before the next one.

    Exponential: ``initial``, ``2 x initial``, ``4 x initial``... capped at ``maximum``.
    Deterministic: records that failed at the same moment retry at the same moment. With
    ``ordering="start"`` several records of a tenant may do so; they were released by the
    scheduler at its rate, and retries of one record stay spaced by the schedule.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    # The exponent is capped so that huge attempt numbers cannot overflow a float.
    return min(maximum, initial * 2.0 ** min(attempt - 1, 60))
