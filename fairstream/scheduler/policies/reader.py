"""Tenant policies, read live from the compacted policy topic and applied by the emitter.

A reader thread follows every partition of the policy topic from the beginning and hands
each record to the emitter (the core's owner) through the handoff queue. Applying a policy
changes the core at once, existing backlog included; a purge moves the tenant's records
enqueued up to the purge time to the dead-letter topic, now and as any such record is read
again later (after a restart the log is read from the low-water mark).

A tenant demoted as noisy (``demotions``) is scheduled under its policy one class down
(``demoted``) until it is promoted: a policy record arriving meanwhile is applied one class
down too, and so is a new default to a demoted tenant that follows it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, NamedTuple, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError

from fairstream.adapters.clients import assigned_consumer_config
from fairstream.config import Settings
from fairstream.core import Clock, Core, TenantPolicy
from fairstream.core.demotion import Change, demoted
from fairstream.scheduler.consumers import assign_when_present
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import PoliciesRead, PolicyChange
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.policies.tenant_groups import GroupAction, TenantGroups
from fairstream.wire.policy import (
    DEFAULT_POLICY_KEY,
    PolicyRecord,
    SchemaError,
    decode_policy,
    key_group,
)

__all__ = ["DefaultPolicy", "Policies", "PolicyAction", "PolicyReader", "Purge", "SetPolicy"]

log = logging.getLogger("fairstream.policies")


class DefaultPolicy(NamedTuple):
    """Every tenant without a policy of its own follows ``policy`` now."""

    policy: TenantPolicy


class SetPolicy(NamedTuple):
    """``tenant`` follows ``policy`` now (None: the defaults)."""

    tenant: str
    policy: TenantPolicy | None


class Purge(NamedTuple):
    """Dead-letter ``tenant``'s buffered records enqueued up to ``before_ms``."""

    tenant: str
    before_ms: int


PolicyAction = DefaultPolicy | SetPolicy | Purge | GroupAction  # (tenant_groups: the groups')


class Policies:
    """The policies in force. Caller: the emitter thread (the only one that touches it)."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.quantum = settings.quantum
        self.metrics = metrics
        self.flag_default = TenantPolicy(max_backlog=settings.max_backlog)
        self.default = self.flag_default
        self.by_tenant: dict[str, TenantPolicy] = {}
        self.purges: dict[str, int] = {}  # tenant -> records enqueued up to this are purged
        self.groups = TenantGroups(settings.tenant_group_separator)
        self.demoted: set[str] = set()  # tenants demoted as noisy (``demotions``)

    def new_core(self, clock: Clock) -> Core[Any]:
        """The core as the policies say: flat, or of tenant groups (``tenant_groups``);
        demoted tenants one class down."""
        core = self.groups.new_core(clock, self.quantum, self.default)
        for tenant in self.by_tenant:
            core.set_policy(tenant, self.effective(tenant))
        for tenant in self.demoted - self.by_tenant.keys():
            core.set_policy(tenant, self.effective(tenant))
        return core

    def effective(self, tenant: str) -> TenantPolicy | None:
        """The policy ``tenant`` is scheduled under: its own (None: the default's), one
        class down while it is demoted."""
        own = self.by_tenant.get(tenant)
        if tenant in self.demoted:
            return demoted(self.default if own is None else own)
        return own

    def demotion(self, change: Change) -> list[PolicyAction]:
        """Take in a demotion or a promotion (``Demotions.review``); what the emitter must
        do in the core for it. Caller: the emitter."""
        if change.demote:
            self.demoted.add(change.tenant)
        else:
            self.demoted.discard(change.tenant)
        return [SetPolicy(change.tenant, self.effective(change.tenant))]

    def apply(self, key: bytes | None, value: bytes | None) -> list[PolicyAction]:
        """Take in one policy record (a tombstone resets the tenant to the defaults); what
        the emitter must do in the core for it, in order. Caller: the emitter."""
        record: PolicyRecord | None = None
        if value is not None:
            try:
                record = decode_policy(value)
            except SchemaError as exc:
                log.error("ignoring policy record for key %r: %s", key, exc)
                self.metrics.policy_errors.inc()
                return []
        self.metrics.policy_updates.inc()
        if key == DEFAULT_POLICY_KEY or key is None:
            self.default = record.policy if record else self.flag_default
            log.info("default policy: %s", self.default)
            # Demoted tenants that follow the default follow it one class down.
            followers = sorted(self.demoted - self.by_tenant.keys())
            return [
                DefaultPolicy(self.default),
                *(SetPolicy(t, self.effective(t)) for t in followers),
            ]
        group = key_group(key)
        if group is not None:  # a group's, or the groups' default ("")
            return [*self.groups.group_record(group, record)]
        try:
            tenant = key.decode("utf-8")
        except UnicodeDecodeError:
            log.error("ignoring policy record with a key that is not UTF-8: %r", key)
            return []
        actions: list[PolicyAction] = []
        if record is None:
            self.by_tenant.pop(tenant, None)
        else:
            self.by_tenant[tenant] = record.policy
        actions.append(SetPolicy(tenant, self.effective(tenant)))  # demoted: one class down
        if record is not None:
            before = record.purge_before_ms
            # A policy keeps its last purge time when other fields change: a purge is the
            # same whenever it is applied again, so applying it again is harmless.
            if before is not None and before > self.purges.get(tenant, -1):
                self.purges[tenant] = before
                actions.append(Purge(tenant, before))
        log.info("policy of %r: %s", tenant, record.policy if record else "defaults")
        actions.extend(self.groups.tenant_record(tenant, record))
        return actions


class PolicyReader:
    """Follows the policy topic on a thread of its own; hands records to the emitter.

    ``run`` returns only once stopped; an error ends it with the exception, and the
    service's supervisor runs it again (``supervise``): each run opens a consumer of its
    own and reads the topic from the beginning again (applying a policy twice is harmless).
    """

    def __init__(self, settings: Settings, handoff: Handoff) -> None:
        self.topic = settings.topics.policy
        self.handoff = handoff
        self._stopping = threading.Event()
        self._config = assigned_consumer_config(
            settings.kafka.librdkafka(),
            f"{settings.app_id}.policy",
            # The end of each partition is said once reached: the first time all of them
            # are, every policy recorded before the start has been handed over.
            {"fetch.wait.max.ms": 100, "enable.partition.eof": True},
        )
        self._told = False  # PoliciesRead was handed over (once per process)

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        consumer = Consumer(self._config)
        try:
            if not assign_when_present(
                consumer, self.topic, OFFSET_BEGINNING, self._stopping, self._missing
            ):
                return
            unread = {tp.partition for tp in consumer.assignment()}
            while not self._stopping.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.1):
                    err = msg.error()
                    if err is None:
                        self.handoff.put(PolicyChange(msg.key(), msg.value()))
                    elif err.code() == KafkaError._PARTITION_EOF and unread:
                        unread.discard(cast(int, msg.partition()))
                        if not unread:
                            self._read()
        finally:
            consumer.close()

    def _read(self) -> None:
        """Every policy recorded before the start is handed over (after them, in order)."""
        if not self._told:
            self._told = True
            self.handoff.put(PoliciesRead())

    def _missing(self) -> None:
        log.warning(
            "policy topic %s not found: every tenant follows the defaults until it exists "
            "(fairstream topics create)",
            self.topic,
        )
        self._read()  # nothing to wait for
