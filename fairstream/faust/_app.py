"""What fairstream.faust needs from a Faust app: the aiokafka driver, aiokafka's murmur2
partitioner, the broker addresses and credentials (for the policy table's reader), a way
to write records outside Faust's transactions (``DirectSender``), and commits that keep up with
transactional egress (``commit_across_markers``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, cast

import faust

__all__ = ["DirectSender", "bootstrap_servers", "check_app", "client_auth", "commit_across_markers"]

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


class DirectSender:
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


def commit_across_markers(consumer: Any) -> bool:
    """Make Faust's ``consumer`` commit past transaction markers in one commit; True when
    it is (now) so, False for a consumer without faust-streaming 0.15's bookkeeping.

    Egress is written in transactions, and each transaction's commit marker takes an offset
    that no consumer sees. Faust notes those offsets as gaps, each running up to and
    including the next record; before a commit it adds the gaps to the acked offsets, so
    that record, acked itself, is there twice, and the run of consecutive offsets Faust
    commits ends at the duplicate: it committed one transaction's records per commit
    (every 2.8 s by default), fell further behind under load, and a crash repeated every
    call since its last commit. Before Faust's own merge, this adds
    the markers below the highest acked offset, each once, and drops them from the gap list
    (Faust's own merge would also count the record after a marker as acked, acked or not);
    what lies above is left to Faust.
    Applied to the app's consumer instance, once.
    """
    if getattr(consumer, "_fairstream_merges_gaps", False):
        return True
    needed = ("_new_offset", "_acked", "_acked_index", "_gap")
    if not all(hasattr(consumer, name) for name in needed):
        return False
    faust_new_offset = consumer._new_offset

    def new_offset(tp: Any) -> Any:
        _merge_gaps(consumer, tp)
        return faust_new_offset(tp)

    consumer._new_offset = new_offset
    consumer._fairstream_merges_gaps = True
    return True


def _merge_gaps(consumer: Any, tp: Any) -> None:
    """Count the gap offsets below ``tp``'s highest acked offset as acked, once each."""
    acked: list[int] = consumer._acked[tp]
    gaps = consumer._gap[tp]
    if not acked or not gaps:
        return
    top = max(acked)
    index: set[int] = consumer._acked_index[tp]
    for interval in gaps.overlap(0, top):
        # Faust's interval ends with the record after the markers: that one is acked by
        # its own stream, or not yet.
        for offset in range(interval.begin, min(interval.end - 1, top + 1)):
            if offset not in index:
                index.add(offset)
                acked.append(offset)
    gaps.chop(0, top + 1)
