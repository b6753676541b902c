"""The reference schedules under their first name: they are ``fairstream.analysis.reference``.

The benchmarks import them from here (``benchmarks/noisy.py``, ``benchmarks/burst.py``).
"""

from fairstream.analysis.reference import Arrival, fifo_starts, gps_starts

__all__ = ["Arrival", "fifo_starts", "gps_starts"]
