"""The harness shared by the integration tests and the benchmarks.

``kafka``: unique names, topic set-up, bounded consumption, ``wait_until``.
``scheduler``: a ``fairstream scheduler`` process on fresh topics, and a topic reader.
``paid_api``: a simulated paid API behind real workers (the feedback loop).
"""
