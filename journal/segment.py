"""Segments: one ``.log`` of records back to back, its ``.index``, and their in-memory columns.

Purpose: a segment is the journal's unit of file, of rolling and of retention. It is named by
the offset of its first message, ``{offset:020}.log`` and ``{offset:020}.index`` (Iggy's
layout), and holds the records of a contiguous run of ops. In memory a segment keeps three
``array('Q')`` columns, one slot per record, so that lookups by op (direct), by message offset
and by timestamp (binary searches) never touch the disk.

Invariants:

1. Record ``i`` of a segment has op ``op_base + i``; ops and offsets are contiguous within and
   across segments: ``offsets[i + 1] == offsets[i] + message_count(i)`` and a segment's
   ``offset_base`` is its first record's offset. A record may hold no message, so
   ``offsets`` is non-decreasing; the record holding message ``m`` is the last one whose
   offset is at most ``m`` (records of no message before it share its offset).
2. ``positions`` is non-decreasing and strictly increasing over valid records; record ``i``
   spans ``[positions[i], positions[i + 1])`` (the last one ends at ``size_bytes``).
3. ``timestamps_max[i]`` is the largest timestamp of the segment's records up to and
   including ``i``, so ``bisect`` finds the first record at or after a time even if a
   primary's clock stepped back. It starts afresh in every segment, so deleting older
   segments never leaves a trace in the ones that stay.
4. Only the last segment of a journal (the active one) is appended to. A sealed segment
   changes only by ``repair`` (which rewrites the exact bytes that were lost) and by
   truncation during a view change (which makes it active again).

Theory of operation: the columns cost 24 bytes per record. Faulty records (see ``recovery``)
have slots too, holding placeholders (the position and offset where their damaged region
starts), so op arithmetic stays direct; the journal never reads a faulty record's slot.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from typing import Final

from journal.storage_api import StorageFile

__all__ = [
    "INDEX_SUFFIX",
    "INDEX_TMP_SUFFIX",
    "LOG_SUFFIX",
    "OFFSET_DIGITS",
    "Segment",
    "parse_segment_name",
    "segment_stem",
]

OFFSET_DIGITS: Final = 20
LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
INDEX_TMP_SUFFIX: Final = ".index.tmp"


def segment_stem(offset_base: int) -> str:
    """The file name of a segment without its suffix: the offset in 20 digits."""
    assert 0 <= offset_base < 10**OFFSET_DIGITS
    return f"{offset_base:0{OFFSET_DIGITS}d}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``(offset_base, suffix)`` of a segment file name, or None for any other file."""
    for suffix in (INDEX_TMP_SUFFIX, LOG_SUFFIX, INDEX_SUFFIX):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            if len(stem) == OFFSET_DIGITS and stem.isascii() and stem.isdigit():
                return int(stem), suffix
            return None
    return None


class Segment:
    """The in-memory state of one segment, and its two files while they are open.

    The journal owns the files: a sealed segment's are None while released, and opened
    again when a read, repair or truncation needs them (``journal.journal``, invariant 7).
    """

    __slots__ = (
        "index",
        "log",
        "offset_base",
        "offset_next",
        "offsets",
        "op_base",
        "positions",
        "size_bytes",
        "timestamps_max",
    )

    def __init__(
        self,
        *,
        offset_base: int,
        op_base: int,
        log: StorageFile | None,
        index: StorageFile | None,
    ) -> None:
        assert offset_base >= 0
        assert op_base >= 1
        self.offset_base = offset_base
        self.op_base = op_base
        self.log = log
        self.index = index
        self.size_bytes = 0
        self.offset_next = offset_base
        self.positions = array("Q")
        self.offsets = array("Q")
        self.timestamps_max = array("Q")

    @property
    def stem(self) -> str:
        return segment_stem(self.offset_base)

    @property
    def record_count(self) -> int:
        return len(self.positions)

    @property
    def op_last(self) -> int:
        """The op of the last record (``op_base - 1`` while the segment is empty)."""
        return self.op_base + len(self.positions) - 1

    @property
    def timestamp_max_us(self) -> int:
        """The largest timestamp in this segment (0 while it is empty)."""
        return self.timestamps_max[-1] if self.timestamps_max else 0

    def slot(self, op: int) -> int:
        """The record slot of ``op``, which must be in this segment."""
        slot = op - self.op_base
        assert 0 <= slot < len(self.positions), (op, self.op_base, len(self.positions))
        return slot

    def extent(self, slot: int) -> tuple[int, int]:
        """``(position, end)`` of record ``slot`` in the log."""
        assert 0 <= slot < len(self.positions)
        position = self.positions[slot]
        end = self.positions[slot + 1] if slot + 1 < len(self.positions) else self.size_bytes
        assert position <= end
        return position, end

    def message_count(self, slot: int) -> int:
        """Messages in record ``slot``, from the offset column."""
        assert 0 <= slot < len(self.offsets)
        end = self.offsets[slot + 1] if slot + 1 < len(self.offsets) else self.offset_next
        return end - self.offsets[slot]

    def add(self, *, position: int, offset: int, message_count: int, timestamp_us: int) -> None:
        """Appends the slot of one record that ends at ``size_bytes`` (already advanced)."""
        assert offset == self.offset_next
        assert message_count >= 0
        assert position >= (self.positions[-1] if self.positions else 0)
        assert position <= self.size_bytes
        self.positions.append(position)
        self.offsets.append(offset)
        self.timestamps_max.append(max(self.timestamp_max_us, timestamp_us))
        self.offset_next = offset + message_count

    def cut(self, record_count: int) -> None:
        """Keeps only the first ``record_count`` slots; the log ends where the next began."""
        assert 0 <= record_count <= len(self.positions)
        if record_count == len(self.positions):
            return
        self.size_bytes = self.positions[record_count]
        self.offset_next = self.offsets[record_count]
        del self.positions[record_count:]
        del self.offsets[record_count:]
        del self.timestamps_max[record_count:]

    def find_offset(self, offset: int) -> int:
        """The slot of the record holding message ``offset`` (within this segment)."""
        assert self.offset_base <= offset < self.offset_next
        slot = bisect_right(self.offsets, offset) - 1
        assert 0 <= slot < len(self.offsets)
        return slot

    @property
    def message_total(self) -> int:
        """Messages in this segment (0: it holds only records of no message)."""
        return self.offset_next - self.offset_base

    def find_timestamp(self, timestamp_us: int) -> int:
        """The first slot whose record is at or after ``timestamp_us`` (may be past the end)."""
        return bisect_left(self.timestamps_max, timestamp_us)

    def raise_timestamps(self, slot: int, timestamp_us: int) -> None:
        """Lifts the running maximum from ``slot`` on to at least ``timestamp_us``.

        Used when a repaired record's own timestamp, unknown while it was damaged, is
        larger than the running maximum its slot held.
        """
        assert 0 <= slot <= len(self.timestamps_max)
        for i in range(slot, len(self.timestamps_max)):
            if self.timestamps_max[i] >= timestamp_us:
                break  # Every later slot is at least as large already.
            self.timestamps_max[i] = timestamp_us
