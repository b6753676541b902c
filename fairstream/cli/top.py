"""``fairstream top``: a live terminal view of tenants across scheduler instances.

It polls each scheduler's ``/tenants`` endpoint, merges the instances (each tenant lives on
exactly one), and derives rates from the difference between two snapshots: records emitted
per second, each tenant's share of the egress against its entitlement (its weight over the
weights of the backlogged tenants of its priority class), dwell p99 and state; while a tenant
far behind has records waiting in the ingest log, how many (``in log``, beside its backlog in
memory). With a feedback topic it also shows the adaptive rate against ``--rate``, the 429s
the workers reported per second, and each tenant's cost as the workers measured it against
the cost its requests declared.

With tenant groups the table is their tree: a row per group (its members'
records/s summed over every instance, its share of the egress against its entitlement among
the groups and ungrouped tenants waiting for a share), its members indented under it (their
share of the group's egress against their entitlement within it), and the ungrouped tenants
beside (``fairstream.analysis.tree``: an entry waits for a share with more than a second's
backlog at its rate).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import click

from fairstream.analysis.tree import Entitled, Entry, share_tree, waiting_records

Snapshot = dict[str, Any]
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


@dataclass(frozen=True)
class Row:
    tenant: str
    backlog: int
    emitted_per_s: float
    share: float | None  # of all egress in the interval
    entitlement: float | None  # weighted fair share, for a backlogged tenant
    dwell_p99: float | None
    weight: float
    state: str
    cost_declared: float | None = None  # total declared by its requests with feedback
    cost_reported: float | None = None  # what the workers measured for the same requests
    # With tenant groups: "group" (a group's row), "member" (a group's member: its share
    # and entitlement are within the group) or "tenant" (ungrouped, or no groups in use).
    kind: str = "tenant"
    group: str | None = None
    budget: str | None = None  # its budget with the least room: "spent/limit window"
    # Records of a tenant far behind that wait in the ingest log, to be read again when its
    # turn nears (not in ``backlog``, which counts what is in memory).
    in_log: int = 0


def budget_cell(row: dict[str, Any]) -> str | None:
    """A tenant's budget with the least room left, as ``spent/limit`` and the budget (its
    tenant group's budget is named ``group:<id>``); None without one."""
    budgets = row.get("budgets") or []
    if not budgets:
        return None
    tight = min(budgets, key=lambda b: (b["remaining"] / max(1, b["limit"]), b["budget"]))
    whose = "" if tight["scope"] == row.get("tenant") else f" ({tight['scope']})"
    return f"{tight['spent']}/{tight['budget']}{whose}"


def _budget_state(row: dict[str, Any], state: str) -> str:
    return "budget" if row.get("budget_waiting") else state


@dataclass(frozen=True)
class ReportedRate:
    """The group's adaptive rate, as the instances report it (each reads all feedback)."""

    rate: float
    ceiling: float
    held_for_s: float
    rate_limited_per_s: float | None  # api-scope 429s reported per second


def fetch(url: str, limit: int, timeout: float = 3.0) -> Snapshot | None:
    """One scheduler's ``/tenants`` snapshot, or None when it does not answer."""
    try:
        with urllib.request.urlopen(
            f"{url.rstrip('/')}/tenants?limit={limit}", timeout=timeout
        ) as r:
            data: Snapshot = json.loads(r.read())
            return data
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _tenants(snapshots: list[Snapshot | None]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for snap in snapshots:
        for row in (snap or {}).get("tenants", []):
            merged[row["tenant"]] = row
    return merged


def compute_rows(
    before: list[Snapshot | None], after: list[Snapshot | None], seconds: float
) -> list[Row]:
    """Rows for the tenants in ``after``, with rates over the ``seconds`` between the two.

    Pure: the tests feed it snapshots. Caller: the ``top`` loop. With tenant groups, the
    rows of their tree (``tree_rows``).
    """
    grouped = tree_rows(before, after, seconds)
    if grouped is not None:
        return grouped
    old, new = _tenants(before), _tenants(after)
    rates = {
        t: max(0, row["emitted"] - old.get(t, {}).get("emitted", row["emitted"])) / seconds
        for t, row in new.items()
    }
    total = sum(rates.values())
    class_weight: dict[int, float] = {}
    for row in new.values():
        if waiting_records(row) > 0 and not row["paused"]:
            class_weight[row["priority"]] = class_weight.get(row["priority"], 0.0) + row["weight"]
    rows = []
    for tenant, row in new.items():
        backlogged = waiting_records(row) > 0 and not row["paused"]
        cap = row.get("rate_cap")
        if row["paused"]:
            state = "paused"
        elif cap is not None and rates[tenant] >= 0.95 * cap:
            state = "capped"
        elif waiting_records(row) > 0:
            state = "backlogged"
        else:
            state = "idle"
        rows.append(
            Row(
                tenant=tenant,
                backlog=row["backlog"],
                emitted_per_s=rates[tenant],
                share=rates[tenant] / total if total else None,
                entitlement=row["weight"] / class_weight[row["priority"]] if backlogged else None,
                dwell_p99=row.get("dwell_p99"),
                weight=row["weight"],
                state=_budget_state(row, state),
                cost_declared=row.get("cost_declared"),
                cost_reported=row.get("cost_reported"),
                budget=budget_cell({**row, "tenant": tenant}),
                in_log=row.get("in_log", 0),
            )
        )
    rows.sort(key=lambda r: (-r.emitted_per_s, -r.backlog - r.in_log, r.tenant))
    return rows


def _groups(snapshots: list[Snapshot | None]) -> dict[str, dict[str, Any]] | None:
    """The groups of every instance, merged: backlogs and emitted counts summed, members
    joined (each tenant lives on one instance). None when no instance has groups."""
    merged: dict[str, dict[str, Any]] = {}
    found = False
    for snap in snapshots:
        groups = (snap or {}).get("groups")
        if groups is None:
            continue
        found = True
        for g in groups:
            into = merged.setdefault(g["group"], {**g, "backlog": 0, "emitted": 0, "members": {}})
            into["backlog"] += g["backlog"]
            into["emitted"] += g["emitted"]
            for m in g["members"]:
                into["members"][m["tenant"]] = m
    return merged if found else None


def _state(paused: bool, cap: float | None, rate: float, backlog: int) -> str:
    if paused:
        return "paused"
    if cap is not None and rate >= 0.95 * cap:
        return "capped"
    return "backlogged" if backlog > 0 else "idle"


def _entry(name: str, stats: dict[str, Any], rate: float) -> Entry:
    """A group's or tenant's entry in the tree, from its reported ``stats``."""
    return Entry(name, stats["weight"], stats["priority"], stats["paused"], stats["backlog"], rate)


def _row(
    entry: Entry,
    share: float | None,
    entitled: Entitled,
    cap: float | None,
    seen: dict[str, Any],
    kind: str = "tenant",
    group: str | None = None,
) -> Row:
    """The row of ``entry``, under the rate cap ``cap``; ``seen`` is the tenant's report
    (its dwell and costs; empty for a group)."""
    return Row(
        tenant=entry.name,
        backlog=entry.backlog,
        emitted_per_s=entry.rate,
        share=share,
        entitlement=entitled.entitlement,
        dwell_p99=seen.get("dwell_p99"),
        weight=entry.weight,
        state=_budget_state(seen, _state(entry.paused, cap, entry.rate, entry.backlog)),
        cost_declared=seen.get("cost_declared"),
        cost_reported=seen.get("cost_reported"),
        kind=kind,
        group=group,
        budget=budget_cell({**seen, "tenant": entry.name}),
    )


def tree_rows(
    before: list[Snapshot | None], after: list[Snapshot | None], seconds: float
) -> list[Row] | None:
    """The rows of the groups' tree (None when no instance has groups): each group, then
    its members, then the next; ungrouped tenants in between, the busiest first. Pure."""
    groups, old_groups = _groups(after), _groups(before) or {}
    if groups is None:
        return None
    new, old = _tenants(after), _tenants(before)

    def per_s(now: int, then: int | None) -> float:
        return max(0, now - (now if then is None else then)) / seconds

    members: dict[str, list[Entry]] = {}
    outer: list[Entry] = []
    for name, g in groups.items():
        was = old_groups.get(name, {})
        was_members = was.get("members", {})
        members[name] = [
            _entry(t, m, per_s(m["emitted"], was_members.get(t, {}).get("emitted")))
            for t, m in g["members"].items()
        ]
        outer.append(_entry(name, g, per_s(g["emitted"], was.get("emitted"))))
    ungrouped = [
        _entry(t, r, per_s(r["emitted"], old.get(t, {}).get("emitted")))
        for t, r in new.items()
        if r.get("group") is None
    ]
    total = sum(e.rate for e in outer) + sum(e.rate for e in ungrouped)
    nodes, entitled = share_tree(outer, members, ungrouped, total)
    blocks: list[tuple[Entry, list[Row]]] = []
    for node in nodes:
        g, e = groups[node.entry.name], node.entry
        rows = [_row(e, node.share, node.entitled, g.get("rate_cap"), {}, "group", e.name)]
        for m in sorted(node.members, key=lambda m: (-m.entry.rate, -m.entry.backlog)):
            cap = g["members"][m.entry.name].get("rate_cap")
            seen = new.get(m.entry.name, {})
            rows.append(_row(m.entry, m.share, m.within, cap, seen, "member", e.name))
        blocks.append((e, rows))
    for e in ungrouped:
        r = new[e.name]
        share = e.rate / total if total else None
        blocks.append((e, [_row(e, share, entitled[e.name], r.get("rate_cap"), r)]))
    blocks.sort(key=lambda b: (-b[0].rate, -b[0].backlog, b[0].name))
    return [row for _, rows in blocks for row in rows]


def feedback_of(
    before: list[Snapshot | None], after: list[Snapshot | None], seconds: float
) -> ReportedRate | None:
    """The adaptive rate and the 429 rate, or None without a feedback topic. Pure.

    Every instance reads the whole feedback topic, so each counts every 429: the instance
    with the freshest rate is taken, not the sum; the rate of 429s is that instance's
    count over the interval.
    """
    for old, new in zip(before, after, strict=True):
        adaptive = (new or {}).get("adaptive")
        if not adaptive:
            continue
        previous = (old or {}).get("adaptive") or {}
        per_s = None
        if "rate_limited_total" in previous and seconds > 0:
            per_s = max(0.0, adaptive["rate_limited_total"] - previous["rate_limited_total"])
            per_s /= seconds
        return ReportedRate(
            rate=adaptive["rate"],
            ceiling=adaptive["ceiling"],
            held_for_s=adaptive.get("held_for_s", 0.0),
            rate_limited_per_s=per_s,
        )
    return None


def _cost(row: Row) -> str:
    if not row.cost_declared or row.cost_reported is None:
        return "-"
    ratio = row.cost_reported / row.cost_declared
    return f"{row.cost_reported:g}/{row.cost_declared:g} ({ratio:.2f}x)"


def instances_of(snapshots: list[Snapshot | None]) -> list[dict[str, Any]]:
    """The group's instances as the schedulers report them (each knows every live one;
    the freshest report of each wins). Pure."""
    merged: dict[str, dict[str, Any]] = {}
    for snap in snapshots:
        for row in (snap or {}).get("instances") or []:
            known = merged.get(row["instance"])
            if known is None or row["report_age_s"] < known["report_age_s"]:
                merged[row["instance"]] = row
    return [merged[i] for i in sorted(merged)]


def table(columns: list[tuple[str, str]], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Lines of a plain table: ``columns`` are (name, "<" or ">") for left or right
    alignment, each column as wide as its widest cell. Pure."""
    widths = [max([len(name), *(len(r[i]) for r in rows)]) for i, (name, _) in enumerate(columns)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            f"{c:{align}{w}}" for c, (_, align), w in zip(cells, columns, widths, strict=True)
        ).rstrip()

    return [line(tuple(name for name, _ in columns)), *(line(r) for r in rows)]


def render(
    rows: list[Row],
    snapshots: list[Snapshot | None],
    urls: list[str],
    feedback: ReportedRate | None = None,
) -> str:
    """The view as text: a header, the tenants, and the group's instances if any. Pure."""
    up = sum(1 for s in snapshots if s is not None)
    backlog = sum(s["backlog"] for s in snapshots if s)
    in_log = sum(s.get("in_log", 0) for s in snapshots if s)
    out = sum(r.emitted_per_s for r in rows if r.kind != "member")  # a group's are its members'
    waiting = f", {in_log} waiting in the ingest log" if in_log else ""
    lines = [
        f"fairstream top: {up}/{len(urls)} schedulers answering, "
        f"{backlog} records buffered{waiting}, {out:.1f} records/s out"
    ]
    if feedback is not None:
        limited = (
            "-" if feedback.rate_limited_per_s is None else f"{feedback.rate_limited_per_s:.1f}"
        )
        held = f", held {feedback.held_for_s:.1f} s" if feedback.held_for_s > 0 else ""
        lines.append(
            f"adaptive rate {feedback.rate:.1f}/s of --rate {feedback.ceiling:g}{held}, "
            f"{limited} 429s/s reported"
        )
    costs = any(r.cost_declared is not None for r in rows)
    logged = any(r.in_log for r in rows)  # a column only while a tenant is far behind
    columns = [
        ("tenant", "<"),
        ("state", "<"),
        ("weight", ">"),
        ("backlog", ">"),
        *((("in log", ">"),) if logged else ()),
        ("out/s", ">"),
        ("share", ">"),
        ("entitled", ">"),
        ("dwell p99", ">"),
    ]
    if costs:
        columns.append(("cost measured/declared", ">"))
    budgets = any(r.budget is not None for r in rows)
    if budgets:
        columns.append(("budget spent/limit", "<"))
    cells = [
        (
            ("  " + r.tenant)
            if r.kind == "member"
            else (f"{r.tenant} (group)" if r.kind == "group" else r.tenant),
            r.state,
            f"{r.weight:g}",
            str(r.backlog),
            *((str(r.in_log),) if logged else ()),
            f"{r.emitted_per_s:.1f}",
            "-" if r.share is None else f"{r.share:.0%}",
            "-" if r.entitlement is None else f"{r.entitlement:.0%}",
            "-" if r.dwell_p99 is None else f"{r.dwell_p99 * 1000:.0f} ms",
            *((_cost(r),) if costs else ()),
            *((r.budget or "-",) if budgets else ()),
        )
        for r in rows
    ]
    lines += ["", *table(columns, cells)]
    if any(r.kind == "group" for r in rows):
        lines.append(
            "(a group's share and entitlement: among the groups and ungrouped tenants; its "
            "members', indented: within the group)"
        )
    instances = instances_of(snapshots)
    if instances:
        group = [
            (
                i["instance"],
                ",".join(str(p) for p in i["partitions"]) or "-",
                f"{i['demand_weight']:g}"
                + (f" +{i['capped_tenants']} capped" if i["capped_tenants"] else ""),
                f"{i['rate_share']:.1f}/s",
                f"{i['report_age_s']:.1f} s",
            )
            for i in instances
        ]
        names = ("instance", "partitions", "demand (weight)", "rate share", "report age")
        lines += ["", *table([(n, "<" if n == "instance" else ">") for n in names], group)]
    return "\n".join(lines)


@click.command("top")
@click.option(
    "--scheduler",
    "urls",
    multiple=True,
    default=["http://localhost:6066"],
    show_default=True,
    envvar="FAIRSTREAM_TOP_SCHEDULERS",
    show_envvar=True,
    help="Base URL of a scheduler's web port; repeat for every instance "
    "(the env variable takes a space-separated list).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=20,
    show_default=True,
    help="Tenants asked of each scheduler (largest backlogs, latest emitters).",
)
@click.option("--once", is_flag=True, help="Print one view after one interval and exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print JSON rows.")
def top(urls: tuple[str, ...], interval: float, limit: int, once: bool, as_json: bool) -> None:
    """A live view of tenants: backlog, records/s, share against entitlement, dwell p99."""
    targets = list(urls)
    before = [fetch(u, limit) for u in targets]
    if all(s is None for s in before):
        raise click.ClickException(
            f"no scheduler answered at {', '.join(targets)} (is --web-port right?)"
        )
    started = time.monotonic()
    if once:
        time.sleep(interval)  # a rate needs two snapshots an interval apart
        after = [fetch(u, limit) for u in targets]
        seconds = time.monotonic() - started
        rows = compute_rows(before, after, seconds)
        feedback = feedback_of(before, after, seconds)
        if as_json:
            click.echo(json.dumps([asdict(r) for r in rows]))
        else:
            click.echo(render(rows, after, targets, feedback))
        return
    # A terminal gets the view redrawn in place; a pipe gets one view after another.
    redraw = CLEAR if sys.stdout.isatty() else "\n"
    click.echo(render([], before, targets))
    try:
        while True:
            time.sleep(interval)
            after = [fetch(u, limit) for u in targets]
            now = time.monotonic()
            rows = compute_rows(before, after, now - started)
            feedback = feedback_of(before, after, now - started)
            click.echo(redraw + render(rows, after, targets, feedback))
            before, started = after, now
    except KeyboardInterrupt:
        pass
