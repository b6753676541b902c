"""The paid API behind a real Faust worker, for ``benchmarks.api_view --scenario faust-agents``.

A Faust app whose only agent is ``fairstream.faust.PaidApiAgent`` on the scheduler's egress,
with ``max_in_flight`` calls at once (``BENCH_MAX_IN_FLIGHT``) and the default playout
delay. Each call appends one line to ``BENCH_CALLS_LOG`` when the handler starts, as the API
sees it: ``<taken> <tenant> <sent>`` (epoch seconds; ``sent`` is the quiet producer's send
time from the payload ``q <epoch s> <n>``, ``-`` for other records), then takes
``BENCH_CALL_S`` seconds. With ``BENCH_API`` (``host:port`` of ``benchmarks.api_view``'s
``api_server``: an API of a few slots and a FIFO, shared by every process), the call is a
request to it instead, answered when the API has served it: the API's queue is then inside
the call, as with a self-hosted model. Several processes with the same ``BENCH_APP_ID``
share the egress partitions as one consumer group.

    BENCH_APP_ID=... BENCH_CALLS_LOG=... KAFKA_BOOTSTRAP_SERVERS=... \\
        python -m faust -A benchmarks.faust_quiet_app worker -l warn
"""

from __future__ import annotations

import asyncio
import os
import time

import faust

from fairstream import Request
from fairstream.faust import PaidApiAgent

env = os.environ.get
BOOTSTRAP = env("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")
CALL_S = float(env("BENCH_CALL_S", "0.1"))
CALLS_LOG = env("BENCH_CALLS_LOG", "calls.log")
API = env("BENCH_API")  # host:port of a shared API that queues, or None

app = faust.App(
    env("BENCH_APP_ID", "fairstream-bench-faust"),
    broker=[f"kafka://{server}" for server in BOOTSTRAP.split(",")],
    processing_guarantee="exactly_once",  # egress is transactional: read it committed
    datadir=env("BENCH_DATADIR", "faust-data"),
    consumer_auto_offset_reset="earliest",
    topic_disable_leader=True,
    web_enabled=False,
)

_log = open(CALLS_LOG, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the process's


async def call_api(request: Request) -> None:
    taken = time.time()
    payload = request.payload
    sent = payload.split()[1].decode() if payload.startswith(b"q ") else "-"
    _log.write(f"{taken:.6f} {request.tenant} {sent}\n")
    if API is None:
        await asyncio.sleep(CALL_S)  # the remote call
        return
    host, port = API.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"{request.tenant} {sent}\n".encode())
        await writer.drain()
        answer = await reader.readline()
    finally:
        writer.close()
    if answer != b"ok\n":
        raise RuntimeError(f"the API answered {answer!r}")


paid_api = PaidApiAgent(
    app,
    call_api,
    egress_topic=env("FAIRSTREAM_EGRESS_TOPIC", "fairstream.egress"),
    dlq_topic=env("FAIRSTREAM_DLQ_TOPIC", "fairstream.dlq"),
    feedback_topic=env("FAIRSTREAM_FEEDBACK_TOPIC", "fairstream.feedback"),
    max_in_flight=int(env("BENCH_MAX_IN_FLIGHT", "1")),
)
