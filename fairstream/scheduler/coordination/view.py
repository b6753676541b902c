"""What this instance knows of the group, and the rate it may take: ``PeerView``, pure (it
is fed what was sent, acknowledged and read, and reads an injected clock), with the reports
it exchanges (``Report``) and what it says of itself (``Coordination``).

The protocol, and why it needs no two hosts' clocks to agree, is ``coordination.shares``'s
docstring; ``shares.DemandExchange`` is the Kafka adapter around this view.

A report is JSON (``VERSION`` 3). ``demand`` is, as in version 2, every backlogged tenant by
its own class, one level (``shares.flatten``): what an instance of a release before tenant
groups reads. ``levels``, present when some tenant group has members backlogged, is the
same demand at two levels (ungrouped tenants, and each group with its weight, rate cap and
members: ``shares.GroupDemand``). A report of an earlier version has no groups; while one
is counted, every instance shares by the one-level demand, as that release does (and each
takes every group's whole cap, as it did), so that all compute the same rates.
``claims``, optional, are the sender's claims on tenant groups' budgets (``Claim``): the
log's order decides which are valid (``fairstream.core.budget.ClaimBook``), and each
instance spends a group's budget up to its valid claim. ``txn``, optional (absent from
earlier releases' reports, read as unknown), is the sender's transactional id: a survivor
that takes over a silent peer's partitions fences it (``fence``) so that the broker aborts
what the peer left open at once, and removes its report (its claims given back).

``silent`` is what the fence rests on, facts of the log alone: a peer heard after this
instance's first echo whose last report is followed in the log by an own report sent at
least ``SILENCE`` after it was read, with nothing of the peer in between: it wrote nothing
for that long (a live one writes every heartbeat).
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple

from fairstream.core import RecordClock
from fairstream.core.budget import ClaimBook, ClaimKey, plan_claim
from fairstream.core.shares import (
    WHOLE,
    ClassDemand,
    Demand,
    GroupDemand,
    GroupParts,
    flatten,
    instance_share,
)
from fairstream.scheduler.messages import Exchanged, Spend

__all__ = [
    "DELIVERY_TIMEOUT",
    "FLOOR",
    "LEASE",
    "RAISE_DELAY",
    "SILENCE",
    "STALE",
    "STARTING",
    "VERSION",
    "Coordination",
    "PeerView",
    "Report",
    "ShareDecision",
]

log = logging.getLogger("fairstream.group")

LEASE = 3.0  # coordinated only while an own report sent this recently was read back
STALE = 4.0  # a peer's report older than this (see group's docstring) is not counted
DELIVERY_TIMEOUT = 2.0  # a report is written within this long of being sent, or never
RAISE_DELAY = 0.3  # an instance raises its rate this long after first computing it
FLOOR = 0.05  # of the group rate, split between the instances, kept by idle ones
VERSION = 3  # of the reports written: 3 adds tenant groups (``levels``)
# A peer that wrote nothing for this long in the log is silent (``silent``). A live one
# writes a report every heartbeat, but its group thread waits up to 5 s for a busy emitter's
# demand (``Handoff.call``) and a report lands up to ``DELIVERY_TIMEOUT`` after it is sent:
# its reports can be 7.3 s apart in the log, never longer while the process runs.
SILENCE = 8.0


@dataclass(frozen=True)
class Report:
    instance: str
    sent_ms: int  # wall clock, for people only: nothing compares it with another clock
    partitions: tuple[int, ...]
    demand: dict[int, ClassDemand]
    coordinated: bool = True  # False: the sender takes its safe share (count its partitions)
    run: str = ""  # which run of the instance sent it (its own reports read back)
    seq: int = 0  # the run's sequence number of the report

    version: int = VERSION  # of the sender's reports (below 3: it knows no groups)
    transactional_id: str = ""  # the sender's ("": not said, as earlier releases)
    claims: tuple[Claim, ...] = ()  # its claims on tenant groups' budgets (optional)

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "v": VERSION,
            "instance": self.instance,
            "sent_ms": self.sent_ms,
            "partitions": list(self.partitions),
            "demand": _encode_demand(flatten(self.demand)),
            "coordinated": self.coordinated,
            "run": self.run,
            "seq": self.seq,
        }
        if any(cd.groups for cd in self.demand.values()):
            doc["levels"] = _encode_demand(self.demand)
        if self.transactional_id:
            doc["txn"] = self.transactional_id
        if self.claims:
            doc["claims"] = [c.encode() for c in self.claims]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Report:
        """Raises ``ValueError`` (with a reason) for anything that is not a report. Version
        1 reports (no mode, run or sequence) read as coordinated; reports before version 3
        have no groups."""
        try:
            doc = json.loads(raw)
            return cls(
                str(doc["instance"]),
                int(doc["sent_ms"]),
                tuple(int(p) for p in doc["partitions"]),
                _decode_demand(doc.get("levels", doc["demand"])),
                bool(doc.get("coordinated", True)),
                str(doc.get("run", "")),
                int(doc.get("seq", 0)),
                int(doc.get("v", 1)),
                str(doc.get("txn", "")),
                tuple(Claim.decode(entry) for entry in doc.get("claims", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a coordination report: {exc!r}") from exc


class Claim(NamedTuple):
    """An instance's claim on a tenant group's budget in one window (``ClaimBook``): which
    (``key``), the limit, what its partitions spent, the claim, and the weight of the group's
    members backlogged there (each instance's part of what is left follows it)."""

    key: ClaimKey
    limit: int
    spent: int
    claim: int
    weight: float = 0.0

    def encode(self) -> list[object]:
        return [*self.key, self.limit, self.spent, self.claim, self.weight]

    @classmethod
    def decode(cls, entry: Any) -> Claim:
        group, unit, window, rolling, zone, start, limit, spent, claim, weight = entry
        key = ClaimKey(str(group), str(unit), str(window), bool(rolling), str(zone), int(start))
        return cls(key, int(limit), int(spent), int(claim), float(weight))


def _claims_of(report: Report) -> list[tuple[ClaimKey, int, int, int, float]]:
    return [(c.key, c.limit, c.spent, c.claim, c.weight) for c in report.claims]


def _encode_demand(demand: Demand) -> dict[str, object]:
    out: dict[str, object] = {}
    for priority, d in demand.items():
        entry: dict[str, object] = {"weight": d.weight, "capped": [list(c) for c in d.capped]}
        if d.groups:
            entry["groups"] = [
                {
                    "group": g.group,
                    "weight": g.weight,
                    "cap": g.cap,
                    "members": _encode_demand(g.members),
                }
                for g in d.groups
            ]
        out[str(priority)] = entry
    return out


def _decode_demand(doc: Any) -> dict[int, ClassDemand]:
    out = {}
    for priority, d in doc.items():
        if not isinstance(d, dict):
            raise TypeError(f"a class's demand is an object, got {d!r}")
        groups = tuple(
            GroupDemand(
                g["group"],
                float(g["weight"]),
                None if g["cap"] is None else float(g["cap"]),
                _decode_demand(g["members"]),
            )
            for g in d.get("groups", ())
        )
        capped = tuple((float(w), float(c)) for w, c in d["capped"])
        out[int(priority)] = ClassDemand(float(d["weight"]), capped, groups)
    return out


@dataclass(frozen=True)
class Coordination:
    """A read-only snapshot of this instance's coordination, for ``/readyz``, ``/metrics``
    and ``/tenants`` (replaced whole by the group thread; read from any thread)."""

    coordinated: bool  # the share follows the group's demand (False: the safe share)
    reason: str | None  # why not, in words (None when coordinated)
    fraction: float  # of --rate, taken now
    instances: int  # counted instances, this one included
    publish_failures: int  # reports the broker did not acknowledge, since start
    read_failures: int  # errors reading the coordination topic, since start

    def describe(self) -> str:
        share = f"{self.fraction:.3f} of --rate"
        if self.coordinated:
            return f"coordinated with {self.instances} instance(s), {share}"
        return f"safe share ({share}): {self.reason}"


STARTING = Coordination(False, "starting: no report of this instance read back yet", 0, 1, 0, 0)


@dataclass(frozen=True)
class ShareDecision:
    """This instance's share of the group rate, as ``PeerView.decide`` found it now."""

    rate: float  # records/s (or cost units/s) this instance may take now
    coordinated: bool
    live: dict[str, Report]  # counted instances' reports, this one's included
    reserved: float  # of the rate, kept for partitions no counted report lists
    parts: GroupParts = WHOLE  # of each tenant group's weight and rate cap, taken now


class PeerView:
    """What this instance knows of its peers (the instances of its consumer group), and the
    rate it may take. Pure: the caller feeds it what was sent, acknowledged and read; every
    age is a duration on ``clock``'s ``now`` (a report's ``sent_ms``, for people only, is its
    ``epoch_ms``).
    Caller: ``DemandExchange`` (one thread)."""

    def __init__(
        self,
        instance: str,
        partitions: int,
        clock: RecordClock,
        run: str = "",
        transactional_id: str = "",
    ) -> None:
        if partitions < 1:
            raise ValueError(f"the ingest topic has partitions, got {partitions!r}")
        self.instance = instance
        self.transactional_id = transactional_id  # said in every report ("": not said)
        self.partitions = partitions  # P: every partition of the ingest topic
        self.run = run or uuid.uuid4().hex[:12]
        self.clock = clock
        self.peers: dict[str, tuple[Report, float | None]] = {}  # report, anchor (see doc)
        self._heard: dict[str, float] = {}  # peer -> when its last report was read
        self.own: Report | None = None  # the last report sent
        self._seq = 0
        self._sent: dict[int, tuple[float, bool]] = {}  # seq -> (sent at, coordinated)
        self._echo: tuple[float, bool] | None = None  # the latest own report read back
        self._last_coordinated_sent = -math.inf
        self._applied = 0.0
        self._raise_at: float | None = None
        self._parts = GroupParts(0.0)  # as the rate: nothing before the first decision
        self._parts_raise: dict[str | None, float] = {}  # group (None: the rest) -> raise at
        self.publish_error: str | None = None  # the last delivery failure, until an ack
        self.read_error: str | None = None  # the last read failure, until an echo
        self.publish_failures = 0
        self.read_failures = 0
        # Tenant groups' budgets: every instance's valid claims, in log order, and this
        # instance's claims as last published.
        self.book = ClaimBook()
        self._published: dict[ClaimKey, int] = {}

    # -- what happened ------------------------------------------------------------------------

    def report(
        self,
        demand: dict[int, ClassDemand],
        partitions: tuple[int, ...],
        claims: tuple[Claim, ...] = (),
    ) -> Report:
        """A new report of this instance, to publish now (its mode: whether it reads
        itself back), with its claims on tenant groups' budgets (``plan_claims``)."""
        now = self.clock.now()
        self._seq += 1
        coordinated = self.reads()
        report = Report(
            self.instance,
            self.clock.epoch_ms(),
            partitions,
            demand,
            coordinated,
            self.run,
            self._seq,
            transactional_id=self.transactional_id,
            claims=claims,
        )
        sent = self._sent
        sent[self._seq] = (now, coordinated)
        # Reports never read back (the topic refuses them) are forgotten once too old to
        # make this instance coordinated anyway: the map stays small.
        while sent:
            first = next(iter(sent))
            if now - sent[first][0] <= LEASE:
                break
            del sent[first]
        if coordinated:
            self._last_coordinated_sent = now
        self.own = report
        # A give-back binds this instance at once; a raise only once read back valid.
        self._published = {c.key: c.claim for c in claims}
        return report

    def plan_claims(self, budgets: tuple[Spend, ...]) -> tuple[Claim, ...]:
        """The claims to publish next on the tenant groups' budgets ``budgets`` (as the
        emitter sees them): ``plan_claim`` for each, from the valid claims as read so far,
        this instance's part being its backlogged members' weight over the group's on
        every instance (as their last reports say)."""
        book, me = self.book, self.instance
        out = []
        for b in budgets:
            others_claims, others_spent = book.others(b.key, me)
            everywhere = b.weight + book.others_weight(b.key, me)
            claim = plan_claim(
                self.claim_in_force(b.key),
                b.limit,
                b.spent,
                others_claims,
                others_spent,
                b.weight / everywhere if everywhere > 0 else 0.0,
            )
            out.append(Claim(b.key, b.limit, b.spent, claim, b.weight))
        return tuple(out)

    def claim_in_force(self, key: ClaimKey) -> int:
        """What this instance may spend of a group's budget: its valid claim as read back,
        or a lower one it has published since (a give-back binds at once)."""
        valid = self.book.claim(key, self.instance)
        published = self._published.get(key)
        return valid if published is None else min(valid, published)

    def claims_in_force(self) -> tuple[Exchanged, ...]:
        """Every claim in force of this instance, for the emitter."""
        mine = {k for k in self.book.keys() if self.book.claim(k, self.instance)}  # noqa: SIM118
        return tuple(
            Exchanged(key, self.claim_in_force(key)) for key in sorted(set(self._published) | mine)
        )

    def acked(self, seq: int) -> None:
        self.publish_error = None

    def failed(self, seq: int, reason: str) -> None:
        """The broker refused (or never acknowledged) report ``seq``."""
        self.publish_failures += 1
        self.publish_error = reason

    def read_failed(self, reason: str) -> None:
        self.read_failures += 1
        self.read_error = reason

    def received(self, key: str, value: bytes | None) -> None:
        """A record read from the coordination topic, in log order."""
        if value is None:
            self.book.drop(key)  # it left (or was fenced): its claims are given back
        if key == self.instance:
            if value is None:
                return  # the tombstone of an earlier run of this instance
            try:
                report = Report.decode(value)
            except ValueError:
                return
            self.book.record(key, _claims_of(report))
            sent = self._sent.get(report.seq) if report.run == self.run else None
            if sent is not None:  # ours, this run: everything before it is read
                self._echo = sent
                self.read_error = None
                for seq in [s for s in self._sent if s <= report.seq]:
                    del self._sent[seq]
            return  # an earlier run's report: it is this instance, not a peer
        if value is None:
            self.peers.pop(key, None)  # an instance that left
            self._heard.pop(key, None)
            return
        try:
            report = Report.decode(value)
        except ValueError as exc:
            log.warning("ignoring coordination record %r: %s", key, exc)
            return
        self.book.record(key, _claims_of(report))
        self.peers[key] = (report, self._echo[0] if self._echo is not None else None)
        self._heard[key] = self.clock.now()

    # -- what follows ---------------------------------------------------------------------------

    def reads(self) -> bool:
        """Whether an own report sent within ``LEASE`` was read back (any mode)."""
        echo = self._echo
        return echo is not None and self.clock.now() - echo[0] <= LEASE

    def coordinated(self) -> bool:
        echo = self._echo
        return echo is not None and echo[1] and self.clock.now() - echo[0] <= LEASE

    def live(self) -> dict[str, Report]:
        """The counted peers' reports: fresh (see the module doc) and coordinated."""
        now = self.clock.now()
        return {
            i: r
            for i, (r, anchor) in self.peers.items()
            if r.coordinated and anchor is not None and now - anchor <= STALE
        }

    def decide(
        self, demand: dict[int, ClassDemand], partitions: tuple[int, ...], rate: float
    ) -> ShareDecision:
        """The rate this instance may take now, out of the group rate ``rate``, and its part
        of each tenant group's cap, with what they were computed from. Moves the raise
        delays on; call once per look."""
        now = self.clock.now()
        total = self.partitions
        own = {p for p in partitions if 0 <= p < total}
        coordinated = self.coordinated()
        live: dict[str, Report] = {}
        reserved = 0.0
        if coordinated:
            live = self.live()
            covered = set(own)
            for report in live.values():
                covered.update(p for p in report.partitions if 0 <= p < total)
            reserved = rate * (total - len(covered)) / total
            demands: dict[str, Demand] = {i: r.demand for i, r in live.items()}
            demands[self.instance] = demand
            if any(r.version < VERSION for r in live.values()):
                # A peer of a release before groups: share as it does, one level.
                demands = {i: flatten(d) for i, d in demands.items()}
                share = instance_share(demands, self.instance, rate - reserved, FLOOR)
                target, parts = share.rate, WHOLE
            else:
                share = instance_share(demands, self.instance, rate - reserved, FLOOR)
                # The partitions no counted report lists keep their part of each cap too.
                target, parts = share.rate, share.parts.scaled(len(covered) / total)
        else:
            target = rate * len(own) / total
            parts = GroupParts(len(own) / total)
            if now < self._last_coordinated_sent + DELIVERY_TIMEOUT + STALE:
                # Peers may still count our last coordinated report at its share.
                target = min(target, self._applied)
                parts = _least(parts, self._parts)
        current = self._applied
        if target > current + 1e-9:
            if self._raise_at is None:
                self._raise_at = now + RAISE_DELAY
            if now < self._raise_at:
                target = current
            else:
                self._raise_at = None
        else:
            self._raise_at = None
        self._applied = target
        if self.own is not None:
            live = {**live, self.instance: self.own}
        return ShareDecision(target, coordinated, live, reserved, self._raise_parts(parts, now))

    def _raise_parts(self, target: GroupParts, now: float) -> GroupParts:
        """The parts of the groups' caps to take now: lower at once, raise ``RAISE_DELAY``
        after first computed (as the rate). Weights' parts apply at once."""
        applied, delays = self._parts, self._parts_raise

        def settle(key: str | None, want: float, had: float) -> float:
            if want <= had + 1e-12:
                delays.pop(key, None)
                return want
            due = delays.setdefault(key, now + RAISE_DELAY)
            if now < due:
                return had
            del delays[key]
            return want

        cap = settle(None, target.cap, applied.cap)
        groups = {}
        for group in set(target.groups) | set(applied.groups):
            weight, want = target.of(group)
            part = (weight, settle(group, want, applied.of(group)[1]))
            if part != (1.0, cap):
                groups[group] = part
        for key in [k for k in delays if k is not None and k not in groups]:
            del delays[key]
        self._parts = GroupParts(cap, groups)
        return self._parts

    def silent(self) -> dict[str, Report]:
        """Peers that wrote nothing in the log for ``SILENCE``, with their last report.

        Each was heard after this instance's first echo (so its report is not an old one of
        a long-gone instance, read at start), and an own report sent at least ``SILENCE``
        after that was read back since: whatever the peer wrote before that report was
        read too. A tombstone removes a peer (it left and settled what it had open)."""
        echo = self._echo
        if echo is None:
            return {}
        return {
            i: r
            for i, (r, anchor) in self.peers.items()
            if anchor is not None and echo[0] - self._heard[i] >= SILENCE
        }

    def reason(self) -> str | None:
        """Why this instance is not coordinated, in words (None when it is)."""
        if self.coordinated():
            return None
        if self.publish_error is not None:
            return f"cannot publish reports: {self.publish_error}"
        if self.read_error is not None:
            return f"cannot read reports: {self.read_error}"
        if self._echo is None:
            return "starting: no report of this instance read back yet"
        if not self._echo[1] and self.reads():
            return "rejoining: waiting for a coordinated report of this instance to come back"
        return f"no report of this instance read back within {LEASE:.0f} s"

    def ages(self) -> dict[str, float | None]:
        """Each peer report's age bound (seconds; None: unknown), for people."""
        now = self.clock.now()
        return {
            i: None if anchor is None else round(now - anchor, 3)
            for i, (_, anchor) in self.peers.items()
        }


def _least(a: GroupParts, b: GroupParts) -> GroupParts:
    """``a``'s weights, with each cap's part the lower of ``a``'s and ``b``'s."""
    groups = {g: (a.of(g)[0], min(a.of(g)[1], b.of(g)[1])) for g in set(a.groups) | set(b.groups)}
    return GroupParts(min(a.cap, b.cap), groups)
