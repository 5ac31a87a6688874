"""The superblock: a group's durable VSR state, in two alternating checksummed copies.

Purpose: hold the little state of a replica that is not in its log and must survive a
crash before the replica may speak in a view (VSR Revisited §4 with the fixes of
``reference/vsr.md`` §2.4): ``view``, ``log_view``, ``commit`` and ``checkpoint``, plus
``SUPERBLOCK_EXTRA_COUNT`` u64 fields whose meaning consensus defines.

Layout of each copy (little-endian, ``SUPERBLOCK_SIZE`` = 160), files ``superblock.a`` and
``superblock.b``::

    offset size field
         0   16 checksum        xxh3-128 of bytes [16, 160)
        16    8 sequence        1 for the first write, +1 for every write
        24    2 format_version  SUPERBLOCK_FORMAT_VERSION
        26    6 reserved        zero
        32    8 view
        40    8 log_view
        48    8 commit
        56    8 checkpoint
        64   96 extra           12 x u64, defined by consensus, zero by default

Invariants:

1. Write ``n`` goes to copy ``a`` if ``n`` is even and ``b`` if odd, so a write never
   touches the copy that holds the newest durable state.
2. On open, the valid copy with the highest ``sequence`` wins; a torn or corrupt copy is
   simply not valid. A write torn by a crash therefore loses only itself.
3. ``log_view <= view``; ``view``, ``log_view`` and ``commit`` never decrease from one write
   to the next (asserted: a regression is a bug in the caller).
4. ``write`` returns only once the copy is durable (file sync, plus a directory sync when
   the copy's file was just created).

Theory of operation: TigerBeetle keeps four copies and trusts a quorum, to survive
misdirected reads; two copies with a sequence number are what Iggy does and what the
issue asks. Neither copy is written in place while it is the newest, so no single torn
write can leave zero valid copies, but a media fault on the newest copy silently rolls the
state back one write: the sequence number lets consensus notice if it keeps its own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

from journal.errors import SuperblockCorrupt
from journal.record import checksum
from journal.storage_api import Storage, StorageFile

__all__ = [
    "SUPERBLOCK",
    "SUPERBLOCK_COPY_NAMES",
    "SUPERBLOCK_EXTRA_COUNT",
    "SUPERBLOCK_SIZE",
    "Superblock",
    "SuperblockState",
]

SUPERBLOCK_FORMAT_VERSION: Final = 2
"""The format of the group's whole storage, not only of this block: 2 since prepare
headers carry the request's identity digest (152 bytes). Storage written by another
format is refused on open, never read as this one."""
SUPERBLOCK_SIZE: Final = 160
SUPERBLOCK_EXTRA_COUNT: Final = 12
SUPERBLOCK_COPY_NAMES: Final = ("superblock.a", "superblock.b")
U64_MAX: Final = (1 << 64) - 1

SUPERBLOCK: Final = struct.Struct(
    "<"
    "16x"  # checksum: xxh3-128 of bytes [16, 160), packed separately
    "Q"  # sequence: write number, >= 1
    "H"  # format_version
    "6x"  # reserved, zero
    "Q"  # view
    "Q"  # log_view
    "Q"  # commit
    "Q"  # checkpoint
    f"{SUPERBLOCK_EXTRA_COUNT}Q"  # extra: consensus-defined u64 fields
)
assert SUPERBLOCK.size == SUPERBLOCK_SIZE
assert SUPERBLOCK_SIZE % 16 == 0

CHECKSUM: Final = struct.Struct("<QQ")  # checksum: low u64, high u64
CHECKSUM_SIZE: Final = 16
assert CHECKSUM.size == CHECKSUM_SIZE


@dataclass(frozen=True, slots=True)
class SuperblockState:
    """The durable VSR state of one replica of one group.

    Attributes:
        view: The latest view the replica has durably entered.
        log_view: The latest view in which its log was in normal status (``<= view``).
        commit: The highest op the replica knows committed.
        checkpoint: The op of the latest checkpoint (snapshot) it holds.
        extra: ``SUPERBLOCK_EXTRA_COUNT`` u64 fields whose meaning consensus defines.
    """

    view: int = 0
    log_view: int = 0
    commit: int = 0
    checkpoint: int = 0
    extra: tuple[int, ...] = field(default=(0,) * SUPERBLOCK_EXTRA_COUNT)

    def __post_init__(self) -> None:
        assert len(self.extra) == SUPERBLOCK_EXTRA_COUNT
        for value in (self.view, self.log_view, self.commit, self.checkpoint, *self.extra):
            assert 0 <= value <= U64_MAX
        assert self.log_view <= self.view


def _encode(sequence: int, state: SuperblockState) -> bytearray:
    buffer = bytearray(SUPERBLOCK_SIZE)
    SUPERBLOCK.pack_into(
        buffer,
        0,
        sequence,
        SUPERBLOCK_FORMAT_VERSION,
        state.view,
        state.log_view,
        state.commit,
        state.checkpoint,
        *state.extra,
    )
    with memoryview(buffer) as view:
        value = checksum(view[CHECKSUM_SIZE:])
    CHECKSUM.pack_into(buffer, 0, value & U64_MAX, value >> 64)
    return buffer


def _decode(data: bytes | bytearray) -> tuple[int, SuperblockState] | None:
    """``(sequence, state)`` of a valid copy, or None; SuperblockCorrupt if an intact copy
    was written by another format version."""
    if len(data) < SUPERBLOCK_SIZE:
        return None
    low, high = CHECKSUM.unpack_from(data, 0)
    with memoryview(data) as view:
        if checksum(view[CHECKSUM_SIZE:SUPERBLOCK_SIZE]) != low | (high << 64):
            return None
        if any(view[26:32]):
            return None
    sequence, version, view_number, log_view, commit, checkpoint, *extra = SUPERBLOCK.unpack_from(
        data, 0
    )
    if version != SUPERBLOCK_FORMAT_VERSION:
        raise SuperblockCorrupt(
            f"storage format version {version}; this build reads version "
            f"{SUPERBLOCK_FORMAT_VERSION} only (move the data directory aside to start anew)"
        )
    if sequence == 0 or log_view > view_number:
        return None
    return sequence, SuperblockState(view_number, log_view, commit, checkpoint, tuple(extra))


class Superblock:
    """The two superblock copies of one group's storage."""

    def __init__(
        self, storage: Storage, sequence: int, state: SuperblockState, copies: list[str]
    ) -> None:
        """Use :meth:`open`."""
        assert sequence >= 0
        self._storage = storage
        # The copies whose files exist (a name is created, and made durable, once).
        self._copies = list(copies)
        self.sequence = sequence
        """Number of the newest durable write (0: never written)."""
        self.state = state
        """The newest durable state (all zeros if never written)."""

    @classmethod
    def open(cls, storage: Storage) -> Superblock:
        """Reads both copies; the valid one with the highest sequence wins.

        Returns:
            The superblock; ``sequence == 0`` and a zero state if no copy was ever written.

        Raises:
            SuperblockCorrupt: A copy exists but no copy is valid, or an intact copy was
                written by another storage format version.
        """
        names = storage.names()
        copies: list[str] = [name for name in SUPERBLOCK_COPY_NAMES if name in names]
        best: tuple[int, SuperblockState] | None = None
        seen = False
        for name in copies:
            file = storage.open(name)
            try:
                buffer = bytearray(SUPERBLOCK_SIZE)
                got = file.read_into(0, buffer)
            finally:
                file.close()
            seen = seen or got > 0
            decoded = _decode(buffer[:got])
            if decoded is not None and (best is None or decoded[0] > best[0]):
                best = decoded
        if best is None:
            if seen:
                raise SuperblockCorrupt("no valid superblock copy")
            return cls(storage, 0, SuperblockState(), copies)
        return cls(storage, best[0], best[1], copies)

    def write(self, state: SuperblockState) -> None:
        """Makes ``state`` the newest durable state; durable when this returns.

        Raises:
            OSError: The storage failed; the previous state is still the newest valid one
                on disk, but the process must not go on as if this write happened.
        """
        assert state.view >= self.state.view
        assert state.log_view >= self.state.log_view
        assert state.commit >= self.state.commit
        sequence = self.sequence + 1
        name = SUPERBLOCK_COPY_NAMES[sequence % 2]
        created = name not in self._copies
        file: StorageFile = self._storage.create(name) if created else self._storage.open(name)
        try:
            file.write(0, [_encode(sequence, state)])
            file.sync()
        finally:
            file.close()
        if created:
            self._storage.sync_directory()
            self._copies.append(name)
        self.sequence = sequence
        self.state = state
