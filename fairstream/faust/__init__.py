"""fairstream for Faust apps (``pip install 'fairstream[faust]'``, faust-streaming 0.15).

- ``IngestWriter``: write fairstream ingest records from a Faust app (key = tenant, the
  ``fairstream-*`` headers, murmur2 partitioning that agrees with the scheduler);
- ``PaidApiAgent``: a Faust agent on the egress topic that calls the paid API for each
  request as ``fairstream.Worker`` does (``fairstream.Request``, ``RateLimited``, ``Usage``),
  reports each outcome to the feedback topic and skips request ids it saw lately;
  ``request_from_event`` builds the ``Request`` of one event;
- ``PolicyTable``: the tenant policies as a read-only mapping that follows the policy topic
  (writes go through ``fairstream tenants``).

Reading egress committed-only. The scheduler writes egress in Kafka transactions; a reader
at ``read_uncommitted`` also sees the records of transactions that were aborted (and
emitted again later, or never: a request may expire or be purged meanwhile). With Faust:

- ``processing_guarantee="exactly_once"`` is the one setting that makes Faust's aiokafka
  consumer read ``read_committed``. It also makes Faust's producers transactional, one per
  assigned partition, for what agents send through Faust's topics; fairstream's own
  records (ingest, feedback, dead letters) go through the app's plain producer at once,
  in either mode. Faust's exactly-once mode has open bugs (faust-streaming issues 517, 323,
  177); with offsets acked since Faust's last commit, faust-streaming 0.15.3's shutdown
  fails that commit ("Not in the middle of a transaction") and then hangs, so give the
  worker a kill grace period (the open transaction aborts; its events are handled again).
  This is what ``PaidApiAgent`` is tested with.
- the default ``at_least_once`` reads ``read_uncommitted``: aborted egress records reach
  the agent. The request-id memory skips the ones emitted again while remembered; a
  request that was aborted and then expired or purged is still called once, unbilled by the
  scheduler's books. Choose it only where an extra call now and then is acceptable.
- Faust's confluent driver would read ``read_committed`` (librdkafka's default), but it
  drops message headers on produce and on consume, and with them the request id, cost and
  deadline: ``fairstream.faust`` refuses it.

Either way the agent side is at-least-once (a crash repeats what was not committed), so
the handler sees a request id again now and then. The agent runs up to ``max_in_flight``
calls at once in one actor, paced by the records' stamps (``playout_delay``), and acks an
event only once its call ended and every earlier event of its partition was acked, so
Faust never commits past a call still running. Faust's own ``concurrency`` (actors) stays
1: several actors would ack one partition out of order.
"""

from __future__ import annotations

try:
    import faust  # noqa: F401
except ImportError as exc:
    raise ImportError(
        "fairstream.faust needs faust-streaming: pip install 'fairstream[faust]'"
    ) from exc

from fairstream.faust.agent import AgentStats, PaidApiAgent, request_from_event
from fairstream.faust.ingest import IngestWriter
from fairstream.faust.policies import PolicyTable

Ingest = IngestWriter  # the name in 0.1.0; kept for existing code

__all__ = [
    "AgentStats",
    "Ingest",
    "IngestWriter",
    "PaidApiAgent",
    "PolicyTable",
    "request_from_event",
]
