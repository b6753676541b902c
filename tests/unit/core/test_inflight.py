"""Concurrency slots (``fairstream.core.inflight``): counts per tenant, leases, renewals,
and the split of a group limit; time given by the test."""

from __future__ import annotations

import math
import random

import pytest

from fairstream.core.inflight import InFlight, split_limit


def test_slots_are_counted_per_tenant_and_freed_by_request_id():
    slots = InFlight(limit=3, lease=10)
    assert slots.acquire(b"r1", "A", 0.0)
    assert slots.acquire(b"r2", "A", 0.0)
    assert not slots.full
    assert slots.acquire(b"r3", "B", 0.0)
    assert slots.full
    assert (len(slots), slots.of("A"), slots.of("B")) == (3, 2, 1)
    assert slots.tenant_full("A", 2)
    assert not slots.tenant_full("A", 3)
    assert not slots.tenant_full("A", None)
    assert slots.release(b"r1") == "A"
    assert slots.release(b"r1") is None  # given back once
    assert slots.release(b"unknown") is None
    assert (len(slots), slots.of("A"), slots.full) == (2, 1, False)
    assert slots.by_tenant() == {"A": 1, "B": 1}


def test_the_same_request_released_again_counts_once_and_renews_its_lease():
    slots = InFlight(lease=10)
    assert slots.acquire(b"r", "A", 0.0)
    assert not slots.acquire(b"r", "A", 5.0)
    assert len(slots) == 1
    assert slots.next_expiry() == 15.0
    assert slots.expire(14.9) == []
    assert slots.expire(15.0) == ["A"]
    assert slots.expired == 1


def test_a_lost_completion_holds_its_slot_for_one_lease():
    slots = InFlight(limit=2, lease=30)
    slots.acquire(b"lost", "A", 0.0)
    slots.acquire(b"done", "A", 1.0)
    assert slots.release(b"done") == "A"
    assert slots.next_expiry() == 30.0
    assert slots.expire(29.0) == []
    assert len(slots) == 1
    assert slots.expire(30.0) == ["A"]
    assert (len(slots), slots.of("A"), slots.expired) == (0, 0, 1)
    assert slots.next_expiry() == math.inf
    assert slots.release(b"lost") is None  # its late completion frees nothing more


def test_renewal_postpones_the_end_of_a_lease():
    slots = InFlight(lease=10)
    slots.acquire(b"a", "A", 0.0)
    slots.acquire(b"b", "B", 1.0)
    assert slots.renew(b"a", 8.0)
    assert not slots.renew(b"unknown", 8.0)
    assert slots.next_expiry() == 11.0  # b's; a's old end is superseded
    assert slots.expire(17.9) == ["B"]
    assert slots.expire(18.0) == ["A"]
    assert slots.expired == 2


def test_model_against_a_plain_dict_of_lease_ends():
    rng = random.Random(7)
    slots = InFlight(lease=5)
    model: dict[int, tuple[str, float]] = {}
    expired = 0
    now = 0.0
    for _ in range(20_000):
        now += rng.random() * 0.05
        key = rng.randrange(300)
        op = rng.random()
        if op < 0.45:
            new = key not in model
            assert slots.acquire(key, f"t{key % 7}", now) == new
            model[key] = (model[key][0] if not new else f"t{key % 7}", now + 5)
        elif op < 0.6:
            assert slots.renew(key, now) == (key in model)
            if key in model:
                model[key] = (model[key][0], now + 5)
        elif op < 0.9:
            held = model.pop(key, None)
            assert slots.release(key) == (held[0] if held else None)
        else:
            gone = sorted(t for k, (t, end) in model.items() if end <= now)
            model = {k: v for k, v in model.items() if v[1] > now}
            expired += len(gone)
            assert sorted(slots.expire(now)) == gone
        assert len(slots) == len(model)
        per: dict[str, int] = {}
        for tenant, _ in model.values():
            per[tenant] = per.get(tenant, 0) + 1
        assert slots.by_tenant() == per
    assert slots.expired == expired
    # Superseded entries stay bounded (compaction).
    assert len(slots._order) <= 2 * len(slots) + 1024


def test_limit_changes_apply_to_new_requests_only():
    slots = InFlight(limit=2)
    slots.acquire(b"a", "A", 0.0)
    slots.acquire(b"b", "A", 0.0)
    slots.set_limit(1)
    assert slots.full
    assert len(slots) == 2  # held slots stay until given back
    slots.set_limit(None)
    assert not slots.full
    slots.set_limit(0)
    assert slots.full


def test_split_limit_never_adds_up_to_more_than_the_limit():
    assert split_limit(None, 0.5) is None
    assert split_limit(20, 1.0) == 20
    assert split_limit(20, 0.5) == 10
    assert split_limit(20, 0.0) == 0
    assert split_limit(20, 2 / 3 * 1.5) == 20  # rounding
    for instances in range(1, 9):
        for partitions in (instances, 12, 32):
            owned = [partitions // instances] * instances
            owned[0] += partitions - sum(owned)
            parts = [split_limit(20, n / partitions) for n in owned]
            assert sum(p or 0 for p in parts) <= 20
            assert sum(p or 0 for p in parts) >= 20 - instances


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, True, "1"])
def test_bad_leases_are_refused(bad: object):
    with pytest.raises(ValueError, match="lease"):
        InFlight(lease=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_limits_are_refused(bad: object):
    with pytest.raises(ValueError, match="limit"):
        InFlight(limit=bad)  # type: ignore[arg-type]


def test_slots_are_counted_for_the_group_they_were_taken_in():
    slots = InFlight(lease=10)
    assert slots.acquire(b"r1", "A", 0.0, "g")
    assert slots.acquire(b"r2", "B", 0.0, "g")
    assert slots.acquire(b"r3", "A", 0.0)  # no group
    assert not slots.acquire(b"r1", "A", 1.0, "h")  # taken again: tenant and group kept
    assert slots.by_group() == {"g": 2}
    held = slots.give_back(b"r2")
    assert held is not None
    assert (held.tenant, held.group) == ("B", "g")
    assert slots.give_back(b"r2") is None
    assert [(s.tenant, s.group) for s in slots.expire_slots(10.0)] == [("A", None)]
    assert slots.of_group("g") == 1
    assert [(s.tenant, s.group) for s in slots.expire_slots(11.0)] == [("A", "g")]
    assert slots.by_group() == {}
    assert slots.expired == 2
