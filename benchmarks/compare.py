"""Compare the end-to-end throughput of two commits, alternating, on one broker.

    .venv/bin/python -m benchmarks.compare REV_A REV_B [--rounds 4] [--records 200000]
        [--headers SET | --cost-headers] [--overflow N [--raised]] [--scale]
        [--bootstrap HOST:PORT]

Each revision is checked out in a git worktree of its own (under a temporary directory,
removed at the end). Each round runs, for each revision in turn, one round of
``throughput.max_throughput``: the plain consume->produce loop, then a scheduler with no
rate limit draining a pre-filled topic, run from the revision's worktree. With
``--cost-headers`` (``--headers cost-trace``) every record carries a ``fairstream-cost``
header and a trace header, as cost-weighted producers write them (the loop copies the headers
too); the other sets of ``--headers`` take that apart (``benchmarks.common.HEADER_SETS``).
The scheduler runs as ``python -m fairstream`` with the worktree as its working directory,
which is what makes it import that revision: ``-m`` puts the working directory first on
``sys.path``, ahead of ``PYTHONPATH`` (so setting ``PYTHONPATH`` alone compares a checkout
with itself).

With ``--overflow N`` a round is instead the overflow scenario of ``benchmarks/overflow.py``
(N records flooding partition 0 of 4 at ``--rate 500``, the default cap, quiet tenants
sending meanwhile): the dead letters written per second, the time to take the flood in and
the quiet tenants' p99, per revision; with ``--raised`` the same burst with the cap raised
above it (nothing dead-lettered: ``benchmarks/burst.py``'s run).

With ``--scale`` a round is instead ``throughput.scale``'s round for each revision in turn
(the order alternating from round to round): N records over 10 tenants drained, then N over
100,000, each by a scheduler of its own; the result is each revision's median of its
rounds' ratios of scheduler CPU per record (100,000 tenants against 10). Alternating in one
run is how two trees are told apart: a single run's ratio moves with the machine by more
than most changes move it.

Each worktree is built as ``make install`` builds a checkout: a revision with a compiled build
(setup.py) runs its per-record modules compiled (``--pure``: from source, as every revision
before it did).

Prints one line per drain (records/s, ratio to the loop run just before, µs of scheduler
CPU per record, commits) and the medians. The shared machine's speed drifts within minutes:
compare medians of alternating rounds, never two single runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fairstream_dev.harness.scheduler as harness
from benchmarks import burst, sampling, throughput
from benchmarks.common import COST_TRACE, HEADER_SETS, REPO, Broker, delete_topics, log


@contextlib.contextmanager
def worktrees(revisions: list[str], *, pure: bool = False) -> Iterator[list[Path]]:
    """A detached worktree per revision (the same virtualenv: only the code differs), built
    as ``make install`` builds it: the per-record modules compiled where the revision has a
    compiled build (setup.py), unless ``pure``."""
    root = Path(tempfile.mkdtemp(prefix="fairstream-compare-"))
    trees = []
    try:
        for i, rev in enumerate(revisions):
            tree = root / f"{i}"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
                check=True,
                capture_output=True,
            )
            trees.append(tree)
            if not pure and (tree / "setup.py").is_file():
                log(f"{rev}: compiling its per-record modules (setup.py)")
                built = subprocess.run(
                    [sys.executable, "setup.py", "--quiet", "build_ext", "--inplace"],
                    cwd=tree,
                    env={**os.environ, "FAIRSTREAM_NATIVE": "1"},
                    check=False,
                    capture_output=True,
                    text=True,
                )
                if built.returncode:  # mypyc's errors go to stdout, the compiler's to stderr
                    raise SystemExit(
                        f"{rev} does not compile (setup.py exited {built.returncode}):\n"
                        f"{built.stdout[-4000:]}{built.stderr[-4000:]}"
                    )
        yield trees
    finally:
        for tree in trees:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )
        with contextlib.suppress(OSError):
            root.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs=2, metavar="REV")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--deadline", type=float, default=300.0)
    parser.add_argument(
        "--overflow", type=int, metavar="N", help="compare the overflow scenario of N records"
    )
    parser.add_argument("--raised", action="store_true", help="--overflow with the cap raised")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="compare the CPU per record of 100,000 tenants against 10 (throughput.scale)",
    )
    parser.add_argument(
        "--headers",
        choices=sorted(HEADER_SETS),
        help="the headers each record carries (default: none): cost-trace as cost-weighted "
        "producers write them (a fairstream-cost header, 1 to 4, and a trace header), trace "
        "the trace header alone, cost1-trace both with every cost 1, cost the cost header alone",
    )
    parser.add_argument(
        "--cost-headers",
        action="store_const",
        const=COST_TRACE,
        dest="headers",
        help="--headers cost-trace",
    )
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument(
        "--pure", action="store_true", help="run each revision's source, compiled or not"
    )
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    sampling.broker_pid = broker.pid
    if args.overflow:
        try:
            compare_overflow(
                broker.bootstrap,
                args.revisions,
                args.rounds,
                args.overflow,
                raised=args.raised,
                pure=args.pure,
            )
        finally:
            broker.stop()
        return
    if args.scale:
        try:
            compare_scale(
                broker.bootstrap,
                args.revisions,
                args.rounds,
                args.records,
                args.deadline,
                args.pure,
            )
        finally:
            broker.stop()
        return
    results: dict[str, list[dict[str, Any]]] = {rev: [] for rev in args.revisions}
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-compare-data-"))
    topics = throughput.shared_topic(broker.bootstrap, args.records, args.headers)
    try:
        with worktrees(args.revisions, pure=args.pure) as trees:
            for round_ in range(args.rounds):
                for i, (rev, tree) in enumerate(zip(args.revisions, trees, strict=True)):
                    harness.REPO = tree  # the scheduler's working directory: its code
                    data = workdir / f"round{round_}-{i}"  # a fresh scheduler identity
                    data.mkdir()
                    # One round: a loop run, then the drain compared with it.
                    row = throughput.compared_round(
                        broker.bootstrap, data, topics, args.records, args.deadline
                    )
                    results[rev].append(row)
                    log(
                        f"round {round_ + 1} {rev}: {row['records_per_s']:,} records/s, "
                        f"{row['ratio']:.3f}x the loop ({row['ceiling_records_per_s']:,}/s), "
                        f"{row['cpu_us']:.1f} µs CPU/record"
                    )
    finally:
        harness.REPO = REPO
        delete_topics(broker.bootstrap, topics)
        broker.stop()
    for rev, rows in results.items():
        print(
            f"{rev}: median {statistics.median(r['records_per_s'] for r in rows):,.0f} "
            f"records/s, {statistics.median(r['ratio'] for r in rows):.3f}x the loop, "
            f"{statistics.median(r['cpu_us'] for r in rows):.1f} µs CPU/record "
            f"({len(rows)} rounds)"
        )


def overflow_row(
    bootstrap: str, data: Path, records: int, *, raised: bool = False
) -> dict[str, float | None]:
    """One overflow run (``benchmarks/overflow.py``'s first scenario, shorter) of the
    revision ``harness.REPO`` points at."""
    out = burst.run_once(
        bootstrap, data, records, 500.0, 10.0, raise_cap=raised, partitions=4, floods=(0,)
    )
    dwell = out["dwell"]
    return {
        "dead_letters_per_s": out["dead_letters_per_s"],
        "absorbed_s": out["burst_absorbed_seconds"],
        "quiet_p99_other": dwell["other_partitions"]["fairstream"].get("p99_s"),
        "quiet_p99_own": dwell["burst_partition"]["fairstream"].get("p99_s"),
    }


def compare_overflow(
    bootstrap: str,
    revisions: list[str],
    rounds: int,
    records: int,
    *,
    raised: bool = False,
    pure: bool = False,
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-compare-data-"))
    rows: dict[str, list[dict[str, float | None]]] = {rev: [] for rev in revisions}
    try:
        with worktrees(revisions, pure=pure) as trees:
            for round_ in range(rounds):
                for i, (rev, tree) in enumerate(zip(revisions, trees, strict=True)):
                    harness.REPO = tree
                    data = workdir / f"round{round_}-{i}"
                    data.mkdir()
                    row = overflow_row(bootstrap, data, records, raised=raised)
                    rows[rev].append(row)
                    log(f"round {round_ + 1} {rev}: {row}")
    finally:
        harness.REPO = REPO
    for rev, got in rows.items():
        medians = {
            key: statistics.median(v for r in got if (v := r[key]) is not None)
            if any(r[key] is not None for r in got)
            else None
            for key in got[0]
        }
        print(f"{rev}: median of {len(got)} rounds: {medians}")


def compare_scale(
    bootstrap: str, revisions: list[str], rounds: int, records: int, timeout: float, pure: bool
) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="fairstream-compare-data-"))
    ratios: dict[str, list[float]] = {rev: [] for rev in revisions}
    cpu: dict[str, list[tuple[float, float]]] = {rev: [] for rev in revisions}
    try:
        with worktrees(revisions, pure=pure) as trees:
            for round_ in range(rounds):
                order = list(zip(revisions, trees, strict=True))
                if round_ % 2:  # neither revision always second
                    order.reverse()
                for rev, tree in order:
                    harness.REPO = tree
                    name = f"round{round_}-{revisions.index(rev)}"
                    few, many = (
                        throughput.scale_run(
                            bootstrap, workdir, records, n, f"{name}-{n}", timeout
                        )["cpu_us_per_record"]
                        for n in (10, 100_000)
                    )
                    if not few or not many:  # no CPU figure: the process was gone
                        log(f"round {round_ + 1} {rev}: no CPU figure ({few}, {many})")
                        continue
                    ratios[rev].append(many / few)
                    cpu[rev].append((few, many))
                    log(
                        f"round {round_ + 1} {rev}: 10 tenants {few} µs, 100,000 tenants "
                        f"{many} µs a record: {many / few:.2f}x"
                    )
    finally:
        harness.REPO = REPO
    for rev in revisions:
        print(
            f"{rev}: median {statistics.median(ratios[rev]):.2f}x "
            f"(rounds {', '.join(f'{r:.2f}' for r in ratios[rev])}); 10 tenants "
            f"{statistics.median(f for f, _ in cpu[rev]):.1f} µs, 100,000 tenants "
            f"{statistics.median(m for _, m in cpu[rev]):.1f} µs a record"
        )


if __name__ == "__main__":
    main()
