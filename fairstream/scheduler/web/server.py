"""The console (``/``), ``/healthz``, ``/readyz``, ``/metrics`` and ``/tenants`` of a
scheduler instance.

A small aiohttp server on the main thread; it answers from the start, during recovery too.
Reads that need the core run on the emitter thread (``Handoff.call``), so the handlers hand
them to a worker thread and never block the event loop; when the emitter is too busy to
answer in time (a long commit), ``/metrics`` and ``/tenants`` serve its last snapshot,
marked stale, instead of failing. ``/readyz`` lists every reason the instance is unready or
degraded (``SchedulerService.readiness``).

The console is three static files shipped in the package (``console/``: HTML, JavaScript,
CSS; no build step, nothing from elsewhere) that poll ``/tenants``. It is read-only and
shows no payloads: ``/tenants`` has none. ``--no-console`` leaves it out (404).
"""

from __future__ import annotations

import asyncio
from importlib import resources

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fairstream.scheduler.service import SchedulerService

CONSOLE_FILES = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "console.css": "text/css",
}
# The console loads nothing but its own files and /tenants (and so cannot leak to a CDN).
CONSOLE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def console_file(name: str) -> bytes:
    """One of the console's files, from the installed package."""
    return (resources.files("fairstream.scheduler.web") / "console" / name).read_bytes()


def _console_routes(app: web.Application) -> None:
    files = {name: (console_file(name), kind) for name, kind in CONSOLE_FILES.items()}

    async def page(request: web.Request) -> web.Response:
        name = request.match_info.get("name", "index.html")
        if name not in files:
            raise web.HTTPNotFound()
        body, kind = files[name]
        return web.Response(body=body, content_type=kind, headers=CONSOLE_HEADERS)

    app.router.add_get("/", page)
    app.router.add_get("/console/{name}", page)


def build_web_app(service: SchedulerService) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        if service.fatal is not None:
            return web.Response(status=503, text=f"failed: {service.fatal}\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ready, reasons = service.readiness()
        text = "".join(f"{reason}\n" for reason in reasons)
        if ready:
            return web.Response(text="ready\n" + text)
        return web.Response(status=503, text=text or "not ready\n")

    async def metrics(_: web.Request) -> web.Response:
        # The emitter's figures first (or its last snapshot, marked stale, when it is busy
        # committing): a scrape never waits on the emitter longer than SCRAPE_WAIT.
        await asyncio.to_thread(service.refresh_metrics)
        body = await asyncio.to_thread(generate_latest, service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def tenants(request: web.Request) -> web.Response:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "50"))))
        except ValueError:
            return web.Response(status=400, text="limit must be an integer\n")
        since = request.query.get("history_since")
        try:
            history_since = None if since is None else int(since)
        except ValueError:
            return web.Response(status=400, text="history_since must be epoch milliseconds\n")
        try:
            stats = await asyncio.to_thread(service.tenant_stats, limit, history_since)
        except TimeoutError:
            return web.Response(status=503, text="the scheduler is busy; try again\n")
        return web.json_response(stats)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/tenants", tenants)
    if service.settings.console:
        _console_routes(app)
    return app


async def start_web(service: SchedulerService, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(build_web_app(service), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
