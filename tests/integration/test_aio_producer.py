"""fairstream.aio.AsyncProducer on an event loop against a real broker: the same records as the
blocking producer, futures of their delivery, failures raised by flush, one loop per
producer."""

from __future__ import annotations

import asyncio
import threading

import pytest
from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import KafkaError, Message

from fairstream import aio, wire
from fairstream_dev.harness.kafka import consume, create_topics, unique


def test_submit_on_a_loop_writes_the_contract_record(kafka_bootstrap: str) -> None:
    topic = unique("aio-ingest")
    partitions = 5
    create_topics(kafka_bootstrap, [topic], partitions=partitions)
    reports: list[KafkaError | None] = []
    ticks = 0

    async def main() -> list[Message]:
        nonlocal ticks
        stop = asyncio.Event()

        async def ticker() -> None:
            # Proof that the loop runs while records are queued and delivered.
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.create_task(ticker())
        async with aio.AsyncProducer(
            kafka_bootstrap, topic, on_delivery=lambda e, m: reports.append(e)
        ) as producer:
            first = await producer.submit(
                "acme",
                b"\x00payload\xff",
                cost=350,
                request_id="req-1",
                deadline=1_900_000_000_000,
                headers={"trace": "abc"},
            )
            rest = [await producer.submit(f"tenant-{i}", b"x") for i in range(40)]
            delivered = [await first, *await asyncio.gather(*rest)]
            assert producer.delivered == 41
        stop.set()
        await tick
        return delivered

    delivered = asyncio.run(main())
    assert reports == [None] * 41
    assert ticks > 0
    assert all(m.error() is None and m.offset() is not None for m in delivered)
    read = {m.key(): m for m in consume(kafka_bootstrap, topic, 41)}
    first = read[b"acme"]
    assert first.value() == b"\x00payload\xff"
    assert first.headers() == [
        ("trace", b"abc"),
        (wire.COST, b"350"),
        (wire.REQUEST_ID, b"req-1"),
        (wire.DEADLINE_MS, b"1900000000000"),
    ]
    assert wire.validate_ingest(first.key(), first.value(), first.headers()) == wire.Valid(
        "acme", 350, 1_900_000_000_000, "req-1"
    )
    # The partition a Java client or aiokafka would pick (murmur2), as the blocking producer.
    murmur2 = DefaultPartitioner()
    every = list(range(partitions))
    for key, msg in read.items():
        assert msg.partition() == murmur2(key, every, every), key


def test_bad_records_are_refused_before_queueing(kafka_bootstrap: str) -> None:
    topic = unique("aio-bad")
    create_topics(kafka_bootstrap, [topic])

    async def main() -> None:
        async with aio.AsyncProducer(kafka_bootstrap, topic) as producer:
            for tenant in ("", "x" * 256):
                with pytest.raises(ValueError, match="tenant id must be 1 to 255 UTF-8 bytes"):
                    await producer.submit(tenant, b"x")
            with pytest.raises(ValueError, match="cost"):
                await producer.submit("ok", b"x", cost=0)
            with pytest.raises(TypeError, match="payload must be bytes"):
                await producer.submit("ok", "text")  # type: ignore[arg-type]
            assert len(producer) == 0
            await producer.submit("ok", b"x")

    asyncio.run(main())
    [msg] = consume(kafka_bootstrap, topic, 1)
    assert msg.key() == b"ok"


def test_failed_deliveries_fail_their_futures_and_flush(kafka_bootstrap: str) -> None:
    missing = unique("aio-missing")  # the dev broker does not auto-create topics

    async def main() -> None:
        producer = aio.AsyncProducer(kafka_bootstrap, missing, **{"message.timeout.ms": 2000})
        one = await producer.submit("acme", b"1")
        await producer.submit("acme", b"2")  # its future is never awaited: no warning
        with pytest.raises(aio.DeliveryError, match="2 record") as info:
            await producer.flush(30)
        assert info.value.count == 2
        with pytest.raises(aio.DeliveryError, match="1 record"):
            await one
        await producer.close(1)  # the error was raised once; nothing else failed

    asyncio.run(main())


def test_a_producer_belongs_to_one_loop_at_a_time(kafka_bootstrap: str) -> None:
    topic = unique("aio-loops")
    create_topics(kafka_bootstrap, [topic])
    producer = aio.AsyncProducer(kafka_bootstrap, topic)
    refused: list[RuntimeError] = []

    async def submit(value: bytes) -> None:
        await producer.submit("acme", value)

    def from_another_loop() -> None:
        try:
            asyncio.run(submit(b"never"))
        except RuntimeError as exc:
            refused.append(exc)

    async def main() -> None:
        await submit(b"first")
        other = threading.Thread(target=from_another_loop)
        other.start()
        await asyncio.get_running_loop().run_in_executor(None, other.join)
        await producer.flush()

    asyncio.run(main())
    assert len(refused) == 1
    assert "belongs to the event loop" in str(refused[0])

    async def again() -> None:  # the first loop is closed: a new one takes the producer
        await submit(b"second")
        await producer.close()

    asyncio.run(again())
    assert producer.closed
    assert sorted(m.value() for m in consume(kafka_bootstrap, topic, 2)) == [b"first", b"second"]
