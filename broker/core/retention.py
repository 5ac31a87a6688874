"""Retention decisions: from which message offset a partition should retain its data.

Purpose: a partition's primary proposes "retain from offset X" (a ``TRUNCATE_PARTITION``
with ``broker.state.partition_machine.retain_body``) when its oldest sealed segments have
expired or the partition is over its share of the topic's size; every replica applies it
and deletes the same data (``broker.state.partition``, Retention). Which X to propose is
decided here, as a pure function of what the primary's journal and committed state say and
of the time the driver read, so a test or the simulator can replay it.

Invariants:

1. Whole sealed segments only: X is always where a sealed segment ends (the first offset
   of the segment after it), so the open segment, and every message in it, is never
   retired by expiry or size.
2. Oldest first: the segments retired form a prefix, and the walk stops at the first that
   must stay, as Iggy's segment cleaner does.
3. Progress only: X is above the partition's retained start, or there is nothing to
   propose (None). A proposal that loses a race with another changes nothing when applied
   (the retained start never moves back).
4. Pure: no clock, no IO; ``now_us`` is an argument.

Theory of operation: ``message_expiry``: a sealed segment whose newest record's broker
append time plus the expiry is at or before ``now_us`` goes. ``max_topic_size``: each
partition keeps at most an equal share of the topic's size in sealed segments (the topic's
total has no single owner in a cluster: each partition is its own group), raised to what
one sealed segment can reach (its roll size plus one largest record), so the newest sealed
segment always stays; the oldest sealed segments go until the rest fit. Both follow Iggy's
segment cleaner. ``DELETE_SEGMENTS`` asks for the oldest N sealed segments:
:func:`delete_segments_offset`. Segments already below the retained start (retired but not
yet deleted from the disk: deletion trails the durable checkpoint) count for nothing.
A topic created without an expiry or a size cap (or with 0, Iggy's ``ServerDefault``) is
held to the node's defaults: :func:`topic_limits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from broker.state.metadata import EXPIRY_NEVER, SIZE_UNLIMITED, TopicInfo
from broker.state.partition import PartitionState
from journal import RECORD_HEADER_SIZE, SegmentInfo
from journal.record import RECORD_BODY_SIZE_MAX

SEALED_SEGMENT_OVERSHOOT_BYTES_MAX: Final = RECORD_HEADER_SIZE + RECORD_BODY_SIZE_MAX
"""How far past its roll size a sealed segment can grow: the crossing record is written
whole, and a record is at most this big."""


@dataclass(frozen=True, slots=True)
class SealedSegment:
    """What a retention decision knows of one sealed journal segment.

    Attributes:
        offset_next: The message offset after its last message (where the next starts).
        timestamp_max_us: The newest broker append time of its records.
        size_bytes: Bytes of its log.
    """

    offset_next: int
    timestamp_max_us: int
    size_bytes: int


def sealed_segments(segments: Sequence[SegmentInfo], state: PartitionState) -> list[SealedSegment]:
    """The sealed segments of a partition's journal (``Journal.segments()``, oldest first);
    its index holds message offsets, so a segment's end is the offset after its last
    message (never below the retained start). Segments holding ops above the commit point
    are left out: their data is not committed, let alone expired."""
    sealed: list[SealedSegment] = []
    for info in segments:
        if not info.sealed or info.op_last > state.commit_op:
            break
        offset_next = max(info.offset_next, state.retained_start)
        sealed.append(SealedSegment(offset_next, info.timestamp_max_us, info.size_bytes))
    return sealed


def topic_limits(
    topic: TopicInfo, *, message_expiry_us: int, max_topic_size_bytes: int
) -> tuple[int, int]:
    """The expiry and size cap retention holds ``topic`` to: each its own where a client
    set it (on create or update), else the node's default given here (``EXPIRY_NEVER``
    and ``SIZE_UNLIMITED`` meaning none), as Iggy's server resolves ``ServerDefault``."""
    options, given = topic.options, topic.explicit_options
    expiry = options.message_expiry_us if "message_expiry_us" in given else message_expiry_us
    size = options.max_topic_size_bytes if "max_topic_size_bytes" in given else max_topic_size_bytes
    return expiry, size


def partition_size_budget(
    max_topic_size_bytes: int, partition_count: int, segment_size_bytes: int
) -> int | None:
    """Sealed bytes one partition may keep under the topic's ``max_topic_size``, or None
    for unlimited: an equal share, raised to one sealed segment's most."""
    if max_topic_size_bytes == SIZE_UNLIMITED:
        return None
    assert max_topic_size_bytes >= 1 and segment_size_bytes >= 1
    share = max_topic_size_bytes // max(1, partition_count)
    return max(share, segment_size_bytes + SEALED_SEGMENT_OVERSHOOT_BYTES_MAX)


def retain_from(
    segments: Sequence[SealedSegment],
    *,
    retained_start: int,
    message_expiry_us: int | None,
    size_budget_bytes: int | None,
    now_us: int,
) -> int | None:
    """The offset to propose retaining from, or None when nothing is due.

    Args:
        segments: The partition's sealed segments, oldest first (:func:`sealed_segments`).
        retained_start: The partition's committed retained start.
        message_expiry_us: The topic's expiry (None: never).
        size_budget_bytes: The partition's budget (:func:`partition_size_budget`).
        now_us: The time the driver read.
    """
    live = [segment for segment in segments if segment.offset_next > retained_start]
    sealed_bytes = sum(segment.size_bytes for segment in live)
    start = retained_start
    for segment in live:
        expired = (
            message_expiry_us is not None and segment.timestamp_max_us + message_expiry_us <= now_us
        )
        oversize = size_budget_bytes is not None and sealed_bytes > size_budget_bytes
        if not (expired or oversize):
            break
        start = segment.offset_next
        sealed_bytes -= segment.size_bytes
    return start if start > retained_start else None


def retention_due(
    state: PartitionState,
    segments: Sequence[SegmentInfo],
    *,
    message_expiry_us: int,
    max_topic_size_bytes: int,
    partition_count: int,
    segment_size_bytes: int,
    now_us: int,
) -> int | None:
    """What a partition's primary should propose now (the offset for ``retain_body``), or
    None. The topic's options come as the metadata stores them (``EXPIRY_NEVER`` and
    ``SIZE_UNLIMITED`` meaning none); ``segments`` is the primary's ``Journal.segments()``
    and ``segment_size_bytes`` its roll size."""
    expiry = None if message_expiry_us == EXPIRY_NEVER else message_expiry_us
    budget = partition_size_budget(max_topic_size_bytes, partition_count, segment_size_bytes)
    if expiry is None and budget is None:
        return None
    return retain_from(
        sealed_segments(segments, state),
        retained_start=state.retained_start,
        message_expiry_us=expiry,
        size_budget_bytes=budget,
        now_us=now_us,
    )


def delete_segments_offset(
    segments: Sequence[SealedSegment], *, retained_start: int, count: int
) -> int | None:
    """The offset that retires the oldest ``count`` sealed segments still above the
    retained start (``DELETE_SEGMENTS``), or None when there are none."""
    assert count >= 0
    live = [segment for segment in segments if segment.offset_next > retained_start]
    if count == 0 or not live:
        return None
    return live[min(count, len(live)) - 1].offset_next
