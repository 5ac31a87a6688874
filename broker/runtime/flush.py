"""Group commit across groups: one flush of the file system covers every group's appends.

Purpose: each group's journal syncs on its own (``GroupHost`` runs at most one sync at a
time, covering every append made before it started). With many partitions busy at once,
that is one ``fdatasync`` per partition per round, each in its own worker thread. The
flusher gathers the syncs that groups ask for while a flush is in flight and makes them
all durable with one ``syncfs`` of the data directory's file system, in one worker thread:
a group commit across partitions as well as within one.

Invariants:

1. A group's sync returns only once every record its journal planned (``begin_sync``) is
   on disk: the ``syncfs`` that covers the round starts after every plan of the round was
   taken, so it covers every append each plan claims (and possibly later ones, which the
   group's next sync then claims again at no cost).
2. A failed flush breaks every journal of its round (``abandon_sync``) and raises in each
   group that asked, exactly as a failed ``fdatasync`` does: the page cache after a failed
   flush is unknown, so nothing it may have covered is ever acknowledged.
3. ``syncfs`` also writes back whatever else is dirty on the file system (the unsynced
   appends of ``replicated`` topics, other programs' files), which a single group should
   not wait for. So a round of one group syncs that group's own files (``fdatasync``);
   only rounds of two or more use ``syncfs``, and only with ``sync_scope =
   "filesystem"`` on Linux 5.8 or later (with ``"file"`` every group syncs alone, in
   parallel worker threads). A group whose directory lies on another file system than
   the data directory (a mount) always syncs its own files: a flush of the data
   directory's file system would not cover it. The node hands the flusher to partition
   groups only: the metadata group syncs its own files, so a login never waits for a
   flush of the partitions' data.
4. Rounds run one at a time, in the order groups asked; a group is never in two rounds at
   once (its host allows one sync in flight).

Theory of operation: ``sync(store)`` queues a ticket and waits for it. The flusher task
takes every queued ticket, runs the round in one worker thread (begin each plan, one
``syncfs``, finish each plan), and answers each ticket with its new durable op or the
exception its group would have got from its own sync.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import trio

from broker.runtime.store import GroupStore
from journal import SyncPlan

log = logging.getLogger("viewstream.flush")

SyncScope = Literal["filesystem", "file"]


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs(2)`` (Linux), or None where there is none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)  # CDLL calls release the GIL
    except OSError:
        return None
    function = getattr(libc, "syncfs", None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    syncfs: Callable[[int], int] = function
    return syncfs


_SYNCFS: Final = _load_syncfs()


_SYNCFS_REPORTS_ERRORS: Final = (5, 8)
"""Linux reports write-back errors from ``syncfs`` since 5.8; before, it returned 0 even
when pages it wrote back were lost, so a flush could not be trusted there."""


def _kernel_at_least(version: tuple[int, int]) -> bool:
    if platform.system() != "Linux":
        return False
    numbers = re.match(r"(\d+)\.(\d+)", platform.release())
    return numbers is not None and (int(numbers[1]), int(numbers[2])) >= version


def syncfs_available() -> bool:
    """Whether ``syncfs`` exists here and reports write-back errors."""
    return _SYNCFS is not None and _kernel_at_least(_SYNCFS_REPORTS_ERRORS)


def sync_file_system(fd: int) -> None:
    """Writes back and waits for every dirty page and inode of ``fd``'s file system.

    Raises:
        OSError: the kernel reported a write-back error on the file system.
    """
    assert _SYNCFS is not None
    if _SYNCFS(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"syncfs: {os.strerror(errno)}")


@dataclass(eq=False, slots=True)
class _Ticket:
    store: GroupStore
    done: trio.Event = field(default_factory=trio.Event)
    op: int = 0
    error: Exception | None = None
    flushed: bool = False
    """Covered by a flush of the file system (rather than its own files' sync)."""
    unserved: bool = False
    """The flusher stopped before its round: its group syncs on its own instead."""


@dataclass(slots=True)
class FlushCounters:
    """The flusher's counters (node-wide; ``viewstream stats`` prints them)."""

    rounds: int = 0
    """Flushes of the file system (``syncfs``) completed, each covering two or more
    groups' syncs. Rounds of one group (its own ``fdatasync``) are not counted here but in
    that group's ``syncs``, as every sync is."""
    groups_flushed: int = 0
    """Group syncs those flushes completed (groups per flush = this / rounds)."""


class Flusher:
    """The node's one flusher of journal syncs (see the module doc)."""

    def __init__(self, data_dir: Path, *, scope: SyncScope) -> None:
        self._data_dir = data_dir
        self.scope: SyncScope = scope
        if scope == "filesystem" and not syncfs_available():
            log.warning(
                "sync_scope 'filesystem' needs syncfs(2) on Linux 5.8 or later: using 'file'"
            )
            self.scope = "file"
        self._queue: list[_Ticket] = []
        self._wanted = trio.Event()
        self._fd: int | None = None
        self._device = -1
        self._serving = False
        self.counters = FlushCounters()

    async def sync(self, store: GroupStore) -> int:
        """Makes every append of ``store`` so far durable; returns the op covered.

        Not cancellable once asked, like the thread call it stands for: a journal must
        not close under a sync.

        Raises:
            JournalBroken, OSError: as ``GroupStore.sync``.
        """
        if not self._serving or store.no_sync:
            return await trio.to_thread.run_sync(store.sync)
        ticket = _Ticket(store)
        self._queue.append(ticket)
        self._wanted.set()
        with trio.CancelScope(shield=True):
            await ticket.done.wait()
            if ticket.unserved:
                return await trio.to_thread.run_sync(store.sync)
        if ticket.error is not None:
            raise ticket.error
        return ticket.op

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serves rounds until cancelled (a round in progress always completes)."""
        if self.scope == "file":
            task_status.started()
            return
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self._data_dir, os.O_RDONLY | os.O_DIRECTORY)
        self._device = os.fstat(self._fd).st_dev
        self._serving = True
        task_status.started()
        try:
            while True:
                await self._wanted.wait()
                self._wanted = trio.Event()
                tickets, self._queue = self._queue, []
                try:
                    await trio.to_thread.run_sync(self._round, tickets)
                finally:
                    flushed = [ticket for ticket in tickets if ticket.flushed]
                    if flushed:
                        self.counters.rounds += 1
                        self.counters.groups_flushed += len(flushed)
                    for ticket in tickets:
                        ticket.done.set()
        finally:
            self._serving = False
            for ticket in self._queue:
                ticket.unserved = True
                ticket.done.set()
            self._queue = []
            os.close(self._fd)
            self._fd = None

    def _round(self, tickets: list[_Ticket]) -> None:
        """One round, in a worker thread: every ticket gets its op or its error."""
        shared: list[_Ticket] = []
        for ticket in tickets:
            # A journal elsewhere (a partitions directory mounted from another disk) is
            # not covered by a flush of the data directory's file system.
            if _device_of(ticket.store.path) == self._device:
                shared.append(ticket)
            else:
                self._sync_alone(ticket)
        if len(shared) == 1:
            self._sync_alone(shared[0])
            return
        begun: list[tuple[_Ticket, SyncPlan]] = []
        for ticket in shared:
            try:
                begun.append((ticket, ticket.store.begin_sync()))
            except Exception as error:  # JournalBroken: an earlier failure
                ticket.error = error
        if not begun:
            return
        assert self._fd is not None
        try:
            sync_file_system(self._fd)
        except OSError as error:
            for ticket, _plan in begun:
                ticket.store.abandon_sync()
                ticket.error = error
            return
        for ticket, plan in begun:
            ticket.op = ticket.store.finish_sync(plan)
            ticket.flushed = True

    @staticmethod
    def _sync_alone(ticket: _Ticket) -> None:
        try:
            ticket.op = ticket.store.sync()
        except Exception as error:  # JournalBroken or OSError: the group's to raise
            ticket.error = error


def _device_of(path: Path) -> int:
    """The file system (device number) ``path`` lives on."""
    return os.stat(path).st_dev
