"""A wall clock off by ``SKEWED_CLOCK_OFFSET_S`` seconds for the Python process that has this
directory on its ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up).

Tests only (tests/integration/test_group_coordination.py, benchmarks/skew.py): it moves
``time.time`` and ``time.time_ns``, which every wall-clock read of fairstream goes through
(``fairstream.wire.now_ms``: egress stamps, deadlines, coordination reports; log lines),
and leaves the monotonic clock and librdkafka's own clock alone. libfaketime (Debian's
``faketime``) moves librdkafka's clock too, and there its timed waits spin (see
benchmarks/skew.py), which a shared test machine cannot afford.
"""

from __future__ import annotations

import os
import time

_OFFSET = float(os.environ.get("SKEWED_CLOCK_OFFSET_S", "0"))
if _OFFSET:
    _time, _time_ns = time.time, time.time_ns
    _OFFSET_NS = round(_OFFSET * 1e9)

    def _skewed_time() -> float:
        return _time() + _OFFSET

    def _skewed_time_ns() -> int:
        return _time_ns() + _OFFSET_NS

    time.time = _skewed_time
    time.time_ns = _skewed_time_ns
