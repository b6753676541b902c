"""The emitter thread: the fair core, each partition's progress, and exactly-once egress.

It is the only owner of the ``FairScheduler`` core, of every ``PartitionProgress`` and of the
transactional producer, so none of them needs a lock. Its loop:

1. applies what the ingest thread handed over, in order: parsed records (indexed in the
   core, or dead-lettered), assignments, revocations, policy changes;
2. paces with the token buckets, asks the core which tenant goes next, and produces that
   record to egress inside the open transaction (dead letters likewise to the DLQ);
3. every ``--commit-interval`` (or after ``--max-in-flight`` records) commits: the egress
   records, a progress record for each partition with settled ranges above its mark, and
   the marks as the group's offsets, with the group metadata of the member that owns them.
   A member fenced out of its generation cannot commit, so a zombie adds nothing.

An aborted transaction (a failed send, a lost generation) leaves the instance's state ahead
of what is committed: it forgets everything and asks the ingest thread to recover again
from the committed marks (``rewind``). Payloads are held in memory up to
``--buffer-memory`` and read back from the ingest log beyond that (``fetch``).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

from confluent_kafka import KafkaException, Message, TopicPartition

from fairstream import contract
from fairstream.config import Settings
from fairstream.core import FairScheduler, MonotonicClock, Pick, TenantPolicy
from fairstream.core.emission import EmissionRule, Expire, Wait
from fairstream.core.shares import ClassDemand, summarize
from fairstream.metrics import Metrics
from fairstream.scheduler import progress as progress_codec
from fairstream.scheduler.feedback import AdaptiveChange, FeedbackBatch
from fairstream.scheduler.fetch import PayloadFetcher
from fairstream.scheduler.group import ShareChange
from fairstream.scheduler.handoff import (
    Assign,
    Call,
    Handoff,
    Heard,
    Parsed,
    PolicyChange,
    Revoke,
    Stop,
)
from fairstream.scheduler.letters import (
    RECORD_OVERHEAD,
    HeaderList,
    expired_detail,
    fit,
    lost_detail,
    purge_detail,
)
from fairstream.scheduler.observe import Observed
from fairstream.scheduler.policies import Policies
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.recovery import progress_topic
from fairstream.scheduler.transaction import Aborted, FatalError, Transaction

log = logging.getLogger("fairstream.emitter")

# (partition, offset, enqueued_ms, deadline_ms, message or None (read back), cost)
Entry = tuple[int, int, int, int | None, Message | None, int]

STAMPED = frozenset({contract.TENANT, contract.ENQUEUED_MS, contract.SCHEDULED_MS})
APPLY_BATCH = 4096  # handed-over items applied between two rounds of emission
EMIT_BATCH = 256  # picks between two looks at the handoff queue
WARM_UP = 1.0  # seconds emission may wait for every new partition's first fetch
RENEW_EVERY = 60.0  # seconds: a broken producer is replaced at most this often


@dataclass(frozen=True)
class Limits:
    """Bytes a record may have on the egress and dead-letter topics (max.message.bytes)."""

    egress: int = 1_048_588
    dlq: int = 1_048_588


def footprint(msg: Message) -> int:
    """Memory a held payload costs, roughly: the value (``len(msg)``), the key (at most 255
    bytes), the objects, and the headers when there are some."""
    headers = msg.headers()
    size = 456 + len(msg)
    if headers:
        size += 64 * len(headers) + sum(len(v) for _, v in _headers(msg) if v)
    return size


def _headers(msg: Message) -> list[tuple[str, bytes | None]]:
    # confluent-kafka gives a record's headers as a list of (str, bytes | None) pairs.
    return cast("HeaderList", msg.headers() or [])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Emitter:
    """Runs ``run`` on a thread of its own. Caller: ``SchedulerService``."""

    def __init__(
        self,
        settings: Settings,
        partitions: int,
        handoff: Handoff,
        metrics: Metrics,
        *,
        transactional_id: str,
        limits: Limits,
        group_metadata: Callable[[], Any],
        request_rewind: Callable[[], None],
        on_committed: Callable[[dict[int, int]], None],
    ) -> None:
        self.settings = settings
        self.partitions = partitions
        self.handoff = handoff
        self.metrics = metrics
        self.limits = limits
        self._group_metadata = group_metadata
        self._request_rewind = request_rewind
        self._on_committed = on_committed
        self.ingest_topic = settings.topics.ingest
        self.egress_topic = settings.topics.egress
        self.dlq_topic = settings.topics.dlq
        self.progress_topic = progress_topic(settings.app_id)
        self.clock = MonotonicClock()
        self.policies = Policies(settings, metrics)
        self.core: FairScheduler[Entry] = self.policies.new_core(self.clock)
        # Pacing, cost tokens, expiry, the hold, tenant pauses and the rate share.
        self.rule: EmissionRule[Entry] = EmissionRule(
            self.core,
            self.clock,
            rate=settings.rate,
            burst=settings.effective_burst,
            cost_rate=settings.cost_rate,
            deadline=itemgetter(3),
            on_resume=_resumed,
        )
        self._wait = 0.0  # seconds the rule last said to wait
        self.observed = Observed()
        self.progress: dict[int, PartitionProgress] = {}
        self.queues: dict[int, deque[Parsed]] = {}  # the handoff queues of owned partitions
        self.letters: deque[tuple[str | None, Entry, str, str]] = deque()
        self.fetcher = PayloadFetcher(settings.kafka.librdkafka(), self.ingest_topic)
        config = {
            **settings.kafka.librdkafka(),
            # Our own size check decides what fits (see _emit); librdkafka must not refuse
            # first what the topic accepts.
            "message.max.bytes": max(limits.egress, limits.dlq) + 64 * 1024,
        }
        self._txn_config = (config, transactional_id, settings.transaction_timeout)
        self._renewed_at = -RENEW_EVERY
        self.txn = Transaction(*self._txn_config)
        self.budget = settings.buffer_memory
        self.cached = 0  # bytes of payloads held by entries in the core
        self.joined = False
        self.rewinding = False
        self.stopped = False
        self._warming: set[int] = set()
        self._warm_until = 0.0
        # Group-wide shares (--share-by demand): set by ShareChange from the group thread.
        self.group_shares = settings.share_by == "demand" and (
            settings.rate is not None or settings.cost_rate is not None
        )
        self._fraction: float | None = None
        if self.group_shares:
            self.rule.lease(0.0)  # nothing goes before the group has heard our demand
        # Feedback from the paid API (``feedback``): the adapted rate as a fraction of
        # --rate, applied here when the group does not share by demand.
        self._adaptive = 1.0
        self._txn_emitted: dict[str, int] = {}
        self._txn_cost = 0
        self._txn_letters: dict[str, int] = {}
        self._committed_changes: dict[int, int] = {}
        self._committed_marks: dict[int, int] = {}
        self._seq = 0
        self._token_prefix = transactional_id
        self._next_commit = 0.0
        self._id_prefixes: dict[int, bytes] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def init_transactions(self) -> None:
        self.txn.init()

    @property
    def ready(self) -> bool:
        return self.joined and not self.rewinding and not self.stopped

    @property
    def in_flight(self) -> int:
        return self.txn.records

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.stopped = True
            self.fetcher.close()

    def _run(self) -> None:
        handoff = self.handoff
        interval = self.settings.commit_interval
        max_records = self.settings.max_in_flight
        while True:
            while handoff.controls:
                if self._control(handoff.controls.popleft()):
                    return
            records = handoff.take_records(self.queues, APPLY_BATCH)
            if records:
                self._apply(records)
            now = time.monotonic()
            if now >= self._next_commit or self.txn.records >= max_records:
                self._commit()
                self._next_commit = time.monotonic() + interval
            if self.letters:
                self._send_letters(EMIT_BATCH)
                continue
            if not self._may_emit(now):
                self._idle(0.01)
                continue
            if self._emit_some() == 0 and not handoff.pending(self.queues):
                # Nothing went out: wait as the emission rule says (a token, a capped
                # tenant's token, a hold) or for news, and never past the next commit.
                self._idle(min(self._wait, self._next_commit - now, 0.1))

    def _idle(self, seconds: float) -> None:
        wake = self.handoff.wake
        wake.clear()
        if seconds > 0 and not self.handoff.pending(self.queues):
            wake.wait(seconds)

    def _may_emit(self, now: float) -> bool:
        # The hold, the lease of the group share and tenant pauses are the rule's (next).
        if not self.joined or self.rewinding or not self.progress:
            return False
        return not self._warming or now >= self._warm_until

    # -- applying what the ingest thread handed over -----------------------------------------

    def _apply(self, records: list[Parsed]) -> None:  # noqa: PLR0915 (flat hot path)
        """Index handed-over records in the core, or turn them into dead letters."""
        progress = self.progress
        core = self.core
        letters = self.letters
        budget = self.budget
        warming = self._warming
        pushed = 0
        now = now_ms()
        purges = self.policies.purges
        if self.rewinding:
            return
        # Room left in each tenant's backlog (records, cost) under its policy: worked out
        # once per batch, then counted down, instead of an admission decision per record.
        room: dict[str, list[float]] = {}
        cached = self.cached
        for item in records:
            partition, offset, tenant, cost, deadline, enqueued, msg, invalid = item
            prog = progress.get(partition)
            if prog is None or offset < prog.next:
                continue  # not ours (any more), or already seen
            if warming:
                warming.discard(partition)
            if offset < prog.replay_end and prog.recovered(offset):
                prog.observe(offset)  # settled before the restart
                continue
            if offset == prog.next:
                prog.next = offset + 1
            else:
                prog.observe(offset)  # a gap first (transaction markers, aborted records)
            if invalid is not None or tenant is None:  # the ingest thread sets one of them
                entry: Entry = (partition, offset, enqueued, None, msg, 1)
                reason = invalid.reason if invalid else contract.INVALID_KEY
                letters.append((None, entry, reason, invalid.detail if invalid else ""))
                continue
            if deadline is not None or purges:
                refused = self._refused(tenant, deadline, enqueued, now)
                if refused is not None:
                    entry = (partition, offset, enqueued, deadline, msg, cost)
                    letters.append((tenant, entry, *refused))
                    continue
            left = room.get(tenant)
            if left is None:
                left = room[tenant] = self._room(tenant)
            if left[0] < 1 or left[1] < cost:
                decision = core.admit(tenant, cost)  # the exact reason and sentence
                letters.append(
                    (
                        tenant,
                        (partition, offset, enqueued, deadline, msg, cost),
                        decision.reason or contract.BACKLOG_FULL,
                        decision.detail or "",
                    )
                )
                continue
            left[0] -= 1
            left[1] -= cost
            size = footprint(msg)
            if cached + size <= budget:
                cached += size
                core.push(tenant, (partition, offset, enqueued, deadline, msg, cost), cost)
            else:
                core.push(tenant, (partition, offset, enqueued, deadline, None, cost), cost)
            pushed += 1
        self.cached = cached
        if pushed:
            self.metrics.ingested.inc(pushed)

    def _refused(
        self, tenant: str, deadline: int | None, enqueued: int, now: int
    ) -> tuple[str, str] | None:
        """Why a record is dead-lettered as it is read (expired, purged), if it is."""
        if deadline is not None and now > deadline:
            return contract.EXPIRED, expired_detail(tenant, deadline, now, buffered=False)
        before = self.policies.purges.get(tenant)
        if before is not None and enqueued <= before:
            return contract.PURGED, purge_detail(tenant, before)
        return None

    def _room(self, tenant: str) -> list[float]:
        """Records and cost ``tenant`` may still add to its backlog under its policy."""
        policy = self.core.policy(tenant)
        records, cost = self.core.backlog(tenant)
        return [
            math.inf if policy.max_backlog is None else policy.max_backlog - records,
            math.inf if policy.max_backlog_cost is None else policy.max_backlog_cost - cost,
        ]

    def _control(self, item: Any) -> bool:
        if isinstance(item, Assign):
            self._assign(item)
        elif isinstance(item, Revoke):
            self._revoke(item)
        elif isinstance(item, FeedbackBatch):
            self._feedback(item)
        elif isinstance(item, AdaptiveChange):
            self._adaptive = item.factor
            self.rule.hold(item.hold_until)
            if not self.group_shares:
                self._apply_rate_share()
        elif isinstance(item, ShareChange):
            self._fraction = item.fraction
            self.rule.lease(item.lease_until)
            self._apply_rate_share()
        elif isinstance(item, Heard):
            self._warming.discard(item.partition)
        elif isinstance(item, PolicyChange):
            self.policies.apply(self, item.key, item.value)
        elif isinstance(item, Call):
            try:
                item.result = item.fn()
            except Exception as exc:
                item.error = exc
            item.done.set()
        elif isinstance(item, Stop):
            try:
                self._commit()
            finally:
                self.stopped = True
                self.txn.close()
                item.done.set()
            return True
        return False

    def _assign(self, assign: Assign) -> None:
        if assign.rewind:
            if not self.rewinding:
                return
            self.rewinding = False
            self.progress = {}
            self.queues = {}
        elif self.rewinding:
            return  # the rewind that follows covers these partitions too
        self.joined = True
        self.queues.update(assign.queues)
        for partition, prog in assign.progress.items():
            self.progress[partition] = prog
            self._committed_changes[partition] = prog.changes
            self._committed_marks[partition] = prog.lwm
        if assign.progress:
            self._warming.update(assign.progress)
            self._warm_until = time.monotonic() + WARM_UP
        self._apply_rate_share()
        self.metrics.assigned.set(len(self.progress))

    def _revoke(self, revoke: Revoke) -> None:
        try:
            self.metrics.rebalances.inc()
            gone = set(revoke.partitions)
            if self.rewinding:
                return  # nothing uncommitted; the rewind recovers only what stays ours
            if revoke.lost:
                # The group gave them away already: what is open cannot commit. Abort it and
                # recover the partitions that stay ours from their committed marks.
                if self.txn.open:
                    try:
                        self.txn.abort(f"partitions {sorted(gone)} were lost")
                    except FatalError as exc:
                        self._renew_transaction(exc)
                    self._rewind()
                    return
            else:
                self._commit()
                if self.rewinding:
                    return
            self._drop(gone)
        finally:
            revoke.done.set()

    def _drop(self, gone: set[int]) -> None:
        """Forget the records and progress of partitions no longer ours."""
        for partition in gone:
            self.progress.pop(partition, None)
            self.queues.pop(partition, None)
            self._committed_changes.pop(partition, None)
            self._committed_marks.pop(partition, None)
            self._warming.discard(partition)
            self.fetcher.forget(partition)
        core = self.core
        for tenant in list(core.tenants()):
            entries = core.remove_tenant(tenant)
            for entry in entries:
                if entry[0] in gone:
                    if entry[4] is not None:
                        self.cached -= footprint(entry[4])
                else:
                    core.push(tenant, entry, entry[5])
        held = self.rule.pending
        if held is not None and held.item[0] in gone:
            self.rule.cancel()
            if held.item[4] is not None:
                self.cached -= footprint(held.item[4])
        self.letters = deque(letter for letter in self.letters if letter[1][0] not in gone)
        self._apply_rate_share()
        self.metrics.assigned.set(len(self.progress))

    def _apply_rate_share(self) -> None:
        """Take this instance's share of the group rate: by demand, the fraction the group
        thread computed (``group``); with ``--share-by partitions``, in proportion to the
        ingest partitions owned, times the adapted rate. The rule retunes its buckets."""
        if self.group_shares:
            share = self._fraction or 0.0
        else:
            share = len(self.progress) / self.partitions if self.partitions else 0.0
            share *= self._adaptive  # the group shares include the adapted rate already
        self.rule.set_share(share)
        self.metrics.group_share.set(share)
        rate = self.settings.rate
        self.metrics.rate_share.set(0 if rate is None else rate * share)

    def _feedback(self, batch: FeedbackBatch) -> None:
        """Charge measured costs, pause tenants whose own quota pushed back."""
        core = self.core
        for tenant, declared, cost in batch.charges:
            self.observed.cost(tenant, declared, cost)
            if cost != declared:
                core.charge(tenant, cost - declared)
        now = time.monotonic()
        for tenant, seconds in batch.pauses:
            if self.rule.pause(tenant, seconds, now):
                log.info("tenant %r paused for %.1f s (its upstream quota)", tenant, seconds)

    def set_policy(self, tenant: str, policy: TenantPolicy | None) -> None:
        """Set ``tenant``'s policy in the core, paused while its upstream quota says so.
        Caller: ``Policies.apply``."""
        self.rule.set_policy(tenant, policy)

    def demand(self) -> tuple[dict[int, ClassDemand], tuple[int, ...]]:
        """This instance's demand for the group thread: per class, the backlogged unpaused
        tenants' weights and caps (O(backlogged tenants)), and the partitions owned."""
        core = self.core
        tenants = []
        for tenant in core.tenants():
            policy = core.policy(tenant)
            if not policy.paused:
                tenants.append((policy.priority, policy.weight, policy.rate_cap))
        return summarize(tenants), tuple(sorted(self.progress))

    # -- emission ----------------------------------------------------------------------------

    def _emit_some(self) -> int:
        """Send up to EMIT_BATCH records as the emission rule decides; how many it picked
        (sent or expired). When it says wait, ``self._wait`` tells how long."""
        decide, emit = self.rule.next, self._emit
        max_records = self.settings.max_in_flight
        picked = 0
        for _ in range(EMIT_BATCH):
            stamp = time.time_ns() // 1_000_000  # for the deadline, and the scheduled-ms header
            step = decide(stamp)
            if type(step) is not Pick:
                if type(step) is Wait:
                    self._wait = step.seconds
                    break
                picked += 1
                self._expire(step, stamp)  # type: ignore[arg-type]  # an Expire here
                continue
            picked += 1
            emit(step, stamp)
            if picked % 128 == 0:
                self.txn.producer.poll(0)  # serve delivery reports: a short librdkafka queue
            if self.txn.records >= max_records:
                break
        return picked

    def _expire(self, step: Expire[Entry], stamp: int) -> None:
        tenant, entry, _ = step
        if entry[4] is not None:
            self.cached -= footprint(entry[4])
        detail = expired_detail(tenant, entry[3] or 0, stamp, buffered=True)
        self.letters.append((tenant, entry, contract.EXPIRED, detail))

    def _emit(self, pick: Pick[Entry], stamp: int) -> None:
        tenant, entry, cost = pick
        partition, offset, enqueued, _, msg, _ = entry
        if msg is not None:
            self.cached -= footprint(msg)
        else:
            msg = self.fetcher.get(partition, offset)
            self.metrics.refetches.inc()
            if msg is None:
                self.letters.append((tenant, entry, contract.LOST, lost_detail(partition, offset)))
                return
        key, value, original = msg.key(), msg.value(), msg.headers()
        headers: HeaderList
        size = len(key or b"") + len(value or b"") + RECORD_OVERHEAD
        if original:
            # The headers fairstream stamps replace any a producer set under the same names.
            headers = [(n, v) for n, v in cast("HeaderList", original) if n not in STAMPED]
            size += sum(len(n) + (len(v) if v else 0) for n, v in headers)
            if all(n != contract.REQUEST_ID for n, _ in headers):
                headers.append((contract.REQUEST_ID, self._default_id(partition, offset)))
        else:
            headers = [(contract.REQUEST_ID, self._default_id(partition, offset))]
        if size > self.limits.egress:
            detail = (
                f"the egress record would be about {size} bytes; {self.egress_topic} takes at "
                f"most {self.limits.egress} (max.message.bytes)"
            )
            self.letters.append((tenant, _held(entry, msg), contract.TOO_LARGE, detail))
            return
        headers.append((contract.TENANT, key))
        headers.append((contract.ENQUEUED_MS, b"%d" % enqueued))
        headers.append((contract.SCHEDULED_MS, b"%d" % stamp))
        txn = self.txn
        if txn.open:
            try:  # the common case, inline: this runs once per egress record
                txn.producer.produce(self.egress_topic, value, key, headers=headers)  # type: ignore[arg-type]
                txn.records += 1
            except (BufferError, KafkaException):
                txn.produce(self.egress_topic, value, key, headers)  # retries, or says why
        else:
            txn.produce(self.egress_topic, value, key, headers)
        self.progress[partition].settle(offset)
        emitted = self._txn_emitted
        emitted[tenant] = emitted.get(tenant, 0) + 1
        self._txn_cost += cost
        dwell = (stamp - enqueued) / 1000 if stamp > enqueued else 0.0
        self.metrics.dwell.observe(dwell)
        self.observed.dwell(tenant, dwell)

    def _default_id(self, partition: int, offset: int) -> bytes:
        # contract.default_request_id, built from a cached prefix (once per record).
        prefix = self._id_prefixes.get(partition)
        if prefix is None:
            prefix = self._id_prefixes[partition] = f"{self.ingest_topic}-{partition}-".encode()
        return prefix + b"%d" % offset

    def _send_letters(self, limit: int) -> None:
        for _ in range(min(limit, len(self.letters))):
            tenant, entry, reason, detail = self.letters.popleft()
            self._send_letter(tenant, entry, reason, detail)

    def _send_letter(self, tenant: str | None, entry: Entry, reason: str, detail: str) -> None:
        partition, offset, _enqueued, _deadline, msg, _cost = entry
        if msg is None and reason != contract.LOST:
            msg = self.fetcher.get(partition, offset)
            if msg is None:
                reason, detail = contract.LOST, lost_detail(partition, offset)
        key: bytes | None
        original: list[tuple[str, bytes | None]]
        if msg is None:
            key, value, original = (tenant.encode() if tenant else None), None, []
        else:
            key, value, original = msg.key(), msg.value(), _headers(msg)
        headers = contract.dead_letter_headers(
            original, reason, detail, (self.ingest_topic, partition, offset)
        )
        headers, value = fit(key, value, headers, self.limits.dlq)
        self.txn.produce(self.dlq_topic, value, key, headers)
        prog = self.progress.get(partition)
        if prog is not None:
            prog.settle(offset)
        self._txn_letters[reason] = self._txn_letters.get(reason, 0) + 1
        log.debug("dead letter %d@%d: %s: %s", partition, offset, reason, detail)

    # -- transactions ------------------------------------------------------------------------

    def _commit(self) -> None:
        """Commit the open transaction with the progress it implies (or just new progress).

        Each partition whose progress changed gets its mark committed as the group's offset;
        one with settled ranges above the mark also gets a progress record, tied to the
        offset by a commit token (the offset's metadata).
        """
        if self.rewinding:
            return
        changed = [
            (p, prog)
            for p, prog in self.progress.items()
            if prog.changes != self._committed_changes.get(p)
        ]
        if not self.txn.open and not changed:
            return
        self._seq += 1
        token = f"{self._token_prefix}:{self._seq}"
        offsets: list[TopicPartition] = []
        for partition, prog in changed:
            ranges = prog.ranges()
            if ranges:
                record = progress_codec.encode(token, prog.lwm, ranges)
                self.txn.produce(self.progress_topic, record, b"%d" % partition, None, partition)
            offsets.append(
                TopicPartition(self.ingest_topic, partition, prog.lwm, token if ranges else "")
            )
        started = time.monotonic()
        try:
            self.txn.commit(offsets, self._group_metadata())
        except Aborted:
            self._rewind()
            return
        except FatalError as exc:
            self._renew_transaction(exc)
            self._rewind()
            return
        self.metrics.commit_seconds.observe(time.monotonic() - started)
        self.metrics.transactions.labels("committed").inc()
        for partition, prog in changed:
            self._committed_changes[partition] = prog.changes
            self._committed_marks[partition] = prog.lwm
        emitted = sum(self._txn_emitted.values())
        if emitted:
            self.metrics.emitted.inc(emitted)
            self.metrics.emitted_cost.inc(self._txn_cost)
            self.observed.emitted(self._txn_emitted)
        for reason, count in self._txn_letters.items():
            self.metrics.dead_letters.labels(reason).inc(count)
        self._txn_emitted, self._txn_cost, self._txn_letters = {}, 0, {}
        self._on_committed(dict(self._committed_marks))

    def _renew_transaction(self, exc: FatalError) -> None:
        """A producer that cannot go on (say, after a broker restart its abort is refused):
        a new one with the same transactional id takes over, fencing the old one, and what
        was open is read again. Fenced by another process with our id: that is fatal."""
        now = time.monotonic()
        if exc.fenced or now - self._renewed_at < RENEW_EVERY:
            # Another process has our id (it would be fenced back in turn), or producers
            # keep breaking: exit, and let the orchestrator (or the operator) sort it out.
            raise exc
        self._renewed_at = now
        log.warning("replacing the transactional producer after: %s", exc)
        # init_transactions fences the old producer (same id) and aborts what it left open.
        self.txn = Transaction(*self._txn_config)
        self.txn.init()

    def _rewind(self) -> None:
        """After an abort: forget everything and recover again from what is committed."""
        log.warning("rewinding to the committed progress")
        self.metrics.transactions.labels("aborted").inc()
        self._txn_emitted, self._txn_cost, self._txn_letters = {}, 0, {}
        self.rewinding = True
        self.progress = {}
        self.queues = {}
        self._committed_changes = {}
        self._committed_marks = {}
        self.letters = deque()
        self.core = self.policies.new_core(self.clock)
        self.rule.replace_core(self.core)
        self.cached = 0
        self._warming = set()
        self._request_rewind()

    def purge(self, tenant: str, before_ms: int) -> None:
        """Dead-letter ``tenant``'s buffered records enqueued up to ``before_ms``.
        Caller: ``Policies.apply``; records read later are checked in ``_apply``."""
        kept = 0
        held = self.rule.pending
        if held is not None and held.tenant == tenant and held.item[2] <= before_ms:
            self.rule.cancel()
            self.core.push(tenant, held.item, held.cost)  # dead-lettered just below
        for entry in self.core.remove_tenant(tenant):
            if entry[2] > before_ms:
                self.core.push(tenant, entry, entry[5])
                kept += 1
                continue
            if entry[4] is not None:
                self.cached -= footprint(entry[4])
            self.letters.append((tenant, entry, contract.PURGED, purge_detail(tenant, before_ms)))
        log.info("purge of tenant %r up to %d: %d records kept", tenant, before_ms, kept)

    # -- reads for the web endpoints (run on this thread through Handoff.call) -----------------

    def backlog_by_tenant(self) -> dict[str, int]:
        return {t: self.core.backlog(t)[0] for t in self.core.tenants()}

    def tenant_stats(self, limit: int) -> dict[str, Any]:
        return self.observed.tenant_stats(
            self.core,
            limit,
            ready=self.ready,
            partitions=sorted(self.progress),
            rate_limit=self.rule.rate,
        )

    def policy_of(self, tenant: str) -> TenantPolicy:
        return self.core.policy(tenant)


def _resumed(tenant: str) -> None:
    log.info("tenant %r resumed after its upstream quota's pause", tenant)


def _held(entry: Entry, msg: Message) -> Entry:
    """``entry`` with its payload (read back if it was not held), for a dead letter."""
    return (entry[0], entry[1], entry[2], entry[3], msg, entry[5])
