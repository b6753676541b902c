"""The emitter's producer renewal (``transaction.Renewal``): a producer that cannot go on is
replaced by a new, initialised one, unless it was fenced by another process or producers
keep breaking. A ManualClock and transactions that only record what was asked of them."""

from __future__ import annotations

from typing import Any

import pytest

from fairstream.core import ManualClock
from fairstream.scheduler.emitter.transaction import RENEW_EVERY, Renewal
from fairstream.scheduler.supervise import FatalError


class Made:
    def __init__(self, *config: Any) -> None:
        self.config = config
        self.initialised = False
        self.outlived = False

    def init(self) -> None:
        self.initialised = True

    def outlived_timeout(self) -> bool:
        return self.outlived


def renewal(clock: ManualClock) -> Renewal:
    return Renewal(Made, ({"a": 1}, "tx-id", 10.0), clock.now)  # type: ignore[arg-type]


def test_a_broken_producer_is_replaced_once_per_renew_every():
    clock = ManualClock(100.0)
    producers = renewal(clock)
    first = producers.first()
    assert first.config == ({"a": 1}, "tx-id", 10.0)
    assert not first.initialised  # the service initialises the first one
    second = producers.renew(first, FatalError("broken"))
    assert second is not first
    assert second.initialised
    assert second.config == first.config
    clock.advance(RENEW_EVERY - 1)
    with pytest.raises(FatalError, match="again"):
        producers.renew(second, FatalError("again"))  # breaking again so soon: fatal
    clock.advance(1)
    assert producers.renew(second, FatalError("later")).initialised


def test_fenced_by_another_process_is_fatal_unless_the_transaction_outlived_its_timeout():
    producers = renewal(ManualClock(100.0))
    txn = producers.first()
    with pytest.raises(FatalError, match="fenced"):
        producers.renew(txn, FatalError("fenced", fenced=True))
    txn.outlived = True  # the broker aborted it and bumped the epoch itself
    assert producers.renew(txn, FatalError("fenced", fenced=True)).initialised
