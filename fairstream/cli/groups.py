"""``fairstream groups``: read and change tenant-group policies on the compacted policy topic.

A tenant group is an organisation of tenants (not a Kafka consumer group): the scheduler
shares the egress by weight among the groups and the ungrouped tenants, then among each
group's members by theirs, so an organisation spreading its load over many tenant ids gets
its group's share, not one share per id. A tenant is in a group by its own policy's group
(``fairstream tenants set TENANT --group GROUP``) or by the scheduler's key convention
(``--tenant-group-separator``: with ``/``, tenant ``acme/alice`` is in group ``acme``).

A group's policy is a ``TenantPolicy`` under the key ``FF 'group:' + id``; the prefix alone
holds every group's default (else the built-in one: weight 1, no caps). Its weight,
priority, backlog limits (over all its members), rate cap and concurrency limit (all its
members together) and pause apply to the group as a whole; a member's own policy orders it
within the group.

As ``fairstream tenants``: every command reads the topic to its end first and ``set``
merges; a group without a policy of its own starts from the groups' default.
"""

from __future__ import annotations

import json
from typing import Any

import click

from fairstream.cli.policies import (
    POLICY_LINES,
    changes,
    connection_options,
    echo_policy,
    merged,
    policy_fields,
    policy_options,
    read,
    table,
    write,
)
from fairstream.config import KafkaConnection
from fairstream.core.tenant import DEFAULT_POLICY, TenantPolicy
from fairstream.wire import now_ms
from fairstream.wire.policy import (
    DEFAULT_POLICY_KEY,
    GROUP_KEY_PREFIX,
    PolicyRecord,
    group_policy_key,
    key_group,
)

_LINES = tuple(name for name in POLICY_LINES if name != "purge_before")


def _key(group: str | None, default: bool) -> bytes:
    if default and group is not None:
        raise click.UsageError("give either GROUP or --default, not both")
    if not default and group is None:
        raise click.UsageError("missing GROUP (or --default for every group's default)")
    try:
        return group_policy_key(None if default else group)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="GROUP") from exc


def _label(key: bytes) -> str:
    group = key_group(key)
    if group is None:
        return "(default)" if key == DEFAULT_POLICY_KEY else key.decode("utf-8", "replace")
    return group or "(default)"


class _Groups:
    """What the policy topic says of groups: their policies and the tenants naming them."""

    def __init__(self, kafka: KafkaConnection, topic: str, timeout: float) -> None:
        self.records: dict[bytes, PolicyRecord] = {}
        self.members: dict[str, list[str]] = {}
        for key, record in read(kafka, topic, timeout, _label).items():
            if key.startswith(GROUP_KEY_PREFIX):
                self.records[key] = record
            elif key != DEFAULT_POLICY_KEY and record.group is not None:
                self.members.setdefault(record.group, []).append(key.decode("utf-8"))

    @property
    def default(self) -> TenantPolicy:
        record = self.records.get(GROUP_KEY_PREFIX)
        return DEFAULT_POLICY if record is None else record.policy

    def row(self, key: bytes) -> dict[str, Any]:
        """The group's effective policy, where it comes from, and its named members."""
        group = key_group(key) or None
        record = self.records.get(key)
        if record is not None:
            source = "default" if group is None else "explicit"
        else:
            record = self.records.get(GROUP_KEY_PREFIX)
            source = "built-in default" if record is None else "default"
        policy = self.default if record is None else record.policy
        fields = policy_fields(record, policy)
        del fields["purge_before"]  # not a group's
        members = sorted(self.members.get(group, [])) if group is not None else []
        return {"group": group, **fields, "source": source, "members": members}


def _echo(row: dict[str, Any]) -> None:
    click.echo(f"group: {row['group'] or '(default)'}")
    click.echo(f"source: {row['source']}")
    echo_policy(row, _LINES)
    if row["group"] is not None:
        named = ", ".join(row["members"]) or "-"
        click.echo(f"members named by their policies: {named}")


@click.group("groups")
def groups() -> None:
    """Show and change tenant-group policies: the weight, priority, backlog limits, rate
    cap, concurrency limit and pause of a whole group of tenants (an organisation; not a
    Kafka consumer group).

    The egress is shared by weight among groups and ungrouped tenants, then among a group's
    members. A tenant is in a group by its policy (fairstream tenants set TENANT --group
    GROUP) or by the scheduler's --tenant-group-separator. Policies live on the policy
    topic; the scheduler applies them live.
    """


@groups.command("set")
@click.argument("group", required=False)
@click.option("--default", "default", is_flag=True, help="Change every group's default instead.")
@policy_options(group=True)
@connection_options
def set_group(
    group: str | None,
    default: bool,
    kafka: KafkaConnection,
    policy_topic: str,
    timeout: float,
    **options: Any,
) -> None:
    """Change GROUP's policy (or every group's default), keeping the fields not given.

    A group without a policy of its own starts from the groups' default.
    """
    key = _key(group, default)
    fields = changes(options)
    if not fields:
        raise click.UsageError(
            "nothing to set: give at least one of --weight, --priority, --max-backlog, "
            "--max-backlog-cost, --rate, --rate-burst, --max-concurrency, --budget, "
            "--no-budgets, --pause, --resume"
        )
    known = _Groups(kafka, policy_topic, timeout)
    current = known.records.get(key)
    policy = merged(known.default if current is None else current.policy, fields)
    record = PolicyRecord(policy, updated_at_ms=now_ms())
    write(kafka, policy_topic, key, record, timeout)
    known.records[key] = record
    _echo(known.row(key))


@groups.command("get")
@click.argument("group", required=False)
@click.option("--default", "default", is_flag=True, help="Show every group's default instead.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@connection_options
def get_group(
    group: str | None,
    default: bool,
    as_json: bool,
    kafka: KafkaConnection,
    policy_topic: str,
    timeout: float,
) -> None:
    """Show GROUP's effective policy, whether it is its own or the default, and the tenants
    whose policies name it (members by --tenant-group-separator are the scheduler's)."""
    row = _Groups(kafka, policy_topic, timeout).row(_key(group, default))
    if as_json:
        click.echo(json.dumps(row))
    else:
        _echo(row)


@groups.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@connection_options
def list_groups(as_json: bool, kafka: KafkaConnection, policy_topic: str, timeout: float) -> None:
    """List every group the policy topic knows: the groups' default first, then each group
    with a policy of its own or named by a tenant's policy."""
    known = _Groups(kafka, policy_topic, timeout)
    keys = set(known.records) | {group_policy_key(g) for g in known.members}
    rows = [known.row(key) for key in sorted(keys)]  # the prefix alone sorts first
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no tenant groups on the policy topic", err=True)
        return
    for row in rows:
        row["shown"] = row["group"] or "(default)"
        row["named"] = len(row["members"]) if row["group"] is not None else None
    columns = [
        ("GROUP", "shown"),
        ("SOURCE", "source"),
        ("WEIGHT", "weight"),
        ("PRIORITY", "priority"),
        ("MAX_BACKLOG", "max_backlog"),
        ("MAX_COST", "max_backlog_cost"),
        ("RATE", "rate_cap"),
        ("BURST", "cap_burst"),
        ("CONCURRENCY", "max_concurrency"),
        ("BUDGETS", "budgets"),
        ("PAUSED", "paused"),
        ("MEMBERS", "named"),
        ("UPDATED", "updated_at"),
    ]
    table(columns, rows)


@groups.command("reset")
@click.argument("group", required=False)
@click.option("--default", "default", is_flag=True, help="Reset every group's default.")
@connection_options
def reset_group(
    group: str | None, default: bool, kafka: KafkaConnection, policy_topic: str, timeout: float
) -> None:
    """Remove GROUP's own policy (a tombstone): it follows the groups' default again. Its
    members stay in it."""
    key = _key(group, default)
    if key not in _Groups(kafka, policy_topic, timeout).records:
        click.echo(f"{_label(key)} has no explicit policy; nothing written", err=True)
        return
    write(kafka, policy_topic, key, None, timeout)
    follows = "the built-in default" if key == GROUP_KEY_PREFIX else "the groups' default"
    click.echo(f"{_label(key)}: policy removed; it follows {follows}")
