"""MemoryStorage: a deterministic page cache over a simulated disk, for tests and the simulator.

Purpose: implement :class:`journal.storage_api.Storage` in memory, with the failures a real
disk has, on command: a crash that loses what was not synced and tears what was being
written, corruption of stored bytes, and failing reads, writes and syncs.

Invariants:

1. ``MemoryStorage`` is a pure function of its injected ``random.Random`` and the calls made
   on it: the same calls with the same seed give the same bytes, crash after crash.
2. After ``crash()`` each file holds exactly its contents as of its last ``sync()``, plus
   at most the newest unsynced change (a write possibly torn to a prefix); the namespace
   is exactly the one of the last ``sync_directory()``.
3. No ``os``, no threads: it is single-threaded, like the simulator that drives it.

Theory of operation: each file (inode) holds its current contents, what a reader sees
through the page cache, plus an undo log of the writes and truncations made since its last
``sync()``. ``crash()`` plays each undo log backwards to get the durable contents, then lets
the last unsynced write of each file survive as a prefix cut at a random byte (a torn
write: a third of crashes lose it entirely, a third keep it whole, a third cut it at a
uniformly random byte), and an unsynced last truncation survives or not at random. Earlier
unsynced writes are lost. The directory works the same way: the namespace falls back to
the one of the last ``sync_directory()``, so files created since vanish and files removed
since come back. Handles opened before a crash are dead afterwards. ``corrupt()`` flips
bytes of the current contents (a latent media error), ``fail_next()`` makes the next
matching read, write, sync or remove raise ``OSError(EIO)`` (a failed remove leaves the
file: a simulator stops a deletion between two unlinks with it).
"""

from __future__ import annotations

import errno
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from journal.storage_api import Buffer, WritableBuffer, check_name, nbytes

__all__ = ["FaultKind", "MemoryStorage"]

FaultKind = Literal["read", "write", "sync", "remove"]


@dataclass(slots=True)
class _Undo:
    """One unsynced change to an inode, with what it takes to revert it.

    ``data`` is kept only for the newest change of an inode: it is the one a crash may let
    through torn; older changes only ever need reverting.
    """

    kind: Literal["write", "truncate"]
    position: int  # write: where it went; truncate: the new size
    size_before: int  # the file's size before the change
    replaced: bytes  # bytes the change overwrote or cut off (within size_before)
    data: bytes | None  # write: the bytes written, while this is the newest change


class _Inode:
    __slots__ = ("contents", "number", "undo")

    def __init__(self, number: int) -> None:
        self.number = number
        self.contents = bytearray()
        self.undo: list[_Undo] = []

    def _push(self, undo: _Undo) -> None:
        if self.undo:
            self.undo[-1].data = None
        self.undo.append(undo)

    def write(self, position: int, data: bytes) -> None:
        size_before = len(self.contents)
        replaced = bytes(self.contents[position : position + len(data)])
        self._push(_Undo("write", position, size_before, replaced, data))
        self._apply_write(position, data)

    def _apply_write(self, position: int, data: bytes) -> None:
        if position > len(self.contents):
            self.contents.extend(bytes(position - len(self.contents)))
        self.contents[position : position + len(data)] = data

    def truncate(self, size: int) -> None:
        size_before = len(self.contents)
        replaced = bytes(self.contents[size:])
        self._push(_Undo("truncate", size, size_before, replaced, None))
        self._apply_truncate(size)

    def _apply_truncate(self, size: int) -> None:
        if size <= len(self.contents):
            del self.contents[size:]
        else:
            self.contents.extend(bytes(size - len(self.contents)))

    def _revert(self, undo: _Undo) -> None:
        if undo.kind == "write":
            self.contents[undo.position : undo.position + len(undo.replaced)] = undo.replaced
            del self.contents[undo.size_before :]
        else:
            del self.contents[undo.position :]
            self.contents[undo.position :] = undo.replaced
            del self.contents[undo.size_before :]
        assert len(self.contents) == undo.size_before

    def sync(self) -> None:
        self.undo.clear()

    def crash(self, prng: random.Random) -> None:
        """Drops unsynced changes; the newest may survive, a write torn at a random byte."""
        if not self.undo:
            return
        newest = self.undo[-1]
        for undo in reversed(self.undo):
            self._revert(undo)
        self.undo.clear()
        if newest.kind == "write":
            assert newest.data is not None
            # Torn at any byte; the two ends (lost, whole) get a third of the odds each,
            # because they are the cases with the most to say (whole: a later write
            # reached the disk while earlier ones did not).
            draw = prng.random()
            if draw < 1 / 3:
                cut = 0
            elif draw < 2 / 3:
                cut = len(newest.data)
            else:
                cut = prng.randint(0, len(newest.data))
            if cut > 0:
                self._apply_write(newest.position, newest.data[:cut])
        elif prng.random() < 0.5:
            self._apply_truncate(newest.position)


@dataclass(slots=True)
class _Fault:
    kind: FaultKind
    name: str | None


class _MemoryFile:
    __slots__ = ("_closed", "_generation", "_inode", "_name", "_storage")

    def __init__(self, storage: MemoryStorage, inode: _Inode, name: str) -> None:
        self._storage = storage
        self._inode = inode
        self._name = name
        self._generation = storage.generation
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    def _check(self) -> None:
        if self._closed or self._generation != self._storage.generation:
            raise OSError(errno.EBADF, f"{self._name}: handle is closed or died in a crash")

    def size(self) -> int:
        self._check()
        return len(self._inode.contents)

    def write(self, position: int, buffers: Sequence[Buffer]) -> None:
        assert position >= 0
        self._check()
        self._storage.maybe_fail("write", self._name)
        data = b"".join(bytes(buffer) for buffer in buffers)
        if data:
            self._inode.write(position, data)

    def read_into(self, position: int, buffer: WritableBuffer) -> int:
        assert position >= 0
        self._check()
        self._storage.maybe_fail("read", self._name)
        contents = self._inode.contents
        count = max(0, min(nbytes(buffer), len(contents) - position))
        memoryview(buffer).cast("B")[:count] = contents[position : position + count]
        return count

    def read(self, position: int, size: int) -> bytes:
        assert position >= 0
        assert size >= 0
        self._check()
        self._storage.maybe_fail("read", self._name)
        return bytes(self._inode.contents[position : position + size])

    def truncate(self, size: int) -> None:
        assert size >= 0
        self._check()
        self._storage.maybe_fail("write", self._name)
        self._inode.truncate(size)

    def sync(self) -> None:
        self._check()
        self._storage.maybe_fail("sync", self._name)
        self._inode.sync()

    def close(self) -> None:
        self._closed = True


class MemoryStorage:
    """A deterministic page cache over a simulated disk, with crash and fault injection."""

    def __init__(self, prng: random.Random) -> None:
        """Makes an empty storage.

        Args:
            prng: The only source of randomness (where crashes tear, how bytes flip).
        """
        self._prng = prng
        self._files: dict[str, _Inode] = {}
        self._files_durable: dict[str, _Inode] = {}
        self._faults: list[_Fault] = []
        self._inode_count = 0
        self.generation = 0
        """Bumped by every crash; handles of an older generation are dead."""

    # Storage protocol -----------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self._files)

    def create(self, name: str) -> _MemoryFile:
        check_name(name)
        if name in self._files:
            raise FileExistsError(errno.EEXIST, "file exists", name)
        self._inode_count += 1
        inode = _Inode(self._inode_count)
        self._files[name] = inode
        return _MemoryFile(self, inode, name)

    def open(self, name: str) -> _MemoryFile:
        check_name(name)
        if name not in self._files:
            raise FileNotFoundError(errno.ENOENT, "no such file", name)
        return _MemoryFile(self, self._files[name], name)

    def remove(self, name: str) -> None:
        check_name(name)
        if name not in self._files:
            raise FileNotFoundError(errno.ENOENT, "no such file", name)
        self.maybe_fail("remove", name)
        del self._files[name]

    def rename(self, source: str, target: str) -> None:
        check_name(source)
        check_name(target)
        if source not in self._files:
            raise FileNotFoundError(errno.ENOENT, "no such file", source)
        self._files[target] = self._files.pop(source)

    def sync_directory(self) -> None:
        self.maybe_fail("sync", None)
        self._files_durable = dict(self._files)

    # Faults ---------------------------------------------------------------------------------

    def maybe_fail(self, kind: FaultKind, name: str | None) -> None:
        """Raises ``OSError(EIO)`` if an injected fault matches this operation (consumed)."""
        for index, fault in enumerate(self._faults):
            if fault.kind == kind and (fault.name is None or fault.name == name):
                del self._faults[index]
                raise OSError(errno.EIO, f"injected {kind} fault", name)

    def fail_next(self, kind: FaultKind, name: str | None = None) -> None:
        """Makes the next ``kind`` operation (on ``name``, or on any file) raise EIO."""
        self._faults.append(_Fault(kind, name))

    def corrupt(self, name: str, position: int, size: int) -> None:
        """Changes every byte of ``[position, position + size)`` of a file's contents.

        The change hits what readers see; it survives a crash unless an unsynced write
        covering those bytes is reverted by it.
        """
        contents = self._files[name].contents
        assert position >= 0
        assert position + size <= len(contents)
        for at in range(position, position + size):
            contents[at] ^= self._prng.randint(1, 255)

    def crash(self) -> None:
        """Loses every unsynced change, as a power failure would (see the module doc)."""
        inodes = {inode.number: inode for inode in self._files_durable.values()}
        for number in sorted(inodes):
            inodes[number].crash(self._prng)
        # Files created since the last directory sync are gone; their inodes may still
        # hold unsynced changes, which no one can see any more.
        for inode in self._files.values():
            if inode.number not in inodes:
                inode.undo.clear()
        self._files = dict(self._files_durable)
        self._faults.clear()
        self.generation += 1

    def contents(self, name: str) -> bytes:
        """The current contents of a file (a test helper, no fault injection)."""
        return bytes(self._files[name].contents)
