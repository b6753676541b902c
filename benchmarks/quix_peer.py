"""The peer for the absorption benchmark: per-tenant buffering written with Quix Streams.

Consumes the ingest topic from the beginning and appends every record to its tenant's
durable state: one State key per record (``<offset>`` under the record's key, the tenant,
with the value and timestamp), so each record costs one RocksDB write and one changelog
record, as a record buffered by fairstream does. Stops after ``--records`` records and
prints one JSON object: the time from the first record processed to the N-th, and to the
end of ``Application.run`` (the last checkpoint: RocksDB flush, changelog acknowledged,
offsets committed).

Runs in its own virtualenv (``make bench`` creates ``.venv/peer-quix``): quixstreams pins
confluent-kafka below 2.13, fairstream needs 2.16 or later, so they cannot share one.
It imports nothing from fairstream.

    .venv/peer-quix/bin/python benchmarks/quix_peer.py --bootstrap HOST:PORT \
        --topic TOPIC --records N --group GROUP --state-dir DIR
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from quixstreams import Application, State, message_context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--commit-interval", type=float, default=5.0)  # Quix's default
    args = parser.parse_args()

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        commit_interval=args.commit_interval,
        use_changelog_topics=True,
        loglevel="WARNING",
    )
    topic = app.topic(args.topic, key_deserializer="bytes", value_deserializer="bytes")
    sdf = app.dataframe(topic)
    seen = {"count": 0, "first": 0.0, "last": 0.0}

    def buffer(value: bytes, key: Any, timestamp: int, _headers: Any, state: State) -> None:
        # The state is already scoped to the message key (the tenant): one entry per record.
        if seen["count"] == 0:
            seen["first"] = time.monotonic()
        offset = message_context().offset
        state.set(str(offset), [timestamp, value.decode("latin-1")])
        seen["count"] += 1
        if seen["count"] >= args.records:
            seen["last"] = time.monotonic()
            app.stop()

    sdf.update(buffer, stateful=True, metadata=True)
    started = time.monotonic()
    app.run()
    ended = time.monotonic()
    first, last, count = seen["first"], seen["last"], int(seen["count"])
    print(
        json.dumps(
            {
                "records": count,
                "startup_seconds": round(first - started, 3) if count else None,
                "processed_seconds": round(last - first, 3) if last else None,
                "committed_seconds": round(ended - first, 3) if count else None,
            }
        )
    )


if __name__ == "__main__":
    main()
