"""The sparse index of a segment: one 32-byte entry per record.

Purpose: ``{offset:020}.index`` beside each ``.log`` maps every record of the segment to its
op, first message offset, timestamp and byte position, so opening a segment need not trust
the log alone and a damaged record in the middle can be stepped over (see ``recovery``).
"Sparse" as in Iggy: one entry per record (a batch of messages), not per message.

Layout (little-endian), ``INDEX_ENTRY_SIZE`` = 32, entry ``i`` at byte ``32 * i``::

    offset size field
         0    8 op            the record's op
         8    8 offset        the record's first message offset
        16    8 timestamp_us  the record's timestamp
        24    8 position      byte position of the record in the .log

This is Iggy 0.9's 24-byte entry (offset, timestamp, position) with the op in front.

Invariants:

1. Entry ``i`` describes record ``i`` of the segment: ``op == op_base + i``.
2. The index is a hint, never the truth: every entry is checked against the record it
   points at before anything relies on it, and an index that disagrees with its log is
   rebuilt from the log.
3. A rebuilt index is written whole to ``.index.tmp``, synced, and renamed over ``.index``
   (then the directory is synced), so a crash never leaves a half-written index behind that
   could hide the position of a record after a damaged one.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from journal.record import Bytes

__all__ = [
    "INDEX_ENTRY",
    "INDEX_ENTRY_SIZE",
    "IndexEntry",
    "encode_entries",
    "encode_entry",
    "parse_entries",
]

INDEX_ENTRY_SIZE: Final = 32

INDEX_ENTRY: Final = struct.Struct(
    "<"
    "Q"  # op
    "Q"  # offset: the record's first message offset
    "Q"  # timestamp_us: the record's timestamp
    "Q"  # position: byte position of the record in the segment's .log
)
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE


class IndexEntry(NamedTuple):
    """One decoded index entry."""

    op: int
    offset: int
    timestamp_us: int
    position: int


def encode_entry(op: int, offset: int, timestamp_us: int, position: int) -> bytes:
    """The 32 bytes of one entry."""
    return INDEX_ENTRY.pack(op, offset, timestamp_us, position)


def encode_entries(entries: list[IndexEntry]) -> bytearray:
    """The bytes of a whole index, entry after entry."""
    buffer = bytearray(INDEX_ENTRY_SIZE * len(entries))
    for i, entry in enumerate(entries):
        INDEX_ENTRY.pack_into(buffer, INDEX_ENTRY_SIZE * i, *entry)
    return buffer


def parse_entries(data: Bytes) -> list[IndexEntry]:
    """Decodes every whole entry of ``data``; a trailing partial entry is ignored.

    Entries are not judged here: an entry is only a hint until a record confirms it.
    """
    count = len(data) // INDEX_ENTRY_SIZE
    with memoryview(data) as view:
        whole = view[: count * INDEX_ENTRY_SIZE]
        return [IndexEntry(*fields) for fields in INDEX_ENTRY.iter_unpack(whole)]
