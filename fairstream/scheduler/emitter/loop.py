"""The emitter thread: the fair core, each partition's progress, and exactly-once egress.

It is the only owner of the ``FairScheduler`` core, of every ``PartitionProgress`` and of the
transactional producer, so none of them needs a lock. Its loop:

1. applies what the ingest thread handed over, in order: parsed records (indexed in the
   core, or dead-lettered), assignments, revocations, policy changes;
2. asks the emission rule (``fairstream.core.emission``: pacing, the fair pick, cost
   tokens, expiry, the hold and the rate share) what next, and produces the record it picks
   to egress inside the open transaction (``send``; ``egress`` builds the record);
   ``backlog`` indexes what is handed over and sends dead letters to the DLQ in the same
   transaction;
3. every ``--commit-interval`` (or after ``--max-in-flight`` records) commits: the egress
   records, a progress record for each partition with settled ranges above its mark, and
   the marks as the group's offsets (``checkpoint``), with the group metadata of the member
   that owns them.
   A member fenced out of its generation cannot commit, so a zombie adds nothing. The
   metadata is the one the last ``Assign`` or ``Revoke`` carried, never one read at commit
   time (that could be a newer generation's, in which the partitions are another member's;
   see ``ingest.member``). While the broker commits, the next records are picked and stamped
   (``Sender.prepare``).

An aborted transaction (a failed send, a lost generation) leaves the instance's state ahead
of what is committed: it forgets everything and asks the ingest thread to recover again
from the committed marks (``rewind``). Payloads are held in memory up to
``--buffer-memory`` and read back from the ingest log beyond that (``fetch``).

Its parts own their state and never import it: ``backlog.Backlog`` (what waits in the core
and its payload bytes, the dead letters, ``holding.Parking``), ``send.Sender`` (picks,
stamps, inline produce, the records prepared during a commit), ``checkpoint.Checkpoint``
(the open transaction's tallies, each partition's committed progress, commit tokens and
progress records), ``pacing.Pacing`` (the rule's shares, the paid API's feedback) and,
with ``--demote-share`` or ``--demote-backlog``, ``demotions.Demotions`` (noisy tenants,
fed per commit, reviewed a few times a second, their policies one class down). They
share the rule (whose core a rewind replaces), the progress dict and the fetcher, none of
which the emitter replaces, and read one clock, the service's (``RecordClock``).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fairstream.config import Settings
from fairstream.config.topics import holding_topic, progress_topic
from fairstream.core import Core, RecordClock, TenantPolicy
from fairstream.core.shares import backlogged_demand
from fairstream.scheduler import faults
from fairstream.scheduler.emitter.backlog import Backlog
from fairstream.scheduler.emitter.budgets import (
    budget_rows,
    exchanged,
    group_spend,
    tenant_budgets,
)
from fairstream.scheduler.emitter.checkpoint import Checkpoint
from fairstream.scheduler.emitter.demotions import Demotions, mark_demoted, with_demotion
from fairstream.scheduler.emitter.egress import Limits
from fairstream.scheduler.emitter.fetch import PayloadFetcher
from fairstream.scheduler.emitter.pacing import Pacing, new_rule
from fairstream.scheduler.emitter.send import Sender
from fairstream.scheduler.emitter.spill import Spill
from fairstream.scheduler.emitter.transaction import (
    Aborted,
    Renewal,
    Transaction,
    transaction_config,
)
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import (
    AdaptiveChange,
    Assign,
    Call,
    ConcurrencyChange,
    FeedbackBatch,
    Heard,
    InstanceDemand,
    LagChange,
    PoliciesRead,
    PolicyChange,
    Revoke,
    ShareChange,
    Stop,
)
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.observe import Observed, Reused, Scrape
from fairstream.scheduler.policies.reader import DefaultPolicy, Policies, PolicyAction, SetPolicy
from fairstream.scheduler.policies.tenant_groups import GROUP_ACTIONS, act
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.recent import RecentRequests
from fairstream.scheduler.records import Parsed
from fairstream.scheduler.recovery import holding_id
from fairstream.scheduler.supervise import FatalError

__all__ = ["Emitter", "Limits"]  # Limits: fairstream.scheduler.emitter.egress's

log = logging.getLogger("fairstream.emitter")


APPLY_BATCH = 4096  # handed-over items applied between two rounds of emission
LETTER_BATCH = 1024  # dead letters sent between two rounds of emission
WARM_UP = 1.0  # seconds emission may wait for every new partition's first fetch


@dataclass(frozen=True)
class Phase:
    """Where the emitter is: joined (its first assignment applied), rewinding (after an
    abort, until the ingest thread hands the partitions over again), stopped, and whether
    the policies recorded before the start were read (``PoliciesRead``). Ready when joined
    with the policies read, neither rewinding nor stopped."""

    joined: bool = False
    rewinding: bool = False
    stopped: bool = False
    policies_read: bool = True

    @property
    def ready(self) -> bool:
        return self.joined and self.policies_read and not self.rewinding and not self.stopped


def idle_seconds(
    now: float, wait: float, paced: bool, holding: int, soonest: float, interval: float
) -> float:
    """How long an emitter that sent nothing waits: as the emission rule says (``wait``: a
    token, a capped tenant's token, a hold; ``math.inf``: for news), at most 0.1 s, and
    never past the next commit.

    That commit is the soonest one (``soonest``, a fifth of the interval) only while
    emission is ``paced`` and the transaction is ``holding`` records: the only time the
    loop takes it. Else it is the interval's (``interval``). Waiting for news, the emitter
    once waited for the soonest commit with records in the transaction, found it passed,
    and so waited not at all: it spun until the interval's commit, at 70% of a core while
    16 records/s arrived."""
    commit = soonest if paced and holding else interval
    return min(wait, commit - now, 0.1)


class Emitter:
    """Runs ``run`` on a thread of its own. Caller: ``SchedulerService``."""

    def __init__(
        self,
        settings: Settings,
        partitions: int,
        handoff: Handoff,
        metrics: Metrics,
        *,
        clock: RecordClock,
        transactional_id: str,
        limits: Limits,
        request_rewind: Callable[[], None],
        on_committed: Callable[[dict[int, int] | None, dict[int, int] | None], None],
        recent: RecentRequests | None = None,
        token_prefix: str | None = None,
        transaction: Callable[..., Transaction] = Transaction,
        fetcher: Callable[..., PayloadFetcher] = PayloadFetcher,
        wait_for_policies: bool = False,
    ) -> None:
        """``wait_for_policies``: emit nothing until a ``PoliciesRead`` arrives (the service's
        emitter, beside a policy reader; a test driving the emitter alone has none)."""
        self.settings = settings
        self.partitions = partitions
        self.handoff = handoff
        self.metrics = metrics
        self.limits = limits
        # The group metadata of the generation the partitions were handed over in.
        self._metadata: Any = None
        self._request_rewind = request_rewind
        self._on_committed = on_committed
        self.ingest_topic = settings.topics.ingest
        self.egress_topic = settings.topics.egress
        self.dlq_topic = settings.topics.dlq
        self.progress_topic = progress_topic(settings.app_id)
        self.holding_topic = holding_topic(settings.app_id)
        self.clock = clock  # the one clock: the rule's, the core's, the parts', the fetcher's
        self.policies = Policies(settings, metrics)
        # Pacing, cost tokens, expiry, the hold, tenant pauses and the rate share.
        self.rule = new_rule(settings, self.policies.new_core(clock), clock)
        self.observed = Observed()
        # Reads over every backlogged tenant, for /metrics and the group thread.
        self._scrapes = Reused(self._scrape, clock)
        self._demands = Reused(self._demand, clock)
        # Per owned ingest partition p, its progress under p and its holding log's under
        # holding_id(p) (negative; ``holding``): ``owned`` lists the partitions.
        self.progress: dict[int, PartitionProgress] = {}
        self._owned: tuple[int, ...] = ()  # published: see ``owned``
        self.queues: dict[int, deque[Parsed]] = {}  # the handoff queues of owned partitions
        self.fetcher = fetcher(
            settings.kafka.librdkafka(), self.ingest_topic, self.holding_topic, clock
        )
        config = transaction_config(settings.kafka.librdkafka(), max(limits.egress, limits.dlq))
        made_with = (config, transactional_id, settings.transaction_timeout)
        self.producers = Renewal(transaction, made_with, clock.now)
        self.txn = self.producers.first()
        # Replaced whole at each change: /readyz reads it from the web threads.
        self.phase = Phase(policies_read=not wait_for_policies)
        self.warming: set[int] = set()  # partitions whose first fetch emission waits for
        self._warm_until = 0.0
        # The rule's shares of the group's rate and concurrency, and the API's feedback.
        self.pacing = Pacing(settings, partitions, self.rule, metrics)
        self.slots_counted = self.pacing.counts_slots()  # published each round
        self.startup_window = self.pacing.startup_limit()  # published each round
        self.group_shares = self.pacing.group_shares
        self.demotions = Demotions.of(settings, clock, metrics)  # --demote-*; None: off
        self._next_commit = 0.0
        self._soonest_commit = 0.0  # when a waiting emitter may commit (see _run)
        self._stop_cause: str | None = None  # the ingest thread's failure that stopped it
        self._budget_waits = 0  # the rule's budget waits counted in the metrics so far
        # The open transaction's tallies and each partition's committed progress.
        prefix = token_prefix or f"{transactional_id}:{os.urandom(4).hex()}"
        self.checkpoint = Checkpoint(
            metrics,
            self.observed,
            ingest_topic=self.ingest_topic,
            progress_topic=self.progress_topic,
            token_prefix=prefix,
            ledger=self.rule.ledger,
        )
        # What waits (the core's payload bytes, dead letters, parking) and what sends: each
        # holds the rule, the live progress and the fetcher, and owns its own state.
        # Tenants so far behind that their records wait in the ingest log (``spill``).
        self.spill = Spill(settings.index_ahead, handoff, self.fetcher, self.rule)
        metrics.in_log.set_function(lambda: self.spill.waiting)  # an int, read whole
        self.backlog = Backlog(
            settings,
            self.rule,
            self.progress,
            self.fetcher,
            self.checkpoint,
            metrics,
            clock,
            warming=self.warming,
            purges=self.policies.purges,
            dlq_limit=limits.dlq,
            spill=self.spill,
        )
        self.sender = Sender(
            settings,
            self.rule,
            self.progress,
            self.backlog,
            self.checkpoint,
            self.fetcher,
            metrics,
            clock,
            egress_limit=limits.egress,
            recent=recent,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def init_transactions(self) -> None:
        self.txn.init()

    @property
    def owned(self) -> tuple[int, ...]:
        """The ingest partitions owned, sorted (``progress`` also holds their holding logs).
        Published by the emitter as a new tuple whenever they change (``_publish_owned``), so
        other threads (feedback, group) read a snapshot, never the live dict."""
        return self._owned

    def _publish_owned(self) -> None:
        self._owned = tuple(sorted(p for p in self.progress if p >= 0))

    @property
    def core(self) -> Core[Parsed]:
        """The fair core in use (the rule's; replaced on a rewind)."""
        return self.rule.core

    @property
    def in_flight(self) -> int:
        return self.txn.records

    def run(self) -> None:
        try:
            while True:
                try:
                    self._run()
                    break
                except FatalError as exc:
                    # A produce mid-round met a broken or expired producer (the commit and
                    # abort paths renew it themselves): renew it, or exit if it cannot be.
                    self._renew_transaction(exc)
                    self._rewind()
            if self._stop_cause is not None:
                raise FatalError(self._stop_cause)
        finally:
            self.phase = replace(self.phase, stopped=True)
            self.fetcher.close()

    def _run(self) -> None:
        handoff, clock = self.handoff, self.clock
        backlog, sender = self.backlog, self.sender
        interval = self.settings.commit_interval
        # While emission is paced (it waits on the rate, a cap or a hold), the emitter has
        # time to spare: a transaction holding records commits after a fifth of the
        # interval, so what went out becomes visible sooner. Unpaced (no rate limit, or
        # waiting for records), it commits every interval or at --max-in-flight records:
        # there, more commits would cost throughput (measured: about 10% end to end).
        soonest = interval / 5
        max_records = self.settings.max_in_flight
        pacing = self.pacing
        counts_slots = pacing.counts_slots
        while True:
            # Published for the feedback thread (a bool, replaced whole): hand completions
            # over only while slots are counted.
            self.slots_counted = counts_slots()
            self.startup_window = pacing.startup_limit()
            while handoff.controls:
                if self._control(handoff.controls.popleft()):
                    return
            records = handoff.take_records(self._taken(), APPLY_BATCH)
            if records:
                self._apply(records)
            if self.spill.active:
                self._read_again()
            now = clock.now()
            txn_records = self.txn.records
            if (
                now >= self._next_commit
                or txn_records >= max_records
                or (sender.paced and txn_records and now >= self._soonest_commit)
            ):
                # Unpaced, the next records are picked while the broker commits.
                self._commit(prepare=not sender.paced and self._may_emit(now))
                done = clock.now()
                self._next_commit = done + interval
                self._soonest_commit = done + soonest
                continue  # what arrived during the commit applies first
            if pacing.startup is not None and pacing.startup.armed:
                pacing.review_startup(now)
            if self.demotions is not None and now >= self.demotions.next_review:
                self._review(self.demotions, now)
            if backlog.unread_letters and now >= self.fetcher.retry_at:
                backlog.retry_unread()
            # Emission goes first; dead letters (a flood's overflow can be hundreds of
            # thousands) take a bounded turn after each round, and the time emission would
            # spend waiting (written first, 900,000 of them held every quiet
            # tenant 11 s). A letter settles its offset in the same transaction either way.
            if not self._may_emit(now):
                self.rule.forgo()  # held back on purpose: these slots are not owed
                if backlog.waiting:
                    self._send_letters(LETTER_BATCH)
                else:
                    self._idle(0.01)
                continue
            emitted = self._emit_some()
            if backlog.waiting:
                self._send_letters(LETTER_BATCH)
            elif emitted == 0 and not handoff.pending(self._taken()):
                # Nothing went out: wait as the emission rule says, never past the next commit.
                self._idle(
                    idle_seconds(
                        now,
                        sender.wait,
                        sender.paced,
                        self.txn.records,
                        self._soonest_commit,
                        self._next_commit,
                    )
                )

    def _idle(self, seconds: float) -> None:
        wake = self.handoff.wake
        wake.clear()
        if seconds > 0 and not self.handoff.pending(self._taken()):
            wake.wait(seconds)

    def _taken(self) -> dict[int, deque[Parsed]]:
        """The handoff queues records are taken from: none until the policies recorded
        before the start are read (admission and purges follow them: a record indexed
        before would be judged by the defaults), and not those of partitions too far ahead
        of their marks (``holding``: they wait until the mark moves)."""
        if not self.phase.policies_read:
            return {}
        ahead = self.backlog.parking.ahead
        if not ahead:
            return self.queues
        return {p: q for p, q in self.queues.items() if p not in ahead}

    def _may_emit(self, now: float) -> bool:
        # The hold, the lease of the group share and tenant pauses are the rule's (next).
        phase = self.phase
        if not phase.joined or not phase.policies_read or phase.rewinding or not self.progress:
            return False
        return not self.warming or now >= self._warm_until

    # -- applying what the ingest thread handed over -----------------------------------------

    def _apply(self, records: list[Parsed]) -> None:
        """Index handed-over records in the core, or turn them into dead letters."""
        if not self.phase.rewinding:
            self.backlog.index(records, self.txn)

    def _read_again(self) -> None:
        """Tenants whose records wait in the log and whose backlog ran low: the next of
        their records are read again and indexed (``spill``)."""
        if self.phase.rewinding:
            return
        backlog, txn = self.backlog, self.txn
        self.spill.refill(
            lambda records: backlog.index(records, txn, again=True),
            backlog.letters.append,
            backlog.parking.parking(),
        )

    def _control(self, item: Any) -> bool:
        if isinstance(item, Assign):
            self._assign(item)
        elif isinstance(item, Revoke):
            self._revoke(item)
        elif isinstance(item, FeedbackBatch):
            self.pacing.feedback(item, self.observed, self.clock.now(), self.clock.epoch_ms())
        elif isinstance(item, AdaptiveChange):
            self.pacing.adapted(item, len(self.owned))
        elif isinstance(item, ConcurrencyChange):
            self.pacing.limited(item)
        elif isinstance(item, LagChange):
            self.pacing.lagged(item)
        elif isinstance(item, ShareChange):
            self.pacing.shared(item, len(self.owned))
            self.policies.groups.take_parts(item.parts, self.rule)  # of each group's cap
            if item.budgets:
                exchanged(self.rule, item.budgets, self.clock.epoch_ms())
        elif isinstance(item, Heard):
            self.warming.discard(item.partition)
        elif isinstance(item, PolicyChange):
            for action in self.policies.apply(item.key, item.value):
                self._act(action)
        elif isinstance(item, PoliciesRead):
            if not self.phase.policies_read:
                log.info("the policy topic is read: emission may start")
                self.phase = replace(self.phase, policies_read=True)
        elif isinstance(item, Call):
            try:
                item.result = item.fn()
            except Exception as exc:
                item.error = exc
            item.done.set()
        elif isinstance(item, Stop):
            self._stop_cause = item.cause
            try:
                self._commit()
            finally:
                self.phase = replace(self.phase, stopped=True)
                self.txn.close()
                item.done.set()
            return True
        return False

    def _assign(self, assign: Assign) -> None:
        if assign.metadata is not None:
            self._metadata = assign.metadata
        if assign.rewind:
            if not self.phase.rewinding:
                return
            self.phase = replace(self.phase, rewinding=False)
            self.progress.clear()
            self.queues = {}
        elif self.phase.rewinding:
            return  # the rewind that follows covers these partitions too
        self.phase = replace(self.phase, joined=True)
        self.queues.update(assign.queues)
        ledger = self.rule.ledger
        if assign.rewind:  # what is committed is all there is: the spend too
            ledger.drop(set(range(self.partitions)))
        for partition, prog in assign.progress.items():
            self.progress[partition] = prog
            self.checkpoint.recovered(partition, prog)
            if partition >= 0:
                ledger.restore(partition, prog.budgets)
                prog.budgets = []
        if assign.progress:
            self.warming.update(assign.progress)
            self._warm_until = self.clock.now() + WARM_UP
            # The recovered marks are the group's committed offsets: the trimmer may trim to
            # them now, not only after this instance's first commit (an instance with
            # nothing to emit, all its records settled or parked, would never commit).
            self._on_committed(*self.checkpoint.handed())
        self._publish_owned()
        self._apply_rate_share()
        self.metrics.assigned.set(len(self.owned))

    def _revoke(self, revoke: Revoke) -> None:
        try:
            self.metrics.rebalances.inc()
            gone = set(revoke.partitions)
            if revoke.metadata is not None:
                self._metadata = revoke.metadata  # the generation that still owns them
            if self.phase.rewinding:
                return  # nothing uncommitted; the rewind recovers only what stays ours
            if revoke.lost or revoke.given_up.is_set():
                # The group gave them away already (or will have, past --revoke-wait): what
                # is open cannot commit. Abort it and recover the partitions that stay ours
                # from their committed marks.
                if self.txn.open:
                    why = "lost" if revoke.lost else "let go after --revoke-wait"
                    try:
                        self.txn.abort(f"partitions {sorted(gone)} were {why}")
                    except FatalError as exc:
                        self._renew_transaction(exc)
                    self._rewind()
                    return
            else:
                faults.hold("revoke")  # tests only: a slow emitter (FAIRSTREAM_TEST_FAULTS)
                self._commit()
                if revoke.given_up.is_set():
                    log.warning(
                        "partitions %s were let go before this emitter committed them "
                        "(--revoke-wait): %s",
                        sorted(gone),
                        "the broker refused the old generation's commit; aborted"
                        if self.phase.rewinding
                        else "committed under the generation that owned them, or nothing",
                    )
                if self.phase.rewinding:
                    return
            self._drop(gone)
        finally:
            revoke.done.set()

    def _drop(self, gone: set[int]) -> None:
        """Forget the records and progress of partitions no longer ours."""
        gone = gone | {holding_id(p) for p in gone if p >= 0}
        for partition in gone:
            self.progress.pop(partition, None)
            self.queues.pop(partition, None)
            self.warming.discard(partition)
            self.fetcher.forget(partition)
        self.checkpoint.forget(gone)
        self.rule.ledger.drop({p for p in gone if p >= 0})
        self.backlog.drop(gone)
        self._publish_owned()
        self._apply_rate_share()
        self.metrics.assigned.set(len(self.owned))

    def _apply_rate_share(self) -> None:
        """Retune the rule's shares to the partitions owned now (``Pacing.apply``)."""
        self.pacing.apply(len(self.owned))

    def counts_slots(self) -> bool:
        """Whether concurrency slots are counted (``Pacing.counts_slots``), as the emitter
        last published it: the feedback thread's read."""
        return self.slots_counted

    def startup_slots(self) -> int | None:
        """The start-up window's slots (``Pacing.startup_limit``), as the emitter last
        published it: the feedback thread's read."""
        return self.startup_window

    def _act(self, action: PolicyAction) -> None:
        """Do what a policy record asks (``Policies.apply`` says what)."""
        if isinstance(action, DefaultPolicy):
            self.core.set_default_policy(action.policy)
        elif isinstance(action, SetPolicy):
            self.set_policy(action.tenant, action.policy)
        elif isinstance(action, GROUP_ACTIONS):  # tenant groups (``tenant_groups``)
            act(self.rule, action, lambda: self.policies.new_core(self.clock))
        else:
            self.purge(action.tenant, action.before_ms)
            return
        self.rule.budgets_changed()  # a policy in force may have gained or lost budgets

    def _review(self, demotions: Demotions, now: float) -> None:
        """Noisy tenants one class down, quiet ones back (``Demotions.review`` says how)."""
        for action in demotions.review(self.core, self.policies, now, self.spill.counts):
            self._act(action)

    def set_policy(self, tenant: str, policy: TenantPolicy | None) -> None:
        """Set ``tenant``'s policy in the core, paused while its upstream quota says so."""
        self.rule.set_policy(tenant, policy)

    def demand(self) -> InstanceDemand:
        """This instance's demand for the group thread: per class, the backlogged unpaused
        tenants' weights and caps (O(backlogged tenants), so reused while it is not paid
        for: ``observe.Reused``), the partitions owned, and the adapted rate's fraction of
        ``--rate`` (from the feedback thread's last change)."""
        return self._demands()

    def _demand(self) -> InstanceDemand:
        return InstanceDemand(
            backlogged_demand(self.core, self.policies.groups.policy),
            self.owned,
            self.pacing.adaptive,
            group_spend(self.rule, self.clock.epoch_ms()),
        )

    # -- emission ----------------------------------------------------------------------------

    def _emit_some(self) -> int:
        picked = self.sender.emit_batch(self.txn)
        if self.rule.tracking:
            self.pacing.count_slots()
        return picked

    def _send_letters(self, limit: int) -> int:
        return self.backlog.send_letters(self.txn, limit)

    # -- transactions ------------------------------------------------------------------------

    def _commit(self, *, prepare: bool = False) -> None:
        """Commit the open transaction with the progress it implies (or just new progress).

        First, tenants pinning a mark past ``--park-ranges``/``--park-span`` are parked
        (``holding``). Each partition whose progress changed gets its mark committed as the
        group's offset; one with settled ranges above the mark, or a holding log in use,
        also gets a progress snapshot (one or more chunk records, stale chunks tombstoned),
        tied to the offset by a commit token (the offset's metadata). With ``prepare``, the
        next records are picked and stamped while the broker works, and sent as soon as it
        is done (``Sender.prepare``), before anything else can change what this instance owns.
        """
        if self.phase.rewinding:
            return
        # Tenants pinning a mark move out of the way first (``holding``).
        self.backlog.parking.park_stranded(self.txn)
        checkpoint = self.checkpoint
        changed = checkpoint.changed(self.progress)
        if not self.txn.open and not changed:
            return
        faults.hold("commit")  # tests only: a commit held as by a slow broker
        offsets = checkpoint.progress_records(self.txn, checkpoint.next_token(), changed)
        started = self.clock.now()
        meanwhile = self.sender.prepare if prepare else None
        try:
            self.txn.commit(offsets, self._metadata, meanwhile)
        except Aborted:
            self._rewind()
            return
        except FatalError as exc:
            self._renew_transaction(exc)
            self._rewind()
            return
        took = self.clock.now() - started
        self.metrics.commit_seconds.observe(took)
        self.rule.excuse(took)  # a backlog's slots during the commit are owed, not lost
        self.metrics.transactions.labels("committed").inc()
        counted = checkpoint.tally()  # what the transaction held
        marks = checkpoint.committed(changed)
        if self.demotions is not None:
            self.demotions.committed(counted.counts(), self.clock.now())
        # The broker's answer to commit_transaction is not yet its word that the offsets are
        # committed (a broker shutting down logged PrepareCommit, then dropped the
        # markers): the trimmer confirms each mark against the group's offsets first.
        self._on_committed(*marks)
        while self.sender.prepared and not self.phase.rewinding:
            self.sender.emit_batch(self.txn)

    def _renew_transaction(self, exc: FatalError) -> None:
        """A new producer takes over from one that cannot go on (``Renewal.renew``), or
        ``exc`` is fatal; what was open is read again (the caller rewinds)."""
        old = self.txn
        self.txn = self.producers.renew(old, exc)
        old.calls.close()  # its call thread ends when the call it runs, if stuck, returns

    def _rewind(self) -> None:
        """After an abort: forget everything and recover again from what is committed."""
        log.warning("rewinding to the committed progress")
        self.metrics.transactions.labels("aborted").inc()
        self.checkpoint.reset()
        self.phase = replace(self.phase, rewinding=True)
        self.progress.clear()
        self._publish_owned()
        self.queues = {}
        self._on_committed(None, None)  # marks handed over before are not trimmed to unripe
        self.backlog.clear()
        self.sender.prepared.clear()  # picks of the old core, read again from the marks
        self.rule.replace_core(self.policies.new_core(self.clock))
        self.warming.clear()
        self._request_rewind()

    def purge(self, tenant: str, before_ms: int) -> None:
        """Dead-letter ``tenant``'s buffered records enqueued up to ``before_ms``.
        Caller: ``_act``; records read later are checked in ``Backlog.index``."""
        kept = self.backlog.purge(tenant, before_ms)
        log.info("purge of tenant %r up to %d: %d records kept", tenant, before_ms, kept)

    # -- reads for the web endpoints (run on this thread through Handoff.call) -----------------

    def scrape(self) -> Scrape:
        """What ``/metrics`` shows of this thread's state, copied (``Observed.scrape``);
        O(backlogged tenants), so reused while it is not paid for (``observe.Reused``)."""
        return self._scrapes()

    def _scrape(self) -> Scrape:
        scrape = self.observed.scrape(self.core, self.txn.records, self.backlog.cached)
        now_ms = self.clock.epoch_ms()
        rule = self.rule
        if rule.budgeted or len(rule.ledger):
            waits = rule.budget_waits - self._budget_waits
            if waits:
                self.metrics.budget_refused.labels("wait").inc(waits)
                self._budget_waits = rule.budget_waits
            waiting = len(rule.budget_held())
            self.metrics.budget_waiting.set(waiting)
            scrape = replace(scrape, budgets=budget_rows(rule, now_ms), budget_waiting=waiting)
        return with_demotion(scrape, self.core, self.demotions, now_ms)

    def tenant_stats(self, limit: int) -> dict[str, Any]:
        stats = self.observed.tenant_stats(
            self.core,
            limit,
            ready=self.phase.ready,
            partitions=list(self.owned),
            rate_limit=self.rule.rate,
        )
        self.pacing.add_slots(stats)
        mark_demoted(stats["tenants"], self.demotions)
        in_log = self.spill.counts
        for row in stats["tenants"]:  # beside its backlog in memory, what waits in the log
            row["in_log"] = in_log.get(row["tenant"], 0)
        stats["in_log"] = self.spill.waiting
        if self.rule.budgeted:
            now_ms, held = self.clock.epoch_ms(), self.rule.budget_held()
            for row in stats["tenants"]:
                row["budgets"] = tenant_budgets(self.rule, row["tenant"], now_ms)
                row["budget_waiting"] = row["tenant"] in held
        return stats
