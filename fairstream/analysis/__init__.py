"""What fairstream's measurements are judged against, shared by ``fairstream audit``, the demo,
``fairstream simulate`` and the benchmarks.

- ``reference``: the reference schedules of the same arrivals, plain FIFO and the ideal
  fluid one (GPS), and ``Arrival``, the record they schedule;
- ``verdict``: whether the quiet tenants waited as in the ideal schedule or as in FIFO;
- ``dwell``: dwell per tenant, its p99s and the table the demo and the audit print;
- ``plot``: the demo's plot of dwell per tenant over time (``audit --png`` draws it too);
- ``stats``: percentiles, Jain's index, the weighted fair-share tracker and the per-window
  fairness (which the scheduler's audit thread also computes live).
- ``contention``: fairness while tenants contend, as trigger.dev's fairness study measures
  it (the benchmarks' "Fairness scenarios").

Pure, like ``fairstream.core``: no Kafka client, no network, no threads, no clock; the
commands read the records and pass them in. The one side effect is ``plot``'s: it writes
the PNG its caller names (with matplotlib, the demo extra, imported only then).
"""
