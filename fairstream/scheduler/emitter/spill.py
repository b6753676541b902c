"""A tenant far behind waits in the ingest log, not in memory: its records are passed over as
they are read and read again when its turn nears.

Why: a burst of a million records into one partition was read, parsed and indexed record by
record (3-4 us each on a shared interpreter lock) before the quiet tenants' records behind it
in the same partition could join the core: they waited as long as the whole burst took to
index, although at the rate's pace the burst would be emitted over half an hour. The ingest
log already holds those records in order; indexing all of them bought nothing.

How (the emitter thread owns all of it; the ingest thread only reads ``Handoff.passing``):

- *Passing.* When a tenant's backlog in the core reaches ``depth`` records (what the rate
  emits in ``--index-ahead`` seconds, at least ``MIN_DEPTH``), the emitter publishes its key
  for its partition (``Handoff.passing``, a snapshot replaced whole). The ingest thread then
  passes its records over: a key and an offset each, no parsing, and each run of them at
  consecutive offsets reaches the emitter as one ``records.passed_over`` in the partition's
  queue, in log order with the other records.
- *Runs.* The emitter keeps each tenant's runs per partition (``runs``), oldest first. The
  partition's progress counts a run as read and unsettled: offsets between two runs are
  still gaps (transaction markers), a run never is. Records of the tenant that reach the
  emitter parsed while it has runs waiting (read before the ingest thread saw the snapshot,
  or after it was withdrawn) join the runs too, so its records enter the core in log order.
- *Reading again.* When the tenant's backlog falls below half of ``depth``, its oldest runs
  are read back (``PayloadFetcher``, a read window of its own) and parsed as the ingest
  thread would, up to ``depth`` records, and indexed like any record read for the first
  time (admission, expiry, purges and parking apply then). A record the log no longer holds
  becomes a ``lost`` dead letter. A read that fails now is tried again later (the fetcher's
  backoff); the tenant's runs wait meanwhile, and so does the low-water mark.
- *Withdrawn.* Once a tenant's runs are all read again, its key is withdrawn: its next
  records are indexed as they come, until its backlog reaches ``depth`` again.

Only while emission is paced by a rate (``--rate``, or its share): unpaced, the core drains
as fast as egress takes records, and reading a record twice would cost more than indexing it.
``--index-ahead 0`` turns passing off.

Costs: a passed-over record costs the ingest thread about a tenth of a parse; read again,
it costs a read from the log window and the parse it skipped. A tenant's runs cost one list
each: a bursting tenant's records sit next to each other, so its runs are few; a tenant
whose records alternate with another's costs one run per record, as many objects as indexed.

Caller: the emitter thread (``Backlog`` indexes through it). Affects: ``Handoff.passing``.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Message

from fairstream import wire
from fairstream.core import FairScheduler
from fairstream.core.emission import EmissionRule
from fairstream.scheduler.emitter.fetch import PATIENT, Gone, PayloadFetcher
from fairstream.scheduler.handoff import Handoff
from fairstream.scheduler.parsing import parse
from fairstream.scheduler.progress import PartitionProgress
from fairstream.scheduler.records import Letter, Parsed, unread
from fairstream.wire.dead_letter import lost_detail

__all__ = ["MIN_DEPTH", "REFILL_BATCH", "Spill"]

log = logging.getLogger("fairstream.spill")

# Records of one tenant indexed before the rest of its backlog waits in the log: enough that
# the core never runs dry between two reads (one read brings the next half), few enough that
# a burst costs the core megabytes, not hundreds of them.
MIN_DEPTH = 20_000
# Records read again per turn of the emitter's loop at most: a tenant's half depth can be
# hundreds of thousands (a fast rate), and emission goes on between two turns.
REFILL_BATCH = 4096


class Spill:
    """Per (ingest partition, tenant), the runs of records that wait in the ingest log.

    ``runs`` maps each to ``[start, end)`` offset runs, oldest first; ``counts`` each tenant's
    records in them. Caller: the emitter thread."""

    def __init__(
        self,
        index_ahead: float,
        handoff: Handoff,
        fetcher: PayloadFetcher,
        rule: EmissionRule[Parsed],
    ) -> None:
        self.index_ahead = index_ahead
        self.handoff = handoff
        self.fetcher = fetcher
        self.rule = rule
        self.min_depth = MIN_DEPTH
        self.runs: dict[tuple[int, str], deque[list[int]]] = {}
        self.counts: dict[str, int] = {}
        self.waiting = 0  # records in all runs
        self._passing: set[tuple[int, str]] = set()  # what ``Handoff.passing`` says
        self._tenants: dict[bytes, str] = {}  # the keys parsed again (``parsing.parse``'s cache)

    def depth(self) -> int | None:
        """Records of one tenant the core holds before the rest waits in the log; None
        while nothing is passed over (unpaced, or ``--index-ahead 0``)."""
        rate = self.rule.rate
        if rate is None or self.index_ahead <= 0:
            return None
        return max(self.min_depth, int(rate * self.index_ahead))

    # -- what the ingest thread hands over ----------------------------------------------------

    def passed(
        self,
        prog: PartitionProgress,
        partition: int,
        first: int,
        tenant: str,
        count: int,
        room: float,
    ) -> list[tuple[int, int]]:
        """A run the ingest thread passed over (``records.passed_over``): the progress counts
        it read (not settled), and it joins the tenant's runs as far as ``room`` goes (the
        records its backlog limit still allows, in the core and the log together); the
        offset ranges beyond are returned, refused (``backlog-full``). Offsets settled before
        a restart (the log read again from the mark) are left out of it."""
        end = first + count
        first = max(first, prog.next)  # what was seen already is not seen again
        if first >= end:
            return []
        pieces: list[tuple[int, int]] = []
        if first < prog.replay_end:
            start = first
            for offset in range(first, end):
                if prog.recovered(offset):
                    if offset > start:
                        pieces.append((start, offset))
                    start = offset + 1
                prog.observe(offset)
            if end > start:
                pieces.append((start, end))
        else:
            prog.observe(first)  # gaps before the run are settled, the run is not
            prog.next = end
            pieces.append((first, end))
        refused: list[tuple[int, int]] = []
        left = room - self.counts.get(tenant, 0)
        for start, stop in pieces:
            fits = stop if left >= stop - start else start + max(0, int(left))
            if fits > start:
                self.add(partition, tenant, start, fits)
                left -= fits - start
            if fits < stop:
                refused.append((fits, stop))
        return refused

    def add(self, partition: int, tenant: str, start: int, end: int) -> None:
        """``[start, end)``, records of ``tenant`` in ``partition`` past its runs' last, wait
        in the log. Caller: ``passed``, and the backlog for a parsed record of a tenant with
        runs waiting (so that its records enter the core in log order)."""
        key = (partition, tenant)
        runs = self.runs.get(key)
        if runs is None:
            runs = self.runs[key] = deque()
        if runs and runs[-1][1] == start:
            runs[-1][1] = end
        else:
            runs.append([start, end])
        self.counts[tenant] = self.counts.get(tenant, 0) + end - start
        self.waiting += end - start

    # -- deciding whom to pass over -----------------------------------------------------------

    def consider(self, touched: Iterable[tuple[int, str]], depth: int) -> None:
        """Pass over the tenants among ``touched`` (partition, tenant: indexed just now)
        whose backlog in the core reached ``depth``. Not with tenant groups, whose caps are
        shared by their members, nor a tenant with a limit on its backlog's cost (what a
        record costs is known once it is parsed). A limit on its records counts the records
        in the log too (``passed``)."""
        core = self.rule.core
        if type(core) is not FairScheduler:
            return
        for key in touched:
            partition, tenant = key
            if partition < 0 or key in self._passing:
                continue
            have = core.backlog(tenant)[0]
            if have >= depth and math.isinf(core.room(tenant)[1]):
                self._publish(key, on=True)
                log.debug(
                    "tenant %r: %d records in the core; its next records of partition %d "
                    "wait in the log",
                    tenant,
                    have,
                    partition,
                )

    def _publish(self, key: tuple[int, str], *, on: bool) -> None:
        partition, tenant = key
        passing = dict(self.handoff.passing)
        keys = dict(passing.get(partition, {}))
        if on:
            self._passing.add(key)
            keys[tenant.encode()] = tenant
        else:
            self._passing.discard(key)
            keys.pop(tenant.encode(), None)
        if keys:
            passing[partition] = keys
        else:
            passing.pop(partition, None)
        self.handoff.passing = passing

    # -- reading again --------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether any tenant has records in the log or is passed over (``refill`` has work)."""
        return bool(self.runs or self._passing)

    def refill(
        self,
        index: Callable[[list[Parsed]], None],
        letter: Callable[[Letter], None],
        parked: dict[int, dict[str, int]],
    ) -> int:
        """Read again the oldest runs of each tenant whose backlog in the core fell below
        half of the depth, up to the depth and at most ``REFILL_BATCH`` records a call, and
        ``index`` them; records the log no longer holds go to ``letter``. A tenant parked in
        the partition (``parked``: the parking's counts, ``holding``) is read again whatever
        its backlog: its records go on to the holding log as they are indexed, and its runs
        must not pin the mark the parking moves on.

        Also keeps what the ingest thread is told true: a tenant with runs is passed over
        while paced (its records would join its runs anyway, parsed for nothing), unless
        parked; a tenant without runs whose backlog fell below half the depth is not, nor is
        any once emission is no longer paced. How many records were read or found gone.
        Caller: the emitter's loop, while ``active``."""
        paced = self.depth()
        depth = paced or self.min_depth  # unpaced now: what waits is read all the same
        core = self.rule.core
        budget = REFILL_BATCH
        for key in [k for k in self._passing if k not in self.runs or paced is None]:
            if paced is None or core.backlog(key[1])[0] < depth // 2:
                self._publish(key, on=False)
        for key in list(self.runs):
            partition, tenant = key
            moving = tenant in parked.get(partition, ())
            if paced is not None and (key in self._passing) == moving:
                self._publish(key, on=not moving)
            have = core.backlog(tenant)[0]
            if budget <= 0 or (have >= depth // 2 and not moving):
                continue
            want = min(budget, depth if moving else depth - have)
            messages, taken = self._read(key, want, letter)
            budget -= taken
            if messages:
                parsed: deque[Parsed] = deque()
                parse(partition, messages, parsed, self._tenants, _ignore, _ignore)
                index(list(parsed))
        return REFILL_BATCH - budget

    def _read(
        self, key: tuple[int, str], want: int, letter: Callable[[Letter], None]
    ) -> tuple[list[Message], int]:
        """Up to ``want`` records from the front of ``key``'s runs, taken out of them, and
        how many were taken (those the log no longer holds too: ``lost`` letters)."""
        partition, tenant = key
        runs = self.runs[key]
        fetcher = self.fetcher
        out: list[Message] = []
        taken = 0
        while runs and taken < want:
            run = runs[0]
            offset = run[0]
            got = fetcher.get(partition, offset, PATIENT)  # emission goes on meanwhile
            if got is None:
                break  # not yet (or the fetcher backs off): the runs wait for the next turn
            if isinstance(got, Gone):
                # Retention took the log below its start: every run offset below it is gone,
                # lettered at once rather than asked for one by one.
                while runs and runs[0][0] < got.log_start:
                    run = runs[0]
                    end = min(run[1], got.log_start)
                    for at in range(run[0], end):
                        bare = unread(partition, at, tenant)
                        detail = lost_detail(partition, at, got.log_start)
                        letter(Letter(tenant, bare, wire.LOST, detail))
                    taken += end - run[0]
                    run[0] = end
                    if run[0] == run[1]:
                        runs.popleft()
                continue
            taken += 1
            run[0] = offset + 1
            if run[0] == run[1]:
                runs.popleft()
            out.append(got)
        self._taken(key, tenant, taken)
        return out, taken

    def join(self, partition: int, offset: int, tenant: str, room: float) -> bool:
        """A record of ``tenant`` the ingest thread parsed while its runs wait: it joins them
        (after them in log order) if its backlog limit (``room``: what the core may still
        take) leaves room for it beside the records in the log; False: refused."""
        if room - self.counts.get(tenant, 0) < 1:
            return False
        self.add(partition, tenant, offset, offset + 1)
        return True

    def _taken(self, key: tuple[int, str], tenant: str, count: int) -> None:
        self.waiting -= count
        left = self.counts[tenant] - count
        if left:
            self.counts[tenant] = left
        else:
            del self.counts[tenant]
        if not self.runs[key]:
            del self.runs[key]
            if key in self._passing:
                self._publish(key, on=False)  # caught up: its records are indexed as they come

    # -- ownership ----------------------------------------------------------------------------

    def drop(self, gone: set[int]) -> None:
        """Forget the runs of the partitions in ``gone`` (revoked)."""
        for key in [k for k in self.runs if k[0] in gone]:
            runs = self.runs.pop(key)
            count = sum(end - start for start, end in runs)
            self.waiting -= count
            left = self.counts[key[1]] - count
            if left:
                self.counts[key[1]] = left
            else:
                del self.counts[key[1]]
        for key in [k for k in self._passing if k[0] in gone]:
            self._publish(key, on=False)

    def clear(self) -> None:
        """After an abort: nothing waits (the log is read again from the marks)."""
        self.runs.clear()
        self.counts.clear()
        self.waiting = 0
        self._passing.clear()
        self.handoff.passing = {}


def _ignore(_: Any) -> None:
    """A read back has no partition end and no consumer error (the fetcher keeps them)."""
