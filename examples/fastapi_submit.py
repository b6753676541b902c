"""A FastAPI service that hands each request for the paid API to fairstream.

POST /v1/completions with an ``X-Tenant`` header (the tenant id: an API key's owner, an
organisation) queues the body on the ingest topic and answers 202 with the request id; the
scheduler releases it to the paid-API workers in fair order. The producer is created in the
app's lifespan, on the server's event loop, and flushed on shutdown.

    pip install fairstream fastapi uvicorn
    FAIRSTREAM_BOOTSTRAP=localhost:9092 uvicorn examples.fastapi_submit:app

``FAIRSTREAM_BOOTSTRAP`` and ``FAIRSTREAM_INGEST_TOPIC`` say where the ingest topic is.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse

from fairstream import aio

BOOTSTRAP = os.environ.get("FAIRSTREAM_BOOTSTRAP", "localhost:9092")
INGEST_TOPIC = os.environ.get("FAIRSTREAM_INGEST_TOPIC", "fairstream.ingest")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with aio.AsyncProducer(BOOTSTRAP, INGEST_TOPIC) as producer:
        app.state.producer = producer
        yield  # on shutdown, what is queued is delivered


app = FastAPI(lifespan=lifespan)


@app.post("/v1/completions", status_code=202)
async def completions(
    request: Request,
    x_tenant: str = Header(..., description="the tenant id: 1 to 255 UTF-8 bytes"),
    x_cost: int = Header(1, description="the request's cost, e.g. its estimated tokens"),
) -> JSONResponse:
    producer: aio.AsyncProducer = request.app.state.producer
    request_id = str(uuid.uuid4())
    try:
        delivery = await producer.submit(
            x_tenant, await request.body(), cost=x_cost, request_id=request_id
        )
    except ValueError as exc:  # the contract refused it: the caller's mistake
        raise HTTPException(status_code=400, detail=str(exc)) from exc
    # Answer once the broker has the request: it is then durable and will be scheduled.
    try:
        message = await delivery
    except aio.DeliveryError as exc:
        raise HTTPException(status_code=503, detail=f"not queued: {exc}") from exc
    return JSONResponse(
        {"request_id": request_id, "partition": message.partition(), "offset": message.offset()},
        status_code=202,
    )
