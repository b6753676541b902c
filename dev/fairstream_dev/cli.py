"""The ``fairstream-dev`` command: developer tools, one subcommand group each."""

from __future__ import annotations

import click

from fairstream_dev.kafka.cli import kafka


@click.group()
def main() -> None:
    """fairstream's developer tools (not part of the runtime package)."""


main.add_command(kafka)
