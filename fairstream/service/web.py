"""``/healthz``, ``/readyz``, ``/metrics`` and ``/tenants`` of a scheduler instance.

Served by a small aiohttp server of our own that starts before the Faust app, so that
liveness answers during a long table recovery (Faust's web server starts only after it),
and no Faust table view is ever exposed.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fairstream.service.engine import SchedulerService


def build_web_app(service: SchedulerService) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        crashed = service.app.crash_reason
        if crashed is not None:
            return web.Response(status=503, text=f"crashed: {crashed!r}\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if service.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="recovering or rebalancing\n")

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def tenants(request: web.Request) -> web.Response:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "50"))))
        except ValueError:
            return web.Response(status=400, text="limit must be an integer\n")
        return web.json_response(service.tenant_stats(limit))

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/tenants", tenants)
    return app


async def start_web(service: SchedulerService, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(build_web_app(service), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
