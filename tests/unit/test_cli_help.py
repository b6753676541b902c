"""What the help says against what the commands do.

The root help says which options have a FAIRSTREAM_* variable and which do not; each
command's help shows an option's variable as ``[env var: NAME]``. These tests hold both
to the options the commands really have, so a new option without a variable (or a
variable its help does not show) fails here until the text or the option is fixed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import click

from fairstream.cli import SUBCOMMANDS, main
from fairstream.config import KafkaConnection, Settings, Topics
from fairstream.config.setting import declared

CONNECTION_AND_TOPICS = {s.flag for s in declared(KafkaConnection)} | {
    s.flag for s in declared(Topics)
}


def root_help() -> str:
    return " ".join((main.help or "").split())


def names(text: str) -> list[str]:
    """'a, b and c' as ['a', 'b', 'c']."""
    return [n.strip() for n in re.split(r",| and ", text) if n.strip()]


def commands() -> Iterator[tuple[str, click.Command]]:
    """Every command that runs (not a group), by its path: 'topics create'."""

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                child = command.get_command(ctx, name)
                assert child is not None
                yield from walk(child, f"{path} {name}")
        else:
            yield path, command

    ctx = click.Context(main)
    for name in SUBCOMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        yield from walk(command, name)


def options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


def without_variable(command: click.Command) -> set[str]:
    return {o.opts[0] for o in options(command) if not o.envvar}


def test_the_root_helps_lists_match_the_options() -> None:
    text = root_help()
    every = re.search(r"Every option of (.+?) has one", text)
    none = re.search(r"have none: those of (.+?), and (.+?) of top\.", text)
    assert every is not None, text
    assert none is not None, text
    with_all, without, top_options = names(every[1]), names(none[1]), names(none[2])

    described = set(with_all) | set(without) | {"top"}
    for path, command in commands():
        top_level = path.split()[0]
        assert top_level in described, f"the root help does not say whether {path} has variables"
        missing = without_variable(command)
        if top_level in with_all:
            assert missing == set(), f"{path}: the root help says every option has a variable"
        elif top_level == "top":
            assert missing == set(top_options), path
        else:
            assert missing, f"{path}: every option has a variable; the root help says not"
        # "...and so do the Kafka connection and topic options of every command"
        assert not missing & CONNECTION_AND_TOPICS, path


def test_every_variable_is_shown_in_the_help_and_named_fairstream() -> None:
    for path, command in commands():
        ctx = click.Context(command, info_name=path)
        seen: dict[str, str] = {}
        for option in options(command):
            if not option.envvar:
                continue
            assert isinstance(option.envvar, str), (path, option.opts)
            assert option.envvar.startswith("FAIRSTREAM_"), (path, option.envvar)
            assert option.envvar not in seen, f"{path}: {option.envvar} of two options"
            seen[option.envvar] = option.opts[0]
            record = option.get_help_record(ctx)
            assert record is not None
            assert f"env var: {option.envvar}" in " ".join(record[1].split()), (path, record)


def test_scheduler_help_says_how_the_default_share_by_splits_the_rate() -> None:
    ctx = click.Context(main)
    scheduler = main.get_command(ctx, "scheduler")
    assert scheduler is not None
    text = " ".join((scheduler.help or "").split())
    default = Settings().share_by
    assert f"with --share-by {default} (the default)" in text
    assert "--share-by partitions each instance takes rate x (its ingest partitions" in text
