"""Feedback from the paid API's workers: the adaptive rate, tenant pauses, measured cost.

A reader thread follows every partition of the feedback topic from its end (what workers
report from now on; every instance reads all of it, so the group adapts as one) and
decodes each record (``fairstream.wire.feedback``). Malformed records, unknown outcomes and
costs nobody should believe are counted in ``fairstream_feedback_errors_total`` and
skipped: bad feedback never stops anything.

- records naming another egress topic than this deployment's are another deployment's
  (sharing the default feedback topic): counted as ``foreign`` and skipped. A record that
  names none (a worker before the field) is used.
- api-scope outcomes drive this instance's ``AdaptiveRate`` (``fairstream.core.adaptive``):
  the group rate comes down on 429s, holds while a Retry-After runs, climbs back while the
  feedback is clean, between ``--min-rate`` and ``--rate``. The rate reaches the group
  shares (``coordination.shares``) or, alone, the emitter's buckets; a hold stops all egress.
- tenant-scope rate limits pause that tenant alone (on the instance that owns it).
- a final outcome (ok, dead-lettered) frees the request's concurrency slot, an
  intermediate one (a failed attempt, a 429) renews its lease (``fairstream.core.inflight``),
  matched by request id on the emitter. Every instance reads all the feedback, so the slot
  is freed on whichever instance released the request, even after its partition moved.
- a final outcome with ``scheduled_at`` is a sample of the adaptive concurrency limit
  (``fairstream.core.credit``, without ``--max-concurrency``): the time its request held
  a slot and its call's latency. The limit reaches the emitter as a ``ConcurrencyChange``
  a few times a second when it moves (None: unlimited, no feedback to go by, or the API
  refused calls lately: 429s are the adaptive rate's business).
- a reported cost charges the tenant's deficit with its difference from the declared cost,
  so that shares follow real usage: only for a request this instance emitted (``recent``);
  one about a request of a tenant this instance owns that it did not emit lately is
  counted as ``unknown-request`` and ignored; one about another instance's tenant is that
  instance's business.

Without feedback records nothing changes: the rate stays at ``--rate``.

Time is the ``clock`` the reader is given (the emitter's, so that a hold's end is a time on
the clock the emitter waits by): the adaptive rate and its hold run on its ``now``; what is
left of a Retry-After is reckoned on its ``epoch_ms``, the wall clock the workers stamp
their reports with.

Caller: ``SchedulerService`` runs ``run`` on a thread. Affects: the emitter, through the
handoff (``FeedbackBatch``, ``AdaptiveChange``, ``ConcurrencyChange``), its only way out:
with group shares, the group thread reads the adapted fraction back from the emitter with
the instance's demand (``group.InstanceDemand``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END

from fairstream.core import MonotonicClock, RecordClock
from fairstream.core.adaptive import AdaptiveRate
from fairstream.core.credit import ConcurrencyLimit
from fairstream.core.usage import cost_correction
from fairstream.scheduler.consumers import LazyConsumer, assign_when_present
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.messages import AdaptiveChange, ConcurrencyChange, FeedbackBatch
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.recent import RecentRequests
from fairstream.wire.feedback import (
    FINAL_OUTCOMES,
    FeedbackError,
    Outcome,
    Scope,
    decode_feedback,
)
from fairstream.wire.partition import partition_of

log = logging.getLogger("fairstream.feedback")

MAX_COST_RATIO = 10_000  # a reported cost this many times the declared one is not believed
PUBLISH_EVERY = 0.05  # seconds between two looks at the adaptive rate
MAX_REPORT_AGE = 1.0  # seconds: the oldest a call's end is taken to be (clocks of two hosts)


class _NoRate:
    """Stands in for the adaptive rate when there is no --rate to adapt."""

    def on_ok(self, sojourn: float | None = None, now: float | None = None) -> None:
        pass

    def on_other(self, now: float | None = None) -> None:
        pass

    def on_rate_limited(self, retry_after: float | None, now: float | None = None) -> None:
        pass


_NO_RATE = _NoRate()


@dataclass(frozen=True)
class AdaptiveView:
    """The adaptive rate as the web endpoints show it: its value and until when emission
    is held (by the reader's clock), published by the feedback thread, replaced whole."""

    rate: float | None
    hold_until: float = 0.0


class FeedbackReader:
    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        handoff: Handoff,
        metrics: Metrics,
        *,
        ceiling: float | None,
        floor: float | None,
        recent: RecentRequests | None = None,
        ownership: Callable[[], tuple[int, Collection[int]]] | None = None,
        slots: Callable[[], bool] | None = None,
        startup: Callable[[], int | None] | None = None,
        clock: RecordClock | None = None,
        egress_topic: str | None = None,
        concurrency: ConcurrencyLimit | None = None,
    ) -> None:
        """``recent``: the request ids the emitter sent lately; ``ownership``: the ingest
        topic's partition count and the partitions this instance owns. Without them every
        reported cost is charged. ``slots``: whether the emitter counts concurrency slots
        now (without it, always): only then are settled request ids handed over.
        ``startup``: the slots of the emitter's start-up window now (None: none), which
        bound the first limit's count of completions. ``clock``: the emitter's (default a
        ``MonotonicClock``). ``egress_topic``: this deployment's; a record naming another
        is another deployment's (without it, all are used). ``concurrency``: the adaptive
        concurrency limit fed from final outcomes (None: none, a fixed --max-concurrency or
        none at all)."""
        self.topic = topic
        self.egress_topic = egress_topic
        self.clock = clock or MonotonicClock()
        self.recent = recent
        self._ownership = ownership
        self.handoff = handoff
        self.metrics = metrics
        self.ceiling = ceiling
        # Without --rate there is no rate to adapt: charges and pauses still apply.
        self.adaptive = None if ceiling is None else AdaptiveRate(self.clock, ceiling, floor)
        self._slots = slots
        self._startup = startup
        self._stopping = threading.Event()
        self._consumer = LazyConsumer(config, f"{topic}.scheduler", {"fetch.wait.max.ms": 20})
        self._consumer.get()  # opened now: a configuration librdkafka refuses fails here
        self._published: AdaptiveChange | None = None
        self.concurrency = concurrency
        self._limit_published: int | None = None  # the emitter starts unlimited
        self.view = AdaptiveView(ceiling)  # read by the web threads

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """Follow the topic until stopped. An error ends it with the exception; the
        service's supervisor runs it again (``supervise``) with a new consumer, from the
        topic's end."""
        consumer = self._consumer.get()
        try:
            if assign_when_present(consumer, self.topic, OFFSET_END, self._stopping, self._missing):
                log.info("following feedback on %s", self.topic)
            next_publish = 0.0
            while not self._stopping.is_set():
                batch = FeedbackBatch()
                # What is there, else wait for one record: consume() waits out its whole
                # timeout unless it fills num_messages (measured: 1 record, 1.0 s of 1.0),
                # and a completion waiting here is a concurrency slot kept idle.
                messages = consumer.consume(num_messages=1000, timeout=0)
                if not messages:
                    messages = consumer.consume(num_messages=1, timeout=0.05)
                for msg in messages:
                    if msg.error() is None:
                        self._read(msg.key(), msg.value(), batch)
                if batch.charges or batch.pauses or batch.settled or batch.renewed:
                    self.handoff.put(batch)
                now = self.clock.now()
                if now >= next_publish:
                    next_publish = now + PUBLISH_EVERY
                    if self.adaptive is not None:
                        self._publish(now)
                    if self.concurrency is not None:
                        self._publish_limit(now)
        finally:
            self._consumer.close()  # the next run opens a new one

    def _missing(self) -> None:
        log.warning(
            "feedback topic %s not found: the rate stays at --rate until it exists "
            "(fairstream topics create --feedback-topic %s)",
            self.topic,
            self.topic,
        )

    def _read(self, key: bytes | None, value: bytes | None, batch: FeedbackBatch) -> None:
        try:
            fb = decode_feedback(value, key)
        except FeedbackError as exc:
            self.metrics.feedback_errors.labels("malformed").inc()
            log.debug("ignoring feedback record: %s", exc)
            return
        # Deployments that keep the default feedback topic share it: another's 429s must not
        # throttle this one. A record naming no egress topic (a v1 worker) is used.
        if fb.egress_topic is not None and self.egress_topic not in (None, fb.egress_topic):
            self.metrics.feedback_errors.labels("foreign").inc()
            return
        self.metrics.feedback.labels(fb.outcome.value).inc()
        if self._slots is None or self._slots():
            if fb.outcome in FINAL_OUTCOMES:
                batch.settled.append(fb.request_id.encode())
            else:
                batch.renewed.append(fb.request_id.encode())
        adaptive = self.adaptive or _NO_RATE
        # What is left of a Retry-After once the record reached us.
        age = max(0.0, (self.clock.epoch_ms() - fb.reported_at_ms) / 1000)
        # When the call ended, on our clock: the API's throughput is measured by when calls
        # went through, not by when their reports arrived (in fetched batches). A worker
        # clock far behind ours counts as at most MAX_REPORT_AGE ago.
        now = self.clock.now()
        at = now - min(age, MAX_REPORT_AGE)
        if (
            self.concurrency is not None
            and fb.outcome in FINAL_OUTCOMES
            and fb.scheduled_at_ms is not None
        ):
            # The slot was held from the release to now (both on this group's clocks); the
            # call and the wait before it by the report's stamps (the worker's clock and
            # the scheduler's: only compared with each other, as the adaptive rate does).
            hold = (self.clock.epoch_ms() - fb.scheduled_at_ms) / 1000
            before = (fb.reported_at_ms - fb.scheduled_at_ms) / 1000 - fb.latency
            self.concurrency.observe(hold, fb.latency, max(0.0, before), now)
        if fb.outcome is Outcome.OK:
            # Release to report: both stamps are wall-clock times, of two hosts perhaps,
            # but the adaptive rate only compares sojourns with each other.
            sojourn = (
                None
                if fb.scheduled_at_ms is None
                else (fb.reported_at_ms - fb.scheduled_at_ms) / 1000
            )
            adaptive.on_ok(sojourn=sojourn, now=at)
        elif fb.outcome is Outcome.RATE_LIMITED:
            left = None if fb.retry_after is None else max(0.0, fb.retry_after - age)
            if fb.scope is Scope.TENANT:
                adaptive.on_other(now=at)
                if left:
                    batch.pauses.append((fb.tenant, left))
            else:
                self.metrics.rate_limited.inc()
                if self.concurrency is not None:
                    self.concurrency.refused(now)
                # The Retry-After from ``at``: the hold ends where the API said (perhaps
                # already: then it holds nothing), and a long one is told by what the API
                # asked for, not by how late its report came.
                adaptive.on_rate_limited(
                    None if fb.retry_after is None else fb.retry_after - (age - (now - at)),
                    now=at,
                )
        elif fb.outcome is Outcome.FAILED:
            adaptive.on_other(now=at)
        if fb.outcome in (Outcome.OK, Outcome.DEAD_LETTERED) and fb.cost is not None:
            if cost_correction(fb.declared_cost, fb.cost, max_ratio=MAX_COST_RATIO) is None:
                self.metrics.feedback_errors.labels("absurd-cost").inc()
            elif self._emitted_here(fb.request_id, fb.tenant):
                charged = fb.scheduled_at_ms or 0
                batch.charges.append((fb.tenant, fb.declared_cost, fb.cost, charged))

    def _emitted_here(self, request_id: str, tenant: str) -> bool:
        """Whether a cost reported for ``request_id`` is this instance's to charge; counts
        the requests nobody here emitted of the tenants this instance owns."""
        recent = self.recent
        if recent is None or request_id in recent:
            return True
        if self._ownership is not None:
            partitions, owned = self._ownership()
            if partitions and partition_of(tenant, partitions) not in owned:
                return False  # another instance's tenant: its feedback is that one's
        self.metrics.feedback_errors.labels("unknown-request").inc()
        log.debug("ignoring the cost reported for %r: not a request emitted here", request_id)
        return False

    def _publish_limit(self, now: float) -> None:
        """Hand the adaptive concurrency limit to the emitter when it moved."""
        assert self.concurrency is not None
        startup = None if self._startup is None else self._startup()
        limit = self.concurrency.update(now, startup)
        if limit != self._limit_published:
            self._limit_published = limit
            self.metrics.concurrency_adaptive.set(-1 if limit is None else limit)
            self.handoff.put(ConcurrencyChange(limit, learning=self.concurrency.learning))

    def _publish(self, now: float) -> None:
        assert self.adaptive is not None
        assert self.ceiling is not None
        rate = self.adaptive.rate()
        held = self.adaptive.held_for()
        self.metrics.adaptive_rate.set(rate)
        hold_until = now + held if held > 0 else 0.0
        self.view = AdaptiveView(rate, hold_until)
        change = AdaptiveChange(rate / self.ceiling, hold_until)
        last = self._published
        if (
            last is None
            or abs(change.factor - last.factor) > 0.005 * max(last.factor, 1e-9)
            or change.hold_until > last.hold_until
        ):
            self._published = change
            self.handoff.put(change)
