"""``/metrics``' figures from the emitter (``SchedulerService.refresh_metrics``): a snapshot
taken on the emitter thread serves the scrapes of a second. A ManualClock; the clients are
made, never polled (nothing listens at the bootstrap address)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fairstream.config import Settings
from fairstream.config.kafka import KafkaConnection
from fairstream.core import ManualClock
from fairstream.scheduler import service as service_module
from fairstream.scheduler.emitter.loop import Limits
from fairstream.scheduler.observe import Scrape
from fairstream.scheduler.service import SchedulerService

NOWHERE = "127.0.0.1:1"


def test_scrapes_within_a_second_share_one_snapshot_of_the_emitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Taking a snapshot walks every backlogged tenant on the emitter thread: however often
    # /metrics is scraped, the emitter is asked at most once per SCRAPE_REUSE.
    clock = ManualClock()
    settings = Settings(kafka=KafkaConnection(bootstrap=NOWHERE), feedback_topic="")
    service = SchedulerService(settings, 4, limits=Limits(), retention_ms=None, clock=clock)
    asked: list[float] = []

    def call(fn: object, timeout: float = 0) -> Scrape:
        asked.append(clock.now())
        return Scrape({}, {}, {}, len(asked), 0, 0)

    monkeypatch.setattr(service.handoff, "call", call)
    monkeypatch.setattr(service, "_emitter_thread", SimpleNamespace(is_alive=lambda: True))
    for _ in range(5):
        service.refresh_metrics()
        clock.advance(0.1)
    assert asked == [0.0]
    assert service.metrics.snapshot_age.collect()[0].samples[0].value == pytest.approx(0.4)
    clock.advance(service_module.SCRAPE_REUSE)
    service.refresh_metrics()
    assert len(asked) == 2
    assert service._scrape[0].backlog == 2  # the new snapshot is served
    assert service.metrics.snapshot_age.collect()[0].samples[0].value == 0
