"""``/healthz``, ``/readyz``, ``/metrics`` and ``/tenants`` of a scheduler instance.

A small aiohttp server on the main thread; it answers from the start, during recovery too.
Reads that need the core run on the emitter thread (``Handoff.call``), so the handlers hand
them to a worker thread and never block the event loop.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from fairstream.scheduler.service import SchedulerService


def build_web_app(service: SchedulerService) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        if service.fatal is not None:
            return web.Response(status=503, text=f"failed: {service.fatal}\n")
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if service.ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="recovering, rebalancing or stopping\n")

    async def metrics(_: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def tenants(request: web.Request) -> web.Response:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "50"))))
        except ValueError:
            return web.Response(status=400, text="limit must be an integer\n")
        try:
            stats = await asyncio.to_thread(service.tenant_stats, limit)
        except TimeoutError:
            return web.Response(status=503, text="the scheduler is busy; try again\n")
        return web.json_response(stats)

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
