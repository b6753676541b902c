"""What fairstream.faust needs from a Faust app: the aiokafka driver, aiokafka's murmur2
partitioner, the broker addresses and credentials (for the policy table's reader), and a
way to write records outside Faust's transactions (``Sender``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, cast

import faust

__all__ = ["Sender", "bootstrap_servers", "check_app", "client_auth"]

# Driver schemes that run on aiokafka (faust.transport.drivers: "kafka" is an alias).
_AIOKAFKA_SCHEMES = frozenset({"kafka", "aiokafka"})


def check_app(app: faust.App, what: str) -> None:
    """Raise ValueError unless ``app`` can carry fairstream records for ``what``.

    Faust's confluent driver drops message headers, on produce and on consume: fairstream's
    request id, cost, deadline and schedule times travel in headers. A custom
    ``producer_partitioner`` could place a tenant on another partition than Kafka's murmur2
    (what the scheduler, the Java client and aiokafka's default agree on).
    """
    schemes = {url.scheme for url in app.conf.broker}
    foreign = schemes - _AIOKAFKA_SCHEMES
    if foreign:
        raise ValueError(
            f"{what}: the Faust app's broker uses the {', '.join(sorted(foreign))} driver; "
            "fairstream.faust needs the aiokafka driver (broker='kafka://host:port'): "
            "Faust's confluent driver drops message headers, where fairstream keeps the "
            "request id, cost and deadline"
        )
    # A Param descriptor whose value is a callable: mypy binds it like a method.
    partitioner = cast(Any, app.conf).producer_partitioner
    if partitioner is not None:
        from aiokafka.partitioner import DefaultPartitioner

        if not isinstance(partitioner, DefaultPartitioner) and partitioner is not (
            DefaultPartitioner
        ):
            raise ValueError(
                f"{what}: the Faust app sets producer_partitioner={partitioner!r}; leave it "
                "unset (aiokafka's default is Kafka's murmur2, the partitioning the "
                "scheduler and Java clients use) so that a tenant's records land on its "
                "partition"
            )


def bootstrap_servers(app: faust.App) -> list[str]:
    """The app's broker addresses, ``host:port`` (9092 when a URL gives no port)."""
    return [f"{url.host}:{url.port or 9092}" for url in app.conf.broker]


def client_auth(app: faust.App) -> dict[str, Any]:
    """aiokafka keyword arguments for the app's credentials and SSL context."""
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    return dict(credentials_to_aiokafka_auth(app.conf.broker_credentials, app.conf.ssl_context))


class Sender:
    """Writes records with the app's own producer, outside Faust's transactions.

    Under ``processing_guarantee="exactly_once"`` a ``topic.send`` from an agent goes
    through Faust's transaction manager, which picks a transactional producer by the
    destination's partition only when its consumer happens to hold metadata for that topic,
    and otherwise (a topic the app does not consume) sends without one. fairstream's
    records (ingest, feedback, dead letters) take one path whatever the mode: the app's
    plain producer, at once.
    """

    def __init__(self, app: faust.App) -> None:
        self.app = app

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> Awaitable[Any]:
        """Queue one record; returns the future of its RecordMetadata."""
        producer = self.app.producer
        await producer.maybe_start()
        # Null header values stay null (aiokafka writes them so); faust's stubs want bytes.
        return await producer.send(topic, key, value, None, None, cast(Any, headers))
