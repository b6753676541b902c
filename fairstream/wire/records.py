"""The names and limits of fairstream's records: headers, dead-letter reasons, sizes.

Ingest headers are optional and ASCII; egress records carry the original headers plus the
``fairstream-*`` ones below; dead letters carry the original headers plus a reason (a short
machine word) and a sentence. The limits are the contract's: a tenant id is 1 to 255 bytes
of UTF-8, a request id 1 to 1,024 ASCII bytes, a cost a positive 32-bit integer, a time
epoch milliseconds in a signed 64-bit integer.
"""

from __future__ import annotations

from collections.abc import Sequence

# Ingest headers (all optional).
REQUEST_ID = "fairstream-request-id"
COST = "fairstream-cost"
DEADLINE_MS = "fairstream-deadline-ms"
# Added on egress.
TENANT = "fairstream-tenant"
ENQUEUED_MS = "fairstream-enqueued-ms"
SCHEDULED_MS = "fairstream-scheduled-ms"
# Under a rate or cost limit only: the moment the record's call may start (its slot on the
# rate's schedule, epoch ms). Workers start the call at it plus their playout delay.
START_MS = "fairstream-start-ms"
# Added on dead letters.
DLQ_REASON = "fairstream-dlq-reason"
DLQ_DETAIL = "fairstream-dlq-detail"
# Where a dead letter's record was read (the ingest log keeps it until it is trimmed).
DLQ_TOPIC = "fairstream-dlq-topic"
DLQ_PARTITION = "fairstream-dlq-partition"
DLQ_OFFSET = "fairstream-dlq-offset"
# On a dead letter cut to fit the dead-letter topic: the original value's size, and how many
# original headers were left out.
DLQ_VALUE_BYTES = "fairstream-dlq-value-bytes"
DLQ_HEADERS_DROPPED = "fairstream-dlq-headers-dropped"
# Every header fairstream reads or writes starts with this; producers may not use it.
RESERVED_PREFIX = "fairstream-"

# Dead-letter reasons: short machine words.
INVALID_KEY = "invalid-key"
INVALID_HEADER = "invalid-header"
INVALID_VALUE = "invalid-value"
# The core refuses admission with this word too: it keeps a copy (fairstream.core.admission),
# for it imports nothing outside core; tests/unit/wire/test_wire_purity.py pins the two.
BACKLOG_FULL = "backlog-full"
# A record that does not fit its budget, whose policy dead-letters it; the core's copy is
# fairstream.core.budget.BUDGET_EXHAUSTED, pinned the same way.
BUDGET_EXHAUSTED = "budget-exhausted"
EXPIRED = "expired"
PURGED = "purged"
HANDLER_FAILED = "handler-failed"
TOO_LARGE = "too-large"  # does not fit on the egress (or dead-letter) topic
LOST = "lost"  # deleted from the ingest log (retention) before it could be emitted

MAX_TENANT_BYTES = 255
MAX_REQUEST_ID_BYTES = 1024
# The core bounds measured costs with this too: its copy is fairstream.core.usage.MAX_COST,
# pinned to this one by tests/unit/wire/test_wire_purity.py.
MAX_COST = 2**31 - 1
MAX_EPOCH_MS = 2**63 - 1  # the largest deadline or timestamp, in epoch milliseconds

Headers = Sequence[tuple[str, bytes | None]]
