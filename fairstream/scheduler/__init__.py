"""The scheduler service: one room (sub-package) per thread, over a floor of shared parts.

Rooms, each owned by its thread; a room imports only the floor (and the emitter imports
``policies``, whose rules it applies). What crosses between threads is a message
(``messages``) through the emitter's mailbox (``handoff``), or a snapshot a thread
publishes whole. The thread map is ``service``'s docstring.

- ``ingest/``: the group member, a reader per owned partition, parsing;
- ``emitter/``: the fair core, progress, pacing, and exactly-once egress;
- ``coordination/``: the instances' demand exchanged, this instance's share of the rate;
- ``feedback/``: the workers' reports (adaptive rate, pauses, cost, credit), the egress lag;
- ``policies/``: tenant policies and tenant groups from the policy topic;
- ``retention/``: the ingest log trimmed to the backlog, transactions left open watched;
- ``audit/``: the fairness audit and the console's history;
- ``web/``: the endpoints and the console (above ``service``, which it serves).

The floor: ``service`` (the threads, their map, how they stop), ``run`` (the process),
``supervise`` (the one failure policy), ``messages`` and ``handoff`` (the mailbox),
``records`` (what the stages pass on), ``progress`` and ``recovery`` (what is persisted and
how a partition resumes from it), ``recent``, ``observe``, ``tenant_tree`` and ``metrics``
(what an instance tells people), ``consumers``, ``datadir``, ``faults``.

The path of one record, ingest to committed egress:

1. ``recovery``: when its partition is assigned, where it resumes: the group's committed
   offset (the low-water mark) and the settled ranges above it, from the progress topic.
2. ``ingest/readers``: a consumer of that partition's own reads it from the mark.
3. ``ingest/member``: the ingest thread parses it against the contract.
4. ``handoff``: the one queue to the emitter thread, in the order things happened.
5. ``emitter/backlog``: the emitter skips it if settled, else indexes it in its tenant's
   queue, or makes it a dead letter (invalid, expired, over its tenant's backlog cap).
6. ``emitter/loop``: the emitter's loop runs the core's emission rule: pace, pick the
   tenant by weighted deficit round robin, take the record.
7. ``emitter/send``: produces it, headers stamped, into the open transaction and settles
   its offset.
8. ``emitter/transaction``: commits egress, dead letters, progress and the marks (as the
   group's offsets) in one Kafka transaction.
"""
