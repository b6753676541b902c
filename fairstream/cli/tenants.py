"""``fairstream tenants``: read and change tenant policies on the compacted policy topic.

Every command reads the topic to its end first (``policies.read``), so ``set`` merges into
what is there now. A tenant with no record of its own follows the defaults (the record under
the empty key, or the built-in ``TenantPolicy()`` when there is none). Values are checked
with ``TenantPolicy`` before anything is written: an invalid command writes nothing.

Decisions worth knowing:
- ``set`` on a tenant without a policy copies the current defaults into an explicit policy;
  from then on, changing the defaults no longer changes that tenant (``reset`` undoes it).
- ``purge`` writes the tenant's current policy with ``purge_before`` = now. ``set`` keeps an
  earlier ``purge_before`` so the request survives compaction until the next purge; the
  scheduler acts on a purge time it has not applied yet.
- ``set --group`` puts the tenant in a tenant group (``fairstream groups``); ``set`` and
  ``purge`` keep the group a record names.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from fairstream.cli.policies import (
    POLICY_LINES,
    changes,
    connection_options,
    echo_policy,
    iso,
    merged,
    policy_fields,
    policy_options,
    read,
    table,
    write,
)
from fairstream.config import KafkaConnection
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.wire import check_group, now_ms, tenant_key
from fairstream.wire.policy import DEFAULT_POLICY_KEY, GROUP_KEY_PREFIX, PolicyRecord


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
    if key.startswith(GROUP_KEY_PREFIX):
        return f"group {key[len(GROUP_KEY_PREFIX) :].decode('utf-8', 'replace')}"
    return "(default)" if key == DEFAULT_POLICY_KEY else key.decode("utf-8", "replace")


def _read(kafka: KafkaConnection, topic: str, timeout: float) -> dict[bytes, PolicyRecord]:
    """The tenants' policies and the defaults (not the groups')."""
    policies = read(kafka, topic, timeout, _label)
    return {k: r for k, r in policies.items() if not k.startswith(GROUP_KEY_PREFIX)}


def _defaults(policies: dict[bytes, PolicyRecord]) -> TenantPolicy:
    record = policies.get(DEFAULT_POLICY_KEY)
    return DEFAULT_POLICY if record is None else record.policy


def _as_dict(
    key: bytes, record: PolicyRecord | None, policy: TenantPolicy, own: PolicyRecord | None
) -> dict[str, Any]:
    """The fields shown: ``record``'s (the tenant's own, or the defaults'), and the group
    the tenant's ``own`` record names."""
    tenant = None if key == DEFAULT_POLICY_KEY else key.decode("utf-8", "replace")
    group = None if own is None or tenant is None else own.group
    return {"tenant": tenant, **policy_fields(record, policy), "group": group}


def _echo_policy(
    key: bytes,
    record: PolicyRecord | None,
    policy: TenantPolicy,
    source: str,
    own: PolicyRecord | None,
) -> None:
    click.echo(f"tenant: {_label(key)}")
    click.echo(f"source: {source}")
    fields = _as_dict(key, record, policy, own)
    echo_policy(fields, POLICY_LINES if key == DEFAULT_POLICY_KEY else (*POLICY_LINES, "group"))


@click.group("tenants")
def tenants() -> None:
    """Show and change tenant policies (weight, priority, backlog limits, rate cap,
    concurrency limit, budgets, pause) and the tenant group a tenant is in.

    Policies live on the compacted policy topic, keyed by tenant id; the scheduler applies
    them live. A tenant without a policy of its own follows the defaults (set --default).
    """


@tenants.command("set")
@click.argument("tenant", required=False)
@click.option("--default", "default", is_flag=True, help="Change the defaults instead.")
@policy_options()
@click.option(
    "--group",
    help="Put the tenant in this tenant group (an organisation: its members share the "
    "group's part of the egress; see fairstream groups). Wins over the scheduler's "
    "--tenant-group-separator.",
)
@click.option(
    "--no-group",
    is_flag=True,
    help="Name no group: the tenant follows --tenant-group-separator again, else is in none.",
)
@connection_options
def set_policy(
    tenant: str | None,
    default: bool,
    group: str | None,
    no_group: bool,
    kafka: KafkaConnection,
    policy_topic: str,
    timeout: float,
    **options: Any,
) -> None:
    """Change TENANT's policy (or the defaults), keeping the fields not given.

    A tenant without a policy of its own starts from the current defaults.
    """
    key = _key(tenant, default)
    fields = changes(options)
    if group is not None and no_group:
        raise click.UsageError("--group and --no-group contradict each other; give one")
    if (group is not None or no_group) and default:
        raise click.UsageError("the defaults have no group: give a TENANT with --group")
    if group is not None:
        try:
            check_group(group)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--group") from exc
    if not fields and group is None and not no_group:
        raise click.UsageError(
            "nothing to set: give at least one of --weight, --priority, --max-backlog, "
            "--max-backlog-cost, --rate, --rate-burst, --max-concurrency, --budget, "
            "--no-budgets, --pause, --resume, --group, --no-group"
        )
    policies = _read(kafka, policy_topic, timeout)
    current = policies.get(key)
    base = current.policy if current is not None else _defaults(policies)
    policy = merged(base, fields)
    kept = None if current is None or no_group else current.group
    record = PolicyRecord(
        policy,
        updated_at_ms=now_ms(),
        purge_before_ms=None if current is None else current.purge_before_ms,
        group=group if group is not None else kept,
    )
    write(kafka, policy_topic, key, record, timeout)
    source = "default" if key == DEFAULT_POLICY_KEY else "explicit"
    _echo_policy(key, record, policy, source, record)


@tenants.command("get")
@click.argument("tenant", required=False)
@click.option("--default", "default", is_flag=True, help="Show the defaults instead.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@connection_options
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
    record = own = policies.get(key)
    if record is not None:
        source = "default" if key == DEFAULT_POLICY_KEY else "explicit"
        policy = record.policy
    else:
        defaults = policies.get(DEFAULT_POLICY_KEY)
        source = "built-in default" if defaults is None else "default"
        policy = _defaults(policies)
        record = defaults
    if as_json:
        click.echo(json.dumps({**_as_dict(key, record, policy, own), "source": source}))
    else:
        _echo_policy(key, record, policy, source, own)


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@connection_options
def list_policies(as_json: bool, kafka: KafkaConnection, policy_topic: str, timeout: float) -> None:
    """List every explicit policy (the defaults first, shown as (default))."""
    policies = _read(kafka, policy_topic, timeout)
    keys = sorted(policies)  # b"" (the defaults) sorts first
    rows = [_as_dict(k, policies[k], policies[k].policy, policies[k]) for k in keys]
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no explicit policies: every tenant has the built-in defaults", err=True)
        return
    for row in rows:
        if row["tenant"] is None:
            row["tenant"] = "(default)"
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
        ("BUDGETS", "budgets"),
        ("GROUP", "group"),
        ("UPDATED", "updated_at"),
    ]
    table(columns, rows)


@tenants.command("reset")
@click.argument("tenant", required=False)
@click.option("--default", "default", is_flag=True, help="Reset the defaults to built-in.")
@connection_options
def reset_policy(
    tenant: str | None, default: bool, kafka: KafkaConnection, policy_topic: str, timeout: float
) -> None:
    """Remove TENANT's own policy (a tombstone): it follows the defaults again (and is in
    the group its key convention says, if any)."""
    key = _key(tenant, default)
    policies = _read(kafka, policy_topic, timeout)
    if key not in policies:
        click.echo(f"{_label(key)} has no explicit policy; nothing written", err=True)
        return
    write(kafka, policy_topic, key, None, timeout)
    follows = "the built-in defaults" if key == DEFAULT_POLICY_KEY else "the defaults"
    click.echo(f"{_label(key)}: policy removed; it follows {follows}")


@tenants.command("purge")
@click.argument("tenant")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@connection_options
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
    group = None if current is None else current.group
    record = PolicyRecord(policy, updated_at_ms=now, purge_before_ms=now, group=group)
    write(kafka, policy_topic, key, record, timeout)
    click.echo(f"{tenant}: purge requested for records enqueued at or before {iso(now)}")
    if current is None:
        click.echo(
            f"note: {tenant} had no policy of its own and now has a copy of the defaults; "
            f"`fairstream tenants reset {tenant}` makes it follow the defaults again",
            err=True,
        )
