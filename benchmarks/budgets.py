"""Budgets under concurrency and fairness under budgets, measured on the emission rule.

The scheduler's emitter drives ``fairstream.core.emission.EmissionRule`` one record at a
time; workers report each call's measured cost when it ends. This benchmark drives the same
rule from a simulated clock, with a pool of workers that run up to ``--concurrency`` calls
at once (``--max-concurrency``) and report each one's measured cost when it ends, as
``Pacing.feedback`` applies it (the deficit corrected, the budget settled). No Kafka: what
is measured is the budget's rule, not the transport.

1. **Overrun and payback.** One tenant under a budget per minute, its records declaring
   less than they cost (measured = declared x 1.2 to 2.0). Reservations at the pick stop
   new records at the limit, but the calls in flight then settle above what they declared:
   the window ends over its limit. Printed per window: what the window's records finally
   cost, the overrun, the bound (in-flight count x the largest request's cost), and what
   the next window could spend (the limit less the overrun carried into it).
2. **Service difference.** Two backlogged tenants of equal weight, both with budgets to
   spare, request costs varying 1 to ``--max-cost``, declared exactly or mis-declared
   (measured = declared x 0.5 to 2.0), 1, 4 and 20 calls at once. Service is each tenant's
   measured cost of the calls started so far; printed: the largest difference while both
   were backlogged against VTC's bound (OSDI 2024: twice the largest request's cost), that
   bound plus what the calls in flight can be mis-declared by, and a FIFO of the two (one
   tenant sends 7 of every 10 records) for contrast.

    .venv/bin/python -m benchmarks.budgets [--seed 7] [--minutes 5] [--concurrency 20]

Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import heapq
import random
from dataclasses import dataclass, field

from fairstream.core import FairScheduler, ManualClock, Pick, TenantPolicy
from fairstream.core.budget import Budget
from fairstream.core.emission import EmissionRule, Wait

T0_MS = 1_767_225_600_000  # a UTC midnight: minute windows start on the clock's whole minutes


@dataclass(order=True)
class Call:
    ends: float
    key: int
    tenant: str = field(compare=False)
    declared: int = field(compare=False)
    measured: int = field(compare=False)


class Pool:
    """Workers calling the API: each call takes ``latency`` s and reports its cost then."""

    def __init__(self, rule: EmissionRule[int], clock: ManualClock, latency: tuple[float, float]):
        self.rule, self.clock, self.latency = rule, clock, latency
        self.calls: list[Call] = []
        self.done: list[Call] = []

    def start(self, pick: Pick[int], measured: int, rng: random.Random) -> None:
        call = Call(
            self.clock.now() + rng.uniform(*self.latency),
            pick.item,
            pick.tenant,
            pick.cost,
            measured,
        )
        heapq.heappush(self.calls, call)
        self.rule.started(pick.tenant, pick.item)

    def finish_due(self) -> None:
        """The calls that ended by now report: the deficit and the budget corrected (as
        ``Pacing.feedback``), the slot given back."""
        now_ms = T0_MS + round(self.clock.now() * 1000)
        rule = self.rule
        while self.calls and self.calls[0].ends <= self.clock.now():
            call = heapq.heappop(self.calls)
            delta = call.measured - call.declared
            if delta:
                rule.core.charge(call.tenant, delta)
                charges = rule.charges(call.tenant)
                if charges:
                    rule.ledger.settle(charges, delta, now_ms, now_ms)
                    if delta < 0:
                        rule.release_budget_holds()
            rule.settled([call.key])
            self.done.append(call)

    def next_end(self) -> float:
        return self.calls[0].ends if self.calls else float("inf")


def overrun(seed: int, minutes: int, concurrency: int) -> None:
    rng = random.Random(seed)
    clock = ManualClock()
    limit = 20_000
    budget = Budget(limit, "minute")
    core: FairScheduler[int] = FairScheduler(clock)
    rule: EmissionRule[int] = EmissionRule(core, clock, max_concurrency=concurrency)
    rule.set_policy("a", TenantPolicy(budgets=(budget,)))
    pool = Pool(rule, clock, (0.5, 3.0))
    measured_of: dict[int, int] = {}
    largest = 0
    for key in range(200_000):  # a backlog that outlasts the run
        declared = rng.randint(50, 150)
        measured_of[key] = int(declared * rng.uniform(1.2, 2.0))
        largest = max(largest, measured_of[key])
        core.push("a", key, declared)
    rows: list[tuple[int, int, int, int]] = []  # minute, carried in, declared, final spend
    declared_in = 0
    minute = 0
    carried_in = 0
    end = minutes * 60.0
    while minute < minutes:
        now_ms = T0_MS + round(clock.now() * 1000)
        step = rule.next(now_ms)
        if isinstance(step, Pick):
            pool.start(step, measured_of[step.item], rng)
            declared_in += step.cost
            continue
        assert isinstance(step, Wait)
        boundary = (minute + 1) * 60.0
        until = min(clock.now() + step.seconds, pool.next_end(), boundary - 0.001, end)
        clock.advance(max(1e-6, until - clock.now()))
        pool.finish_due()
        if clock.now() >= boundary - 0.001:
            last_ms = T0_MS + round(clock.now() * 1000)
            spent = rule.ledger.spent("a", budget, last_ms)
            rows.append((minute, carried_in, declared_in, spent))
            clock.advance(0.001)
            pool.finish_due()
            minute += 1
            declared_in = 0
            carried_in = rule.ledger.spent("a", budget, T0_MS + round(clock.now() * 1000))
    bound = concurrency * largest
    print(f"1. A budget of {limit} cost units a minute; records declare 50-150 and cost 1.2-2.0x")
    print(
        f"   that; {concurrency} calls at once (0.5-3 s each); the largest request cost {largest}:"
    )
    print(f"   bound on the overrun: {concurrency} x {largest} = {bound}")
    print("   minute  carried in  reserved (declared)  spent at its end  overrun  within bound")
    for minute, carried, declared, spent in rows:
        over = max(0, spent - limit)
        print(
            f"   {minute:>6}  {carried:>10}  {declared:>19}  {spent:>16}  {over:>7}  "
            f"{'yes' if over <= bound else 'NO':>12}"
        )
    print("   (spent: reservations at the pick plus the measured costs settled in the minute;")
    print("   an overrun is carried into the next minute, whose reservations stop at the limit)")


def service_difference(
    seed: int,
    concurrency: int,
    max_cost: int,
    spread: tuple[float, float],
    fair: bool = True,
    budgets: bool = True,
) -> tuple[int, int, int]:
    """The largest difference between the two tenants' service (measured cost of the calls
    started) while both were backlogged; the largest request; the largest mis-declaration
    (|measured - declared|)."""
    rng = random.Random(seed)
    clock = ManualClock()
    core: FairScheduler[int] = FairScheduler(clock, quantum=max_cost)
    rule: EmissionRule[int] = EmissionRule(core, clock, max_concurrency=concurrency)
    for tenant in ("a", "b") if budgets else ():
        rule.set_policy(tenant, TenantPolicy(budgets=(Budget(10**12, "day"),)))
    pool = Pool(rule, clock, (0.2, 2.0))
    measured_of: dict[int, int] = {}
    fifo: list[tuple[str, int, int]] = []
    wrong = 0
    for key in range(20_000):
        tenant = "a" if (key % 10) < 7 else "b"  # a sends 7 of every 10: a FIFO favours it
        declared = rng.randint(1, max_cost)
        measured = max(1, min(max_cost, int(declared * rng.uniform(*spread))))
        measured_of[key] = measured
        wrong = max(wrong, abs(measured - declared))
        if fair:
            core.push(tenant, key, declared)
        else:
            fifo.append((tenant, key, declared))
    served = {"a": 0, "b": 0}
    worst = 0
    fifo_at = 0
    while len(core) or fifo_at < len(fifo):
        now_ms = T0_MS + round(clock.now() * 1000)
        step: Pick[int] | Wait | object
        if fair:
            step = rule.next(now_ms)
        elif len(pool.calls) < concurrency:
            tenant, key, declared = fifo[fifo_at]
            fifo_at += 1
            step = Pick(tenant, key, declared)
        else:
            step = Wait(pool.next_end() - clock.now())
        if isinstance(step, Pick):
            pool.start(step, measured_of[step.item], rng)
            served[step.tenant] += measured_of[step.item]
            both = (
                core.backlog("a")[0] > 0 and core.backlog("b")[0] > 0
                if fair
                else fifo_at < len(fifo) - 10
            )
            if both:
                worst = max(worst, abs(served["a"] - served["b"]))
            continue
        assert isinstance(step, Wait)
        clock.advance(max(1e-6, min(step.seconds, pool.next_end() - clock.now())))
        pool.finish_due()
    return worst, max(measured_of.values()), wrong


def fairness(seed: int, max_cost: int) -> None:
    print(
        f"2. Two backlogged tenants of weight 1 with budgets left, requests costing 1-{max_cost};"
    )
    print("   service: the measured cost of the calls each started; the largest difference")
    print("   between the two while both were backlogged, against VTC's bound (2 x the largest")
    print("   request). A cost known only when the call ends is charged when the worker reports")
    print("   it: the calls in flight add what they were mis-declared by, at most")
    print("   concurrency x the largest mis-declaration.")
    print("   (no budget: the same run with no budget in force, for comparison)")
    print(
        "   declared costs        calls at once  difference  no budget  VTC bound"
        "  with in-flight  FIFO"
    )
    for label, spread in (("exact", (1.0, 1.0)), ("0.5-2.0x measured", (0.5, 2.0))):
        for concurrency in (1, 4, 20):
            worst, largest, wrong = service_difference(seed, concurrency, max_cost, spread)
            plain, _, _ = service_difference(seed, concurrency, max_cost, spread, budgets=False)
            fifo, _, _ = service_difference(seed, concurrency, max_cost, spread, fair=False)
            vtc = 2 * largest
            allowance = vtc + concurrency * wrong
            within = "ok" if worst <= vtc else "--"
            within_allowance = "ok" if worst <= allowance else "--"
            print(
                f"   {label:<20}  {concurrency:>13}  {worst:>10}  {plain:>9}  {vtc:>6} {within}"
                f"  {allowance:>10} {within_allowance}  {fifo:>6}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--max-cost", type=int, default=100)
    args = parser.parse_args()
    overrun(args.seed, args.minutes, args.concurrency)
    print()
    fairness(args.seed, args.max_cost)


if __name__ == "__main__":
    main()
