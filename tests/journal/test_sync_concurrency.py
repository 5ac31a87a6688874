"""The sync concurrency contract, with real threads on real files.

Contract (``journal.journal`` module doc): ``sync()`` may run in one worker thread while the
owner thread appends and reads. It reads ``op_head`` first, fsyncs, and publishes exactly
that op as ``op_durable``; appends made meanwhile are left to the next sync. Truncate,
repair, retention and close must not overlap a sync.

Method: a storage wrapper around FileStorage can hold a log's ``sync()`` until the test
releases it, so the test appends (and rolls segments) at a known point inside a sync. A
stress test runs a syncing thread flat out against an appending owner.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from journal import Journal, JournalBroken, JournalConfig, MemoryStorage
from journal.storage import FileStorage
from journal.storage_api import Buffer, StorageFile, WritableBuffer
from tests.journal.helpers import Spec, append_many, assert_journal_holds

TIMEOUT_S = 30.0
SMALL = JournalConfig(segment_size_bytes_max=1000)


class _GatedFile:
    """A real file whose ``sync()`` can be made to wait for the test."""

    def __init__(self, inner: StorageFile, storage: GatedStorage) -> None:
        self._inner = inner
        self._storage = storage

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
        if self._storage.gate_armed and self.name.endswith(".log"):
            self._storage.gate_armed = False
            self._storage.sync_entered.set()
            assert self._storage.sync_release.wait(TIMEOUT_S)
        self._storage.syncs.append(self.name)
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()


class GatedStorage:
    """FileStorage, with the next log sync held at ``sync_entered`` until released."""

    def __init__(self, path: Path) -> None:
        self._inner = FileStorage(str(path))
        self.gate_armed = False
        self.sync_entered = threading.Event()
        self.sync_release = threading.Event()
        self.syncs: list[str] = []

    def names(self) -> list[str]:
        return self._inner.names()

    def create(self, name: str) -> _GatedFile:
        return _GatedFile(self._inner.create(name), self)

    def open(self, name: str) -> _GatedFile:
        return _GatedFile(self._inner.open(name), self)

    def remove(self, name: str) -> None:
        self._inner.remove(name)

    def rename(self, source: str, target: str) -> None:
        self._inner.rename(source, target)

    def sync_directory(self) -> None:
        self.syncs.append("<directory>")
        self._inner.sync_directory()

    def close(self) -> None:
        self._inner.close()


def _sync_in_thread(journal: Journal) -> tuple[threading.Thread, list[int | BaseException]]:
    result: list[int | BaseException] = []

    def run() -> None:
        try:
            result.append(journal.sync())
        except BaseException as error:  # Handed to the test thread, which re-raises it.
            result.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_sync_publishes_the_head_it_read_first_while_appends_go_on(tmp_path: Path) -> None:
    storage = GatedStorage(tmp_path)
    journal = Journal.open(storage, JournalConfig(segment_size_bytes_max=1000))
    specs = append_many(journal, 3, body_size=200)
    storage.gate_armed = True
    thread, result = _sync_in_thread(journal)
    assert storage.sync_entered.wait(TIMEOUT_S)
    # The sync is inside its first fsync. The owner appends on, rolling two new segments.
    specs += append_many(journal, 6, body_size=200, op_first=4, offset_first=6)
    assert journal.op_head == 9
    assert len(journal.segments()) == 3
    assert_journal_holds(journal, specs)  # Reads run meanwhile too.
    assert journal.op_durable == 0
    storage.sync_release.set()
    thread.join(TIMEOUT_S)
    assert result == [3]
    assert journal.op_durable == 3  # Not 9: those appends came after the snapshot.
    storage.syncs.clear()
    assert journal.sync() == 9
    # The next sync covered the rest: the segments made meanwhile and their names.
    assert "00000000000000000008.log" in storage.syncs
    assert "00000000000000000016.log" in storage.syncs
    assert "<directory>" in storage.syncs
    journal.close()
    storage.close()
    reopened_storage = FileStorage(str(tmp_path))
    assert_journal_holds(Journal.open(reopened_storage), specs)
    reopened_storage.close()


@pytest.mark.parametrize("operation", ["truncate", "retention", "repair", "sync", "close"])
def test_sync_excludes_operations_that_may_not_overlap_it(tmp_path: Path, operation: str) -> None:
    storage = GatedStorage(tmp_path)
    journal = Journal.open(storage, JournalConfig(segment_size_bytes_max=1000))
    specs = append_many(journal, 9, body_size=200)
    storage.gate_armed = True
    thread, result = _sync_in_thread(journal)
    assert storage.sync_entered.wait(TIMEOUT_S)
    try:
        with pytest.raises(AssertionError, match=r"overlap a sync|one sync at a time"):
            if operation == "truncate":
                journal.truncate(2)
            elif operation == "retention":
                journal.enforce_retention(now_us=10**12, commit=9, expiry_us=0)
            elif operation == "repair":
                journal.repair(1, specs[0].record())
            elif operation == "sync":
                journal.sync()
            else:
                journal.close()
    finally:
        storage.sync_release.set()
        thread.join(TIMEOUT_S)
    assert result == [9]
    journal.close()
    storage.close()


def test_sync_thread_against_appending_owner_loses_nothing(tmp_path: Path) -> None:
    """Stress: a worker syncs flat out while the owner appends 1500 records across many
    segments. Every durable op the worker publishes was appended, they only grow, and a
    final sync covers everything."""
    storage = FileStorage(str(tmp_path))
    journal = Journal.open(storage, JournalConfig(segment_size_bytes_max=64 * 1024))
    stop = threading.Event()
    published: list[int] = []
    heads_seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            while not stop.is_set():
                head_before = journal.op_head
                durable = journal.sync()
                heads_seen.append((head_before, durable))
                published.append(durable)
        except BaseException as error:  # Handed to the test thread.
            errors.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    specs: list[Spec] = []
    try:
        for batch in range(150):
            specs += append_many(
                journal,
                10,
                body_size=37 * (batch % 5) + 1000,
                op_first=len(specs) + 1,
                offset_first=2 * len(specs),
            )
            time.sleep(0.0002)  # Let the worker in between batches too, not only in fsyncs.
            if batch % 10 == 9:
                # Every tenth batch, wait (bounded) until the worker has synced past it, so
                # the threads provably interleave however the machine schedules them.
                deadline = time.monotonic() + TIMEOUT_S
                while not (published and published[-1] >= len(specs)) and not errors:
                    assert time.monotonic() < deadline, "the sync worker made no progress"
                    time.sleep(0.0005)
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert not errors, errors
    assert published == sorted(published)
    assert all(head_before <= durable for head_before, durable in heads_seen)
    assert all(durable <= len(specs) for durable in published)
    assert len(journal.segments()) > 10
    # Syncs published at least one new durable op per checkpoint above: real interleaving.
    assert len(set(published)) >= 15
    assert journal.sync() == len(specs)
    journal.close()
    storage.close()
    reopened_storage = FileStorage(str(tmp_path))
    reopened = Journal.open(reopened_storage)
    assert reopened.recovery.tail_truncated_bytes == 0
    assert_journal_holds(reopened, specs)
    reopened.close()
    reopened_storage.close()


# --- A sync cut in two around a flush the caller does (begin_sync / finish_sync) -------------


def test_split_sync_claims_what_it_planned_and_not_what_came_after() -> None:
    storage = MemoryStorage(random.Random(7))
    journal = Journal.open(storage, SMALL)
    specs = append_many(journal, 5, body_size=150)  # several segments: SMALL rolls often
    plan = journal.begin_sync(index_all=True)
    assert plan.op_target == 5
    assert plan.sync_directory  # segments were created since the journal opened
    names = [file.name for file in plan.files]
    assert any(name.endswith(".log") for name in names)
    assert any(name.endswith(".index") for name in names)  # index_all
    with pytest.raises(AssertionError):
        journal.sync()  # one sync at a time, the split one included
    specs += append_many(journal, 2, body_size=150, op_first=6, offset_first=10)
    for file in plan.files:  # the caller's flush: here, exactly the planned files
        file.sync()
    storage.sync_directory()
    assert journal.finish_sync(plan) == 5
    assert journal.op_durable == 5  # not 7: ops 6 and 7 came after the plan
    storage.crash()
    reopened = Journal.open(storage, SMALL)
    assert reopened.op_head >= 5
    assert_journal_holds(reopened, specs[: reopened.op_head])


def test_split_sync_with_nothing_new_plans_no_files() -> None:
    storage = MemoryStorage(random.Random(8))
    journal = Journal.open(storage, SMALL)
    append_many(journal, 3, body_size=150)
    journal.sync()
    plan = journal.begin_sync()
    assert plan.files == ()
    assert not plan.sync_directory
    assert journal.finish_sync(plan) == 3
    # The head segment's index waits for its interval unless the flush covers it anyway.
    plan = journal.begin_sync(index_all=True)
    assert [file.name[-6:] for file in plan.files] == [".index"]
    assert journal.finish_sync(plan) == 3
    assert journal.begin_sync(index_all=True).files == ()


def test_an_abandoned_split_sync_breaks_the_journal() -> None:
    storage = MemoryStorage(random.Random(9))
    journal = Journal.open(storage, SMALL)
    append_many(journal, 2, body_size=150)
    journal.begin_sync()
    journal.abandon_sync()  # the caller's flush failed
    assert journal.op_durable == 0
    with pytest.raises(JournalBroken):
        append_many(journal, 1, body_size=150, op_first=3, offset_first=4)
    with pytest.raises(JournalBroken):
        journal.begin_sync()
