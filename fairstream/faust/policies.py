"""``fairstream.faust.PolicyTable``: the tenant policies, readable from a Faust app.

A read-only mapping, tenant id -> ``TenantPolicy``, of what the compacted policy topic
says now: a task of the app's worker reads every partition from the beginning (no consumer
group, nothing committed, read_committed) and then follows the topic, as a Faust
GlobalTable follows its changelog. It is not a Faust ``Table`` with a changelog of its own:
writes go through ``fairstream tenants`` (the topic has one writer, and a Faust table would
write its own encoding into it). A tombstone deletes its key (that tenant follows the
defaults again); a value that does not decode is counted in ``errors``, logged and skipped,
as the scheduler does. A read that fails (the broker gone) is logged and started over 5 s
later; the table keeps serving what it had until the new read has caught up.

``table[tenant]`` / ``table.get(tenant)``: the tenant's own policy (the record under its
key); ``table.policy(tenant)``: the policy the scheduler applies, its own or else the
defaults (the record under the empty key, or the built-in ``TenantPolicy()``).
``await table.wait_ready()`` returns once the table has read up to the end offsets it saw
at the start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairstream.config import DEFAULT_POLICY
from fairstream.core.tenant import DEFAULT_POLICY as BUILT_IN_POLICY
from fairstream.core.tenant import TenantPolicy
from fairstream.faust._app import bootstrap_servers, check_app, client_auth
from fairstream.wire.policy import (
    DEFAULT_POLICY_KEY,
    GROUP_KEY_PREFIX,
    PolicyRecord,
    SchemaError,
    decode_policy,
)

__all__ = ["PolicyTable"]

log = logging.getLogger("fairstream.faust")

RETRY_SECONDS = 5.0  # between two looks for a missing topic, and after a failed read


class PolicyTable(Mapping[str, TenantPolicy]):
    """The policy topic as a read-only mapping, followed by a task of ``app``'s worker."""

    def __init__(self, app: faust.App, topic: str = DEFAULT_POLICY) -> None:
        check_app(app, "fairstream.faust.PolicyTable")
        self.app = app
        self.topic = topic
        self.errors = 0  # values that did not decode
        self._records: dict[bytes, PolicyRecord] = {}
        self._ready: asyncio.Event | None = None
        app.task(self._follow)

    # -- the mapping -------------------------------------------------------------------------

    def __getitem__(self, tenant: str) -> TenantPolicy:
        record = self._records.get(tenant.encode("utf-8"))
        if record is None or not tenant:
            raise KeyError(tenant)
        return record.policy

    def __iter__(self) -> Iterator[str]:
        return (k.decode("utf-8") for k in list(self._records) if k != DEFAULT_POLICY_KEY)

    def __len__(self) -> int:
        return len(self._records) - (DEFAULT_POLICY_KEY in self._records)

    @property
    def defaults(self) -> TenantPolicy:
        """The defaults record's policy, or the built-in one when there is none."""
        record = self._records.get(DEFAULT_POLICY_KEY)
        return BUILT_IN_POLICY if record is None else record.policy

    def policy(self, tenant: str) -> TenantPolicy:
        """The policy the scheduler applies to ``tenant``: its own, else the defaults."""
        own = self.get(tenant)
        return self.defaults if own is None else own

    def record(self, tenant: str) -> PolicyRecord | None:
        """The tenant's whole record (update time, purge request), or None."""
        return self._records.get(tenant.encode("utf-8")) if tenant else None

    def _event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    @property
    def ready(self) -> bool:
        """True once the table has read what the topic held when the worker started."""
        return self._ready is not None and self._ready.is_set()

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until ``ready`` (raises TimeoutError after ``timeout`` s)."""
        await asyncio.wait_for(self._event().wait(), timeout)

    # -- following the topic -----------------------------------------------------------------

    def apply(
        self,
        key: bytes | None,
        value: bytes | None,
        into: dict[bytes, PolicyRecord] | None = None,
    ) -> None:
        """Apply one record of the topic to the table (or to ``into``, a rebuild's)."""
        records = self._records if into is None else into
        if key is None:
            self.errors += 1
            log.warning("policy topic %s: a record without a key, skipped", self.topic)
            return
        if key.startswith(GROUP_KEY_PREFIX):
            return  # a tenant group's policy (``fairstream groups``), not a tenant's
        if value is None:
            records.pop(key, None)
            return
        try:
            records[key] = decode_policy(value)
        except SchemaError as exc:
            self.errors += 1
            log.warning("policy topic %s: the value under %r skipped: %s", self.topic, key, exc)

    async def _follow(self) -> None:
        """Read the topic for as long as the worker runs; start over after a failure."""
        while True:
            try:
                await self._read()
            except Exception as exc:  # the client's errors: never stop following silently
                log.error(
                    "policy topic %s: reading failed (%r); the table keeps what it has and "
                    "reads the topic again in %g s",
                    self.topic,
                    exc,
                    RETRY_SECONDS,
                )
                await asyncio.sleep(RETRY_SECONDS)

    async def _read(self) -> None:
        """Read every partition from the beginning into a fresh dict, swap it in once it
        reached the end offsets seen at the start (so a key deleted meanwhile does not
        linger), then apply what follows as it comes."""
        ready = self._event()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers(self.app),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            client_id=f"{self.app.conf.id}-fairstream-policies",
            **client_auth(self.app),
        )
        await consumer.start()
        try:
            partitions = consumer.partitions_for_topic(self.topic)
            while not partitions:
                # Not in the client's metadata yet; aiokafka has no public call that adds a
                # topic to it without subscribing (topics() fetches a copy it does not keep).
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(self.topic)
                if not partitions:
                    log.warning(
                        "policy topic %s not found; looking again in %g s",
                        self.topic,
                        RETRY_SECONDS,
                    )
                    await asyncio.sleep(RETRY_SECONDS)
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            rebuild: dict[bytes, PolicyRecord] | None = {}
            while True:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        self.apply(record.key, record.value, rebuild)
                if rebuild is not None:
                    positions = [await consumer.position(tp) for tp in ends]
                    if all(at >= end for at, end in zip(positions, ends.values(), strict=True)):
                        self._records, rebuild = rebuild, None
                        ready.set()
        finally:
            await consumer.stop()
