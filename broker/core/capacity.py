"""Partition capacity: a topic is created only if the node can host its partitions.

Purpose: every node hosts a replica of every partition, and each open partition holds
descriptors out of the node's reserve (``limits.partition_descriptors_reserved``). A
partition beyond that reserve cannot open on the node and answers 58 for as long as it
exists, so a creation that would go beyond it is refused before it is proposed, with
Iggy's ``PartitionsLimitReached`` (2022), rather than accepted and left unusable.

Invariants:

1. Only creations are judged (CREATE_TOPIC, CREATE_PARTITIONS): deleting partitions or
   topics, and every other command, always passes.
2. A creation passes when the committed partitions plus the ones it adds fit in the
   capacity; an unbounded node (capacity None) passes everything.
3. Pure: the counts are arguments.

Theory of operation: the check is made by the node a client sent the creation to, against
its own capacity and the metadata it has applied, before the command enters the log; the
replicated state machine cannot make it, since capacities are node settings and every
replica must apply an op alike. Two creations admitted at once on different nodes can
together go beyond the capacity by what the second adds: those partitions answer 58 until
room is freed, as before this check (``docs/security.md``, File descriptors).
"""

from __future__ import annotations

from broker.state.metadata import CreatePartitions, CreateTopic, MetadataCommand


def partitions_added(command: MetadataCommand) -> int:
    """How many partitions ``command`` creates (0 for anything but a creation)."""
    if isinstance(command, CreateTopic):
        return command.partitions_count
    if isinstance(command, CreatePartitions):
        return command.count
    return 0


def beyond_capacity(command: MetadataCommand, partitions_total: int, capacity: int | None) -> str:
    """Why ``command`` cannot be hosted (invariant 2), or "" when it can."""
    added = partitions_added(command)
    if capacity is None or added <= 0 or partitions_total + added <= capacity:
        return ""
    return (
        f"{added} more partitions do not fit: {partitions_total} exist and this node "
        f"hosts at most {capacity} (limits.partition_descriptors_reserved)"
    )
