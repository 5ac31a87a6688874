"""Retention decisions: expiry and size budgets over sealed segments, never the open one.

Method: hand-made sealed segments (offsets, newest append time, bytes) for the pure walk,
hypothesis for its laws, and one real journal under a partition state machine for the
mapping from journal segments to message offsets.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.core.retention import (
    SEALED_SEGMENT_OVERSHOOT_BYTES_MAX,
    SealedSegment,
    delete_segments_offset,
    partition_size_budget,
    retain_from,
    retention_due,
    sealed_segments,
    topic_limits,
)
from broker.state.metadata import (
    EXPIRY_NEVER,
    SIZE_UNLIMITED,
    CreateStream,
    CreateTopic,
    MetadataState,
    TopicOptionsPatch,
)
from broker.state.partition import PartitionState, RetainPartition, SendMessages
from sdk.wire.batch import BATCH_HEADER
from tests.state.helpers import driver_with_root
from tests.state.partition_helpers import Group, MemoryLog, Replica, batch

# Three sealed segments: offsets [0, 10), [10, 25), [25, 40); appended at 100, 200, 300 s.
SEGMENTS = (
    SealedSegment(offset_next=10, timestamp_max_us=100_000_000, size_bytes=1_000),
    SealedSegment(offset_next=25, timestamp_max_us=200_000_000, size_bytes=2_000),
    SealedSegment(offset_next=40, timestamp_max_us=300_000_000, size_bytes=3_000),
)


def _decide(
    *, start: int = 0, expiry_s: int | None = None, budget: int | None = None, now_s: int = 0
) -> int | None:
    return retain_from(
        SEGMENTS,
        retained_start=start,
        message_expiry_us=None if expiry_s is None else expiry_s * 1_000_000,
        size_budget_bytes=budget,
        now_us=now_s * 1_000_000,
    )


def test_expired_sealed_segments_go_oldest_first() -> None:
    assert _decide(expiry_s=60, now_s=159) is None
    assert _decide(expiry_s=60, now_s=160) == 10  # the first expired exactly now
    assert _decide(expiry_s=60, now_s=265) == 25
    assert _decide(expiry_s=60, now_s=10**6) == 40  # every sealed one; the open one stays


def test_over_budget_deletes_oldest_until_it_fits() -> None:
    assert _decide(budget=6_000) is None
    assert _decide(budget=5_999) == 10
    assert _decide(budget=3_000) == 25
    assert _decide(budget=0) == 40


def test_segments_below_the_retained_start_count_for_nothing() -> None:
    assert _decide(start=10, budget=5_000) is None  # 2_000 + 3_000 fit
    assert _decide(start=12, expiry_s=60, now_s=265) == 25
    assert _decide(start=25, expiry_s=60, now_s=265) is None
    assert _decide(start=40, budget=0) is None


def test_nothing_configured_proposes_nothing() -> None:
    assert _decide(now_s=10**9) is None


def test_size_budget_is_a_share_raised_to_one_sealed_segment() -> None:
    assert partition_size_budget(SIZE_UNLIMITED, 3, 1 << 20) is None
    floor = (1 << 20) + SEALED_SEGMENT_OVERSHOOT_BYTES_MAX
    assert partition_size_budget(3 << 30, 3, 1 << 20) == 1 << 30
    assert partition_size_budget(2 << 20, 4, 1 << 20) == floor


def test_delete_segments_takes_the_oldest_sealed_ones() -> None:
    assert delete_segments_offset(SEGMENTS, retained_start=0, count=2) == 25
    assert delete_segments_offset(SEGMENTS, retained_start=12, count=1) == 25
    assert delete_segments_offset(SEGMENTS, retained_start=0, count=9) == 40
    assert delete_segments_offset(SEGMENTS, retained_start=40, count=1) is None
    assert delete_segments_offset(SEGMENTS, retained_start=0, count=0) is None


segment_lists = st.lists(
    st.tuples(st.integers(1, 20), st.integers(0, 50), st.integers(0, 5_000)), max_size=8
).map(
    lambda raw: [
        SealedSegment(sum(n for n, _, _ in raw[: i + 1]), sum(t for _, t, _ in raw[: i + 1]), size)
        for i, (_, _, size) in enumerate(raw)
    ]
)


@given(
    segment_lists,
    st.integers(0, 100),
    st.none() | st.integers(0, 300),
    st.none() | st.integers(0, 20_000),
    st.integers(0, 400),
)
def test_decision_laws(
    segments: list[SealedSegment],
    start: int,
    expiry: int | None,
    budget: int | None,
    now: int,
) -> None:
    found = retain_from(
        segments,
        retained_start=start,
        message_expiry_us=expiry,
        size_budget_bytes=budget,
        now_us=now,
    )
    if found is None:
        return
    # Progress, at a sealed segment's end, never past the last sealed one.
    assert found > start
    assert found in {segment.offset_next for segment in segments}
    # Every segment it retires is expired or was needed to fit the budget; the first
    # kept one is neither, or there is none left.
    live = [s for s in segments if s.offset_next > start]
    kept = [s for s in live if s.offset_next > found]
    kept_bytes = sum(s.size_bytes for s in kept)
    if kept:
        first = kept[0]
        assert not (expiry is not None and first.timestamp_max_us + expiry <= now)
        assert budget is None or kept_bytes <= budget


def test_sealed_segments_of_a_real_journal_are_in_message_offsets() -> None:
    """The partition's own journal, which the hosts fill one record per op: its index
    holds message offsets and batch timestamps, so segment boundaries are offsets."""
    g = Group([Replica(MemoryLog(segment_size_bytes=600))])
    journal = g.primary.log.journal
    for op in range(1, 9):
        g.submit(SendMessages(batch(*[b"x"] * op)))  # op k holds k messages
    journal.sync()
    state: PartitionState = g.primary.state
    infos = journal.segments()
    sealed = sealed_segments(infos, state)
    assert len(sealed) == len(infos) - 1 >= 2
    for info, segment in zip(infos, sealed, strict=False):
        # Batch k starts at offset k(k-1)/2: the next segment's first batch.
        next_op = info.op_last + 1
        assert segment.offset_next == info.offset_next == next_op * (next_op - 1) // 2
        assert info.name == f"{info.offset_base:020}"
        _, body = g.primary.log.read(info.op_last)
        assert segment.timestamp_max_us == BATCH_HEADER.unpack_from(body, 0)[2]
    due = retention_due(
        state,
        infos,
        message_expiry_us=1,
        max_topic_size_bytes=SIZE_UNLIMITED,
        partition_count=1,
        segment_size_bytes=600,
        now_us=10**9,
    )
    assert due == sealed[-1].offset_next
    g.submit(RetainPartition(due))
    assert state.retention_floor_op() == infos[-1].op_base  # the open segment's first op
    assert journal.retain(state.retention_floor_op()) == infos[:-1]
    never = retention_due(
        state,
        journal.segments(),
        message_expiry_us=EXPIRY_NEVER,
        max_topic_size_bytes=SIZE_UNLIMITED,
        partition_count=1,
        segment_size_bytes=600,
        now_us=10**9,
    )
    assert never is None


def test_a_topic_without_its_own_expiry_or_size_is_held_to_the_nodes_defaults() -> None:
    driver = driver_with_root()
    driver.as_root(CreateStream("s"))
    own = TopicOptionsPatch(message_expiry_us=5_000_000)
    driver.as_root(CreateTopic(0, "own", 1, own))
    driver.as_root(CreateTopic(0, "defaulted", 1))
    state: MetadataState = driver.state
    node = {"message_expiry_us": 7_000_000, "max_topic_size_bytes": 1 << 30}
    assert topic_limits(state.topic(0, "own"), **node) == (5_000_000, 1 << 30)
    assert topic_limits(state.topic(0, "defaulted"), **node) == (7_000_000, 1 << 30)
    never = {"message_expiry_us": EXPIRY_NEVER, "max_topic_size_bytes": SIZE_UNLIMITED}
    assert topic_limits(state.topic(0, "defaulted"), **never) == (EXPIRY_NEVER, SIZE_UNLIMITED)
