"""Retaining from an op: the replicated form of retention, and its crash safety.

Method: journals of three segments of four records (ops 1-4, 5-8, 9-12; offsets 0, 8, 16)
on memory and on real files. ``retain`` is called with chosen ops; crashes are simulated
between the unlinks in two ways: by stopping the journal at its k-th unlink (a process
crash: the unlinks done so far stay), and by building every subset of leftover files by
hand after the retained start was recorded (a power loss may keep any subset of unsynced
unlinks). Each time the journal must reopen at the recorded start with every record kept.
"""

from __future__ import annotations

import itertools
import random

import pytest

from journal import Journal, JournalConfig, MemoryStorage, RecoveryError, Storage, StorageFile
from journal.retained import (
    RETAINED_NAME,
    RETAINED_TMP_NAME,
    RetainedStart,
    read_retained,
    write_retained,
)
from tests.journal.helpers import (
    Disk,
    Spec,
    append_many,
    assert_journal_holds,
    flip,
    index_name,
    log_name,
)

SMALL = JournalConfig(segment_size_bytes_max=1000)
DELETED_FILES = (log_name(0), index_name(0), log_name(8), index_name(8))
"""The files ``retain(9)`` deletes from a filled journal, in the order it unlinks them."""


def _filled(disk: Disk) -> tuple[Journal, list[Spec]]:
    journal = disk.open(SMALL)
    specs = append_many(journal, 12, body_size=200)
    journal.sync()
    assert [info.op_base for info in journal.segments()] == [1, 5, 9]
    return journal, specs


def test_retain_deletes_whole_sealed_segments_below_the_op(disk: Disk) -> None:
    journal, specs = _filled(disk)
    assert journal.retain(4) == []  # segment 1 holds op 4: it stays whole
    deleted = journal.retain(7)
    assert [info.op_base for info in deleted] == [1]
    assert journal.op_min == 5
    assert read_retained(disk.storage()) == RetainedStart(offset=8, op=5)
    assert_journal_holds(journal, specs[4:])
    journal.close()
    reopened = disk.open(SMALL)
    assert reopened.op_min == 5
    assert reopened.recovery.files_removed == ()
    assert_journal_holds(reopened, specs[4:])
    reopened.close()


def test_retain_never_deletes_the_active_segment(disk: Disk) -> None:
    journal, specs = _filled(disk)
    deleted = journal.retain(10**6)
    assert [info.op_base for info in deleted] == [1, 5]
    assert [info.op_base for info in journal.segments()] == [9]
    assert_journal_holds(journal, specs[8:])
    journal.close()


def test_retain_keeps_the_segment_holding_the_first_unsynced_op(disk: Disk) -> None:
    journal = disk.open(SMALL)
    append_many(journal, 6, body_size=200)
    journal.sync()
    append_many(journal, 6, body_size=200, op_first=7, offset_first=12)  # op 7.. unsynced
    # Segment 2 (ops 5-8) ends above op_durable 6: the first op kept must be durable.
    assert [info.op_base for info in journal.retain(12)] == [1]
    journal.sync()
    assert [info.op_base for info in journal.retain(12)] == [5]
    journal.close()


@pytest.mark.parametrize("unlinks_done", range(len(DELETED_FILES) + 1))
def test_retain_process_crash_between_unlinks_reopens_at_the_retained_start(
    disk: Disk, unlinks_done: int
) -> None:
    journal, specs = _filled(disk)
    journal.close()
    crashed = Journal.open(_CrashAfterUnlinks(disk.storage(), unlinks_done), SMALL)
    if unlinks_done < len(DELETED_FILES):
        with pytest.raises(_Crashed):
            crashed.retain(9)
    else:
        crashed.retain(9)
    reopened = disk.open(SMALL)
    assert reopened.op_min == 9
    assert_journal_holds(reopened, specs[8:])
    names = disk.storage().names()
    assert not set(DELETED_FILES) & set(names)
    assert sorted(reopened.recovery.files_removed) == sorted(DELETED_FILES[unlinks_done:])
    reopened.close()


@pytest.mark.parametrize(
    "survivors",
    [
        subset
        for size in range(len(DELETED_FILES) + 1)
        for subset in itertools.combinations(DELETED_FILES, size)
    ],
)
def test_retain_any_subset_of_unlinks_lost_to_a_crash_recovers_to_the_start(
    disk: Disk, survivors: tuple[str, ...]
) -> None:
    """A power loss may keep any subset of unsynced unlinks, a hole among them included
    (segment 2 gone, segment 1 still there): recovery must not cut at the hole."""
    journal, specs = _filled(disk)
    journal.close()
    storage = disk.storage()
    write_retained(storage, RetainedStart(offset=16, op=9))
    for name in DELETED_FILES:
        if name not in survivors:
            storage.remove(name)
    storage.sync_directory()
    reopened = disk.open(SMALL)
    assert reopened.op_min == 9
    assert reopened.recovery.tail_truncated_bytes == 0
    assert_journal_holds(reopened, specs[8:])
    assert sorted(reopened.recovery.files_removed) == sorted(survivors)
    reopened.close()


def test_retain_power_loss_right_after_it_keeps_the_retained_start() -> None:
    for seed in range(20):
        storage = MemoryStorage(random.Random(seed))
        journal = Journal.open(storage, SMALL)
        specs = append_many(journal, 12, body_size=200)
        journal.sync()
        journal.retain(9)
        storage.crash()
        reopened = Journal.open(storage, SMALL)
        assert reopened.op_min == 9
        assert_journal_holds(reopened, specs[8:])


def test_retain_power_loss_before_the_directory_sync_recovers_a_consistent_start() -> None:
    """The marker is durable, the unlinks are not: the crash brings every file back, and
    recovery deletes them again."""
    storage = MemoryStorage(random.Random(3))
    journal = Journal.open(storage, SMALL)
    specs = append_many(journal, 12, body_size=200)
    journal.sync()
    journal.close()
    # Recovery syncs the directory once, and the marker once: the next one fails.
    crashed = Journal.open(_FailDirectorySync(storage, after=2), SMALL)
    with pytest.raises(OSError):
        crashed.retain(9)
    storage.crash()
    assert {log_name(0), log_name(8)} <= set(storage.names())
    reopened = Journal.open(storage, SMALL)
    assert reopened.op_min == 9
    assert_journal_holds(reopened, specs[8:])


def test_retain_leftover_marker_write_is_removed_and_the_old_start_holds(disk: Disk) -> None:
    journal, specs = _filled(disk)
    journal.retain(5)
    journal.close()
    storage = disk.storage()
    half = storage.create(RETAINED_TMP_NAME)  # a crash before the rename
    half.write(0, [b"\x01" * 10])
    half.sync()
    half.close()
    storage.sync_directory()
    reopened = disk.open(SMALL)
    assert RETAINED_TMP_NAME in reopened.recovery.files_removed
    assert reopened.op_min == 5
    assert_journal_holds(reopened, specs[4:])
    reopened.close()


def test_retain_damaged_marker_refuses_to_open(disk: Disk) -> None:
    journal, _ = _filled(disk)
    journal.retain(5)
    journal.close()
    flip(disk.storage(), RETAINED_NAME, 30)
    with pytest.raises(RecoveryError):
        disk.open(SMALL)


def test_retain_then_truncate_to_empty_lets_a_journal_start_anywhere(disk: Disk) -> None:
    journal, _ = _filled(disk)
    journal.retain(9)
    assert journal.truncate(8) == 0
    assert RETAINED_NAME not in disk.storage().names()
    specs = append_many(journal, 3, body_size=200, op_first=3, offset_first=4)
    journal.close()
    reopened = disk.open(SMALL)
    assert_journal_holds(reopened, specs)
    reopened.close()


def test_retained_start_round_trips_and_rejects_garbage() -> None:
    storage = MemoryStorage(random.Random(0))
    assert read_retained(storage) is None
    write_retained(storage, RetainedStart(offset=123, op=124))
    write_retained(storage, RetainedStart(offset=456, op=457))
    assert read_retained(storage) == RetainedStart(offset=456, op=457)
    assert storage.names() == [RETAINED_NAME]
    file = storage.create("x")
    file.close()
    storage.rename("x", RETAINED_NAME)  # an empty record
    with pytest.raises(RecoveryError):
        read_retained(storage)


# --- Storages that stop halfway ----------------------------------------------------------


class _Crashed(Exception):
    """The process "died" here."""


class _Delegating:
    """A storage that passes everything to ``inner``; subclasses intercept some calls."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner

    def names(self) -> list[str]:
        return self._inner.names()

    def create(self, name: str) -> StorageFile:
        return self._inner.create(name)

    def open(self, name: str) -> StorageFile:
        return self._inner.open(name)

    def remove(self, name: str) -> None:
        self._inner.remove(name)

    def rename(self, source: str, target: str) -> None:
        self._inner.rename(source, target)

    def sync_directory(self) -> None:
        self._inner.sync_directory()


class _CrashAfterUnlinks(_Delegating):
    """A storage whose process dies at the unlink after ``unlinks`` of them (of segment
    files: the marker's own rename and leftovers do not count)."""

    def __init__(self, inner: Storage, unlinks: int) -> None:
        super().__init__(inner)
        self._left = unlinks

    def remove(self, name: str) -> None:
        if name.endswith((".log", ".index")):
            if self._left == 0:
                raise _Crashed(name)
            self._left -= 1
        self._inner.remove(name)


class _FailDirectorySync(_Delegating):
    """A storage whose directory sync fails after ``after`` successful ones."""

    def __init__(self, inner: Storage, after: int) -> None:
        super().__init__(inner)
        self._left = after

    def sync_directory(self) -> None:
        if self._left == 0:
            raise OSError(5, "injected directory sync failure")
        self._left -= 1
        self._inner.sync_directory()
