"""FairScheduler against a model of per-tenant FIFO queues, under every kind of operation.

Random mixes of push, pick, remove_tenant, policy changes (weight, class, cap,
pause) and clock steps. Whatever the order of decisions, each tenant's items must leave in
FIFO order, exactly once, and nothing may be left behind once everything is drained.
"""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from fairstream.core import FairScheduler, ManualClock, TenantPolicy

TENANTS = ("a", "b", "c", "d")

policies = st.builds(
    TenantPolicy,
    weight=st.sampled_from([1, 2, 0.5, 3]),
    priority=st.integers(0, 2),
    rate_cap=st.sampled_from([None, None, 1.0, 5.0]),
    cap_burst=st.sampled_from([1, 2]),
    paused=st.booleans(),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from(TENANTS), st.integers(1, 6)),
        st.tuples(st.just("push"), st.sampled_from(TENANTS), st.integers(1, 6)),
        st.tuples(st.just("pick"), st.none(), st.none()),
        st.tuples(st.just("pick"), st.none(), st.none()),
        st.tuples(st.just("remove"), st.sampled_from(TENANTS), st.none()),
        st.tuples(st.just("policy"), st.sampled_from(TENANTS), st.one_of(st.none(), policies)),
        st.tuples(st.just("default"), st.none(), policies),
        st.tuples(st.just("tick"), st.none(), st.sampled_from([0.1, 0.5, 2.0])),
    ),
    max_size=150,
)


@settings(max_examples=200, deadline=None)
@given(operations, st.sampled_from([1, 2.5]))
def test_fifo_and_conservation_under_any_operations(ops, quantum):
    clock = ManualClock()
    scheduler: FairScheduler[int] = FairScheduler(clock, quantum=quantum)
    model: dict[str, deque[tuple[int, int]]] = {t: deque() for t in TENANTS}
    next_item = 0
    for op, tenant, arg in ops:
        if op == "push":
            scheduler.push(tenant, next_item, arg)
            model[tenant].append((next_item, arg))
            next_item += 1
        elif op == "pick":
            picked = scheduler.pick()
            if picked is not None:
                assert (picked.item, picked.cost) == model[picked.tenant].popleft()
                assert not scheduler.policy(picked.tenant).paused
        elif op == "remove":
            assert scheduler.remove_tenant(tenant) == [item for item, _ in model[tenant]]
            model[tenant].clear()
        elif op == "policy":
            scheduler.set_policy(tenant, arg)
        elif op == "default":
            scheduler.set_default_policy(arg)
        elif op == "tick":
            clock.advance(arg)
        assert len(scheduler) == sum(len(q) for q in model.values())
        for t in TENANTS:
            assert scheduler.backlog(t) == (len(model[t]), sum(c for _, c in model[t]))
        live = sum(cls.size for cls in scheduler._order)
        assert live == sum(1 for t in scheduler._tenants.values() if t.state == 0)
        assert all(cls.size > 0 for cls in scheduler._order)

    # Lift every pause and cap: everything must come out, in FIFO order, and leave no state.
    scheduler.set_default_policy(TenantPolicy())
    for tenant in TENANTS:
        scheduler.set_policy(tenant, None)
    while (picked := scheduler.pick()) is not None:
        assert (picked.item, picked.cost) == model[picked.tenant].popleft()
    assert all(not q for q in model.values())
    assert scheduler.next_eligible_in() is None
    assert scheduler._tenants == {}
    assert scheduler._policies == {}
    assert scheduler._buckets == {}
    assert scheduler._classes == {}


@settings(max_examples=100, deadline=None)
@given(
    cap=st.sampled_from([0.5, 1.0, 3.0]),
    burst=st.sampled_from([1, 2, 4]),
    ticks=st.lists(st.floats(0, 1.5), min_size=1, max_size=80),
)
def test_capped_tenant_never_exceeds_its_cap(cap, burst, ticks):
    clock = ManualClock()
    scheduler: FairScheduler[int] = FairScheduler(clock)
    scheduler.set_policy("capped", TenantPolicy(rate_cap=cap, cap_burst=burst))
    for i in range(200):
        scheduler.push("capped", i)
        scheduler.push("free", i)
    sent = []
    for tick in ticks:
        clock.advance(tick)
        for _ in range(3):
            picked = scheduler.pick()
            if picked is not None and picked.tenant == "capped":
                sent.append(clock.now())
        wait = scheduler.next_eligible_in()
        assert wait is not None
        assert wait >= 0
    for i, start in enumerate(sent):
        for j in range(i, len(sent)):
            assert j - i + 1 <= cap * (sent[j] - start) + burst + 1e-6
