"""``viewstream-bench``: iggy-style load benchmarks of a viewstream (or any Iggy 0.9) cluster.

Purpose: drive producers, consumers and producing consumers against a server with our SDK
or the official one, time every batch, and turn the records into iggy-bench's metrics,
a report folder and charts. ``docs/performance.md`` describes the metrics and holds the
figures; ``python -m bench.load.perfpage`` regenerates that page.

Modules:

* :mod:`bench.load.params`: the benchmark kinds, their aliases and every option's value.
* :mod:`bench.load.metrics`: pure metric math (percentiles, time series, summaries).
* :mod:`bench.load.plan`: which actors a kind runs and what each one reads or writes.
* :mod:`bench.load.drivers`: the SDK adapters (ours on trio, the official one on asyncio).
* :mod:`bench.load.actors`: the producer, consumer and producing-consumer loops.
* :mod:`bench.load.servers`: embedded nodes and clusters, and server-side counters.
* :mod:`bench.load.runner`: one benchmark run from parameters to a report.
* :mod:`bench.load.workers`: the load dealt to worker processes (``--processes``) and
  their reports merged.
* :mod:`bench.load.report`: the report schema, machine facts, JSON, ``compare``.
* :mod:`bench.load.charts`: throughput, latency and distribution charts (HTML and PNG).
* :mod:`bench.load.display`: the progress display and the results tables.
* :mod:`bench.load.ceiling`: the raw ceiling of the machine (loopback to file, fsync).
* :mod:`bench.load.perfpage`: the performance page generator (it also runs
  ``bench.cpu_budget``, the CPU per batch of the raw path against viewstream).
"""
