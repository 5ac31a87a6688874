"""The disk budget: whether a node takes new messages, from the usage it measured.

Purpose: stop taking new messages before the disk runs out, instead of failing a journal
write half-way, and take them again once retention or a purge has freed room. The host
measures (``broker.runtime.disk`` walks the data directory and reads the file system's
free space in worker threads; the simulator may hand in readings of its own) and passes
each reading here as data; :class:`DiskUsage` decides.

Invariants:

1. A node is *full* when its data directory holds more than its budget, or its file
   system has less than ``free_min_bytes`` free. The budget is ``budget_bytes`` where
   set; by default (None) it is what leaves ``FREE_SHARE_PERCENT_DEFAULT`` (5%) of the
   file system free: the directory's usage plus the free space, less that share.
2. A full node's partition primaries refuse new messages (a ``SEND_MESSAGES`` that would
   be prepared) with Iggy's ``CANNOT_APPEND_MESSAGE`` (4010), which is what Iggy answers
   when its journal cannot take a send (``broker.core.groups``, invariant 5). Nothing
   else is refused: polls, offset stores, metadata ops, and the partitions' retention
   and purge ops, which free space.
3. Over its budget, a backup still appends every prepare of its primary: refusing them
   would hold back the retention and purge ops behind them, so the space that the
   deletion would free on this very node would never come (the primary's refusal bounds
   the growth to the prepares already admitted). Only when its file system is nearly
   exhausted (less than ``free_min_bytes`` free, where the next write may fail) does a
   backup drop new message prepares, as if lost on the network; it repairs them from its
   peers once there is room.
4. Between readings, bytes appended to journals and bytes of deleted segments adjust the
   figures of the last reading (``note_appended``, ``note_deleted``): a burst cannot
   overshoot the budget by more than the prepares already admitted, and a deletion lets
   sends in again without waiting for the next walk of the directory.
5. Pure: no clock, no IO; readings and sizes are arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sdk.wire.codes import Operation

FREE_SHARE_PERCENT_DEFAULT: Final = 5
"""The share of its file system a node leaves free when no ``disk_budget_bytes`` is set."""


@dataclass(frozen=True, slots=True)
class DiskReading:
    """One reading of the data directory and its file system."""

    used_bytes: int
    """Sum of the sizes of every file under the data directory."""
    free_bytes: int
    """Bytes free on its file system for an unprivileged writer."""
    total_bytes: int
    """Size of its file system."""


@dataclass(frozen=True, slots=True)
class DiskLimits:
    """The node's settings (``limits.disk_budget_bytes``, ``limits.disk_free_min_bytes``).

    Attributes:
        budget_bytes: Most bytes the data directory may hold; None for the default (leave
            ``FREE_SHARE_PERCENT_DEFAULT`` of the file system free); 0 for no budget but
            the free-space floor.
        free_min_bytes: Free space to leave on the file system whatever the budget.
    """

    budget_bytes: int | None
    free_min_bytes: int

    def __post_init__(self) -> None:
        assert self.budget_bytes is None or self.budget_bytes >= 0
        assert self.free_min_bytes >= 0


class DiskUsage:
    """The node's disk figures, from the last readings and what it wrote and deleted
    since; whether it is full (invariants 1 and 4)."""

    def __init__(self, limits: DiskLimits) -> None:
        self.limits = limits
        # Until the first reading: room (a node that cannot read its disk keeps serving).
        self.reading = DiskReading(
            used_bytes=0, free_bytes=limits.free_min_bytes + 1, total_bytes=0
        )
        self._used_delta = 0
        """Bytes appended less bytes deleted since the last walk."""
        self._free_delta = 0
        """Bytes deleted less bytes appended since the last free-space reading."""

    # -- what the host reports ----------------------------------------------------------------

    def walked(self, reading: DiskReading) -> None:
        """A new walk of the directory and free-space reading."""
        self.reading = reading
        self._used_delta = 0
        self._free_delta = 0

    def read_free(self, free_bytes: int, total_bytes: int) -> None:
        """A new free-space reading; the usage stays the last walk's, adjusted."""
        self.reading = DiskReading(self.reading.used_bytes, free_bytes, total_bytes)
        self._free_delta = 0

    def note_appended(self, size: int) -> None:
        assert size >= 0
        self._used_delta += size
        self._free_delta -= size

    def note_deleted(self, size: int) -> None:
        assert size >= 0
        self._used_delta -= size
        self._free_delta += size

    # -- figures -------------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        return max(0, self.reading.used_bytes + self._used_delta)

    @property
    def free_bytes(self) -> int:
        return max(0, self.reading.free_bytes + self._free_delta)

    @property
    def budget_bytes(self) -> int | None:
        """The budget in force (invariant 1): the configured one, or by default what
        leaves ``FREE_SHARE_PERCENT_DEFAULT`` of the file system free; None without one
        (configured 0, or no reading of the file system yet)."""
        configured = self.limits.budget_bytes
        if configured is not None:
            return configured or None
        total = self.reading.total_bytes
        if total <= 0:
            return None
        reserve = total * FREE_SHARE_PERCENT_DEFAULT // 100
        return max(0, self.used_bytes + self.free_bytes - reserve)

    # -- decisions -----------------------------------------------------------------------------

    @property
    def full_reason(self) -> str | None:
        """Why the node refuses new messages (invariant 1), or None when it has room."""
        used, budget = self.used_bytes, self.budget_bytes
        if budget is not None and used > budget:
            if self.limits.budget_bytes:
                return f"the data directory holds {used:,} bytes, over its budget of {budget:,}"
            return (
                f"the data directory holds {used:,} bytes, over the {budget:,} that leave "
                f"{FREE_SHARE_PERCENT_DEFAULT}% of its file system free"
            )
        free, free_min = self.free_bytes, self.limits.free_min_bytes
        if free < free_min:
            return f"{free:,} bytes free on its file system, below the {free_min:,} kept free"
        return None

    @property
    def full(self) -> bool:
        """Whether partition primaries refuse new messages (invariant 2)."""
        return self.full_reason is not None

    @property
    def exhausted(self) -> bool:
        """Whether the file system is nearly out of space (invariant 3)."""
        return self.free_bytes < self.limits.free_min_bytes

    def drops_prepare(self, operation: int) -> bool:
        """Whether a partition backup drops a peer's prepare of ``operation`` unwritten
        (invariant 3): new messages only, and only on a nearly exhausted file system."""
        return operation == Operation.SEND_MESSAGES and self.exhausted
