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

1. The scan (a walk of the data directory, ``os.statvfs``) runs in a worker thread every
   ``DISK_SCAN_INTERVAL_S``, never on the event loop.
2. Between scans, bytes appended to journals are added to the last scan's figures
   (``note_appended``), so a burst cannot overshoot the budget by more than the prepares
   already admitted.
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


@dataclass(frozen=True, slots=True)
class DiskScan:
    """One reading of the data directory and its file system."""

    used_bytes: int
    """Sum of the sizes of every file under the data directory."""
    free_bytes: int
    """Bytes free on its file system for an unprivileged writer."""


def scan_disk(data_dir: Path) -> DiskScan:
    """Read the data directory's usage and its file system's free space (blocking)."""
    used = 0
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            try:
                used += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue  # removed while we walked (a group deleted, a temp file renamed)
    stats = os.statvfs(data_dir)
    return DiskScan(used_bytes=used, free_bytes=stats.f_bavail * stats.f_frsize)


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
        self.appended_since_scan = 0

    def note_appended(self, size: int) -> None:
        self.appended_since_scan += size

    @property
    def used_bytes(self) -> int:
        return self.scan.used_bytes + self.appended_since_scan

    @property
    def free_bytes(self) -> int:
        return max(0, self.scan.free_bytes - self.appended_since_scan)

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
        """Take a new scan; log when the node becomes full or has room again."""
        was_full = self.full
        self.scan = scan
        self.appended_since_scan = 0
        reason = self.full_reason
        if reason is not None and not was_full:
            log.warning("disk full: %s; refusing new messages until there is room", reason)
        elif reason is None and was_full:
            log.info("disk has room again: taking new messages")

    async def run(self) -> None:
        """Scan forever (cancel to stop). A scan that fails keeps the last reading."""
        while True:
            try:
                scan = await trio.to_thread.run_sync(scan_disk, self.data_dir)
            except OSError as error:
                log.warning("cannot read the disk usage of %s: %s", self.data_dir, error)
            else:
                self.update(scan)
            await trio.sleep(DISK_SCAN_INTERVAL_S)
