"""The superblock: two alternating copies, newest valid wins, a torn write loses only itself.

Method: states are written and the copies damaged through the Storage protocol (both storage
kinds), or torn by MemoryStorage crashes with a sync that failed.
"""

from __future__ import annotations

import random
import struct

import pytest

from journal import MemoryStorage, Superblock, SuperblockCorrupt, SuperblockState
from journal.record import checksum
from journal.superblock import SUPERBLOCK_EXTRA_COUNT, SUPERBLOCK_FORMAT_VERSION, SUPERBLOCK_SIZE
from tests.journal.helpers import Disk, cut, flip, overwrite, read_file


def _state(n: int) -> SuperblockState:
    return SuperblockState(
        view=n * 10,
        log_view=n * 10 - 1 if n else 0,
        commit=n * 100,
        checkpoint=n * 50,
        extra=tuple(n + i for i in range(SUPERBLOCK_EXTRA_COUNT)),
    )


def test_superblock_fresh_storage_reads_zero_state(disk: Disk) -> None:
    superblock = Superblock.open(disk.storage())
    assert superblock.sequence == 0
    assert superblock.state == SuperblockState()


def test_superblock_writes_alternate_and_the_newest_wins(disk: Disk) -> None:
    storage = disk.storage()
    superblock = Superblock.open(storage)
    for n in range(1, 6):
        superblock.write(_state(n))
        reopened = Superblock.open(disk.storage())
        assert reopened.sequence == n
        assert reopened.state == _state(n)
    a = read_file(storage, "superblock.a")
    b = read_file(storage, "superblock.b")
    assert len(a) == len(b) == SUPERBLOCK_SIZE
    assert a != b  # Sequence 4 in a, 5 in b.


@pytest.mark.parametrize("damage", ["cut", "flip", "zeros", "empty"])
def test_superblock_torn_newest_copy_falls_back_to_the_previous_state(
    disk: Disk, damage: str
) -> None:
    """Torn superblock: the newest copy did not reach the disk whole."""
    storage = disk.storage()
    superblock = Superblock.open(storage)
    superblock.write(_state(1))  # Copy b.
    superblock.write(_state(2))  # Copy a: the one we tear.
    if damage == "cut":
        cut(storage, "superblock.a", SUPERBLOCK_SIZE // 2)
    elif damage == "flip":
        flip(storage, "superblock.a", SUPERBLOCK_SIZE - 1)
    elif damage == "zeros":
        overwrite(storage, "superblock.a", 40, bytes(8))
    else:
        cut(storage, "superblock.a", 0)
    reopened = Superblock.open(disk.storage())
    assert reopened.sequence == 1
    assert reopened.state == _state(1)
    # The next write goes to the torn copy again, never over the surviving one.
    reopened.write(_state(3))
    assert Superblock.open(disk.storage()).state == _state(3)
    assert Superblock.open(disk.storage()).sequence == 2
    cut(storage, "superblock.a", 3)
    assert Superblock.open(disk.storage()).state == _state(1)


def test_superblock_torn_by_a_crash_keeps_the_old_or_the_new_state() -> None:
    outcomes = set()
    for seed in range(100):
        storage = MemoryStorage(random.Random(seed))
        superblock = Superblock.open(storage)
        superblock.write(_state(1))
        superblock.write(_state(2))
        storage.fail_next("sync", "superblock.b")
        with pytest.raises(OSError):
            superblock.write(_state(3))
        storage.crash()
        state = Superblock.open(storage).state
        assert state in {_state(2), _state(3)}
        outcomes.add(state.view)
    assert outcomes == {20, 30}


def test_superblock_first_write_torn_by_a_crash_reads_as_never_written() -> None:
    for seed in range(20):
        storage = MemoryStorage(random.Random(seed))
        superblock = Superblock.open(storage)
        storage.fail_next("sync", "superblock.b")
        with pytest.raises(OSError):
            superblock.write(_state(1))
        storage.crash()
        # The copy was created but the directory never synced: it is gone.
        assert Superblock.open(storage).sequence == 0


def test_superblock_both_copies_corrupt_is_a_typed_error(disk: Disk) -> None:
    storage = disk.storage()
    superblock = Superblock.open(storage)
    superblock.write(_state(1))
    superblock.write(_state(2))
    flip(storage, "superblock.a", 20)
    flip(storage, "superblock.b", 20)
    with pytest.raises(SuperblockCorrupt):
        Superblock.open(disk.storage())


def test_superblock_regressions_are_bugs() -> None:
    superblock = Superblock.open(MemoryStorage(random.Random(0)))
    superblock.write(_state(2))
    with pytest.raises(AssertionError):
        superblock.write(_state(1))
    with pytest.raises(AssertionError):
        SuperblockState(view=1, log_view=2)


def test_superblock_of_another_format_version_is_refused_by_name(disk: Disk) -> None:
    """Storage an older build wrote (an intact copy, another format version) is never read
    as this format: opening it names both versions."""
    storage = disk.storage()
    superblock = Superblock.open(storage)
    superblock.write(_state(1))
    data = bytearray(read_file(storage, "superblock.b"))
    struct.pack_into("<H", data, 24, SUPERBLOCK_FORMAT_VERSION - 1)
    value = checksum(bytes(data[16:]))
    struct.pack_into("<QQ", data, 0, value & (2**64 - 1), value >> 64)
    overwrite(storage, "superblock.b", 0, bytes(data))
    with pytest.raises(SuperblockCorrupt, match=f"format version {SUPERBLOCK_FORMAT_VERSION - 1}"):
        Superblock.open(disk.storage())
