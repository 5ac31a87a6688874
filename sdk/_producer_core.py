"""The producer's batching logic, sans IO: which messages form which batch, and when a
batch may be sent.

Purpose: the trio and the blocking producer share this accumulator and differ only in how
they wait. Messages are appended per partition into an *open* batch; a batch is *sealed*
when one more message would exceed ``batch_length_max`` messages or
``batch_size_bytes_max`` bytes, or would make its origin timestamps span more than a batch
can carry (``MAX_TIMESTAMP_DELTA_US``); an open batch becomes sendable when it has
lingered ``linger_s`` seconds, or at once when the producer flushes.

Invariants:

1. ``buffered_bytes`` counts every message appended and not yet completed (queued or in
   flight) and never exceeds ``buffer_size_bytes_max``: :meth:`room_for` is checked
   before every append (backpressure happens there).
2. With ``ordered``, at most one batch per partition is in flight, and a partition's
   batches are taken in the order they were opened, so messages of one partition are
   appended by the cluster in the order they were sent (retries keep their request
   number, so they cannot reorder either).
3. Balanced messages stick to one partition until its batch is sealed or taken, then move
   to the next partition in round robin (the "sticky" partitioner): batches fill up
   instead of spreading one message per partition.
4. Time is an argument; nothing here blocks, sleeps or reads a clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from sdk.wire import MAX_TIMESTAMP_DELTA_US, MESSAGE_HEADER_SIZE, OutgoingMessage

__all__ = ["BATCH_LENGTH_MAX", "Accumulator", "PendingBatch", "message_size"]

BATCH_LENGTH_MAX: Final = 100_000
"""Largest batch a producer may be configured to build, in messages."""


def message_size(message: OutgoingMessage) -> int:
    """The bytes a message takes in a batch."""
    return MESSAGE_HEADER_SIZE + len(message.payload) + len(message.user_headers)


@dataclass(slots=True)
class PendingBatch:
    """Messages for one partition, in the order appended.

    Attributes:
        partition_id: Where they go.
        opened_at: When the first message was appended.
        messages: The messages.
        size_bytes: Their batch bytes (without the 256-byte batch header).
        origin_min: The smallest origin timestamp among them (µs).
        origin_max: The largest.
    """

    partition_id: int
    opened_at: float
    messages: list[OutgoingMessage] = field(default_factory=list)
    size_bytes: int = 0
    origin_min: int = 0
    origin_max: int = 0

    def takes(self, message: OutgoingMessage) -> bool:
        """Whether ``message``'s origin timestamp keeps the batch's span encodable."""
        if not self.messages:
            return True
        low = min(self.origin_min, message.origin_timestamp)
        high = max(self.origin_max, message.origin_timestamp)
        return high - low <= MAX_TIMESTAMP_DELTA_US


class Accumulator:
    """Per-partition batching with a bounded buffer.

    Args:
        batch_length_max: Most messages in one batch.
        batch_size_bytes_max: Most message bytes in one batch (a single larger message
            still goes, alone).
        linger_s: How long an open batch waits for more messages.
        buffer_size_bytes_max: Most bytes appended and not yet completed.
        ordered: At most one batch in flight per partition.
    """

    def __init__(
        self,
        *,
        batch_length_max: int,
        batch_size_bytes_max: int,
        linger_s: float,
        buffer_size_bytes_max: int,
        ordered: bool,
    ) -> None:
        if not 1 <= batch_length_max <= BATCH_LENGTH_MAX:
            raise ValueError(f"batch_length must be 1..{BATCH_LENGTH_MAX}")
        if batch_size_bytes_max < 1 or buffer_size_bytes_max < 1:
            raise ValueError("batch and buffer sizes must be positive")
        if linger_s < 0:
            raise ValueError("linger must not be negative")
        self.batch_length_max = batch_length_max
        self.batch_size_bytes_max = batch_size_bytes_max
        self.linger_s = linger_s
        self.buffer_size_bytes_max = buffer_size_bytes_max
        self.ordered = ordered
        self.buffered_bytes = 0
        self.buffered_messages = 0
        self._open: dict[int, PendingBatch] = {}
        self._sealed: deque[PendingBatch] = deque()
        self._in_flight: dict[int, int] = {}
        self._sticky: int | None = None
        self._balanced_next = 0

    # --- appending ---------------------------------------------------------------------

    def room_for(self, size: int) -> bool:
        """Whether ``size`` more bytes fit the buffer now."""
        return self.buffered_bytes + size <= self.buffer_size_bytes_max

    def balanced_partition(self, partitions_count: int) -> int:
        """The partition the next balanced message goes to (sticky round robin)."""
        assert partitions_count > 0
        if self._sticky is None or self._sticky >= partitions_count:
            self._sticky = self._balanced_next % partitions_count
            self._balanced_next = self._sticky + 1
        return self._sticky

    def append(self, partition_id: int, message: OutgoingMessage, now: float) -> None:
        """Add a message; the caller has checked :meth:`room_for`."""
        size = message_size(message)
        assert self.room_for(size), "append without room: check room_for first"
        batch = self._open.get(partition_id)
        if batch is not None and (
            len(batch.messages) + 1 > self.batch_length_max
            or batch.size_bytes + size > self.batch_size_bytes_max
            or not batch.takes(message)
        ):
            self._seal(batch)
            batch = None
        if batch is None:
            stamp = message.origin_timestamp
            batch = PendingBatch(partition_id, now, origin_min=stamp, origin_max=stamp)
            self._open[partition_id] = batch
        batch.origin_min = min(batch.origin_min, message.origin_timestamp)
        batch.origin_max = max(batch.origin_max, message.origin_timestamp)
        batch.messages.append(message)
        batch.size_bytes += size
        self.buffered_bytes += size
        self.buffered_messages += 1
        if len(batch.messages) >= self.batch_length_max:
            self._seal(batch)

    def _seal(self, batch: PendingBatch) -> None:
        del self._open[batch.partition_id]
        self._sealed.append(batch)
        if self._sticky == batch.partition_id:
            self._sticky = None

    # --- taking ------------------------------------------------------------------------

    def _blocked(self, partition_id: int) -> bool:
        return self.ordered and self._in_flight.get(partition_id, 0) > 0

    def take(self, now: float, *, flushing: bool) -> PendingBatch | None:
        """The next batch to send, or ``None``; it counts as in flight until
        :meth:`complete`."""
        chosen: PendingBatch | None = None
        waiting: set[int] = set()
        for batch in self._sealed:
            if not self._blocked(batch.partition_id) and batch.partition_id not in waiting:
                chosen = batch
                break
            waiting.add(batch.partition_id)
        if chosen is not None:
            self._sealed.remove(chosen)
        else:
            for batch in sorted(self._open.values(), key=lambda b: b.opened_at):
                partition_id = batch.partition_id
                ready = flushing or now >= batch.opened_at + self.linger_s
                if ready and partition_id not in waiting and not self._blocked(partition_id):
                    chosen = batch
                    del self._open[partition_id]
                    if self._sticky == partition_id:
                        self._sticky = None
                    break
        if chosen is not None:
            self._in_flight[chosen.partition_id] = self._in_flight.get(chosen.partition_id, 0) + 1
        return chosen

    def complete(self, batch: PendingBatch) -> None:
        """A taken batch is done (delivered or failed): free its bytes and partition."""
        left = self._in_flight[batch.partition_id] - 1
        if left:
            self._in_flight[batch.partition_id] = left
        else:
            del self._in_flight[batch.partition_id]
        self.buffered_bytes -= batch.size_bytes
        self.buffered_messages -= len(batch.messages)
        assert self.buffered_bytes >= 0 and self.buffered_messages >= 0

    # --- waiting -----------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When the earliest open batch that could be sent will have lingered enough
        (``None``: no open batch is waiting on time alone)."""
        deadlines = [
            batch.opened_at + self.linger_s
            for batch in self._open.values()
            if not self._blocked(batch.partition_id)
        ]
        return min(deadlines) if deadlines else None

    @property
    def queued(self) -> bool:
        """Whether any batch is waiting to be taken."""
        return bool(self._open or self._sealed)

    @property
    def in_flight(self) -> int:
        """Batches taken and not completed."""
        return sum(self._in_flight.values())

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self.queued and not self._in_flight
