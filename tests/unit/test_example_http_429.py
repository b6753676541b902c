"""examples/http_429.py: an HTTP 429 and its Retry-After (seconds or an HTTP date) become
fairstream.RateLimited; an OpenAI-style usage becomes fairstream.Usage."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

import fairstream

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "http_429.py"
NOW = dt.datetime(2026, 10, 21, 7, 28, 0, tzinfo=dt.UTC)


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("http_429", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = load()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2", 2.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("1.5", 1.5),  # not RFC 9110, but some APIs send it
        ("Wed, 21 Oct 2026 07:28:30 GMT", 30.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-26 07:29:00 GMT", 60.0),  # obsolete RFC 850 form
        ("Wed Oct 21 07:28:05 2026", 5.0),  # obsolete asctime form (UTC)
        ("Wed, 21 Oct 2026 07:27:00 GMT", 0.0),  # already past: no hint
        (None, None),
        ("", None),
        ("-5", None),
        ("soon", None),
        ("inf", None),
        ("nan", None),
    ],
)
def test_retry_after_seconds(value: str | None, seconds: float | None) -> None:
    assert example.retry_after_seconds(value, now=NOW) == seconds


def test_a_429_with_retry_after_becomes_rate_limited() -> None:
    limited = example.rate_limited_from(429, {"Retry-After": "3"}, now=NOW)
    assert isinstance(limited, fairstream.RateLimited)
    assert (limited.retry_after, limited.scope) == (3.0, "api")


def test_an_http_date_and_any_header_case() -> None:
    headers = {"retry-after": "Wed, 21 Oct 2026 07:28:10 GMT"}
    limited = example.rate_limited_from(429, headers, scope="tenant", now=NOW)
    assert (limited.retry_after, limited.scope) == (10.0, "tenant")


def test_a_429_without_retry_after_leaves_the_wait_to_the_worker() -> None:
    limited = example.rate_limited_from(429, {"Content-Type": "application/json"}, now=NOW)
    assert limited.retry_after is None


@pytest.mark.parametrize("status", [200, 400, 500, 503])
def test_other_statuses_are_not_rate_limits(status: int) -> None:
    assert example.rate_limited_from(status, {"Retry-After": "3"}, now=NOW) is None


@pytest.mark.parametrize(
    ("body", "cost"),
    [
        (b'{"usage": {"total_tokens": 812}}', 812),
        (b'{"usage": {"total_tokens": 0}}', None),
        (b'{"usage": {}}', None),
        (b'{"usage": {"total_tokens": "812"}}', None),
        (b"[1, 2]", None),
        (b"not json", None),
    ],
)
def test_usage_from_an_openai_style_body(body: bytes, cost: int | None) -> None:
    usage = example.usage_from(body)
    assert (usage.cost if usage is not None else None) == cost
