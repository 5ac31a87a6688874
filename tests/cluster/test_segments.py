"""The harness's outside reader of segment files, and the tail damage it injects.

Real journals are written with ``journal.Journal`` on ``FileStorage``; the harness's own
parser (written from ``docs/journal.md``) must find the same records, and the damage it
injects must be what the journal's recovery then sees: a torn tail or a damaged record.
"""

from __future__ import annotations

import random
from pathlib import Path

from bench.chaos import segments
from journal import Journal, JournalConfig
from journal.storage import FileStorage

RECORDS = 40


def _write_journal(directory: Path, *, segment_size: int = 1 << 20) -> None:
    directory.mkdir(parents=True)
    journal = Journal.open(
        FileStorage(str(directory)), JournalConfig(segment_size_bytes_max=segment_size)
    )
    offset = 0
    for op in range(1, RECORDS + 1):
        body = bytes([op % 251]) * (50 + op * 7)
        # Every fifth op holds no message, as a partition's control ops (a consumer
        # offset, a purge, a retention) are written: the reader must walk past it.
        count = 0 if op % 5 == 0 else 1
        journal.append(
            body,
            op=op,
            view=1,
            client_id=7,
            request=op,
            offset=offset,
            message_count=count,
            timestamp_us=1000 + op,
        )
        offset += count
    journal.sync()
    journal.close()


def _reopen(directory: Path) -> Journal:
    return Journal.open(FileStorage(str(directory)), JournalConfig(segment_size_bytes_max=1 << 20))


def test_reader_finds_every_record_the_journal_wrote_across_segments(tmp_path: Path) -> None:
    _write_journal(tmp_path / "j", segment_size=4096)
    files = segments.segments(tmp_path / "j")
    assert len(files) > 1
    ops = [span.op for path in files for span in segments.walk(path)]
    assert ops == list(range(1, RECORDS + 1))
    digests = segments.record_digests(tmp_path / "j", op_max=30)
    assert sorted(digests) == list(range(1, 31))
    assert len(set(digests.values())) == 30


def test_identical_journals_have_identical_record_digests(tmp_path: Path) -> None:
    _write_journal(tmp_path / "a")
    _write_journal(tmp_path / "b")
    assert segments.record_digests(tmp_path / "a", 99) == segments.record_digests(
        tmp_path / "b", 99
    )


def test_truncate_tail_leaves_a_torn_tail_that_recovery_cuts(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    _write_journal(directory)
    done = segments.truncate_tail(directory, random.Random(3))
    assert "truncated" in done
    kept = [s.op for p in segments.segments(directory) for s in segments.walk(p)]
    assert RECORDS - 3 <= len(kept) < RECORDS
    journal = _reopen(directory)
    try:
        assert journal.op_head == len(kept)
    finally:
        journal.close()


def test_corrupt_tail_damages_one_of_the_last_records(tmp_path: Path) -> None:
    directory = tmp_path / "j"
    _write_journal(directory)
    before = segments.record_digests(directory, 99)
    done = segments.corrupt_tail(directory, random.Random(5))
    assert "flipped" in done
    after = segments.record_digests(directory, 99)
    assert after != before
    damaged = [op for op in before if after.get(op) != before[op]]
    assert damaged and min(damaged) >= RECORDS - 2
    journal = _reopen(directory)  # recovery must cope: a torn tail or a faulty record
    try:
        report = journal.recovery
        assert report.tail_truncated_bytes > 0 or report.faulty_regions
    finally:
        journal.close()


def test_journal_dirs_names_groups_as_the_node_lays_them_out(tmp_path: Path) -> None:
    (tmp_path / "metadata" / "journal").mkdir(parents=True)
    (tmp_path / "partitions" / "0-1-2-7" / "journal").mkdir(parents=True)
    (tmp_path / "partitions" / "stray-file").write_text("")
    assert segments.journal_dirs(tmp_path) == {
        "metadata": tmp_path / "metadata" / "journal",
        "0-1-2-7": tmp_path / "partitions" / "0-1-2-7" / "journal",
    }
