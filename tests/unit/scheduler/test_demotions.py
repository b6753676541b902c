"""Automatic demotion in the emitter (``scheduler/demotions.py``, ``--demote-*``): the
settings, a noisy tenant one class down and back, policies arriving while it is demoted, a
rewind, the metrics and ``/tenants``. A ManualClock and a producer that sends nowhere
(``test_emit_rule``): the emitter's own steps (emit, commit, review) driven one by one."""

from __future__ import annotations

from typing import Any

import pytest

from fairstream.config import Settings, SettingsError
from fairstream.core import TenantPolicy
from fairstream.core.demotion import Change
from fairstream.scheduler.emitter.demotions import REVIEW_EVERY, demotion_policy
from fairstream.scheduler.emitter.egress import footprint
from fairstream.scheduler.emitter.loop import Emitter
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.policies.reader import DefaultPolicy, Policies, SetPolicy
from fairstream.scheduler.records import Parsed
from fairstream.wire.policy import DEFAULT_POLICY_KEY
from tests.unit.scheduler.test_emit_rule import make, message
from tests.unit.scheduler.test_tenant_groups import emitted, policy, tombstone
from tests.unit.test_config import invoke, settings_of

__all__ = ["make"]  # the fixture

# A window of 1 s and a quiet period of 2 s, so that the tests move the clock a little.
DEMOTE = {"demote_share": 0.5, "demote_window": 1.0, "demote_quiet": 2.0}


def push(emitter: Emitter, tenant: str, offsets: range, *, age: float = 0.0) -> None:
    """Records of ``tenant`` handed over, enqueued ``age`` seconds ago."""
    enqueued = emitter.clock.epoch_ms() - round(age * 1000)
    for offset in offsets:
        msg = message(offset, tenant)
        emitter.backlog.cached += footprint(msg)
        entry = Parsed(0, offset, tenant, 1, None, enqueued, msg, None)
        emitter.core.push(tenant, entry, 1)


def review(emitter: Emitter) -> None:
    """What the emitter's loop does when a review is due."""
    demotions = emitter.demotions
    assert demotions is not None
    now = emitter.clock.now()
    assert now >= demotions.next_review
    emitter._review(demotions, now)
    assert demotions.next_review == now + REVIEW_EVERY


def sample(emitter: Emitter, name: str) -> float | None:
    return emitter.metrics.registry.get_sample_value(name)


# -- settings --------------------------------------------------------------------------------


def test_demotion_is_off_unless_a_share_or_a_backlog_is_given(make):
    assert not Settings().demotes
    assert demotion_policy(Settings()) is None
    emitter = make()
    assert emitter.demotions is None
    push(emitter, "A", range(3))
    assert emitter.scrape().noisy_tenants == 0
    assert [row["demoted"] for row in emitter.tenant_stats(10)["tenants"]] == [False]


def test_the_options_and_their_variables_make_the_cores_policy():
    settings = settings_of(
        ["--demote-share", "0.3", "--demote-window", "5", "--demote-min-egress", "50"],
        {"FAIRSTREAM_DEMOTE_BACKLOG": "1000", "FAIRSTREAM_DEMOTE_QUIET": "12"},
    )
    found = demotion_policy(settings)
    assert found is not None
    assert (found.share, found.backlog, found.window, found.quiet, found.min_egress) == (
        0.3,
        1000,
        5.0,
        12.0,
        50.0,
    )
    assert found.quiet_share_in_force == 0.15
    assert found.quiet_backlog_in_force == 500


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--demote-share", "0"], "--demote-share"),
        (["--demote-share", "1.5"], "--demote-share"),
        (["--demote-backlog", "0"], "--demote-backlog"),
        (["--demote-share", "0.5", "--demote-window", "0"], "--demote-window"),
        (["--demote-share", "0.5", "--demote-quiet", "-1"], "--demote-quiet"),
    ],
)
def test_values_outside_their_limits_are_usage_errors(args: list[str], says: str):
    result, _ = invoke(args)
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_settings_that_contradict_each_other_are_refused_with_the_reason():
    with pytest.raises(SettingsError, match="at least twice --commit-interval"):
        Settings(demote_backlog=10, demote_window=1.0, commit_interval=0.6)
    with pytest.raises(SettingsError, match="--demote-min-egress needs --demote-share"):
        Settings(demote_backlog=10, demote_min_egress=100)
    # Without demotion its other options are not looked at.
    assert not Settings(demote_window=0.1, commit_interval=0.6).demotes


# -- the emitter ---------------------------------------------------------------------------


def test_a_flooding_tenant_is_demoted_and_a_quiet_one_goes_ahead_of_its_backlog(make):
    emitter = make(**DEMOTE)
    push(emitter, "A", range(300))
    assert emitter._emit_some() == 256  # one batch, all A's
    emitter._commit()  # the window counts committed egress: 256 of A's
    review(emitter)
    assert "A" in emitter.demotions  # type: ignore[operator]
    assert emitter.core.policy("A").priority == 1  # one class down
    assert sample(emitter, "fairstream_demotions_total") == 1
    # B arrives while A's 44 records wait: all of B's go first.
    push(emitter, "B", range(300, 305))
    emitter._emit_some()
    assert emitted(emitter)[256:] == ["B"] * 5 + ["A"] * 44
    scrape = emitter.scrape()
    assert scrape.noisy_tenants == 1
    emitter._commit()
    rows = {row["tenant"]: row for row in emitter.tenant_stats(10)["tenants"]}
    assert (rows["A"]["demoted"], rows["B"]["demoted"]) == (True, False)
    assert rows["A"]["priority"] == 1


def test_without_demotion_the_same_flood_shares_round_by_round(make):
    emitter = make()  # the control: B interleaves with A's backlog, it does not go first
    push(emitter, "A", range(300))
    emitter._emit_some()
    push(emitter, "B", range(300, 305))
    emitter._emit_some()
    assert emitted(emitter)[256:266].count("A") >= 4


def test_once_quiet_for_the_quiet_period_it_is_promoted_back(make):
    emitter = make(**DEMOTE)
    clock = emitter.clock
    push(emitter, "A", range(100))
    emitter._emit_some()
    emitter._commit()
    review(emitter)
    assert emitter.core.policy("A").priority == 1
    clock.advance(0.5)
    review(emitter)  # still the whole window: noisy
    clock.advance(1.0)  # the window (1 s) is past: quiet from now
    review(emitter)
    assert emitter.demotions.demotion.quiet_since("A") == clock.now()  # type: ignore[union-attr]
    clock.advance(1.75)
    review(emitter)
    assert emitter.core.policy("A").priority == 1  # not quiet long enough yet
    clock.advance(0.25)
    review(emitter)
    assert emitter.core.own_policy("A") is None  # its own again: the default's
    assert emitter.demotions.noisy_count == 0  # type: ignore[union-attr]
    assert emitter.scrape().noisy_tenants == 0
    assert sample(emitter, "fairstream_promotions_total") == 1


def test_a_tenant_over_the_backlog_threshold_is_demoted_and_promoted_once_drained(make):
    emitter = make(demote_backlog=10, demote_quiet=1.0, demote_window=1.0)
    clock = emitter.clock
    push(emitter, "A", range(11))
    review(emitter)
    assert emitter.core.policy("A").priority == 1  # 11 waiting, above 10: nothing sent yet
    push(emitter, "B", range(11, 16))
    emitter._emit_some()
    assert emitted(emitter) == ["B"] * 5 + ["A"] * 11
    emitter._commit()
    clock.advance(REVIEW_EVERY)
    review(emitter)  # drained: quiet from now (the share is not looked at)
    assert emitter.core.policy("A").priority == 1
    clock.advance(1.0)
    review(emitter)
    assert emitter.core.policy("A").priority == 0


def test_a_policy_arriving_while_demoted_applies_one_class_down_until_promoted(make):
    emitter = make(**DEMOTE)
    clock = emitter.clock
    push(emitter, "A", range(50))
    push(emitter, "B", range(50, 52))
    emitter._emit_some()
    emitter._commit()
    review(emitter)  # A: 50 of 52 records
    core = emitter.core
    assert core.policy("A").priority == 1
    policy(emitter, b"A", weight=3, priority=2)
    assert core.policy("A") == TenantPolicy(weight=3, priority=3)
    tombstone(emitter, b"A")  # the defaults, one class down
    assert core.policy("A") == TenantPolicy(priority=1, max_backlog=100_000)
    policy(emitter, DEFAULT_POLICY_KEY, priority=1, weight=2)
    assert core.policy("A") == TenantPolicy(priority=2, weight=2)
    assert core.policy("B") == TenantPolicy(priority=1, weight=2)
    clock.advance(1.5)  # past the window: quiet from now
    review(emitter)
    clock.advance(2.0)
    review(emitter)
    assert core.own_policy("A") is None
    assert core.policy("A") == TenantPolicy(priority=1, weight=2)  # the default again


def test_a_rewind_keeps_a_demoted_tenant_one_class_down(make):
    emitter = make(**DEMOTE)
    policy(emitter, b"A", weight=2)
    push(emitter, "A", range(20))
    emitter._emit_some()
    emitter._commit()
    review(emitter)
    emitter._rewind()
    assert emitter.core.policy("A") == TenantPolicy(weight=2, priority=1)


def test_an_aborted_transaction_counts_for_nothing(make):
    emitter = make(**DEMOTE)
    push(emitter, "A", range(20))
    emitter._emit_some()
    emitter.checkpoint.discard()  # what an abort does to the open transaction's tallies
    emitter._commit()
    review(emitter)
    assert emitter.demotions.noisy_count == 0  # type: ignore[union-attr]


def test_the_oldest_quiet_record_leaves_noisy_and_paused_tenants_out(make):
    emitter = make(**DEMOTE)
    push(emitter, "A", range(300), age=60.0)
    emitter._emit_some()
    emitter._commit()
    review(emitter)  # A is noisy, its head 60 s old
    push(emitter, "B", range(300, 302), age=2.5)
    push(emitter, "C", range(302, 303), age=9.0)
    emitter.rule.pause("C", 30.0)
    assert emitter.scrape().oldest_quiet_age == pytest.approx(2.5)
    # Without demotion every tenant is quiet: the oldest unpaused one's.
    plain = make()
    push(plain, "A", range(3), age=60.0)
    push(plain, "B", range(3, 4), age=2.5)
    assert plain.scrape().oldest_quiet_age == pytest.approx(60.0)
    assert make().scrape().oldest_quiet_age is None  # nothing waits


# -- the policies' part ----------------------------------------------------------------------


def test_policies_say_what_a_demotion_and_a_new_default_do():
    policies = Policies(Settings(max_backlog=100), Metrics())
    base = TenantPolicy(max_backlog=100)
    assert policies.demotion(Change("A", True)) == [SetPolicy("A", base.replace(priority=1))]
    assert policies.demotion(Change("B", True)) == [SetPolicy("B", base.replace(priority=1))]
    policies.by_tenant["B"] = TenantPolicy(weight=5)  # B has its own: a new default is not B's
    new_default = TenantPolicy(weight=2)
    actions: list[Any] = policies.apply(DEFAULT_POLICY_KEY, _encoded(new_default))
    assert actions == [DefaultPolicy(new_default), SetPolicy("A", new_default.replace(priority=1))]
    assert policies.demotion(Change("A", False)) == [SetPolicy("A", None)]
    assert policies.demotion(Change("B", False)) == [SetPolicy("B", TenantPolicy(weight=5))]
    assert policies.demoted == set()


def _encoded(policy: TenantPolicy) -> bytes:
    from fairstream.wire.policy import PolicyRecord, encode_policy

    return encode_policy(PolicyRecord(policy, 1))
