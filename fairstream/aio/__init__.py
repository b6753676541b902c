"""fairstream for asyncio: the same contracts as ``fairstream.Producer``, awaited.

``fairstream.aio.AsyncProducer`` writes ingest records from an event loop (a FastAPI or aiohttp
service, where most requests to a paid API start) without blocking it.
"""

from __future__ import annotations

from fairstream.aio.producer import AsyncProducer
from fairstream.sdk.producer import DeliveryError, KafkaAuthenticationError

Producer = AsyncProducer  # the name in 0.1.0; kept for existing code

__all__ = ["AsyncProducer", "DeliveryError", "KafkaAuthenticationError", "Producer"]
