"""Fixtures shared by the deployment files' tests."""

from __future__ import annotations

import click
import pytest

from fairstream.cli import SUBCOMMANDS, main


@pytest.fixture(scope="session")
def known_env_vars() -> set[str]:
    """Every FAIRSTREAM_* variable that some fairstream command reads."""
    names: set[str] = set()

    def walk(command: click.Command) -> None:
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                names.add(envvar)
            elif envvar:
                names.update(envvar)
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for sub in command.list_commands(ctx):
                child = command.get_command(ctx, sub)
                if child is not None:
                    walk(child)

    ctx = click.Context(main)
    for name in SUBCOMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        walk(command)
    return names
