"""``fairstream tenants``: read and change tenant policies on the compacted policy topic.

Every command reads the topic to its end first (``read_policies``), so ``set`` merges into
what is there now. A tenant with no record of its own follows the defaults (the record under
the empty key, or the built-in ``TenantPolicy()`` when there is none). Values are checked
with ``TenantPolicy`` before anything is written: an invalid command writes nothing.

Decisions worth knowing:
- ``set`` on a tenant without a policy copies the current defaults into an explicit policy;
  from then on, changing the defaults no longer changes that tenant (``reset`` undoes it).
- ``purge`` writes the tenant's current policy with ``purge_before`` = now. ``set`` keeps an
  earlier ``purge_before`` so the request survives compaction until the next purge; the
  scheduler acts on a purge time it has not applied yet.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

import click

from fairstream.config import KafkaConnection, kafka_options, policy_topic_option
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.wire import now_ms, tenant_key
from fairstream.wire.policy import DEFAULT_POLICY_KEY, POLICY_FIELDS, PolicyRecord, SchemaError

_NONE_WORDS = ("none", "unlimited", "off")


class _Unset:
    """Marks an option given as ``none``: set the field to None (unlimited, uncapped)."""

    def __repr__(self) -> str:
        return "none"


UNSET = _Unset()


class _OptionalNumber(click.ParamType):
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


def _key(tenant: str | None, default: bool) -> bytes:
    if default and tenant is not None:
        raise click.UsageError("give either TENANT or --default, not both")
    if default:
        return DEFAULT_POLICY_KEY
    if tenant is None:
        raise click.UsageError("missing TENANT (or --default for the defaults)")
    try:
        return tenant_key(tenant)
    except ValueError as exc:
        raise click.BadParameter(
            str(exc) + (" (use --default for the defaults)" if not tenant else ""),
            param_hint="TENANT",
        ) from exc


def _label(key: bytes) -> str:
    return "(default)" if key == DEFAULT_POLICY_KEY else key.decode("utf-8", "replace")


def _read(kafka: KafkaConnection, topic: str, timeout: float) -> dict[bytes, PolicyRecord]:
    from fairstream.adapters.policy_store import PolicyStoreError, read_policies

    def warn(key: bytes | None, error: SchemaError) -> None:
        label = "a record without a key" if key is None else repr(_label(key))
        click.echo(f"warning: skipped the policy of {label}: {error}", err=True)

    try:
        return read_policies(kafka, topic, timeout, on_invalid=warn)
    except PolicyStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _write(
    kafka: KafkaConnection, topic: str, key: bytes, record: PolicyRecord | None, timeout: float
) -> None:
    from fairstream.adapters.policy_store import PolicyStoreError, write_policy

    try:
        write_policy(kafka, topic, key, record, timeout)
    except PolicyStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def _defaults(policies: dict[bytes, PolicyRecord]) -> TenantPolicy:
    record = policies.get(DEFAULT_POLICY_KEY)
    return DEFAULT_POLICY if record is None else record.policy


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _as_dict(key: bytes, record: PolicyRecord | None, policy: TenantPolicy) -> dict[str, Any]:
    return {
        "tenant": None if key == DEFAULT_POLICY_KEY else key.decode("utf-8", "replace"),
        "weight": policy.weight,
        "priority": policy.priority,
        "max_backlog": policy.max_backlog,
        "max_backlog_cost": policy.max_backlog_cost,
        "rate_cap": policy.rate_cap,
        "cap_burst": policy.cap_burst,
        "paused": policy.paused,
        "max_concurrency": policy.max_concurrency,
        "updated_at": None if record is None else _iso(record.updated_at_ms),
        "purge_before": None if record is None else _iso(record.purge_before_ms),
    }


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _echo_policy(
    key: bytes, record: PolicyRecord | None, policy: TenantPolicy, source: str
) -> None:
    fields = _as_dict(key, record, policy)
    click.echo(f"tenant: {_label(key)}")
    click.echo(f"source: {source}")
    for name in (*POLICY_FIELDS, "updated_at", "purge_before"):
        click.echo(f"{name}: {_show(fields[name])}")


def _connection_options(f: Any) -> Any:
    f = click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=30.0,
        show_default=True,
        help="Seconds to wait for the broker when reading or writing.",
    )(f)
    return kafka_options(policy_topic_option(f))


@click.group("tenants")
def tenants() -> None:
    """Show and change tenant policies (weight, priority, backlog limits, rate cap,
    concurrency limit, pause).

    Policies live on the compacted policy topic, keyed by tenant id; the scheduler applies
    them live. A tenant without a policy of its own follows the defaults (set --default).
    """


@tenants.command("set")
@click.argument("tenant", required=False)
@click.option("--default", "default", is_flag=True, help="Change the defaults instead.")
@click.option("--weight", type=float, help="Share relative to other tenants (> 0).")
@click.option("--priority", type=int, help="Priority class, 0 the highest.")
@click.option(
    "--max-backlog",
    type=_OptionalNumber(int),
    help="Most records waiting (>= 1), or 'none' for unlimited.",
)
@click.option(
    "--max-backlog-cost",
    type=_OptionalNumber(int),
    help="Most total cost waiting (>= 1), or 'none' for unlimited.",
)
@click.option(
    "--rate",
    type=_OptionalNumber(float),
    help="Records per second this tenant may be sent at (> 0), or 'none' for uncapped.",
)
@click.option("--rate-burst", type=float, help="Records back to back under the rate cap (>= 1).")
@click.option(
    "--max-concurrency",
    type=_OptionalNumber(int),
    help="Most of the tenant's requests in flight at once (released, not yet reported "
    "settled on the feedback topic; >= 1), or 'none' for unlimited.",
)
@click.option(
    "--pause", "pause", is_flag=True, help="Stop scheduling the tenant; keep its backlog."
)
@click.option("--resume", "resume", is_flag=True, help="Schedule a paused tenant again.")
@_connection_options
def set_policy(
    tenant: str | None,
    default: bool,
    weight: float | None,
    priority: int | None,
    max_backlog: int | _Unset | None,
    max_backlog_cost: int | _Unset | None,
    rate: float | _Unset | None,
    rate_burst: float | None,
    max_concurrency: int | _Unset | None,
    pause: bool,
    resume: bool,
    kafka: KafkaConnection,
    policy_topic: str,
    timeout: float,
) -> None:
    """Change TENANT's policy (or the defaults), keeping the fields not given.

    A tenant without a policy of its own starts from the current defaults.
    """
    key = _key(tenant, default)
    if pause and resume:
        raise click.UsageError("--pause and --resume contradict each other; give one")
    changes: dict[str, Any] = {}
    for name, value in (
        ("weight", weight),
        ("priority", priority),
        ("max_backlog", max_backlog),
        ("max_backlog_cost", max_backlog_cost),
        ("rate_cap", rate),
        ("cap_burst", rate_burst),
        ("max_concurrency", max_concurrency),
    ):
        if value is not None:
            changes[name] = None if value is UNSET else value
    if pause or resume:
        changes["paused"] = pause
    if not changes:
        raise click.UsageError(
            "nothing to set: give at least one of --weight, --priority, --max-backlog, "
            "--max-backlog-cost, --rate, --rate-burst, --max-concurrency, --pause, --resume"
        )
    # Check the values alone before touching the broker, then again merged.
    try:
        DEFAULT_POLICY.replace(**changes)
    except ValueError as exc:
        raise click.UsageError(f"invalid policy: {exc}") from exc

    policies = _read(kafka, policy_topic, timeout)
    current = policies.get(key)
    base = current.policy if current is not None else _defaults(policies)
    try:
        policy = base.replace(**changes)
    except ValueError as exc:
        raise click.UsageError(f"invalid policy: {exc}") from exc
    record = PolicyRecord(
        policy,
        updated_at_ms=now_ms(),
        purge_before_ms=None if current is None else current.purge_before_ms,
    )
    _write(kafka, policy_topic, key, record, timeout)
    _echo_policy(key, record, policy, "default" if key == DEFAULT_POLICY_KEY else "explicit")


@tenants.command("get")
@click.argument("tenant", required=False)
@click.option("--default", "default", is_flag=True, help="Show the defaults instead.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_connection_options
def get_policy(
    tenant: str | None,
    default: bool,
    as_json: bool,
    kafka: KafkaConnection,
    policy_topic: str,
    timeout: float,
) -> None:
    """Show TENANT's effective policy and whether it is its own or the defaults."""
    key = _key(tenant, default)
    policies = _read(kafka, policy_topic, timeout)
    record = policies.get(key)
    if record is not None:
        source = "default" if key == DEFAULT_POLICY_KEY else "explicit"
        policy = record.policy
    else:
        defaults = policies.get(DEFAULT_POLICY_KEY)
        source = "built-in default" if defaults is None else "default"
        policy = _defaults(policies)
        record = defaults
    if as_json:
        click.echo(json.dumps({**_as_dict(key, record, policy), "source": source}))
    else:
        _echo_policy(key, record, policy, source)


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@_connection_options
def list_policies(as_json: bool, kafka: KafkaConnection, policy_topic: str, timeout: float) -> None:
    """List every explicit policy (the defaults first, shown as (default))."""
    policies = _read(kafka, policy_topic, timeout)
    keys = sorted(policies)  # b"" (the defaults) sorts first
    rows = [_as_dict(k, policies[k], policies[k].policy) for k in keys]
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no explicit policies: every tenant has the built-in defaults", err=True)
        return
    columns = [
        ("TENANT", "tenant"),
        ("WEIGHT", "weight"),
        ("PRIORITY", "priority"),
        ("MAX_BACKLOG", "max_backlog"),
        ("MAX_COST", "max_backlog_cost"),
        ("RATE", "rate_cap"),
        ("BURST", "cap_burst"),
        ("PAUSED", "paused"),
        ("CONCURRENCY", "max_concurrency"),
        ("UPDATED", "updated_at"),
    ]
    table = [[h for h, _ in columns]]
    for row in rows:
        cells = [_show(row[name]) for _, name in columns]
        if row["tenant"] is None:
            cells[0] = "(default)"
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    for r in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


@tenants.command("reset")
@click.argument("tenant", required=False)
@click.option("--default", "default", is_flag=True, help="Reset the defaults to built-in.")
@_connection_options
def reset_policy(
    tenant: str | None, default: bool, kafka: KafkaConnection, policy_topic: str, timeout: float
) -> None:
    """Remove TENANT's own policy (a tombstone): it follows the defaults again."""
    key = _key(tenant, default)
    policies = _read(kafka, policy_topic, timeout)
    if key not in policies:
        click.echo(f"{_label(key)} has no explicit policy; nothing written", err=True)
        return
    _write(kafka, policy_topic, key, None, timeout)
    follows = "the built-in defaults" if key == DEFAULT_POLICY_KEY else "the defaults"
    click.echo(f"{_label(key)}: policy removed; it follows {follows}")


@tenants.command("purge")
@click.argument("tenant")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_connection_options
def purge(
    tenant: str, yes: bool, kafka: KafkaConnection, policy_topic: str, timeout: float
) -> None:
    """Move TENANT's records enqueued until now to the dead-letter topic (reason purged).

    Writes the tenant's current policy with purge_before = now; each scheduler instance
    applies it to the backlog it holds. A tenant that followed the defaults gets a copy of
    them as its own policy.
    """
    key = _key(tenant, False)
    if not yes and sys.stdin.isatty():
        click.confirm(
            f"Move every record of {tenant!r} waiting now to the dead-letter topic?",
            abort=True,
        )
    policies = _read(kafka, policy_topic, timeout)
    current = policies.get(key)
    policy = current.policy if current is not None else _defaults(policies)
    now = now_ms()
    record = PolicyRecord(policy, updated_at_ms=now, purge_before_ms=now)
    _write(kafka, policy_topic, key, record, timeout)
    click.echo(f"{tenant}: purge requested for records enqueued at or before {_iso(now)}")
    if current is None:
        click.echo(
            f"note: {tenant} had no policy of its own and now has a copy of the defaults; "
            f"`fairstream tenants reset {tenant}` makes it follow the defaults again",
            err=True,
        )
