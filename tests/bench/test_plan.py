"""The layout each kind runs, without a server."""

from __future__ import annotations

import pytest

from bench.load.params import BenchParams, Kind, Range
from bench.load.plan import Role, make_plan


def test_pinned_producer_gives_each_producer_its_own_stream_and_partition_0() -> None:
    plan = make_plan(BenchParams(Kind.PINNED_PRODUCER, producers=3, message_batches=10).resolved())
    assert plan.streams == ("bench-stream-1", "bench-stream-2", "bench-stream-3")
    assert [(a.name, a.stream, a.partition) for a in plan.actors] == [
        ("producer-1", "bench-stream-1", 0),
        ("producer-2", "bench-stream-2", 0),
        ("producer-3", "bench-stream-3", 0),
    ]
    assert plan.preload_messages == {}


def test_balanced_producer_uses_balanced_partitioning_over_the_streams() -> None:
    plan = make_plan(
        BenchParams(Kind.BALANCED_PRODUCER, producers=4, streams=2, message_batches=1).resolved()
    )
    assert plan.partitions == 24
    assert [a.stream for a in plan.actors] == ["bench-stream-1", "bench-stream-2"] * 2
    assert all(a.partition is None for a in plan.actors)


def test_pinned_consumer_preloads_what_each_consumer_reads() -> None:
    plan = make_plan(
        BenchParams(
            Kind.PINNED_CONSUMER, consumers=2, message_batches=10, messages_per_batch=Range(50, 50)
        ).resolved()
    )
    assert plan.preload_messages == {"bench-stream-1": 500, "bench-stream-2": 500}
    assert all(a.role is Role.CONSUMER and not a.end_to_end for a in plan.actors)


def test_consumer_group_kind_spreads_consumers_over_groups_and_preloads_with_slack() -> None:
    plan = make_plan(
        BenchParams(
            Kind.BALANCED_CONSUMER_GROUP,
            consumers=4,
            consumer_groups=2,
            streams=2,
            partitions=3,
            message_batches=10,
            messages_per_batch=Range(10, 10),
        ).resolved()
    )
    assert plan.groups == (("cg-1", "bench-stream-1"), ("cg-2", "bench-stream-2"))
    assert [a.group for a in plan.actors] == ["cg-1", "cg-2", "cg-1", "cg-2"]
    # Two members per group read 100 messages each, plus one batch per partition.
    assert plan.preload_messages == {"bench-stream-1": 230, "bench-stream-2": 230}


def test_producer_and_consumer_kinds_measure_consumers_end_to_end() -> None:
    plan = make_plan(
        BenchParams(Kind.PINNED_PRODUCER_AND_CONSUMER, producers=2, consumers=2).resolved()
    )
    consumers = [a for a in plan.actors if a.role is Role.CONSUMER]
    assert consumers and all(a.end_to_end for a in consumers)


def test_e2ecg_gives_each_member_of_a_group_its_own_partition() -> None:
    plan = make_plan(
        BenchParams(
            Kind.END_TO_END_PRODUCING_CONSUMER_GROUP, producers=4, consumer_groups=2
        ).resolved()
    )
    assert plan.partitions == 2
    layout = [(a.group, a.stream, a.partition) for a in plan.actors]
    assert layout == [
        ("cg-1", "bench-stream-1", 0),
        ("cg-2", "bench-stream-2", 0),
        ("cg-1", "bench-stream-1", 1),
        ("cg-2", "bench-stream-2", 1),
    ]


@pytest.mark.parametrize("kind", list(Kind))
def test_rate_limit_is_split_so_writers_sum_to_it(kind: Kind) -> None:
    plan = make_plan(
        BenchParams(
            kind, producers=2, consumers=2, rate_limit_bytes_per_s=1_000_000, message_batches=1
        ).resolved()
    )
    writers = [a for a in plan.actors if a.role is not Role.CONSUMER]
    readers = [a for a in plan.actors if a.role is Role.CONSUMER]
    if writers:
        assert sum(a.rate_bytes_per_s or 0 for a in writers) == pytest.approx(1_000_000)
    if readers and not writers:
        assert sum(a.rate_bytes_per_s or 0 for a in readers) == pytest.approx(1_000_000)
    if readers and writers:  # consumers get a little more so they keep up
        assert sum(a.rate_bytes_per_s or 0 for a in readers) == pytest.approx(1_050_000)
    assert len({a.name for a in plan.actors}) == len(plan.actors)
