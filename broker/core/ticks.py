"""The tick schedule: which groups are due on which tick, without visiting the others.

Purpose: a node hosts thousands of groups and most are idle. A group's replica says when
it next needs a tick (``Replica.ticks_until_due``); the host asks to be woken on that
tick, and time moving on hands back only the groups that are due. Advancing is then
O(due groups + log n), not O(groups), per tick.

Invariants:

1. Each key has at most one deadline; ``wake_at`` replaces it. Superseded heap entries
   are dropped when they surface, and the heap is rebuilt once it holds more than
   ``HEAP_SLACK`` times as many entries as there are deadlines (plus ``HEAP_SLACK_MIN``),
   so its size stays bounded by the keys.
2. ``advance`` returns every key whose deadline is at or before the new ``now``, once,
   by deadline and then by key: the same order for the same calls (no hashing order).
3. ``now`` only grows; a deadline at or before ``now`` is due at the next ``advance``.

Theory of operation: a min-heap of ``(tick, key)`` beside a dict of each key's current
deadline; an entry that does not match the dict is stale. Pure and deterministic (no
clock: ticks arrive as counts), so it is tested synchronously and could drive the
simulator's groups as it drives the runtime's.
"""

from __future__ import annotations

import heapq
from typing import Final

HEAP_SLACK: Final = 2
HEAP_SLACK_MIN: Final = 64
"""The heap is rebuilt once it holds more than ``HEAP_SLACK * deadlines + HEAP_SLACK_MIN``
entries (invariant 1): a busy group reschedules itself after every pass."""


class TickSchedule:
    """Deadlines in ticks for integer keys (group ids); see the module docstring."""

    def __init__(self) -> None:
        self.now = 0
        """Ticks delivered so far."""
        self._deadlines: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self._deadlines)

    def deadline(self, key: int) -> int | None:
        return self._deadlines.get(key)

    def wake_at(self, key: int, tick: int) -> None:
        """Make ``tick`` the deadline of ``key`` (replacing any other)."""
        if self._deadlines.get(key) == tick:
            return
        self._deadlines[key] = tick
        heapq.heappush(self._heap, (tick, key))
        if len(self._heap) > HEAP_SLACK * len(self._deadlines) + HEAP_SLACK_MIN:
            self._heap = [(t, k) for k, t in self._deadlines.items()]
            heapq.heapify(self._heap)
        assert len(self._heap) <= HEAP_SLACK * len(self._deadlines) + HEAP_SLACK_MIN

    def cancel(self, key: int) -> None:
        """Forget the deadline of ``key``, if any (its heap entry goes stale)."""
        self._deadlines.pop(key, None)

    def earliest(self) -> int | None:
        """The earliest deadline of any key (perhaps at or before ``now``), if any."""
        heap, deadlines = self._heap, self._deadlines
        while heap and deadlines.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded or cancelled
        return heap[0][0] if heap else None

    def advance(self, ticks: int) -> list[int]:
        """Let ``ticks`` ticks pass; return the keys now due, which lose their deadline."""
        assert ticks >= 0
        self.now += ticks
        due: list[int] = []
        heap, deadlines = self._heap, self._deadlines
        while heap and heap[0][0] <= self.now:
            tick, key = heapq.heappop(heap)
            if deadlines.get(key) == tick:
                del deadlines[key]
                due.append(key)
        return due
