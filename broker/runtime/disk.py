"""The disk guard: reads how much room a node's data directory has left, for the budget.

Purpose: measure, and only measure: the decisions (whether the node is full, what a full
node refuses) are ``broker.core.disk.DiskUsage``'s, fed the readings taken here. A full
node refuses new messages with ``CANNOT_APPEND_MESSAGE`` (4010) where it is a partition's
primary; retention and purge go on and free space (``docs/operations.md``, A full disk).

Invariants:

1. The readings run in worker threads, never on the event loop: the file system's free
   space (``os.statvfs``, cheap) every ``DISK_SCAN_INTERVAL_S``; the walk of the data
   directory, whose cost grows with the files a node holds (thousands of partitions), at
   most ``WALK_DUTY_MAX`` of the time: after a walk that took ``t``, the next one starts
   ``max(DISK_SCAN_INTERVAL_S, t / WALK_DUTY_MAX)`` after it started.
2. Usage counts each file's size (``st_size``), so a sparse file counts in full: what the
   directory may come to occupy, the same on every file system.
3. The guard logs once when the node becomes full and once when it has room again.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

import trio

from broker.core.disk import DiskLimits, DiskReading, DiskUsage

log = logging.getLogger("viewstream.disk")

DISK_SCAN_INTERVAL_S: Final = 1.0
"""How often the free space is read, and the shortest time between two walks."""
WALK_DUTY_MAX: Final = 0.01
"""The share of the time the walk of the data directory may take (invariant 1): with
3,000 partitions, a walk of some tens of milliseconds runs every few seconds instead of
every second."""


def scan_disk(data_dir: Path) -> DiskReading:
    """Read the data directory's usage and its file system's space (blocking)."""
    free, total = file_system_space(data_dir)
    return DiskReading(used_bytes=used_bytes(data_dir), free_bytes=free, total_bytes=total)


def used_bytes(data_dir: Path) -> int:
    """The sum of the sizes of every file under ``data_dir`` (blocking: a walk)."""
    used = 0
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            try:
                used += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue  # removed while we walked (a group deleted, a temp file renamed)
    return used


def file_system_space(data_dir: Path) -> tuple[int, int]:
    """Bytes free for an unprivileged writer on ``data_dir``'s file system, and its size
    (blocking)."""
    stats = os.statvfs(data_dir)
    return stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize


def next_walk_at(started_s: float, took_s: float) -> float:
    """When the walk after one that started at ``started_s`` and took ``took_s`` starts
    (invariant 1)."""
    return started_s + max(DISK_SCAN_INTERVAL_S, took_s / WALK_DUTY_MAX)


class DiskGuard:
    """Takes readings of the data directory into ``usage`` (``broker.core.disk``).

    Args:
        data_dir: The node's data directory.
        budget_bytes: ``limits.disk_budget_bytes`` (None: leave 5% of the file system free).
        free_min_bytes: Free space to leave on the file system.
    """

    def __init__(self, data_dir: Path, *, budget_bytes: int | None, free_min_bytes: int) -> None:
        self.data_dir = data_dir
        self.usage = DiskUsage(DiskLimits(budget_bytes, free_min_bytes))
        self._was_full = False
        self.bytes_deleted = 0
        """Bytes of the segment logs partitions deleted since the node started (retention,
        DELETE_SEGMENTS, purges), groups deleted since included."""
        self.segments_deleted = 0

    @property
    def full(self) -> bool:
        return self.usage.full

    def note_appended(self, size: int) -> None:
        self.usage.note_appended(size)

    def note_deleted(self, size: int, segments: int) -> None:
        """``segments`` segments of ``size`` bytes were deleted: room again at once, if
        that was all."""
        self.bytes_deleted += size
        self.segments_deleted += segments
        self.usage.note_deleted(size)
        self._log_change()

    def update(self, reading: DiskReading) -> None:
        """Take a new walk and free-space reading."""
        self.usage.walked(reading)
        self._log_change()

    def update_free(self, free: int, total: int) -> None:
        """Take a new free-space reading."""
        self.usage.read_free(free, total)
        self._log_change()

    def _log_change(self) -> None:
        reason = self.usage.full_reason
        if reason is not None and not self._was_full:
            log.warning("disk full: %s; refusing new messages until there is room", reason)
        elif reason is None and self._was_full:
            log.info("disk has room again: taking new messages")
        self._was_full = reason is not None

    async def run(self) -> None:
        """Read forever (cancel to stop). A reading that fails keeps the last one."""
        walk_at = trio.current_time()
        while True:
            now = trio.current_time()
            try:
                if now >= walk_at:
                    reading = await trio.to_thread.run_sync(scan_disk, self.data_dir)
                    walk_at = next_walk_at(now, trio.current_time() - now)
                    self.update(reading)
                else:
                    space = await trio.to_thread.run_sync(file_system_space, self.data_dir)
                    self.update_free(*space)
            except OSError as error:
                walk_at = now + DISK_SCAN_INTERVAL_S
                log.warning("cannot read the disk usage of %s: %s", self.data_dir, error)
            await trio.sleep(DISK_SCAN_INTERVAL_S)
