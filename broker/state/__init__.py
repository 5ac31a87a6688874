"""Pure, deterministic state machines replicated by the consensus groups.

Modules:

- ``metadata``: the metadata group's domain model (streams, topics, partitions, users,
  sessions, consumer groups) with typed commands, results and read views.
- ``snapshot``: the metadata state's snapshot, canonical CBOR bytes and back.
- ``partition``: one partition group's model (stamped batches, dense offsets, consumer
  offsets, committed-only polls).
- ``permissions`` and ``credentials``: Iggy's permission rules and scrypt password hashes.
- ``codec``: metadata prepare bodies (commands as canonical CBOR) and their operations.
- ``metadata_machine`` and ``partition_machine``: the groups' ``consensus`` state machines
  over those models (``apply`` to Iggy reply bytes, ``snapshot``, ``restore``), their
  reads from committed state, and the bodies and replies they take and give.
- ``admission``: ``sdk.wire`` metadata requests and logins into domain commands, and
  permissions between the wire's types and the state's.
- ``options`` and ``option_values``: topic options as the wire carries them (read,
  reported, described) and the text values Iggy accepts in them.
- ``routing``: the partition (and offset owner) a send, poll or offset request goes to.
- ``errors``: Iggy error codes, the typed rejection and the not-found reply.

Nothing in this package reads a clock, draws randomness, touches IO or iterates a set:
time and every random choice arrive inside the commands and prepares, so every replica
(and the simulator) computes identical state and identical reply bytes.
"""
