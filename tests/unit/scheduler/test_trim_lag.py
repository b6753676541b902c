"""``Seasoned`` (``fairstream.scheduler.retention.trim``): a committed mark is trimmed to
once it has stood ``lag`` seconds without a rewind; a rewind forgets the marks that had not
ripened."""

from __future__ import annotations

from fairstream.scheduler.retention.trim import Seasoned


def test_a_mark_ripens_after_the_lag() -> None:
    marks = Seasoned(lag=20.0)
    marks.observe(0, 100.0, {0: 10, 1: 5})
    assert marks.ripe(119.9) == {}
    marks.observe(0, 110.0, {0: 30, 1: 5})  # partition 0 moved on; 1 stood still
    assert marks.ripe(120.0) == {0: 10, 1: 5}
    assert marks.ripe(129.9) == {0: 10, 1: 5}
    assert marks.ripe(130.0) == {0: 30, 1: 5}


def test_a_rewind_forgets_what_had_not_ripened() -> None:
    marks = Seasoned(lag=20.0)
    marks.observe(0, 100.0, {0: 10})
    assert marks.ripe(120.0) == {0: 10}
    marks.observe(0, 121.0, {0: 4634})  # committed, then the broker went away
    marks.observe(1, 138.0, {})  # the emitter rewound 17 s later
    assert marks.ripe(200.0) == {}  # nothing handed over: nothing trimmed
    marks.observe(1, 139.0, {0: 4633})  # what the group's offset says after recovery
    assert marks.ripe(158.9) == {}
    assert marks.ripe(159.0) == {0: 4633}  # never 4634


def test_partitions_no_longer_handed_over_are_not_trimmed() -> None:
    marks = Seasoned(lag=1.0)
    marks.observe(0, 0.0, {0: 10, 1: 20})
    assert marks.ripe(1.0) == {0: 10, 1: 20}
    marks.observe(0, 2.0, {1: 25})  # partition 0 revoked
    assert marks.ripe(3.0) == {1: 25}


def test_a_lower_mark_is_never_handed_on() -> None:
    marks = Seasoned(lag=1.0)
    marks.observe(0, 0.0, {0: 10})
    marks.observe(0, 0.5, {0: 8})
    assert marks.ripe(5.0) == {0: 10}
