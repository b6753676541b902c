"""The share tree (``fairstream.analysis.tree``): entitlements at each level, by weight among
the entries of a class waiting for a share."""

from __future__ import annotations

import pytest

from fairstream.analysis.tree import Entitled, Entry, entitle, share_tree, waiting_records, waits


def test_an_entry_waits_with_more_than_a_second_of_backlog_at_its_rate():
    assert waits(Entry("a", backlog=50))  # just arrived: no rate yet
    assert not waits(Entry("a", backlog=1))  # a record in hand
    assert not waits(Entry("a", backlog=20, rate=30.0))  # drains within the second
    assert waits(Entry("a", backlog=40, rate=30.0))
    assert not waits(Entry("a", backlog=500, paused=True))


def test_one_level_by_weight_per_class():
    entries = [
        Entry("bulk", weight=2, backlog=900, rate=20.0),
        Entry("noisy", backlog=800, rate=10.0),
        Entry("quiet", backlog=1, rate=2.0),
        Entry("batch", priority=1, backlog=300),
    ]
    bulk, noisy, quiet, batch = entitle(entries)
    assert bulk.entitlement == pytest.approx(2 / 3)
    assert bulk.backlogged_share == pytest.approx(2 / 3)
    assert noisy.entitlement == pytest.approx(1 / 3)
    assert quiet == Entitled()
    assert batch.entitlement == 1.0
    assert batch.backlogged_share is None  # its class received nothing


def test_ten_users_split_their_groups_half_and_the_solo_group_gets_the_other():
    """Group A: ten backlogged users; group B: one. Equal weights: A and B are entitled to
    half each, and each of A's users to a tenth of A's half (a twentieth overall)."""
    a = [Entry(f"A/u{i}", backlog=100, rate=2.0) for i in range(10)]
    b = [Entry("B/solo", backlog=1000, rate=20.0)]
    groups = [Entry("A", backlog=1000, rate=20.0), Entry("B", backlog=1000, rate=20.0)]
    nodes, ungrouped = share_tree(groups, {"A": a, "B": b}, [], total=40.0)
    assert ungrouped == {}
    node_a, node_b = nodes
    assert (node_a.share, node_a.entitled.entitlement) == (0.5, 0.5)
    assert node_b.entitled.backlogged_share == 0.5
    assert len(node_a.members) == 10
    for m in node_a.members:
        assert m.share == pytest.approx(0.1)
        assert m.within.entitlement == pytest.approx(0.1)
        assert m.overall.entitlement == pytest.approx(0.05)
        assert m.overall.backlogged_share == pytest.approx(0.05)
    [solo] = node_b.members
    assert (solo.share, solo.within.entitlement, solo.overall.entitlement) == (1.0, 1.0, 0.5)


def test_groups_and_ungrouped_tenants_share_the_outer_level_by_weight():
    """Weights 3:1 between gold and an ungrouped tenant; 2:1 between gold's two members. A
    group and a tenant may share a name: they are different entries."""
    gold = [Entry("g1", weight=2, backlog=500, rate=20.0), Entry("g2", backlog=500, rate=10.0)]
    nodes, ungrouped = share_tree(
        [Entry("gold", weight=3, backlog=1000, rate=30.0)],
        {"gold": gold},
        [Entry("gold", backlog=400, rate=10.0), Entry("idle")],
        total=40.0,
    )
    [node] = nodes
    assert node.entitled.entitlement == pytest.approx(0.75)
    assert node.share == pytest.approx(0.75)
    assert [m.within.entitlement for m in node.members] == pytest.approx([2 / 3, 1 / 3])
    assert [m.overall.entitlement for m in node.members] == pytest.approx([0.5, 0.25])
    assert ungrouped["gold"].entitlement == pytest.approx(0.25)
    assert ungrouped["idle"] == Entitled()


def test_a_paused_group_is_owed_nothing_and_its_members_nothing_overall():
    members = [Entry("p/a", backlog=100), Entry("p/b", backlog=100)]
    nodes, ungrouped = share_tree(
        [Entry("p", paused=True, backlog=200)], {"p": members}, [Entry("t", backlog=50)], 10.0
    )
    [node] = nodes
    assert node.entitled == Entitled()
    assert node.share == 0.0
    # Within the group each would be owed half: the group as a whole is owed nothing.
    assert [m.within.entitlement for m in node.members] == [0.5, 0.5]
    assert [m.overall.entitlement for m in node.members] == [None, None]
    assert [m.share for m in node.members] == [None, None]  # the group sent nothing
    assert ungrouped["t"].entitlement == 1.0


def test_a_rows_waiting_records_count_what_waits_in_the_ingest_log():
    # A tenant far behind: nothing in memory between two reads of the log, 4,000 in it.
    assert waiting_records({"backlog": 0, "in_log": 4000}) == 4000
    assert waiting_records({"backlog": 120, "in_log": 30}) == 150
    # A scheduler from before in_log was counted: the memory backlog alone.
    assert waiting_records({"backlog": 7}) == 7
    assert waiting_records({}) == 0
