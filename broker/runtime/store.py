"""One group's durable storage on real files: journal, superblock and checkpoints.

Purpose: adapt the segment journal (``journal/``) to what a consensus replica needs
(``consensus.protocols.Log`` plus the effects of its journal actions), and keep the
superblock and checkpoint snapshots next to it. The group host (``group.py``) is the only
caller; every method that blocks on the disk says so and is run in a worker thread.

Layout of a group directory::

    <group dir>/superblock.a|.b         the replica's DurableState (journal.Superblock)
    <group dir>/checkpoint-<op>.bin     snapshots of WriteCheckpoint, newest two kept
    <group dir>/journal/<offset>.log    segment journal: one record per op
    <group dir>/journal/<offset>.index
    <group dir>/journal-format          a partition group's: its records carry message
                                        offsets (``PARTITION_JOURNAL_FORMAT``)

Record format: a record body is the packed consensus prepare header (136 bytes, with its
own BLAKE2b checksum and the hash chain) followed by the prepare body (a stamped batch or
a CBOR command). The journal adds its own xxh3 record checksum around it. In a partition
group a record's offset, message count and timestamp are its batch's (a control op, such
as a consumer offset store, holds no message), so the journal's index is the partition's
index and its segments are named by message offsets; in the metadata group they count
ops, one per record (``offset = op - 1``). See ``broker.state.records``.

Invariants:

1. ``read(op)`` sees every appended prepare at once ("read your writes"): appends are
   written to the page cache synchronously and a small cache holds the newest prepares.
2. ``sync()`` is the only method that may run in a worker thread while the owner keeps
   appending and reading (the journal's concurrency contract); ``truncate``,
   ``write_superblock`` and ``write_checkpoint`` are run only when no sync is in flight.
3. With ``no_sync`` nothing is ever fsynced: syncs return at once and crash safety is
   given up for speed, as the operator asked.
4. A few descriptors per group whatever its size: the group's and the journal's
   directories and the active segment's two files, and for a moment a superblock copy or
   a checkpoint being written. Sealed segments are opened on demand
   (``journal.journal``, invariant 7), except in the metadata group's journal
   (``keep_sealed_files_open``), whose reads happen inside consensus steps and must never
   fail for want of a descriptor. A failed open releases everything it opened, so it can
   be retried; a closed store refuses reads with ``EBADF`` rather than reach a closed
   journal.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from broker.state.records import (
    append_prepare,
    durable_state,
    op_fields,
    partition_fields,
    prepare_of,
    restore_prepare,
    superblock_state,
)
from consensus.messages import MessageError, Prepare
from consensus.protocols import DurableState
from consensus.replica import decode_snapshot
from journal import (
    Journal,
    JournalConfig,
    JournalError,
    SegmentInfo,
    Storage,
    StorageFile,
    Superblock,
    SyncPlan,
)
from journal.storage import FileStorage, fsync_directory_path

CACHE_PREPARES_MAX: Final = 64
"""Newest prepares kept in memory per group (the pipeline plus tail reads)."""
CACHE_BYTES_MAX: Final = 16 * 1024 * 1024
"""Bytes of prepare bodies kept in memory per group."""
PARTITION_JOURNAL_FORMAT_NAME: Final = "journal-format"
PARTITION_JOURNAL_FORMAT: Final = b"partition records carry message offsets\n"
"""What a partition group's ``journal-format`` file holds. A partition journal without it
was written when partition records counted ops, not messages: its offsets mean something
else, so it is refused rather than read wrong (there is no conversion)."""
CHECKPOINTS_KEPT: Final = 2
"""Checkpoint files kept: the newest, and the one the superblock may still name."""

log = logging.getLogger("viewstream.store")

_CHECKPOINT_PREFIX: Final = "checkpoint-"
_CHECKPOINT_SUFFIX: Final = ".bin"


class _UnsyncedFile:
    """A file whose ``sync`` does nothing (``--no-sync``)."""

    def __init__(self, inner: StorageFile) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    def size(self) -> int:
        return self._inner.size()

    def write(self, position: int, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
        self._inner.write(position, buffers)

    def read_into(self, position: int, buffer: bytearray | memoryview) -> int:
        return self._inner.read_into(position, buffer)

    def read(self, position: int, size: int) -> bytes:
        return self._inner.read(position, size)

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def sync(self) -> None:
        pass  # --no-sync: the operator gave up crash safety for speed

    def close(self) -> None:
        self._inner.close()


class UnsyncedStorage:
    """A :class:`journal.FileStorage` that never fsyncs files or the directory."""

    def __init__(self, inner: FileStorage) -> None:
        self._inner = inner

    def names(self) -> list[str]:
        return self._inner.names()

    def create(self, name: str) -> _UnsyncedFile:
        return _UnsyncedFile(self._inner.create(name))

    def open(self, name: str) -> _UnsyncedFile:
        return _UnsyncedFile(self._inner.open(name))

    def remove(self, name: str) -> None:
        self._inner.remove(name)

    def rename(self, source: str, target: str) -> None:
        self._inner.rename(source, target)

    def sync_directory(self) -> None:
        pass

    def close(self) -> None:
        self._inner.close()


def _storage(path: Path, *, no_sync: bool) -> tuple[FileStorage, Storage]:
    files = FileStorage(str(path))
    return files, (UnsyncedStorage(files) if no_sync else files)


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a group's storage held at open: the replica's restart inputs."""

    #: None for a group this open formatted (its directory did not exist); a reopened
    #: group always restarts through recovery, even with no superblock and no record.
    durable: DurableState | None
    #: The snapshot the superblock's checkpoint names (None when the checkpoint is 0).
    checkpoint: bytes | None
    #: Ops the journal's recovery found damaged.
    faulty_ops: tuple[int, ...]


class GroupStore:
    """The journal, superblock and checkpoints of one group; implements ``Log``."""

    def __init__(
        self,
        path: Path,
        *,
        no_sync: bool,
        segment_size_bytes: int,
        keep_sealed_files_open: bool = False,
        created: bool | None = None,
        partition: bool = False,
    ) -> None:
        """Open (and recover) the storage in ``path``; blocks on the disk.

        Args:
            path: The group's directory (created if missing).
            no_sync: Never fsync (invariant 3).
            segment_size_bytes: The journal's segment roll size.
            keep_sealed_files_open: Keep every segment's files open (invariant 4).
            created: Whether this open formats the group; None: whether ``path`` is
                missing. An earlier open of a new group that failed may have left the
                directory behind without the group ever running: its retry says True.
            partition: A partition group: records carry its messages' offsets
                (``broker.state.records``, invariant 2); otherwise op numbers.

        Raises:
            JournalError: recovery found damage it cannot resolve.
            OSError: the disk failed, or no descriptor was left; nothing stays open.
        """
        self.path = path
        self.no_sync = no_sync
        # Whether this open formats the group. A directory that already existed held a
        # replica that may have acknowledged prepares, even if its journal is now empty
        # (a torn first record) and it never wrote a superblock: it must recover.
        self.created = not path.exists() if created is None else created
        self._fields = partition_fields if partition else op_fields
        self._journal_config = JournalConfig(
            segment_size_bytes_max=segment_size_bytes,
            keep_sealed_files_open=keep_sealed_files_open,
        )
        path.mkdir(parents=True, exist_ok=True)
        with ExitStack() as undo:
            self._group_files, self._group_storage = _storage(path, no_sync=no_sync)
            undo.callback(self._group_files.close)
            self._journal_files, journal_storage = _storage(path / "journal", no_sync=no_sync)
            undo.callback(self._journal_files.close)
            self.journal = Journal.open(journal_storage, self._journal_config)
            undo.callback(self.journal.close)
            self.superblock = Superblock.open(self._group_storage)
            if partition:
                self._check_format()
            undo.pop_all()
        self._cache: OrderedDict[int, Prepare] = OrderedDict()
        self._cache_bytes = 0
        self._closed = False
        self._journal_reset_pending = False
        """A reset of the journal (``_reset_journal``) closed the old one and has not
        opened the new one yet: the checkpoint write that needs it is retried."""
        # Bytes written to the journal since open (for statistics).
        self.bytes_appended = 0

    def _check_format(self) -> None:
        """Make sure a partition journal's records carry message offsets: write the format
        file in a group that holds nothing yet (formatted now, or whose formatting a crash
        cut short), refuse one that holds data without it. Blocks on the disk.

        Raises:
            JournalError: the journal was written by an older version.
        """
        storage = self._group_storage
        held: bytes | None = None
        if PARTITION_JOURNAL_FORMAT_NAME in storage.names():
            file = storage.open(PARTITION_JOURNAL_FORMAT_NAME)
            try:
                held = file.read(0, len(PARTITION_JOURNAL_FORMAT) + 1)
            finally:
                file.close()
            if held == PARTITION_JOURNAL_FORMAT:
                return
        empty = self.created or (self.journal.op_head == 0 and self.superblock.sequence == 0)
        if not empty:
            what = "no format file" if held is None else f"format {held!r}"
            raise JournalError(
                f"{self.path}: a partition journal with {what}, written by an older version "
                "(its records count ops, not messages): this version cannot read it"
            )
        if held is not None:
            storage.remove(PARTITION_JOURNAL_FORMAT_NAME)  # a crash cut its writing short
        file = storage.create(PARTITION_JOURNAL_FORMAT_NAME)
        try:
            file.write(0, [PARTITION_JOURNAL_FORMAT])
            file.sync()
        finally:
            file.close()
        storage.sync_directory()

    @property
    def broken(self) -> str | None:
        """Why the journal takes no more writes, or None (``Journal.broken``)."""
        return self.journal.broken

    # -- recovery ---------------------------------------------------------------------------

    def recovered(self) -> Recovered:
        """The restart inputs for the replica; blocks on the disk (reads a checkpoint)."""
        state = self.superblock.state
        if self.created and self.superblock.sequence == 0 and self.journal.op_head == 0:
            return Recovered(None, None, ())
        durable = durable_state(state)
        checkpoint = None
        if state.checkpoint > 0:
            checkpoint = (self.path / _checkpoint_name(state.checkpoint)).read_bytes()
            try:
                op = decode_snapshot(checkpoint)[0]
            except MessageError as error:
                raise JournalError(f"checkpoint {state.checkpoint} is unreadable") from error
            if op != state.checkpoint:
                raise JournalError(f"checkpoint file holds op {op}, not {state.checkpoint}")
        return Recovered(durable, checkpoint, tuple(self.journal.faulty_ops()))

    # -- Log (consensus.protocols) ----------------------------------------------------------

    def read(self, op: int) -> Prepare | None:
        """The prepare of ``op``, or None if the journal does not hold it intact.

        Raises:
            OSError: the disk failed, a sealed segment could not be opened, or the store is
                closed (``EBADF``: a reader that outlived its group's storage).
        """
        if self._closed:
            raise OSError(errno.EBADF, f"{self.path}: the group's storage is closed")
        cached = self._cache.get(op)
        if cached is not None:
            return cached
        if op < 1 or op > self.journal.op_head or op < self.journal.op_min:
            return None
        try:
            record = self.journal.read_record(op)
        except JournalError:
            return None
        # One copy, at the ownership boundary: consensus sends bodies as bytes.
        return prepare_of(record, op)

    def op_max(self) -> int:
        return self.journal.op_head

    def faulty_ops(self) -> Sequence[int]:
        return self.journal.faulty_ops()

    def head_faulty(self) -> bool:
        return not self.journal.recovery.tail_debris

    # -- actions ----------------------------------------------------------------------------

    def append(self, prepare: Prepare) -> None:
        """Write ``prepare`` after the head (page cache only; ``sync`` makes it durable)."""
        self.bytes_appended += append_prepare(self.journal, prepare, self._fields)
        self._remember(prepare)

    def sync(self) -> int:
        """Group commit: make every append so far durable; returns the op covered.

        Blocks on the disk; runs in a worker thread (see invariant 2).
        """
        return self.journal.sync()

    def begin_sync(self) -> SyncPlan:
        """The first half of a sync whose caller flushes the whole file system.

        Its indexes count as synced too, as the flush covers them. Runs in a worker
        thread, as ``sync`` does; ``finish_sync`` or ``abandon_sync`` must follow.
        """
        return self.journal.begin_sync(index_all=True)

    def finish_sync(self, plan: SyncPlan) -> int:
        """The second half, once the flush is done; returns the op covered."""
        return self.journal.finish_sync(plan)

    def abandon_sync(self) -> None:
        """The flush failed: the journal is broken from now on."""
        self.journal.abandon_sync()

    def truncate(self, after_op: int) -> None:
        """Drop every op above ``after_op``; durable when it returns. Blocks on the disk.

        A cut inside a damaged region whose record boundaries are unknown lands at the
        region's start, below ``after_op``: only at restart, where the region reaches
        below the checkpoint, and the replica then appends the committed ops it lost from
        a peer (``RepairJournal``) before anything else.
        """
        if after_op < self.journal.op_head:
            self.journal.truncate(after_op)
        for op in [op for op in self._cache if op > after_op]:
            self._forget(op)

    def repair(self, prepare: Prepare) -> None:
        """Make committed ``prepare`` durable again (``RepairJournal``; see
        ``broker.state.records.restore_prepare``). Blocks on the disk."""
        restore_prepare(self.journal, prepare, self._fields)

    def retain_due(self, op: int) -> bool:
        """Whether ``retain(op)`` would delete a segment now (cheap; any task)."""
        return not self._journal_reset_pending and self.journal.retain_due(op)

    def retain_waits_for_sync(self, op: int) -> bool:
        """Whether ``retain(op)`` could delete a segment once the journal is synced: it
        deletes only below its durable op (``Journal.retain``), which a group that does
        not sync as it appends (durability ``replicated``) leaves behind. Cheap while the
        journal is synced up to ``op`` (any task)."""
        journal = self.journal
        return (
            not self._journal_reset_pending
            and journal.op_durable < min(op, journal.op_head)
            and journal.segment_count > 1
        )

    def seal_if_retired(self, op: int) -> None:
        """Seal the open segment when every record it holds is below ``op`` (a purge
        retired them all), so that ``retain`` may delete it too later; cheap (any task)."""
        if not self._journal_reset_pending and op > self.journal.op_head > 0:
            self.journal.roll()

    def retain(self, op: int) -> list[SegmentInfo]:
        """Delete the journal's whole sealed segments below ``op`` (``Journal.retain``:
        crash-safe, directory synced); returns the segments that went. Blocks on the disk;
        run only when no sync is in flight."""
        deleted = self.journal.retain(op)
        for cached in [cached for cached in self._cache if cached < self.journal.op_min]:
            self._forget(cached)
        return deleted

    def write_superblock(self, state: DurableState) -> None:
        """Persist the replica's durable state. Blocks on the disk."""
        commit = max(state.commit, self.superblock.state.commit)
        self.superblock.write(superblock_state(replace(state, commit=commit)))
        self._remove_old_checkpoints(keep_op=state.checkpoint)

    def write_checkpoint(self, op: int, snapshot: bytes, journal_restart_op: int = 0) -> None:
        """Persist ``snapshot`` as the state after ``op``. Blocks on the disk.

        Ops above ``op`` stay: a primary checkpoints with prepares still in its pipeline,
        and a replica truncates (``TruncateJournal``) before installing a transferred
        checkpoint if it must. Only a journal that ends *below* ``op`` (state transfer
        jumped over ops it never had) is restarted empty, so its next op is ``op + 1``.
        """
        name = _checkpoint_name(op)
        temporary = name + ".tmp"
        if temporary in self._group_storage.names():
            self._group_storage.remove(temporary)  # left by a crash mid-write
        target = self._group_storage.create(temporary)
        try:
            target.write(0, [snapshot])
            target.sync()
        finally:
            target.close()
        self._group_storage.rename(temporary, name)
        self._group_storage.sync_directory()
        if self._journal_reset_pending or self.journal.op_head < op or journal_restart_op:
            # ``journal_restart_op``: a state transfer of a partition, whose replica
            # backfills the journal from that op (an empty journal takes any first op).
            self._reset_journal()

    def _reset_journal(self) -> None:
        """Start the journal afresh (state transfer skipped every op it held).

        The old journal is closed first (its descriptors make room for the new one's); if
        the new one cannot be opened, the reset stays pending and the next call goes on.
        """
        if not self._journal_reset_pending:
            self._journal_reset_pending = True
            try:
                self.journal.close()
            finally:
                self._journal_files.close()
            for op in list(self._cache):
                self._forget(op)
        directory = self.path / "journal"
        if directory.exists():
            shutil.rmtree(directory)
        files, journal_storage = _storage(directory, no_sync=self.no_sync)
        try:
            journal = Journal.open(journal_storage, self._journal_config)
        except BaseException:
            files.close()
            raise
        self._journal_files, self.journal = files, journal
        self._journal_reset_pending = False

    def _remove_old_checkpoints(self, keep_op: int) -> None:
        names = sorted(
            n
            for n in self._group_storage.names()
            if n.startswith(_CHECKPOINT_PREFIX) and n.endswith(_CHECKPOINT_SUFFIX)
        )
        keep = {_checkpoint_name(keep_op)} | set(names[-CHECKPOINTS_KEPT:])
        for name in names:
            if name not in keep:
                self._group_storage.remove(name)

    def close(self) -> None:
        """Sync everything and release the files, even if the sync fails. Blocks on the
        disk."""
        if self._closed:
            return
        self._closed = True
        with ExitStack() as release:
            release.callback(self._group_files.close)
            release.callback(self._journal_files.close)
            if not self._journal_reset_pending:
                self.journal.close()

    def size_bytes(self) -> int:
        """Bytes in the journal's segments."""
        return sum(segment.size_bytes for segment in self.journal.segments())

    def segments(self) -> list[SegmentInfo]:
        """The journal's segments, oldest first (not while a journal action runs in a
        worker thread: ``GroupHost.journal_busy``)."""
        return self.journal.segments()

    def segments_count(self) -> int:
        return self.journal.segment_count

    # -- cache ------------------------------------------------------------------------------

    def _remember(self, prepare: Prepare) -> None:
        self._cache[prepare.op] = prepare
        self._cache_bytes += len(prepare.body)
        while self._cache and (
            len(self._cache) > CACHE_PREPARES_MAX or self._cache_bytes > CACHE_BYTES_MAX
        ):
            self._forget(next(iter(self._cache)))

    def _forget(self, op: int) -> None:
        prepare = self._cache.pop(op)
        self._cache_bytes -= len(prepare.body)


TOMBSTONE_SUFFIX: Final = ".removed"
"""A removed group's tombstone: an empty file named after its directory, beside it."""


def write_tombstone(path: Path) -> None:
    """Record durably that the group whose directory is ``path`` was removed, before its
    data goes (``broker.core.reconcile``, invariant 4): the node never reopens it, even
    restarted with its metadata behind the removal. Blocks on the disk.

    Raises:
        OSError: the tombstone could not be made durable (keep the data then).
    """
    marker = path.with_name(path.name + TOMBSTONE_SUFFIX)
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory_path(str(path.parent))


def tombstoned_names(partitions_dir: Path) -> list[str]:
    """The directory names of the removed groups with a tombstone in ``partitions_dir``,
    sorted."""
    if not partitions_dir.is_dir():
        return []
    suffix = TOMBSTONE_SUFFIX
    return sorted(
        entry.name[: -len(suffix)]
        for entry in partitions_dir.iterdir()
        if entry.name.endswith(suffix)
    )


def remove_group_dir(path: Path) -> None:
    """Delete a removed group's directory, once its tombstone is durable. Blocks on the
    disk.

    Best effort: the tombstone keeps the group removed, so a removal that cannot be made
    durable (no descriptor left to sync the parent directory) is logged rather than
    raised.
    """
    shutil.rmtree(path, ignore_errors=True)
    parent = path.parent
    if not parent.is_dir():
        return
    try:
        fsync_directory_path(str(parent))
    except OSError as error:
        log.warning("removed %s, but cannot sync its parent directory: %s", path, error)


def _checkpoint_name(op: int) -> str:
    return f"{_CHECKPOINT_PREFIX}{op:020d}{_CHECKPOINT_SUFFIX}"
