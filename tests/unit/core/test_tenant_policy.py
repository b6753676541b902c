"""TenantPolicy defaults and validation messages."""

from __future__ import annotations

import pytest

from fairstream.core import DEFAULT_POLICY, TenantPolicy


def test_defaults():
    assert TenantPolicy() == DEFAULT_POLICY
    assert DEFAULT_POLICY.weight == 1
    assert DEFAULT_POLICY.priority == 0
    assert DEFAULT_POLICY.max_backlog is None
    assert DEFAULT_POLICY.max_backlog_cost is None
    assert DEFAULT_POLICY.rate_cap is None
    assert DEFAULT_POLICY.cap_burst == 1
    assert DEFAULT_POLICY.paused is False


def test_replace_validates():
    assert DEFAULT_POLICY.replace(weight=2.5).weight == 2.5
    with pytest.raises(ValueError, match="weight"):
        DEFAULT_POLICY.replace(weight=0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"weight": 0}, "weight must be a positive finite number, got 0"),
        ({"weight": -1.5}, "weight must be a positive finite number"),
        ({"weight": float("nan")}, "weight must be a positive finite number"),
        ({"weight": True}, "weight must be a number, got True"),
        ({"weight": "2"}, "weight must be a number"),
        ({"priority": -1}, r"priority must be 0 \(highest\) or more, got -1"),
        ({"priority": 1.0}, "priority must be an integer"),
        ({"max_backlog": 0}, r"max_backlog must be at least 1 \(None means unlimited\)"),
        ({"max_backlog": 2.5}, "max_backlog must be a positive integer or None"),
        ({"max_backlog_cost": -3}, "max_backlog_cost must be at least 1"),
        ({"rate_cap": 0}, "rate_cap must be a positive finite number"),
        ({"cap_burst": 0.5}, "cap_burst must be at least 1 record"),
        ({"paused": 1}, "paused must be true or false"),
    ],
)
def test_validation_messages(changes, message):
    with pytest.raises(ValueError, match=message):
        TenantPolicy(**changes)


def test_policy_is_immutable_and_hashable():
    policy = TenantPolicy(weight=2)
    with pytest.raises(AttributeError):
        policy.weight = 3  # type: ignore[misc]
    assert len({policy, TenantPolicy(weight=2)}) == 1
