"""The emission rule under a concurrency limit set at run time (``set_max_concurrency``,
the limit found from feedback, ``fairstream.core.credit``): its split between instances,
its removal, and no burst of missed schedule when the slots free up; on a ManualClock."""

from __future__ import annotations

import pytest

from fairstream.core import FairScheduler, ManualClock, Pick
from fairstream.core.emission import EmissionRule, Wait

Item = tuple[str, int | None]


def make(**kwargs: object) -> tuple[EmissionRule[Item], FairScheduler[Item], ManualClock]:
    clock = ManualClock()
    core: FairScheduler[Item] = FairScheduler(clock)
    rule: EmissionRule[Item] = EmissionRule(core, clock, **kwargs)  # type: ignore[arg-type]
    for i in range(100):
        core.push("A", (f"A{i}", None))
    return rule, core, clock


def release(rule: EmissionRule[Item]) -> Pick[Item] | Wait:
    step = rule.next()
    if isinstance(step, Pick):
        rule.started(step.tenant, step.item[0].encode())
    else:
        assert isinstance(step, Wait), step
    return step


def test_a_limit_set_at_run_time_bounds_releases_and_can_be_lifted():
    rule, _, _ = make()
    assert not rule.tracking
    assert rule.direct()
    rule.set_max_concurrency(2)
    assert rule.tracking
    assert not rule.direct()
    assert isinstance(release(rule), Pick)
    assert isinstance(release(rule), Pick)
    assert isinstance(release(rule), Wait)  # both slots held
    assert rule.settled([b"A0"]) == 1
    assert isinstance(release(rule), Pick)
    rule.set_max_concurrency(None)  # feedback stopped: unlimited again
    assert not rule.tracking
    assert rule.inflight.limit is None
    assert isinstance(rule.next(), Pick)


def test_a_found_limit_leaves_every_instance_with_a_share_a_slot():
    rule, _, _ = make()
    rule.set_concurrency_share(1 / 3)
    rule.set_max_concurrency(2)  # floor(2/3) would be 0: nothing could measure the limit
    assert rule.inflight.limit == 1
    rule.set_max_concurrency(30)
    assert rule.inflight.limit == 10
    rule.set_concurrency_share(0.0)  # owns no partition: nothing to release
    assert rule.inflight.limit == 0
    rule.set_concurrency_share(0.5)
    assert rule.inflight.limit == 15


def test_a_fixed_limit_is_still_rounded_down():
    rule, _, _ = make(max_concurrency=2)
    rule.set_concurrency_share(1 / 3)
    assert rule.inflight.limit == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_a_limit_must_be_a_positive_integer_or_none(bad):
    rule, _, _ = make()
    with pytest.raises(ValueError, match="limit must be an integer >= 1 or None"):
        rule.set_max_concurrency(bad)


def test_the_schedule_missed_while_the_slots_were_held_is_not_owed():
    # --rate 100 with one slot: the worker holds it a second. When it is given back, one
    # record goes, and the next waits for its token: not the half second of schedule
    # (50 records) the pacer may otherwise catch up after a late call.
    rule, _, clock = make(rate=100.0, burst=1.0)
    rule.set_max_concurrency(1)
    assert isinstance(release(rule), Pick)
    for _ in range(10):
        clock.advance(0.1)
        assert isinstance(release(rule), Wait)
    rule.settled([b"A0"])
    assert isinstance(release(rule), Pick)
    rule.settled([b"A1"])
    step = release(rule)
    assert isinstance(step, Wait)
    assert step.seconds == pytest.approx(0.01)
