"""Old place of the dead-letter rules, now ``fairstream.wire.dead_letter``.

Kept only while ``scheduler/emit.py`` imports it from here.
"""

from fairstream.wire.dead_letter import *  # noqa: F403
from fairstream.wire.dead_letter import __all__  # noqa: F401
