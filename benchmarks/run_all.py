"""The comparison suite, on one broker in one run; writes docs/benchmarks.md.

Phases, in this order (each on topics and app ids of its own, each with a deadline, each
cleaning up its processes and topics):

- ``ceiling``, ``max_throughput``, ``absorption`` (``benchmarks/throughput.py``), on one
  pre-filled topic (N records of 100 B, 1,000 tenants, 12 partitions): a plain
  consume->produce loop, fairstream with no rate limit, and ingest to buffered for
  fairstream and a Quix Streams peer (``benchmarks/quix_peer.py``, in its own virtualenv).
  Targets: absorption 0.5x the loop, end to end 0.3x (goal 0.5x).
- ``max_throughput_headers``: ``max_throughput`` again on a topic of the same records, each
  with a ``fairstream-cost`` header (1 to 4) and a trace header, as cost-weighted producers
  write them, against the loop copying them (reported, no target of its own).
- ``noisy`` (``benchmarks/noisy.py``): quiet tenants' dwell beside three noisy ones at
  ``--rate 200``, against FIFO and GPS; Jain's index per 1 s window.
- ``rate`` (``benchmarks/rate.py``): ``--rate 500`` precision over 30 s.
- ``scale`` (``benchmarks/throughput.py``): N records over 10, 1,000 and 100,000 tenants.
- ``burst`` (``benchmarks/burst.py``): 300,000 and 1,000,000 records written into one of 4
  ingest partitions in under 1 s, ``--rate 500``, 8 quiet tenants at 2/s on every partition:
  quiet dwell on the burst's partition and the others, beside FIFO and GPS.
- ``overflow`` (``benchmarks/overflow.py``): the same with the default backlog cap, so the
  flood's overflow is dead-lettered while the quiet tenants go on (one and two floods).
- ``restart`` (``benchmarks/restart.py``): kill -9 and restart with static membership: time
  to ready on its own data directory (median and max of 10), and an empty data directory's
  time to have 1,000,000 buffered records indexed again.
- ``gaps`` (``benchmarks/gaps.py``): one partition, (paused, busy, busy) x 1,000,000: the
  busy tenant's drain time, the largest progress record against its topic's limit, and
  restart to ready after kill -9 (target 5 s).
- ``group`` (``benchmarks/group.py``): two instances, the static partition split against
  demand-aware shares: per-tenant rates, Jain, group egress, convergence after a change.
- ``feedback`` (``benchmarks/feedback.py``): a simulated paid API of hidden capacity behind
  workers that report its 429s: the adaptive rate against a fixed ``--rate 1000`` and an
  oracle ``--rate 300``: goodput, refused share, convergence; docs/feedback-loop.png.
- ``slow_api`` (``benchmarks/slow_api.py``): ``--rate 40``, two workers of 256 calls at
  once, an API of 1 s and 0.2 s latency, one backlogged tenant and five quiet ones: calls
  started per second and quiet start delay, with ``ordering="start"`` and ``"completion"``.
- ``api_view`` (``benchmarks/api_view.py``), Workers with their default playout delay: at each
  handler call's start, a strict token bucket of R holding B (refused <= 1%, accepted >=
  0.97x R), and quiet tenants beside a noisy one behind slow workers and behind an API that
  queues calls (quiet p99 <= the call time + 0.5 s, none left untaken, the API >= 0.95x busy).
- ``api_adaptive`` (``benchmarks/api_adaptive.py``), the same pacing: the adaptive rate under
  ``--rate 1000`` behind a strict API of hidden capacity, constant and 300 -> 150 -> 300;
  per window at the API, goodput mean >= 0.93x and worst 5 s >= 0.85x, refused <= 3%.
- ``api_latency`` (``benchmarks/api_latency.py``): idle, send -> handler start p99 against
  a transactional consume->produce loop's (the exactly-once floor) in the same run: at most
  twice it plus the playout delay.
- ``faust_view`` (``benchmarks/faust_view.py``): the example Faust app's ``PaidApiAgent``
  behind ``--rate 40`` with 0.2 s calls and one backlogged tenant: calls/s >= 0.95x of 40.
- ``concurrency`` (``benchmarks/concurrency.py``): ``--max-concurrency 20``, no rate, calls
  of 1 s: calls in flight at the API (mean, max) and calls/s, through a worker that calls
  every record at once and through ``fairstream.Worker``.
- ``fairness_scenarios`` (``benchmarks/fairness_scenarios.py``): trigger.dev's fairness
  study's scenarios (adversarial skew, key-splitting, trickle, heavy-idle, weighted) through
  the core as ``fairstream simulate`` runs them, and key-splitting and weighted end to end,
  beside the study's published figures: the "Fairness scenarios" section
  (``benchmarks/fairness_doc.py``).

When a target is missed, the scheduler is run once more under cProfile on the
max-throughput workload (``benchmarks/profiling.py``) and the top of the profile goes into
the report. Targets are checked in ``targets.py``; the document is rendered by ``report.py``
(and ``tables.py``); /proc sampling is ``sampling.py``.

    .venv/bin/python -m benchmarks.run_all [--quick] [--records N] [--bootstrap HOST:PORT]
        [--only PHASE,...] [--no-docs] [--report-json FILE]
    .venv/bin/python -m benchmarks.run_all --render FILE    # docs/benchmarks.md from a saved run

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``) the development broker is started
(or the running one reused). Prints each phase's JSON as it finishes, then one JSON object
and markdown tables; writes ``docs/benchmarks.md`` unless ``--no-docs``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    api_adaptive,
    api_latency,
    api_view,
    burst,
    concurrency,
    fairness_scenarios,
    faust_view,
    feedback,
    gaps,
    group,
    noisy,
    overflow,
    rate,
    restart,
    sampling,
    slow_api,
    throughput,
)
from benchmarks.common import COST_TRACE, REPO, Broker, delete_topics, get, log
from benchmarks.fairness_doc import section, with_section
from benchmarks.report import markdown
from benchmarks.targets import targets

DOC = REPO / "docs" / "benchmarks.md"
# The Worker's pacing for the paid-API phases: its default playout delay, what users get.
PLAYOUT = "default"

Body = Callable[[list[Callable[[], None]]], dict[str, Any]]


class Phases:
    """Runs phases in order, each with its own clean-up, collecting their results."""

    def __init__(self, only: set[str] | None) -> None:
        self.only = only
        self.results: dict[str, Any] = {}

    def wanted(self, *names: str) -> bool:
        return self.only is None or any(name in self.only for name in names)

    def run(self, name: str, body: Body, always: bool = False) -> None:
        if not (always or self.wanted(name)):
            return
        cleanup: list[Callable[[], None]] = []
        started = time.monotonic()
        log(f"phase {name}")
        try:
            result = body(cleanup)
        except Exception as exc:  # one failed phase must not lose the others' numbers
            log(f"phase {name} failed: {exc!r}")
            result = {"status": "error", "error": repr(exc)[:500]}
        finally:
            for undo in reversed(cleanup):
                with contextlib.suppress(Exception):
                    undo()
        result["phase_seconds"] = round(time.monotonic() - started, 1)
        self.results[name] = result
        print(json.dumps({name: result}), flush=True)


def run_phases(args: argparse.Namespace, bootstrap: str, workdir: Path) -> dict[str, Any]:
    """Every wanted phase; the results, and the profile under "profile" when it ran."""
    records = args.records or (40_000 if args.quick else 200_000)
    deadline, quick = args.deadline, args.quick
    phases = Phases(set(args.only.split(",")) if args.only else None)
    shared: list[str] = []  # the pre-filled 1,000-tenant topic and its copy
    headed: list[str] = []  # the same with a cost header and a trace header on each record
    try:
        if phases.wanted("ceiling", "max_throughput", "absorption"):
            shared += throughput.shared_topic(bootstrap, records)
            phases.run(
                "ceiling", lambda _c: throughput.ceiling(bootstrap, shared, records, deadline)
            )
            phases.run(
                "max_throughput",
                lambda _c: throughput.max_throughput(
                    bootstrap,
                    workdir,
                    shared,
                    records,
                    deadline,
                    get(phases.results, "ceiling", "records_per_s"),
                    1 if quick else 3,
                ),
            )
            phases.run(
                "absorption",
                lambda c: throughput.absorption(bootstrap, workdir, shared, records, deadline, c),
            )
        if phases.wanted("max_throughput_headers"):
            # The same drain over records as cost-weighted producers write them (a cost
            # header and a trace header each): a path of its own, and a slower one.
            headed += throughput.shared_topic(bootstrap, records, COST_TRACE)
            phases.run(
                "max_throughput_headers",
                lambda _c: throughput.max_throughput(
                    bootstrap, workdir, headed, records, deadline, None, 1 if quick else 3
                ),
            )
        for name, module in (("noisy", noisy), ("rate", rate)):
            phases.run(name, lambda c, m=module: m.phase(bootstrap, workdir, quick, c))
        phases.run(
            "scale",
            lambda _c: throughput.scale(
                bootstrap, workdir, records, deadline, get(phases.results, "max_throughput")
            ),
        )
        module_phases: tuple[tuple[str, Callable[..., dict[str, Any]]], ...] = (
            ("burst", burst.phase),
            ("overflow", overflow.phase),
            ("restart", restart.phase),
            ("gaps", gaps.phase),
            ("group", group.phase),
            ("feedback", feedback.phase),
            ("slow_api", slow_api.phase),
            ("api_view", functools.partial(api_view.phase, playout=PLAYOUT)),
            ("api_adaptive", functools.partial(api_adaptive.phase, playout=PLAYOUT)),
            ("api_latency", api_latency.phase),
            ("faust_view", faust_view.phase),
            ("concurrency", concurrency.phase),
            ("fairness_scenarios", fairness_scenarios.phase),
        )
        for name, run in module_phases:
            phases.run(name, functools.partial(run, bootstrap, workdir, quick))

        missed = [t for t in targets(phases.results) if t[2] is False]
        if shared and (args.profile == "always" or (args.profile == "auto" and missed)):
            phases.run(
                "profile",
                lambda c: throughput.profiled(bootstrap, workdir, shared, records, deadline, c),
                always=True,
            )
    finally:
        if shared or headed:
            delete_topics(bootstrap, shared + headed)
    return phases.results


def document(report: dict[str, Any]) -> str:
    """docs/benchmarks.md: report.py's document with the fairness scenarios' section."""
    text = markdown(report)
    fairness = report["results"].get("fairness_scenarios")
    return with_section(text, section(fairness)) if fairness else text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true", help="modest sizes (a smoke run)")
    parser.add_argument("--records", type=int, help="throughput/scale/absorption records")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds per step")
    parser.add_argument("--only", help="comma-separated phases (default: all)")
    parser.add_argument("--profile", choices=["auto", "always", "never"], default="auto")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    parser.add_argument("--workdir", type=Path, help="keep logs and state here")
    parser.add_argument("--report-json", type=Path, help="also write the report JSON here")
    parser.add_argument(
        "--render", type=Path, help="only rewrite docs/benchmarks.md from a --report-json file"
    )
    args = parser.parse_args()
    if args.render:
        DOC.write_text(document(json.loads(args.render.read_text())))
        log(f"wrote {DOC} from {args.render}")
        return

    broker = Broker.find(args.bootstrap)
    sampling.broker_pid = broker.pid
    began = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="fairstream-bench-")
    workdir = args.workdir or Path(tmp)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = run_phases(args, broker.bootstrap, workdir)
    finally:
        broker.stop()
        if args.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)

    report = {
        "benchmark": "run_all",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if args.quick else "full",
        "seconds": round(time.monotonic() - began),
        "command": shlex.join([".venv/bin/python", "-m", "benchmarks.run_all", *sys.argv[1:]]),
        "machine": sampling.machine(),
        "results": results,
        "profile": results.pop("profile", None),
    }
    print(json.dumps(report, indent=2))
    if args.report_json:
        args.report_json.write_text(json.dumps(report, indent=2))
    text = document(report)
    print()
    print(text.split("## Raw results")[0])
    if not args.no_docs:
        DOC.write_text(text)
        log(f"wrote {DOC}")


if __name__ == "__main__":
    main()
