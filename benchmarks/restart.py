"""Restart benchmarks: kill -9, then a new process.

Three measurements, each on topics and an app id of its own:

1. ``own_disk``, with the default settings (static membership under the identity kept in
   the data directory: the killed process and its successor are one member, so no session
   timeout is waited for): a modest backlog (20,000 records, 100 tenants, 12 partitions)
   drained at ``--rate 100`` while producers write 50 records/s more (``Writer``);
   ``--restarts`` times (10): kill -9 while it emits, start a new process on the SAME data
   directory, and time process start to /readyz 200, and to the first egress record counted
   on its /metrics. Reported: median and max of each, and of the time from ready to the
   first egress record. Targets: median to ready <= 2 s; egress at most 1 s after ready.
   The other two run with ``--group-instance-id`` (one id for the killed process and its
   successor, as a StatefulSet pod keeps its name: an empty data directory has a new
   identity otherwise).
2. ``empty_disk``: 1,000,000 records (1,000 tenants, 12 partitions) buffered by a scheduler
   at ``--rate 1`` (so that almost nothing drains) until its ingest counter has them all and
   ``fairstream_backlog_records`` says how many are buffered; kill -9; a new process on an
   EMPTY data directory; seconds from its start until /readyz is 200 and its
   ``fairstream_backlog_records`` is back at the level before the kill (less what ``--rate
   1`` may have emitted meanwhile: one record per second, plus the burst of 1). Target:
   <= 30 s. A restore still running after ``--restore-timeout`` s (120) is reported as "did
   not finish in X s", with how far it got and the rate it was going at.
3. ``outage``: a broker of the benchmark's own (a development broker in a temporary
   directory) stopped with SIGSTOP for 15 s while a scheduler emits at ``--rate 200``;
   seconds from the broker's return until /readyz is 200 and until egress moves again.

    .venv/bin/python -m benchmarks.restart [--bootstrap HOST:PORT] [--quick]
        [--restarts 10] [--records 1000000] [--restore-timeout 120]
        [--only own_disk,empty_disk,outage]

Without ``--bootstrap`` (or ``KAFKA_BOOTSTRAP_SERVERS``) the development broker is used
(started if it is not running). ``benchmarks/run_all.py`` runs both as its ``restart`` phase
(``phase()``); its table and targets are ``restart_table`` and ``restart_targets``, which
``benchmarks.tables`` and ``benchmarks.targets`` gather with the other phases'. Prints numbers,
asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from benchmarks.common import (
    BACKLOG,
    EGRESS,
    INGESTED,
    Broker,
    Row,
    backlog_option,
    cell,
    delete_all,
    fill,
    get,
    kill,
    logger,
    metrics,
    new_deployment,
    num,
    print_targets,
    undoing,
)
from fairstream_dev.harness.kafka import unique
from fairstream_dev.harness.scheduler import Deployment, SchedulerProcess
from fairstream_dev.kafka.broker import DevBroker

PARTITIONS = 12
POLL = 0.05
# targets, seconds
RESTART_OWN_DISK_MEDIAN = 2.0
RESTART_READY_TO_EGRESS = 1.0
RESTART_EMPTY_DISK = 30.0


log = logger("restart")


def scheduler(d: Deployment, workdir: Path, name: str, *args: str) -> SchedulerProcess:
    return SchedulerProcess(d, workdir, *args, "--log-level", "warning", name=name)


class Writer:
    """Producers writing while the scheduler is killed and restarted: ``per_second`` records
    round robin over ``tenants`` keys, on a thread, until ``stop``."""

    def __init__(self, bootstrap: str, topic: str, per_second: float, tenants: int = 100):
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
        )
        self._topic, self._per_second, self._tenants = topic, per_second, tenants
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self._per_second)
            while self.sent < due:
                key = f"w-{self.sent % self._tenants:03d}".encode()
                try:
                    self._producer.produce(self._topic, b"w:".ljust(100, b"x"), key)
                except BufferError:
                    break
                self.sent += 1
            self._producer.poll(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)


# -- 1. own data directory ----------------------------------------------------------------------


def own_disk(
    bootstrap: str,
    workdir: Path,
    restarts: int = 10,
    backlog: int = 20_000,
    rate: float = 100.0,
    timeout: float = 120.0,
    writing: float = 50.0,
) -> dict[str, Any]:
    """kill -9 and restart on the same data directory, ``restarts`` times, while producers
    write ``writing`` records/s (restarts under load)."""
    d = new_deployment(bootstrap, "restart", PARTITIONS)
    with undoing() as undo:
        undo.append(functools.partial(delete_all, d))
        fill(bootstrap, d.topics.ingest, backlog, 100)
        name = f"own-{d.app_id}"  # one name: one data directory for every process
        args = ["--rate", f"{rate:g}"]  # the defaults: the data directory is the identity
        current = scheduler(d, workdir, name, *args).start()
        undo.append(lambda: kill(current))
        current.wait_ready(timeout)
        _wait(functools.partial(_emitting, current), time.monotonic() + timeout)
        writer = Writer(bootstrap, d.topics.ingest, writing).start()
        undo.append(writer.stop)
        ready: list[float] = []
        emitting: list[float | None] = []
        failures: list[str] = []  # restarted processes that exited before ready
        while len(ready) < restarts and len(failures) < 3:
            time.sleep(1.0)  # let it emit (and its state move on) before the kill
            if current.alive():
                current.kill()  # SIGKILL; the data directory stays
            current = scheduler(d, workdir, name, *args)
            started = time.monotonic()
            current.start()
            deadline = started + timeout
            try:
                if not _wait(functools.partial(_ready, current), deadline, current):
                    raise TimeoutError(f"not ready in {timeout:g} s:\n{current.tail()}")
            except RuntimeError as exc:  # it exited: say so, and restart it again
                failures.append(str(exc)[:300])
                log(f"own disk, restart {len(ready) + 1}: {exc}")
                continue
            ready.append(time.monotonic() - started)
            moved = _wait(functools.partial(_emitting, current), started + 30, current)
            emitting.append(time.monotonic() - started if moved else None)
            log(
                f"own disk, restart {len(ready)}: ready {ready[-1]:.2f} s, "
                f"emitting {num(emitting[-1], '.2f')} s"
            )
        if not ready:
            raise RuntimeError(f"no restart got ready: {failures}")
        seen = [e for e in emitting if e is not None]
        after = [e - r for r, e in zip(ready, emitting, strict=True) if e is not None]
        return {
            "status": "ok",
            "restarts": len(ready),
            "exited_before_ready": failures,
            "backlog_records": backlog,
            "rate": rate,
            "writing_per_second": writing,
            "to_ready_seconds": [round(x, 2) for x in ready],
            "to_ready_median_seconds": round(statistics.median(ready), 2),
            "to_ready_max_seconds": round(max(ready), 2),
            "to_first_egress_median_seconds": round(statistics.median(seen), 2) if seen else None,
            "to_first_egress_max_seconds": round(max(seen), 2) if seen else None,
            "ready_to_egress_median_seconds": round(statistics.median(after), 2) if after else None,
            "ready_to_egress_max_seconds": round(max(after), 2) if after else None,
            "not_emitting_within_30s": len(emitting) - len(seen),
        }


def _ready(process: SchedulerProcess) -> bool:
    return process.get("/readyz")[0] == 200


def _emitting(process: SchedulerProcess) -> bool:
    return metrics(process).get(EGRESS, 0) > 0


def _wait(
    condition: Callable[[], bool], deadline: float, process: SchedulerProcess | None = None
) -> bool:
    """Poll ``condition`` every POLL s until it holds (True) or the deadline (False)."""
    while time.monotonic() < deadline:
        if condition():
            return True
        if process is not None and process.proc is not None and process.proc.poll() is not None:
            raise RuntimeError(f"scheduler exited {process.proc.returncode}:\n{process.tail()}")
        time.sleep(POLL)
    return False


# -- 2. empty data directory --------------------------------------------------------------------


def empty_disk(
    bootstrap: str,
    workdir: Path,
    records: int = 1_000_000,
    restore_timeout: float = 120.0,
    fill_timeout: float = 600.0,
) -> dict[str, Any]:
    """Buffer ``records`` at --rate 1, kill -9, restart on an empty data directory."""
    d = new_deployment(bootstrap, "recover", PARTITIONS)
    rate = 1.0
    with undoing() as undo:
        undo.append(functools.partial(delete_all, d))
        produced = fill(bootstrap, d.topics.ingest, records, 1000)
        log(f"empty disk: {records:,} records produced in {produced:.1f} s")
        args = ["--rate", f"{rate:g}", "--group-instance-id", unique("member")]
        args += backlog_option(records // 1000)
        first = scheduler(d, workdir, f"fill-{d.app_id}", *args).start()
        undo.append(lambda: kill(first))
        started = time.monotonic()
        m: dict[str, float] = {}

        def buffered() -> bool:
            m.update(metrics(first))
            return max(m.get(INGESTED, 0), m.get(BACKLOG, 0) + m.get(EGRESS, 0)) >= records

        if not _wait(buffered, started + fill_timeout, first):
            return {
                "status": "timeout",
                "records": records,
                "result": f"the first scheduler did not buffer {records:,} records in "
                f"{fill_timeout:g} s (ingested {m.get(INGESTED, 0):,.0f})",
            }
        fill_seconds = time.monotonic() - started
        before = metrics(first).get(BACKLOG, 0.0)
        first.kill()
        killed = time.monotonic()
        log(f"empty disk: {before:,.0f} buffered in {fill_seconds:.1f} s; kill -9")

        second = scheduler(d, workdir, f"fresh-{d.app_id}", *args)
        shutil.rmtree(second.data_dir, ignore_errors=True)
        undo.append(lambda: kill(second))
        launched = time.monotonic()
        second.start()
        ready_at: float | None = None
        restored_at: float | None = None
        last: dict[str, float] = {}
        progress: list[tuple[float, float]] = []  # (seconds since start, backlog)
        while time.monotonic() < launched + restore_timeout:
            if not second.alive():
                raise RuntimeError(f"scheduler exited:\n{second.tail()}")
            now = time.monotonic()
            if ready_at is None and second.get("/readyz")[0] == 200:
                ready_at = now
            last = metrics(second) or last
            progress.append((now - launched, last.get(BACKLOG, 0.0)))
            # What --rate 1 may have emitted since the kill: one per second plus the burst.
            allowance = math.ceil(rate * (now - killed)) + 2
            if ready_at is not None and last.get(BACKLOG, 0) >= before - allowance:
                restored_at = now
                break
            time.sleep(0.1)
        result: dict[str, Any] = {
            "records": records,
            "buffered_before_kill": before,
            "fill_seconds": round(fill_seconds, 1),
            "restore_timeout_seconds": restore_timeout,
            "to_ready_seconds": None if ready_at is None else round(ready_at - launched, 2),
            "backlog_reached": last.get(BACKLOG),
        }
        if restored_at is not None:
            seconds = restored_at - launched
            log(f"empty disk: restored in {seconds:.1f} s")
            return {
                **result,
                "status": "ok",
                "to_restored_seconds": round(seconds, 2),
                "result": f"{seconds:.1f} s",
            }
        got = last.get(BACKLOG, 0.0)
        pace = _pace(progress)
        estimate = (before / pace) if pace else None
        text = (
            f"did not finish in {restore_timeout:g} s: backlog {got:,.0f} of {before:,.0f}, "
            + ("ready" if ready_at is not None else "not ready")
            + (f"; at {pace:,.0f} records/s it would take about {estimate:,.0f} s" if pace else "")
        )
        log(f"empty disk: {text}")
        return {
            **result,
            "status": "timeout",
            "restore_records_per_s": None if pace is None else round(pace),
            "estimated_seconds": None if estimate is None else round(estimate),
            "result": text,
        }


def _pace(progress: list[tuple[float, float]]) -> float | None:
    """Backlog records per second between the first and the last reading that moved."""
    moving = [(t, b) for t, b in progress if b > 0]
    if len(moving) < 2 or moving[-1][0] <= moving[0][0] or moving[-1][1] <= moving[0][1]:
        return None
    (t0, b0), (t1, b1) = moving[0], moving[-1]
    return (b1 - b0) / (t1 - t0)


# -- 3. a broker outage --------------------------------------------------------------------------


def outage(
    workdir: Path,
    seconds: float = 15.0,
    backlog: int = 20_000,
    rate: float = 200.0,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """A broker of its own stopped (SIGSTOP) for ``seconds`` while the scheduler emits a
    backlog; then the seconds from the broker's return (SIGCONT) until /readyz is 200 and
    the egress counter moves again (a commit went through)."""
    state_dir = Path(tempfile.mkdtemp(prefix="fairstream-outage-broker-"))
    broker = DevBroker(state_dir=state_dir, log=lambda _: None)
    state = broker.up(engine="local")
    pid = state.pid
    try:
        if pid is None:
            return {"status": "error", "error": "the broker's pid is unknown"}
        d = new_deployment(state.bootstrap, "outage", PARTITIONS)
        fill(state.bootstrap, d.topics.ingest, backlog, 100)
        args = ["--rate", f"{rate:g}", "--group-instance-id", unique("member")]
        process = scheduler(d, workdir, f"outage-{d.app_id}", *args).start()
        try:
            process.wait_ready(timeout)
            _wait(functools.partial(_emitting, process), time.monotonic() + timeout)
            time.sleep(2.0)  # emitting steadily before the outage
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
            back = time.monotonic()
            before = metrics(process).get(EGRESS, 0.0)
            unready = process.get("/readyz")[0] != 200
            ready_at = emitting_at = None
            while time.monotonic() < back + timeout and (ready_at is None or emitting_at is None):
                if not process.alive():
                    raise RuntimeError(f"scheduler exited:\n{process.tail()}")
                now = time.monotonic()
                if ready_at is None and process.get("/readyz")[0] == 200:
                    ready_at = now
                if emitting_at is None and metrics(process).get(EGRESS, 0.0) > before:
                    emitting_at = now
                time.sleep(POLL)
        finally:
            kill(process)
    finally:
        broker.down()
        shutil.rmtree(state_dir, ignore_errors=True)
    result = {
        "status": "ok",
        "outage_seconds": seconds,
        "rate": rate,
        "unready_when_back": unready,
        "to_ready_seconds": None if ready_at is None else round(ready_at - back, 2),
        "to_egress_seconds": None if emitting_at is None else round(emitting_at - back, 2),
    }
    log(
        f"broker outage of {seconds:g} s: ready {num(result['to_ready_seconds'], '.2f')} s, "
        f"egress again {num(result['to_egress_seconds'], '.2f')} s after it ended"
    )
    return result


# -- the phase, its targets and its report ---------------------------------------------------------


def phase(
    bootstrap: str,
    workdir: Path,
    quick: bool,
    _cleanup: list[Callable[[], None]] | None = None,
    restarts: int | None = None,
    records: int | None = None,
    restore_timeout: float | None = None,
    only: set[str] | None = None,
) -> dict[str, Any]:
    """Both measurements; --quick: 4 restarts, 100,000 records, a 60 s restore timeout."""
    out: dict[str, Any] = {"status": "ok"}
    if only is None or "own_disk" in only:
        try:
            out["own_disk"] = own_disk(
                bootstrap, workdir, restarts or (4 if quick else 10), 5_000 if quick else 20_000
            )
        except Exception as exc:  # one failed measurement must not lose the other's numbers
            log(f"own disk failed: {exc!r}")
            out["own_disk"] = {"status": "error", "error": repr(exc)[:500]}
    if only is None or "empty_disk" in only:
        try:
            out["empty_disk"] = empty_disk(
                bootstrap,
                workdir,
                records or (100_000 if quick else 1_000_000),
                restore_timeout or (60.0 if quick else 120.0),
            )
        except Exception as exc:
            log(f"empty disk failed: {exc!r}")
            out["empty_disk"] = {"status": "error", "error": repr(exc)[:500]}
    if only is None or "outage" in only:
        try:
            out["outage"] = outage(workdir)
        except Exception as exc:
            log(f"outage failed: {exc!r}")
            out["outage"] = {"status": "error", "error": repr(exc)[:500]}
    return out


def restart_table(results: dict[str, Any]) -> list[str]:
    """The "Restarts" table."""
    own = get(results, "restart", "own_disk") or {}
    empty = get(results, "restart", "empty_disk") or {}
    out = get(results, "restart", "outage") or {}
    lines = [
        "**Restarts** (kill -9, then a new process; on its own disk with the default settings, "
        "static membership under the data directory's identity; on an empty disk and "
        f"through an outage with `--group-instance-id`; {PARTITIONS} ingest partitions; "
        "`benchmarks/restart.py`):",
        "",
        "| restart | measured | target |",
        "| --- | --- | --- |",
    ]
    if own.get("status") == "ok":
        lines.append(
            f"| own data dir, {own['restarts']} times, {own['backlog_records']:,} records "
            f"backlog at `--rate {own['rate']:g}` | to /readyz median "
            f"{num(own['to_ready_median_seconds'], '.2f')} s, max "
            f"{num(own['to_ready_max_seconds'], '.2f')} s; to first egress median "
            f"{num(own.get('to_first_egress_median_seconds'), '.2f')} s, max "
            f"{num(own.get('to_first_egress_max_seconds'), '.2f')} s; from ready to first egress "
            f"median {num(own.get('ready_to_egress_median_seconds'), '.2f')} s, max "
            f"{num(own.get('ready_to_egress_max_seconds'), '.2f')} s"
            + (
                f"; {len(own['exited_before_ready'])} more exited before ready (raw results)"
                if own.get("exited_before_ready")
                else ""
            )
            + f" | median <= {RESTART_OWN_DISK_MEDIAN:g} s to ready, egress "
            f"<= {RESTART_READY_TO_EGRESS:g} s after |"
        )
    elif own:
        lines.append(f"| own data dir | failed: {cell(str(own.get('error')))[:200]} | |")
    if empty.get("status") in ("ok", "timeout"):
        detail = empty["result"]
        if "buffered_before_kill" in empty:
            detail += (
                f" (to /readyz {num(empty.get('to_ready_seconds'), '.1f')} s; "
                f"{empty['buffered_before_kill']:,.0f} buffered before the kill, by a scheduler "
                f"that took {empty['fill_seconds']:g} s to absorb them)"
            )
        lines.append(
            f"| empty data dir, {empty['records']:,} records buffered, until /readyz and "
            f"`fairstream_backlog_records` are back | {detail} | <= {RESTART_EMPTY_DISK:g} s |"
        )
    elif empty:
        lines.append(f"| empty data dir | failed: {cell(str(empty.get('error')))[:200]} | |")
    if out.get("status") == "ok":
        lines.append(
            f"| broker stopped {out['outage_seconds']:g} s (SIGSTOP) while emitting at "
            f"`--rate {out['rate']:g}` | after it ended: to /readyz "
            f"{num(out.get('to_ready_seconds'), '.2f')} s, to egress again "
            f"{num(out.get('to_egress_seconds'), '.2f')} s | printed |"
        )
    elif out:
        lines.append(f"| broker outage | failed: {cell(str(out.get('error')))[:200]} | |")
    return lines


def restart_targets(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    own = get(r, "restart", "own_disk") or {}
    median = own.get("to_ready_median_seconds")
    if median is not None:
        out.append(
            (
                f"restart on its own disk: median to ready <= {RESTART_OWN_DISK_MEDIAN:g} s "
                f"({own['restarts']} kill -9s, default settings)",
                f"{median:.2f} s (max {own['to_ready_max_seconds']:.2f} s)",
                median <= RESTART_OWN_DISK_MEDIAN,
                f"{abs(RESTART_OWN_DISK_MEDIAN - median):.2f} s",
            )
        )
    after = own.get("ready_to_egress_median_seconds")
    if after is not None:
        out.append(
            (
                f"restart on its own disk: egress <= {RESTART_READY_TO_EGRESS:g} s after ready "
                "(median)",
                f"{after:.2f} s (max {own['ready_to_egress_max_seconds']:.2f} s)",
                after <= RESTART_READY_TO_EGRESS,
                f"{abs(RESTART_READY_TO_EGRESS - after):.2f} s",
            )
        )
    empty = get(r, "restart", "empty_disk") or {}
    if empty.get("status") in ("ok", "timeout") and "buffered_before_kill" in empty:
        seconds = empty.get("to_restored_seconds")
        out.append(
            (
                f"{empty['records']:,} buffered records back from an empty disk <= "
                f"{RESTART_EMPTY_DISK:g} s",
                empty["result"],
                seconds is not None and seconds <= RESTART_EMPTY_DISK,
                f"{abs(RESTART_EMPTY_DISK - seconds):.1f} s"
                if seconds is not None
                else f"> {max(0.0, empty['restore_timeout_seconds'] - RESTART_EMPTY_DISK):g} s",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--quick", action="store_true", help="4 restarts, 100,000 records")
    parser.add_argument("--restarts", type=int, help="kill -9s on the own data dir [10]")
    parser.add_argument("--records", type=int, help="records buffered for the empty disk [1e6]")
    parser.add_argument("--restore-timeout", type=float, help="seconds for the empty disk [120]")
    parser.add_argument("--only", help="own_disk,empty_disk,outage [all]")
    parser.add_argument("--workdir", type=Path, help="keep the schedulers' logs here")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args()
    broker = Broker.find(args.bootstrap)
    tmp = tempfile.mkdtemp(prefix="fairstream-restart-")
    workdir = args.workdir or Path(tmp)
    workdir.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    try:
        result = phase(
            broker.bootstrap,
            workdir,
            args.quick,
            None,
            args.restarts,
            args.records,
            args.restore_timeout,
            only,
        )
    finally:
        broker.stop()
        if args.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    print("\n".join(restart_table({"restart": result})))
    print()
    print_targets(restart_targets({"restart": result}))


if __name__ == "__main__":
    main()
