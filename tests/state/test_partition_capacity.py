"""The node's partition capacity, judged before a creation is proposed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.core.capacity import beyond_capacity, partitions_added
from broker.state.metadata import (
    CreatePartitions,
    CreateStream,
    CreateTopic,
    DeletePartitions,
    DeleteTopic,
)


def test_only_creations_add_partitions() -> None:
    assert partitions_added(CreateTopic("s", "t", 7)) == 7
    assert partitions_added(CreatePartitions("s", "t", 3)) == 3
    assert partitions_added(DeletePartitions("s", "t", 3)) == 0
    assert partitions_added(DeleteTopic("s", "t")) == 0
    assert partitions_added(CreateStream("s")) == 0


def test_a_creation_that_fills_the_capacity_exactly_fits_and_one_more_does_not() -> None:
    assert beyond_capacity(CreateTopic("s", "t", 4), 12, 16) == ""
    why = beyond_capacity(CreateTopic("s", "t", 5), 12, 16)
    assert "5 more partitions" in why and "12 exist" in why and "at most 16" in why
    assert beyond_capacity(CreatePartitions("s", "t", 1), 16, 16) != ""


def test_deletions_pass_even_on_a_node_over_its_capacity() -> None:
    # A node restarted with a smaller reserve must still be able to shed partitions.
    assert beyond_capacity(DeletePartitions("s", "t", 3), 40, 16) == ""
    assert beyond_capacity(DeleteTopic("s", "t"), 40, 16) == ""


@given(st.integers(0, 10_000), st.integers(0, 1_000), st.integers(0, 10_000) | st.none())
def test_the_verdict_is_whether_the_sum_fits(total: int, added: int, capacity: int | None) -> None:
    refused = beyond_capacity(CreateTopic("s", "t", added), total, capacity) != ""
    assert refused == (capacity is not None and added > 0 and total + added > capacity)
