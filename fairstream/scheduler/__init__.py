"""The scheduler service, split by job.

- ``ingest``: group membership, recovery on assignment, reading and parsing the ingest log;
- ``emit``: the fair core, progress, and exactly-once egress in Kafka transactions;
- ``progress`` / ``recovery``: what is persisted (low-water marks, settled ranges) and how a
  partition resumes from it;
- ``fetch``: payloads read back from the ingest log; ``trim``: the log kept to the backlog;
  ``held``: partitions held by a transaction left open, reported;
- ``policies``: tenant policies from the policy topic; ``observe``: per-tenant numbers;
- ``service``, ``web``, ``run``: the process, its endpoints, and running it until stopped
  (its command is ``fairstream.cli.scheduler``).

The path of one record, ingest to committed egress:

1. ``recovery``: when its partition is assigned, where it resumes: the group's committed
   offset (the low-water mark) and the settled ranges above it, from the progress topic.
2. ``readers``: a consumer of that partition's own reads it from the mark.
3. ``ingest``: the ingest thread parses it against the contract.
4. ``handoff``: the one queue to the emitter thread, in the order things happened.
5. ``backlog``: the emitter skips it if settled, else indexes it in its tenant's queue, or
   makes it a dead letter (invalid, expired, over its tenant's backlog cap).
6. ``emit``: the emitter's loop runs the core's emission rule: pace, pick the tenant by
   weighted deficit round robin, take the record.
7. ``send``: produces it, headers stamped, into the open transaction and settles its offset.
8. ``transaction``: commits egress, dead letters, progress and the marks (as the group's
   offsets) in one Kafka transaction.
"""
