"""The ``fairstream`` command: ``main`` (the click group, in ``main.py``) and one module per
subcommand, each imported only when its command runs."""

from fairstream.cli.main import SUBCOMMANDS, main

__all__ = ["SUBCOMMANDS", "main"]
