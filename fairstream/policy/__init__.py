"""Tenant policies on the wire: the Avro codec of the policy topic and its reader/writer.

``codec`` turns ``PolicyRecord`` values into Avro single-object encoded bytes and back;
``store`` reads the compacted policy topic and writes to it (confluent-kafka, imported only
when used, so the scheduler can import the codec alone).
"""

from fairstream.policy.codec import (
    DEFAULT_POLICY_KEY,
    PolicyRecord,
    SchemaError,
    decode_policy,
    encode_policy,
)

__all__ = [
    "DEFAULT_POLICY_KEY",
    "PolicyRecord",
    "SchemaError",
    "decode_policy",
    "encode_policy",
]
