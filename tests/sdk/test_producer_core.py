"""The producer's accumulator: batching, linger, flush, ordering, buffer bounds."""

from __future__ import annotations

import pytest

from sdk._producer_core import Accumulator, message_size
from sdk.wire import MAX_TIMESTAMP_DELTA_US, OutgoingMessage, build_batch


def message(i: int, size: int = 10) -> OutgoingMessage:
    return OutgoingMessage(i + 1, bytes(size))


def accumulator(**overrides: object) -> Accumulator:
    settings: dict[str, object] = {
        "batch_length_max": 3,
        "batch_size_bytes_max": 10_000,
        "linger_s": 0.5,
        "buffer_size_bytes_max": 100_000,
        "ordered": True,
    }
    settings.update(overrides)
    return Accumulator(**settings)  # type: ignore[arg-type]


def test_a_batch_is_sealed_at_the_count_limit_and_sent_without_lingering() -> None:
    acc = accumulator()
    for i in range(4):
        acc.append(0, message(i), now=0.0)
    batch = acc.take(0.0, flushing=False)
    assert batch is not None and [m.id for m in batch.messages] == [1, 2, 3]
    assert acc.take(0.0, flushing=False) is None, "partition 0 is in flight (ordered)"


def test_a_batch_is_sealed_before_its_origin_timestamps_span_more_than_a_batch_carries() -> None:
    """A batch stores origin timestamps as deltas from its smallest one; a message far
    from the others (an old event replayed, a clock jump) starts a new batch."""
    acc = accumulator(batch_length_max=100)
    base = 1_700_000_000_000_000
    stamps = [base, base + 5, base + MAX_TIMESTAMP_DELTA_US + 1, base + MAX_TIMESTAMP_DELTA_US]
    for i, stamp in enumerate(stamps):
        acc.append(0, OutgoingMessage(i + 1, b"x", b"", stamp), now=0.0)
    first = acc.take(0.0, flushing=True)
    assert first is not None and [m.id for m in first.messages] == [1, 2]
    acc.complete(first)
    second = acc.take(0.0, flushing=True)
    assert second is not None and [m.id for m in second.messages] == [3, 4]
    for batch in (first, second):
        build_batch(batch.messages)  # encodable


def test_a_batch_is_sealed_before_it_would_exceed_the_byte_limit() -> None:
    acc = accumulator(batch_length_max=100, batch_size_bytes_max=2 * message_size(message(0)))
    for i in range(3):
        acc.append(0, message(i), now=0.0)
    batch = acc.take(0.0, flushing=False)
    assert batch is not None and len(batch.messages) == 2


def test_an_open_batch_waits_for_linger_unless_flushing() -> None:
    acc = accumulator()
    acc.append(0, message(0), now=1.0)
    assert acc.take(1.2, flushing=False) is None
    assert acc.next_deadline() == 1.5
    assert acc.take(1.2, flushing=True) is not None


def test_an_open_batch_goes_once_it_has_lingered() -> None:
    acc = accumulator()
    acc.append(0, message(0), now=1.0)
    batch = acc.take(1.5, flushing=False)
    assert batch is not None and batch.partition_id == 0


def test_ordered_mode_keeps_one_batch_per_partition_in_flight_in_order() -> None:
    acc = accumulator(batch_length_max=1)
    for i in range(3):
        acc.append(7, message(i), now=0.0)
    acc.append(8, message(9), now=0.0)
    first = acc.take(0.0, flushing=True)
    second = acc.take(0.0, flushing=True)
    assert first is not None and second is not None
    assert (first.partition_id, second.partition_id) == (7, 8)
    assert acc.take(0.0, flushing=True) is None
    acc.complete(first)
    third = acc.take(0.0, flushing=True)
    assert third is not None and third.partition_id == 7 and third.messages[0].id == 2


def test_unordered_mode_allows_several_batches_of_one_partition_in_flight() -> None:
    acc = accumulator(batch_length_max=1, ordered=False)
    for i in range(3):
        acc.append(0, message(i), now=0.0)
    taken = [acc.take(0.0, flushing=True) for _ in range(3)]
    assert all(b is not None for b in taken)
    assert acc.in_flight == 3


def test_buffer_accounting_covers_queued_and_in_flight_until_complete() -> None:
    size = message_size(message(0))
    acc = accumulator(buffer_size_bytes_max=2 * size)
    acc.append(0, message(0), now=0.0)
    acc.append(1, message(1), now=0.0)
    assert not acc.room_for(size)
    batch = acc.take(0.0, flushing=True)
    assert batch is not None
    assert not acc.room_for(size), "in-flight bytes still count"
    acc.complete(batch)
    assert acc.room_for(size)
    assert acc.buffered_messages == 1


def test_balanced_partitions_stick_until_the_batch_is_taken_then_move_on() -> None:
    acc = accumulator(batch_length_max=2)
    picks = []
    for i in range(5):
        partition = acc.balanced_partition(3)
        picks.append(partition)
        acc.append(partition, message(i), now=0.0)
    assert picks == [0, 0, 1, 1, 2]


def test_idle_means_nothing_queued_and_nothing_in_flight() -> None:
    acc = accumulator()
    states = [acc.idle]
    acc.append(0, message(0), now=0.0)
    states.append(acc.idle)
    batch = acc.take(0.0, flushing=True)
    assert batch is not None and not acc.queued
    states.append(acc.idle)
    acc.complete(batch)
    states.append(acc.idle)
    assert states == [True, False, False, True]


def test_append_without_room_is_a_bug() -> None:
    acc = accumulator(buffer_size_bytes_max=10)
    with pytest.raises(AssertionError):
        acc.append(0, message(0), now=0.0)


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        accumulator(batch_length_max=0)
    with pytest.raises(ValueError):
        accumulator(linger_s=-1)
