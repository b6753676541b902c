"""The ingest thread's room: the group member, each owned partition's reader, and
recovery on assignment. It parses records and hands them, with the assignments and
revocations, to the emitter through the mailbox (``scheduler.handoff``).

- ``member``: the ingest thread (group membership, rebalance callbacks, parsing);
- ``readers``: one consumer per owned ingest partition;
- ``recovery`` lives one level up (``scheduler.recovery``): the emitter reads it too.
"""
