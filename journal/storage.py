"""FileStorage: the journal's files on a real disk. The only journal module that imports ``os``.

Purpose: implement :class:`journal.storage_api.Storage` with real files in one directory:
``os.pwritev`` and ``os.preadv``/``os.pread`` at explicit positions, ``os.fdatasync`` to make
a file's data durable, and an ``fsync`` of the directory to make creates, removes and
renames durable.

Invariants:

1. This is the only module of the journal package that imports ``os``; nothing in the
   package imports this module, so the simulator and the state machines never reach
   ``os`` through the journal. The runtime imports ``FileStorage`` from here.
2. A write either writes every byte of every buffer (short writes are resumed) or raises.
3. A file object holds nothing but its descriptor, so one thread may ``sync()`` a file
   while another writes to it: ``pwritev`` and ``fdatasync`` on one descriptor are
   independent system calls. This is what the journal's sync concurrency contract needs.
4. A storage holds one descriptor of its own, its directory's, from construction until
   ``close`` (which may be called again: a storage being given up after a failure is
   closed by whoever gets there first).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Final

from journal.memory_storage import MemoryStorage
from journal.storage_api import Buffer, Storage, StorageFile, WritableBuffer, check_name, nbytes

__all__ = ["FileStorage", "MemoryStorage", "Storage", "StorageFile"]

WRITE_RETRIES_MAX: Final = 1024
"""Short writes a single write may take before it gives up."""


class _File:
    """A real file: a descriptor and nothing else, so a sync may race a write."""

    __slots__ = ("_fd", "_name")

    def __init__(self, fd: int, name: str) -> None:
        assert fd >= 0
        self._fd = fd
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def write(self, position: int, buffers: Sequence[Buffer]) -> None:
        assert position >= 0
        total = 0
        for buffer in buffers:
            total += nbytes(buffer)
        written = os.pwritev(self._fd, buffers, position)
        if written == total:
            return
        # A short write (rare: signals, a full disk): go on from where it stopped.
        remaining = [memoryview(buffer).cast("B") for buffer in buffers]
        for _ in range(WRITE_RETRIES_MAX):
            assert written > 0
            position += written
            while remaining and written >= remaining[0].nbytes:
                written -= remaining[0].nbytes
                remaining.pop(0)
            if written:
                remaining[0] = remaining[0][written:]
            remaining = [view for view in remaining if view.nbytes > 0]
            if not remaining:
                return
            written = os.pwritev(self._fd, remaining, position)
        raise OSError(errno.EIO, f"{self._name}: write made no progress")

    def read_into(self, position: int, buffer: WritableBuffer) -> int:
        assert position >= 0
        view = memoryview(buffer).cast("B")
        total = 0
        while total < view.nbytes:
            count = os.preadv(self._fd, [view[total:]], position + total)
            if count == 0:
                break
            total += count
        return total

    def read(self, position: int, size: int) -> bytes:
        assert position >= 0
        assert size >= 0
        data = os.pread(self._fd, size, position)
        if len(data) == size or not data:
            return data
        # A short read before the end (rare): go on, at the price of a join.
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def truncate(self, size: int) -> None:
        assert size >= 0
        os.ftruncate(self._fd, size)

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
        self._fd = -1


class FileStorage:
    """Real files in one directory, created (and its creation made durable) if missing."""

    def __init__(self, path: str) -> None:
        """Opens the directory ``path``, creating it if needed.

        Args:
            path: The directory holding this storage's files.
        """
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            parent = os.path.dirname(os.path.abspath(path))
            fsync_directory_path(parent)
        self.path = path
        self._directory_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _path(self, name: str) -> str:
        check_name(name)
        return os.path.join(self.path, name)

    def names(self) -> list[str]:
        with os.scandir(self.path) as entries:
            return sorted(entry.name for entry in entries if entry.is_file())

    def create(self, name: str) -> _File:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        return _File(os.open(self._path(name), flags, 0o644), name)

    def open(self, name: str) -> _File:
        return _File(os.open(self._path(name), os.O_RDWR | os.O_CLOEXEC), name)

    def remove(self, name: str) -> None:
        os.unlink(self._path(name))

    def rename(self, source: str, target: str) -> None:
        os.replace(self._path(source), self._path(target))

    def sync_directory(self) -> None:
        os.fsync(self._directory_fd)

    def close(self) -> None:
        """Releases the directory descriptor (once; later calls do nothing)."""
        fd, self._directory_fd = self._directory_fd, -1
        if fd >= 0:
            os.close(fd)


def fsync_directory_path(path: str) -> None:
    """fsync the directory at ``path``: the entries created or removed in it are durable.

    Raises:
        OSError: it cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
