"""A minimal Faust app with a RocksDB-backed table, run as a subprocess by the smoke test.

It counts records per key in a table (changelog-backed) and, after each update, writes
``key -> count`` to an output topic so the test can watch the table's state from outside.
Configuration comes from the environment so the test controls broker, names and data dir.
"""

from __future__ import annotations

import os
from typing import Any

import faust

app = faust.App(
    os.environ["COUNTER_APP_ID"],
    broker=f"kafka://{os.environ['KAFKA_BOOTSTRAP_SERVERS']}",
    # faust-streaming serves rocksdb:// with rocksdict when python-rocksdb is absent.
    store="rocksdb://",
    datadir=os.environ["COUNTER_DATA_DIR"],
    topic_partitions=1,
    topic_replication_factor=1,
    web_enabled=False,
    table_standby_replicas=0,
)
raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
source = app.topic(os.environ["COUNTER_SOURCE"], **raw)
output = app.topic(os.environ["COUNTER_OUTPUT"], **raw)
counts = app.Table("counts", default=int, partitions=1, key_type=bytes, value_type=int)


@app.agent(source)
async def count(stream: Any) -> None:
    async for key, _value in stream.items():
        counts[key] += 1
        await output.send(key=key, value=str(counts[key]).encode())


if __name__ == "__main__":
    app.main()
