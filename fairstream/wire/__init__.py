"""fairstream's contracts on the wire, sans-IO: every rule and constant of the ingest,
egress, dead-letter, feedback and policy records. No Kafka client, no I/O.

- ``records``: header names, dead-letter reasons, limits;
- ``verdicts``: each rule's verdict on an id, a header or a whole ingest record
  (``validate_ingest``), what is wrong said in a sentence (compiled);
- ``rules``: the producer's checks of the same rules, raising; deadlines, ``now_ms``;
- ``ingest``: building an ingest record's headers;
- ``dead_letter``: a dead letter's headers, cut to fit the topic, its sentences;
- ``partition``: which ingest partition a tenant lands on (Kafka's murmur2; by name);
- ``feedback``: the workers' feedback records and their Avro codec (import it by name);
- ``policy`` and ``canonical``: the policy topic's Avro codec and schema fingerprints
  (import them by name: they load the ``avro`` library).

The names of the first five are re-exported here: ``from fairstream import wire``,
``wire.REQUEST_ID``, ``wire.validate_ingest(...)``.
"""

from fairstream.wire.dead_letter import (
    RECORD_OVERHEAD,
    HeaderList,
    dead_letter_headers,
    expired_detail,
    fit,
    lost_detail,
    purge_detail,
)
from fairstream.wire.ingest import HeaderInput, default_request_id, ingest_headers
from fairstream.wire.records import (
    BACKLOG_FULL,
    BUDGET_EXHAUSTED,
    COST,
    DEADLINE_MS,
    DLQ_DETAIL,
    DLQ_HEADERS_DROPPED,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    DLQ_VALUE_BYTES,
    ENQUEUED_MS,
    EXPIRED,
    HANDLER_FAILED,
    INVALID_HEADER,
    INVALID_KEY,
    INVALID_VALUE,
    LOST,
    MAX_COST,
    MAX_EPOCH_MS,
    MAX_REQUEST_ID_BYTES,
    MAX_TENANT_BYTES,
    PURGED,
    REQUEST_ID,
    RESERVED_PREFIX,
    SCHEDULED_MS,
    START_MS,
    TENANT,
    TOO_LARGE,
    Headers,
)
from fairstream.wire.rules import (
    check_cost,
    check_group,
    check_request_id,
    deadline_ms,
    now_ms,
    tenant_key,
    utf8_bytes,
)
from fairstream.wire.verdicts import (
    Invalid,
    Valid,
    group_problem,
    header_int,
    request_id_problem,
    tenant_of,
    tenant_problem,
    validate_ingest,
)

__all__ = [
    "BACKLOG_FULL",
    "BUDGET_EXHAUSTED",
    "COST",
    "DEADLINE_MS",
    "DLQ_DETAIL",
    "DLQ_HEADERS_DROPPED",
    "DLQ_OFFSET",
    "DLQ_PARTITION",
    "DLQ_REASON",
    "DLQ_TOPIC",
    "DLQ_VALUE_BYTES",
    "ENQUEUED_MS",
    "EXPIRED",
    "HANDLER_FAILED",
    "INVALID_HEADER",
    "INVALID_KEY",
    "INVALID_VALUE",
    "LOST",
    "MAX_COST",
    "MAX_EPOCH_MS",
    "MAX_REQUEST_ID_BYTES",
    "MAX_TENANT_BYTES",
    "PURGED",
    "RECORD_OVERHEAD",
    "REQUEST_ID",
    "RESERVED_PREFIX",
    "SCHEDULED_MS",
    "START_MS",
    "TENANT",
    "TOO_LARGE",
    "HeaderInput",
    "HeaderList",
    "Headers",
    "Invalid",
    "Valid",
    "check_cost",
    "check_group",
    "check_request_id",
    "dead_letter_headers",
    "deadline_ms",
    "default_request_id",
    "expired_detail",
    "fit",
    "group_problem",
    "header_int",
    "ingest_headers",
    "lost_detail",
    "now_ms",
    "purge_detail",
    "request_id_problem",
    "tenant_key",
    "tenant_of",
    "tenant_problem",
    "utf8_bytes",
    "validate_ingest",
]
