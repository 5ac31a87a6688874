"""Reconciling hosted partition groups with the committed metadata (broker.core.reconcile)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.core.reconcile import (
    PARTITION_GROUP_BIT,
    group_of,
    partition_group_id,
    reconcile,
)
from broker.state.metadata import Durability, PartitionRef


def ref(stream: int, topic: int, partition: int, created_op: int, purge: int = 0) -> PartitionRef:
    return PartitionRef(
        stream, topic, partition, created_op, purge, Durability.REPLICATED, Durability.REPLICATED
    )


def hosted(*refs: PartitionRef) -> dict[int, PartitionRef]:
    return {group_of(r): r for r in refs}


def test_group_ids_are_stable_across_versions_and_nodes() -> None:
    # Nodes exchange group ids on the bus: a change here splits a mixed-version cluster.
    assert partition_group_id(1, 2, 3, 4) == 2886009133635469315
    assert partition_group_id(1, 2, 0, 4) == 2886009133635469312
    assert partition_group_id(1, 2, 3, 4) & PARTITION_GROUP_BIT


def test_a_created_topic_adds_its_groups_in_partition_order() -> None:
    refs = [ref(1, 1, p, 10) for p in range(3)]
    change = reconcile({}, refs)
    assert change.remove == ()
    assert [r for _, r in change.add] == refs
    assert list(change.refs.values()) == refs
    assert change.purge_due == ()


def test_a_deleted_topic_removes_its_groups_and_keeps_the_others() -> None:
    kept, gone = ref(1, 1, 0, 10), [ref(1, 2, p, 11) for p in range(2)]
    change = reconcile(hosted(kept, *gone), [kept])
    assert change.remove == tuple(group_of(r) for r in gone)
    assert change.add == ()
    assert change.refs == hosted(kept)


def test_a_partition_created_again_is_a_new_group_not_its_predecessor() -> None:
    old, new = ref(1, 1, 0, 10), ref(1, 1, 0, 25)
    change = reconcile(hosted(old), [new])
    assert change.remove == (group_of(old),)
    assert change.add == ((group_of(new), new),)
    assert group_of(old) != group_of(new)


def test_a_removed_group_is_not_hosted_again_when_the_metadata_names_it_again() -> None:
    # A node restarted with its metadata behind the op that deleted the topic: the
    # metadata names the partition again, and the node, which removed its group (its
    # tombstone), must not reopen it empty.
    gone, kept = ref(1, 1, 0, 10), ref(1, 2, 0, 11)
    change = reconcile({}, [gone, kept], removed={group_of(gone)})
    assert change.add == ((group_of(kept), kept),)
    assert list(change.refs) == [group_of(kept)]
    again = reconcile(hosted(kept), [gone, kept], removed={group_of(gone)})
    assert (again.remove, again.add) == ((), ())


def test_a_group_is_due_a_purge_only_when_its_generation_moved_ahead() -> None:
    quiet, purged, new = ref(1, 1, 0, 10), ref(1, 1, 1, 10), ref(1, 3, 0, 30, purge=2)
    known = hosted(quiet, purged)
    change = reconcile(known, [quiet, ref(1, 1, 1, 10, purge=1), new])
    assert change.purge_due == (group_of(purged), group_of(new))
    again = reconcile(change.refs, change.refs.values())
    assert again.purge_due == () and again.add == () and again.remove == ()


refs_strategy = st.lists(
    st.builds(
        ref,
        st.integers(0, 3),
        st.integers(0, 3),
        st.integers(0, 3),
        st.integers(1, 4),
        st.integers(0, 2),
    ),
    max_size=12,
    unique_by=lambda r: (r.stream_id, r.topic_id, r.partition_id, r.created_op),
)


@given(refs_strategy, refs_strategy)
def test_carried_out_the_hosted_groups_are_exactly_the_committed_ones(
    before: list[PartitionRef], after: list[PartitionRef]
) -> None:
    groups = hosted(*before)
    change = reconcile(groups, after)
    for group in change.remove:
        del groups[group]
    for group, r in change.add:
        assert group not in groups
        groups[group] = r
    assert set(groups) == {group_of(r) for r in after}
    assert list(change.refs) == [group_of(r) for r in after]
    for group in change.purge_due:
        assert change.refs[group].purge_generation > 0
