"""Recovery: torn tails, damage in the middle, missing and disagreeing indexes.

Method: each named test builds a journal, closes it (everything synced), damages the files
through the Storage protocol exactly as a crash or a bad disk would, reopens, and checks
what was kept, what was cut, what is reported faulty, and that the damage is repaired on
disk. Every test runs on MemoryStorage and on real files (the ``disk`` fixture); the
crash-driven variants use MemoryStorage's crash model directly.
"""

from __future__ import annotations

import random

import pytest

from journal import Journal, JournalConfig, MemoryStorage, RecordFaulty, RecoveryError
from journal.index import INDEX_ENTRY_SIZE, parse_entries
from journal.record import RECORD_HEADER_SIZE, encode_header
from tests.journal.helpers import (
    Disk,
    Spec,
    append,
    append_many,
    assert_journal_holds,
    cut,
    flip,
    index_name,
    log_name,
    overwrite,
    position_of,
    read_file,
    remove,
)

SMALL = JournalConfig(segment_size_bytes_max=1000)


# --- Torn tail ---------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0, 1, RECORD_HEADER_SIZE - 1, RECORD_HEADER_SIZE, 150])
def test_recovery_torn_tail_is_cut_and_reported(disk: Disk, keep: int) -> None:
    """Torn tail: the last record reached the disk only in part."""
    journal = disk.open()
    specs = append_many(journal, 5)
    journal.close()
    storage = disk.storage()
    cut(storage, log_name(), position_of(specs, 5) + keep)
    reopened = Journal.open(storage)
    assert_journal_holds(reopened, specs[:4])
    assert reopened.recovery.tail_truncated_bytes == keep
    assert reopened.recovery.tail_debris  # the file ends inside the record
    assert reopened.recovery.faulty_regions == ()
    # The index lost its entry for the cut record, on disk too.
    assert len(read_file(storage, index_name())) == 4 * INDEX_ENTRY_SIZE
    assert reopened.op_durable == 4
    append_many(reopened, 1, op_first=5, offset_first=8)
    reopened.close()
    assert disk.open().op_head == 5


def test_recovery_torn_tail_of_garbage_after_the_last_record_is_cut(disk: Disk) -> None:
    """Torn tail: zeros and junk after the last whole record (a torn extension)."""
    journal = disk.open()
    specs = append_many(journal, 3)
    journal.close()
    storage = disk.storage()
    end = position_of(specs, 4)
    overwrite(storage, log_name(), end, bytes(40) + b"\xff" * 300)
    reopened = Journal.open(storage)
    assert_journal_holds(reopened, specs)
    assert reopened.recovery.tail_truncated_bytes == 340
    assert reopened.recovery.tail_debris  # zeros where a record's checksum would be
    assert len(read_file(storage, log_name())) == end


def test_recovery_torn_tail_spanning_a_new_segment_removes_it(disk: Disk) -> None:
    """Torn tail: the segment rolled, and neither its first record nor the end of the one
    before it reached the disk whole."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 12, body_size=200)  # 4 records a segment.
    journal.close()
    storage = disk.storage()
    cut(storage, log_name(16), 50)  # Segment of ops 9..12: a stump of op 9.
    cut(storage, log_name(8), 3 * specs[0].size + 10)  # Op 8 torn too.
    reopened = Journal.open(storage, SMALL)
    assert_journal_holds(reopened, specs[:7])
    assert log_name(16) in reopened.recovery.segments_removed
    assert reopened.recovery.tail_debris  # op 8 is torn: nothing after it was durable
    assert log_name(16) not in storage.names()
    assert index_name(16) not in storage.names()


def test_recovery_crash_keeps_every_synced_record() -> None:
    """Torn tail by crash: a seed sweep over MemoryStorage crashes after unsynced appends.

    The journal keeps every synced record; of the unsynced ones it keeps a prefix, and
    possibly records after a lost one (a later write reached the disk, an earlier did not),
    which it reports as damaged and which are then repaired as from a peer."""
    torn = 0
    repaired = 0
    for seed in range(60):
        storage = MemoryStorage(random.Random(seed))
        journal = Journal.open(storage, SMALL)
        specs = append_many(journal, 6, body_size=150)
        journal.sync()
        specs += append_many(journal, 4, body_size=150, op_first=7, offset_first=12)
        storage.crash()
        reopened = Journal.open(storage, SMALL)
        head = reopened.op_head
        assert head >= 6
        faulty = reopened.faulty_ops()
        for spec in specs[:head]:
            if spec.op in faulty:
                assert spec.op > 6
                reopened.repair(spec.op, spec.record())
                repaired += 1
        assert_journal_holds(reopened, specs[:head])
        torn += reopened.recovery.tail_truncated_bytes > 0
        # A crash leaves only debris: an unfinished write, or zeros where earlier writes
        # never arrived. Rot of a durable record would not look like either.
        assert reopened.recovery.tail_debris
    assert torn > 0
    assert repaired > 0  # Some crashes kept a later write while losing earlier ones.


@pytest.mark.parametrize("where", ["body", "header", "checksum"])
def test_recovery_corrupt_last_record_is_cut_and_not_called_debris(disk: Disk, where: str) -> None:
    """Corrupt head: the last record, durable and whole, rots. Nothing after it bounds the
    damage, so it is cut like a torn tail; but it is whole and its checksum is not zero, so
    the report must not call it debris (consensus may have acknowledged it)."""
    journal = disk.open()
    specs = append_many(journal, 5)
    journal.close()
    storage = disk.storage()
    offset = {"body": RECORD_HEADER_SIZE + 50, "header": 60, "checksum": 0}[where]
    flip(storage, log_name(), position_of(specs, 5) + offset)
    reopened = Journal.open(storage)
    assert_journal_holds(reopened, specs[:4])
    assert reopened.recovery.tail_truncated_bytes == specs[4].size
    assert not reopened.recovery.tail_debris


def test_recovery_torn_tail_of_junk_as_long_as_a_record_is_not_called_debris(
    disk: Disk,
) -> None:
    """A tail that could be a rotted whole record (junk with a non-zero checksum field)
    is cut, and the report says it may have been durable."""
    journal = disk.open()
    specs = append_many(journal, 3)
    journal.close()
    storage = disk.storage()
    overwrite(storage, log_name(), position_of(specs, 4), b"\xff" * 300)
    reopened = Journal.open(storage)
    assert_journal_holds(reopened, specs)
    assert reopened.recovery.tail_truncated_bytes == 300
    assert not reopened.recovery.tail_debris


def test_recovery_clean_journal_has_a_tail_of_no_durable_record(disk: Disk) -> None:
    journal = disk.open()
    append_many(journal, 3)
    journal.close()
    reopened = disk.open()
    assert reopened.recovery.tail_truncated_bytes == 0
    assert reopened.recovery.tail_debris


# --- Damage in the middle ----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["body", "header", "checksum"])
def test_recovery_corrupt_middle_record_is_reported_and_repairable(disk: Disk, where: str) -> None:
    """Corrupt middle: one record in the middle of a segment rots; the ones after it stay."""
    journal = disk.open()
    specs = append_many(journal, 6)
    journal.close()
    storage = disk.storage()
    position = (
        position_of(specs, 3)
        + {"body": RECORD_HEADER_SIZE + 50, "header": 60, "checksum": 0}[where]
    )
    flip(storage, log_name(), position)
    reopened = Journal.open(storage)
    assert reopened.op_head == 6
    assert reopened.faulty_ops() == [3]
    (region,) = reopened.recovery.faulty_regions
    assert (region.position_start, region.position_end) == (
        position_of(specs, 3),
        position_of(specs, 4),
    )
    assert (region.offset_first, region.offset_end) == (specs[2].offset, specs[3].offset)
    assert reopened.recovery.tail_truncated_bytes == 0
    with pytest.raises(RecordFaulty):
        reopened.read_record(3)
    for spec in specs[:2] + specs[3:]:
        assert reopened.read_record(spec.op).header.op == spec.op
    records = reopened.read_messages(0, count_max=100, size_max=1 << 20)
    assert [record.header.op for record in records] == [1, 2]  # Reads stop before it.
    records = reopened.read_messages(specs[3].offset, count_max=100, size_max=1 << 20)
    assert [record.header.op for record in records] == [4, 5, 6]
    # Appends go on while the record awaits repair.
    more = append_many(reopened, 1, op_first=7, offset_first=12)
    reopened.close()
    # Still reported after another restart (the index was not rebuilt over the hint).
    again = disk.open()
    assert again.faulty_ops() == [3]
    again.repair(3, specs[2].record())
    assert_journal_holds(again, specs + more)
    again.close()
    clean = disk.open()
    assert clean.recovery.faulty_regions == ()
    assert_journal_holds(clean, specs + more)
    clean.close()


def test_recovery_corrupt_last_record_of_a_sealed_segment_is_faulty_not_torn(disk: Disk) -> None:
    """Corrupt middle at a segment's end: the next segment's first record bounds it."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 10, body_size=200)  # Ops 1..4, 5..8, 9..10.
    journal.close()
    storage = disk.storage()
    flip(storage, log_name(0), position_of(specs[:4], 4) + 5)  # Op 4's header.
    reopened = Journal.open(storage, SMALL)
    assert reopened.op_head == 10
    assert reopened.faulty_ops() == [4]
    reopened.repair(4, specs[3].record())
    assert_journal_holds(reopened, specs)


def test_recovery_damaged_run_of_records_is_numbered_by_the_record_after_it(disk: Disk) -> None:
    """Corrupt middle: several records and their index entries rot together; the first
    valid index entry after them bounds the run, and repairs go in op order."""
    journal = disk.open()
    specs = append_many(journal, 8)
    journal.close()
    storage = disk.storage()
    for op in (3, 4, 5):
        flip(storage, log_name(), position_of(specs, op) + 20)
        overwrite(storage, index_name(), (op - 1) * INDEX_ENTRY_SIZE, b"\xee" * INDEX_ENTRY_SIZE)
    reopened = Journal.open(storage)
    assert reopened.faulty_ops() == [3, 4, 5]
    assert reopened.op_head == 8
    with pytest.raises(Exception, match="repair op 3 first"):
        reopened.repair(4, specs[3].record())
    for op in (3, 4, 5):
        reopened.repair(op, specs[op - 1].record())
    assert_journal_holds(reopened, specs)
    reopened.close()


def test_recovery_truncate_inside_a_damaged_run_cuts_at_its_start() -> None:
    storage = MemoryStorage(random.Random(0))
    journal = Journal.open(storage)
    specs = append_many(journal, 8)
    journal.close()
    for op in (3, 4, 5):
        storage.corrupt(log_name(), position_of(specs, op) + 20, 1)
        storage.corrupt(index_name(), (op - 1) * INDEX_ENTRY_SIZE + 24, 8)
    reopened = Journal.open(storage)
    assert reopened.faulty_ops() == [3, 4, 5]
    assert reopened.truncate(5) == 5  # The whole run is kept: its end is known.
    assert reopened.truncate(4) == 2  # Inside it the boundaries are not.
    assert reopened.faulty_ops() == []
    more = append_many(reopened, 2, op_first=3, offset_first=4)
    assert_journal_holds(reopened, specs[:2] + more)


def test_recovery_header_damage_without_any_index_is_cut_as_a_torn_tail(disk: Disk) -> None:
    """The limit of what a log alone can prove: with the header's length unreadable and no
    index entry after it, nothing locates the next record (no magic-marker search), so the
    damage and everything after it is cut, and the report says how much."""
    journal = disk.open()
    specs = append_many(journal, 5)
    journal.close()
    storage = disk.storage()
    remove(storage, index_name())
    flip(storage, log_name(), position_of(specs, 3) + 20)
    reopened = Journal.open(storage)
    assert_journal_holds(reopened, specs[:2])
    assert reopened.recovery.tail_truncated_bytes == sum(spec.size for spec in specs[2:])


def test_recovery_damage_on_both_sides_of_a_segment_start_is_cut(disk: Disk) -> None:
    """Damage that nothing bounds: the end of one segment and the start of the next both
    rot, so the ops in between cannot be numbered. Everything from the first damage on is
    cut as torn tail (after a crash this is unsynced debris) and the report says so."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 10, body_size=200)
    journal.close()
    storage = disk.storage()
    flip(storage, log_name(0), position_of(specs[:4], 4) + 5)  # Op 4, end of segment 1.
    flip(storage, log_name(8), 5)  # Op 5, start of segment 2.
    reopened = Journal.open(storage, SMALL)
    assert_journal_holds(reopened, specs[:3])
    assert reopened.recovery.tail_truncated_bytes == sum(spec.size for spec in specs[3:])
    assert reopened.recovery.segments_removed == (
        log_name(8),
        index_name(8),
        log_name(16),
        index_name(16),
    )


def test_recovery_a_missing_middle_segment_cuts_the_segments_after_it(disk: Disk) -> None:
    """Records between two segments are missing (a segment whose name outlived its data, or
    a lost file): the journal ends before the gap."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 12, body_size=200)
    journal.close()
    storage = disk.storage()
    remove(storage, log_name(8))
    reopened = Journal.open(storage, SMALL)
    assert_journal_holds(reopened, specs[:4])
    assert log_name(16) in reopened.recovery.segments_removed
    assert index_name(8) in reopened.recovery.files_removed


def test_recovery_an_empty_segment_in_the_middle_cuts_from_there(disk: Disk) -> None:
    """A segment's name became durable but none of its records did, while a later segment's
    first record reached the disk: that record was never covered by a sync, so it goes."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 12, body_size=200)
    journal.close()
    storage = disk.storage()
    cut(storage, log_name(8), 0)
    cut(storage, index_name(8), 0)
    reopened = Journal.open(storage, SMALL)
    assert_journal_holds(reopened, specs[:4])


def test_recovery_records_out_of_sequence_refuse_to_open(disk: Disk) -> None:
    """Two valid records whose ops do not follow cannot come from a crash: refuse."""
    journal = disk.open()
    specs = append_many(journal, 3)
    journal.close()
    storage = disk.storage()
    header, _ = encode_header(
        specs[1].body,
        op=7,
        view=1,
        client_id=specs[1].client_id,
        request=2,
        offset=specs[1].offset,
        message_count=2,
        timestamp_us=specs[1].timestamp_us,
    )
    overwrite(storage, log_name(), position_of(specs, 2), bytes(header))
    with pytest.raises(RecoveryError):
        Journal.open(storage)


def test_recovery_damaged_tail_of_a_sealed_segment_may_be_repaired_to_any_length(
    disk: Disk,
) -> None:
    """An open-ended region: the last record of a sealed segment is torn short, and the next
    segment starts with a valid record. The repair writes the whole record and fixes the
    segment's length."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 8, body_size=200)  # Ops 1..4 in segment 0, 5..8 in 8.
    journal.close()
    storage = disk.storage()
    end = position_of(specs[:4], 4)
    cut(storage, log_name(0), end + 100)  # Op 4 torn short.
    reopened = Journal.open(storage, SMALL)
    (region,) = reopened.faulty_regions()
    assert region.open_end
    assert (region.op_first, region.op_last) == (4, 4)
    assert region.position_end == end + 100
    reopened.repair(4, specs[3].record())
    assert_journal_holds(reopened, specs)
    reopened.close()
    assert len(read_file(storage, log_name(0))) == end + specs[3].size
    assert Journal.open(disk.storage(), SMALL).recovery.faulty_regions == ()


def test_recovery_first_record_damaged_takes_its_op_from_the_index(disk: Disk) -> None:
    journal = disk.open()
    specs = append_many(journal, 3, op_first=40, offset_first=100)
    journal.close()
    storage = disk.storage()
    flip(storage, log_name(100), 3)
    reopened = Journal.open(storage)
    assert reopened.faulty_ops() == [40]
    assert reopened.op_min == 40
    reopened.repair(40, specs[0].record())
    assert_journal_holds(reopened, specs)


# --- Indexes ------------------------------------------------------------------------------------


def test_recovery_missing_index_is_rebuilt(disk: Disk) -> None:
    """Missing index: the log is walked and the index written anew, through a rename."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 10, body_size=200)
    journal.close()
    storage = disk.storage()
    original = read_file(storage, index_name(8))
    remove(storage, index_name(8))
    reopened = Journal.open(storage, SMALL)
    assert reopened.recovery.indexes_rebuilt == ("00000000000000000008",)
    assert read_file(storage, index_name(8)) == original
    assert not [name for name in storage.names() if name.endswith(".tmp")]
    assert_journal_holds(reopened, specs)


def test_recovery_disagreeing_index_is_rebuilt(disk: Disk) -> None:
    """Disagreeing index: an entry in the middle points at the wrong place."""
    journal = disk.open()
    specs = append_many(journal, 6)
    journal.close()
    storage = disk.storage()
    original = read_file(storage, index_name())
    overwrite(storage, index_name(), 2 * INDEX_ENTRY_SIZE + 24, (7).to_bytes(8, "little"))
    reopened = Journal.open(storage)
    assert reopened.recovery.indexes_rebuilt == ("00000000000000000000",)
    assert reopened.recovery.faulty_regions == ()
    assert read_file(storage, index_name()) == original
    assert_journal_holds(reopened, specs)


def test_recovery_index_of_another_segment_is_rebuilt(disk: Disk) -> None:
    """Disagreeing index: a whole index that belongs to different records."""
    journal = disk.open(SMALL)
    specs = append_many(journal, 8, body_size=200)
    journal.close()
    storage = disk.storage()
    wrong = read_file(storage, index_name(8))
    cut(storage, index_name(0), 0)
    overwrite(storage, index_name(0), 0, wrong)
    reopened = Journal.open(storage, SMALL)
    assert "00000000000000000000" in reopened.recovery.indexes_rebuilt
    assert_journal_holds(reopened, specs)
    entries = parse_entries(read_file(storage, index_name(0)))
    assert [entry.op for entry in entries] == [1, 2, 3, 4]


@pytest.mark.parametrize("change", ["short", "long", "partial"])
def test_recovery_index_tail_is_repaired_in_place(disk: Disk, change: str) -> None:
    """Disagreeing index tail: entries lost, extra, or torn; fixed without a rewrite."""
    journal = disk.open()
    specs = append_many(journal, 5)
    journal.close()
    storage = disk.storage()
    original = read_file(storage, index_name())
    if change == "short":
        cut(storage, index_name(), 2 * INDEX_ENTRY_SIZE)
    elif change == "long":
        overwrite(storage, index_name(), len(original), original[:INDEX_ENTRY_SIZE])
    else:
        cut(storage, index_name(), len(original) - 5)
    reopened = Journal.open(storage)
    assert reopened.recovery.indexes_repaired == ("00000000000000000000",)
    assert reopened.recovery.indexes_rebuilt == ()
    assert read_file(storage, index_name()) == original
    assert_journal_holds(reopened, specs)


def test_recovery_leftovers_are_removed(disk: Disk) -> None:
    """An orphan index (its log deleted by retention) and an unfinished index rebuild."""
    journal = disk.open()
    specs = append_many(journal, 2)
    journal.close()
    storage = disk.storage()
    storage.create(index_name(500)).close()
    storage.create("00000000000000000000.index.tmp").close()
    storage.create("superblock.a").close()  # Not the journal's: left alone.
    storage.sync_directory()
    reopened = Journal.open(storage)
    assert sorted(reopened.recovery.files_removed) == [
        "00000000000000000000.index.tmp",
        index_name(500),
    ]
    assert storage.names() == [index_name(), log_name(), "superblock.a"]
    assert_journal_holds(reopened, specs)


def test_recovery_a_crash_during_an_index_rebuild_keeps_the_old_hints() -> None:
    """The index of a segment with a damaged header must be rebuilt (one entry disagrees);
    the rebuild fails and the node crashes. The old index is still whole, so the next open
    still steps over the damage instead of cutting everything after it."""
    for seed in range(20):
        storage = MemoryStorage(random.Random(seed))
        journal = Journal.open(storage)
        specs = append_many(journal, 6)
        journal.close()
        storage.corrupt(log_name(), position_of(specs, 3) + 5, 1)
        storage.corrupt(index_name(), 8, 8)  # Entry of op 1: its offset disagrees.
        storage.fail_next("sync", "00000000000000000000.index.tmp")
        with pytest.raises(OSError):
            Journal.open(storage)
        storage.crash()
        reopened = Journal.open(storage)
        assert reopened.faulty_ops() == [3]
        assert reopened.op_head == 6
        assert reopened.recovery.indexes_rebuilt == ("00000000000000000000",)
        reopened.repair(3, specs[2].record())
        assert_journal_holds(reopened, specs)


def test_recovery_is_idempotent_on_a_clean_journal(disk: Disk) -> None:
    journal = disk.open(SMALL)
    specs = append_many(journal, 9, body_size=200)
    journal.close()
    for _ in range(2):
        reopened = disk.open(SMALL)
        report = reopened.recovery
        assert report.segment_count == 3
        assert report.record_count == 9
        assert report.tail_truncated_bytes == 0
        assert report.indexes_rebuilt == report.indexes_repaired == ()
        assert report.files_removed == report.segments_removed == ()
        assert_journal_holds(reopened, specs)
        reopened.close()


def test_recovery_everything_torn_leaves_an_empty_journal(disk: Disk) -> None:
    journal = disk.open()
    append_many(journal, 1)
    journal.close()
    storage = disk.storage()
    cut(storage, log_name(), 60)
    reopened = Journal.open(storage)
    assert reopened.op_head == 0
    assert reopened.recovery.segments_removed == (log_name(), index_name())
    assert storage.names() == []


# --- Records of no message at the end of a sealed segment ---------------------------------------


def _segment_ending_with_records_of_no_message(disk: Disk) -> tuple[Journal, list[Spec]]:
    """Op 1 holds a message; ops 2..4 hold none and fill segment 0 (600 bytes); op 5, of no
    message either, starts segment 1 (named 1, as segment 0's offsets end there); op 6
    holds a message."""
    journal = disk.open(JournalConfig(segment_size_bytes_max=600))
    specs = [Spec(1, 0, 1, 1_000, bytes(88))]
    specs += [Spec(op, 1, 0, 1_000 + op, b"") for op in (2, 3, 4, 5)]
    specs.append(Spec(6, 1, 1, 1_006, bytes(10)))
    for spec in specs:
        append(journal, spec)
    assert [(info.op_base, info.name) for info in journal.segments()] == [
        (1, f"{0:020}"),
        (5, f"{1:020}"),
    ]
    journal.close()
    return journal, specs


def test_recovery_lost_records_of_no_message_ending_a_sealed_segment_are_repairable(
    disk: Disk,
) -> None:
    """Ops 3 and 4 never reached segment 0 while segment 1 did: the offsets show no gap
    (they hold no message), and segment 1's first op tells they are missing. They are kept
    as a region of no bytes at the end of segment 0, not refused as out of sequence."""
    _, specs = _segment_ending_with_records_of_no_message(disk)
    storage = disk.storage()
    cut(storage, log_name(0), position_of(specs, 3))
    reopened = Journal.open(storage, JournalConfig(segment_size_bytes_max=600))
    (region,) = reopened.faulty_regions()
    assert (region.op_first, region.op_last, region.segment_offset_base) == (3, 4, 0)
    assert region.position_start == region.position_end == position_of(specs, 3)
    assert region.open_end
    reopened.repair(3, specs[2].record())
    reopened.repair(4, specs[3].record())
    assert_journal_holds(reopened, specs)
    reopened.close()
    assert Journal.open(disk.storage()).recovery.faulty_regions == ()


def test_recovery_lost_first_write_of_a_segment_after_records_of_no_message_is_cut(
    disk: Disk,
) -> None:
    """Ops 3..5 never reached the disk, op 6 did: segment 1 starts with a hole. Its op is
    unknown, and the lost ops may lie in either segment, so no region can be numbered;
    nothing from the hole on was durable, so it is cut, and called debris."""
    _, specs = _segment_ending_with_records_of_no_message(disk)
    storage = disk.storage()
    cut(storage, log_name(0), position_of(specs, 3))
    overwrite(storage, log_name(1), 0, bytes(RECORD_HEADER_SIZE))
    reopened = Journal.open(storage, JournalConfig(segment_size_bytes_max=600))
    assert_journal_holds(reopened, specs[:2])
    assert reopened.recovery.tail_debris
    assert reopened.recovery.segments_removed == (log_name(1), index_name(1))


def test_recovery_a_region_of_more_ops_than_its_bytes_hold_is_not_bounded(disk: Disk) -> None:
    """Segment 1's first record rotted (its op unknown), so it is numbered after segment 0's
    last record, op 3; op 6 follows it at byte 128, so ops 3..5 would be in 128 bytes:
    impossible, the numbering is wrong, and the damage is cut rather than kept as a
    region no record could ever fill."""
    _, specs = _segment_ending_with_records_of_no_message(disk)
    storage = disk.storage()
    cut(storage, log_name(0), position_of(specs, 3))
    flip(storage, log_name(1), 0)
    reopened = Journal.open(storage, JournalConfig(segment_size_bytes_max=600))
    assert_journal_holds(reopened, specs[:2])
    assert not reopened.recovery.tail_debris
