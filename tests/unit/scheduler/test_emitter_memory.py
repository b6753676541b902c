"""The emitter on an in-memory cluster (``memory_kafka``), no broker: the ingest thread's
real ``Readers`` and ``parse`` feed it, its real ``Transaction`` commits egress records
with the group's offsets, its real ``PayloadFetcher`` reads back from the ingest log, and
the hard cases of the data path run in milliseconds:

- an abort (the generation gone at commit) leaves nothing visible and rewinds to the
  committed marks, from which every record goes out once;
- a newer producer with the instance's transactional id fences it, and it stops with
  nothing of the zombie's transaction visible;
- payloads past ``--buffer-memory`` are read back when their turn comes, and a flood past
  ``--max-backlog`` is dead-lettered with its payloads read back;
- a payload that retention deleted before its turn becomes a ``lost`` dead letter;
- a paused tenant among a busy one's records (100,000 gaps, as in
  ``tests/integration/test_scheduler_gaps.py``) is parked in the holding log, and the busy
  tenant drains in order with the mark behind it."""

from __future__ import annotations

import functools
import gc
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from fairstream import wire
from fairstream.config import Settings
from fairstream.config.topics import holding_topic, progress_topic
from fairstream.core import ManualClock, TenantPolicy
from fairstream.scheduler.emitter import backlog
from fairstream.scheduler.emitter.egress import Limits
from fairstream.scheduler.emitter.fetch import PayloadFetcher
from fairstream.scheduler.emitter.loop import Emitter
from fairstream.scheduler.emitter.transaction import Transaction
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.ingest.readers import Readers, reader_config
from fairstream.scheduler.messages import Assign, PoliciesRead, PolicyChange, Stop
from fairstream.scheduler.metrics import Metrics
from fairstream.scheduler.parsing import parse
from fairstream.scheduler.progress import HoldingProgress, PartitionProgress
from fairstream.scheduler.records import Parsed
from fairstream.scheduler.recovery import holding_id
from fairstream.scheduler.run import GC_THRESHOLDS
from fairstream.scheduler.supervise import FatalError
from fairstream.wire.policy import PolicyRecord, encode_policy
from tests.unit.scheduler.memory_kafka import MemoryCluster


def _ignore(partition: int) -> None:
    pass  # the end of a partition: the warm-up's, not this driver's


def _raise(err: KafkaError) -> None:
    raise KafkaException(err)


GROUP = "app"
TID = "app-instance-0"
INGEST, EGRESS, DLQ = "fairstream.ingest", "fairstream.egress", "fairstream.dlq"


class Driver:
    """One emitter owning ingest partition 0, on ``cluster``, fed by the ingest thread's
    real ``Readers`` and ``parse``. The group membership and the recovery are the test's:
    ``assign`` hands the emitter the partition from its committed offset, as the ingest
    thread does after an assignment or the rewind the emitter asked for. The holding log
    is written, never read back here."""

    slowly = False  # records seen to leave slowly, so packed (``_packing_from``)

    def __init__(
        self, cluster: MemoryCluster, *, wait_for_policies: bool = False, **settings: Any
    ) -> None:
        self.cluster = cluster
        self.rewinds = 0
        self.emitter = Emitter(
            Settings(share_by="partitions", app_id=GROUP, feedback_topic="", **settings),
            1,
            Handoff(),
            Metrics(),
            clock=ManualClock(),
            transactional_id=TID,
            limits=Limits(),
            request_rewind=self._rewind_asked,
            on_committed=lambda marks, seqs: None,
            transaction=functools.partial(Transaction, connect=cluster.producer),
            fetcher=functools.partial(PayloadFetcher, connect=cluster.consumer),
            wait_for_policies=wait_for_policies,
        )
        self.readers = Readers(
            reader_config({}, GROUP), INGEST, holding_topic(GROUP), connect=cluster.consumer
        )
        if self.slowly:
            self.emitter.backlog.departures = Slowly()
        self._tenants: dict[bytes, str] = {}
        self.emitter.init_transactions()
        self.assign()

    def _rewind_asked(self) -> None:
        self.rewinds += 1

    def assign(self, *, rewind: bool = False) -> None:
        """Partition 0 from its committed offset (as the ingest thread recovers it), in a new
        generation of the group, and its reader moved there."""
        mark = self.cluster.offsets.get(GROUP, {}).get((INGEST, 0), 0)
        em = self.emitter
        # Its holding log's progress too (``holding``), from that log's start.
        recovered = {0: PartitionProgress(mark), holding_id(0): HoldingProgress(0)}
        # The handoff queue the ingest thread would fill (``hand_over``; ``ingest`` indexes
        # directly instead).
        queues = {0: em.handoff.open(0)}
        em._assign(Assign(recovered, queues, rewind=rewind, metadata=self.cluster.join(GROUP)))
        em._warm_until = 0.0  # no warm-up wait in a test
        self.readers.open(0, mark)

    def produce(self, *tenants: str) -> None:
        """Records of these tenants written to ingest partition 0 by a plain producer; the
        value of each is ``tenant:offset``."""
        start = len(self.cluster.log(INGEST)[0])
        encoded = {tenant: tenant.encode() for tenant in set(tenants)}
        keys = [encoded[tenant] for tenant in tenants]
        values = [b"%s:%d" % (key, start + i) for i, key in enumerate(keys)]
        self.cluster.extend(INGEST, 0, keys, values)

    def ingest(self, most: int | None = None) -> int:
        """The ingest thread's part: read what the readers have (about ``most`` records at
        most, in slices), parse it and hand it to the emitter, which indexes it; how many."""
        em, taken = self.emitter, 0
        while most is None or taken < most:
            slices = self.readers.take(set())
            if not slices:
                break
            for partition, messages in slices:
                queue: deque[Parsed] = deque()
                parse(partition, messages, queue, self._tenants, _ignore, _raise)
                em.backlog.index(list(queue), em.txn)
                taken += len(queue)
        return taken

    def hand_over(self) -> int:
        """The ingest thread's part only: what the readers have, parsed into the emitter's
        handoff queue of partition 0 (taken when the emitter's loop would: ``apply``)."""
        queue, handed = self.emitter.queues[0], 0
        while slices := self.readers.take(set()):
            for partition, messages in slices:
                before = len(queue)
                parse(partition, messages, queue, self._tenants, _ignore, _raise)
                handed += len(queue) - before
        return handed

    def apply(self) -> int:
        """The emitter's loop taking and indexing what waits in its handoff queues."""
        em = self.emitter
        records = em.handoff.take_records(em._taken(), 1_000_000)
        em._apply(records)
        return len(records)

    def emit_and_commit(self) -> None:
        em = self.emitter
        while em._emit_some() or em.backlog.waiting:
            em._send_letters(1000)
        em._commit()

    def egress(self) -> list[bytes | None]:
        return [r.value for r in self.cluster.committed(EGRESS)]

    def request_ids(self) -> list[Any]:
        return [dict(r.headers)[wire.REQUEST_ID] for r in self.cluster.committed(EGRESS)]

    def dead_letters(self) -> list[tuple[bytes | None, Any]]:
        """(value, reason) of each committed dead letter."""
        return [(r.value, dict(r.headers)[wire.DLQ_REASON]) for r in self.cluster.committed(DLQ)]


class Slowly:
    """Records leave the core at 0.1/s: whatever waits will wait long (``LeavingRate``)."""

    def before(self, waiting: int, now: float, configured: float | None) -> float:
        return 0.1

    def after(self, waiting: int) -> None:
        pass


def _packing_from(monkeypatch: pytest.MonkeyPatch, waiting: int) -> None:
    """Records are packed from ``waiting`` records waiting: the drivers made from now on see
    them leave slowly (``Slowly``)."""
    monkeypatch.setattr(backlog, "COMPACT_AT", waiting)
    monkeypatch.setattr(Driver, "slowly", True)


@pytest.fixture(params=["as-parsed", "packed"])
def cluster(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MemoryCluster]:
    # Each case twice: records waiting as they were parsed, and packed (``records.pack``), as
    # a flat core keeps them once COMPACT_AT wait (here: from the first).
    if request.param == "packed":
        _packing_from(monkeypatch, 0)
    # The emitter runs under the scheduler's collector thresholds (``run.GC_THRESHOLDS``):
    # under the interpreter's defaults the cyclic collector walks every buffered record
    # again and again, which was more than a third of the 100,000-gap case's time.
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    yield MemoryCluster()
    gc.set_threshold(*before)


def test_records_and_the_mark_commit_together(cluster: MemoryCluster) -> None:
    driver = Driver(cluster)
    driver.produce("a", "b", "a")
    driver.ingest()
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:2", b"b:1"]
    assert cluster.offsets[GROUP][(INGEST, 0)] == 3


def test_an_abort_rewinds_to_the_committed_marks_and_each_record_goes_out_once(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster)
    driver.produce("a", "b")
    driver.ingest()
    driver.emit_and_commit()
    driver.produce("a", "b", "a")
    driver.ingest()
    em = driver.emitter
    while em._emit_some():
        pass
    cluster.join(GROUP)  # a rebalance before the commit: this generation's offsets are refused
    em._commit()
    assert driver.rewinds == 1
    assert em.phase.rewinding
    assert sorted(driver.egress()) == [b"a:0", b"b:1"]  # the aborted three never show
    assert cluster.offsets[GROUP][(INGEST, 0)] == 2
    # The ingest thread recovers from the committed mark and reads the rest again.
    driver.assign(rewind=True)
    driver.ingest()
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:2", b"a:4", b"b:1", b"b:3"]
    assert len(set(driver.request_ids())) == 5  # each once
    assert cluster.offsets[GROUP][(INGEST, 0)] == 5


def _emitted_uncommitted(cluster: MemoryCluster) -> Driver:
    """A driver whose emitter has sent records of "a" and "b" in a transaction still open."""
    driver = Driver(cluster)
    driver.produce("a", "b")
    driver.ingest()
    while driver.emitter._emit_some():
        pass
    return driver


def test_a_fenced_emitter_stops_and_its_open_records_never_show(cluster: MemoryCluster) -> None:
    driver = _emitted_uncommitted(cluster)
    em = driver.emitter
    # Another process with this instance's transactional id (the same data directory on
    # two hosts): its init_transactions fences this one and aborts what it left open.
    cluster.producer({"transactional.id": TID}).init_transactions()
    with pytest.raises(FatalError, match="fenced"):
        em._commit()
    assert driver.egress() == []
    assert GROUP not in cluster.offsets


@pytest.mark.parametrize("cause", [None, "the ingest thread failed: RecoveryError: no leader"])
def test_a_stop_commits_what_is_open_and_a_failed_ingest_threads_stop_fails_the_emitter(
    cluster: MemoryCluster, cause: str | None
) -> None:
    driver = _emitted_uncommitted(cluster)
    em = driver.emitter
    stop = Stop(cause=cause)
    em.handoff.put(stop)
    if cause is None:
        em.run()  # a deliberate stop: the thread ends, and the supervisor expects it
    else:
        # The instance's fatal reason is the ingest thread's, not "ended without being stopped".
        with pytest.raises(FatalError, match="ingest thread failed: RecoveryError"):
            em.run()
    assert stop.done.is_set()
    assert sorted(driver.egress()) == [b"a:0", b"b:1"]
    assert cluster.offsets[GROUP][(INGEST, 0)] == 2


def _held_in_memory(driver: Driver) -> None:
    # --buffer-memory is a MiB at least: budgets of none (and an eighth of it for the
    # overflow's letters) make every payload one to read back.
    backlog = driver.emitter.backlog
    backlog.budget = backlog.overflow.budget = 0


def test_payloads_past_the_buffer_memory_are_read_back_when_their_turn_comes(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster)
    _held_in_memory(driver)
    driver.produce("a", "b", "a", "b")
    driver.ingest()
    assert driver.emitter.backlog.cached == 0  # indexed without their payloads
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:2", b"b:1", b"b:3"]
    assert cluster.offsets[GROUP][(INGEST, 0)] == 4


def test_a_flood_past_the_max_backlog_is_dead_lettered_with_its_payloads(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster, max_backlog=2)
    _held_in_memory(driver)
    driver.produce(*"aaaaab")
    driver.ingest()
    assert all(letter.entry.msg is None for letter in driver.emitter.backlog.overflow.letters)
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:1", b"b:5"]
    assert sorted(driver.dead_letters()) == [
        (b"a:2", wire.BACKLOG_FULL.encode()),
        (b"a:3", wire.BACKLOG_FULL.encode()),
        (b"a:4", wire.BACKLOG_FULL.encode()),
    ]
    assert cluster.offsets[GROUP][(INGEST, 0)] == 6  # every record settled, once


def test_a_payload_retention_deleted_before_its_turn_is_a_lost_dead_letter(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster)
    _held_in_memory(driver)
    driver.produce("a", "b", "a")
    driver.ingest()
    cluster.trim(INGEST, 0, 2)  # retention took offsets 0 and 1
    driver.emit_and_commit()
    assert driver.egress() == [b"a:2"]
    assert sorted(reason for _, reason in driver.dead_letters()) == [
        wire.LOST.encode(),
        wire.LOST.encode(),
    ]
    assert cluster.offsets[GROUP][(INGEST, 0)] == 3


def test_a_record_without_headers_waits_as_its_value_alone(cluster: MemoryCluster) -> None:
    # A consumer's message costs about 250 bytes beyond its value: a record without headers
    # waits as its value (``records.Held``) and goes out keyed by its tenant id; one with
    # headers waits as its value and headers (``records.Headed``), and its headers go out
    # with it. What they were counted in memory is given back as they go.
    driver = Driver(cluster)
    driver.produce("a")
    cluster.append(INGEST, b"b", b"b:1", [("trace", b"t-1")], partition=0)
    driver.ingest()
    core = driver.emitter.rule.core
    plain, traced = core.peek("a"), core.peek("b")
    assert plain is not None
    assert traced is not None
    assert type(plain.msg) is bytes
    assert plain.msg == b"a:0"
    assert type(traced.msg) is tuple  # (value, headers, footprint)
    assert traced.msg[:2] == (b"b:1", [("trace", b"t-1")])
    assert driver.emitter.backlog.cached > 0
    driver.emit_and_commit()
    assert driver.emitter.backlog.cached == 0
    out = {r.key: r for r in cluster.committed(EGRESS)}
    assert out[b"a"].value == b"a:0"
    assert out[b"b"].value == b"b:1"
    assert dict(out[b"b"].headers)["trace"] == b"t-1"
    assert dict(out[b"a"].headers)[wire.TENANT] == b"a"


def _traced(cluster: MemoryCluster, *tenants: str) -> None:
    """Records of ``tenants`` with a header of their own (``trace``: ``t-<offset>``), value
    ``tenant:offset``, written to ingest partition 0."""
    start = len(cluster.log(INGEST)[0])
    for i, tenant in enumerate(tenants):
        at, key = start + i, tenant.encode()
        cluster.append(INGEST, key, b"%s:%d" % (key, at), [("trace", b"t-%d" % at)], partition=0)


def test_a_flood_of_records_with_headers_is_dead_lettered_with_their_keys_and_headers(
    cluster: MemoryCluster,
) -> None:
    driver = Driver(cluster, max_backlog=2)
    _traced(cluster, *"aaab")
    driver.ingest()
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:1", b"b:3"]
    [letter] = cluster.committed(DLQ)
    assert (letter.key, letter.value) == (b"a", b"a:2")
    headers = dict(letter.headers)
    assert headers["trace"] == b"t-2"
    assert headers[wire.DLQ_REASON] == wire.BACKLOG_FULL.encode()
    assert driver.emitter.backlog.cached == 0
    assert cluster.offsets[GROUP][(INGEST, 0)] == 4


def test_a_paused_tenants_records_with_headers_are_parked_with_their_keys_and_headers(
    cluster: MemoryCluster,
) -> None:
    # Its records leave gaps above the mark: past --park-ranges, parked in the holding log,
    # each with its key, its own headers and the request id it would have gone out with.
    driver = Driver(cluster, park_ranges=16, park_span=1_000)
    driver.emitter.set_policy("held", TenantPolicy(paused=True))
    _traced(cluster, *("held", "busy") * 100)
    while driver.ingest(10):
        driver.emit_and_commit()
    assert driver.egress() == [b"busy:%d" % (2 * i + 1) for i in range(100)]
    parked = cluster.committed(holding_topic(GROUP))
    assert parked
    for record in parked:
        offset = int((record.value or b"").split(b":")[1])
        assert record.key == b"held"
        headers = dict(record.headers)
        assert headers["trace"] == b"t-%d" % offset
        assert headers[wire.REQUEST_ID] == b"%s-0-%d" % (INGEST.encode(), offset)


def test_records_wait_packed_once_many_wait_and_go_out_as_they_came(
    cluster: MemoryCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From COMPACT_AT records waiting, and while they leave too slowly to go within
    # COMPACT_WAIT, a flat core keeps new records without headers packed in one bytes object
    # each (``records.pack``); they leave it as the records they were.
    _packing_from(monkeypatch, 3)
    driver = Driver(cluster)
    driver.produce("a", "b", "c")
    driver.ingest()  # a batch indexed with none waiting: as parsed
    driver.produce("a", "d")
    cluster.append(INGEST, b"e", b"e:5", [("trace", b"t-5")], partition=0)
    driver.ingest()  # three waiting: packed, but for the record with headers
    core = driver.emitter.rule.core
    # What the core holds (its own records, read for this test only).
    stored = {t: core._tenants[t] for t in "abcde"}  # type: ignore[union-attr]
    assert [type(stored[t].first) for t in "abc"] == [Parsed] * 3
    assert type(stored["a"].rest[0]) is bytes  # a's second record
    assert type(stored["d"].first) is bytes
    assert type(stored["e"].first) is Parsed
    head = core.peek("d")
    assert head is not None
    assert (head.partition, head.offset, head.tenant, head.cost, head.msg) == (0, 4, "d", 1, b"d:4")
    driver.emit_and_commit()
    out = {(r.key, r.value): r for r in cluster.committed(EGRESS)}
    assert sorted(out) == [
        (b"a", b"a:0"),
        (b"a", b"a:3"),
        (b"b", b"b:1"),
        (b"c", b"c:2"),
        (b"d", b"d:4"),
        (b"e", b"e:5"),
    ]
    assert dict(out[(b"e", b"e:5")].headers)["trace"] == b"t-5"
    assert cluster.offsets[GROUP][(INGEST, 0)] == 6


def test_records_taken_out_and_put_back_stay_packed(
    cluster: MemoryCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A purge takes a tenant's records out of the core and puts back those it keeps
    # (``Backlog.keep``): while records are indexed packed, they go back packed, the first
    # of them too, which was indexed as parsed.
    _packing_from(monkeypatch, 1)
    driver = Driver(cluster)
    driver.produce("a", "b")
    driver.ingest()  # none waiting: as parsed
    driver.produce("a", "a")
    driver.ingest()  # packed
    core = driver.emitter.rule.core
    record = core._tenants["a"]  # type: ignore[union-attr]  # the core's own, for this test
    assert type(record.first) is Parsed
    assert driver.emitter.backlog.purge("a", 0) == 3  # enqueued after 0: all kept
    record = core._tenants["a"]  # type: ignore[union-attr]
    assert [type(record.first), *map(type, list(record.rest)[::2])] == [bytes] * 3
    driver.emit_and_commit()
    assert sorted(driver.egress()) == [b"a:0", b"a:2", b"a:3", b"b:1"]


def test_a_paused_tenant_among_a_busy_ones_records_is_parked_and_never_wedges_it(
    cluster: MemoryCluster,
) -> None:
    # (held, busy) x 100,000 in one partition, the held tenant paused: each of its records
    # leaves a gap above the mark. Past --park-ranges gaps it is parked in the holding log,
    # so the mark follows the busy tenant, and the progress records stay small.
    n = 100_000
    driver = Driver(cluster, park_ranges=500, park_span=20_000)
    em = driver.emitter
    em.set_policy("held", TenantPolicy(paused=True))
    driver.produce(*("held", "busy") * n)
    while driver.ingest(3_000):
        driver.emit_and_commit()
    busy = [v for v in driver.egress() if v is not None]
    assert busy == [b"busy:%d" % (2 * i + 1) for i in range(n)]  # all, in order
    held = [r.value for r in cluster.committed(holding_topic(GROUP))]
    assert held == [b"held:%d" % (2 * i) for i in range(n)]  # parked, in order
    assert cluster.offsets[GROUP][(INGEST, 0)] == 2 * n  # the mark passed every gap
    largest = max(len(r.value or b"") for r in cluster.committed(progress_topic(GROUP)))
    assert largest < 64 * 1024


def test_nothing_is_emitted_before_the_policies_recorded_before_the_start_are_read(
    cluster: MemoryCluster,
) -> None:
    # A restart that rejoins at once (static membership) is handed its partitions before
    # its policy reader has read the policy topic again: a paused tenant's records must not
    # go out in between, and the instance is not ready meanwhile.
    # Nor is a record indexed meanwhile: its admission (and a purge) follows the policies.
    driver = Driver(cluster, wait_for_policies=True)
    em = driver.emitter
    driver.produce("held", "busy", "held", "busy")
    assert driver.hand_over() == 4
    assert driver.apply() == 0  # they wait in the handoff queue
    assert not em._may_emit(em.clock.now())
    assert not em.phase.ready
    paused = encode_policy(PolicyRecord(TenantPolicy(paused=True), 1))
    em._control(PolicyChange(b"held", paused))
    em._control(PoliciesRead())
    assert em.phase.ready
    assert em._may_emit(em.clock.now())
    assert driver.apply() == 4
    driver.emit_and_commit()
    assert driver.egress() == [b"busy:1", b"busy:3"]
