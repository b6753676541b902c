"""``fairstream demo``: the noisy-neighbour problem, solved, on a real broker, in one command.

The same arrivals go two ways at once:

- through fairstream: producers write the ingest topic; a real ``fairstream scheduler``
  process releases records onto egress at the paid API's rate; a simulated paid API
  (a worker serving a fixed number of records per second) consumes egress;
- through a plain FIFO queue: the same records, at the same moments, written to a
  one-partition topic that an identical simulated API consumes in arrival order.

Dwell time is measured from a record's arrival (when the producer sent it) to the moment a
worker starts serving it. At the end it prints, per tenant, count and dwell p50/p99 for
fairstream, for FIFO, and for the ideal fluid (GPS) schedule of the same arrivals; then, per
side, the makespan (first arrival to the last service's end) and the API's utilization
while requests waited (``utilization``: fairness must not leave the paid API idle), and
writes a PNG plot of dwell time over time per tenant above the API calls started per second.

The simulated API accepts ``rate`` calls per second, counted over a second, as per-second
rate limits do (``_api_worker``), and the scheduler is configured to that limit:
``--rate rate --burst rate``. (It used to run with ``--burst 1``, which then cost a quarter
of the API; no burst is needed for fairness: the API takes a burst at once, so records
released together do not queue in front of a quiet tenant's.)
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from confluent_kafka import Consumer, KafkaError, Message, Producer

from fairstream import wire
from fairstream.adapters.admin import admin_client, create_topics
from fairstream.analysis.dwell import Dwell, p99_by_tenant, summary_table
from fairstream.analysis.plot import plot_dwell
from fairstream.analysis.reference import Arrival, fifo_starts, gps_starts
from fairstream.analysis.stats import percentile
from fairstream.analysis.verdict import judge
from fairstream.config import KafkaConnection, Topics, kafka_options
from fairstream.core import TokenBucket

ARRIVAL_HEADER = "demo-arrival-ms"
F = TypeVar("F", bound=Callable[..., Any])


def free_port() -> int:
    """A free TCP port on loopback, for the demo scheduler's web endpoint."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Scenario:
    """One noisy tenant bursts; quiet tenants trickle; the API serves ``rate`` records/s."""

    rate: float = 50.0
    duration: float = 30.0
    burst_at: float = 2.0
    burst: int = 1200
    quiet_tenants: int = 5
    quiet_rate: float = 1.0  # records/s per quiet tenant
    seed: int = 7

    def arrivals(self) -> list[Arrival]:
        rng = random.Random(self.seed)
        out = [Arrival(self.burst_at, "noisy", f"noisy-{i}") for i in range(self.burst)]
        for q in range(self.quiet_tenants):
            tenant = f"quiet-{q + 1}"
            t = rng.uniform(0, 1 / self.quiet_rate)
            n = 0
            while t < self.duration:
                out.append(Arrival(round(t, 3), tenant, f"{tenant}-{n}"))
                t += rng.expovariate(self.quiet_rate)
                n += 1
        return sorted(out, key=lambda a: a.t)


@dataclass
class Served:
    """What one simulated paid API saw: id -> (tenant, arrival s, service start s)."""

    records: dict[str, tuple[str, float, float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def api_burst(rate: float) -> int:
    """Calls the simulated API accepts back to back: one second's worth (its limit is per
    second). The scheduler is given the same ``--burst``: configured to the API's limit."""
    return max(1, int(rate))


def _api_worker(
    kafka: KafkaConnection, topic: str, rate: float, served: Served, stop: threading.Event
) -> None:
    """A paid API limited to ``rate`` calls per second, counted over a second (a token
    bucket of one second's worth, as per-second limits are), that starts each call as soon
    as the worker has read its record and the limit allows, in read order.

    This thread's own lateness is not the API's: a call the limit allowed at a moment its
    record had been read starts at that moment, even when the thread (on a busy machine)
    gets to it later. So both sides meet the same API, of exactly ``rate``, which is idle
    only while it has nothing to do.
    """
    consumer = Consumer(
        {
            **kafka.librdkafka(),
            "group.id": f"demo-api-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.subscribe([topic])
    # Seconds since ``base``: epoch seconds are too coarse a float for a token's 1/rate.
    base = time.time()
    limit = TokenBucket(rate, api_burst(rate), 0.0)
    read: deque[tuple[Message, float]] = deque()  # (record, when the worker had it)
    last = 0.0  # when the last call started
    try:
        while not stop.is_set():
            timeout = 0.1
            if read:
                at = max(read[0][1], last)
                at += limit.wait_time(1, at)
                now = time.time() - base
                if at <= now and limit.try_take(1, at):
                    msg = read.popleft()[0]
                    last = at
                    _record(served, msg, base + at)
                    continue
                timeout = min(max(at - now, 0.001), 0.1)
            polled = consumer.poll(timeout)
            if polled is None:
                continue
            got = time.time() - base
            for msg in [polled, *consumer.consume(num_messages=1000, timeout=0)]:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"demo API consumer: {err}")
                    continue
                read.append((msg, got))
    finally:
        consumer.close()


def _record(served: Served, msg: Message, started: float) -> None:
    raw_headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
    headers = {name: v or b"" for name, v in raw_headers}
    rid = headers.get(wire.REQUEST_ID, b"").decode()
    arrival = int(headers[ARRIVAL_HEADER]) / 1000
    tenant = (msg.key() or b"").decode()
    with served.lock:
        served.records.setdefault(rid, (tenant, arrival, started))


def _produce(
    kafka: KafkaConnection, topics: Topics, fifo_topic: str, arrivals: list[Arrival], t0: float
) -> None:
    """Replay the arrivals in real time, to fairstream's ingest and to the FIFO queue."""
    producer = Producer({**kafka.librdkafka(), "linger.ms": 1})
    for a in arrivals:
        delay = t0 + a.t - time.time()
        if delay > 0:
            producer.poll(0)
            time.sleep(delay)
        headers: list[tuple[str, str | bytes | None]] = [
            (wire.REQUEST_ID, a.id.encode()),
            (ARRIVAL_HEADER, str(int(time.time() * 1000)).encode()),
        ]
        key = a.tenant.encode()
        producer.produce(topics.ingest, key=key, value=b"prompt", headers=headers)
        producer.produce(fifo_topic, key=key, value=b"prompt", headers=headers, partition=0)
    producer.flush(30)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"the scheduler exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise click.ClickException(f"the scheduler was not ready within {timeout:.0f} s")


def _dwell(served: Served) -> Dwell:
    """tenant -> [(arrival, dwell)] ."""
    out: Dwell = defaultdict(list)
    with served.lock:
        for tenant, arrival, started in served.records.values():
            out[tenant].append((arrival, max(0.0, started - arrival)))
    return out


def utilization(served: list[tuple[float, float]], rate: float) -> float:
    """The API's utilization while requests waited: calls served over ``rate`` times the
    time some request had arrived and had not yet started, or had started less than a
    call's share of the API (1/rate) before (``served``: [(arrival, service start)]).
    1.0: work-conserving; FIFO is, by construction (a little above 1 after an idle API
    let a burst through)."""
    demand, end = 0.0, float("-inf")
    service = 1.0 / rate
    for lo, hi in sorted((arrival, start + service) for arrival, start in served):
        if hi > end:
            demand += hi - max(lo, end)
            end = hi
    return len(served) / rate / demand if demand > 0 else 0.0


@dataclass(frozen=True)
class SideStats:
    """One side's use of the API: makespan (s from ``t0``) and utilization while work waited."""

    makespan: float
    utilization: float
    starts: list[float]  # service start times (s from t0), for the plot


def side_stats(served: Served, rate: float, t0: float) -> SideStats:
    with served.lock:
        pairs = [(arrival, started) for _, arrival, started in served.records.values()]
    if not pairs:
        return SideStats(0.0, 0.0, [])
    makespan = max(s for _, s in pairs) + 1.0 / rate - t0
    return SideStats(makespan, utilization(pairs, rate), sorted(s - t0 for _, s in pairs))


def api_table(fair: SideStats, fifo: SideStats, ideal_makespan: float, rate: float) -> str:
    """The API's side of the comparison: makespan and utilization for both sides."""
    return "\n".join(
        [
            f"{'the paid API':<22} {'fairstream':>11} {'FIFO':>9} {'ideal (GPS)':>12}",
            f"{'makespan':<22} {fair.makespan:>10.2f}s {fifo.makespan:>8.2f}s "
            f"{ideal_makespan:>11.2f}s",
            f"{'utilization':<22} {fair.utilization:>10.1%} {fifo.utilization:>9.1%} {1.0:>12.1%}",
            f"{'calls/s while work waited':<22} {fair.utilization * rate:>11.1f} "
            f"{fifo.utilization * rate:>9.1f} {rate:>12.1f}",
        ]
    )


def _start_scheduler(
    kafka: KafkaConnection, topics: Topics, app_id: str, rate: float, workdir: Path, port: int
) -> subprocess.Popen[bytes]:
    options = [
        ("--ingest-topic", topics.ingest),
        ("--egress-topic", topics.egress),
        ("--dlq-topic", topics.dlq),
        ("--policy-topic", topics.policy),
        ("--app-id", app_id),
        ("--rate", str(rate)),
        ("--burst", str(api_burst(rate))),
        ("--data-dir", str(workdir / "scheduler-data")),
        ("--web-port", str(port)),
        ("--web-host", "127.0.0.1"),
        ("--log-level", "warning"),
        # The demo's API reads egress as a plain consumer and reports nothing. On a
        # feedback topic that no worker writes, the scheduler would hold its first seconds
        # of releases to the start-up window (credit waits for reports), and the quiet
        # tenants would wait behind that, not behind the API.
        ("--feedback-topic", ""),
    ]
    argv = [sys.executable, "-m", "fairstream", "scheduler"]
    for name, value in options:
        argv += [name, value]
    log = (workdir / "scheduler.log").open("ab")
    env = {**os.environ, **kafka.environment()}
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


def run_demo(kafka: KafkaConnection, workdir: Path, scenario: Scenario) -> int:
    tag = f"demo-{uuid.uuid4().hex[:6]}"
    topics = Topics(f"{tag}.ingest", f"{tag}.egress", f"{tag}.dlq", f"{tag}.policy")
    fifo_topic = f"{tag}.fifo"
    click.echo(f"topics {tag}.* on {kafka.describe()}; work directory {workdir}")
    create_topics(kafka, topics, partitions=6, app_id=tag)
    admin = admin_client(kafka)
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    for future in admin.create_topics([NewTopic(fifo_topic, 1, 1)]).values():
        future.result(30)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    scheduler = _start_scheduler(kafka, topics, tag, scenario.rate, workdir, port)
    stop = threading.Event()
    fair, fifo = Served(), Served()
    try:
        click.echo("starting the scheduler ...")
        _wait_ready(url, scheduler, timeout=90)
        workers = [
            threading.Thread(
                target=_api_worker,
                args=(kafka, topic, scenario.rate, served, stop),
                daemon=True,
            )
            for topic, served in ((topics.egress, fair), (fifo_topic, fifo))
        ]
        for w in workers:
            w.start()
        arrivals = scenario.arrivals()
        total = len(arrivals)
        click.echo(
            f"replaying {total} requests: 'noisy' sends {scenario.burst} at once at "
            f"t={scenario.burst_at:.0f}s, {scenario.quiet_tenants} quiet tenants send "
            f"~{scenario.quiet_rate:g}/s each for {scenario.duration:.0f}s; the paid API "
            f"serves {scenario.rate:g}/s"
        )
        t0 = time.time() + 1.0
        producer = threading.Thread(
            target=_produce, args=(kafka, topics, fifo_topic, arrivals, t0), daemon=True
        )
        producer.start()
        deadline = t0 + total / scenario.rate + 60
        while time.time() < deadline:
            time.sleep(2)
            elapsed = time.time() - t0
            quiet_sent = sum(1 for a in arrivals if a.tenant != "noisy" and a.t <= elapsed)
            quiet_fair = [d for t, v in _dwell(fair).items() if t != "noisy" for _, d in v]
            quiet_fifo = [d for t, v in _dwell(fifo).items() if t != "noisy" for _, d in v]
            click.echo(
                f"  t={elapsed:5.1f}s  served fairstream {len(fair.records):5d}  FIFO "
                f"{len(fifo.records):5d} of {total}   quiet tenants' requests served: "
                f"fairstream {len(quiet_fair):3d}/{quiet_sent}  FIFO "
                f"{len(quiet_fifo):3d}/{quiet_sent}"
            )
            if len(fair.records) >= total and len(fifo.records) >= total:
                break
        stop.set()
        for w in workers:
            w.join(timeout=10)
    finally:
        stop.set()
        scheduler.terminate()
        try:
            scheduler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            scheduler.kill()

    return _report(arrivals, fair, fifo, scenario, workdir, t0)


def _report(
    arrivals: list[Arrival],
    fair: Served,
    fifo: Served,
    scenario: Scenario,
    workdir: Path,
    t0: float,
) -> int:
    """Print the per-tenant table and write the plot; 1 if fairstream lost anything."""
    fair_dwell, fifo_dwell = _dwell(fair), _dwell(fifo)
    # The ideal schedule of the arrivals as they actually happened.
    actual = [Arrival(arr, tenant, rid) for rid, (tenant, arr, _) in fifo.records.items()]
    gps = gps_starts(actual, scenario.rate)
    gps_dwell: dict[str, list[float]] = defaultdict(list)
    for a in actual:
        gps_dwell[a.tenant].append(gps[a.id] - a.t)
    fifo_model = fifo_starts(actual, scenario.rate)
    click.echo("")
    click.echo("dwell time (arrival to service start) per tenant:")
    click.echo(summary_table(arrivals, fair_dwell, fifo_dwell, gps_dwell))
    model_p99 = percentile([fifo_model[a.id] - a.t for a in actual if a.tenant != "noisy"], 99)
    click.echo(
        f"(FIFO as a model of the same arrivals gives the quiet tenants p99 {model_p99:.2f}s; "
        "the ideal is the fluid GPS schedule at the same rate)"
    )
    ideal_p99 = {t: percentile(v, 99) for t, v in gps_dwell.items() if v}
    verdict = judge(p99_by_tenant(fair_dwell), ideal_p99, p99_by_tenant(fifo_dwell), scenario.rate)
    click.echo(f"verdict: {verdict.line()}")
    fair_api = side_stats(fair, scenario.rate, t0)
    fifo_api = side_stats(fifo, scenario.rate, t0)
    ideal_makespan = max(gps.values(), default=t0) + 1.0 / scenario.rate - t0
    click.echo("")
    click.echo(api_table(fair_api, fifo_api, ideal_makespan, scenario.rate))
    png = workdir / "noisy-neighbour-dwell.png"
    panels = [
        (f"plain FIFO (API utilization {fifo_api.utilization:.0%})", fifo_dwell),
        (f"fairstream (API utilization {fair_api.utilization:.0%})", fair_dwell),
    ]
    api = [("plain FIFO", fifo_api.starts), ("fairstream", fair_api.starts)]
    if plot_dwell(png, panels, t0, api=api, rate=scenario.rate):
        click.echo(f"plot: {png}")
    else:
        click.echo("plot skipped: matplotlib is not installed (pip install 'fairstream[demo]')")
    missing = len(arrivals) - len(fair.records)
    if missing:
        click.echo(f"warning: {missing} records did not reach the API through fairstream in time")
        return 1
    return 0


def _scenario_option(name: str, kind: click.ParamType, help: str) -> Callable[[F], F]:
    """``--<name>``: the ``Scenario`` field ``name``, its default the scenario's."""
    return click.option(
        f"--{name}", type=kind, default=getattr(Scenario, name), show_default=True, help=help
    )


@click.command("demo")
@kafka_options
@_scenario_option(
    "rate",
    click.FloatRange(min=1),
    "Calls per second the simulated paid API accepts, counted over a second "
    "(fairstream runs with --rate and --burst of it).",
)
@_scenario_option("burst", click.IntRange(min=1), "Records the noisy tenant sends at once.")
@_scenario_option("duration", click.FloatRange(min=5), "Seconds the quiet tenants keep sending.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the scheduler's data, its log and the plot go. [default: a new temp dir]",
)
def demo(
    kafka: KafkaConnection, rate: float, burst: int, duration: float, workdir: Path | None
) -> None:
    """Show the noisy-neighbour problem solved: fairstream next to FIFO and the ideal.

    Needs a running Kafka (`make demo` starts the development broker first).
    """
    workdir = workdir or Path(tempfile.mkdtemp(prefix="fairstream-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    scenario = Scenario(rate=rate, burst=burst, duration=duration)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(run_demo(kafka, workdir, scenario))
