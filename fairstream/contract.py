"""Old name of ``fairstream.wire``: every name it had is ``fairstream.wire``'s now.

Kept only while ``fairstream/cli/demo.py`` and ``fairstream/cli/audit.py`` still import it;
new code imports ``fairstream.wire``.
"""

from fairstream.wire import *  # noqa: F403
from fairstream.wire import __all__  # noqa: F401
