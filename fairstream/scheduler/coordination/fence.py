"""Fencing a dead peer's transactional id, so that its open transaction is aborted at once.

An instance killed mid-transaction leaves it open, egress records written: read_committed
consumers read none of its egress partitions past the transaction's first record (the last
stable offset) until the broker aborts it, ``--transaction-timeout`` after it began. The
survivor's records on those partitions wait behind it, and their workers starve. A producer
that registers the dead instance's transactional id (``init_transactions``) bumps its epoch
and makes the broker abort what it left open at once, as a restart of that instance does.

Whom to fence (``Fencer``, pure): a peer that is silent (``PeerView.silent``: it wrote no
report for ``SILENCE`` while this instance read the log) and one of whose last reported
ingest partitions this instance now owns. A partition moves only once its owner revoked it
or left the group (its session timed out): a live peer that merely rebalanced keeps
reporting, at most ``SILENCE`` apart even while its emitter is stuck, so it is never
silent. A process frozen whole for longer (SIGSTOP, a frozen VM) while its partitions move
is a zombie: fencing it is what makes it stop. Each run of a peer (``Report.run``) is
fenced once; never this instance's own id, never a peer whose report names none (an earlier
release). A restart of the peer with its identity reports again with a new run and is not
silent; the one race left (it restarts in the moment of the fence, before its first report
is read) costs it a restart, nothing more: a fenced instance exits and is restarted.

How (``fence``): a short-lived transactional producer, on a thread of its own (it may block
on the broker; the group thread renews the emitter's lease and must not wait), within
``FENCE_TIMEOUT``. A failure is logged and counted (``fairstream_group_fences{outcome}``),
never fatal: the broker still aborts the transaction at its timeout.

Caller: ``DemandExchange`` (the group thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from fairstream.adapters.clients import producer_config
from fairstream.scheduler.coordination.view import Report

__all__ = ["FENCE_TIMEOUT", "Fencer", "fence", "fence_in_background"]

log = logging.getLogger("fairstream.group")

FENCE_TIMEOUT = 30.0  # seconds init_transactions may take for a dead peer's id
# The fencing producer begins no transaction; what it registers must be a timeout every
# broker accepts (transaction.max.timeout.ms is 15 min by default).
FENCE_TRANSACTION_TIMEOUT_MS = 10_000


class Fencer:
    """Which peers' transactional ids to fence now. Pure; one caller (the group thread)."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id  # this instance's: never fenced
        self._fenced: dict[str, str] = {}  # peer -> the run fenced

    def due(self, silent: Mapping[str, Report], owned: tuple[int, ...]) -> list[Report]:
        """The silent peers' reports whose transactional id is to be fenced now: each lists
        an ingest partition in ``owned`` (this instance's now). Each is due once per run."""
        mine = set(owned)
        out = []
        for instance, report in sorted(silent.items()):
            txn = report.transactional_id
            if not txn or txn == self.transactional_id:
                continue
            if self._fenced.get(instance) == report.run or not mine.intersection(report.partitions):
                continue
            self._fenced[instance] = report.run
            out.append(report)
        return out


def fence(config: Mapping[str, Any], transactional_id: str, timeout: float) -> None:
    """Register ``transactional_id``, bumping its epoch: the broker aborts the transaction
    its last producer left open, and that producer, if it still runs, is told it is fenced.
    Raises what librdkafka raises (``KafkaException``) if it cannot within ``timeout``."""
    producer = Producer(
        producer_config(
            config,
            overrides={
                "transactional.id": transactional_id,
                "transaction.timeout.ms": FENCE_TRANSACTION_TIMEOUT_MS,
            },
        )
    )
    try:
        producer.init_transactions(timeout)
    finally:
        producer.flush(0)  # nothing produced; frees librdkafka's handle promptly


def fence_in_background(
    config: Mapping[str, Any],
    report: Report,
    on_outcome: Callable[[str], None],
    timeout: float = FENCE_TIMEOUT,
    fencing: Callable[[Mapping[str, Any], str, float], None] = fence,
) -> threading.Thread:
    """``fencing`` ``report``'s transactional id on a daemon thread; ``on_outcome`` gets
    ``fenced`` or ``failed`` (from that thread)."""
    txn = report.transactional_id

    def run() -> None:
        try:
            fencing(config, txn, timeout)
        except Exception as exc:
            log.warning(
                "fencing the transactional id %s of silent instance %s failed: %r; the broker "
                "aborts its open transaction at its --transaction-timeout instead",
                txn,
                report.instance,
                exc,
            )
            on_outcome("failed")
            return
        log.info(
            "fenced the transactional id %s of instance %s (silent; its partitions %s are "
            "this instance's now): the broker aborted what it left open",
            txn,
            report.instance,
            list(report.partitions),
        )
        on_outcome("fenced")

    thread = threading.Thread(target=run, name=f"fence-{txn}"[:60], daemon=True)
    thread.start()
    return thread
