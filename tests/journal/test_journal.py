"""The journal API: append, read, range reads, lookups, roll, truncate, repair, failures.

Method: small journals on MemoryStorage (and real files where the test says so) whose
contents are compared with the list of records the test appended.
"""

from __future__ import annotations

import random

import pytest

import journal.journal as journal_module
from journal import (
    Journal,
    JournalBroken,
    JournalConfig,
    MemoryStorage,
    OpBeyondHead,
    OpNotRetained,
    RecordFaulty,
    RepairRejected,
)
from journal.record import RECORD_HEADER_SIZE
from tests.journal.helpers import (
    Disk,
    Spec,
    append,
    append_many,
    assert_journal_holds,
    assert_record,
    flip,
    log_name,
    make_body,
    position_of,
)


def _memory_journal(segment_size: int = 1 << 20) -> tuple[MemoryStorage, Journal]:
    storage = MemoryStorage(random.Random(0))
    return storage, Journal.open(storage, JournalConfig(segment_size_bytes_max=segment_size))


def test_journal_empty_has_no_head_and_reads_nothing() -> None:
    _, journal = _memory_journal()
    assert journal.op_head == 0
    assert journal.op_durable == 0
    assert journal.op_min == 0
    assert journal.offset_next is None
    assert journal.read_messages(0, count_max=10, size_max=100) == []
    assert journal.op_for_offset(0) is None
    assert journal.op_for_timestamp(0) is None
    assert journal.sync() == 0
    with pytest.raises(OpNotRetained):
        journal.read_record(1)


def test_journal_append_is_readable_at_once_and_durable_after_sync(disk: Disk) -> None:
    journal = disk.open()
    specs = append_many(journal, 5)
    assert journal.op_head == 5
    assert journal.op_durable == 0
    assert_journal_holds(journal, specs)
    assert journal.sync() == 5
    assert journal.op_durable == 5
    journal.close()
    reopened = disk.open()
    assert reopened.op_durable == 5
    assert_journal_holds(reopened, specs)
    reopened.close()


def test_journal_first_append_may_start_anywhere() -> None:
    _, journal = _memory_journal()
    specs = append_many(journal, 3, op_first=1000, offset_first=5000)
    assert journal.op_min == 1000
    assert journal.offset_min == 5000
    assert journal.segments()[0].name == "00000000000000005000"
    assert_journal_holds(journal, specs)


def test_journal_append_out_of_sequence_is_a_bug() -> None:
    _, journal = _memory_journal()
    append_many(journal, 2)
    with pytest.raises(AssertionError):
        append(journal, Spec(op=4, offset=4, message_count=1, timestamp_us=0, body=b""))
    with pytest.raises(AssertionError):
        append(journal, Spec(op=3, offset=5, message_count=1, timestamp_us=0, body=b""))


def test_journal_read_beyond_head_or_below_min_is_a_typed_error() -> None:
    _, journal = _memory_journal()
    append_many(journal, 3, op_first=10)
    with pytest.raises(OpBeyondHead) as beyond:
        journal.read_record(13)
    assert beyond.value.op_head == 12
    with pytest.raises(OpNotRetained) as below:
        journal.read_record(9)
    assert below.value.op_min == 10


def test_journal_rolls_at_the_segment_size_and_names_segments_by_offset() -> None:
    _, journal = _memory_journal(segment_size=1000)
    specs = append_many(journal, 20, body_size=200)  # 328 bytes a record: 4 per segment.
    infos = journal.segments()
    assert [info.op_base for info in infos] == [1, 5, 9, 13, 17]
    assert [info.name for info in infos] == [f"{op * 2 - 2:020}" for op in (1, 5, 9, 13, 17)]
    assert all(info.sealed for info in infos[:-1])
    assert not infos[-1].sealed
    # Soft limit: a segment passes the size by less than one record.
    assert all(1000 <= info.size_bytes < 1000 + specs[0].size for info in infos[:-1])
    assert_journal_holds(journal, specs)


def test_journal_roll_seals_the_active_segment_now() -> None:
    _, journal = _memory_journal()
    append_many(journal, 2)
    journal.roll()
    append_many(journal, 1, op_first=3, offset_first=4)
    assert [info.op_base for info in journal.segments()] == [1, 3]


def test_journal_read_messages_respects_count_size_and_op_max() -> None:
    _, journal = _memory_journal(segment_size=700)
    specs = append_many(journal, 12, body_size=100)  # 2 messages a record, offsets 0..23.

    def ops(offset: int, **bounds: int) -> list[int]:
        count_max = bounds.pop("count_max", 1000)
        size_max = bounds.pop("size_max", 1 << 20)
        return [
            record.header.op
            for record in journal.read_messages(
                offset, count_max=count_max, size_max=size_max, **bounds
            )
        ]

    assert ops(0) == list(range(1, 13))  # Across several segments.
    assert ops(3) == list(range(2, 13))  # Offset 3 is the second message of op 2.
    assert ops(3, count_max=1) == [2]
    assert ops(3, count_max=2) == [2, 3]
    assert ops(2, count_max=2) == [2]
    assert ops(0, size_max=250) == [1, 2]
    assert ops(0, size_max=1) == [1]  # The first record comes whatever its size.
    assert ops(0, op_max=4) == [1, 2, 3, 4]
    assert ops(20, op_max=4) == []
    assert ops(23) == [12]
    assert ops(24) == []
    records = journal.read_messages(0, count_max=1000, size_max=1 << 20)
    for record, spec in zip(records, specs, strict=True):
        assert_record(record, spec)


def test_journal_lookups_by_offset_and_timestamp_are_exact() -> None:
    _, journal = _memory_journal(segment_size=500)
    timestamps = [100, 200, 150, 300, 300, 250, 400, 500]  # The clock steps back twice.
    offset = 0
    for i, timestamp in enumerate(timestamps):
        op = i + 1
        append(journal, Spec(op, offset, op, timestamp, make_body(op, 100)))
        offset += op
    for target in range(offset):
        found = journal.op_for_offset(target)
        assert found is not None
        first = sum(range(1, found))
        assert first <= target < first + found
    assert journal.op_for_offset(offset) is None
    for target in range(0, 600, 25):
        expected = next((i + 1 for i, t in enumerate(timestamps) if t >= target), None)
        assert journal.op_for_timestamp(target) == expected, target


def test_journal_truncate_cuts_back_into_sealed_segments_and_is_durable(disk: Disk) -> None:
    journal = disk.open(JournalConfig(segment_size_bytes_max=700))
    specs = append_many(journal, 12)
    journal.sync()
    assert journal.truncate(5) == 5
    assert journal.op_durable == 5
    assert journal.segments()[-1].op_last == 5
    more = append_many(journal, 3, op_first=6, offset_first=10, timestamp_first_us=7)
    assert_journal_holds(journal, specs[:5] + more)
    journal.sync()
    journal.close()
    reopened = disk.open()
    assert_journal_holds(reopened, specs[:5] + more)
    reopened.close()


def test_journal_truncate_after_a_crash_never_brings_cut_records_back() -> None:
    for seed in range(30):
        storage = MemoryStorage(random.Random(seed))
        journal = Journal.open(storage, JournalConfig(segment_size_bytes_max=700))
        specs = append_many(journal, 12)
        journal.sync()
        journal.truncate(4)
        storage.crash()
        reopened = Journal.open(storage)
        assert_journal_holds(reopened, specs[:4])


def test_journal_truncate_to_empty_then_append_again() -> None:
    _, journal = _memory_journal()
    append_many(journal, 3)
    assert journal.truncate(0) == 0
    assert journal.segments() == []
    specs = append_many(journal, 2)
    assert_journal_holds(journal, specs)


def test_journal_repair_rejects_what_does_not_fit(disk: Disk) -> None:
    journal = disk.open()
    specs = append_many(journal, 4)
    journal.close()
    storage = disk.storage()
    flip(storage, log_name(), position_of(specs, 2) + RECORD_HEADER_SIZE + 3)
    journal = Journal.open(storage)
    assert journal.faulty_ops() == [2]
    with pytest.raises(RepairRejected):
        journal.repair(3, specs[2].record())  # Not faulty.
    with pytest.raises(RepairRejected):
        journal.repair(2, specs[2].record())  # Another op's record.
    wrong_size = Spec(2, specs[1].offset, 2, 0, b"short")
    with pytest.raises(RepairRejected):
        journal.repair(2, wrong_size.record())
    wrong_offset = Spec(2, 99, 2, 0, specs[1].body)
    with pytest.raises(RepairRejected):
        journal.repair(2, wrong_offset.record())
    record = specs[1].record()
    forged = type(record)(record.header, memoryview(bytes(len(specs[1].body))))
    with pytest.raises(RepairRejected):
        journal.repair(2, forged)  # Body does not match its checksum.
    with pytest.raises(RecordFaulty):
        journal.read_record(2)
    journal.repair(2, specs[1].record())
    assert_journal_holds(journal, specs)
    journal.close()


def test_journal_read_finds_new_media_damage_and_marks_it_faulty() -> None:
    storage, journal = _memory_journal()
    specs = append_many(journal, 5)
    journal.sync()
    storage.corrupt(log_name(), position_of(specs, 3) + RECORD_HEADER_SIZE, 1)
    with pytest.raises(RecordFaulty):
        journal.read_record(3)
    assert journal.faulty_ops() == [3]
    records = journal.read_messages(0, count_max=100, size_max=1 << 20)
    assert [record.header.op for record in records] == [1, 2]
    with pytest.raises(RecordFaulty):
        journal.read_messages(specs[2].offset, count_max=100, size_max=1 << 20)
    journal.repair(3, specs[2].record())
    assert_journal_holds(journal, specs)


def test_journal_storage_failure_breaks_the_journal() -> None:
    storage, journal = _memory_journal()
    append_many(journal, 2)
    storage.fail_next("sync")
    with pytest.raises(OSError):
        journal.sync()
    assert journal.op_durable == 0
    with pytest.raises(JournalBroken):
        journal.sync()
    with pytest.raises(JournalBroken):
        append_many(journal, 1, op_first=3, offset_first=4)
    storage.crash()
    recovered = Journal.open(storage)
    assert recovered.op_head <= 2


def test_journal_failed_append_changes_nothing_readable() -> None:
    storage, journal = _memory_journal()
    specs = append_many(journal, 2)
    storage.fail_next("write")
    with pytest.raises(OSError):
        append_many(journal, 1, op_first=3, offset_first=4)
    assert journal.op_head == 2
    assert_record(journal.read_record(2), specs[1])


def test_journal_read_failure_surfaces_as_oserror() -> None:
    storage, journal = _memory_journal()
    append_many(journal, 2)
    storage.fail_next("read")
    with pytest.raises(OSError):
        journal.read_record(1)
    assert journal.faulty_ops() == []


def test_journal_range_read_spans_pieces_and_stops_at_later_damage(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Range reads go to disk in pieces (1 MiB here); bodies of one piece share a buffer.
    Damage found in a later piece ends the range there and marks the record faulty."""
    monkeypatch.setattr(journal_module, "READ_PIECE_BYTES", 1024 * 1024)
    journal = disk.open()
    specs = append_many(journal, 9, body_size=300_000)  # 3 records a piece.
    records = journal.read_messages(0, count_max=100, size_max=64 * 1024 * 1024)
    for record, spec in zip(records, specs, strict=True):
        assert_record(record, spec)
    assert records[0].body.obj is records[2].body.obj
    assert records[2].body.obj is not records[3].body.obj
    journal.sync()
    storage = disk.storage() if disk.kind == "memory" else None
    if storage is None:
        journal.close()
        storage = disk.storage()
        journal = Journal.open(storage)
    flip(storage, log_name(), position_of(specs, 8) + RECORD_HEADER_SIZE + 10)
    records = journal.read_messages(0, count_max=100, size_max=64 * 1024 * 1024)
    assert [record.header.op for record in records] == list(range(1, 8))
    assert journal.faulty_ops() == [8]
    journal.repair(8, specs[7].record())
    assert_journal_holds(journal, specs)
    journal.close()
