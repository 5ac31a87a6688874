"""Faults with real processes: the ``viewstream-chaos`` harness and its checker.

Modules: ``nodes`` (node processes and the fault proxy process), ``proxy`` (the proxy
itself), ``workload`` (SDK producers and consumers that record what they saw), ``faults``
(the schedule a seed draws), ``segments`` (segment files read and damaged from outside),
``history`` (the checker, pure), ``run`` (one run, its phases and its report) and ``cli``.
``docs/reliability.md`` tells the whole story.
"""
