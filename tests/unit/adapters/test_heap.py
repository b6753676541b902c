"""Giving the C heap's free memory back (``fairstream.adapters.heap``)."""

from __future__ import annotations

import sys

import pytest

from fairstream.adapters.heap import MMAP_THRESHOLD, HeapTrimmer, fix_mmap_threshold, glibc_trim
from fairstream.core import ManualClock


def test_trims_at_most_once_per_interval_on_the_injected_clock() -> None:
    clock = ManualClock()
    calls: list[float] = []
    heap = HeapTrimmer(clock, lambda: calls.append(clock.now()) or 1, every=1.0)
    heap.maybe()
    assert calls == []  # not before a whole interval
    clock.advance(1.0)
    heap.maybe()
    heap.maybe()
    clock.advance(0.5)
    heap.maybe()
    clock.advance(0.5)
    heap.maybe()
    assert calls == [1.0, 2.0]
    assert heap.trims == 2


def test_without_a_trim_function_it_does_nothing() -> None:
    clock = ManualClock()
    heap = HeapTrimmer(clock, None)
    clock.advance(10)
    heap.maybe()
    assert heap.trims == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc is Linux's")
def test_glibc_trim_is_callable_here() -> None:
    trim = glibc_trim()
    if trim is None:
        pytest.skip("no glibc (musl?)")
    assert trim() in (0, 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc is Linux's")
def test_the_mmap_threshold_is_fixed_here() -> None:
    if glibc_trim() is None:
        pytest.skip("no glibc (musl?)")
    # glibc's mallopt answers 1 when it took the setting (0: refused, say a wrong parameter).
    assert fix_mmap_threshold() is True
    assert fix_mmap_threshold(MMAP_THRESHOLD) is True
