"""Giving the C heap's free memory back to the system, where the C library can (glibc).

Why: glibc keeps memory that was freed inside its heaps unless it lies at a heap's top. The
ingest path frees much more than it keeps (librdkafka's fetch buffers and per-message
structures, the lists a consume returns) among allocations that live on, so the heaps grew to
the largest amount ever in flight and stayed there. Measured with 1,000,000 one-record tenants
buffered: the C heap held 557 MiB of which 56 MiB were in use, and a ``malloc_trim(0)`` took
the resident size from 1,400 MiB to 1,001 MiB in 16 ms (0.4 ms when nothing is to be given
back). Trimmed by the ingest thread every quarter of a second, the peak never holds that
memory: at every second, the peak with 1,000,000 tenants was 30-60 MB higher, what the
readers' churn left in a second (a trim costs 0.4 ms when there is nothing to give back).

Allocations of ``MMAP_THRESHOLD`` bytes or more are also kept out of the heaps
(``fix_mmap_threshold``): glibc raises that threshold to the largest block freed so far
(up to 32 MiB), and librdkafka frees fetch buffers of a MiB and more, so they came to be
carved from the heaps too, where they left holes among what lives on. Measured with
1,000,000 one-record tenants buffered: a resident size of 568-588 MiB once buffered, and
489-491 MiB with the threshold fixed at 128 KiB (glibc's own default).

Elsewhere (musl, macOS) there is nothing to call: ``HeapTrimmer`` does nothing there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

from fairstream.core import Clock

__all__ = ["MMAP_THRESHOLD", "TRIM_EVERY", "HeapTrimmer", "fix_mmap_threshold", "glibc_trim"]

TRIM_EVERY = 0.25  # seconds between trims
MMAP_THRESHOLD = 128 * 1024  # bytes from which a block is mapped on its own (glibc's default)
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Map blocks of ``size`` bytes and more on their own, for good (glibc's ``mallopt``:
    a fixed threshold is never raised). False where there is no glibc to ask, or it
    refused. Caller: the scheduler process, once, before its threads start."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, size))


def glibc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` (1 when it gave memory back), or None without glibc."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


class HeapTrimmer:
    """Calls ``trim`` at most every ``every`` seconds of ``clock``; ``maybe`` is cheap to call
    at every turn of a loop. Owned by the thread that calls it (the ingest thread)."""

    __slots__ = ("_clock", "_every", "_next", "_trim", "trims")

    def __init__(
        self,
        clock: Clock,
        trim: Callable[[], int] | None,
        every: float = TRIM_EVERY,
    ) -> None:
        self._clock = clock
        self._trim = trim
        self._every = every
        self._next = clock.now() + every
        self.trims = 0  # calls made

    def maybe(self) -> None:
        """Trim, when ``every`` seconds have passed since the last time."""
        if self._trim is None:
            return
        now = self._clock.now()
        if now < self._next:
            return
        self._next = now + self._every
        self._trim()
        self.trims += 1
