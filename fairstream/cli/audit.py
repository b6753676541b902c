"""``fairstream audit``: how fair was the egress over a past time range, from its headers.

It reads the egress records scheduled in the range (``offsets_for_times`` on every partition,
then up to the end of each partition as it was at the start, read_committed), and from each
record only the headers fairstream stamps: ``fairstream-tenant``, ``fairstream-enqueued-ms``
(arrival) and ``fairstream-scheduled-ms`` (departure); never the value. From those it
rebuilds arrivals and departures and prints:

- per window (``--window``): records scheduled, the tenants backlogged throughout the
  window, Jain's index over their service divided by their weighted share, the worst
  tenant's shortfall (``fairstream.core.window_fairness``, as the scheduler's
  ``fairstream_fairness_*`` metrics), and the quiet tenants' dwell p99 next to the ideal
  fluid (GPS) schedule of the same arrivals;
- per tenant, the demo's table (FIFO being a model of the same arrivals at the same rate),
  the demo's verdict (``fairstream.analysis.verdict.judge``), and the demo's plot (``--png``);
- with tenant groups (``--tenant-group-separator``, the scheduler's key convention: the
  audit learns a tenant's group from its id, as the headers carry no group), each window
  judged at both levels (``fairstream.analysis.levels``): the groups and ungrouped tenants
  by ``--group-weights`` and ``--weights``, and each group's members within it by
  ``--weights``. Groups a policy record names (``fairstream tenants set --group``) are not
  read: give such tenants ids that carry their group.

The rate of the reference schedules is ``--rate``, or else the egress rate measured while
some tenant was backlogged (the scheduler was then held by its rate limit). What the egress
topic cannot show: records still buffered at the end of the range, and dead letters.
"""

from __future__ import annotations

import bisect
import math
import re
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import click
from confluent_kafka import Consumer, KafkaError, TopicPartition

from fairstream import wire
from fairstream.analysis.dwell import Dwell, p99_by_tenant, summary_table
from fairstream.analysis.levels import level_table, level_windows
from fairstream.analysis.plot import plot_dwell
from fairstream.analysis.reference import Arrival, fifo_starts, gps_starts
from fairstream.analysis.stats import (
    backlogged_throughout,
    busy_periods,
    percentile,
    window_fairness,
)
from fairstream.analysis.verdict import Verdict, judge
from fairstream.cli.weights import parse_weights
from fairstream.config import KafkaConnection, Settings, Topics, kafka_options, option_of
from fairstream.scheduler.policies.tenant_groups import by_separator

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in ``90s``, ``10m``, ``1h``, ``2d``, ``500ms`` or a plain number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(f"{text!r}: expected a duration such as 90s, 10m, 1h or 2d")
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def parse_time(text: str, now: float) -> float:
    """Epoch seconds of ``text``: a duration before ``now`` (``1h``) or an ISO 8601 time."""
    try:
        return now - parse_duration(text)
    except click.BadParameter:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected a duration ago (1h, 30m) or an ISO time (2025-01-31T12:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class Record:
    """One egress record, as the audit sees it: headers only."""

    id: str  # <partition>-<offset>: unique even for a duplicate request id
    tenant: str
    enqueued: float  # epoch s
    scheduled: float  # epoch s


def read_egress(
    kafka: KafkaConnection, topic: str, start: float, end: float, timeout: float = 300.0
) -> tuple[list[Record], int]:
    """The records of ``topic`` scheduled in [start, end], and how many records were skipped
    for lacking fairstream's headers. Reads each partition from ``offsets_for_times(start)``
    to its end as it is now (the end of a partition a scheduler still writes moves on)."""
    consumer = Consumer(
        {
            **kafka.librdkafka(),
            "group.id": f"fairstream-audit-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise click.ClickException(f"the topic {topic} does not exist at {kafka.describe()}")
        partitions = sorted(described.partitions)
        wanted = [TopicPartition(topic, p, int(start * 1000)) for p in partitions]
        found = consumer.offsets_for_times(wanted, timeout=30)
        assign: list[TopicPartition] = []
        ends: dict[int, int] = {}
        for tp in found:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), 30)
            if 0 <= tp.offset < high:
                assign.append(TopicPartition(topic, tp.partition, tp.offset))
                ends[tp.partition] = high
        records: list[Record] = []
        skipped = 0
        if not assign:
            return records, skipped
        consumer.assign(assign)
        pending = set(ends)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"reading {topic} took over {timeout:.0f} s; narrow --since/--until"
                )
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                partition = cast(int, msg.partition())
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(partition)
                        continue
                    raise click.ClickException(f"reading {topic}: {err}")
                if cast(int, msg.offset()) >= ends[partition] - 1:
                    pending.discard(partition)
                if cast(int, msg.offset()) >= ends[partition]:
                    continue
                headers = dict(cast("list[tuple[str, bytes | None]]", msg.headers() or []))
                try:
                    tenant = (headers[wire.TENANT] or b"").decode()
                    enqueued = int(headers[wire.ENQUEUED_MS] or b"") / 1000
                    scheduled = int(headers[wire.SCHEDULED_MS] or b"") / 1000
                except (KeyError, ValueError, UnicodeDecodeError):
                    skipped += 1
                    continue
                if start <= scheduled <= end:
                    records.append(
                        Record(f"{partition}-{msg.offset()}", tenant, enqueued, scheduled)
                    )
        return records, skipped
    finally:
        consumer.close()


def measured_rate(records: list[Record]) -> float | None:
    """Records scheduled per second while some tenant was backlogged (the median over the
    1 s bins it was backlogged throughout): the rate the scheduler was held to."""
    if not records:
        return None
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        spans[r.tenant].append((r.enqueued, r.scheduled))
    first = min(r.scheduled for r in records)
    bins: dict[int, int] = defaultdict(int)
    for r in records:
        bins[int(r.scheduled - first)] += 1
    covered: set[int] = set()  # 1 s bins some tenant was backlogged throughout
    for tenant_spans in spans.values():
        for s, e in busy_periods(tenant_spans):
            covered.update(range(max(0, math.ceil(s - first)), math.floor(e - first)))
    last = int(max(r.scheduled for r in records) - first)
    busy = [bins[i] for i in sorted(covered) if i < last]
    return percentile(busy, 50) if busy else None


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    scheduled: int
    backlogged: int
    jain: float | None
    worst: str | None
    shortfall: float
    quiet_p99: float | None
    ideal_p99: float | None


@dataclass(frozen=True)
class Audit:
    records: list[Record]
    rate: float
    windows: list[Window]
    measured: Dwell  # tenant -> [(arrival, dwell)]
    fifo: Dwell
    ideal: Dwell
    verdict: Verdict


def analyse(
    records: list[Record],
    *,
    start: float,
    end: float,
    window: float,
    rate: float,
    weights: dict[str, float],
) -> Audit:
    """The windows, the per-tenant dwell (measured, FIFO and GPS models) and the verdict."""
    arrivals = [Arrival(r.enqueued, r.tenant, r.id) for r in records]
    gps = gps_starts(arrivals, rate, weights)
    fifo = fifo_starts(arrivals, rate)
    measured: Dwell = defaultdict(list)
    fifo_dwell: Dwell = defaultdict(list)
    ideal: Dwell = defaultdict(list)
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        measured[r.tenant].append((r.enqueued, max(0.0, r.scheduled - r.enqueued)))
        fifo_dwell[r.tenant].append((r.enqueued, fifo[r.id] - r.enqueued))
        ideal[r.tenant].append((r.enqueued, gps[r.id] - r.enqueued))
        spans[r.tenant].append((r.enqueued, r.scheduled))
    verdict = judge(p99_by_tenant(measured), p99_by_tenant(ideal), p99_by_tenant(fifo_dwell), rate)
    quiet = set(verdict.quiet)
    periods = {t: busy_periods(s) for t, s in spans.items()}
    by_scheduled = sorted(records, key=lambda r: r.scheduled)
    departures = [r.scheduled for r in by_scheduled]
    quiet_records = sorted((r for r in records if r.tenant in quiet), key=lambda r: r.enqueued)
    quiet_arrivals = [r.enqueued for r in quiet_records]
    windows: list[Window] = []
    a = start
    while a < end:
        b = min(a + window, end)
        in_window = by_scheduled[
            bisect.bisect_left(departures, a) : bisect.bisect_left(departures, b)
        ]
        served: dict[str, float] = defaultdict(float)
        for r in in_window:
            served[r.tenant] += 1
        judged = {
            t: served.get(t, 0.0) for t, p in periods.items() if backlogged_throughout(p, a, b)
        }
        fairness = window_fairness(judged, weights)
        arrived = quiet_records[
            bisect.bisect_left(quiet_arrivals, a) : bisect.bisect_left(quiet_arrivals, b)
        ]
        windows.append(
            Window(
                start=a,
                end=b,
                scheduled=len(in_window),
                backlogged=fairness.tenants,
                jain=fairness.jain,
                worst=fairness.worst,
                shortfall=fairness.shortfall,
                quiet_p99=(
                    percentile([r.scheduled - r.enqueued for r in arrived], 99) if arrived else None
                ),
                ideal_p99=(
                    percentile([gps[r.id] - r.enqueued for r in arrived], 99) if arrived else None
                ),
            )
        )
        a = b
    return Audit(records, rate, windows, measured, fifo_dwell, ideal, verdict)


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}s"


def window_table(windows: list[Window]) -> str:
    lines = [
        f"{'window (UTC)':<18} {'records':>7} {'backlogged':>10} {'Jain':>6}   "
        f"{'worst shortfall':<24} {'quiet dwell p99':>15} {'ideal p99':>9}"
    ]
    empty = 0
    for w in windows:
        if not w.scheduled and w.quiet_p99 is None:
            empty += 1  # nothing to say about a window nobody used
            continue
        worst = f"{w.worst} {w.shortfall:.0%}" if w.worst else "-"
        jain = "-" if w.jain is None else f"{w.jain:.3f}"
        lines.append(
            f"{_clock(w.start)}-{_clock(w.end)}  {w.scheduled:>7} {w.backlogged:>10} {jain:>6}   "
            f"{worst:<24} {_s(w.quiet_p99):>15} {_s(w.ideal_p99):>9}"
        )
    if empty:
        lines.append(f"({empty} windows with no records left out)")
    return "\n".join(lines)


def _levels(
    records: list[Record],
    separator: str,
    start: float,
    end: float,
    step: float,
    weights: dict[str, float],
    group_weights: dict[str, float],
) -> None:
    """Print each window judged at both levels of the tenant groups ``separator`` names."""
    group_of = by_separator(separator)
    assert group_of is not None
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records:
        spans[r.tenant].append((r.enqueued, r.scheduled))
    levels = level_windows(
        spans,
        group_of,
        start=start,
        end=end,
        window=step,
        weights=weights,
        group_weights=group_weights,
    )
    click.echo("")
    click.echo(f"fairness at each level (tenant groups by {separator!r}):")
    click.echo(level_table(levels, _clock))
    click.echo(
        "(entries: the groups and ungrouped tenants backlogged throughout the window, by "
        "weight; a group's members: within the group, by weight)"
    )


@click.command("audit")
@kafka_options
@option_of(Topics, "egress", help="The egress topic to audit.")
@click.option(
    "--since",
    default="1h",
    show_default=True,
    help="Start of the range: a duration ago (90s, 10m, 1h, 2d) or an ISO time.",
)
@click.option("--until", default=None, help="End of the range, likewise. [default: now]")
@click.option("--window", default="10s", show_default=True, help="Length of each window (10s, 1m).")
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Records/s of the reference schedules (the group's --rate). "
    "[default: the egress rate measured while tenants were backlogged]",
)
@click.option(
    "--weights",
    default=None,
    help="Tenant weights as in `fairstream simulate`: tenant=w,... or a file. Others weigh 1.",
)
@option_of(
    Settings,
    "tenant_group_separator",
    help="Judge fairness at each level of tenant groups, a tenant's group being what comes "
    "before the first occurrence of this text in its id (the scheduler's convention: with /, "
    "acme/alice is in group acme). [default: none, no group level]",
)
@click.option(
    "--group-weights",
    default=None,
    help="Tenant groups' weights, as --weights: group=w,... or a file. Others weigh 1.",
)
@click.option(
    "--png",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the demo's plot of dwell per tenant (needs the demo extra: matplotlib).",
)
def audit(
    kafka: KafkaConnection,
    egress_topic: str,
    since: str,
    until: str | None,
    window: str,
    rate: float | None,
    weights: str | None,
    tenant_group_separator: str | None,
    group_weights: str | None,
    png: Path | None,
) -> None:
    """Audit a past time range of the egress topic against the ideal fair schedule.

    Reads only fairstream's headers of the egress records (tenant, enqueued, scheduled),
    never payloads. Prints per window Jain's index over the backlogged tenants (normalised
    by weight), the worst tenant's shortfall and the quiet tenants' dwell against the ideal
    (GPS) schedule of the same arrivals; then per tenant dwell p50/p99 against FIFO and GPS
    models, and a verdict. With --tenant-group-separator, each window is also judged at both
    levels of tenant groups: groups against their entitlement, members within each group.

    \b
    Example:
      fairstream audit --bootstrap kafka:9092 --since 1h --window 1m --png audit.png
    """
    now = time.time()
    start = parse_time(since, now)
    end = parse_time(until, now) if until else now
    if end <= start:
        raise click.BadParameter("--until must be after --since", param_hint="'--until'")
    step = parse_duration(window)
    tenant_weights = parse_weights(weights)
    records, skipped = read_egress(kafka, egress_topic, start, end)
    click.echo(
        f"fairstream audit of {egress_topic} on {kafka.describe()}, "
        f"{datetime.fromtimestamp(start, UTC):%Y-%m-%d %H:%M:%S} to "
        f"{datetime.fromtimestamp(end, UTC):%H:%M:%S} UTC"
    )
    if skipped:
        click.echo(f"{skipped} records without fairstream's headers skipped")
    if not records:
        click.echo("no records were scheduled in this range")
        return
    tenants = {r.tenant for r in records}
    measured = measured_rate(records)
    ref_rate = rate or measured or len(records) / max(end - start, 1.0)
    source = "--rate" if rate else ("measured while backlogged" if measured else "average")
    click.echo(
        f"{len(records)} records of {len(tenants)} tenants; reference rate {ref_rate:.1f}/s "
        f"({source})"
    )
    result = analyse(
        records, start=start, end=end, window=step, rate=ref_rate, weights=tenant_weights
    )
    click.echo("")
    click.echo(window_table(result.windows))
    click.echo("")
    click.echo("dwell time (enqueued to scheduled) per tenant:")
    arrivals = [Arrival(r.enqueued, r.tenant, r.id) for r in records]
    ideal = {t: [d for _, d in v] for t, v in result.ideal.items()}
    click.echo(summary_table(arrivals, result.measured, result.fifo, ideal))
    click.echo("(FIFO: one FIFO queue of the same arrivals at the same rate, as a model)")
    click.echo(f"verdict: {result.verdict.line()}")
    if tenant_group_separator:
        _levels(
            result.records,
            tenant_group_separator,
            start,
            end,
            step,
            tenant_weights,
            parse_weights(group_weights),
        )
    if png is not None:
        panels = [
            ("FIFO (model of the same arrivals)", result.fifo),
            ("fairstream (egress headers)", result.measured),
            ("ideal (GPS)", result.ideal),
        ]
        title = f"{egress_topic}: dwell time per tenant against FIFO and the ideal schedule"
        ylabel = "dwell: enqueued to scheduled (s)"
        first = min(r.enqueued for r in records)  # the plot's time 0: the first arrival
        if plot_dwell(png, panels, first, title, ylabel=ylabel):
            click.echo(f"plot: {png}")
        else:
            click.echo("plot skipped: matplotlib is not installed (pip install 'fairstream[demo]')")
