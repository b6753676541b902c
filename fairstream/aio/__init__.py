"""fairstream for asyncio: the same contracts as ``fairstream.Producer``, awaited.

``fairstream.aio.Producer`` writes ingest records from an event loop (a FastAPI or aiohttp
service, where most requests to a paid API start) without blocking it.
"""

from __future__ import annotations

from fairstream.aio.producer import Producer
from fairstream.sdk.producer import DeliveryError, KafkaAuthenticationError

__all__ = ["DeliveryError", "KafkaAuthenticationError", "Producer"]
