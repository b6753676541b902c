"""``fairstream.Worker``: consume the egress topic and call a handler for every request.

Modules, by job: ``consumer`` (``Worker``: the consumer thread, commits, rebalances),
``handling`` (the event loop: handler calls, retries, rate limits, dead letters),
``calling`` (one call of the handler and the retry rule around it, which the Faust agent
shares), ``handler`` (``Request``, ``RateLimited``, ``Usage``: what a handler sees, raises,
returns), ``jobs``, ``tracking`` and ``retry`` (pure bookkeeping), ``outputs`` (the
dead-letter producer and the feedback writer), ``feedback`` (the worker's end of the
feedback topic), ``metrics`` (Prometheus). Users import ``Worker``,
``Request``, ``RateLimited`` and ``Usage`` from ``fairstream``.

Threads: the thread that calls ``run`` owns the confluent-kafka consumer (poll, commit,
pause, rebalance callbacks) and the dead-letter producer; an event loop in a second thread
runs the handlers (coroutine functions on the loop, plain functions on a thread pool of
``concurrency`` threads). Records cross over through ``call_soon_threadsafe``; outcomes come
back through a queue the consumer thread drains.

Guarantees:

- at-least-once: an offset is committed only once every record before it succeeded, was
  dead-lettered (after the broker acknowledged the dead letter) or was skipped as a
  duplicate. A crash re-delivers at most the uncommitted records.
- order (``ordering``, ``TenantQueues``): up to ``concurrency`` records are in progress
  at once (a handler call running, or waiting to be retried).
  - ``"start"`` (the default): records start in the egress order the scheduler chose,
    whatever their tenant, so a tenant's first calls start in offset order; many of one
    tenant may be in flight at once and they finish in any order. A backlogged tenant gets
    up to ``concurrency / latency`` calls/s, what an API with latency needs.
  - ``"completion"``: records of one tenant run one at a time, in offset order, each
    started after the previous one finished; up to ``concurrency`` tenants run side by
    side; otherwise records start in egress order (with ``concurrency=1``, exactly that
    order per partition). A tenant gets at most ``1 / latency`` calls/s.
  Either way, one record never runs twice at once in one worker, and the commit position
  is the contiguous done prefix of each partition (``CommitPosition``).
- retries: a failing handler is called again after ``backoff_initial``, ``2 x``... up to
  ``backoff_max`` seconds, ``max_attempts`` times in all; then the record goes to the
  dead-letter topic with reason ``handler-failed`` and the last error in
  ``fairstream-dlq-detail``. A record waiting for its retry keeps its ``concurrency``
  slot. With ``"completion"`` the tenant's later records wait for it; with ``"start"``
  they go on meanwhile (its retry starts after them), and the commit waits for it.
- rate limits: a handler that raises ``RateLimited`` is called again after its
  ``retry_after`` (or the backoff) without using up an attempt, for as long as the record's
  deadline (``fairstream-deadline-ms``) allows; a retry that would come after the deadline
  dead-letters the record as ``expired`` instead. As for failures, with ``"start"`` only
  the refused record waits (in its slot); the tenant's other records are called meanwhile
  and are told to wait by the API, each on its own, if the limit still holds.
- feedback (``feedback_topic``, default ``fairstream.feedback``; None turns it off): one
  record per settled request (ok, dead-lettered) and one per rate-limited or failed call,
  with the cost the handler reported (``Usage``), written without waiting (best effort: a
  full queue or a missing topic loses records, counted in ``feedback_errors``). The
  contract is ``fairstream.wire.feedback``.
- de-duplication (``dedup_window``): a record whose request id is among the last N ids
  handled (or is being handled) is skipped and committed, and counted.
- shutdown (``stop``): no new records start; queued ones are left for the next owner;
  handlers running finish (up to ``drain_timeout``); the done prefix is committed; the
  consumer leaves the group.
- revocation (a rebalance takes partitions away): the rebalance callback returns at once,
  so a slow handler never holds the group past ``max.poll.interval.ms``: queued records of
  those partitions are dropped, the done prefix is committed, and handlers still running
  finish on their own path (or stop retrying) without committing anything. The next owner
  handles them again, so they may run twice; if the partition comes back to this worker,
  a record still running from before runs no second time.
- refused credentials: ``run`` raises ``KafkaAuthenticationError`` with the broker's
  reason as soon as librdkafka reports it, instead of retrying forever.
- metrics: ``metrics`` (a ``WorkerMetrics``) counts handled, retried, rate-limited,
  dead-lettered and in-flight requests, handler latency, and bounded per-tenant series;
  ``metrics_port`` serves them as ``/metrics`` over HTTP while ``run`` runs.
"""
