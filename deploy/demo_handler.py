"""The demo worker's handler: stands in for a paid API call (docker-compose.yml's `worker`).

`fairstream worker --handler demo_handler:handle` imports this module from its working
directory and calls ``handle`` once per egress record. It logs what a real handler would
care about: whose request it is and how long it waited in the scheduler's buffer.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("demo_handler")

# Seconds one "API call" takes: short, so the scheduler's --rate is what limits throughput.
CALL_SECONDS = 0.02


def handle(request: Any) -> None:
    """Pretend to call the paid API for ``request`` (a ``fairstream.Request``)."""
    waited = ""
    if request.enqueued_ms is not None and request.scheduled_ms is not None:
        waited = f" waited {request.scheduled_ms - request.enqueued_ms} ms"
    time.sleep(CALL_SECONDS)
    log.info(
        "tenant=%s id=%s cost=%d%s payload=%r",
        request.tenant,
        request.request_id,
        request.cost,
        waited,
        request.payload[:40],
    )
