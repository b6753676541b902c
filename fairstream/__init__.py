"""fairstream: tenant-fair, rate-limited scheduling of Kafka records in front of a paid API.

Producers write one ingest topic keyed by tenant; fairstream buffers each tenant's records
durably and releases them onto one egress topic in weighted deficit-round-robin order, no
faster than the downstream API allows.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
