"""A fairstream worker handler in front of an HTTP API that answers 429 with Retry-After.

The handler posts each request's payload to ``API_URL`` and maps the answer:

- 2xx: done; the tokens the API reports (``usage.total_tokens`` in an OpenAI-style JSON
  body) go back to the scheduler as ``fairstream.Usage(cost=...)``;
- 429: ``fairstream.RateLimited`` with the Retry-After header's delay, given either as
  seconds (``Retry-After: 2``) or as an HTTP date (``Retry-After: Wed, 21 Oct 2026
  07:28:00 GMT``). The worker tries the request again after it without using up an
  attempt, and the scheduler slows the egress down (``scope="api"``) or pauses this
  tenant alone (``scope="tenant"``: set ``RATE_LIMIT_SCOPE=tenant`` when every tenant
  calls the API with a key, and a quota, of its own);
- anything else: an exception, retried with backoff and dead-lettered in the end.

Run it next to this file (standard library only):

    API_URL=https://api.example.com/v1/generate fairstream worker --handler http_429:handle
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Mapping

import fairstream


def retry_after_seconds(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait, from a Retry-After header value (RFC 9110, section 10.2.3).

    ``value`` is delay-seconds (a non-negative number; some APIs send decimals) or an
    HTTP date, which is turned into the time left from ``now`` (default: the current UTC
    time): 0.0 for a date already past, which the worker takes as "no hint" and backs off
    as usual. None when the header is missing or says nothing usable.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" or an asctime date: HTTP dates are always UTC
        when = when.replace(tzinfo=dt.UTC)
    now = now if now is not None else dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def rate_limited_from(
    status: int,
    headers: Mapping[str, str],
    *,
    scope: str = "api",
    now: dt.datetime | None = None,
) -> fairstream.RateLimited | None:
    """The ``RateLimited`` to raise for an HTTP answer, or None when it is not a 429.

    Header names are matched without regard to case, as HTTP has it.
    """
    if status != 429:
        return None
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    return fairstream.RateLimited(retry_after=retry_after_seconds(value, now), scope=scope)


def usage_from(body: bytes) -> fairstream.Usage | None:
    """The tokens an OpenAI-style JSON answer reports as used, if any."""
    try:
        tokens = json.loads(body)["usage"]["total_tokens"]
    except (ValueError, KeyError, TypeError):
        return None
    return fairstream.Usage(cost=tokens) if type(tokens) is int and tokens >= 1 else None


def handle(request: fairstream.Request) -> fairstream.Usage | None:
    """POST the payload to API_URL; raise RateLimited on a 429."""
    call = urllib.request.Request(
        os.environ["API_URL"],
        data=request.payload,
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": request.request_id,  # a retried call is not billed twice
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(call, timeout=60) as answer:
            return usage_from(answer.read())
    except urllib.error.HTTPError as exc:
        limited = rate_limited_from(
            exc.code, dict(exc.headers.items()), scope=os.environ.get("RATE_LIMIT_SCOPE", "api")
        )
        if limited is not None:
            raise limited from exc
        raise
