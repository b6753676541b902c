"""The emitter thread's room: the fair core, each partition's progress, and exactly-once
egress. Everything here is owned by the emitter thread; other threads reach it through the
mailbox (``scheduler.handoff``, ``scheduler.messages``) or the snapshots it publishes.

- ``loop``: the thread (``Emitter``): applies what the mailbox brings, runs the emission rule,
  commits;
- ``backlog``: what joins the backlog (indexing, dead letters) and leaves it otherwise;
- ``send``: the per-record path of a picked record into the open transaction;
- ``egress``: headers stamped, sizes checked;
- ``checkpoint``, ``transaction``: the open transaction and what it commits;
- ``fetch``: payloads read back from the ingest log; ``holding``: parked tenants;
- ``pacing``: what the emission rule is told from outside (rate shares, credit, holds);
- ``demotions``: automatic demotion of noisy tenants.
"""
