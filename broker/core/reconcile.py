"""Reconciling: which partition groups a node hosts, from the metadata it has committed.

Purpose: a topic or partition created or deleted in the metadata group makes partition
groups appear or go on every node. The node applies metadata ops in order and, after each,
compares the partitions the committed metadata names with the groups it hosts; this module
is that comparison, so what the runtime does (open a group's files, close and remove them)
follows from a pure decision a test can replay.

Invariants:

1. A partition's group id is a function of its stream, topic and partition ids and of the
   op that created it (:func:`partition_group_id`), the same on every node: a partition
   deleted and created again (a new op) gets a new group, never its predecessor's data.
2. After a :class:`Reconciliation` is carried out, the hosted groups are exactly the
   committed ones: every group to ``remove`` is hosted and not committed, every group to
   ``add`` is committed and not hosted; both in a fixed order (removals in hosted order,
   additions in committed order), never a set's.
3. A group is ``purge_due`` when its committed purge generation is ahead of the one the
   node knew for it before (a new group counts from 0): the node then looks at that group,
   and only at those, to truncate it as primary.
4. A group the node removed is never hosted there again. The node records the removal
   durably (a tombstone) before the group's data goes, and reconciling skips tombstoned
   groups: a node may restart with its metadata below the op that removed a partition
   (its durable commit lags what it applied), and would otherwise reopen the group
   empty, a replica that forgot what it acknowledged.
5. Pure: no clock, file or task; the refs are the metadata's own values.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from broker.state.metadata import PartitionRef

METADATA_GROUP: Final = 0
"""The consensus group id of the metadata group, on every node."""
PARTITION_GROUP_BIT: Final = 1 << 61
"""Set in every partition group id, so none is ever the metadata group's."""


def partition_group_id(stream_id: int, topic_id: int, partition_id: int, created_op: int) -> int:
    """The consensus group id of a partition, the same on every node (invariant 1).

    Partitions of one topic created by one op get consecutive ids, so their primaries
    (``(view + group) % n``) are dealt round-robin over the nodes; the hash keeps a
    recreated partition (a new ``created_op``) apart from its predecessor.
    """
    digest = hashlib.blake2b(
        struct.pack("<QQQ", stream_id, topic_id, created_op), digest_size=5
    ).digest()
    return PARTITION_GROUP_BIT | (int.from_bytes(digest, "little") << 20) | partition_id


def group_of(ref: PartitionRef) -> int:
    return partition_group_id(ref.stream_id, ref.topic_id, ref.partition_id, ref.created_op)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What to change so the hosted groups match the committed metadata (invariant 2)."""

    remove: tuple[int, ...]
    add: tuple[tuple[int, PartitionRef], ...]
    refs: dict[int, PartitionRef] = field(default_factory=dict)
    """Every committed group's ref, in committed order: what the node knows from now on."""
    purge_due: tuple[int, ...] = ()


def reconcile(
    hosted: Mapping[int, PartitionRef],
    committed: Iterable[PartitionRef],
    removed: Container[int] = (),
) -> Reconciliation:
    """Compare the groups a node hosts (with the refs it knew for them) with the
    partitions its committed metadata names, leaving out the groups it ``removed`` before
    (its tombstones, invariant 4)."""
    wanted: dict[int, PartitionRef] = {}
    for ref in committed:
        group = group_of(ref)
        if group not in removed:
            wanted[group] = ref
    remove = tuple(group for group in hosted if group not in wanted)
    add = tuple((group, ref) for group, ref in wanted.items() if group not in hosted)
    purge_due = tuple(
        group
        for group, ref in wanted.items()
        if ref.purge_generation > (hosted[group].purge_generation if group in hosted else 0)
    )
    return Reconciliation(remove, add, wanted, purge_due)
