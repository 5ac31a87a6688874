"""Recovery: rebuild a journal's segments from whatever the disk holds after a crash.

Purpose: on open, turn the files of a storage into segments the journal can trust. Walk every
log forward record by record from its start, checking each record's checksums; cut off a
torn tail; keep (and report) damaged records in the middle so consensus can repair them
from a peer; rebuild an index that is missing or disagrees with its log.

Invariants:

1. Nothing is ever found by searching for a byte pattern. A record is located only from
   the start of its segment by walking the lengths of checksummed headers, or from an index
   entry that a valid record at that position confirms (same op).
2. Recovery keeps the longest prefix of the journal in which every op is either a valid
   record or a slot of a *bounded* damaged region, and cuts everything after it as the
   torn tail. A damaged region is bounded if it lies in one segment, starts after a valid
   record (or at the segment's start, its op then known from the record before, its own
   header or its index entry), and ends at a valid record of the same segment or at the
   end of a sealed segment whose successor starts with a valid record; that record's op and
   offset must leave room for at least one record per op in between, and a region that
   ends at a record of its own segment must hold a header's bytes per op. A segment's name
   pins only its first offset, and a sealed segment may end with records of no message:
   when those never reached the disk, the next segment's first op (from its record or its
   intact header) says so, and they become a region of no bytes at the end of the sealed
   segment; when that first record is a write that never arrived, its op is unknown and
   nothing from there on is bounded (nor durable).
3. Valid records out of sequence (an op or offset that does not follow) are not something
   a crash produces under the journal's write discipline: recovery refuses with
   :class:`RecoveryError` rather than guess.
4. When recovery returns, every kept byte is durable: the logs, indexes and directory have
   been synced, because a process crash leaves unsynced data readable in the page cache.
5. Recovery holds the files of one segment at a time (and the last segment's log), so a
   journal of many segments opens with a few descriptors; the segments it returns hold
   open files only for the last (active) one, or for all of them when asked to keep
   sealed files open. If it fails, it has closed every file it opened.

Theory of operation. The journal's durable ops always form a prefix (a sync covers every op
up to its target, in every segment; truncate syncs first; nothing else makes records
durable). Everything after that prefix is debris of unsynced writes: any subset of them
may have reached the disk, in any order, some torn, and a segment's name may be durable
while its contents are not (a directory sync made for another reason). Damage inside the
durable prefix is media corruption: a latent sector error or a misdirected write.

Recovery cannot tell the two apart from the bytes, so it keeps what it can bound and cuts
what it cannot. Cutting debris loses nothing that was promised. Keeping bounded damage
as faulty slots loses nothing either: if it was debris after all, consensus repairs it or
truncates it like any uncommitted op. The only durable data recovery can cut is damage it
cannot bound (a rotted header with no index entry after it, or rot on both sides of a
segment start, or any rot in the last records of the journal); the report says how many
bytes went, and whether they were provably debris (``tail_debris``: where the tail starts
the log ends inside a record, or a write never arrived, and durable records form a prefix).
When they were not, consensus must treat the cut ops as damaged, not as never written: the
replica may have acknowledged them (Protocol-Aware Recovery). A damaged record's extent
comes from its own header when only the body is bad (the length is checksummed), otherwise
from the index entry of a later record. Its records get slots holding placeholders and are
listed as :class:`FaultyRegion`; reads of them raise ``RecordFaulty`` until
``Journal.repair`` writes back the exact record from a peer.

Index reconciliation: the index expected from the walk (placeholders for faulty records,
or the old entry when the old index had one) is compared with the index on disk. If they
differ only after a common prefix (the usual crash: the last entries never reached the
disk, or the torn tail was cut) the index is cut and extended in place; if they differ
earlier, or the index is missing, it is rebuilt whole through ``.index.tmp`` and a rename.
"""

from __future__ import annotations

from bisect import bisect_right
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Final

from journal.errors import RecoveryError
from journal.index import INDEX_ENTRY_SIZE, IndexEntry, encode_entries, parse_entries
from journal.record import RECORD_HEADER_SIZE, RecordHeader, body_matches, parse_header
from journal.retained import RETAINED_NAME, RETAINED_TMP_NAME, RetainedStart, read_retained
from journal.segment import (
    INDEX_SUFFIX,
    INDEX_TMP_SUFFIX,
    LOG_SUFFIX,
    Segment,
    parse_segment_name,
    segment_stem,
)
from journal.storage_api import Storage, StorageFile

__all__ = [
    "FAULTY_REGIONS_MAX",
    "READ_CHUNK_BYTES",
    "FaultyRegion",
    "Recovered",
    "RecoveryReport",
    "placeholder_offset",
    "recover",
]

READ_CHUNK_BYTES: Final = 8 * 1024 * 1024
"""Recovery reads logs in chunks of this size (a larger record is read whole)."""

_CHECKSUM_SIZE: Final = 16
"""The record header's checksum leads it; a record whose checksum is zero does not occur."""

FAULTY_REGIONS_MAX: Final = 1024
"""More damaged regions than this and the disk is not worth trusting: refuse to open."""


@dataclass(frozen=True, slots=True)
class FaultyRegion:
    """A run of damaged records between two known points of one segment.

    Attributes:
        op_first: First damaged op.
        op_last: Last damaged op (``op_first`` for a single damaged record).
        offset_first: Offset of the first message of ``op_first``.
        offset_end: Offset of the first message after ``op_last``.
        segment_offset_base: The segment holding the region (its first offset).
        position_start: Byte position where ``op_first`` starts.
        position_end: Byte position after ``op_last``.
        open_end: The region runs to the end of a sealed segment (the next segment's first
            record bounds it), so its true end is unknown: the segment's end moves with the
            records written back into it.
    """

    op_first: int
    op_last: int
    offset_first: int
    offset_end: int
    segment_offset_base: int
    position_start: int
    position_end: int
    open_end: bool = False

    def __post_init__(self) -> None:
        assert 1 <= self.op_first <= self.op_last
        assert self.offset_end >= self.offset_first
        assert self.position_end - self.position_start >= 0


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found and did; every change it made to the disk is listed here.

    Attributes:
        segment_count: Segments kept.
        record_count: Records kept, faulty ones included.
        faulty_regions: Damaged records kept for repair, in op order.
        tail_truncated_bytes: Bytes cut off as torn tail, including whole segment files
            removed for it. The first op cut, if any was, is ``op_head + 1``.
        tail_debris: The torn tail, if any, is provably the debris of unsynced writes:
            where it starts there is no whole record (the log ends inside it: fewer bytes
            than a header, or fewer than its intact header says; rot keeps a file's
            length, so a durable record is always whole) or a zero checksum (a write that
            never reached the disk, as a later one did; no record has one). Nothing after
            it is durable then either (invariant of the journal: durable records form a
            prefix). False: the tail may have held durable records whose bytes rotted at
            the head of the journal, which recovery cannot tell from a torn write; their
            ops must not be taken for never written (consensus may have acknowledged them).
        segments_removed: Segment files removed because they held only torn tail.
        files_removed: Leftovers removed: orphan indexes and unfinished ``.index.tmp``.
        indexes_rebuilt: Segments whose index was missing or disagreed early and was
            rewritten whole.
        indexes_repaired: Segments whose index was cut or extended in place.
    """

    segment_count: int = 0
    record_count: int = 0
    faulty_regions: tuple[FaultyRegion, ...] = ()
    tail_truncated_bytes: int = 0
    tail_debris: bool = True
    segments_removed: tuple[str, ...] = ()
    files_removed: tuple[str, ...] = ()
    indexes_rebuilt: tuple[str, ...] = ()
    indexes_repaired: tuple[str, ...] = ()


@dataclass(slots=True)
class Recovered:
    """The result of :func:`recover`: segments ready for the journal."""

    segments: list[Segment]
    faulty_regions: list[FaultyRegion]
    report: RecoveryReport


# --- Walking a log -----------------------------------------------------------------------------


class _Reader:
    """Reads a log through one reusable chunk buffer."""

    __slots__ = ("_buffer", "_end", "_file", "_size", "_start")

    def __init__(self, file: StorageFile, size: int) -> None:
        self._file = file
        self._size = size
        self._buffer = bytearray(min(READ_CHUNK_BYTES, max(size, 1)))
        self._start = 0
        self._end = 0

    def view(self, position: int, count: int) -> memoryview:
        """``count`` bytes at ``position``; valid until the next call."""
        assert position >= 0
        assert position + count <= self._size
        if not (self._start <= position and position + count <= self._end):
            # Keep what is already here of the range (the head of a record the last chunk cut
            # in two), so walking forward reads every byte from the file once.
            keep = self._end - position if self._start <= position < self._end else 0
            if count > len(self._buffer):
                grown = bytearray(count)
                grown[:keep] = self._buffer[position - self._start : self._end - self._start]
                self._buffer = grown
            elif keep:
                at = position - self._start
                self._buffer[:keep] = self._buffer[at : at + keep]
            want = min(len(self._buffer), self._size - position) - keep
            with memoryview(self._buffer) as buffer:
                got = self._file.read_into(position + keep, buffer[keep : keep + want])
            if keep + got < count:
                raise RecoveryError(f"{self._file.name}: short read at {position}")
            self._start = position
            self._end = position + keep + got
        at = position - self._start
        return memoryview(self._buffer)[at : at + count]


@dataclass(slots=True)
class _Valid:
    header: RecordHeader
    position: int


@dataclass(slots=True)
class _Damaged:
    position: int
    position_end: int | None  # None: no valid record follows in this segment
    header_op: int | None  # the op of a valid header whose body is bad
    # No durable record can start here (see ``RecoveryReport.tail_debris``).
    debris: bool = False


def _header_at(reader: _Reader, size: int, position: int) -> RecordHeader | None:
    if position + RECORD_HEADER_SIZE > size:
        return None
    return parse_header(reader.view(position, RECORD_HEADER_SIZE), 0)


def _body_ok(reader: _Reader, size: int, position: int, header: RecordHeader) -> bool:
    if position + header.size > size:
        return False
    return body_matches(header, reader.view(position + RECORD_HEADER_SIZE, header.body_size))


def _record_at(reader: _Reader, size: int, position: int) -> RecordHeader | None:
    header = _header_at(reader, size, position)
    if header is None or not _body_ok(reader, size, position, header):
        return None
    return header


def _scan_log(file: StorageFile, size: int, entries: list[IndexEntry]) -> list[_Valid | _Damaged]:
    """Walks one log from its start: valid records, and damaged regions between them."""
    reader = _Reader(file, size)
    # Sorted only once damage needs them: a clean walk never looks at the index.
    hints: list[tuple[int, int]] | None = None
    hint_positions: list[int] = []
    items: list[_Valid | _Damaged] = []
    position = 0
    while position < size:
        header = _header_at(reader, size, position)
        if header is not None and _body_ok(reader, size, position, header):
            items.append(_Valid(header, position))
            position += header.size
            continue
        end: int | None = None
        if header is not None and position + header.size < size:
            # Only the body is bad: the checksummed header says where the next record is.
            after = _record_at(reader, size, position + header.size)
            if after is not None and after.op == header.op + 1:
                end = position + header.size
        if end is None:
            if hints is None:
                hints = sorted((e.position, e.op) for e in entries if e.position < size)
                hint_positions = [hint_position for hint_position, _ in hints]
            for hint_position, hint_op in hints[bisect_right(hint_positions, position) :]:
                found = _record_at(reader, size, hint_position)
                if found is not None and found.op == hint_op:
                    end = hint_position
                    break
        if header is not None:
            debris = position + header.size > size
        elif size - position < RECORD_HEADER_SIZE:
            debris = True
        else:
            debris = not any(reader.view(position, _CHECKSUM_SIZE))
        items.append(_Damaged(position, end, header.op if header is not None else None, debris))
        if end is None:
            break
        assert end > position
        position = end
    assert position <= size
    return items


# --- Stitching segments together ---------------------------------------------------------------


@dataclass(slots=True)
class _Scan:
    offset_base: int
    size: int
    has_index: bool
    index_size: int
    entries: list[IndexEntry]
    items: list[_Valid | _Damaged]


@dataclass(slots=True)
class _Plan:
    """What a kept segment will hold: one slot per op, and its expected index."""

    scan: _Scan
    size_bytes: int = 0
    offset_next: int = 0
    # (position, offset, own timestamp or 0 for a faulty record) per slot.
    slots: list[tuple[int, int, int]] = field(default_factory=list)
    entries: list[IndexEntry] = field(default_factory=list)


@dataclass(slots=True)
class _Pending:
    plan: _Plan
    position_start: int
    op_first: int
    offset_first: int


def _close_region(
    pending: _Pending, op_after: int, offset_after: int, position_end: int, *, open_end: bool
) -> FaultyRegion | None:
    """Numbers a damaged region by the record after it (its op and offset) and fills its
    slots.

    Returns None if that record cannot follow the region (its op leaves no room for even
    one record in between, its offset lies before the region's, or the region's bytes
    cannot hold a header per op): then the region is not bounded after all. (Records may
    hold no message, so the offsets only bound the region's messages, not its records; an
    open-ended region's bytes bound nothing, its true end being unknown.)
    """
    count = op_after - pending.op_first
    if count < 1 or offset_after < pending.offset_first:
        return None
    if not open_end and position_end - pending.position_start < count * RECORD_HEADER_SIZE:
        return None
    region = FaultyRegion(
        op_first=pending.op_first,
        op_last=op_after - 1,
        offset_first=pending.offset_first,
        offset_end=offset_after,
        segment_offset_base=pending.plan.scan.offset_base,
        position_start=pending.position_start,
        position_end=position_end,
        open_end=open_end,
    )
    old_entries = {entry.op: entry for entry in pending.plan.scan.entries}
    for i in range(count):
        op = region.op_first + i
        # Placeholders: one message per record while the region's messages last keeps the
        # offset column as it was for a journal of one message per record; the offset
        # column stays non-decreasing and within the region either way.
        offset = placeholder_offset(region, i)
        pending.plan.slots.append((region.position_start, offset, 0))
        pending.plan.entries.append(
            old_entries.get(op, IndexEntry(op, offset, 0, region.position_start))
        )
    pending.plan.size_bytes = position_end
    pending.plan.offset_next = region.offset_end
    return region


def placeholder_offset(region: FaultyRegion, i: int) -> int:
    """The offset the slot of op ``region.op_first + i`` holds while it is damaged."""
    return min(region.offset_first + i, max(region.offset_first, region.offset_end - 1))


def _stitch(scans: list[_Scan]) -> tuple[list[_Plan], list[FaultyRegion]]:
    """Numbers the records and damaged regions of the journal's longest trustworthy prefix.

    Returns one plan per kept segment; the last plan's ``size_bytes`` is where the torn
    tail starts, and segments without a plan are torn tail entirely.
    """
    plans: list[_Plan] = []
    regions: list[FaultyRegion] = []
    op_expected: int | None = None
    offset_expected = scans[0].offset_base if scans else 0
    pending: _Pending | None = None
    bounded = True
    for scan in scans:
        name = segment_stem(scan.offset_base)
        if pending is None and scan.offset_base != offset_expected:
            break  # Records between the two segments are missing: the tail starts here.
        plan = _Plan(scan, offset_next=scan.offset_base)
        plans.append(plan)
        if pending is None and op_expected is not None and scan.items:
            # The name only pins the segment's first offset, and the segment before may end
            # with records of no message: a crash that lost them (never synced; its log
            # ends where they began) leaves no gap in the offsets. Only this segment's
            # first op can tell.
            first = scan.items[0]
            first_op = first.header.op if isinstance(first, _Valid) else first.header_op
            if first_op is None and isinstance(first, _Damaged) and first.debris:
                # A write that never arrived: its op is unknown, and the ops before it
                # may be in either segment. Nothing from here on is durable: the tail.
                bounded = False
                break
            if first_op is not None and first_op > op_expected:
                # The lost records: a region of no bytes yet at the end of the segment
                # before, which their repair writes back.
                before = plans[-2]
                lost = _Pending(before, before.size_bytes, op_expected, offset_expected)
                assert before.size_bytes == before.scan.size
                lost_region = _close_region(
                    lost, first_op, scan.offset_base, before.scan.size, open_end=True
                )
                assert lost_region is not None  # more ops, the same offset, an open end
                regions.append(lost_region)
                op_expected = first_op
            # Otherwise (a rotted first record whose op is unknown) it was durable, so
            # every record before it was too and is there: it is op ``op_expected``.
        for item in scan.items:
            if isinstance(item, _Valid):
                header = item.header
                if pending is not None:
                    region: FaultyRegion | None = None
                    if pending.plan is plan:
                        region = _close_region(
                            pending, header.op, header.offset, item.position, open_end=False
                        )
                    elif (
                        len(plans) >= 2
                        and pending.plan is plans[-2]
                        and item.position == 0
                        and header.offset == scan.offset_base
                    ):
                        end = pending.plan.scan.size
                        region = _close_region(
                            pending, header.op, header.offset, end, open_end=True
                        )
                    if region is None:
                        bounded = False
                        break
                    regions.append(region)
                    pending = None
                    op_expected = header.op
                    offset_expected = header.offset
                if op_expected is None:
                    op_expected = header.op
                if header.op != op_expected or header.offset != offset_expected:
                    raise RecoveryError(
                        f"{name}: record at {item.position} has op {header.op} offset "
                        f"{header.offset}, expected op {op_expected} offset {offset_expected}"
                    )
                plan.slots.append((item.position, header.offset, header.timestamp_us))
                plan.entries.append(
                    IndexEntry(header.op, header.offset, header.timestamp_us, item.position)
                )
                plan.size_bytes = item.position + header.size
                plan.offset_next = header.offset_next
                op_expected = header.op + 1
                offset_expected = header.offset_next
            else:
                if pending is not None:
                    bounded = False  # Damage on both sides of a segment start.
                    break
                if op_expected is None:
                    # The very first record of the journal is damaged: only its own header
                    # or its index entry can say which op it was.
                    op_expected = item.header_op
                    if op_expected is None and scan.entries and scan.entries[0].position == 0:
                        op_expected = scan.entries[0].op
                    if op_expected is None or op_expected < 1:
                        bounded = False
                        break
                pending = _Pending(plan, item.position, op_expected, offset_expected)
        if not bounded:
            break
    # Damage that nothing after it bounds, and whatever follows it, is the torn tail. The
    # slots of an open region were never added, so its plan already ends where it starts.
    while plans and not plans[-1].slots:
        plans.pop()
    for plan in plans:
        assert plan.slots, "every kept segment holds at least one record"
    # A popped plan had no slots, so no region was ever closed in it.
    kept_bases = {plan.scan.offset_base for plan in plans}
    assert all(region.segment_offset_base in kept_bases for region in regions)
    if len(regions) > FAULTY_REGIONS_MAX:
        raise RecoveryError(f"{len(regions)} damaged regions: more than {FAULTY_REGIONS_MAX}")
    return plans, regions


def _tail_debris(scans: list[_Scan], plans: list[_Plan]) -> bool:
    """Whether the torn tail (everything after the kept plans) is provably debris: where
    it starts, at a record boundary, no durable record can start."""
    # Where the tail starts: in the rest of the last kept segment, else in the first
    # non-empty segment after it.
    starts: list[tuple[_Scan, int]] = []
    if plans and plans[-1].scan.size > plans[-1].size_bytes:
        starts.append((plans[-1].scan, plans[-1].size_bytes))
    starts += [(scan, 0) for scan in scans[len(plans) :] if scan.size > 0]
    if not starts:
        return True
    scan, position = starts[0]
    item = next((item for item in scan.items if item.position == position), None)
    return isinstance(item, _Damaged) and item.debris


# --- The whole recovery ------------------------------------------------------------------------


def _read_all(file: StorageFile) -> bytearray:
    size = file.size()
    buffer = bytearray(size)
    got = file.read_into(0, buffer)
    if got != size:
        raise RecoveryError(f"{file.name}: short read")
    return buffer


def _scan_segment(
    storage: Storage, offset_base: int, log_name: str, index_name: str | None
) -> _Scan:
    """Reads one segment's index and walks its log, holding its files only meanwhile."""
    log = storage.open(log_name)
    try:
        size = log.size()
        data = bytearray()
        if index_name is not None:
            index = storage.open(index_name)
            try:
                data = _read_all(index)
            finally:
                index.close()
        entries = parse_entries(data)
        items = _scan_log(log, size, entries)
    finally:
        log.close()
    return _Scan(offset_base, size, index_name is not None, len(data), entries, items)


def _reconcile_index(
    storage: Storage, plan: _Plan, rebuilt: list[str], repaired: list[str]
) -> StorageFile:
    """Makes the segment's index equal to the expected one; returns an open handle."""
    scan = plan.scan
    stem = segment_stem(scan.offset_base)
    expected = plan.entries
    parsed = scan.entries
    agree = 0
    for old, new in zip(parsed, expected, strict=False):
        if old != new:
            break
        agree += 1
    if scan.has_index and (agree == len(parsed) or agree == len(expected)):
        index = storage.open(stem + INDEX_SUFFIX)
        if scan.index_size != len(expected) * INDEX_ENTRY_SIZE or agree != len(expected):
            try:
                index.truncate(agree * INDEX_ENTRY_SIZE)
                index.write(agree * INDEX_ENTRY_SIZE, [encode_entries(expected[agree:])])
                index.sync()
            except BaseException:
                index.close()
                raise
            repaired.append(stem)
        return index
    tmp_name = stem + INDEX_TMP_SUFFIX
    tmp = storage.create(tmp_name)
    try:
        tmp.write(0, [encode_entries(expected)])
        tmp.sync()
    finally:
        tmp.close()
    storage.rename(tmp_name, stem + INDEX_SUFFIX)
    rebuilt.append(stem)
    return storage.open(stem + INDEX_SUFFIX)


def _finish_retention(storage: Storage, files_removed: list[str]) -> RetainedStart | None:
    """Rule 0: the retained start recorded before an unfinished retention, if any; a write
    of it that never reached its rename is removed.

    Raises:
        RecoveryError: the record is damaged (``journal.retained``, invariant 3).
    """
    if RETAINED_TMP_NAME in storage.names():
        storage.remove(RETAINED_TMP_NAME)
        files_removed.append(RETAINED_TMP_NAME)
    retained = read_retained(storage)
    if retained is None:
        return None
    kept = [
        parsed[0]
        for name in storage.names()
        if (parsed := parse_segment_name(name)) is not None and parsed[1] == LOG_SUFFIX
    ]
    if not any(offset_base >= retained.offset for offset_base in kept):
        # Nothing at or above the start is left to protect (every segment went, to a
        # truncation that crashed before it removed the record): a fresh journal may start
        # anywhere, so the record must not outlive its segments.
        storage.remove(RETAINED_NAME)
        files_removed.append(RETAINED_NAME)
        return None
    return retained


def recover(storage: Storage, *, keep_sealed_files_open: bool = False) -> Recovered:
    """Opens and checks every segment of ``storage``; see the module doc.

    Args:
        storage: The journal's storage.
        keep_sealed_files_open: Return every segment with its files open (invariant 5);
            otherwise only the last one's are.

    Raises:
        RecoveryError: Damage that recovery cannot resolve without guessing.
        OSError: The storage failed.
    """
    files_removed: list[str] = []
    logs: dict[int, str] = {}
    indexes: dict[int, str] = {}
    retained = _finish_retention(storage, files_removed)
    for name in storage.names():
        parsed = parse_segment_name(name)
        if parsed is None:
            continue  # Not ours: superblock copies, snapshots, whatever lives beside us.
        offset_base, suffix = parsed
        if retained is not None and offset_base < retained.offset:
            # Retention recorded that it keeps nothing below its start, then crashed
            # between unlinks: finish its work (any subset of them may have survived).
            storage.remove(name)
            files_removed.append(name)
            continue
        if suffix == LOG_SUFFIX:
            logs[offset_base] = name
        elif suffix == INDEX_SUFFIX:
            indexes[offset_base] = name
        else:
            storage.remove(name)  # An index rebuild that never reached its rename.
            files_removed.append(name)
    for offset_base in sorted(indexes):
        if offset_base not in logs:
            storage.remove(indexes[offset_base])  # Its log was deleted by retention.
            files_removed.append(indexes[offset_base])

    scans = [
        _scan_segment(storage, offset_base, logs[offset_base], indexes.get(offset_base))
        for offset_base in sorted(logs)
    ]
    plans, regions = _stitch(scans)
    kept = len(plans)
    tail_debris = _tail_debris(scans, plans)

    tail_bytes = 0
    segments_removed: list[str] = []
    rebuilt: list[str] = []
    repaired: list[str] = []
    segments: list[Segment] = []
    held: list[StorageFile] = []  # closed again if recovery fails (invariant 5)
    try:
        # The torn tail: everything after the last kept record.
        active_log: StorageFile | None = None
        if kept > 0:
            plan = plans[-1]
            tail_bytes += plan.scan.size - plan.size_bytes
            active_log = storage.open(segment_stem(plan.scan.offset_base) + LOG_SUFFIX)
            held.append(active_log)
            if plan.scan.size > plan.size_bytes:
                active_log.truncate(plan.size_bytes)
        for scan in scans[kept:]:
            tail_bytes += scan.size
            stem = segment_stem(scan.offset_base)
            storage.remove(stem + LOG_SUFFIX)
            segments_removed.append(stem + LOG_SUFFIX)
            if scan.has_index:
                storage.remove(stem + INDEX_SUFFIX)
                segments_removed.append(stem + INDEX_SUFFIX)

        for number, plan in enumerate(plans):
            active = number == kept - 1
            if active:
                assert active_log is not None
                log = active_log
            else:
                log = storage.open(segment_stem(plan.scan.offset_base) + LOG_SUFFIX)
                held.append(log)
            index = _reconcile_index(storage, plan, rebuilt, repaired)
            held.append(index)
            segment = Segment(
                offset_base=plan.scan.offset_base,
                op_base=plan.entries[0].op,
                log=log,
                index=index,
            )
            segment.size_bytes = plan.size_bytes
            for slot, (position, offset, timestamp_us) in enumerate(plan.slots):
                offset_after = plan.slots[slot + 1][1] if slot + 1 < len(plan.slots) else None
                count = (plan.offset_next if offset_after is None else offset_after) - offset
                segment.add(
                    position=position,
                    offset=offset,
                    message_count=count,
                    timestamp_us=timestamp_us,
                )
            assert segment.offset_next == plan.offset_next
            assert segment.op_last == plan.entries[-1].op
            # Make everything kept durable, whatever the page cache held before we came.
            log.sync()
            index.sync()
            if not active and not keep_sealed_files_open:
                # A sealed segment: the journal opens its files again when it needs them.
                segment.log = segment.index = None
                held.remove(log)
                held.remove(index)
                log.close()
                index.close()
            segments.append(segment)
        storage.sync_directory()
    except BaseException:
        for file in held:
            with suppress(OSError):
                file.close()
        raise

    for earlier, later in pairwise(segments):
        assert later.op_base == earlier.op_last + 1
        assert later.offset_base == earlier.offset_next
    report = RecoveryReport(
        segment_count=len(segments),
        record_count=sum(segment.record_count for segment in segments),
        faulty_regions=tuple(regions),
        tail_truncated_bytes=tail_bytes,
        tail_debris=tail_debris,
        segments_removed=tuple(segments_removed),
        files_removed=tuple(files_removed),
        indexes_rebuilt=tuple(rebuilt),
        indexes_repaired=tuple(repaired),
    )
    return Recovered(segments, regions, report)
