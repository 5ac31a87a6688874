"""How a replica's prepares are stored in its journal, one record per op, and its durable
state in the superblock.

Purpose: the one mapping from a consensus prepare to a journal record, and from a
``consensus.protocols.DurableState`` to a ``journal.SuperblockState``, shared by the
runtime's ``GroupStore`` and the simulator's ``Disk`` (both adapt ``journal.Journal`` to
``consensus.protocols.Log``).

Invariants:

1. A record's body is the packed prepare header followed by the prepare body, so a
   record read back is the prepare, checksums included.
2. A partition group's records carry its messages' offsets: a record's offset, message
   count and timestamp are those of the stamped batch it holds, and a control op (a
   consumer offset store, a purge, a retention) holds no message at the offset of the next
   one (``broker.state.partition.record_fields``), so the journal's index is the
   partition's index. The metadata group's offset space is its op space: a record holds
   one "message" at offset ``op - 1``, so a lookup by offset is a lookup by op.
3. Every field of a ``DurableState`` survives the superblock: ``log_damaged`` is the extra
   field ``SUPERBLOCK_EXTRA_LOG_DAMAGED`` (1 for true, 0 for false).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from broker.state.partition import Buffer, record_fields
from consensus.messages import (
    PREPARE_HEADER,
    MessageError,
    Prepare,
    PrepareHeader,
    unpack_prepare_header,
)
from consensus.protocols import SUPERBLOCK_EXTRA_LOG_DAMAGED, DurableState
from journal import Journal, JournalError, Record, SuperblockState
from journal.journal import READ_SIZE_BYTES_MAX
from journal.superblock import SUPERBLOCK_EXTRA_COUNT

MessageFields = Callable[[PrepareHeader, Buffer], tuple[int, int, int]]
"""``(offset, message_count, timestamp_us)`` of the record storing a prepare (invariant 2)."""


def op_fields(header: PrepareHeader, body: Buffer) -> tuple[int, int, int]:
    """The metadata group's record fields: one "message" at offset ``op - 1``."""
    return header.op - 1, 1, header.timestamp_us


def partition_fields(header: PrepareHeader, body: Buffer) -> tuple[int, int, int]:
    """A partition group's record fields: its messages (``partition.record_fields``)."""
    return record_fields(header.operation, body)


def _record_fields(prepare: Prepare, fields: MessageFields) -> dict[str, int]:
    """The journal record fields of a prepare (invariant 2)."""
    header = prepare.header
    offset, message_count, timestamp_us = fields(header, prepare.body)
    return {
        "op": header.op,
        "view": header.view,
        "client_id": header.client_id,
        "request": header.request,
        "offset": offset,
        "message_count": message_count,
        "timestamp_us": timestamp_us,
    }


def append_prepare(journal: Journal, prepare: Prepare, fields: MessageFields = op_fields) -> int:
    """Append ``prepare`` at the head (page cache only); returns the record body's size.

    The packed header and the body go to the journal as two parts: it hashes and writes
    them without joining them first.
    """
    packed = prepare.header.pack()
    journal.append(prepare.body, body_prefix=packed, **_record_fields(prepare, fields))
    return len(packed) + len(prepare.body)


def restore_prepare(journal: Journal, prepare: Prepare, fields: MessageFields = op_fields) -> None:
    """Make committed ``prepare`` durable again (a ``RepairJournal`` action): rewrite its
    damaged record in place, or append it at the head of a journal that recovery cut
    below the checkpoint. Durable when it returns."""
    header = prepare.header
    if header.op in journal.faulty_ops():
        journal.repair_body(header.pack() + prepare.body, **_record_fields(prepare, fields))
    else:
        append_prepare(journal, prepare, fields)
        journal.sync()


class PartitionJournal:
    """A partition group's journal as its state machine reads it
    (``broker.state.partition.PartitionLog``): records hold prepares, and the journal's
    index holds the messages' offsets (invariant 2). ``journal`` is read anew on every
    call: a host may reopen or restart its journal (``GroupStore``, the simulator's disk).

    Every lookup stops at the journal's head, so an op the replica applied before its
    host appended it (both come out of one step) is never looked for. The replica asks
    the state for its ``log_op_min`` (which looks the first retained message up here) only
    when the log holds every op it applied: a checkpoint due in a step that appends the
    ops it applies waits for a later step.
    """

    def __init__(self, host: JournalHost) -> None:
        self._host = host

    def read(self, op: int) -> tuple[int, Buffer]:
        prepare = self._host.read(op)
        assert prepare is not None, f"op {op} is not in the log"
        return prepare.header.operation, prepare.body

    def offset_min(self) -> int | None:
        return self._host.journal.offset_min

    def op_for_offset(self, offset: int) -> int | None:
        journal = self._host.journal
        first = journal.offset_min
        if first is None or offset < first:
            return None
        return journal.op_for_offset(offset)

    def offset_for_timestamp(self, timestamp_us: int, op_max: int) -> int | None:
        journal = self._host.journal
        op = journal.op_for_timestamp(timestamp_us)
        if op is None or op > op_max:
            return None
        return journal.record_offset(op)

    def size_from(self, offset: int, op_max: int) -> int:
        journal = self._host.journal
        op = self.op_for_offset(offset)
        if op is None:
            return 0
        return journal.size_between(op, min(op_max, journal.op_head))

    def batches(self, offset: int, *, count_max: int, size_max: int, op_max: int) -> list[Buffer]:
        journal = self._host.journal
        first = journal.offset_min
        if first is None or offset < first:
            return []
        try:
            records = journal.read_messages(
                offset,
                count_max=count_max,
                size_max=min(size_max, READ_SIZE_BYTES_MAX),
                op_max=min(op_max, journal.op_head),
            )
        except JournalError:
            return []  # damaged: the replica repairs it from a peer
        prefix = PREPARE_HEADER.size
        return [record.body[prefix:] for record in records if record.header.message_count > 0]


class JournalHost(Protocol):
    """What holds a group's journal: its prepares by op, and the journal itself."""

    def read(self, op: int) -> Prepare | None: ...

    @property
    def journal(self) -> Journal: ...


def prepare_of(record: Record, op: int) -> Prepare | None:
    """The prepare a record of ``op`` holds; None if it is not one (a foreign record)."""
    try:
        header = unpack_prepare_header(record.body, 0)
    except MessageError:
        return None
    body = bytes(record.body[PREPARE_HEADER.size :])
    if header.op != op or len(body) != header.body_size:
        return None
    return Prepare(header, body)


def superblock_state(durable: DurableState) -> SuperblockState:
    """The superblock that holds ``durable`` (invariant 3)."""
    extra = [0] * SUPERBLOCK_EXTRA_COUNT
    extra[SUPERBLOCK_EXTRA_LOG_DAMAGED] = int(durable.log_damaged)
    return SuperblockState(
        view=durable.view,
        log_view=durable.log_view,
        commit=durable.commit,
        checkpoint=durable.checkpoint,
        extra=tuple(extra),
    )


def durable_state(state: SuperblockState) -> DurableState:
    """The replica's durable state a superblock holds (inverse of ``superblock_state``)."""
    return DurableState(
        view=state.view,
        log_view=state.log_view,
        commit=state.commit,
        checkpoint=state.checkpoint,
        log_damaged=state.extra[SUPERBLOCK_EXTRA_LOG_DAMAGED] != 0,
    )
