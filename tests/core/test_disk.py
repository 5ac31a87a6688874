"""The disk budget's decisions (``broker.core.disk``), from readings given as data."""

from __future__ import annotations

from broker.core.disk import (
    FREE_SHARE_PERCENT_DEFAULT,
    DiskLimits,
    DiskReading,
    DiskUsage,
)
from sdk.wire.codes import Operation

GIB = 1 << 30


def test_a_configured_budget_counts_the_appends_between_readings() -> None:
    usage = DiskUsage(DiskLimits(budget_bytes=10_000, free_min_bytes=100))
    usage.walked(DiskReading(used_bytes=6000, free_bytes=1_000_000, total_bytes=GIB))
    assert not usage.full and usage.budget_bytes == 10_000
    usage.note_appended(4000)
    assert not usage.full  # exactly at the budget
    usage.note_appended(1)
    assert usage.full_reason is not None and "over its budget of 10,000" in usage.full_reason
    usage.walked(DiskReading(used_bytes=6000, free_bytes=1_000_000, total_bytes=GIB))
    assert not usage.full  # a new walk replaces the estimate


def test_a_deletion_gives_room_back_before_the_next_reading() -> None:
    usage = DiskUsage(DiskLimits(budget_bytes=10_000, free_min_bytes=100))
    usage.walked(DiskReading(used_bytes=12_000, free_bytes=1_000_000, total_bytes=GIB))
    full_after = []
    for deleted in (0, 1_999, 1):
        usage.note_deleted(deleted)
        full_after.append(usage.full)
    assert full_after == [True, True, False]
    assert (usage.used_bytes, usage.free_bytes) == (10_000, 1_002_000)


def test_free_space_readings_between_walks_keep_the_appends_since_the_walk() -> None:
    usage = DiskUsage(DiskLimits(budget_bytes=10_000, free_min_bytes=100))
    usage.walked(DiskReading(used_bytes=6000, free_bytes=1_000_000, total_bytes=GIB))
    usage.note_appended(3000)
    usage.read_free(999_000, GIB)  # the file system saw the appends; the usage has not
    assert (usage.used_bytes, usage.free_bytes) == (9000, 999_000)
    usage.note_appended(1001)
    assert usage.full
    assert usage.free_bytes == 999_000 - 1001


def test_the_default_budget_leaves_five_percent_of_the_file_system_free() -> None:
    total = 100 * GIB
    reserve = total * FREE_SHARE_PERCENT_DEFAULT // 100
    usage = DiskUsage(DiskLimits(budget_bytes=None, free_min_bytes=64 << 20))
    assert (usage.budget_bytes, usage.full) == (None, False)  # no reading yet: room
    usage.walked(DiskReading(used_bytes=GIB, free_bytes=reserve, total_bytes=total))
    assert usage.budget_bytes == GIB and not usage.full
    usage.note_appended(1)
    assert usage.full_reason is not None and "5% of its file system free" in usage.full_reason
    # Others' files count too: the budget is what this directory may grow to.
    usage.read_free(reserve - 10 * GIB, total)
    assert usage.budget_bytes == 0 and usage.full


def test_budget_zero_keeps_only_the_free_space_floor() -> None:
    usage = DiskUsage(DiskLimits(budget_bytes=0, free_min_bytes=100))
    usage.walked(DiskReading(used_bytes=99 * GIB, free_bytes=100, total_bytes=100 * GIB))
    assert (usage.budget_bytes, usage.full) == (None, False)
    usage.note_appended(1)
    assert usage.full_reason is not None and "kept free" in usage.full_reason


def test_backups_drop_message_prepares_only_on_an_exhausted_file_system() -> None:
    usage = DiskUsage(DiskLimits(budget_bytes=1000, free_min_bytes=100))
    usage.walked(DiskReading(used_bytes=5000, free_bytes=1_000_000, total_bytes=GIB))
    assert usage.full  # over its budget: its primaries refuse sends ...
    for operation in Operation:
        # ... but as backup it writes whatever its primary prepared (retention included)
        assert not usage.drops_prepare(operation)
    usage.read_free(99, GIB)
    assert usage.exhausted
    assert usage.drops_prepare(Operation.SEND_MESSAGES)
    assert not usage.drops_prepare(Operation.TRUNCATE_PARTITION)  # frees space
    assert not usage.drops_prepare(Operation.STORE_CONSUMER_OFFSET)
