"""The scheduler service, split by job.

- ``ingest``: group membership, recovery on assignment, reading and parsing the ingest log;
- ``emit``: the fair core, progress, and exactly-once egress in Kafka transactions;
- ``progress`` / ``recovery``: what is persisted (low-water marks, settled ranges) and how a
  partition resumes from it;
- ``fetch``: payloads read back from the ingest log; ``trim``: the log kept to the backlog;
- ``policies``: tenant policies from the policy topic; ``observe``: per-tenant numbers;
- ``service``, ``web``, ``run``: the process, its endpoints, and running it until stopped
  (its command is ``fairstream.cli.scheduler``).
"""
