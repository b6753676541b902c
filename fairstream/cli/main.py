"""The ``fairstream`` command: one entry point, subcommands loaded on demand.

Subcommands live in their own modules of ``fairstream.cli`` and are imported only when
invoked, so that ``fairstream topics create`` does not pay for importing the scheduler, its
web server and confluent-kafka, and so that each module owns its options.
"""

from __future__ import annotations

import importlib

import click

from fairstream import __version__

# name -> "module:attribute" of a click.Command. Keep sorted; `--help` lists them in this order.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "audit": (
        "fairstream.cli.audit:audit",
        "Audit a past range of the egress topic: Jain, shortfalls, dwell against the ideal.",
    ),
    "demo": (
        "fairstream.cli.demo:demo",
        "The noisy-neighbour demo: fairstream next to FIFO and the ideal schedule.",
    ),
    "groups": (
        "fairstream.cli.groups:groups",
        "Show and change tenant-group policies (organisations of tenants; live).",
    ),
    "scheduler": (
        "fairstream.cli.scheduler:scheduler",
        "Run a scheduler instance: buffer per tenant, emit fairly onto egress.",
    ),
    "simulate": (
        "fairstream.cli.simulate:simulate",
        "Replay an arrival trace through the scheduling core.",
    ),
    "submit": ("fairstream.cli.submit:submit", "Send requests for a tenant to the ingest topic."),
    "tenants": ("fairstream.cli.tenants:tenants", "Show and change tenant policies (live)."),
    "top": (
        "fairstream.cli.top:top",
        "A live view of tenants across schedulers (backlog, rate, share, dwell).",
    ),
    "topics": (
        "fairstream.cli.topics:topics",
        "Create and check fairstream's topics (ingest, egress, dead-letter, policy, ...).",
    ),
    "worker": ("fairstream.cli.worker:worker", "Consume the egress topic with a handler."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported when first used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        target, _ = entry
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Show one-line help without importing every subcommand module.
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fairstream")
def main() -> None:
    """fairstream: tenant-fair, rate-limited egress for Kafka.

    An option whose --help shows [env var: FAIRSTREAM_...] can be set through that
    variable too; flags win over the environment, which wins over defaults. Every
    option of scheduler, simulate, topics and worker has one, and so do the Kafka
    connection and topic options of every command. Options that say what one call
    does have none: those of audit, demo, groups, submit and tenants, and --interval,
    --limit, --once and --json of top.
    """
