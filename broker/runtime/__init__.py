"""The trio runtime: the consensus core on real sockets and real disks.

Purpose: run one viewstream node. Modules, from the outside in:

- ``serve``: ``viewstream serve`` in the foreground, SIGINT/SIGTERM to stop.
- ``node``: the node: every group's host, the ticker, the listener, request admission
  (sessions, routing, permissions), reads from committed state, the system client.
- ``connection``: one client connection: frames in, replies out, limits and timeouts.
- ``group``: one group's host: the task that owns its ``Replica`` and executes its
  actions; the fsync worker (group commit).
- ``store``: one group's journal, superblock and checkpoints on files (``consensus.Log``).
- ``bus``: the replica bus between nodes (authenticated, batched, reconnecting) and the
  forwarding of requests to a group's primary.
- ``stats``: counters with their exact meanings.
- ``config``: settings (defaults < TOML < environment < flags).

The client-side tools (the local-cluster launcher and the admin commands) live with the
command line in ``broker.cli``; the runtime imports neither it nor the SDK's clients.

Invariants:

1. One trio event loop per node. Each ``Replica`` is stepped by exactly one task (its
   group host); no other task mutates a group's state or journal.
2. Blocking disk work (fsync, superblock and checkpoint writes, truncation, opening and
   recovering a journal, removing a group) runs in worker threads; appends and reads go
   to the page cache from the loop.
3. Every queue, buffer, frame and wait has a named bound; every remote party's bad input
   becomes an Iggy error code, an eviction or a closed connection, never a crash.
4. Time comes from trio's clock (ticks on a fixed schedule) and, as data, from the wall
   clock for prepare timestamps; randomness from the OS (client ids, nonces, salts).

Theory of operation: see ``docs/operations.md`` (running it) and ``docs/durability.md``
(what an acknowledgement means). A client request is decoded by its connection, admitted
by the node against committed metadata, handed to its group as ``ClientRequested`` (or
forwarded to the node of the group's primary), and answered when the group's replica
emits ``ReplyToClient`` after commit.
"""
