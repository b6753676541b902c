"""The budgets as the emitter shows and exchanges them: the rows of ``/metrics``, of
``/tenants`` (the console, ``fairstream top``) and of a scrape; this instance's spend of
tenant groups' budgets for the group thread's reports (``group_spend``), and what the
exchange says of the others' (``exchanged``).

The rule charges and holds (``fairstream.core.emission``, over the ledger of
``fairstream.core.budget``); this module reads the ledger on the emitter's thread into
copies that other threads may keep, and gives it the exchange's numbers.
"""

from __future__ import annotations

from typing import Any, Final

from fairstream.core.budget import (
    BudgetState,
    ClaimKey,
    Scope,
    format_budget,
    group_scope,
    scope_name,
)
from fairstream.core.emission import EmissionRule
from fairstream.scheduler.messages import Exchanged, Spend

__all__ = ["BUDGET_ROWS", "budget_rows", "exchanged", "group_spend", "tenant_budgets"]

BUDGET_ROWS: Final = 50  # budgets a scrape keeps: the nearest their limit


def _budgets_of(rule: EmissionRule[Any], scope: Scope) -> tuple[Any, ...]:
    """The budgets in force for ``scope`` (a tenant's policy's, or a tenant group's)."""
    if isinstance(scope, str):
        return rule.core.policy(scope).budgets
    grouped = rule.groups.core
    return () if grouped is None else grouped.group_policy(scope[1]).budgets


def budget_rows(
    rule: EmissionRule[Any], now_ms: int, k: int = BUDGET_ROWS
) -> tuple[BudgetState, ...]:
    """The ``k`` budgets with the least room left (as a fraction of their limit), over every
    scope that has spent; counters with nothing spent are dropped first (``prune``).
    O(scopes with spend): a scrape's cost, reused between scrapes."""
    ledger = rule.ledger
    if not rule.budgeted and not len(ledger):
        return ()
    ledger.prune(now_ms)
    rows: list[BudgetState] = []
    for scope in list(ledger.scopes()):
        budgets = _budgets_of(rule, scope)
        if budgets:
            rows.extend(ledger.state(scope, budgets, now_ms))
    rows.sort(key=lambda row: (row.remaining / row.budget.limit, -row.spent))
    return tuple(rows[:k])


def tenant_budgets(rule: EmissionRule[Any], tenant: str, now_ms: int) -> list[dict[str, Any]]:
    """``tenant``'s budgets and its tenant group's, as ``/tenants`` rows show them: each
    with whose it is (``scope``), its text form, spent, remaining, and when it resets."""
    if not rule.budgeted:
        return []
    rows = []
    for scope, budgets in rule.charges(tenant):
        for state in rule.ledger.state(scope, budgets, now_ms):
            rows.append(
                {
                    "scope": scope_name(scope),
                    "budget": format_budget(state.budget),
                    "limit": state.budget.limit,
                    "spent": state.spent,
                    "remaining": state.remaining,
                    "resets_at_ms": state.resets_at_ms,
                    "on_exhausted": state.budget.on_exhausted,
                }
            )
    return rows


def _group_budgets(rule: EmissionRule[Any]) -> dict[str, tuple[Any, ...]]:
    """Every tenant group whose policy in force has budgets, with them."""
    grouped = rule.groups.core
    if grouped is None:
        return {}
    policies = grouped.group_policies
    named = set(policies.own) | set(grouped.groups())
    out = {g: grouped.group_policy(g).budgets for g in named}
    return {g: budgets for g, budgets in out.items() if budgets}


def group_spend(rule: EmissionRule[Any], now_ms: int) -> tuple[Spend, ...]:
    """Each tenant group's budget in force, with what this instance's partitions spent of it
    in the current window and the weight of its members backlogged here: what the group
    thread claims the budgets from (``coordination.view.PeerView.plan_claims``)."""
    grouped = rule.groups.core
    if not rule.budgeted or grouped is None:
        return ()
    out = []
    for group, budgets in sorted(_group_budgets(rule).items()):
        # The weight of the members backlogged here: this instance's part of the group.
        weight = sum(grouped.policy(m).weight for m in grouped.members(group))
        for budget in budgets:
            spent, start = rule.ledger.local(group_scope(group), budget, now_ms)
            out.append(Spend(ClaimKey.of(group, budget.key, start), budget.limit, spent, weight))
    return tuple(out)


def exchanged(rule: EmissionRule[Any], budgets: tuple[Exchanged, ...], now_ms: int) -> None:
    """This instance's claims in force on tenant groups' budgets, from the group thread, to
    the ledger: it spends each group's budget up to its claim."""
    in_force = _group_budgets(rule)
    ledger = rule.ledger
    rose = False
    for entry in budgets:
        group = entry.key.group
        for budget in in_force.get(group, ()):
            if budget.key == entry.key.budget_key():
                rose = (
                    ledger.coordinate(
                        group_scope(group), budget, entry.key.window_start, entry.claim, now_ms
                    )
                    or rose
                )
    if rose:
        rule.release_budget_holds()  # room may have come: the held tenants are tried again
