"""``fairstream submit``: send requests for one tenant to the ingest topic from the shell.

Where the payloads come from (exactly one):

- ``--payload TEXT``: one record whose value is TEXT (UTF-8);
- ``--file PATH``: one record whose value is the file's bytes, untouched (binary-safe);
- ``-`` (the argument): one record per line of standard input, without its line ending
  (``\\n`` or ``\\r\\n``); an empty line is an empty payload.

``--count K`` sends each record K times in a row (each stdin line K times before the next).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from fairstream import wire
from fairstream.config import KafkaConnection, Topics, kafka_options, option_of


def _payloads(payload: str | None, file: Path | None, stdin: bool) -> Iterator[bytes]:
    if payload is not None:
        yield payload.encode("utf-8")
    elif file is not None:
        yield file.read_bytes()
    elif stdin:
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\n").removesuffix(b"\r")


def _parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"expected NAME=VALUE, got {text!r}", param_hint="--header")
    return name, value


@click.command("submit")
@kafka_options
@option_of(Topics, "ingest")
@click.option("--tenant", "-t", required=True, help="Tenant id (the record key), 1-255 bytes.")
@click.option(
    "--cost",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="fairstream-cost of each record.",
)
@click.option(
    "--count",
    "-n",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Send each record this many times.",
)
@click.option("--payload", "-p", help="Send one record with this text as its value.")
@click.option(
    "--file",
    "-f",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Send one record whose value is this file's content.",
)
@click.option(
    "--request-id",
    help="fairstream-request-id of every record sent (repeats share it: de-duplicated).",
)
@click.option(
    "--deadline-ms",
    type=click.IntRange(min=1),
    help="fairstream-deadline-ms: epoch ms after which the request is worthless.",
)
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    help="Extra header NAME=VALUE (repeatable); carried through to egress untouched.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the broker to acknowledge everything at the end.",
)
@click.argument("source", required=False, type=click.Choice(["-"]))
def submit(
    kafka: KafkaConnection,
    ingest_topic: str,
    tenant: str,
    cost: int,
    count: int,
    payload: str | None,
    file: Path | None,
    request_id: str | None,
    deadline_ms: int | None,
    headers: tuple[str, ...],
    timeout: float,
    source: str | None,
) -> None:
    """Send requests for TENANT to the ingest topic.

    Give the payload as --payload TEXT, --file PATH (one record, the file's bytes), or -
    (one record per stdin line). Examples:

    \b
      fairstream submit -t acme -p 'hello'
      fairstream submit -t acme --file prompt.json --cost 350 --count 10
      seq 100 | fairstream submit -t acme -
    """
    from fairstream.sdk.producer import DeliveryError, KafkaAuthenticationError, Producer

    if sum(x is not None for x in (payload, file, source)) != 1:
        raise click.UsageError("give exactly one of --payload TEXT, --file PATH or -")
    extra = [_parse_header(h) for h in headers]
    try:
        wire.tenant_key(tenant)
        wire.ingest_headers(cost=cost, request_id=request_id, deadline=deadline_ms, headers=extra)
    except (ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from exc
    sent = 0
    producer = Producer(kafka, ingest_topic)
    try:
        for value in _payloads(payload, file, source == "-"):
            for _ in range(count):
                producer.submit(
                    tenant,
                    value,
                    cost=cost,
                    request_id=request_id,
                    deadline=deadline_ms,
                    headers=extra,
                )
                sent += 1
        remaining = producer.flush(timeout)
    except DeliveryError as exc:
        raise click.ClickException(f"{exc} ({sent} submitted)") from exc
    except KafkaAuthenticationError as exc:
        raise click.ClickException(str(exc)) from exc
    if remaining:
        raise click.ClickException(
            f"{remaining} of {sent} records not acknowledged within {timeout:g} s "
            f"by {kafka.bootstrap}"
        )
    click.echo(f"sent {sent} record(s) for tenant {tenant} to {ingest_topic}", err=True)
