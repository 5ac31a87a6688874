"""Retention: whole sealed segments go by expiry or size; the active one never does.

Method: journals of small segments with known timestamps; retention is enforced with chosen
clocks, commits and budgets, and the survivors, the files and the readers' errors checked.
"""

from __future__ import annotations

import random

import pytest

from journal import (
    Journal,
    JournalConfig,
    MemoryStorage,
    OffsetNotRetained,
    OpNotRetained,
)
from tests.journal.helpers import Disk, Spec, append_many, assert_journal_holds, log_name

SMALL = JournalConfig(segment_size_bytes_max=1000)


def _filled(disk: Disk, count: int = 12) -> tuple[Journal, list[Spec]]:
    """Ops 1..12 in segments of 4 (offsets 0, 8, 16), timestamps 1000, 1010, ..."""
    journal = disk.open(SMALL)
    specs = append_many(journal, count, body_size=200)
    journal.sync()
    return journal, specs


def test_retention_expiry_deletes_expired_sealed_segments_only(disk: Disk) -> None:
    journal, specs = _filled(disk)
    # Segment 1 ends at ts 1030, segment 2 at 1070, segment 3 (active) at 1110.
    deleted = journal.enforce_retention(now_us=1075, commit=12, expiry_us=10)
    assert [info.op_base for info in deleted] == [1]
    assert deleted[0].timestamp_max_us == 1030
    deleted = journal.enforce_retention(now_us=10**12, commit=12, expiry_us=10)
    assert [info.op_base for info in deleted] == [5]
    assert [info.op_base for info in journal.segments()] == [9]  # Active stays, expired.
    assert journal.op_min == 9
    assert journal.offset_min == 16
    journal.close()
    reopened = disk.open(SMALL)
    assert_journal_holds(reopened, specs[8:])
    assert log_name(0) not in disk.storage().names()
    reopened.close()


def test_retention_readers_get_the_first_retained_offset(disk: Disk) -> None:
    journal, _ = _filled(disk)
    journal.enforce_retention(now_us=10**12, commit=12, expiry_us=0)
    with pytest.raises(OffsetNotRetained) as error:
        journal.read_messages(3, count_max=10, size_max=1 << 20)
    assert error.value.offset == 3
    assert error.value.offset_min == 16
    with pytest.raises(OffsetNotRetained):
        journal.op_for_offset(15)
    assert journal.op_for_offset(16) == 9
    with pytest.raises(OpNotRetained) as op_error:
        journal.read_record(8)
    assert op_error.value.op_min == 9
    records = journal.read_messages(error.value.offset_min, count_max=10, size_max=1 << 20)
    assert records[0].header.op == 9
    journal.close()


def test_retention_size_budget_deletes_oldest_until_it_fits(disk: Disk) -> None:
    journal, _ = _filled(disk)
    sizes = [info.size_bytes for info in journal.segments()]
    deleted = journal.enforce_retention(now_us=0, commit=12, size_bytes_max=sum(sizes) - 1)
    assert [info.op_base for info in deleted] == [1]
    deleted = journal.enforce_retention(now_us=0, commit=12, size_bytes_max=sizes[2])
    assert [info.op_base for info in deleted] == [5]
    deleted = journal.enforce_retention(now_us=0, commit=12, size_bytes_max=0)
    assert deleted == []  # The active segment alone may exceed the budget.
    journal.close()


def test_retention_never_deletes_what_is_not_committed_or_not_durable(disk: Disk) -> None:
    journal = disk.open(SMALL)
    append_many(journal, 8, body_size=200)
    journal.sync()
    append_many(journal, 4, body_size=200, op_first=9, offset_first=16)  # Not synced.
    # Commit 4: segment 1's last op is not below it.
    assert journal.enforce_retention(now_us=10**12, commit=4, expiry_us=0) == []
    # Durable 8: segment 2's last op is not below it, though committed.
    deleted = journal.enforce_retention(now_us=10**12, commit=12, expiry_us=0)
    assert [info.op_base for info in deleted] == [1]
    journal.sync()
    deleted = journal.enforce_retention(now_us=10**12, commit=12, expiry_us=0)
    assert [info.op_base for info in deleted] == [5]
    journal.close()


def test_retention_nothing_configured_deletes_nothing(disk: Disk) -> None:
    journal, specs = _filled(disk)
    assert journal.enforce_retention(now_us=10**12, commit=12) == []
    assert_journal_holds(journal, specs)
    journal.close()


def test_retention_survives_a_crash_right_after_it() -> None:
    for seed in range(20):
        storage = MemoryStorage(random.Random(seed))
        journal = Journal.open(storage, SMALL)
        specs = append_many(journal, 12, body_size=200)
        journal.sync()
        journal.enforce_retention(now_us=10**12, commit=12, expiry_us=0)
        more = append_many(journal, 1, body_size=200, op_first=13, offset_first=24)
        storage.crash()
        reopened = Journal.open(storage, SMALL)
        assert reopened.op_min == 9
        head = reopened.op_head
        assert head in (12, 13)
        assert_journal_holds(reopened, (specs + more)[8:head])


def test_retention_with_a_failed_directory_sync_reopens_whole_or_as_a_suffix() -> None:
    storage = MemoryStorage(random.Random(0))
    journal = Journal.open(storage, SMALL)
    specs = append_many(journal, 12, body_size=200)
    journal.sync()
    storage.fail_next("sync")  # The directory sync after removing the first segment fails.
    with pytest.raises(OSError):
        journal.enforce_retention(now_us=10**12, commit=12, expiry_us=0)
    # Whatever the crash keeps of the removal, the journal opens whole or as a suffix.
    storage.crash()
    reopened = Journal.open(storage, SMALL)
    assert reopened.op_min in (1, 5)
    assert_journal_holds(reopened, specs[reopened.op_min - 1 :])
