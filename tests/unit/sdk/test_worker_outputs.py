"""``Outputs``, a worker's dead-letter producer and feedback writer, with librdkafka's
producer replaced by a stand-in: a dead letter's future says what became of it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from fairstream.sdk.worker.outputs import Outputs


class _StandIn:
    """Takes ``produce`` as librdkafka does and reports the delivery from another thread."""

    def __init__(self, error: object = None, refuse: BaseException | None = None) -> None:
        self.produced: list[tuple[str, Any, Any, list[Any]]] = []
        self.error = error
        self.refuse = refuse

    def produce(
        self,
        topic: str,
        value: Any,
        key: Any,
        *,
        headers: list[Any],
        on_delivery: Callable[[object, object], None],
    ) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.produced.append((topic, key, value, headers))
        threading.Thread(target=on_delivery, args=(self.error, None)).start()


def _dead_letter(producer: _StandIn) -> object:
    outputs = Outputs("fs.dlq", {}, None)
    outputs._dlq = producer  # type: ignore[assignment]

    async def run() -> object:
        return await outputs.dead_letter(b"acme", b"prompt", [("h", b"v")])

    return asyncio.run(run())


def test_a_delivered_dead_letter_resolves_to_none() -> None:
    producer = _StandIn()
    assert _dead_letter(producer) is None
    assert producer.produced == [("fs.dlq", b"acme", b"prompt", [("h", b"v")])]


def test_a_failed_delivery_resolves_to_its_error() -> None:
    assert _dead_letter(_StandIn(error="broker said no")) == "broker said no"


def test_a_full_queue_resolves_to_the_buffer_error() -> None:
    full = BufferError("queue full")
    assert _dead_letter(_StandIn(refuse=full)) is full
