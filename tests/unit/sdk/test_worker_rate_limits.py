"""What a handler may raise (``RateLimited``) and return (``Usage``), and the pure rules the
worker follows for them: the wait after a rate-limited call and the deadline check."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

import fairstream
from fairstream.sdk.worker.handler import RateLimited, Usage
from fairstream.sdk.worker.retry import backoff_delay, expires_before, rate_limited_delay
from fairstream.wire import MAX_COST


def test_exported_from_the_package_without_loading_kafka() -> None:
    assert fairstream.RateLimited is RateLimited
    assert fairstream.Usage is Usage
    code = (
        "import sys, fairstream; fairstream.RateLimited; fairstream.Usage; "
        "print('confluent_kafka' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_rate_limited_defaults() -> None:
    exc = RateLimited()
    assert (exc.retry_after, exc.scope) == (None, "api")
    assert isinstance(exc, Exception)
    assert str(exc) == "rate-limited (api)"


def test_rate_limited_with_retry_after_and_tenant_scope() -> None:
    exc = RateLimited(retry_after=2, scope="tenant")
    assert (exc.retry_after, exc.scope) == (2.0, "tenant")
    assert isinstance(exc.retry_after, float)
    assert "retry after 2 s" in str(exc)
    assert repr(exc) == "RateLimited(retry_after=2.0, scope='tenant')"
    assert RateLimited(0.5, "api").retry_after == 0.5  # positional, as in the API


@pytest.mark.parametrize("scope", ["API", "global", "", None])
def test_rate_limited_scope_is_api_or_tenant(scope: object) -> None:
    with pytest.raises(ValueError, match="scope must be 'api' or 'tenant'"):
        RateLimited(scope=scope)  # type: ignore[arg-type]


@pytest.mark.parametrize("retry_after", [-1, math.nan, math.inf])
def test_rate_limited_retry_after_is_finite_and_not_negative(retry_after: float) -> None:
    with pytest.raises(ValueError, match="retry_after"):
        RateLimited(retry_after)


@pytest.mark.parametrize("retry_after", ["3", True, b"1"])
def test_rate_limited_retry_after_is_a_number(retry_after: object) -> None:
    with pytest.raises(TypeError, match="retry_after"):
        RateLimited(retry_after)  # type: ignore[arg-type]


def test_usage() -> None:
    assert Usage(cost=10).cost == 10
    assert Usage(MAX_COST).cost == MAX_COST
    assert Usage(3) == Usage(cost=3)


@pytest.mark.parametrize("cost", [0, -5, MAX_COST + 1, 1.5, 2.0, True, "7", None])
def test_usage_cost_is_a_positive_int(cost: object) -> None:
    with pytest.raises(ValueError, match=r"Usage\.cost must be an integer from 1"):
        Usage(cost)  # type: ignore[arg-type]


def test_delay_is_the_retry_after_when_given() -> None:
    assert rate_limited_delay(3.5, 1, 0.1, 10) == 3.5
    assert rate_limited_delay(60.0, 7, 0.1, 10) == 60.0  # the API knows better than backoff_max


@pytest.mark.parametrize("retry_after", [None, 0.0])
def test_delay_without_a_hint_is_the_backoff_of_the_rate_limited_streak(
    retry_after: float | None,
) -> None:
    for consecutive in range(1, 8):
        assert rate_limited_delay(retry_after, consecutive, 0.1, 2.0) == backoff_delay(
            consecutive, 0.1, 2.0
        )


def test_expires_before() -> None:
    assert not expires_before(None, 1_000_000.0, 1e9)  # no deadline: retried for ever
    assert not expires_before(10_000, 5_000.0, 4.9)
    assert expires_before(10_000, 5_000.0, 5.0)  # worthless at the deadline itself
    assert expires_before(10_000, 11_000.0, 0.0)  # already past


def test_a_retry_after_is_a_floor_and_the_jitter_span_doubles_with_each_refusal() -> None:
    # jitter 0: exactly the Retry-After; jitter near 1: the whole span on top of it.
    assert rate_limited_delay(0.1, 1, 0.1, 10, jitter=0.0) == 0.1
    assert rate_limited_delay(0.1, 1, 0.1, 10, jitter=0.5) == pytest.approx(0.15)
    assert rate_limited_delay(0.1, 3, 0.1, 10, jitter=0.5) == pytest.approx(0.1 + 0.5 * 0.7)
    # The span stops at backoff_max; the Retry-After itself never shrinks.
    assert rate_limited_delay(2.0, 10, 0.1, 5.0, jitter=1.0) == pytest.approx(7.0)
    assert rate_limited_delay(60.0, 1, 0.1, 10, jitter=0.999) == pytest.approx(69.99)
    # A draw outside [0, 1) is clamped, never a delay below the Retry-After.
    assert rate_limited_delay(0.5, 2, 0.1, 10, jitter=-3.0) == 0.5


def test_without_a_retry_after_the_jitter_changes_nothing() -> None:
    assert rate_limited_delay(None, 3, 0.1, 2.0, jitter=0.9) == backoff_delay(3, 0.1, 2.0)
