"""Old name of ``fairstream.wire.feedback`` (the feedback contract).

Kept only while ``scheduler/feedback.py`` imports it from here.
"""

from fairstream.wire.feedback import *  # noqa: F403
from fairstream.wire.feedback import __all__  # noqa: F401
