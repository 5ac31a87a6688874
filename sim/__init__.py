"""Deterministic simulator: the real consensus and state machines, driven from a seed.

Modules, from the bottom up:

- ``rng``: named PRNG streams derived from one u64 seed (one per fault class, workload,
  replica incarnation and disk).
- ``options``: the swarm options a seed draws (cluster size, partitions, durability,
  fault rates, workload, replica bounds).
- ``disk``: one replica's durable state: the real ``journal.Journal`` and
  ``journal.Superblock`` over a ``journal.MemoryStorage``, adapted to ``consensus.Log``.
- ``network``: packets with delay, loss, duplication, reordering and partitions.
- ``node``: a node hosting a ``consensus.Replica`` of every group with the real
  ``MetadataMachine`` / ``PartitionMachine``, the host contract, and admission.
- ``client``: the operator, producers and consumers, speaking ``sdk.wire`` payloads.
- ``faults``: the fault injector and its failure budget.
- ``model`` and ``checkers``: read-only safety checkers against reference models.
- ``world``: the discrete-event loop over ticks, the phases and the verdict.
- ``planted``: four deliberately broken replicas that the checkers must catch.
- ``cli``: ``viewstream-sim``.

Invariants: nothing here reads a clock, touches the OS, uses threads or iterates a set;
every random draw comes from a stream of ``rng``. ``docs/simulator.md`` has the whole
story: fault model, checkers, replay, swarms and their runtimes.
"""
