"""The web console in a real browser, against a running scheduler with noisy and quiet tenants.

Headless Chromium (Debian's package, installed by ``make browser``) is driven over the
DevTools protocol (websocket-client, from the test extra): it loads ``/`` and the test waits
until the tenants table and both charts show live numbers, then saves a screenshot
(``FAIRSTREAM_CONSOLE_SCREENSHOT=docs/console.png`` also writes the README's copy: ``make
screenshot``). The same scheduler's ``/metrics`` must export every metric the Grafana
dashboard queries. Under ``CI=true`` a missing Chromium fails instead of skipping.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket
from confluent_kafka import Producer

from fairstream.core.budget import Budget
from fairstream_dev.harness.kafka import wait_until
from fairstream_dev.harness.scheduler import REPO, Deployment, SchedulerProcess
from fairstream_dev.kafka import free_port
from tests.dashboard import METRIC, dashboard, queries
from tests.integration.policies import set_policy

# What the machine notes say headless Chromium needs here: no sandbox as root, no GPU, and
# none of the background connections a closed network refuses.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--mute-audio",
)
WIDTH = 1400
# Noisy's records: past the depth (the records of a tenant's backlog held in memory, 20,000
# at --rate 40), then more once they are all read, which wait in the ingest log.
DEPTH = 20_000
PAST_DEPTH = 2_000
MORE = 3_000
SECRET = f"PAYLOAD-NEVER-SHOWN-{uuid.uuid4().hex[:8]}"


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "no chromium on PATH (make browser installs Debian's package)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


class Browser:
    """One headless Chromium and its first page, spoken to over the DevTools protocol."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log = (workdir / "chromium.log").open("ab")
        self.proc = subprocess.Popen(
            [
                chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={workdir / 'chromium-profile'}",
                f"--remote-debugging-port={self.port}",
                f"--window-size={WIDTH},1000",
                "about:blank",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        page = wait_until(self._page, 60, "Chromium's DevTools endpoint", interval=0.2)
        self.ws = websocket.create_connection(page, timeout=30, suppress_origin=True)
        self._ids = itertools.count(1)

    def _page(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"chromium exited with {self.proc.returncode}")
        try:
            url = f"http://127.0.0.1:{self.port}/json/list"
            with urllib.request.urlopen(url, timeout=2) as r:
                targets = json.loads(r.read())
        except OSError:
            return None
        pages = [t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"]
        return pages[0] if pages else None

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        call = next(self._ids)
        self.ws.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == call:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page, at its full height."""
        height = self.evaluate("document.documentElement.scrollHeight")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path)
    try:
        yield b
    finally:
        b.close()


def trickle(bootstrap: str, topic: str, tenants: list[str], stop: threading.Event) -> None:
    """Each quiet tenant sends a record every half second until ``stop`` (at most 3 min)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    deadline = time.monotonic() + 180
    for i in itertools.count():
        if stop.wait(0.5) or time.monotonic() > deadline:
            break
        for tenant in tenants:
            producer.produce(topic, key=tenant.encode(), value=f"{SECRET}-{i}".encode())
        producer.poll(0)
    producer.flush(30)


def waiting_of(scheduler: SchedulerProcess, tenant: str) -> int:
    """``tenant``'s records waiting, in memory and in the ingest log, as the scheduler's
    ``/tenants`` says (0: not listed)."""
    status, body = scheduler.get("/tenants")
    if status != 200:
        return 0
    rows = json.loads(body)["tenants"]
    return next((r["backlog"] + r.get("in_log", 0) for r in rows if r["tenant"] == tenant), 0)


# The page's state, as the test reads it: table rows, chart points and ink.
READ_PAGE = """(() => {
  if (!document.getElementById('egress-chart')) return null;  // still loading
  const rows = {};
  document.querySelectorAll('#tenants tbody tr').forEach(tr => {
    rows[tr.dataset.tenant] = Array.from(tr.cells).map(td => td.textContent);
  });
  // Share of a canvas in colour (tenants' series), not in the greys of grid and labels.
  const ink = id => {
    const c = document.getElementById(id);
    const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < px.length; i += 4) {
      const hi = Math.max(px[i], px[i + 1], px[i + 2]), lo = Math.min(px[i], px[i + 1], px[i + 2]);
      if (px[i + 3] > 0 && hi - lo > 60) n++;
    }
    return n / (c.width * c.height);
  };
  return {
    polls: Number(document.body.dataset.polls || 0),
    rows: rows,
    egressPoints: Number(document.getElementById('egress-chart').dataset.points || 0),
    dwellPoints: Number(document.getElementById('dwell-chart').dataset.points || 0),
    egressInk: ink('egress-chart'),
    dwellInk: ink('dwell-chart'),
    legend: Array.from(document.querySelectorAll('#legend li')).map(li => li.textContent),
    jain: document.getElementById('jain').textContent,
    egress: document.getElementById('egress-rate').textContent,
    group: document.querySelectorAll('#group tbody tr').length,
    text: document.body.innerText,
  };
})()"""
COLUMNS = (
    "tenant",
    "state",
    "class",
    "weight",
    "backlog",
    "out/s",
    "share",
    "of backlogged",
    "entitled",
    "bar",
    "p50",
    "p99",
    "cost",
    "budget",
)


def number(text: str) -> float | None:
    """The number in a table cell ("12.5", "1,200", "38%", "41 ms"), or None for "-"."""
    head = text.replace(",", "").split(" ")[0].rstrip("%/s")
    try:
        return float(head)
    except ValueError:
        return None


def exported_names(exposition: str) -> set[str]:
    """Every sample name a scrape can hold, labelled families without children included."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(line.split("{")[0].split(" ")[0])
    return names


def test_console_shows_live_tenants_and_charts(
    kafka_bootstrap: str, tmp_path: Path, browser: Browser
) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=4).create()
    # A budget it never reaches: the console shows what it has spent of it.
    big = Budget(1_000_000_000, "day")
    set_policy(kafka_bootstrap, deployment.topics.policy, b"bulk", weight=2, budgets=(big,))
    scheduler = SchedulerProcess(
        deployment, tmp_path, "--rate", "40", "--fairness-window", "2"
    ).start()
    scheduler.wait_ready()
    quiet = ["quiet-1", "quiet-2", "quiet-3"]
    stop = threading.Event()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    # Two backlogs the scheduler drains at 40/s for the whole test. Noisy's is far behind:
    # once its backlog in memory holds the depth, its next records are passed over as they
    # are read, to wait in the ingest log, and the console says how many.
    # (Records read in one batch are indexed whole, so a batch may take a backlog past the
    # depth: the records sent after it is read are the ones sure to be passed over.)
    for i in range(DEPTH + PAST_DEPTH):
        tenants = (b"noisy", b"bulk") if i < 1500 else (b"noisy",)
        for tenant in tenants:
            producer.produce(deployment.topics.ingest, key=tenant, value=f"{SECRET}-{i}".encode())
    assert producer.flush(30) == 0
    wait_until(
        lambda: waiting_of(scheduler, "noisy") >= DEPTH + PAST_DEPTH // 2,  # a few went out
        60,
        "noisy's records read, past the depth",
    )
    for i in range(DEPTH + PAST_DEPTH, DEPTH + PAST_DEPTH + MORE):
        producer.produce(deployment.topics.ingest, key=b"noisy", value=f"{SECRET}-{i}".encode())
    assert producer.flush(30) == 0
    trickler = threading.Thread(
        target=trickle, args=(kafka_bootstrap, deployment.topics.ingest, quiet, stop)
    )
    trickler.start()
    url = f"http://127.0.0.1:{scheduler.web_port}/"
    try:
        browser.send("Page.enable")
        browser.send("Page.navigate", url=url)

        def live() -> dict[str, Any] | None:
            page: dict[str, Any] | None = browser.evaluate(READ_PAGE)
            if page is None:
                return None
            rows = {t: dict(zip(COLUMNS, cells, strict=True)) for t, cells in page["rows"].items()}
            wanted = {"noisy", "bulk", *quiet}
            if page["polls"] < 2 or not wanted <= set(rows):
                return None
            noisy, bulk = rows["noisy"], rows["bulk"]
            if not ((number(noisy["out/s"]) or 0) > 0 and (number(bulk["out/s"]) or 0) > 0):
                return None
            if any(number(rows[q]["p99"]) is None for q in quiet):
                return None
            if number(page["jain"]) is None:  # the first fairness window has closed
                return None
            if "in log" not in noisy["backlog"]:  # read up to the depth, the rest passed over
                return None
            if page["egressPoints"] < 5 or page["dwellPoints"] < 5:
                return None
            page["table"] = rows
            return page

        page = wait_until(live, 90, "the console showing live tenants and charts", interval=1)
        target = os.environ.get("FAIRSTREAM_CONSOLE_SCREENSHOT")
        if target:  # the README's picture: let the charts fill a minute first

            def a_minute_drawn() -> dict[str, Any] | None:
                drawn = live()
                return drawn if drawn and drawn["egressPoints"] >= 60 else None

            page = wait_until(a_minute_drawn, 120, "a minute of charts", interval=2)
        shot = tmp_path / "console.png"
        browser.screenshot(shot)
        scrape = scheduler.get("/metrics")
        tenants_json = scheduler.get("/tenants?history_since=0")[1]
    finally:
        stop.set()
        trickler.join(timeout=60)
        scheduler.terminate()
    rows = page["table"]
    print(json.dumps({t: r for t, r in rows.items()}, indent=1))
    # The tenants table: live numbers in every column that has one.
    for tenant in ("noisy", "bulk"):
        assert rows[tenant]["state"] == "backlogged"
        assert (number(rows[tenant]["backlog"]) or 0) > 0
        assert number(rows[tenant]["p50"]) is not None
    assert rows["bulk"]["weight"] == "2"
    # Noisy's records beyond the depth wait in the ingest log: the table and the backlog card
    # say how many, as /tenants does; bulk has none there.
    in_memory, _, in_log = rows["noisy"]["backlog"].partition(" + ")
    assert (number(in_memory) or 0) > 0
    assert (number(in_log) or 0) > 0
    assert (number(in_memory) or 0) + (number(in_log) or 0) <= DEPTH + PAST_DEPTH + MORE
    assert "in log" not in rows["bulk"]["backlog"]
    assert "more wait in the ingest log" in page["text"]
    stats = json.loads(tenants_json)
    assert 0 < stats["in_log"] <= PAST_DEPTH + MORE
    # Its budget: what it has spent (a record costs 1) of a billion a day; none for noisy.
    assert rows["bulk"]["budget"].endswith("/1000000000/day")
    assert (number(rows["bulk"]["budget"].split("/")[0]) or 0) > 0
    assert rows["noisy"]["budget"] == "-"
    # Entitlements are by weight among the tenants waiting for a share (not the quiet ones).
    bulk_entitled, noisy_entitled = (
        number(rows["bulk"]["entitled"]),
        number(rows["noisy"]["entitled"]),
    )
    assert bulk_entitled is not None
    assert noisy_entitled is not None
    assert bulk_entitled == pytest.approx(200 / 3, abs=1)
    assert noisy_entitled == pytest.approx(100 / 3, abs=1)
    assert number(rows["bulk"]["share"]) is not None
    # Of what noisy and bulk received, bulk got about its weight's part (2 of 3).
    assert number(rows["bulk"]["of backlogged"]) == pytest.approx(2 / 3 * 100, abs=12)
    # Jain's index over noisy and bulk, each served by its weight: close to 1.
    assert float(page["jain"]) > 0.9
    assert number(page["egress"]) is not None
    assert page["group"] >= 1
    # The charts: drawn, with every tenant in the legend.
    assert page["egressInk"] > 0.003, page["egressInk"]
    assert page["dwellInk"] > 0.0005, page["dwellInk"]
    assert {"noisy", "bulk", *quiet} <= set(page["legend"])
    # Never a payload: not on the page, not in what it reads.
    assert SECRET not in page["text"]
    assert SECRET not in tenants_json
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if target:
        shutil.copyfile(shot, REPO / target)
    # The Grafana dashboard queries only metrics this scheduler really exports.
    assert scrape[0] == 200
    exported = exported_names(scrape[1])
    for title, expr in queries(dashboard()):
        missing = set(METRIC.findall(expr)) - exported
        assert not missing, f"dashboard panel {title!r} queries {sorted(missing)}"


def test_no_console_leaves_the_endpoints(kafka_bootstrap: str, tmp_path: Path) -> None:
    deployment = Deployment(kafka_bootstrap, partitions=1).create()
    scheduler = SchedulerProcess(deployment, tmp_path, "--no-console").start()
    try:
        scheduler.wait_ready()
        assert scheduler.get("/")[0] == 404
        assert scheduler.get("/console/console.js")[0] == 404
        assert scheduler.get("/tenants")[0] == 200
        assert scheduler.get("/metrics")[0] == 200
    finally:
        scheduler.terminate()
