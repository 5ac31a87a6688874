"""One replica's durable state on a simulated disk: journal, superblock and checkpoint.

Purpose: adapt the real segment journal (``journal.Journal``) and the real superblock
(``journal.Superblock``), both over one ``journal.MemoryStorage``, to what a
``consensus.Replica`` needs from its host: the :class:`consensus.protocols.Log` it reads,
and the effects of ``AppendToJournal``, ``SyncJournal``, ``TruncateJournal``,
``WriteSuperblock`` and ``WriteCheckpoint``.

Invariants:

1. A journal record holds exactly one prepare: its packed 136-byte header followed by its
   body, so the journal stores each body once and ``read`` gives back the very prepare
   that was appended (or None when it is missing or damaged).
2. A partition's records carry its messages' offsets, message counts and timestamps (a
   control op holds no message), so the journal's index is the partition's index; the
   metadata group's count ops: op ``k`` is at offset ``k - 1`` with one "message"
   (``broker.state.records``, invariant 2).
3. Superblock and checkpoint writes are durable when the method returns (the host
   contract: a ``WriteSuperblock`` is durable before any later action runs).
4. Everything here is a pure function of the calls made and the storage's PRNG.

Theory of operation: a *process crash* keeps the storage as it is (the page cache of a
live kernel survives a process); a *power loss* calls ``MemoryStorage.crash()``, which
drops unsynced writes and tears the last one. Either way the replica restarts by opening
the journal (recovery cuts torn tails and reports damaged records), reading the
superblock and the checkpoint file, and building a new ``Replica`` from them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from typing import Final

from broker.state.records import (
    MessageFields,
    append_prepare,
    durable_state,
    op_fields,
    partition_fields,
    prepare_of,
    restore_prepare,
    superblock_state,
)
from consensus.messages import Prepare
from consensus.protocols import DurableState
from journal import (
    Journal,
    JournalConfig,
    MemoryStorage,
    OpBeyondHead,
    OpNotRetained,
    RecordFaulty,
    Superblock,
)
from journal.segment import INDEX_SUFFIX, LOG_SUFFIX

CHECKPOINT_NAME: Final = "checkpoint"
CHECKPOINT_TEMPORARY_NAME: Final = "checkpoint.tmp"
#: Small segments, so runs roll segments and recovery walks several of them: the node-wide
#: size, which a topic's own ``segment_size`` replaces for its partitions.
SEGMENT_SIZE_BYTES: Final = 16 * 1024


class Disk:
    """The durable state of one replica of one group, over one ``MemoryStorage``."""

    def __init__(
        self,
        prng: random.Random,
        *,
        log_is_data: bool,
        segment_size_bytes: int = SEGMENT_SIZE_BYTES,
    ) -> None:
        #: A partition's journal is its messages: it is never restarted empty (the replica
        #: backfills committed ops it lost instead); a metadata journal may be.
        self.log_is_data = log_is_data
        self._fields: MessageFields = partition_fields if log_is_data else op_fields
        self._config = JournalConfig(segment_size_bytes_max=segment_size_bytes)
        self.storage = MemoryStorage(prng)
        self.journal = Journal.open(self.storage, self._config)
        self.superblock = Superblock.open(self.storage)

    # Log protocol (what the replica reads) -----------------------------------------------

    def read(self, op: int) -> Prepare | None:
        try:
            record = self.journal.read_record(op)
        except (OpNotRetained, OpBeyondHead, RecordFaulty):
            return None
        return prepare_of(record, op)

    def op_max(self) -> int:
        return self.journal.op_head

    def faulty_ops(self) -> Sequence[int]:
        return self.journal.faulty_ops()

    def head_faulty(self) -> bool:
        return not self.journal.recovery.tail_debris

    # Host side (the replica's actions) ---------------------------------------------------

    def append(self, prepare: Prepare) -> None:
        append_prepare(self.journal, prepare, self._fields)

    def repair(self, prepare: Prepare) -> None:
        """A ``RepairJournal`` (``broker.state.records.restore_prepare``)."""
        restore_prepare(self.journal, prepare, self._fields)

    def sync(self) -> int:
        """One group commit; the highest op now durable."""
        return self.journal.sync()

    def truncate(self, after_op: int) -> None:
        head = self.journal.truncate(max(after_op, self.journal.op_min - 1, 0))
        if 0 < head < after_op and not self.log_is_data:
            # The cut fell inside a damaged region whose record boundaries are unknown, so
            # the journal cut at the region's start. The replica will append after_op + 1
            # next, which cannot follow the shorter journal: start it afresh (the replica
            # re-fetches what it still needs; older committed ops are gone from this
            # replica, the same as after a state transfer). A partition replica instead
            # appends the committed ops it lost from a peer (RepairJournal) first.
            self.journal.truncate(self.journal.op_min - 1)

    def seal_if_retired(self, op: int) -> None:
        """Seal the open segment when every record it holds is below ``op`` (a purge
        retired them all), so that ``retain`` may delete it later, as the runtime's store."""
        if op > self.journal.op_head > 0:
            self.journal.roll()

    def retain(self, op: int) -> int:
        """Delete the whole sealed segments below ``op`` (``Journal.retain``: the new start
        recorded first, the directory synced once); how many went."""
        return len(self.journal.retain(op))

    def crash_in_retain(self, op: int, prng: random.Random) -> bool:
        """Start ``retain(op)`` and let the process die after a drawn number of its
        unlinks (none to all but the last): the journal is left as a crash leaves it, to
        be recovered at restart. Whether a deletion was under way."""
        segments = self.journal.segments()
        gone = [s for s in segments[:-1] if s.op_last < min(op, self.journal.op_durable)]
        if not gone:
            return False
        suffixes = (LOG_SUFFIX, INDEX_SUFFIX)
        names = [segment.name + suffix for segment in gone for suffix in suffixes]
        self.storage.fail_next("remove", names[prng.randrange(len(names))])
        # The process is gone at the failed unlink: nothing after it runs.
        with contextlib.suppress(OSError):
            self.journal.retain(op)
        return True

    def write_superblock(self, state: DurableState) -> None:
        self.superblock.write(superblock_state(state))

    def write_checkpoint(self, op: int, snapshot: bytes, journal_restart_op: int = 0) -> None:
        """Persist the snapshot (write, sync, rename, sync the directory), then make the
        journal continue at ``op + 1`` if it ends below ``op``, or empty it whatever it
        holds when ``journal_restart_op`` is given (a state transfer where the log is the
        data: the replica backfills it from that op).

        The journal is synced first: the superblock that names this checkpoint must never
        be durable while ops up to it are not, or a power loss would leave a journal that
        ends below the checkpoint (and polls of those committed messages would find them
        gone on this replica).
        """
        if self.journal.op_head > 0:
            self.journal.sync()
        names = self.storage.names()
        if CHECKPOINT_TEMPORARY_NAME in names:
            self.storage.remove(CHECKPOINT_TEMPORARY_NAME)
        file = self.storage.create(CHECKPOINT_TEMPORARY_NAME)
        try:
            file.write(0, [snapshot])
            file.sync()
        finally:
            file.close()
        self.storage.rename(CHECKPOINT_TEMPORARY_NAME, CHECKPOINT_NAME)
        self.storage.sync_directory()
        head = self.journal.op_head
        if journal_restart_op and head > 0:
            # An empty journal accepts any first op: the backfill's.
            self.journal.truncate(self.journal.op_min - 1)
        elif 0 < head < op:
            # State transfer jumped over a gap: the old ops can never be continued, and an
            # empty journal accepts any first op.
            self.journal.truncate(self.journal.op_min - 1)
        assert self.journal.op_head == 0 or self.journal.op_head >= op
        assert not journal_restart_op or self.journal.op_head == 0

    # Restart -----------------------------------------------------------------------------

    def power_loss(self) -> None:
        """Lose every unsynced write; the newest write of each file may survive torn."""
        self.storage.crash()

    def reopen(self) -> tuple[DurableState, bytes | None]:
        """Recover after a crash: the superblock's state and the checkpoint snapshot."""
        self.journal = Journal.open(self.storage, self._config)
        self.superblock = Superblock.open(self.storage)
        state = self.superblock.state
        head = self.journal.op_head
        if 0 < head < state.checkpoint and not self.log_is_data:
            # A state transfer can leave this (its journal restarted above a gap and lost
            # its unsynced appends): the journal continues after the checkpoint. A
            # partition replica (no state transfer; recovery cut committed records)
            # backfills the missing ops from a peer instead.
            self.journal.truncate(self.journal.op_min - 1)
        durable = durable_state(state)
        checkpoint: bytes | None = None
        if state.checkpoint > 0:
            checkpoint = self._read_checkpoint()
        return durable, checkpoint

    def _read_checkpoint(self) -> bytes:
        file = self.storage.open(CHECKPOINT_NAME)
        try:
            buffer = bytearray(file.size())
            got = file.read_into(0, buffer)
        finally:
            file.close()
        assert got == len(buffer)
        return bytes(buffer)

    def corrupt_record(self, prng: random.Random) -> str | None:
        """Flip bytes of a record at rest in the journal; a description, or None.

        Only called while the replica is down, after any power loss, so the damage is a
        latent sector error that the journal's recovery must find at restart.
        """
        logs = [name for name in self.storage.names() if name.endswith(".log")]
        if not logs:
            return None
        name = logs[prng.randrange(len(logs))]
        size = len(self.storage.contents(name))
        if size == 0:
            return None
        length = min(size, prng.randint(1, 8))
        position = prng.randrange(size - length + 1)
        self.storage.corrupt(name, position, length)
        return f"{name}@{position}+{length}"
