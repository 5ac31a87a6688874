"""The cluster view: roster, node health, learned primaries."""

from __future__ import annotations

import random

from sdk._cluster import METADATA, PRIMARY_CACHE_ENTRIES_MAX, Cluster, PartitionGroup
from sdk.connection_string import NodeAddress
from tests.sdk.script import NODE_A, NODE_B, NODE_C, metadata


def cluster(*nodes: NodeAddress) -> Cluster:
    return Cluster(nodes or (NODE_A,), backoff_min_s=0.1, backoff_max_s=1.0, rng=random.Random(3))


def test_choose_walks_the_roster_from_the_preferred_node_skipping_tried_ones() -> None:
    c = cluster(NODE_A, NODE_B, NODE_C)
    assert c.choose(NODE_B, set(), 0.0) == NODE_B
    assert c.choose(NODE_B, {NODE_B}, 0.0) == NODE_C
    assert c.choose(NODE_B, {NODE_B, NODE_C}, 0.0) == NODE_A
    assert c.choose(NODE_B, {NODE_A, NODE_B, NODE_C}, 0.0) is None


def test_a_failed_node_backs_off_exponentially_and_recovers_on_an_answer() -> None:
    c = cluster(NODE_A, NODE_B)
    c.on_transport_failure(NODE_A, 0.0)
    assert c.choose(NODE_A, set(), 0.0) == NODE_B
    first = c.time_until_usable(0.0)
    assert c.time_until_usable(0.0) == 0.0 or first >= 0.0
    c.on_transport_failure(NODE_A, 0.0)
    c.on_transport_failure(NODE_A, 0.0)
    c.on_transport_failure(NODE_B, 0.0)
    wait = c.time_until_usable(0.0)
    assert 0.05 <= wait <= 1.0
    assert c.choose(NODE_A, set(), 0.0) is None
    assert c.choose(NODE_A, set(), 10.0) == NODE_A
    c.on_answer(NODE_A)
    assert c.choose(NODE_A, set(), 0.0) == NODE_A


def test_backoff_is_capped_at_the_maximum() -> None:
    c = cluster(NODE_A)
    for _ in range(50):
        c.on_transport_failure(NODE_A, 0.0)
    assert c.time_until_usable(0.0) <= 1.0


def test_update_roster_adopts_order_and_leader_and_fills_unspecified_hosts() -> None:
    c = cluster(NodeAddress("seed", 1))
    roster = metadata([NodeAddress("0.0.0.0", 1), NodeAddress("10.0.0.2", 2)], leader=1)
    c.update_roster(roster, NodeAddress("seed", 1))
    assert c.nodes == [NodeAddress("seed", 1), NodeAddress("10.0.0.2", 2)]
    assert c.metadata_primary == NodeAddress("10.0.0.2", 2)
    assert c.roster_known


def test_metadata_not_primary_predicts_view_mod_n() -> None:
    c = cluster(NODE_A, NODE_B, NODE_C)
    c.on_not_primary(METADATA, NODE_A, view=5)
    assert c.metadata_primary == NODE_C


def test_partition_primary_learned_from_success_then_predicted_after_a_view_change() -> None:
    c = cluster(NODE_A, NODE_B, NODE_C)
    key = PartitionGroup("s", "t", 0)
    assert c.preferred(key) == c.metadata_primary
    c.on_primary(key, NODE_C, view=7)  # residue (2 - 7) % 3 = 1
    assert c.preferred(key) == NODE_C
    c.on_not_primary(key, NODE_C, view=8)  # primary (8 + 1) % 3 = 0
    assert c.preferred(key) == NODE_A


def test_not_primary_without_a_residue_only_forgets_the_cached_node() -> None:
    c = cluster(NODE_A, NODE_B)
    key = PartitionGroup(1, 2, 3)
    c._primaries[key] = NODE_B
    c.on_not_primary(key, NODE_B, view=0)
    assert c.cached_primary(key) is None


def test_primary_cache_is_bounded() -> None:
    c = cluster(NODE_A, NODE_B)
    for i in range(PRIMARY_CACHE_ENTRIES_MAX + 10):
        c.on_primary(PartitionGroup(1, 1, i), NODE_B, 0)
    assert len(c._primaries) == PRIMARY_CACHE_ENTRIES_MAX
    assert c.cached_primary(PartitionGroup(1, 1, 0)) is None


def test_a_new_roster_forgets_primaries_on_nodes_that_left() -> None:
    c = cluster(NODE_A, NODE_B)
    key = PartitionGroup(1, 1, 1)
    c.on_primary(key, NODE_B, 0)
    c.update_roster(metadata([NODE_A, NODE_C], leader=0), NODE_A)
    assert c.cached_primary(key) is None


def test_copy_shares_nothing_mutable() -> None:
    c = cluster(NODE_A, NODE_B)
    c.on_primary(PartitionGroup(1, 1, 1), NODE_B, 0)
    other = c.copy(random.Random(1))
    other.on_primary(PartitionGroup(1, 1, 1), NODE_A, 0)
    other.nodes.append(NODE_C)
    assert c.cached_primary(PartitionGroup(1, 1, 1)) == NODE_B
    assert NODE_C not in c.nodes


def test_a_forwarded_reply_names_the_primary_by_its_replica_index() -> None:
    """A backup that forwarded the write answers with the reply the primary made: once
    the roster (replica order) is known, the reply's replica is the cached primary."""
    c = cluster(NODE_A, NODE_B, NODE_C)
    c.update_roster(metadata([NODE_A, NODE_B, NODE_C], leader=0), NODE_A)
    key = PartitionGroup("s", "t", 1)
    c.on_primary(key, NODE_A, view=4, replica=2)  # answered by A, made by C
    assert c.cached_primary(key) == NODE_C
    c.on_not_primary(key, NODE_C, view=5)  # residue (2 - 4) % 3 = 1: (5 + 1) % 3 = 0
    assert c.cached_primary(key) == NODE_A
    c.on_primary(METADATA, NODE_B, view=0, replica=0)
    assert c.metadata_primary == NODE_A


def test_without_a_roster_the_answering_node_is_taken_for_the_primary() -> None:
    c = cluster(NODE_A, NODE_B)
    key = PartitionGroup("s", "t", 0)
    c.on_primary(key, NODE_B, view=0, replica=0)
    assert c.cached_primary(key) == NODE_B
