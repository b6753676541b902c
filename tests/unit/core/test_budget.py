"""Budgets over time (``fairstream.core.budget``): windows in time zones, rolling windows,
reservations, measured-cost settlement, carried overruns, rewinds; pure, times in epoch ms."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairstream.core.budget import (
    Budget,
    BudgetLedger,
    ClaimBook,
    ClaimKey,
    format_budget,
    group_scope,
    parse_budget,
    plan_claim,
    window_bounds,
)

DAY_MS = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def ms(text: str, zone: str = "UTC") -> int:
    """An ISO local time in ``zone`` as epoch ms."""
    local = dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))
    return round(local.timestamp() * 1000)


def test_a_day_budget_lets_exactly_its_limit_through_then_resets_at_midnight() -> None:
    budget = Budget(1000, "day")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    sent = 0
    now = T0 + 3_600_000
    while ledger.reserve(charges, 1, now) is None:
        sent += 1
        now += 10
    assert sent == 1000
    refusal = ledger.reserve(charges, 1, now)
    assert refusal is not None
    assert refusal.remaining == 0
    assert refusal.fits_at_ms == T0 + DAY_MS  # the next UTC midnight
    assert ledger.reserve(charges, 1, T0 + DAY_MS - 1) is not None
    assert ledger.reserve(charges, 1, T0 + DAY_MS) is None
    [state] = ledger.state("acme", (budget,), T0 + DAY_MS)
    assert (state.spent, state.remaining, state.resets) == (1, 999, 1)


def test_a_record_that_does_not_fit_is_refused_whole_and_charges_nothing() -> None:
    budget = Budget(10, "hour")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    assert ledger.reserve(charges, 7, T0) is None
    refusal = ledger.reserve(charges, 4, T0)
    assert refusal is not None
    assert refusal.remaining == 3
    assert ledger.spent("acme", budget, T0) == 7
    assert ledger.reserve(charges, 3, T0) is None  # a smaller one still fits


def test_several_budgets_all_must_have_room_and_none_is_charged_on_a_refusal() -> None:
    minute, day = Budget(5, "minute", unit="records"), Budget(100, "day")
    ledger, charges = BudgetLedger(), (("acme", (minute, day)),)
    for _ in range(5):
        assert ledger.reserve(charges, 10, T0) is None
    refusal = ledger.reserve(charges, 10, T0 + 1_000)
    assert refusal is not None
    assert refusal.budget == minute
    assert ledger.spent("acme", day, T0) == 50  # the day was not charged for the refusal
    assert ledger.reserve(charges, 10, T0 + 60_000) is None  # next minute
    assert ledger.spent("acme", day, T0 + 60_000) == 60


def test_a_group_budget_and_a_tenant_budget_are_counted_apart() -> None:
    tenant, group = Budget(3, "day", unit="records"), Budget(4, "day", unit="records")
    ledger = BudgetLedger()
    a = (("a", (tenant,)), (group_scope("org"), (group,)))
    b = (("b", (tenant,)), (group_scope("org"), (group,)))
    assert [ledger.reserve(a, 1, T0) for _ in range(3)] == [None, None, None]
    assert ledger.reserve(a, 1, T0) is not None  # the tenant's own budget
    assert ledger.reserve(b, 1, T0) is None
    refusal = ledger.reserve(b, 1, T0)
    assert refusal is not None
    assert refusal.scope == ("group", "org")
    # No tenant id can name the group's counter.
    assert ledger.spent("group:org", group, T0) == 0


@pytest.mark.parametrize(
    ("budget", "at", "start", "end"),
    [
        # Paris: UTC+1 in winter; the day starts at local midnight.
        ("5/day,tz=Europe/Paris", "2026-01-10T15:00", "2026-01-10T00:00", "2026-01-11T00:00"),
        # The spring-forward day has 23 hours, the autumn one 25.
        ("5/day,tz=Europe/Paris", "2026-03-29T12:00", "2026-03-29T00:00", "2026-03-30T00:00"),
        ("5/day,tz=Europe/Paris", "2026-10-25T12:00", "2026-10-25T00:00", "2026-10-26T00:00"),
        ("5/month,tz=Europe/Paris", "2026-12-31T23:30", "2026-12-01T00:00", "2027-01-01T00:00"),
        ("5/month,tz=America/New_York", "2026-02-14T08:00", "2026-02-01T00:00", "2026-03-01T00:00"),
        # India is UTC+5:30: a local hour starts at half past a UTC one.
        ("5/hour,tz=Asia/Kolkata", "2026-05-05T10:59", "2026-05-05T10:00", "2026-05-05T11:00"),
    ],
)
def test_calendar_windows_follow_the_local_clock(
    budget: str, at: str, start: str, end: str
) -> None:
    b = parse_budget(budget)
    zone = b.time_zone
    assert window_bounds(b.key, ms(at, zone)) == (ms(start, zone), ms(end, zone))


def test_daylight_saving_days_are_23_and_25_hours_long() -> None:
    key = parse_budget("1/day,tz=Europe/Paris").key
    spring = window_bounds(key, ms("2026-03-29T12:00", "Europe/Paris"))
    autumn = window_bounds(key, ms("2026-10-25T12:00", "Europe/Paris"))
    assert spring[1] - spring[0] == 23 * 3_600_000
    assert autumn[1] - autumn[0] == 25 * 3_600_000


def test_a_rolling_window_lets_spend_go_a_bucket_at_a_time() -> None:
    budget = Budget(60, "hour", rolling=True)
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    bucket = 60_000  # an hour's sixtieth
    for minute in range(60):
        assert ledger.reserve(charges, 1, T0 + minute * bucket) is None
    refusal = ledger.reserve(charges, 1, T0 + 59 * bucket + 30_000)
    assert refusal is not None
    # The first minute's spend leaves once its bucket's end is an hour old.
    assert refusal.fits_at_ms == T0 + bucket + 3_600_000
    assert ledger.reserve(charges, 1, refusal.fits_at_ms - 1) is not None
    assert ledger.reserve(charges, 1, refusal.fits_at_ms) is None
    assert ledger.spent("acme", budget, refusal.fits_at_ms) == 60


def test_a_measured_overrun_is_carried_into_the_next_window_and_paid_back() -> None:
    budget = Budget(100, "day")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    for _ in range(10):
        assert ledger.reserve(charges, 10, T0) is None
    # Each request declared 10 and cost 13: 30 over the limit once all settle.
    for _ in range(10):
        ledger.settle(charges, 3, T0, T0 + 5_000)
    assert ledger.spent("acme", budget, T0 + 5_000) == 130
    refusal = ledger.reserve(charges, 10, T0 + 5_000)
    assert refusal is not None
    assert refusal.fits_at_ms == T0 + DAY_MS
    # The next day starts 30 in debt: 70 are left.
    assert ledger.spent("acme", budget, T0 + DAY_MS) == 30
    sent = 0
    while ledger.reserve(charges, 10, T0 + DAY_MS) is None:
        sent += 1
    assert sent == 7


def test_an_overrun_past_a_whole_window_waits_the_windows_it_takes() -> None:
    budget = Budget(10, "day")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    assert ledger.reserve(charges, 10, T0) is None
    ledger.settle(charges, 15, T0, T0)  # measured 25: 15 over, more than a day's limit
    refusal = ledger.reserve(charges, 1, T0)
    assert refusal is not None
    assert refusal.fits_at_ms == T0 + 2 * DAY_MS


def test_a_refund_for_a_closed_window_is_not_given_to_the_new_one() -> None:
    budget = Budget(100, "day")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    assert ledger.reserve(charges, 50, T0 + DAY_MS - 10) is None
    assert ledger.reserve(charges, 20, T0 + DAY_MS + 10) is None
    ledger.settle(charges, -40, T0 + DAY_MS - 10, T0 + DAY_MS + 20)  # charged yesterday
    assert ledger.spent("acme", budget, T0 + DAY_MS + 20) == 20
    ledger.settle(charges, -5, T0 + DAY_MS + 10, T0 + DAY_MS + 20)  # charged today
    assert ledger.spent("acme", budget, T0 + DAY_MS + 20) == 15


def test_records_budgets_are_not_corrected_by_measured_costs() -> None:
    budget = Budget(10, "minute", unit="records")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    assert ledger.reserve(charges, 500, T0) is None
    ledger.settle(charges, 900, T0, T0)
    assert ledger.spent("acme", budget, T0) == 1


def test_a_rewind_gives_back_what_the_aborted_transaction_reserved() -> None:
    budget = Budget(10, "day")
    ledger, charges = BudgetLedger(), (("acme", (budget,)),)
    assert ledger.reserve(charges, 4, T0) is None
    ledger.committed()
    assert ledger.reserve(charges, 3, T0) is None
    assert ledger.reserve(charges, 2, T0) is None
    assert ledger.rewound() == 2
    assert ledger.spent("acme", budget, T0) == 4
    assert ledger.rewound() == 0


def test_raising_a_limit_keeps_what_was_spent() -> None:
    ledger = BudgetLedger()
    assert ledger.reserve((("acme", (Budget(5, "day"),)),), 5, T0) is None
    assert ledger.reserve((("acme", (Budget(5, "day"),)),), 1, T0) is not None
    assert ledger.reserve((("acme", (Budget(8, "day"),)),), 3, T0) is None
    assert ledger.reserve((("acme", (Budget(8, "day"),)),), 1, T0) is not None


def test_prune_drops_scopes_with_nothing_spent() -> None:
    ledger = BudgetLedger()
    rolling = Budget(5, "minute", rolling=True)
    assert ledger.reserve((("a", (rolling,)),), 1, T0) is None
    assert ledger.reserve((("b", (Budget(5, "day"),)),), 1, T0) is None
    ledger.unreserve((("b", (Budget(5, "day"),)),), 1, T0)
    assert ledger.prune(T0) == 1  # b spent nothing
    assert ledger.prune(T0 + 2 * 60_000) == 0  # a's spend left its rolling minute


@pytest.mark.parametrize(
    ("text", "budget"),
    [
        ("1000/day", Budget(1000, "day")),
        ("50/minute,records", Budget(50, "minute", unit="records")),
        (
            "1000000/month,tz=Europe/Paris,dead-letter",
            Budget(1_000_000, "month", time_zone="Europe/Paris", on_exhausted="dead-letter"),
        ),
        ("5000/rolling-hour", Budget(5000, "hour", rolling=True)),
        (" 7 / day , cost , wait ", Budget(7, "day")),
    ],
)
def test_the_text_form(text: str, budget: Budget) -> None:
    assert parse_budget(text) == budget
    assert parse_budget(format_budget(budget)) == budget


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1000", "LIMIT/WINDOW"),
        ("0/day", "limit must be an integer >= 1"),
        ("10/week", "LIMIT/WINDOW"),
        ("10/day,tokens", "unknown budget option 'tokens'"),
        ("10/day,tz=Nowhere/Land", "unknown time zone"),
    ],
)
def test_a_bad_text_form_says_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_budget(text)


@given(
    costs=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=200),
    limit=st.integers(min_value=1, max_value=500),
)
def test_reservations_never_take_a_window_past_its_limit(costs: list[int], limit: int) -> None:
    budget = Budget(limit, "day")
    ledger, charges = BudgetLedger(), (("t", (budget,)),)
    now = T0
    for cost in costs:
        ledger.reserve(charges, cost, now)
        assert ledger.spent("t", budget, now) <= limit
        now += 1_000_000  # about 17 minutes: windows roll now and then


def test_a_group_budget_without_an_exchange_is_split_by_partitions_owned() -> None:
    budget = Budget(100, "day")
    scope = group_scope("org")
    a, b = BudgetLedger(), BudgetLedger()
    a.share, b.share = 0.75, 0.25  # three partitions of four, and one
    charges = ((scope, (budget,)),)
    sent = {"a": 0, "b": 0}
    for name, ledger, partition in (("a", a, 0), ("b", b, 3)):
        while ledger.reserve(charges, 1, T0, partition) is None:
            sent[name] += 1
    assert sent == {"a": 75, "b": 25}


def test_a_claim_for_the_current_window_is_what_an_instance_may_spend() -> None:
    budget = Budget(10, "day")
    scope = group_scope("org")
    ledger = BudgetLedger()
    ledger.share = 0.0  # with an exchange: nothing before a claim
    charges = ((scope, (budget,)),)
    assert ledger.reserve(charges, 1, T0, 0) is not None
    ledger.coordinate(scope, budget, T0 - DAY_MS, 10, T0)  # yesterday's: ignored
    assert ledger.reserve(charges, 1, T0, 0) is not None
    ledger.coordinate(scope, budget, T0, 4, T0)
    assert [ledger.reserve(charges, 1, T0, 0) for _ in range(5)].count(None) == 4
    # The next day: the claim was for the day before.
    assert ledger.reserve(charges, 1, T0 + DAY_MS, 0) is not None


KEY = ClaimKey("org", "cost", "day", False, "UTC", T0)


def test_a_raise_is_valid_only_if_the_valid_claims_fit_the_limit_at_its_place() -> None:
    book = ClaimBook()
    book.record("a", [(KEY, 100, 0, 60, 1.0)])
    book.record("b", [(KEY, 100, 0, 60, 1.0)])  # 60 + 60 > 100: b keeps nothing
    assert (book.claim(KEY, "a"), book.claim(KEY, "b")) == (60, 0)
    book.record("b", [(KEY, 100, 0, 40, 1.0)])
    assert book.claim(KEY, "b") == 40
    book.record("a", [(KEY, 100, 50, 50, 1.0)])  # a gives 10 back: always valid
    book.record("b", [(KEY, 100, 10, 50, 1.0)])
    assert (book.claim(KEY, "a"), book.claim(KEY, "b")) == (50, 50)
    assert book.others(KEY, "a") == (50, 10)
    book.record("b", [])  # b no longer lists it: given back
    assert book.claim(KEY, "b") == 0
    book.drop("a")  # a's tombstone
    assert book.claim(KEY, "a") == 0


def test_plan_claim_takes_its_part_of_what_is_left_and_gives_back_what_it_cannot_use() -> None:
    # Alone, with demand: the whole limit.
    assert plan_claim(0, 100, 0, 0, 0, 1.0) == 100
    # Half the group's demand, the other instance holding 30 and having spent 20.
    assert plan_claim(0, 100, 0, 30, 20, 0.5) == 40
    # No members backlogged here: back down to what it spent.
    assert plan_claim(70, 100, 25, 0, 0, 0.0) == 25
    # A raise is cut to what the others leave unclaimed.
    assert plan_claim(10, 100, 10, 80, 0, 1.0) == 20


@given(
    order=st.lists(st.sampled_from("ab"), min_size=1, max_size=60),
    parts=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_claims_read_in_any_interleaving_never_add_up_past_the_limit(
    order: list[str], parts: tuple[float, float]
) -> None:
    # Two instances, each planning from what it has read of one log and spending up to
    # what it has read back valid (and no more than any give-back it published since).
    limit = 100
    log: list[tuple[str, int, int]] = []  # (instance, spent, claim)
    read = {"a": 0, "b": 0}
    books = {"a": ClaimBook(), "b": ClaimBook()}
    spent = {"a": 0, "b": 0}
    published: dict[str, int | None] = {"a": None, "b": None}
    part = {"a": parts[0], "b": parts[1]}

    def in_force(me: str) -> int:
        valid = books[me].claim(KEY, me)
        return valid if published[me] is None else min(valid, published[me] or 0)

    for me in order:
        book = books[me]
        for who, s, c in log[read[me] :]:
            book.record(who, [(KEY, limit, s, c, 1.0)])
        read[me] = len(log)
        spent[me] = max(spent[me], in_force(me))  # spends all it may
        others_claims, others_spent = book.others(KEY, me)
        claim = plan_claim(in_force(me), limit, spent[me], others_claims, others_spent, part[me])
        log.append((me, spent[me], claim))
        published[me] = claim
        assert spent["a"] + spent["b"] <= limit


def test_a_claim_of_a_window_with_no_spend_here_ends_with_its_window() -> None:
    budget = Budget(10, "day")
    scope = group_scope("org")
    ledger = BudgetLedger()
    ledger.share = 0.0
    ledger.coordinate(scope, budget, T0, 10, T0)  # claimed, nothing spent here yet
    charges = ((scope, (budget,)),)
    assert ledger.reserve(charges, 10, T0 + 5, 0) is None
    ledger.unreserve(charges, 10, T0 + 5, 0)
    ledger.prune(T0 + 5)  # nothing spent here: no counter left, only the claim
    assert ledger.reserve(charges, 1, T0 + DAY_MS, 0) is not None  # yesterday's claim
