"""The retained start: where a journal's segments begin once retention has deleted some.

Purpose: deleting old segments takes several unlinks, and a crash may keep any subset of
them (the directory is synced once, after the last). Recovery must not mistake such a
leftover pattern for a hole in the journal, which it would cut as torn tail with every
segment after it. So before any file goes, the journal records durably the first message
offset it keeps, in one small checksummed file, ``retained_start``; recovery deletes every
segment file named below it before it walks the rest.

Layout (little-endian, ``RETAINED_SIZE`` = 48)::

    offset size field
         0   16 checksum        xxh3-128 of bytes [16, 48)
        16    2 format_version  RETAINED_FORMAT_VERSION
        18    6 reserved        zero
        24    8 offset          first message offset kept: the name of the first segment
        32    8 op              first op kept (for reports and checks)
        40    8 reserved        zero

Invariants:

1. The file is replaced whole: written to ``retained_start.tmp``, synced, renamed over the
   old one, and the directory synced, all before the first unlink. A crash at any point
   leaves either the old record or the new one, never a torn one.
2. The recorded offset only grows while the journal holds records: it names a segment that
   stays, and every segment below it is on its way out. A journal emptied by ``truncate``
   removes the record with its segments (a fresh journal may start anywhere).
3. A record that fails its checksum is damage recovery cannot resolve alone: it refuses to
   open (``RecoveryError``) rather than guess which segments were meant to go.

Theory of operation: the journal calls :func:`write_retained` and then unlinks; recovery
calls :func:`read_retained` and removes whatever it names below (``journal.recovery``,
rule 0), then removes a leftover ``.tmp``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from journal.errors import RecoveryError
from journal.record import checksum
from journal.storage_api import Storage

__all__ = [
    "RETAINED_NAME",
    "RETAINED_SIZE",
    "RETAINED_TMP_NAME",
    "RetainedStart",
    "read_retained",
    "remove_retained",
    "write_retained",
]

RETAINED_NAME: Final = "retained_start"
RETAINED_TMP_NAME: Final = "retained_start.tmp"
RETAINED_FORMAT_VERSION: Final = 1
RETAINED_SIZE: Final = 48

_BODY: Final = struct.Struct(
    "<"
    "16x"  # checksum: xxh3-128 of bytes [16, 48), packed separately
    "H"  # format_version
    "6x"  # reserved, zero
    "Q"  # offset: first message offset kept (the first segment's name)
    "Q"  # op: first op kept
    "8x"  # reserved, zero
)
assert _BODY.size == RETAINED_SIZE
_CHECKSUM: Final = struct.Struct("<QQ")  # low u64, high u64
_CHECKSUM_SIZE: Final = 16
_U64_MAX: Final = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class RetainedStart:
    """The first message offset and op a journal keeps after retention."""

    offset: int
    op: int

    def __post_init__(self) -> None:
        assert 0 <= self.offset <= _U64_MAX
        assert 1 <= self.op <= _U64_MAX


def encode_retained(start: RetainedStart) -> bytes:
    buffer = bytearray(RETAINED_SIZE)
    _BODY.pack_into(buffer, 0, RETAINED_FORMAT_VERSION, start.offset, start.op)
    with memoryview(buffer) as view:
        value = checksum(view[_CHECKSUM_SIZE:])
    _CHECKSUM.pack_into(buffer, 0, value & _U64_MAX, value >> 64)
    return bytes(buffer)


def decode_retained(data: bytes) -> RetainedStart:
    """The record in ``data``.

    Raises:
        RecoveryError: the bytes are not a valid record (invariant 3).
    """
    if len(data) != RETAINED_SIZE:
        raise RecoveryError(f"{RETAINED_NAME}: {len(data)} bytes, not {RETAINED_SIZE}")
    low, high = _CHECKSUM.unpack_from(data, 0)
    if checksum(memoryview(data)[_CHECKSUM_SIZE:]) != low | (high << 64):
        raise RecoveryError(f"{RETAINED_NAME}: checksum mismatch")
    version, offset, op = _BODY.unpack_from(data, 0)
    if version != RETAINED_FORMAT_VERSION or op < 1:
        raise RecoveryError(f"{RETAINED_NAME}: version {version}, op {op}")
    if data[18:24] != bytes(6) or data[40:48] != bytes(8):
        raise RecoveryError(f"{RETAINED_NAME}: reserved bytes are not zero")
    return RetainedStart(offset, op)


def read_retained(storage: Storage) -> RetainedStart | None:
    """The durable retained start, or None if retention never deleted a segment here.

    Raises:
        RecoveryError: the record is damaged.
        OSError: the storage failed.
    """
    if RETAINED_NAME not in storage.names():
        return None
    file = storage.open(RETAINED_NAME)
    try:
        data = file.read(0, RETAINED_SIZE + 1)
    finally:
        file.close()
    return decode_retained(data)


def write_retained(storage: Storage, start: RetainedStart) -> None:
    """Replace the record durably (invariant 1); durable when it returns.

    Raises:
        OSError: the storage failed; the old record, or the new one, is in place.
    """
    names = storage.names()
    if RETAINED_TMP_NAME in names:
        storage.remove(RETAINED_TMP_NAME)  # a crash mid-write left it
    file = storage.create(RETAINED_TMP_NAME)
    try:
        file.write(0, [encode_retained(start)])
        file.sync()
    finally:
        file.close()
    storage.rename(RETAINED_TMP_NAME, RETAINED_NAME)
    storage.sync_directory()


def remove_retained(storage: Storage) -> bool:
    """Remove the record and any leftover of a write (not durable until the caller syncs
    the directory); True if there was anything to remove."""
    removed = False
    for name in (RETAINED_NAME, RETAINED_TMP_NAME):
        if name in storage.names():
            storage.remove(name)
            removed = True
    return removed
