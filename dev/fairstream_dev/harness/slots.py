"""A paid API with latency that counts its calls in flight, and a worker that keeps many of
one tenant's calls in flight: what the concurrency limits' tests and benchmark measure with.

``CallLog`` is the API's side: each call's start and end, the calls in flight now (in all
and per tenant), the most ever seen, and samples of the count taken on a timer.

``SlotWorker`` reads egress (read_committed, a consumer group of its own), starts a call for
each record as soon as it reads it, whatever its tenant (the worker-sdk branch's unordered
mode does the same; the SDK's ``Worker`` on main runs one call per tenant at a time), ends
it ``latency`` seconds later and then writes the feedback record a ``fairstream.Worker``
writes for a settled request (``ok``, keyed by tenant, with the request id of the egress
record), and commits its offsets below what is done. One thread, no thread per call: the
calls in flight are a heap of end times.

``python -m fairstream_dev.harness.slots BOOTSTRAP EGRESS FEEDBACK GROUP LATENCY`` runs one
in a process of its own (to be killed with -9 mid-call); it prints ``started <request id>``
per call it starts.
"""

from __future__ import annotations

import heapq
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from fairstream import wire
from fairstream.wire.dead_letter import HeaderList
from fairstream.wire.feedback import Feedback, Outcome, encode_feedback, feedback_key

__all__ = ["CallLog", "SlotWorker"]


@dataclass
class CallLog:
    """The API's view: calls in flight, the most seen, and timed samples of the count."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    now_in_flight: int = 0
    per_tenant: Counter[str] = field(default_factory=Counter)
    max_in_flight: int = 0
    max_per_tenant: Counter[str] = field(default_factory=Counter)
    started: list[tuple[float, str, str]] = field(default_factory=list)  # (time, tenant, id)
    ended: list[tuple[float, str, str]] = field(default_factory=list)
    samples: list[tuple[float, int, dict[str, int]]] = field(default_factory=list)

    def start(self, tenant: str, request_id: str) -> None:
        with self.lock:
            self.now_in_flight += 1
            self.per_tenant[tenant] += 1
            self.max_in_flight = max(self.max_in_flight, self.now_in_flight)
            self.max_per_tenant[tenant] = max(self.max_per_tenant[tenant], self.per_tenant[tenant])
            self.started.append((time.monotonic(), tenant, request_id))

    def end(self, tenant: str, request_id: str) -> None:
        with self.lock:
            self.now_in_flight -= 1
            self.per_tenant[tenant] -= 1
            self.ended.append((time.monotonic(), tenant, request_id))

    def sample(self) -> None:
        with self.lock:
            self.samples.append(
                (
                    time.monotonic(),
                    self.now_in_flight,
                    {t: n for t, n in self.per_tenant.items() if n},
                )
            )

    def between(self, begin: float, end: float) -> list[tuple[float, int, dict[str, int]]]:
        """The samples taken from ``begin`` to ``end`` (monotonic)."""
        with self.lock:
            return [s for s in self.samples if begin <= s[0] <= end]

    def busy_window(self, margin: float) -> tuple[float, float]:
        """From ``margin`` s after the first call started to the last start: while the
        scheduler still had records to release (each start follows a release)."""
        with self.lock:
            return self.started[0][0] + margin, self.started[-1][0]


class Sampler:
    """Samples a ``CallLog`` every ``interval`` s on a thread, until stopped."""

    def __init__(self, log: CallLog, interval: float = 0.05) -> None:
        self.log = log
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="call-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.log.sample()


def _header(msg: Message, name: str) -> str | None:
    headers = cast("HeaderList", msg.headers() or [])
    for key, value in headers:
        if key == name and value is not None:
            return value.decode()
    return None


class SlotWorker:
    """Calls each egress record's API call concurrently for ``latency`` s and reports it
    settled on ``feedback_topic`` (see the module docstring). ``run`` on a thread;
    ``stop`` ends it (calls in flight are abandoned, as a crash would)."""

    def __init__(
        self,
        bootstrap: str,
        egress_topic: str,
        feedback_topic: str,
        group: str,
        latency: float,
        log: CallLog | None = None,
        *,
        echo: bool = False,
        session_timeout_ms: int = 6000,
        cost_factor: float | None = None,
    ) -> None:
        self.egress_topic = egress_topic
        # With a factor, each call reports the cost its record declared and a measured cost
        # of that times the factor (an API that costs more, or less, than declared).
        self.cost_factor = cost_factor
        self.feedback_topic = feedback_topic
        self.latency = latency
        self.log = log if log is not None else CallLog()
        self.echo = echo
        self.done = 0
        self._stopping = threading.Event()
        self.assigned = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": 1000,
                "fetch.wait.max.ms": 50,
            }
        )
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": 1})

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        calls: list[tuple[float, int, Message]] = []  # (ends at, sequence, record)
        seq = 0
        self._consumer.subscribe([self.egress_topic], on_assign=lambda _c, _p: self.assigned.set())
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                timeout = 0.02 if not calls else max(0.0, min(0.02, calls[0][0] - now))
                # What is there, else wait for one: consume() waits out its whole timeout
                # unless it fills num_messages.
                messages = self._consumer.consume(num_messages=500, timeout=0)
                if not messages and timeout > 0:
                    messages = self._consumer.consume(num_messages=1, timeout=timeout)
                for msg in messages:
                    if msg.error() is not None:
                        continue
                    tenant = (msg.key() or b"").decode()
                    rid = _header(msg, wire.REQUEST_ID) or ""
                    self.log.start(tenant, rid)
                    if self.echo:
                        print(f"started {rid}", flush=True)
                    seq += 1
                    heapq.heappush(calls, (time.monotonic() + self.latency, seq, msg))
                now = time.monotonic()
                ended = False
                while calls and calls[0][0] <= now:
                    _, _, msg = heapq.heappop(calls)
                    self._settle(msg)
                    ended = True
                if ended:
                    self._commit(calls)
                self._producer.poll(0)
        finally:
            self._producer.flush(10)
            self._consumer.close()

    def _settle(self, msg: Message) -> None:
        tenant = (msg.key() or b"").decode()
        rid = _header(msg, wire.REQUEST_ID) or ""
        self.log.end(tenant, rid)
        self.done += 1
        scheduled = _header(msg, wire.SCHEDULED_MS)
        declared = int(_header(msg, wire.COST) or 1)
        factor = self.cost_factor
        fb = Feedback(
            request_id=rid,
            tenant=tenant,
            outcome=Outcome.OK,
            attempt=1,
            declared_cost=declared,
            latency=self.latency,
            reported_at_ms=time.time_ns() // 1_000_000,
            scheduled_at_ms=int(scheduled) if scheduled else None,
            cost=None if factor is None else max(1, round(declared * factor)),
        )
        self._producer.produce(self.feedback_topic, encode_feedback(fb), feedback_key(fb))

    def _commit(self, calls: list[tuple[float, int, Message]]) -> None:
        # Below the lowest record still in flight, per partition (what a Worker does).
        # Records read but not in ``calls`` are done; the consumer's position covers them.
        lowest: dict[int, int] = {}
        for _, _, msg in calls:
            p, o = msg.partition() or 0, msg.offset() or 0
            lowest[p] = min(o, lowest.get(p, o))
        offsets = []
        for tp in self._consumer.position(self._consumer.assignment()):
            if tp.offset < 0:
                continue
            offsets.append(
                TopicPartition(tp.topic, tp.partition, lowest.get(tp.partition, tp.offset))
            )
        if offsets:
            try:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            except Exception as exc:  # a rebalance under way: the next end commits again
                print(f"commit: {exc!r}", file=sys.stderr)


def main(argv: list[str]) -> None:
    bootstrap, egress, feedback, group, latency = argv
    worker = SlotWorker(bootstrap, egress, feedback, group, float(latency), echo=True)
    worker.run()


if __name__ == "__main__":
    main(sys.argv[1:])
