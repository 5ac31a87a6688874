"""Pure, deterministic state machines replicated by the consensus groups.

Modules:

- ``metadata``: the metadata group's domain model (streams, topics, partitions, users,
  sessions, consumer groups) with typed commands, results, read views and CBOR snapshots.
- ``partition``: one partition group's model (stamped batches, dense offsets, consumer
  offsets, committed-only polls).
- ``permissions`` and ``credentials``: Iggy's permission rules and scrypt password hashes.
- ``codec``: metadata prepare bodies (commands as canonical CBOR) and their operations.
- ``plane``: the glue to ``sdk.wire`` payloads and ``consensus`` (``StateMachine``
  implementations, admission, routing, reads).
- ``errors``: Iggy error codes and the typed rejection.

Nothing in this package reads a clock, draws randomness, touches IO or iterates a set:
time and every random choice arrive inside the commands and prepares, so every replica
(and the simulator) computes identical state and identical reply bytes.
"""
