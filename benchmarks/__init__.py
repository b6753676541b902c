"""fairstream's benchmarks: scripts that print numbers (``make bench``), run from the
repository's root as modules (``.venv/bin/python -m benchmarks.run_all``).

- ``run_all``: the command line of the comparison suite; writes docs/benchmarks.md.
- phases: ``throughput`` (ceiling, max_throughput, absorption, scale), ``noisy``, ``rate``,
  ``burst``, ``restart``, ``group``, ``feedback``; each returns its result as a dict.
- ``sampling`` (/proc: CPU, memory, the machine), ``profiling`` (cProfile), ``targets``
  (the target checks), ``tables`` and ``report`` (the document), ``common`` (helpers).
- on their own: ``core_decisions``, ``service_throughput``, ``compare`` (two commits'
  end-to-end throughput, alternating), ``profile_threads`` (a module with every thread
  under cProfile), ``soak`` (``make soak``, with
  ``soak_load``, ``soak_processes``, ``soak_report`` and the simulated API ``soak_api``),
  and ``quix_peer`` (run by ``absorption`` in the Quix Streams virtualenv).

The scheduler processes, topics and readers come from the harness the integration tests use
(``fairstream_dev.harness``).
"""
