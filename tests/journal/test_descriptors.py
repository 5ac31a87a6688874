"""Journal descriptors: a journal of many segments holds a few files open, and a storage
that refuses to open one more (EMFILE) fails an operation cleanly, never half-done.

``LimitedStorage`` counts the handles open through it and refuses opens past a limit, as
a process's ``ulimit -n`` would; the real-file test counts ``/proc/self/fd``.
"""

from __future__ import annotations

import errno
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from journal import Journal, JournalConfig, MemoryStorage, Storage, StorageFile
from journal.storage import FileStorage
from journal.storage_api import Buffer, WritableBuffer
from tests.journal.helpers import (
    Disk,
    Spec,
    append_many,
    assert_journal_holds,
    assert_record,
    flip,
    log_name,
)

BODY_SIZE = 100
SEGMENT_SIZE = 1024
"""About four 228-byte records per segment: many segments from few records."""
RECORDS = 200
SYNC_EVERY = 8
ACTIVE_FILES = 2
"""The active segment's log and index."""
SEALED_BETWEEN_SYNCS_MAX = 2
"""Segments sealed between two syncs: 8 records span at most 3 segments of 4 or more."""
FILES_OPEN_MAX = ACTIVE_FILES + 2 * SEALED_BETWEEN_SYNCS_MAX + 1
"""Plus the files of segments sealed since the last sync, and one sealed log for reads."""


class _LimitedFile:
    def __init__(self, storage: LimitedStorage, inner: StorageFile) -> None:
        self._storage = storage
        self._inner = inner
        self._open = True

    @property
    def name(self) -> str:
        return self._inner.name

    def size(self) -> int:
        return self._inner.size()

    def write(self, position: int, buffers: Sequence[Buffer]) -> None:
        self._inner.write(position, buffers)

    def read_into(self, position: int, buffer: WritableBuffer) -> int:
        return self._inner.read_into(position, buffer)

    def read(self, position: int, size: int) -> bytes:
        return self._inner.read(position, size)

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def sync(self) -> None:
        self._inner.sync()

    def close(self) -> None:
        assert self._open, f"{self.name} closed twice"
        self._open = False
        self._storage.open_now -= 1
        self._inner.close()


class LimitedStorage:
    """A storage that counts open handles and refuses one past ``limit`` with EMFILE."""

    def __init__(self, inner: Storage, limit: int = 1 << 30) -> None:
        self.inner = inner
        self.limit = limit
        self.open_now = 0
        self.open_peak = 0
        self.refused = 0

    def _admit(self) -> None:
        if self.open_now >= self.limit:
            self.refused += 1
            raise OSError(errno.EMFILE, "Too many open files (test limit)")
        self.open_now += 1
        self.open_peak = max(self.open_peak, self.open_now)

    def _wrap(self, file: StorageFile) -> _LimitedFile:
        return _LimitedFile(self, file)

    def names(self) -> list[str]:
        return self.inner.names()

    def create(self, name: str) -> _LimitedFile:
        self._admit()
        try:
            return self._wrap(self.inner.create(name))
        except BaseException:
            self.open_now -= 1
            raise

    def open(self, name: str) -> _LimitedFile:
        self._admit()
        try:
            return self._wrap(self.inner.open(name))
        except BaseException:
            self.open_now -= 1
            raise

    def remove(self, name: str) -> None:
        self.inner.remove(name)

    def rename(self, source: str, target: str) -> None:
        self.inner.rename(source, target)

    def sync_directory(self) -> None:
        self.inner.sync_directory()


def _config(*, keep: bool = False) -> JournalConfig:
    return JournalConfig(segment_size_bytes_max=SEGMENT_SIZE, keep_sealed_files_open=keep)


def _fill(journal: Journal, count: int = RECORDS, *, op_first: int = 1) -> list[Spec]:
    """Appends ``count`` records, syncing every ``SYNC_EVERY`` of them, then syncs."""
    specs: list[Spec] = []
    offset = journal.offset_next or 0
    for start in range(0, count, SYNC_EVERY):
        batch = min(SYNC_EVERY, count - start)
        specs += append_many(
            journal,
            batch,
            body_size=BODY_SIZE,
            op_first=op_first + start,
            offset_first=offset,
            timestamp_first_us=1_000 + 10 * start,
        )
        offset = specs[-1].offset + specs[-1].message_count
        journal.sync()
    return specs


def _memory(limit: int = 1 << 30) -> LimitedStorage:
    return LimitedStorage(MemoryStorage(random.Random(11)), limit)


def test_journal_of_many_segments_holds_only_the_active_files_and_a_few_more() -> None:
    storage = _memory()
    journal = Journal.open(storage, _config())
    specs = _fill(journal)
    segments = len(journal.segments())
    assert segments >= 40
    assert storage.open_peak <= FILES_OPEN_MAX
    assert journal.files_open == storage.open_now <= FILES_OPEN_MAX
    # Reading everything, record by record and as one range, walks every sealed segment.
    storage.open_peak = storage.open_now
    assert_journal_holds(journal, specs)
    assert storage.open_peak <= FILES_OPEN_MAX
    assert journal.files_open == storage.open_now <= FILES_OPEN_MAX
    journal.close()
    assert storage.open_now == 0


def test_journal_keeping_sealed_files_open_holds_two_per_segment() -> None:
    storage = _memory()
    journal = Journal.open(storage, _config(keep=True))
    specs = _fill(journal)
    assert journal.files_open == storage.open_now == 2 * len(journal.segments())
    journal.close()
    reopened = Journal.open(storage, _config(keep=True))
    assert storage.open_now == 2 * len(reopened.segments())
    assert_journal_holds(reopened, specs)
    reopened.close()
    assert storage.open_now == 0


def test_recovery_of_many_segments_holds_one_segment_at_a_time() -> None:
    storage = _memory()
    journal = Journal.open(storage, _config())
    specs = _fill(journal)
    journal.close()
    assert storage.open_now == 0
    storage.limit = 3  # the active log, and one segment's log and index being checked
    storage.open_peak = 0
    reopened = Journal.open(storage, _config())
    assert storage.open_peak <= 3
    assert reopened.files_open == storage.open_now == ACTIVE_FILES
    storage.limit = FILES_OPEN_MAX
    assert_journal_holds(reopened, specs)
    reopened.close()


def test_recovery_refused_a_descriptor_raises_and_leaves_nothing_open() -> None:
    storage = _memory()
    journal = Journal.open(storage, _config())
    _fill(journal, 40)
    journal.close()
    for limit in range(3):
        storage.limit = limit
        with pytest.raises(OSError) as raised:
            Journal.open(storage, _config())
        assert raised.value.errno == errno.EMFILE
        assert storage.open_now == 0


def test_a_roll_refused_a_descriptor_changes_nothing_and_its_retry_succeeds() -> None:
    storage = _memory()
    journal = Journal.open(storage, _config())
    specs = _fill(journal, 3)  # one segment, not full yet
    names_before = storage.names()
    # The next records fill the segment; the first that needs a new one is refused.
    storage.limit = storage.open_now + 1  # the new log is created, its index is not
    more: list[Spec] = []
    with pytest.raises(OSError) as raised:
        for _ in range(10):
            more += append_many(
                journal,
                1,
                body_size=BODY_SIZE,
                op_first=specs[-1].op + len(more) + 1,
                offset_first=(more or specs)[-1].offset + 2,
            )
    assert raised.value.errno == errno.EMFILE
    assert journal.broken is None
    assert journal.op_head == (more or specs)[-1].op
    assert storage.names() == names_before  # the half-made segment was removed
    storage.limit = 1 << 30
    more += append_many(
        journal,
        1,
        body_size=BODY_SIZE,
        op_first=journal.op_head + 1,
        offset_first=(more or specs)[-1].offset + 2,
    )
    journal.sync()
    assert len(journal.segments()) == 2
    assert_journal_holds(journal, specs + more)
    journal.close()
    assert_journal_holds(Journal.open(storage, _config()), specs + more)


def test_a_read_of_a_sealed_segment_refused_a_descriptor_raises_and_can_be_retried() -> None:
    storage = _memory()
    journal = Journal.open(storage, _config())
    specs = _fill(journal, 40)
    assert_record(journal.read_record(specs[10].op), specs[10])
    assert storage.open_now == ACTIVE_FILES + 1  # and the log of the segment read
    # Descriptors taken elsewhere: the read gives its log back, and cannot open another.
    storage.limit = ACTIVE_FILES
    with pytest.raises(OSError) as raised:
        journal.read_record(specs[0].op)
    assert raised.value.errno == errno.EMFILE
    assert journal.broken is None
    storage.limit = 1 << 30
    assert_record(journal.read_record(specs[0].op), specs[0])
    assert_journal_holds(journal, specs)
    journal.close()


def test_truncate_into_a_released_sealed_segment_reopens_it(disk: Disk) -> None:
    journal = disk.open(_config())
    specs = _fill(journal, 60)
    # The cut lands in the middle of an early segment, whose files were released.
    cut_op = specs[7].op
    assert cut_op < journal.segments()[3].op_base
    assert journal.truncate(cut_op) == cut_op
    assert len(journal.segments()) <= 3
    kept = specs[:8]
    kept += append_many(
        journal,
        20,
        body_size=BODY_SIZE,
        op_first=cut_op + 1,
        offset_first=kept[-1].offset + 2,
        timestamp_first_us=50_000,
    )
    journal.sync()
    assert_journal_holds(journal, kept)
    assert journal.files_open <= FILES_OPEN_MAX
    journal.close()
    reopened = disk.open(_config())
    assert_journal_holds(reopened, kept)
    reopened.close()


def test_repair_of_a_record_in_a_released_sealed_segment(disk: Disk) -> None:
    journal = disk.open(_config())
    specs = _fill(journal, 40)
    journal.close()
    # Damage the body of the second record of the first segment (a latent media error).
    damaged = specs[1]
    flip(disk.storage(), log_name(0), specs[0].size + damaged.size - 1)
    reopened = disk.open(_config())
    assert reopened.faulty_ops() == [damaged.op]
    assert reopened.files_open == ACTIVE_FILES
    reopened.repair(damaged.op, damaged.record())
    assert reopened.faulty_ops() == []
    assert reopened.files_open <= FILES_OPEN_MAX
    assert_journal_holds(reopened, specs)
    reopened.close()
    again = disk.open(_config())
    assert_journal_holds(again, specs)
    again.close()


def test_retention_of_released_sealed_segments(disk: Disk) -> None:
    journal = disk.open(_config())
    specs = _fill(journal, 60)
    deleted = journal.enforce_retention(
        now_us=10**9, commit=journal.op_head, size_bytes_max=4 * SEGMENT_SIZE
    )
    assert deleted
    assert journal.files_open <= FILES_OPEN_MAX
    kept = [spec for spec in specs if spec.op >= journal.op_min]
    assert_journal_holds(journal, kept)
    journal.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")
def test_file_journal_of_many_segments_holds_a_few_descriptors(tmp_path: Path) -> None:
    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    storage = FileStorage(str(tmp_path / "journal"))
    journal = Journal.open(storage, _config())
    specs = _fill(journal)
    assert len(journal.segments()) >= 40
    # The storage's directory, and the journal's files.
    assert descriptors() - before <= 1 + FILES_OPEN_MAX
    assert_journal_holds(journal, specs)
    assert descriptors() - before <= 1 + FILES_OPEN_MAX
    journal.close()
    storage.close()
    assert descriptors() == before
    # Reopened: recovery walks every segment with a few descriptors at a time.
    storage = FileStorage(str(tmp_path / "journal"))
    reopened = Journal.open(storage, _config())
    assert descriptors() - before == 1 + ACTIVE_FILES
    assert_journal_holds(reopened, specs)
    reopened.close()
    storage.close()
    assert descriptors() == before
