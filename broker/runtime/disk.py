"""The disk guard: how much room a node's data directory has left, and whether it is full.

Purpose: stop taking new messages before the disk runs out, instead of failing a journal
write half-way. A node is *full* when its data directory holds more than
``limits.disk_budget_bytes`` (when set), or when its file system has less than
``limits.disk_free_min_bytes`` free. A full node refuses new messages with
``CANNOT_APPEND_MESSAGE`` (4010) where it is a partition's primary, and its partition
backups drop prepares (as if lost on the network: the other replicas go on, and this one
repairs what it missed once there is room again). Metadata ops are small and still taken,
so logins and reads keep working. Reads are never refused for lack of space.

Invariants:

1. The readings run in worker threads, never on the event loop: the file system's free
   space (``os.statvfs``, cheap) every ``DISK_SCAN_INTERVAL_S``; the walk of the data
   directory, whose cost grows with the files a node holds (thousands of partitions), at
   most ``WALK_DUTY_MAX`` of the time: after a walk that took ``t``, the next one starts
   ``max(DISK_SCAN_INTERVAL_S, t / WALK_DUTY_MAX)`` after it started.
2. Between readings, bytes appended to journals are added to each figure since its last
   reading (``note_appended``), so a burst cannot overshoot the budget by more than the
   prepares already admitted, however long the walk waits.
3. Usage counts each file's size (``st_size``), so a sparse file counts in full: what the
   directory may come to occupy, the same on every file system.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

log = logging.getLogger("viewstream.disk")

DISK_SCAN_INTERVAL_S: Final = 1.0
"""How often the free space is read, and the shortest time between two walks."""
WALK_DUTY_MAX: Final = 0.01
"""The share of the time the walk of the data directory may take (invariant 1): with
3,000 partitions, a walk of some tens of milliseconds runs every few seconds instead of
every second."""


@dataclass(frozen=True, slots=True)
class DiskScan:
    """One reading of the data directory and its file system."""

    used_bytes: int
    """Sum of the sizes of every file under the data directory."""
    free_bytes: int
    """Bytes free on its file system for an unprivileged writer."""


def scan_disk(data_dir: Path) -> DiskScan:
    """Read the data directory's usage and its file system's free space (blocking)."""
    return DiskScan(used_bytes=used_bytes(data_dir), free_bytes=free_bytes(data_dir))


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


def free_bytes(data_dir: Path) -> int:
    """Bytes free on ``data_dir``'s file system for an unprivileged writer (blocking)."""
    stats = os.statvfs(data_dir)
    return stats.f_bavail * stats.f_frsize


def next_walk_at(started_s: float, took_s: float) -> float:
    """When the walk after one that started at ``started_s`` and took ``took_s`` starts
    (invariant 1)."""
    return started_s + max(DISK_SCAN_INTERVAL_S, took_s / WALK_DUTY_MAX)


class DiskGuard:
    """Whether the node is full, from periodic scans and the bytes appended since.

    Args:
        data_dir: The node's data directory.
        budget_bytes: Most bytes the directory may hold; 0 for no budget.
        free_min_bytes: Free space to leave on the file system.
    """

    def __init__(self, data_dir: Path, *, budget_bytes: int, free_min_bytes: int) -> None:
        self.data_dir = data_dir
        self.budget_bytes = budget_bytes
        self.free_min_bytes = free_min_bytes
        self.scan = DiskScan(used_bytes=0, free_bytes=free_min_bytes + 1)
        self.appended_since_walk = 0
        self.appended_since_statvfs = 0

    def note_appended(self, size: int) -> None:
        self.appended_since_walk += size
        self.appended_since_statvfs += size

    @property
    def used_bytes(self) -> int:
        return self.scan.used_bytes + self.appended_since_walk

    @property
    def free_bytes(self) -> int:
        return max(0, self.scan.free_bytes - self.appended_since_statvfs)

    @property
    def full_reason(self) -> str | None:
        """Why the node is full, or None when it has room."""
        used, budget = self.used_bytes, self.budget_bytes
        if budget and used > budget:
            return f"the data directory holds {used:,} bytes, over its budget of {budget:,}"
        free, free_min = self.free_bytes, self.free_min_bytes
        if free < free_min:
            return f"{free:,} bytes free on its file system, below the {free_min:,} kept free"
        return None

    @property
    def full(self) -> bool:
        return self.full_reason is not None

    def update(self, scan: DiskScan) -> None:
        """Take a new walk and free-space reading."""
        self._take(scan, walked=True)

    def update_free(self, free: int) -> None:
        """Take a new free-space reading; the usage stays the last walk's, plus appends."""
        self._take(DiskScan(self.scan.used_bytes, free), walked=False)

    def _take(self, scan: DiskScan, *, walked: bool) -> None:
        """Log when the node becomes full or has room again."""
        was_full = self.full
        self.scan = scan
        if walked:
            self.appended_since_walk = 0
        self.appended_since_statvfs = 0
        reason = self.full_reason
        if reason is not None and not was_full:
            log.warning("disk full: %s; refusing new messages until there is room", reason)
        elif reason is None and was_full:
            log.info("disk has room again: taking new messages")

    async def run(self) -> None:
        """Read forever (cancel to stop). A reading that fails keeps the last one."""
        walk_at = trio.current_time()
        while True:
            now = trio.current_time()
            try:
                if now >= walk_at:
                    scan = await trio.to_thread.run_sync(scan_disk, self.data_dir)
                    walk_at = next_walk_at(now, trio.current_time() - now)
                    self.update(scan)
                else:
                    free = await trio.to_thread.run_sync(free_bytes, self.data_dir)
                    self.update_free(free)
            except OSError as error:
                walk_at = now + DISK_SCAN_INTERVAL_S
                log.warning("cannot read the disk usage of %s: %s", self.data_dir, error)
            await trio.sleep(DISK_SCAN_INTERVAL_S)
