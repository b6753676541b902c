"""Old name of ``fairstream.wire``: every name it had is ``fairstream.wire``'s now.

Kept only while modules of other owners still import it (``scheduler/emit.py``, ``demo.py``,
``audit.py``, the benchmarks and the test harness); new code imports ``fairstream.wire``.
"""

from fairstream.wire import *  # noqa: F403
from fairstream.wire import __all__  # noqa: F401
