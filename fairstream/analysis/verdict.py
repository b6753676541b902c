"""The verdict the demo and ``fairstream audit`` print: did the quiet tenants wait as in the
ideal (GPS) schedule of the same arrivals, or as in FIFO?

Pure: it takes each tenant's measured p99 dwell and the p99s the reference schedules
(``fairstream.analysis.reference``) give the same arrivals, and returns a ``Verdict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

QUIET_SLOTS = 10  # a tenant whose ideal p99 dwell is within this many service slots is quiet
VISIBLE = 0.25  # s: the least dwell anyone measures (a commit interval, a consumer's poll)
CONTENTION = 4.0  # FIFO's p99 beyond this many times the ideal: there was a queue to jump


@dataclass(frozen=True)
class Verdict:
    """Whether the quiet tenants waited as in the ideal (GPS) schedule or as in FIFO.

    Quiet tenants are those the ideal schedule serves within ``QUIET_SLOTS`` service slots
    (p99): they ask for less than their share. Each one's measured p99 dwell is "near the
    ideal" when it is nearer, on a log scale, to the ideal p99 than to FIFO's (both floored
    at ``VISIBLE``, what no consumer can see below).
    """

    quiet: tuple[str, ...]
    near_ideal: tuple[str, ...]
    fifo_like: tuple[str, ...]
    contention: bool

    @property
    def fair(self) -> bool:
        return self.contention and not self.fifo_like

    def line(self) -> str:
        if not self.quiet:
            return "no quiet tenant: every tenant asked for more than its share"
        names = ", ".join(self.quiet)
        if not self.contention:
            return f"no contention: FIFO would have served the quiet tenants ({names}) as well"
        if self.fifo_like:
            return f"unfair: quiet tenants {', '.join(self.fifo_like)} waited as in FIFO"
        return f"fair: the quiet tenants ({names}) waited as in the ideal (GPS) schedule, not FIFO"


def judge(
    measured_p99: Mapping[str, float],
    ideal_p99: Mapping[str, float],
    fifo_p99: Mapping[str, float],
    rate: float,
) -> Verdict:
    """The verdict on each tenant's p99 dwell against the ideal and FIFO of the same arrivals."""
    quiet = sorted(t for t, g in ideal_p99.items() if g <= QUIET_SLOTS / rate and t in measured_p99)
    near: list[str] = []
    fifo_like: list[str] = []
    contention = False
    for tenant in quiet:
        ideal = max(ideal_p99[tenant], VISIBLE)
        fifo = max(fifo_p99.get(tenant, 0.0), VISIBLE)
        if fifo > CONTENTION * ideal:
            contention = True
        if measured_p99[tenant] <= (ideal * fifo) ** 0.5:
            near.append(tenant)
        else:
            fifo_like.append(tenant)
    return Verdict(tuple(quiet), tuple(near), tuple(fifo_like), contention)
