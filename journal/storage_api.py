"""The storage protocols: the journal's only door to a disk, real or simulated.

Purpose: the journal, the index and the superblock read and write named files of one flat
directory through :class:`Storage` and :class:`StorageFile`. Two implementations exist:
``journal.storage.FileStorage`` on real files, and ``journal.memory_storage.MemoryStorage``,
the deterministic stand-in for tests and the simulator. This module and the memory one
import no ``os``: the simulator and the state machines (whose import contracts forbid
``os``, directly or through another package) can use the journal without reaching it.

Invariants:

1. Durability is explicit and per object: data written to a file is durable only after
   that file's ``sync()``; a create, remove or rename is durable only after
   ``sync_directory()``. Nothing else promises anything.
2. ``write`` writes all the bytes of all its buffers or raises ``OSError``; ``read_into``
   and ``read`` read until the size asked for or the end of the file.
3. Names are flat: no ``/``, no NUL, not ``.`` or ``..``, at most ``FILE_NAME_LENGTH_MAX``
   bytes (asserted: names are the journal's own, never remote input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

__all__ = [
    "FILE_NAME_LENGTH_MAX",
    "Buffer",
    "Storage",
    "StorageFile",
    "WritableBuffer",
    "check_name",
    "nbytes",
]

FILE_NAME_LENGTH_MAX: Final = 255
"""Longest file name a storage accepts (the Linux ``NAME_MAX``)."""

Buffer = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview


class StorageFile(Protocol):
    """One open file of a :class:`Storage`."""

    @property
    def name(self) -> str:
        """The file's name within its storage, as it was opened."""
        ...

    def size(self) -> int:
        """Returns the file's current size in bytes (as readers see it)."""
        ...

    def write(self, position: int, buffers: Sequence[Buffer]) -> None:
        """Writes the buffers back to back at ``position``; not durable until ``sync()``.

        Args:
            position: Byte position of the first byte; may be beyond the end (the gap reads
                as zeros).
            buffers: Byte buffers, written in order without being joined first.

        Raises:
            OSError: The write failed; some prefix of it may have reached the file.
        """
        ...

    def read_into(self, position: int, buffer: WritableBuffer) -> int:
        """Reads up to ``len(buffer)`` bytes at ``position`` into ``buffer``.

        Returns:
            The number of bytes read: less than ``len(buffer)`` only at the end of the file.

        Raises:
            OSError: The read failed.
        """
        ...

    def read(self, position: int, size: int) -> bytes:
        """Reads up to ``size`` bytes at ``position`` into a new ``bytes``: one copy, and no
        zeroed buffer to fill first (large range reads use this).

        Returns:
            The bytes read: fewer than ``size`` only at the end of the file.

        Raises:
            OSError: The read failed.
        """
        ...

    def truncate(self, size: int) -> None:
        """Cuts (or extends with zeros) the file to ``size`` bytes; not durable until sync."""
        ...

    def sync(self) -> None:
        """Makes every earlier write and truncate of this file durable (``fdatasync``).

        Raises:
            OSError: The sync failed; the durable contents are unknown.
        """
        ...

    def close(self) -> None:
        """Releases the handle. Closing does not sync."""
        ...


class Storage(Protocol):
    """A flat directory of named files."""

    def names(self) -> list[str]:
        """Returns the names of all files, sorted."""
        ...

    def create(self, name: str) -> StorageFile:
        """Creates an empty file and opens it; the name is durable after ``sync_directory``.

        Raises:
            FileExistsError: A file of that name exists.
        """
        ...

    def open(self, name: str) -> StorageFile:
        """Opens an existing file for reading and writing.

        Raises:
            FileNotFoundError: No file of that name exists.
        """
        ...

    def remove(self, name: str) -> None:
        """Removes a file; durable after ``sync_directory``. Open handles stay usable."""
        ...

    def rename(self, source: str, target: str) -> None:
        """Renames ``source`` to ``target``, atomically replacing any ``target``."""
        ...

    def sync_directory(self) -> None:
        """Makes every earlier create, remove and rename durable."""
        ...


def check_name(name: str) -> None:
    assert 0 < len(name) <= FILE_NAME_LENGTH_MAX, name
    assert "/" not in name, name
    assert "\0" not in name, name
    assert name not in {".", ".."}, name


def nbytes(buffer: Buffer) -> int:
    return buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
