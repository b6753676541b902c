"""fairstream's developer tools, outside the runtime wheel.

``fairstream_dev.kafka``: the development broker (``fairstream-dev kafka up | down | status``).
``fairstream_dev.harness``: what the integration tests and the benchmarks share (topics, a
scheduler process, bounded waits, the simulated paid API).
"""
