"""A Faust app on both sides of fairstream: it submits requests and calls the paid API.

- agent ``submit``: reads JSON prompts from the app's own ``requests`` topic and writes each
  to the fairstream ingest topic with ``fairstream.faust.IngestWriter`` (key = tenant, the tokens
  as ``fairstream-cost``, the prompt's id as the request id);
- the scheduler (``fairstream scheduler``, another process) releases them onto egress in
  tenant-fair order, as fast as ``--rate`` allows;
- agent ``fairstream-paid-api.<egress>`` (``fairstream.faust.PaidApiAgent``) calls
  ``call_model`` for each egress record and reports every outcome to the feedback topic.
  The app runs with ``processing_guarantee="exactly_once"``, the Faust setting that reads
  egress ``read_committed`` (see ``fairstream.faust`` for the trade-offs);
- ``policies`` (``fairstream.faust.PolicyTable``) is the tenant policy topic as a read-only
  table: ``call_model`` picks a model by the tenant's weight.

``call_model`` stands in for an LLM API: it "uses" one token per word of the prompt and
returns ``fairstream.Usage`` with that count (the scheduler charges the difference from the
declared cost); a prompt starting with ``busy:`` is refused once with
``fairstream.RateLimited(retry_after=0.2)``, as an API answering 429 with ``Retry-After``
would be; one starting with ``invalid:`` fails every time, as a 400 would (the agent retries
it, then dead-letters it); one starting with ``slow:`` takes 0.2 s, as a model's answer
does (the agent runs many such calls at once). Replace it with your client.

Run it (topics from ``fairstream topics create``, a scheduler running):

    KAFKA_BOOTSTRAP_SERVERS=localhost:9092 faust -A examples.faust_app worker -l info

and send prompts to the requests topic, e.g. ``{"tenant": "acme", "text": "hello there",
"tokens": 2, "id": "p-1"}``. Topic names and the app id come from the environment (the
``FAIRSTREAM_*_TOPIC`` variables the fairstream CLI reads, ``EXAMPLE_REQUESTS_TOPIC``,
``EXAMPLE_APP_ID``, ``EXAMPLE_DATADIR``); ``EXAMPLE_HANDLED_LOG`` names a file that gets a
line per handled request, ending with the calls running as it started (the integration test
reads it).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import faust

from fairstream import RateLimited, Request, Usage
from fairstream.faust import IngestWriter, PaidApiAgent, PolicyTable

env = os.environ.get
BOOTSTRAP = env("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092")

app = faust.App(
    env("EXAMPLE_APP_ID", "fairstream-faust-example"),
    broker=[f"kafka://{server}" for server in BOOTSTRAP.split(",")],
    # read_committed egress: the scheduler writes it in transactions.
    processing_guarantee="exactly_once",
    datadir=env("EXAMPLE_DATADIR", str(Path(tempfile.gettempdir()) / "fairstream-faust-example")),
    consumer_auto_offset_reset="earliest",
    topic_disable_leader=True,
    web_enabled=False,
)


class Prompt(faust.Record, serializer="json"):
    tenant: str
    text: str
    tokens: int = 1
    id: str | None = None


requests = app.topic(env("EXAMPLE_REQUESTS_TOPIC", "example.requests"), value_type=Prompt)
ingest = IngestWriter(app, env("FAIRSTREAM_INGEST_TOPIC", "fairstream.ingest"))
policies = PolicyTable(app, env("FAIRSTREAM_POLICY_TOPIC", "fairstream.policy"))


@app.agent(requests)
async def submit(prompts: faust.StreamT[Prompt]) -> None:
    async for prompt in prompts:
        await ingest.send(
            prompt.tenant, prompt.text.encode(), cost=prompt.tokens, request_id=prompt.id
        )


_refused: set[str] = set()  # request ids refused once already (the simulated 429)
_handled_log = env("EXAMPLE_HANDLED_LOG")
_running: set[str] = set()  # request ids whose call_model runs now


async def call_model(request: Request) -> Usage:
    _running.add(request.request_id)
    try:
        return await _call_model(request)
    finally:
        _running.discard(request.request_id)


async def _call_model(request: Request) -> Usage:
    text = request.payload.decode("utf-8", "replace")
    if text.startswith("busy:") and request.request_id not in _refused:
        _refused.add(request.request_id)
        raise RateLimited(retry_after=0.2)
    if text.startswith("invalid:"):
        raise ValueError("400 Bad Request: the model cannot read this prompt")
    # The tenant's policy picks the model: tenants given more weight get the larger one.
    await policies.wait_ready(timeout=30)  # the table has read the topic once (at start)
    model = "large" if policies.policy(request.tenant).weight > 1 else "small"
    tokens = max(1, len(text.split()))
    if _handled_log:
        with open(_handled_log, "a", encoding="utf-8") as out:
            out.write(f"{request.request_id} {request.tenant} {model} {tokens} {len(_running)}\n")
    if text.startswith("slow:"):
        await asyncio.sleep(0.2)  # the model's latency
    return Usage(cost=tokens)


paid_api = PaidApiAgent(
    app,
    call_model,
    egress_topic=env("FAIRSTREAM_EGRESS_TOPIC", "fairstream.egress"),
    dlq_topic=env("FAIRSTREAM_DLQ_TOPIC", "fairstream.dlq"),
    feedback_topic=env("FAIRSTREAM_FEEDBACK_TOPIC", "fairstream.feedback"),
    backoff_initial=0.2,
)
