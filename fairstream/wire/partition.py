"""Which ingest partition a tenant's records land on: Kafka's murmur2 partitioner.

The ingest contract keys records by tenant id and partitions them with murmur2 (what the
Java client's default partitioner, librdkafka's ``murmur2_random`` and fairstream's
``Producer`` do), so a tenant lives on exactly one partition. Pure.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash of ``data``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(tenant: str, partitions: int) -> int:
    """The partition of ``partitions`` a record keyed ``tenant`` lands on."""
    return partition_of_key(tenant.encode(), partitions)


def partition_of_key(key: bytes, partitions: int) -> int:
    """The partition of ``partitions`` a record with the key bytes ``key`` lands on."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions!r}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
