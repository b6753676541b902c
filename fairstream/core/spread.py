"""Which egress partition a released record goes to: its key's, or, for a backlogged tenant,
the partition with the most credit (the fewest records outstanding, then recent releases).

Egress is keyed by tenant, so a tenant's records all land on the partition its key hashes
to, and one worker owns that partition. A backlogged tenant with workers slower than the
rate then keeps one worker busy while the others idle, whatever the scheduler's credit
allows (measured: the paid API 0.69x busy with one noisy tenant and two workers;
``benchmarks.api_view --scenario slow-workers``). With
spreading on, a record of a tenant that is *backlogged* (it has records waiting, or
released and not yet settled) goes to the partition with the most credit:

- not behind: at most ``SLACK`` records *outstanding* above the partition with the fewest.
  Outstanding: released with a request id (``key``) whose settlement the caller learns
  (the concurrency slots, ``fairstream.core.inflight``) and not yet settled. Feedback names
  no egress partition, so the chooser remembers where each went; ``prune`` forgets those
  no longer held. A partition whose worker is slower (it owns more partitions than the
  others, or its calls take longer) falls behind and is skipped until it catches up;
- of those, the lowest recent *load* (alone, when nothing tells settlement: no
  concurrency limit): a decayed count of the records released to each partition, with a
  half-life of ``half_life`` seconds. Records are released against what the workers
  complete (the credit), so with workers of equal speed an even load per partition is an
  even share per worker.

A quiet tenant (nothing waiting, nothing outstanding) keeps its key's partition, and its
records count towards that partition's outstanding and load, so the backlogged tenants'
records fill the partitions around them.

This gives up a tenant's egress FIFO: its records are on several partitions, read by
several workers. The start order survives only where every record carries its start
moment (``fairstream-start-ms``, under a rate) and the workers start calls at it (a
playout delay): the caller decides when spreading is allowed (``--egress-spread``).

Pure: no I/O; time comes as ``now`` (seconds, any clock that does not go back). Not
thread-safe: one owner (the emitter) calls every method.
"""

from __future__ import annotations

import math
from collections.abc import Container, Hashable

__all__ = ["HALF_LIFE", "SLACK", "EgressSpread"]

HALF_LIFE = 1.0  # seconds: a few transactions of releases, less than a worker's stall
# Records a partition may have outstanding above the fewest of any and still take a
# backlogged record. Settlements are learnt late (feedback is batched), so joining the
# strictly shortest queue sends runs of records to one partition until the news arrives:
# it measured 0.949x busy against 0.963x by load alone (slow-workers, four runs each).
SLACK = 2
# Loads are kept in units that grow with time (a release at ``now`` adds 2 ** ((now -
# origin) / half_life)), so that nothing decays record by record; past this many
# half-lives they are brought back to an origin of ``now``.
_REBASE_AFTER = 64.0


class EgressSpread:
    """The egress partition of each released record (see the module docstring).

    ``partitions``: how many the egress topic has (at least 1). ``half_life``: seconds
    after which a release counts half towards its partition's load.
    """

    __slots__ = (
        "_half_life",
        "_loads",
        "_origin",
        "_out",
        "_stamp",
        "_stamped",
        "_started",
        "_where",
    )

    def __init__(self, partitions: int, *, half_life: float = HALF_LIFE) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")
        if not math.isfinite(half_life) or half_life <= 0:
            raise ValueError(f"half_life must be a finite number > 0, got {half_life!r}")
        self._half_life = half_life
        self._loads = [0.0] * partitions
        self._origin = 0.0
        self._started = False
        self._out = [0] * partitions  # records outstanding per partition
        self._where: dict[Hashable, int] = {}  # the partition of each outstanding request id
        self._stamp: int | None = None  # the start stamp of the last record placed
        self._stamped: dict[str, int] = {}  # the partition of each tenant placed at it

    @property
    def partitions(self) -> int:
        """How many egress partitions records are spread over."""
        return len(self._loads)

    def load(self, partition: int, now: float) -> float:
        """The decayed count of records released to ``partition`` as of ``now``."""
        if not self._started:
            return 0.0
        # A ``now`` before the last release (it never is, from one clock) counts as then.
        exponent = min(0.0, (self._origin - now) / self._half_life)
        return self._loads[partition] * math.exp2(exponent)

    def outstanding(self, partition: int) -> int:
        """Records released to ``partition`` with a request id and not yet pruned."""
        return self._out[partition]

    def choose(
        self,
        home: int,
        backlogged: bool,
        now: float,
        key: Hashable | None = None,
        *,
        tenant: str | None = None,
        stamp: int | None = None,
    ) -> int:
        """The partition for a record whose key hashes to ``home``, released at ``now``,
        counted towards that partition's load, and while ``key`` (its request id, None:
        its settlement will not be known) is held, towards its outstanding records.
        ``backlogged``: its tenant has other records waiting or outstanding; otherwise it
        keeps ``home``. A backlogged record takes the least loaded partition of those not
        behind (at most ``SLACK`` outstanding above the fewest); ties go to ``home``, then
        to the partitions after it in turn, so equal ones do not all pile on partition 0.

        ``tenant`` and ``stamp`` (its start stamp; records come in the order of their
        stamps): a tenant's records with the same stamp (a burst, released back to back)
        go to one partition, whose FIFO keeps their order; on two partitions, paced
        workers would start them at the same moment in no set order.

        Affects: the loads, the outstanding records, the tenants placed at the last stamp.
        """
        loads, out = self._loads, self._out
        count = len(loads)
        if not 0 <= home < count:
            raise ValueError(f"home must be a partition in [0, {count}), got {home!r}")
        weight = self._weight(now)
        chosen = home
        together = None
        if tenant is not None and stamp is not None:
            if stamp != self._stamp:
                self._stamp = stamp
                self._stamped.clear()
            together = self._stamped.get(tenant)
        if together is not None:
            chosen = together
        elif backlogged and count > 1:
            ceiling = min(out) + SLACK  # more outstanding than this: the partition is behind
            least = loads[home] if out[home] <= ceiling else math.inf
            for step in range(1, count):
                candidate = (home + step) % count
                if out[candidate] <= ceiling and loads[candidate] < least:
                    least, chosen = loads[candidate], candidate
        if tenant is not None and stamp is not None:
            self._stamped[tenant] = chosen
        loads[chosen] += weight
        if key is not None:
            before = self._where.get(key)
            if before is not None:  # the same request id again: counted once, where it went
                out[before] -= 1
            self._where[key] = chosen
            out[chosen] += 1
        return chosen

    def prune(self, held: Container[Hashable]) -> int:
        """Forget the outstanding records whose request ids are no longer in ``held`` (the
        caller's slots: settled, or their lease ended); how many. O(outstanding).

        Affects: the outstanding records.
        """
        where, out = self._where, self._out
        gone = [key for key in where if key not in held]
        for key in gone:
            out[where.pop(key)] -= 1
        return len(gone)

    def _weight(self, now: float) -> float:
        """What a release at ``now`` adds to a load, in the current units."""
        if not self._started:
            self._origin, self._started = now, True
        exponent = (now - self._origin) / self._half_life
        if exponent > _REBASE_AFTER:  # rescaled before 2 ** exponent could overflow
            scale = math.exp2(-exponent)  # 0.0 after a long idle spell: nothing recent is left
            loads = self._loads
            for i, value in enumerate(loads):
                loads[i] = value * scale
            self._origin, exponent = now, 0.0
        return math.exp2(exponent)
