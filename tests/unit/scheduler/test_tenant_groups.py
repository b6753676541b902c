"""Tenant groups in the emitter (``scheduler/tenant_groups.py``): where a tenant's group comes
from, group policies on the policy topic, and the core turning from flat to grouped, live
and on a rewind. A ManualClock and a producer that sends nowhere (``test_emit_rule``)."""

from __future__ import annotations

from collections import Counter

from fairstream import wire
from fairstream.core import FairScheduler, GroupScheduler, TenantPolicy
from fairstream.scheduler.emitter.loop import Emitter
from fairstream.scheduler.messages import PolicyChange
from fairstream.scheduler.policies.tenant_groups import (
    SetGroup,
    SetGroupPolicy,
    TenantGroups,
    UseGroups,
    by_separator,
)
from fairstream.scheduler.records import Parsed
from fairstream.wire.policy import PolicyRecord, encode_policy, group_policy_key
from tests.unit.scheduler.parts import Parts, build, record
from tests.unit.scheduler.test_emit_rule import make, push, sent

__all__ = ["make"]  # the fixture


def policy(emitter: Emitter, key: bytes, group: str | None = None, **fields: object) -> None:
    """A policy record read off the topic, as the reader hands it over (None: a tombstone)."""
    value = encode_policy(PolicyRecord(TenantPolicy(**fields), 1, group=group))  # type: ignore[arg-type]
    emitter._control(PolicyChange(key, value))


def tombstone(emitter: Emitter, key: bytes) -> None:
    emitter._control(PolicyChange(key, None))


def emitted(emitter: Emitter) -> list[str]:
    return [key.decode() for key, _ in sent(emitter) if key is not None]


def test_the_key_convention_is_what_comes_before_the_first_separator() -> None:
    group_of = by_separator("/")
    assert group_of is not None
    assert group_of("acme/alice") == "acme"
    assert group_of("acme/eu/alice") == "acme"
    assert group_of("alice") is None
    assert group_of("/alice") is None  # nothing before it: no group
    assert group_of("acme/") == "acme"
    assert by_separator(None) is None
    assert by_separator("") is None
    two = by_separator("::")
    assert two is not None
    assert two("a::b") == "a"


def test_without_groups_the_core_is_flat(make):
    emitter = make()
    assert type(emitter.core) is FairScheduler
    policy(emitter, b"A", weight=2)
    assert type(emitter.core) is FairScheduler
    # A group's tombstone with nothing grouped changes nothing.
    tombstone(emitter, group_policy_key("acme"))
    assert type(emitter.core) is FairScheduler


def test_with_a_separator_the_core_is_grouped_from_the_start(make):
    emitter = make(tenant_group_separator="/")
    core = emitter.core
    assert isinstance(core, GroupScheduler)
    assert core.group_of("acme/alice") == "acme"
    assert core.group_of("solo") is None


def test_the_first_group_turns_the_core_grouped_live_with_its_backlog_in_order(make):
    emitter = make(cost_rate=10)  # half: 5/s, a burst of 5
    for offset in range(3):
        push(emitter, "A", offset, cost=2)
    push(emitter, "B", 3)
    push(emitter, "B", 4)
    emitter.rule.pause("B", 60.0)
    assert emitter._emit_some() == 2  # A's 0 and 1 go; A's 2 waits for its cost tokens
    held = emitter.rule.pending
    assert held is not None
    assert held.item.offset == 2
    policy(emitter, b"A", group="acme", weight=3)
    core = emitter.core
    assert isinstance(core, GroupScheduler)
    assert core.group_of("A") == "acme"
    assert core.policy("A").weight == 3
    assert core.policy("B").paused  # the rule's pause holds in the new core
    assert emitter.rule.pending is None
    # The held pick went back at the head of A's records, in order.
    assert [entry.offset for entry in core.remove_tenant("A")] == [2]
    assert [entry.offset for entry in core.remove_tenant("B")] == [3, 4]


def test_a_group_policy_turns_the_core_grouped_too(make):
    emitter = make()
    policy(emitter, group_policy_key("acme"), weight=4)
    core = emitter.core
    assert isinstance(core, GroupScheduler)
    assert core.group_policy("acme").weight == 4
    policy(emitter, group_policy_key(None), weight=2)  # the groups' default
    assert core.group_policy("other").weight == 2
    assert core.group_policy("acme").weight == 4
    tombstone(emitter, group_policy_key("acme"))
    assert core.group_policy("acme").weight == 2
    tombstone(emitter, group_policy_key(None))
    assert core.group_policy("acme") == TenantPolicy()  # the built-in default: no caps


def test_groups_share_the_egress_by_weight_then_their_members(make):
    emitter = make(tenant_group_separator="/")
    policy(emitter, group_policy_key("big"), weight=3)
    policy(emitter, b"big/a", weight=2)
    offset = 0
    for _ in range(120):
        for tenant in ("big/a", "big/b", "small/x", "small/y", "small/z"):
            push(emitter, tenant, offset)
            offset += 1
    while len(emitted(emitter)) < 240:
        emitter._emit_some()
    counts = Counter(emitted(emitter)[:240])
    # Groups 3:1, then big's members 2:1 and small's 1:1:1: exact over whole rounds.
    assert counts["big/a"] + counts["big/b"] == 180
    assert (counts["big/a"], counts["big/b"]) == (120, 60)
    assert counts["small/x"] == counts["small/y"] == counts["small/z"] == 20


def test_a_policys_group_wins_over_the_key_convention_and_its_tombstone_gives_it_back(make):
    emitter = make(tenant_group_separator="/")
    core = emitter.core
    assert isinstance(core, GroupScheduler)
    push(emitter, "acme/alice", 0)
    policy(emitter, b"acme/alice", group="globex")
    assert core.group_of("acme/alice") == "globex"
    assert core.members("globex") == ["acme/alice"]
    policy(emitter, b"acme/alice", weight=2)  # its record names no group now
    assert core.group_of("acme/alice") == "acme"
    policy(emitter, b"solo", group="globex")
    assert core.group_of("solo") == "globex"
    tombstone(emitter, b"solo")
    assert core.group_of("solo") is None


def test_a_rewind_rebuilds_the_grouped_core_with_every_group_and_group_policy(make):
    emitter = make()
    policy(emitter, b"alice", group="acme", weight=2)
    policy(emitter, group_policy_key("acme"), weight=5)
    emitter._rewind()
    core = emitter.core
    assert isinstance(core, GroupScheduler)
    assert core.group_of("alice") == "acme"
    assert core.group_policy("acme").weight == 5
    assert core.policy("alice").weight == 2


def test_actions_say_what_changed_and_turning_groups_on_is_one_rebuild() -> None:
    groups = TenantGroups(None)
    record = PolicyRecord(TenantPolicy(), 1, group="acme")
    assert groups.tenant_record("alice", record) == [UseGroups()]
    assert groups.tenant_record("alice", record) == []  # the same group: nothing to do
    assert groups.tenant_record("bob", record) == [SetGroup("bob", "acme")]
    assert groups.tenant_record("bob", None) == [SetGroup("bob", None)]
    assert groups.group_record("acme", PolicyRecord(TenantPolicy(weight=2), 1)) == [
        SetGroupPolicy("acme", TenantPolicy(weight=2))
    ]


def grouped_parts(**group_policy: object) -> Parts:
    """The emitter's parts over a core of tenant groups by key (``/``), group ``acme`` under
    ``group_policy``."""
    parts = build()
    core: GroupScheduler[Parsed] = GroupScheduler(parts.clock, group_of=by_separator("/"))
    core.set_group_policy("acme", TenantPolicy(**group_policy))  # type: ignore[arg-type]
    parts.rule.replace_core(core)
    return parts


def test_a_groups_max_backlog_is_shared_by_its_members_within_a_batch() -> None:
    parts = grouped_parts(max_backlog=3)
    tenants = ["acme/a", "acme/b", "solo", "acme/c", "acme/a", "acme/b"]
    parts.backlog.index([record(parts, i, t) for i, t in enumerate(tenants)], parts.txn)
    core = parts.core
    assert isinstance(core, GroupScheduler)
    assert core.group_backlog("acme") == (3, 3)
    assert core.backlog("solo") == (1, 1)  # no group: no group cap
    refused = parts.backlog.overflow.letters
    assert [(x.tenant, x.entry.offset, x.reason) for x in refused] == [
        ("acme/a", 4, wire.BACKLOG_FULL),
        ("acme/b", 5, wire.BACKLOG_FULL),
    ]
    assert "group 'acme' of tenant 'acme/a' already has 3 records waiting" in refused[0].detail
    # The next batch starts from the core's backlog: still full.
    parts.backlog.index([record(parts, 6, "acme/d")], parts.txn)
    assert core.group_backlog("acme") == (3, 3)
    assert len(refused) == 3


def test_a_groups_max_backlog_cost_counts_its_members_costs() -> None:
    parts = grouped_parts(max_backlog_cost=10)
    records = [record(parts, 0, "acme/a", cost=6), record(parts, 1, "acme/b", cost=5)]
    records.append(record(parts, 2, "acme/b", cost=4))
    parts.backlog.index(records, parts.txn)
    core = parts.core
    assert isinstance(core, GroupScheduler)
    assert core.group_backlog("acme") == (2, 10)
    [letter] = parts.backlog.overflow.letters
    assert (letter.entry.offset, letter.reason) == (1, wire.BACKLOG_FULL)
    assert "max_backlog_cost=10" in letter.detail
