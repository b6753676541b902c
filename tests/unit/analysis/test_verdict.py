"""The verdict the demo and ``fairstream audit`` print, on p99s given by hand."""

from __future__ import annotations

from fairstream.analysis.verdict import Verdict, judge

RATE = 50.0  # records/s: the quiet threshold is QUIET_SLOTS / RATE = 0.2 s of ideal p99


def test_quiet_tenants_near_the_ideal_are_fair() -> None:
    verdict = judge(
        measured_p99={"noisy": 20.0, "q1": 0.3, "q2": 0.4},
        ideal_p99={"noisy": 19.0, "q1": 0.05, "q2": 0.1},
        fifo_p99={"noisy": 20.0, "q1": 18.0, "q2": 17.0},
        rate=RATE,
    )
    assert verdict == Verdict(("q1", "q2"), ("q1", "q2"), (), contention=True)
    assert verdict.fair
    assert verdict.line().startswith("fair: the quiet tenants (q1, q2)")


def test_a_quiet_tenant_that_waited_as_in_fifo_is_unfair() -> None:
    verdict = judge(
        measured_p99={"q1": 0.3, "q2": 15.0},
        ideal_p99={"q1": 0.05, "q2": 0.1},
        fifo_p99={"q1": 18.0, "q2": 17.0},
        rate=RATE,
    )
    assert verdict.fifo_like == ("q2",)
    assert not verdict.fair
    assert verdict.line() == "unfair: quiet tenants q2 waited as in FIFO"


def test_no_contention_and_no_quiet_tenant_are_not_fair() -> None:
    calm = judge({"q1": 0.1}, {"q1": 0.05}, {"q1": 0.3}, rate=RATE)
    assert not calm.contention
    assert not calm.fair
    assert calm.line().startswith("no contention")
    busy = judge({"a": 9.0}, {"a": 9.0}, {"a": 9.0}, rate=RATE)
    assert busy.quiet == ()
    assert not busy.fair
    assert busy.line() == "no quiet tenant: every tenant asked for more than its share"
