"""How a replica's prepares are stored in its journal, one record per op, and its durable
state in the superblock.

Purpose: the one mapping from a consensus prepare to a journal record, and from a
``consensus.protocols.DurableState`` to a ``journal.SuperblockState``, shared by the
runtime's ``GroupStore`` and the simulator's ``Disk`` (both adapt ``journal.Journal`` to
``consensus.protocols.Log``).

Invariants:

1. A record's body is the packed prepare header followed by the prepare body, so a
   record read back is the prepare, checksums included.
2. The journal's offset space is the op space: a record holds one "message" at offset
   ``op - 1``, so every journal lookup by offset is a lookup by op.
3. Every field of a ``DurableState`` survives the superblock: ``log_damaged`` is the extra
   field ``SUPERBLOCK_EXTRA_LOG_DAMAGED`` (1 for true, 0 for false).
"""

from __future__ import annotations

from consensus.messages import (
    PREPARE_HEADER,
    MessageError,
    Prepare,
    PrepareHeader,
    unpack_prepare_header,
)
from consensus.protocols import SUPERBLOCK_EXTRA_LOG_DAMAGED, DurableState
from journal import Journal, Record, SuperblockState
from journal.superblock import SUPERBLOCK_EXTRA_COUNT


def _record_fields(header: PrepareHeader) -> dict[str, int]:
    """The journal record fields of a prepare (invariant 2: offset ``op - 1``)."""
    return {
        "op": header.op,
        "view": header.view,
        "client_id": header.client_id,
        "request": header.request,
        "offset": header.op - 1,
        "message_count": 1,
        "timestamp_us": header.timestamp_us,
    }


def append_prepare(journal: Journal, prepare: Prepare) -> int:
    """Append ``prepare`` at the head (page cache only); returns the record body's size.

    The packed header and the body go to the journal as two parts: it hashes and writes
    them without joining them first.
    """
    header = prepare.header
    packed = header.pack()
    journal.append(prepare.body, body_prefix=packed, **_record_fields(header))
    return len(packed) + len(prepare.body)


def restore_prepare(journal: Journal, prepare: Prepare) -> None:
    """Make committed ``prepare`` durable again (a ``RepairJournal`` action): rewrite its
    damaged record in place, or append it at the head of a journal that recovery cut
    below the checkpoint. Durable when it returns."""
    header = prepare.header
    if header.op in journal.faulty_ops():
        journal.repair_body(header.pack() + prepare.body, **_record_fields(header))
    else:
        append_prepare(journal, prepare)
        journal.sync()


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
