"""fairstream: tenant-fair, rate-limited scheduling of Kafka records in front of a paid API.

Producers write one ingest topic keyed by tenant; fairstream buffers each tenant's records
durably and releases them onto one egress topic in weighted deficit-round-robin order, no
faster than the downstream API allows.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fairstream import native as _native

_native.choose()  # compiled modules, or their source (``fairstream.native``): before any loads

from fairstream.errors import Error  # noqa: E402 (after the switch above)

__version__ = "0.1.0"

__all__ = [
    "DeliveryError",
    "Error",
    "KafkaAuthenticationError",
    "Producer",
    "RateLimited",
    "Request",
    "ShareWorker",
    "Usage",
    "Worker",
    "__version__",
]

# Client helpers, imported on first use so that `import fairstream` (and the CLI's start)
# does not load confluent-kafka.
_LAZY = {
    "Producer": "fairstream.sdk.producer",
    "DeliveryError": "fairstream.sdk.producer",
    "KafkaAuthenticationError": "fairstream.sdk.producer",
    "Worker": "fairstream.sdk.worker.consumer",
    "ShareWorker": "fairstream.sdk.worker.share",
    # What handlers see, raise and return: importable without loading confluent-kafka.
    "Request": "fairstream.sdk.worker.handler",
    "RateLimited": "fairstream.sdk.worker.handler",
    "Usage": "fairstream.sdk.worker.handler",
}

if TYPE_CHECKING:
    from fairstream.sdk.producer import DeliveryError, KafkaAuthenticationError, Producer
    from fairstream.sdk.worker.consumer import Worker
    from fairstream.sdk.worker.handler import RateLimited, Request, Usage
    from fairstream.sdk.worker.share import ShareWorker


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fairstream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
