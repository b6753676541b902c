"""What ``fairstream tenants`` and ``fairstream groups`` share: reading and writing the
compacted policy topic, the options of a policy's fields, and how a policy is shown.

Every command reads the topic to its end first (``read``), so ``set`` merges into what is
there now. Values are checked with ``TenantPolicy`` before anything is written: an invalid
command writes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import click

from fairstream.config import KafkaConnection, kafka_options, policy_topic_option
from fairstream.core.budget import Budget, format_budget, parse_budget
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.wire.policy import POLICY_FIELDS, PolicyRecord, SchemaError

__all__ = [
    "UNSET",
    "BudgetEdit",
    "BudgetSpec",
    "OptionalNumber",
    "changes",
    "connection_options",
    "echo_policy",
    "iso",
    "merged",
    "policy_fields",
    "policy_options",
    "read",
    "show",
    "table",
    "write",
]

_NONE_WORDS = ("none", "unlimited", "off")


class _Unset:
    """Marks an option given as ``none``: set the field to None (unlimited, uncapped)."""

    def __repr__(self) -> str:
        return "none"


UNSET = _Unset()


class OptionalNumber(click.ParamType):
    """A number, or ``none`` / ``unlimited`` / ``off`` to remove the limit.

    Subclasses the bare ``click.ParamType``: it is generic only from click 8.5 on, and
    subscripting it fails at import under the click faust-streaming pins (below 8.4).
    """

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "integer|none" if kind is int else "number|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is UNSET or isinstance(value, int | float):
            return value
        text = str(value).strip()
        if text.lower() in _NONE_WORDS:
            return UNSET
        try:
            return self.kind(text)
        except ValueError:
            what = "an integer" if self.kind is int else "a number"
            self.fail(f"{value!r} is not {what} or 'none'", param, ctx)


class BudgetSpec(click.ParamType):
    """A budget in its text form (``fairstream.core.budget.parse_budget``)."""

    name = "budget"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, Budget):
            return value
        try:
            return parse_budget(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class BudgetEdit:
    """What ``--budget`` and ``--no-budgets`` ask of a policy's budgets: drop them all
    (``clear``) first, then add each of ``add``, replacing the budget that counts the same
    spend (same window, unit, rolling and zone)."""

    def __init__(self, clear: bool, add: tuple[Budget, ...]) -> None:
        self.clear = clear
        self.add = add

    def apply(self, budgets: tuple[Budget, ...]) -> tuple[Budget, ...]:
        out = {} if self.clear else {budget.key: budget for budget in budgets}
        for budget in self.add:
            out[budget.key] = budget
        return tuple(out.values())


def read(
    kafka: KafkaConnection, topic: str, timeout: float, label: Callable[[bytes], str]
) -> dict[bytes, PolicyRecord]:
    """Every policy on the topic (tenants', groups', the defaults'); a value that does not
    decode is skipped with a warning naming its key by ``label``."""
    from fairstream.adapters.policy_store import PolicyStoreError, read_policies

    def warn(key: bytes | None, error: SchemaError) -> None:
        name = "a record without a key" if key is None else repr(label(key))
        click.echo(f"warning: skipped the policy of {name}: {error}", err=True)

    try:
        return read_policies(kafka, topic, timeout, on_invalid=warn)
    except PolicyStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def write(
    kafka: KafkaConnection, topic: str, key: bytes, record: PolicyRecord | None, timeout: float
) -> None:
    from fairstream.adapters.policy_store import PolicyStoreError, write_policy

    try:
        write_policy(kafka, topic, key, record, timeout)
    except PolicyStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def policy_fields(record: PolicyRecord | None, policy: TenantPolicy) -> dict[str, Any]:
    """The policy's fields and the record's times, as ``get --json`` and ``list`` show them."""
    return {
        "weight": policy.weight,
        "priority": policy.priority,
        "max_backlog": policy.max_backlog,
        "max_backlog_cost": policy.max_backlog_cost,
        "rate_cap": policy.rate_cap,
        "cap_burst": policy.cap_burst,
        "paused": policy.paused,
        "max_concurrency": policy.max_concurrency,
        "budgets": [format_budget(budget) for budget in policy.budgets],
        "updated_at": None if record is None else iso(record.updated_at_ms),
        "purge_before": None if record is None else iso(record.purge_before_ms),
    }


def show(value: object) -> str:
    if value is None or value == []:
        return "-"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def echo_policy(fields: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """One ``name: value`` line per name, in order."""
    for name in names:
        click.echo(f"{name}: {show(fields[name])}")


def table(columns: list[tuple[str, str]], rows: list[dict[str, Any]]) -> None:
    """``rows`` as a table of ``(HEADER, field)`` columns, left-aligned."""
    cells = [[h for h, _ in columns]]
    cells.extend([show(row[name]) for _, name in columns] for row in rows)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def connection_options(f: Any) -> Any:
    f = click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=30.0,
        show_default=True,
        help="Seconds to wait for the broker when reading or writing.",
    )(f)
    return kafka_options(policy_topic_option(f))


# option name -> the TenantPolicy field it sets
_FIELD_OF = {
    "weight": "weight",
    "priority": "priority",
    "max_backlog": "max_backlog",
    "max_backlog_cost": "max_backlog_cost",
    "rate": "rate_cap",
    "rate_burst": "cap_burst",
    "max_concurrency": "max_concurrency",
}


def policy_options(*, group: bool = False) -> Callable[[Any], Any]:
    """The options of a policy's fields, a tenant's or (``group``) a group's: a group's
    apply to all its members together."""
    whose = "the group's members together" if group else "this tenant"
    calls = "the members' requests, together," if group else "the tenant's requests"
    options = [
        click.option(
            "--weight",
            type=float,
            help="Share relative to other groups and ungrouped tenants (> 0)."
            if group
            else "Share relative to other tenants (> 0).",
        ),
        click.option("--priority", type=int, help="Priority class, 0 the highest."),
        click.option(
            "--max-backlog",
            type=OptionalNumber(int),
            help=f"Most records waiting{' over all members' if group else ''} (>= 1), or "
            "'none' for unlimited.",
        ),
        click.option(
            "--max-backlog-cost",
            type=OptionalNumber(int),
            help=f"Most total cost waiting{' over all members' if group else ''} (>= 1), or "
            "'none' for unlimited.",
        ),
        click.option(
            "--rate",
            type=OptionalNumber(float),
            help=f"Records per second {whose} may be sent at (> 0), or 'none' for uncapped.",
        ),
        click.option(
            "--rate-burst", type=float, help="Records back to back under the rate cap (>= 1)."
        ),
        click.option(
            "--max-concurrency",
            type=OptionalNumber(int),
            help=f"Most of {calls} in flight at once (released, not yet reported settled on "
            "the feedback topic; >= 1), or 'none' for unlimited."
            + (
                " Each scheduler instance applies its part, by ingest partitions owned, as it"
                " does --max-concurrency."
                if group
                else ""
            ),
        ),
        click.option(
            "--budget",
            "budgets",
            type=BudgetSpec(),
            multiple=True,
            help=f"What {whose} may spend per window: LIMIT/WINDOW[,OPTION...], for example "
            "1000/day, 50/minute,records, 1000000/month,tz=Europe/Paris,dead-letter or "
            "5000/rolling-hour. WINDOW is minute, hour, day or month (calendar-aligned in "
            "tz=ZONE, UTC by default; rolling-WINDOW for the last one at every moment); "
            "records counts records instead of cost; dead-letter sends a record that does "
            "not fit to the dead-letter topic (reason budget-exhausted) instead of keeping it "
            "until the window has room. Repeat for several windows; a budget replaces the "
            "one of the same window.",
        ),
        click.option(
            "--no-budgets",
            "no_budgets",
            is_flag=True,
            help="Remove every budget (before adding those of --budget).",
        ),
        click.option(
            "--pause",
            "pause",
            is_flag=True,
            help="Stop scheduling the group's members; keep their backlog."
            if group
            else "Stop scheduling the tenant; keep its backlog.",
        ),
        click.option(
            "--resume",
            "resume",
            is_flag=True,
            help="Schedule a paused group again." if group else "Schedule a paused tenant again.",
        ),
    ]

    def decorate(f: Any) -> Any:
        for option in reversed(options):  # --help lists them in this order
            f = option(f)
        return f

    return decorate


def changes(given: Mapping[str, Any]) -> dict[str, Any]:
    """The ``TenantPolicy`` fields the policy options ask to change (``none``: None), checked
    alone; UsageError for --pause with --resume or an invalid value."""
    if given.get("pause") and given.get("resume"):
        raise click.UsageError("--pause and --resume contradict each other; give one")
    out: dict[str, Any] = {}
    for option, field in _FIELD_OF.items():
        value = given.get(option)
        if value is not None:
            out[field] = None if value is UNSET else value
    if given.get("pause") or given.get("resume"):
        out["paused"] = bool(given.get("pause"))
    added = tuple(given.get("budgets") or ())
    if added or given.get("no_budgets"):
        out["budgets"] = BudgetEdit(bool(given.get("no_budgets")), added)
    merged(DEFAULT_POLICY, out)
    return out


def merged(base: TenantPolicy, fields: Mapping[str, Any]) -> TenantPolicy:
    """``base`` with ``fields`` changed (a ``BudgetEdit`` applied to its budgets);
    UsageError when the result is not a policy."""
    edit = fields.get("budgets")
    if isinstance(edit, BudgetEdit):
        fields = {**fields, "budgets": edit.apply(base.budgets)}
    try:
        return base.replace(**fields)
    except ValueError as exc:
        raise click.UsageError(f"invalid policy: {exc}") from exc


POLICY_LINES = (*POLICY_FIELDS, "budgets", "updated_at", "purge_before")
