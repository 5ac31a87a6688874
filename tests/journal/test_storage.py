"""Storage: MemoryStorage's page-cache model, fault injection, and FileStorage basics.

Method: MemoryStorage is driven through the Storage protocol and crashed; the durable
contents must be exactly the synced ones plus at most a prefix of the newest unsynced
write of each file. FileStorage is exercised on real files in tmp_path.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from journal import MemoryStorage, Storage
from journal.storage import FileStorage
from tests.journal.helpers import read_file


def _write(storage: Storage, name: str, position: int, data: bytes, *, sync: bool) -> None:
    file = storage.open(name)
    file.write(position, [data])
    if sync:
        file.sync()
    file.close()


def test_memory_storage_crash_keeps_synced_and_at_most_a_prefix_of_the_newest_write() -> None:
    outcomes = set()
    for seed in range(200):
        storage = MemoryStorage(random.Random(seed))
        storage.create("f").close()
        storage.sync_directory()
        _write(storage, "f", 0, b"durable-", sync=True)
        _write(storage, "f", 8, b"lost", sync=False)
        _write(storage, "f", 12, b"newest", sync=False)
        storage.crash()
        contents = read_file(storage, "f")
        assert contents.startswith(b"durable-")
        rest = contents[8:]
        # "lost" never survives: only the newest write may, torn to a prefix, after zeros.
        if len(rest) > 0:
            assert rest[:4] == bytes(4)
            assert b"newest".startswith(rest[4:])
        outcomes.add(len(rest))
    assert 0 in outcomes  # The newest write lost entirely,
    assert 10 in outcomes  # kept whole,
    assert len(outcomes) >= 5  # and torn at several bytes in between.


def test_memory_storage_crash_reverts_overwrites_and_truncations() -> None:
    storage = MemoryStorage(random.Random(1))
    storage.create("f").close()
    storage.sync_directory()
    _write(storage, "f", 0, b"0123456789", sync=True)
    file = storage.open("f")
    file.write(2, [b"XX"])
    file.truncate(4)
    file.truncate(0)
    file.write(0, [b"ab"])
    file.write(0, [b""])  # An empty write changes nothing and is not a write.
    storage.fail_next("sync", "f")
    with pytest.raises(OSError):
        file.sync()
    storage.crash()
    contents = read_file(storage, "f")
    # Either nothing survived, or a prefix of the newest write over the durable bytes.
    assert contents in {b"0123456789", b"a123456789", b"ab23456789"}


def test_memory_storage_unsynced_directory_changes_are_lost_in_a_crash() -> None:
    storage = MemoryStorage(random.Random(2))
    storage.create("kept").close()
    storage.create("doomed").close()
    storage.sync_directory()
    _write(storage, "kept", 0, b"k", sync=True)
    storage.remove("doomed")
    storage.create("new").close()
    storage.rename("kept", "renamed")
    storage.crash()
    assert storage.names() == ["doomed", "kept"]
    assert read_file(storage, "kept") == b"k"


def test_memory_storage_handles_die_in_a_crash() -> None:
    storage = MemoryStorage(random.Random(3))
    file = storage.create("f")
    storage.sync_directory()
    storage.crash()
    with pytest.raises(OSError):
        file.write(0, [b"x"])


def test_memory_storage_injected_faults_hit_the_next_matching_operation_once() -> None:
    storage = MemoryStorage(random.Random(4))
    file = storage.create("f")
    other = storage.create("g")
    storage.fail_next("write", "f")
    other.write(0, [b"fine"])  # Another file is not affected.
    with pytest.raises(OSError):
        file.write(0, [b"x"])
    file.write(0, [b"x"])
    storage.fail_next("read")
    with pytest.raises(OSError):
        file.read_into(0, bytearray(1))
    buffer = bytearray(4)
    assert file.read_into(0, buffer) == 1
    assert buffer[:1] == b"x"


def test_memory_storage_corrupt_changes_every_byte_of_the_range() -> None:
    storage = MemoryStorage(random.Random(5))
    _ = storage.create("f")
    _write(storage, "f", 0, bytes(64), sync=True)
    storage.corrupt("f", 10, 20)
    contents = read_file(storage, "f")
    assert contents[:10] == bytes(10)
    assert all(byte != 0 for byte in contents[10:30])
    assert contents[30:] == bytes(34)


def test_memory_storage_is_deterministic_for_a_seed() -> None:
    def run(seed: int) -> bytes:
        storage = MemoryStorage(random.Random(seed))
        storage.create("f").close()
        storage.sync_directory()
        for i in range(20):
            _write(storage, "f", i * 3, bytes([i]) * 5, sync=i % 7 == 0)
        storage.crash()
        storage.corrupt("f", 0, 4)
        return read_file(storage, "f")

    assert run(11) == run(11)
    assert len({run(seed) for seed in range(10)}) > 1


def test_file_storage_reads_writes_vectors_truncates_and_renames(tmp_path: Path) -> None:
    storage = FileStorage(str(tmp_path / "new" / "dir"))
    file = storage.create("a")
    with pytest.raises(FileExistsError):
        storage.create("a")
    file.write(4, [b"ab", bytearray(b"cd"), memoryview(b"ef")])
    file.sync()
    assert file.size() == 10
    buffer = bytearray(16)
    assert file.read_into(0, buffer) == 10
    assert bytes(buffer[:10]) == bytes(4) + b"abcdef"
    file.truncate(6)
    assert file.size() == 6
    file.close()
    storage.rename("a", "b")
    storage.sync_directory()
    assert storage.names() == ["b"]
    assert read_file(storage, "b") == bytes(4) + b"ab"
    storage.remove("b")
    assert storage.names() == []
    with pytest.raises(FileNotFoundError):
        storage.open("b")
    storage.close()
