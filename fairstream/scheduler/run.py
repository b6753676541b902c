"""Run one scheduler instance (a member of the consumer group) until it is stopped.

Caller: ``fairstream scheduler`` (``fairstream.cli.scheduler``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import gc
import logging
import signal
import sys
from typing import Any

from fairstream import native
from fairstream.adapters.admin import (
    TopicError,
    admin_client,
    ensure_internal_topics,
    partition_count,
    topic_configs,
)
from fairstream.adapters.heap import fix_mmap_threshold
from fairstream.config import Settings, default_data_dir
from fairstream.scheduler import datadir

SHUTDOWN_TIMEOUT = 30.0  # seconds from SIGTERM (or a fatal error) to exit

log = logging.getLogger("fairstream.scheduler")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def inspect_topics(settings: Settings) -> tuple[int, Any, int | None]:
    """The ingest topic's partitions, the record size limits, and its retention.ms."""
    from fairstream.scheduler.emitter.loop import Limits

    admin = admin_client(settings.kafka)
    topics = settings.topics
    partitions = partition_count(admin, topics.ingest, timeout=30)
    if partitions is None:
        raise TopicError(
            f"the ingest topic {topics.ingest} does not exist at {settings.kafka.describe()}; "
            "create fairstream's topics first: fairstream topics create --partitions N"
        )
    for name in (topics.egress, topics.dlq):
        if partition_count(admin, name) is None:
            raise TopicError(
                f"the topic {name} does not exist; create fairstream's topics first: "
                "fairstream topics create --partitions N"
            )
    size = "max.message.bytes"
    limits = Limits(
        egress=_int(topic_configs(admin, topics.egress, (size,))[size]) or Limits.egress,
        dlq=_int(topic_configs(admin, topics.dlq, (size,))[size]) or Limits.dlq,
    )
    ingest = topic_configs(admin, topics.ingest, ("retention.ms", "retention.bytes"))
    retention_ms = _int(ingest["retention.ms"])
    if retention_ms is not None and retention_ms > 0:
        log.warning(
            "the ingest topic %s deletes records after %.0f s (retention.ms): a backlog older "
            "than that is lost. fairstream topics create sets retention.ms=-1.",
            topics.ingest,
            retention_ms / 1000,
        )
    if (_int(ingest["retention.bytes"]) or -1) > 0:
        log.warning(
            "the ingest topic %s has retention.bytes=%s: a large backlog can be deleted "
            "before it is emitted",
            topics.ingest,
            ingest["retention.bytes"],
        )
    return partitions, limits, retention_ms


# The cyclic collector's thresholds the scheduler runs with (``tune_garbage_collector``);
# the broker-free test driver runs the emitter under them too.
GC_THRESHOLDS = (100_000, 50, 1000)


def tune_garbage_collector() -> None:
    """Collect cycles less often: the index holds millions of small long-lived objects (a
    tuple per buffered record), which the default thresholds make the cyclic collector walk
    again and again. Measured: one partition absorbed 120,000 records/s with the defaults,
    214,000 with these (1,000,000 buffered). Nothing in the data path makes cycles;
    reference counting frees it."""
    gc.freeze()  # what the imports made: never garbage
    gc.set_threshold(*GC_THRESHOLDS)


def lock_data_dir(settings: Settings) -> tuple[Settings, datadir.DataDirLock]:
    """Lock the data directory for this process (``datadir``); with the default directory,
    its lowest free slot, which becomes the settings' ``data_dir``."""
    app_id, port = settings.app_id, settings.web_port
    if settings.data_dir == default_data_dir():
        held = datadir.lock_default(settings.data_dir, app_id=app_id, web_port=port)
        if held.directory != settings.data_dir:
            log.info(
                "the default data directory is in use by another scheduler; this one uses %s",
                held.directory,
            )
        return dataclasses.replace(settings, data_dir=held.directory), held
    return settings, datadir.lock(settings.data_dir, app_id=app_id, web_port=port)


def with_identity(settings: Settings) -> Settings:
    """``settings`` with the instance's identity as its group instance id: without
    ``--group-instance-id``, the one kept in the (locked) data directory. With ``--membership
    static`` the ingest consumer joins under it (``ingest.member.consumer_config``); the
    transactional id is named after it either way. With ``--membership dynamic`` and no
    ``--group-instance-id``, the settings are left as they are."""
    if settings.group_instance_id or settings.membership != "static":
        return settings
    return dataclasses.replace(settings, group_instance_id=datadir.identity(settings.data_dir))


def _port_in_use(settings: Settings, exc: OSError) -> str:
    others = [
        h for h in datadir.holders(default_data_dir()) if not h.startswith(f"{settings.data_dir}:")
    ]
    who = f"; schedulers on this host: {'; '.join(others)}" if others else ""
    return (
        f"the web port {settings.web_port} on {settings.web_host or '*'} is in use ({exc.strerror})"
        f"{who}. Give each instance on one host its own --web-port."
    )


def run(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT (exit 0) or a fatal error (exit 1)."""
    from fairstream.scheduler.service import SchedulerService
    from fairstream.scheduler.web.server import start_web

    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings, held = lock_data_dir(settings)
    except datadir.DataDirInUse as exc:
        print(f"fairstream scheduler: {exc}", file=sys.stderr)
        return 2
    settings = with_identity(settings)
    try:
        return _run(settings, SchedulerService, start_web)
    finally:
        held.release()


def _run(settings: Settings, service_class: Any, start_web: Any) -> int:
    tune_garbage_collector()
    fix_mmap_threshold()  # before librdkafka's threads allocate (``adapters.heap``)
    partitions, limits, retention_ms = inspect_topics(settings)
    ensure_internal_topics(
        settings.kafka,
        settings.app_id,
        partitions,
        settings.replication_factor,
        settings.topics.ingest,
    )
    service = service_class(settings, partitions, limits=limits, retention_ms=retention_ms)
    failed_to_serve: list[str] = []

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        # The web endpoints first (before joining the group): a port in use fails here, in
        # a second, instead of after this instance took partitions.
        try:
            runner = await start_web(service, settings.web_host, settings.web_port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            failed_to_serve.append(_port_in_use(settings, exc))
            return
        log.info("the per-record path: %s", native.describe())
        log.info(
            "web endpoints on %s:%d (%s/healthz /readyz /metrics /tenants)",
            settings.web_host,
            settings.web_port,
            "the console at /, " if settings.console else "",
        )
        try:
            await asyncio.to_thread(service.start)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, service.stop)
            await asyncio.to_thread(service.done.wait)
            # Stopping: /healthz keeps answering (503 after a fatal error) meanwhile.
            clean = await asyncio.to_thread(service.join, SHUTDOWN_TIMEOUT)
            if not clean:
                log.error("threads still running %.0f s after the stop; exiting", SHUTDOWN_TIMEOUT)
        finally:
            await runner.cleanup()

    asyncio.run(serve())
    if failed_to_serve:
        print(f"fairstream scheduler: {failed_to_serve[0]}", file=sys.stderr)
        return 2
    if service.fatal is not None:
        print(f"fairstream scheduler: fatal: {service.fatal}", file=sys.stderr)
        return 1
    return 0
