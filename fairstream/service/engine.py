"""The scheduler service: ingest into durable per-tenant buffers, emit fairly onto egress.

One Faust app is one consumer-group member. Faust owns what it is good at: group
membership, partition assignment, the buffer table (RocksDB, one database per partition),
its changelog topic and its recovery after a restart or rebalance. The hot path is
fairstream's own, on librdkafka:

- the ingest loop reads the ingest partitions this member owns with a confluent-kafka
  consumer, validates each record, and writes it to the buffer of its partition (RocksDB put
  plus changelog record) or to the dead-letter topic. After each batch it records the
  partition's watermark (the last ingest offset handled) in the same changelog, so the
  buffer itself says where ingestion resumes: buffering is exactly-once, whatever crashes;
- the emit loop asks the pure core (weighted DRR + token buckets) which tenant goes next,
  produces that tenant's head record to the egress topic, and pops it from the buffer only
  when the broker acknowledged the send.

Why not a Faust agent on the ingest topic: Faust's per-message stream machinery measured
about 4,500 records/s for an agent that does nothing on this project's 2-core machines, and
about 1,300 with a table write per record, too slow to absorb a burst before quiet tenants'
records queue behind it. Faust assigns partitions of a small internal ``<app>-lease`` topic,
co-partitioned with the ingest topic and the buffer changelog; owning lease partition p
means owning ingest partition p and buffer p.

The buffer table is the truth; the core is a cache of it. On every rebalance both loops
stop and in-flight sends settle; after table recovery the core is rebuilt from the buffers
of the partitions this instance now owns, and ingestion resumes after each watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, defaultdict, deque
from typing import Any, cast

import faust
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from faust.types import TP

from fairstream import contract
from fairstream.adapters.admin import BUFFER_TABLE, changelog_topic, lease_topic
from fairstream.adapters.writer import Writer
from fairstream.config import Settings
from fairstream.core import EgressLimiter, FairScheduler, MonotonicClock, TenantPolicy, percentile
from fairstream.metrics import Metrics
from fairstream.policy import DEFAULT_POLICY_KEY, PolicyRecord, SchemaError, decode_policy
from fairstream.state.envelope import (
    Envelope,
    decode_offset,
    encode_offset,
    parse_record_key,
    peek_cost,
    record_key,
    record_tenant,
    watermark_key,
)

log = logging.getLogger("fairstream.scheduler")

Item = tuple[int, bytes]  # (ingest partition, buffer key)
INGEST_BATCH = 500
WARM_UP = 1.0  # seconds emission may wait for every assigned partition's first fetch
DWELL_TENANTS = 1000  # tenants whose recent dwell times are kept, most recent emitters
DWELL_SAMPLES = 256  # recent dwell times kept per tenant
STAMPED = frozenset({contract.TENANT, contract.ENQUEUED_MS, contract.SCHEDULED_MS})


class SchedulerService:
    """One scheduler instance: the Faust app, its ingest loop and its emit loop.

    Caller: ``fairstream scheduler`` (``run``). Affects: the buffer table and its changelog,
    the egress and dead-letter topics.
    """

    def __init__(self, settings: Settings, partitions: int) -> None:
        self.settings = settings
        self.partitions = partitions
        self.clock = MonotonicClock()
        # Policies from the policy topic; the topic's default key replaces the flags' one.
        self.flag_default = TenantPolicy(max_backlog=settings.max_backlog)
        self.default_policy = self.flag_default
        self.policies: dict[str, TenantPolicy] = {}
        self.pending_purges: dict[str, int] = {}  # tenant -> purge records enqueued up to
        self.applied_purges: dict[str, int] = {}  # the purge time last carried out
        self.policy_reader: Consumer | None = None
        self.core: FairScheduler[Item] = FairScheduler(
            self.clock, quantum=settings.quantum, default_policy=self.default_policy
        )
        self.limiter = EgressLimiter(self.clock, rate=None)
        self.metrics = Metrics()
        self.emitted_by_tenant: dict[str, int] = defaultdict(int)
        # Bounded: the last DWELL_SAMPLES dwell times of the DWELL_TENANTS latest emitters.
        self.dwell_by_tenant: OrderedDict[str, deque[float]] = OrderedDict()
        self.metrics.watch_tenants(self._backlog_by_tenant, lambda: self.emitted_by_tenant)
        # Read at scrape time: setting gauges per record costs more than the record's work.
        self.metrics.backlog.set_function(lambda: len(self.core))
        self.metrics.in_flight.set_function(lambda: self.in_flight)

        self.ready = False  # recovered, assigned and emitting
        self.stopping = False
        self.generation = 0  # bumped on every pause; work begun in an older one is void
        self.assigned: set[int] = set()
        self.watermark: dict[int, int] = {}  # partition -> last ingest offset handled
        self.in_flight = 0
        self._settled = asyncio.Event()  # no egress send awaiting acknowledgement
        self._settled.set()
        self._ingest_idle = asyncio.Event()  # the ingest loop is between batches
        self._ingest_idle.set()
        self._wakeup = asyncio.Event()  # new records, or a reason to look again
        self._ready_event = asyncio.Event()
        self._send_failed: BaseException | None = None
        # Ingest partitions that delivered a record or reached their end since assignment:
        # emission waits for all of them (at most WARM_UP seconds), so that the first
        # decisions after a restart or rebalance see every tenant with a backlog.
        self._heard_from: set[int | None] = set()
        self._ready_since = 0.0

        self.writer = Writer(settings.kafka.librdkafka())
        self.reader: Consumer | None = None
        self.changelog = changelog_topic(settings.app_id)
        self._changelog_acked: dict[int, int] = {}  # partition -> highest acked offset

        self.app = faust.App(
            settings.app_id,
            broker=settings.kafka.faust_brokers(),
            # aiokafka (Faust's consumer, producer and admin) logs in like librdkafka does.
            broker_credentials=settings.kafka.faust_credentials(),
            store="rocksdb://",
            datadir=str(settings.data_dir),
            key_serializer="raw",
            value_serializer="raw",
            topic_partitions=partitions,
            topic_replication_factor=settings.replication_factor,
            topic_disable_leader=True,
            table_standby_replicas=0,
            consumer_auto_offset_reset="earliest",
            # A member killed with -9 holds its partitions until its session expires.
            broker_session_timeout=settings.session_timeout,
            broker_heartbeat_interval=max(0.5, settings.session_timeout / 10),
            consumer_group_instance_id=settings.group_instance_id,
            # Our own aiohttp server serves /healthz, /readyz and /metrics from the start
            # (Faust's web starts only after recovery, and would expose table views).
            web_enabled=False,
            web_tables_enabled=False,
            web_router_enabled=False,
            web_stats_enabled=False,
            web_graph_enabled=False,
            web_metrics_enabled=False,
        )
        self.lease = self.app.topic(
            lease_topic(settings.app_id), partitions=partitions, internal=True
        )
        self.buffers = self.app.Table(
            BUFFER_TABLE, partitions=partitions, key_type=bytes, value_type=bytes
        )
        self.buffers.on_recover(self._on_recovered)
        self.app.on_partitions_revoked.connect(cast(Any, self._on_revoked))
        self.app.on_partitions_assigned.connect(cast(Any, self._on_assigned))
        self.app.on_before_shutdown.connect(cast(Any, self._on_shutdown))
        # The lease topic carries no records; the agent makes Faust subscribe to it.
        self.app.agent(self.lease, name="fairstream.lease")(self._lease_agent)
        self.app.task(self._ingest_loop)
        self.app.task(self._emit_loop)
        self.app.task(self._policy_loop)
        self.app.timer(1.0)(self._persist_changelog_offsets)

    async def start(self) -> None:
        """Start the writer and the ingest reader. Caller: ``run``, before the worker."""
        self.writer.start()
        self.reader = Consumer(
            {
                **self.settings.kafka.librdkafka(),
                # Partitions are assigned by hand after Faust's assignment; the group id is
                # only a label here (progress lives in the buffer watermarks).
                "group.id": f"{self.settings.app_id}.ingest",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                # Bounded prefetch: a quiet tenant's record in another partition is never
                # queued behind more than this much of a noisy tenant's burst.
                "queued.max.messages.kbytes": 512,
                "queued.min.messages": 1000,
                "max.partition.fetch.bytes": 64 * 1024,
                # librdkafka postpones a full partition's next fetch by this much (default
                # 1 s, which starves a consumer that drains its queue quickly).
                "fetch.queue.backoff.ms": 5,
                "fetch.wait.max.ms": 50,
                "enable.partition.eof": True,  # tells the warm-up an empty partition is done
            }
        )

        self.policy_reader = self._open_policy_reader()

    def _open_policy_reader(self) -> Consumer:
        """Every partition of the compacted policy topic, from the beginning, no group."""
        reader = Consumer(
            {
                **self.settings.kafka.librdkafka(),
                "group.id": f"{self.settings.app_id}.policy",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.wait.max.ms": 100,
            }
        )
        topic = self.settings.topics.policy
        metadata = reader.list_topics(topic, timeout=30)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            log.warning("policy topic %s not found: every tenant follows the defaults", topic)
            return reader
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in info.partitions])
        return reader

    async def _lease_agent(self, stream: Any) -> None:
        async for _ in stream:
            pass

    # -- state-store access ------------------------------------------------------------

    def _db(self, partition: int) -> Any:
        # The RocksDB (rocksdict) database of one partition; raw bytes in and out.
        return cast(Any, self.buffers.data)._db_for_partition(partition)

    def _backlog_by_tenant(self) -> dict[str, int]:
        return {t: self.core.backlog(t)[0] for t in self.core.tenants()}

    def _write(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Put (or delete, for None) one buffer entry: local store, then changelog.

        Both go to the partition named: Faust's table API refuses writes from outside
        stream iteration. One idempotent producer keeps a partition's changelog in the
        order of these calls.
        """
        db = self._db(partition)
        if value is None:
            db.delete(key)
        else:
            db.put(key, value)
        self.writer.produce(
            self.changelog, key, value, partition=partition, on_delivery=self._changelog_acked_cb
        )

    def _changelog_acked_cb(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            # Unrecoverable for this instance: stop rather than run on an unlogged store.
            log.critical("buffer changelog write failed: %s; stopping", err)
            self.app._crash(RuntimeError(f"buffer changelog write failed: {err}"))
            return
        partition, offset = msg.partition(), msg.offset()
        if (
            partition is not None
            and offset is not None
            and offset > self._changelog_acked.get(partition, -1)
        ):
            self._changelog_acked[partition] = offset

    async def _persist_changelog_offsets(self) -> None:
        """Tell Faust how far the local store holds the changelog (restarts recover less).

        Safe because every write is put locally before it is produced. Caller: a timer.
        """
        acked, self._changelog_acked = self._changelog_acked, {}
        for partition, offset in acked.items():
            if partition in self.assigned:
                store = cast(Any, self.buffers.data)
                store.set_persisted_offset(TP(self.changelog, partition), offset)

    # -- ingest ------------------------------------------------------------------------

    async def _ingest_loop(self) -> None:
        """Read owned ingest partitions in batches and buffer them. Caller: Faust task."""
        while not self.stopping:
            if not self.ready or self.reader is None:
                await self._ready_event.wait()
                continue
            messages = self.reader.consume(num_messages=INGEST_BATCH, timeout=0)
            if not messages:
                # librdkafka fetches in its own threads; this is only how often we look.
                await asyncio.sleep(0.002)
                continue
            self._ingest_idle.clear()
            try:
                await self._ingest_batch(messages)
            except Exception as exc:
                # A dead letter that cannot be written must not be skipped past: stop, and
                # let a restart resume from the last watermark.
                log.critical("ingest failed: %r; stopping", exc)
                self.app._crash(exc)
                return
            finally:
                self._ingest_idle.set()
            # Yield between batches: the emit loop and the writer's delivery reports share
            # this thread, and a burst must not hold them off until it is all absorbed.
            await asyncio.sleep(0)

    async def _ingest_batch(self, messages: list[Message]) -> None:
        """Buffer or dead-letter each record, then advance the partitions' watermarks.

        A watermark is written only after every record up to it is buffered or its dead
        letter acknowledged, and after the buffer writes in the same changelog partition,
        so recovery never skips a record that was not handled.
        Caller: the ingest loop. Affects: buffers, core, dead-letter topic, watermarks.
        """
        handled: dict[int, int] = {}
        dead_letters: list[asyncio.Future[None]] = []
        pushed = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._heard_from.add(msg.partition())
                else:
                    log.warning("ingest consumer error: %s", err)
                continue
            partition, offset = msg.partition(), msg.offset()
            self._heard_from.add(partition)
            if partition is None or offset is None or partition not in self.assigned:
                continue
            if offset <= self.watermark.get(partition, -1):
                continue  # already handled before a restart or rebalance
            handled[partition] = offset
            pushed += self._ingest_one(msg, partition, offset, dead_letters)
        if dead_letters:
            await asyncio.gather(*dead_letters)
        for partition, offset in handled.items():
            if partition in self.assigned:
                self._write(partition, watermark_key(partition), encode_offset(offset))
                self.watermark[partition] = offset
        if pushed:
            self.metrics.ingested.inc(pushed)
            self._wakeup.set()

    def _ingest_one(
        self, msg: Message, partition: int, offset: int, dead_letters: list[asyncio.Future[None]]
    ) -> int:
        key, value = msg.key(), msg.value()
        # confluent-kafka returns headers as a list of (str, bytes | None) pairs.
        headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
        verdict = contract.validate_ingest(key, value, headers)
        if isinstance(verdict, contract.Invalid):
            dead_letters.append(
                self._dead_letter(key, value, headers, verdict.reason, verdict.detail)
            )
            return 0
        decision = self.core.admit(verdict.tenant, verdict.cost)
        if not decision.accepted:
            dead_letters.append(
                self._dead_letter(
                    key,
                    value,
                    headers,
                    decision.reason or contract.BACKLOG_FULL,
                    decision.detail or "",
                )
            )
            return 0
        now_ms = _now_ms()
        if verdict.deadline_ms is not None and now_ms > verdict.deadline_ms:
            dead_letters.append(
                self._dead_letter(
                    key,
                    value,
                    headers,
                    contract.EXPIRED,
                    f"the deadline {verdict.deadline_ms} passed "
                    f"{now_ms - verdict.deadline_ms} ms before the record was buffered",
                )
            )
            return 0
        kind, timestamp = msg.timestamp()
        envelope = Envelope(
            enqueued_ms=timestamp if kind != 0 and timestamp > 0 else now_ms,
            deadline_ms=verdict.deadline_ms,
            cost=verdict.cost,
            partition=partition,
            request_id=verdict.request_id
            or contract.default_request_id(self.settings.topics.ingest, partition, offset),
            headers=headers,
            value=value or b"",
        )
        buffer_key = record_key(cast(bytes, key), offset)
        self._write(partition, buffer_key, envelope.encode())
        self.core.push(verdict.tenant, (partition, buffer_key), verdict.cost)
        return 1

    def _dead_letter(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: contract.Headers,
        reason: str,
        detail: str,
    ) -> asyncio.Future[None]:
        """Write a dead letter; the future resolves when the broker acknowledged it."""
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if delivered.done():
                return
            if err is None:
                self.metrics.dead_letters.labels(reason).inc()
                delivered.set_result(None)
            else:
                delivered.set_exception(RuntimeError(f"dead-letter write failed: {err}"))

        self.writer.produce(
            self.settings.topics.dlq,
            key,
            value,
            headers=contract.dead_letter_headers(headers, reason, detail),
            on_delivery=on_delivery,
        )
        log.info("dead letter: %s: %s", reason, detail)
        return delivered

    # -- rebalancing -------------------------------------------------------------------

    async def _on_revoked(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        """Stop both loops and let in-flight sends settle before partitions change hands."""
        self.metrics.rebalances.inc()
        await self._pause("rebalance")

    async def _on_assigned(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        # Recovery follows; both loops stay paused until _on_recovered rebuilds the core.
        await self._pause("assignment")

    async def _pause(self, why: str) -> None:
        self.ready = False
        self.metrics.ready.set(0)
        self._ready_event.clear()
        self.generation += 1
        self._wakeup.set()
        timeout = float(self.app.conf.broker_session_timeout) * 0.5
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ingest_idle.wait(), timeout)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)
        with contextlib.suppress(Exception):
            await self.writer.flush(timeout)
        await self._persist_changelog_offsets()
        if self.reader is not None:
            self.reader.unassign()
        log.info("paused (%s); %d egress sends still in flight", why, self.in_flight)

    async def _on_recovered(self) -> None:
        """Rebuild the core from the recovered buffers, then resume ingesting and emitting.

        Caller: Faust, after table recovery completes (after each rebalance).
        Affects: the core, the watermarks, the ingest assignment, the egress rate share.
        """
        ours = {lease_topic(self.settings.app_id), self.changelog}
        actives = {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic in ours}
        self._rebuild(actives)
        if self.reader is not None:
            self.reader.assign(
                [
                    TopicPartition(
                        self.settings.topics.ingest,
                        p,
                        self.watermark[p] + 1 if p in self.watermark else OFFSET_BEGINNING,
                    )
                    for p in sorted(actives)
                ]
            )
        self._heard_from = set()
        self._ready_since = time.monotonic()
        self.ready = True
        self.metrics.ready.set(1)
        self._ready_event.set()
        self._wakeup.set()

    def _rebuild(self, partitions: set[int]) -> None:
        started = time.monotonic()
        self.assigned = partitions
        core = self._new_core()
        self.watermark = {}
        records = 0
        for partition in sorted(partitions):
            db = self._db(partition)
            wm = db.get(watermark_key(partition))
            if wm is not None:
                self.watermark[partition] = decode_offset(wm)
            for key, value in db.items(from_key=b"r"):
                if not key.startswith(b"r"):
                    break
                tenant, _offset = parse_record_key(key)
                core.push(tenant.decode("utf-8"), (partition, key), peek_cost(value))
                records += 1
        self.core = core
        self._apply_rate_share()
        self.metrics.assigned.set(len(partitions))
        log.info(
            "rebuilt %d buffered records of %d tenants from partitions %s in %.2f s",
            records,
            sum(1 for _ in core.tenants()),
            sorted(partitions),
            time.monotonic() - started,
        )

    def _new_core(self) -> FairScheduler[Item]:
        core: FairScheduler[Item] = FairScheduler(
            self.clock, quantum=self.settings.quantum, default_policy=self.default_policy
        )
        for tenant, policy in self.policies.items():
            core.set_policy(tenant, policy)
        return core

    def _apply_rate_share(self) -> None:
        """Take the group rate in proportion to the ingest partitions this instance owns.

        The instances' rates and bursts add up to the configured ones. The buckets are
        retuned, never replaced, so tokens spent before a rebalance stay spent: repeated
        rebalances cannot hand out a fresh burst each time.
        """
        share = len(self.assigned) / self.partitions if self.partitions else 0.0
        if share == 0:
            self.metrics.rate_share.set(0)
            return  # nothing to emit; keep the buckets as they are
        rate, cost_rate = self.settings.rate, self.settings.cost_rate
        self.limiter.set_rate(
            None if rate is None else rate * share,
            burst=max(1.0, self.settings.effective_burst * share),
            cost_rate=None if cost_rate is None else cost_rate * share,
        )
        self.metrics.rate_share.set(0 if rate is None else rate * share)

    # -- policies ----------------------------------------------------------------------

    async def _policy_loop(self) -> None:
        """Apply policy-topic records as they come (within ~0.1 s). Caller: Faust task."""
        while not self.stopping:
            reader = self.policy_reader
            messages = reader.consume(num_messages=500, timeout=0) if reader else []
            for msg in messages:
                if msg.error() is None:
                    self._apply_policy(msg.key(), msg.value())
            if self.pending_purges and self.ready:
                await self._run_purges()
            if not messages:
                await asyncio.sleep(0.1)

    def _apply_policy(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one policy record (a tombstone resets to the defaults).

        Caller: the policy loop. Affects: the core's policies (existing backlog included),
        the defaults, pending purges.
        """
        record: PolicyRecord | None = None
        if value is not None:
            try:
                record = decode_policy(value)
            except SchemaError as exc:
                log.error("ignoring policy record for key %r: %s", key, exc)
                self.metrics.policy_errors.inc()
                return
        self.metrics.policy_updates.inc()
        if key == DEFAULT_POLICY_KEY or key is None:
            self.default_policy = record.policy if record else self.flag_default
            self.core.set_default_policy(self.default_policy)
            log.info("default policy: %s", self.default_policy)
            return
        try:
            tenant = key.decode("utf-8")
        except UnicodeDecodeError:
            log.error("ignoring policy record with a key that is not UTF-8: %r", key)
            return
        if record is None:
            self.policies.pop(tenant, None)
            self.core.set_policy(tenant, None)
        else:
            self.policies[tenant] = record.policy
            self.core.set_policy(tenant, record.policy)
            # A policy keeps its last purge time when other fields change: act only on a
            # newer one (after a restart, the replayed one once more, which finds nothing).
            before = record.purge_before_ms
            if before is not None and before > self.applied_purges.get(tenant, -1):
                self.pending_purges[tenant] = before
        log.info("policy of %r: %s", tenant, record.policy if record else "defaults")

    async def _run_purges(self) -> None:
        """Move purged tenants' records (enqueued up to the purge time) to the DLQ.

        Idempotent: a replayed purge finds those records gone. Caller: the policy loop.
        """
        purges, self.pending_purges = self.pending_purges, {}
        for tenant, before_ms in purges.items():
            generation = self.generation
            items = self.core.remove_tenant(tenant)
            purged: list[Item] = []
            letters: list[asyncio.Future[None]] = []
            for partition, key in items:
                raw = self._db(partition).get(key)
                if raw is None:
                    continue
                envelope = Envelope.decode(raw)
                if envelope.enqueued_ms > before_ms:
                    self.core.push(tenant, (partition, key), envelope.cost)
                    continue
                purged.append((partition, key))
                letters.append(
                    self._dead_letter(
                        record_tenant(key),
                        envelope.value,
                        envelope.headers,
                        contract.PURGED,
                        f"tenant {tenant!r} was purged: records enqueued up to {before_ms} "
                        "(epoch ms) moved to the dead-letter topic",
                    )
                )
            await asyncio.gather(*letters)
            if generation != self.generation:
                self.pending_purges.setdefault(tenant, before_ms)  # redo after the rebuild
                continue
            for partition, key in purged:
                self._write(partition, key, None)
            self.applied_purges[tenant] = before_ms
            if purged:
                log.info("purged %d records of tenant %r", len(purged), tenant)

    # -- emission ----------------------------------------------------------------------

    async def _emit_loop(self) -> None:
        """Pace, pick, send; pops happen on acknowledgement. Caller: Faust, as a task."""
        while not self.stopping:
            if not self.ready:
                await self._ready_event.wait()
                continue
            if self._send_failed is not None:
                await self._recover_from_send_failure()
                continue
            if not self._warmed_up():
                await asyncio.sleep(0.005)
                continue
            generation = self.generation
            # Wait for a record token before deciding who goes: a decision taken early would
            # pass over tenants that become active while it waits.
            wait = self.limiter.wait_time(1, 1)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            pick = self.core.pick()
            if pick is None:
                self._wakeup.clear()
                delay = self.core.next_eligible_in()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), delay if delay else 1.0)
                continue
            partition, key = pick.item
            raw = self._db(partition).get(key)
            if raw is None:
                log.warning("buffered record %r vanished before emission", key)
                continue
            envelope = Envelope.decode(raw)
            now_ms = _now_ms()
            if envelope.deadline_ms is not None and now_ms > envelope.deadline_ms:
                await self._expire(pick.tenant, partition, key, envelope, now_ms)
                continue
            # A cost limit can only be checked once the record (its cost) is known.
            while not self.limiter.try_acquire(1, pick.cost):
                await asyncio.sleep(max(self.limiter.wait_time(1, pick.cost), 0.0005))
            while self.in_flight >= self.settings.max_in_flight:
                await asyncio.sleep(0.001)  # acknowledgements arrive via the writer's poll
            if generation != self.generation or not self.ready:
                continue  # paused meanwhile: the record is still buffered, rebuilt anew
            self._send(pick.tenant, partition, key, envelope)
            if self.in_flight % 256 == 0:
                await asyncio.sleep(0)  # let the ingest loop and the writer's poll run

    def _warmed_up(self) -> bool:
        if time.monotonic() - self._ready_since >= WARM_UP:
            return True
        return self.assigned <= self._heard_from

    def _send(self, tenant: str, partition: int, key: bytes, env: Envelope) -> None:
        scheduled_ms = _now_ms()
        # The headers fairstream stamps replace any a producer set under the same names.
        headers = [(n, v) for n, v in env.headers if n not in STAMPED]
        if all(name != contract.REQUEST_ID for name, _ in headers):
            headers.append((contract.REQUEST_ID, env.request_id.encode("utf-8")))
        headers.append((contract.TENANT, tenant.encode("utf-8")))
        headers.append((contract.ENQUEUED_MS, str(env.enqueued_ms).encode()))
        headers.append((contract.SCHEDULED_MS, str(scheduled_ms).encode()))
        self.in_flight += 1
        self._settled.clear()

        def acked(err: KafkaError | None, _msg: Message) -> None:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._settled.set()
            if err is not None:
                log.error("egress send for tenant %r failed: %s", tenant, err)
                self._send_failed = RuntimeError(str(err))
                return
            self._pop(partition, key)
            self.emitted_by_tenant[tenant] += 1
            self.metrics.emitted.inc()
            self.metrics.emitted_cost.inc(env.cost)
            dwell = max(0.0, (scheduled_ms - env.enqueued_ms) / 1000)
            self.metrics.dwell.observe(dwell)
            self._remember_dwell(tenant, dwell)

        self.writer.produce(
            self.settings.topics.egress,
            record_tenant(key),
            env.value,
            headers=headers,
            on_delivery=acked,
        )

    def _remember_dwell(self, tenant: str, dwell: float) -> None:
        samples = self.dwell_by_tenant.get(tenant)
        if samples is None:
            samples = self.dwell_by_tenant[tenant] = deque(maxlen=DWELL_SAMPLES)
            if len(self.dwell_by_tenant) > DWELL_TENANTS:
                self.dwell_by_tenant.popitem(last=False)
        else:
            self.dwell_by_tenant.move_to_end(tenant)
        samples.append(dwell)

    def tenant_stats(self, limit: int = 50) -> dict[str, Any]:
        """A snapshot for ``fairstream top``: the instance, and its busiest tenants.

        Tenants: the ``limit`` largest backlogs plus the ``limit`` latest emitters.
        Caller: the web endpoint ``/tenants``. Affects: nothing.
        """
        backlogged = sorted(
            ((t, *self.core.backlog(t)) for t in self.core.tenants()),
            key=lambda row: row[1],
            reverse=True,
        )[:limit]
        names = [t for t, _, _ in backlogged]
        names += [t for t in reversed(self.dwell_by_tenant) if t not in names][:limit]
        rows = []
        for tenant in names:
            records, cost = self.core.backlog(tenant)
            policy = self.core.policy(tenant)
            samples = self.dwell_by_tenant.get(tenant)
            rows.append(
                {
                    "tenant": tenant,
                    "backlog": records,
                    "backlog_cost": cost,
                    "emitted": self.emitted_by_tenant.get(tenant, 0),
                    "weight": policy.weight,
                    "priority": policy.priority,
                    "paused": policy.paused,
                    "rate_cap": policy.rate_cap,
                    "dwell_p99": percentile(list(samples), 99) if samples else None,
                }
            )
        return {
            "ready": self.ready,
            "partitions": sorted(self.assigned),
            "rate_limit": self.limiter.rate,
            "backlog": len(self.core),
            "emitted": sum(self.emitted_by_tenant.values()),
            "tenants": rows,
        }

    async def _expire(
        self, tenant: str, partition: int, key: bytes, env: Envelope, now_ms: int
    ) -> None:
        await self._dead_letter(
            record_tenant(key),
            env.value,
            env.headers,
            contract.EXPIRED,
            f"deadline {env.deadline_ms} passed {now_ms - (env.deadline_ms or 0)} ms before "
            f"tenant {tenant!r}'s record could be sent",
        )
        self._pop(partition, key)

    def _pop(self, partition: int, key: bytes) -> None:
        """Delete an emitted record from its buffer (store and changelog)."""
        if partition in self.assigned:  # else revoked: its new owner has the record
            self._write(partition, key, None)

    async def _recover_from_send_failure(self) -> None:
        # A failed send leaves its record (and maybe later ones of the same tenant) in the
        # buffer: rebuild the core from the store, which holds exactly what is unsent.
        log.warning("rebuilding the schedule after a failed egress send: %r", self._send_failed)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), 60)
        self._send_failed = None
        self.generation += 1
        self._rebuild(self.assigned)
        await asyncio.sleep(0.5)

    async def _on_shutdown(self, sender: Any, *args: Any, **kwargs: Any) -> None:
        """SIGTERM: stop both loops, wait for in-flight sends; Faust then leaves the group."""
        self.stopping = True
        await self._pause("shutdown")
        await self.writer.stop()
        for reader in (self.reader, self.policy_reader):
            if reader is not None:
                reader.close()
        self.reader = self.policy_reader = None


def _now_ms() -> int:
    return int(time.time() * 1000)
