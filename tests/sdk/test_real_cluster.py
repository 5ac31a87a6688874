"""Cluster awareness against a real 3-node cluster: roster, routing, view changes, backoff.

Each test gets a fresh cluster (``real_cluster``) and may kill and restart its nodes.
Which node is primary of which group comes from the nodes' own counters, and how many
requests a node forwarded to another node's primary from its ``forwarded`` counter.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from sdk import Client, ConsumerRef, Message, PollingStrategy
from sdk._cluster import PartitionGroup
from sdk.blocking import Client as BlockingClient
from sdk.connection_string import NodeAddress
from sdk.wire import ClusterNodeRole
from tests.runtime.processes import NodeProcess, free_port, start_node
from tests.sdk.real import METADATA_GROUP_NAME, RealCluster, node_url, partition_group_name

OPTIONS = {
    "request_timeout": "15s",
    "connect_timeout": "500ms",
    "retry_deadline": "30s",
    "reconnection_interval": "20ms",
    "reconnection_interval_max": "500ms",
}
PARTITIONS = 3
SENDS_PER_PARTITION = 20


def address_of(cluster: RealCluster, index: int) -> NodeAddress:
    host, _, port = cluster.addresses[index].rpartition(":")
    return NodeAddress(host, int(port))


def group_names(client: Client, stream: str, topic: str) -> list[str]:
    details = client.get_topic(stream, topic)
    assert details is not None
    stream_details = client.get_stream(stream)
    assert stream_details is not None
    return [
        partition_group_name(stream_details.stream.id, details.topic.id, p.id)
        for p in details.partitions
    ]


def payloads(client: Client, stream: str, topic: str, partition: int) -> list[bytes]:
    polled = client.poll_messages(
        stream,
        topic,
        consumer=ConsumerRef.single(1),
        polling_strategy=PollingStrategy.first(),
        count=10_000,
        partition_id=partition,
    )
    return [m.payload for m in polled.messages]


def test_client_learns_the_roster_and_leader_from_any_node(real_cluster: RealCluster) -> None:
    with Client.from_connection_string(real_cluster.url(2, **OPTIONS)) as client:
        metadata = client.get_cluster_metadata()
        leader = real_cluster.wait_primary_of(METADATA_GROUP_NAME)
        roster = client._core.cluster.nodes
        assert roster == [address_of(real_cluster, i) for i in range(3)]
        assert [n.role for n in metadata.nodes].count(ClusterNodeRole.LEADER) == 1
        assert client._core.cluster.metadata_primary == address_of(real_cluster, leader)
        client.create_stream("roster")
        assert client.get_stream("roster") is not None


def test_writes_go_straight_to_each_partition_primary(real_cluster: RealCluster) -> None:
    with Client.from_connection_string(real_cluster.url(0, **OPTIONS)) as client:
        client.create_stream("routing")
        client.create_topic("routing", "t", partitions_count=PARTITIONS)
        groups = group_names(client, "routing", "t")
        primaries = [real_cluster.wait_primary_of(group) for group in groups]
        assert len(set(primaries)) == PARTITIONS, "partition primaries are spread"
        before = sum(real_cluster.forwarded())
        for _ in range(SENDS_PER_PARTITION):
            for partition in range(PARTITIONS):
                client.send_messages("routing", "t", [b"r"], partition)
        # Each stats read logs in on every node (a forwarded login on each backup), and the
        # client logs in on each node it first writes to (a node serves a session only on
        # a connection that logged in to it): at most one more forwarded login per backup.
        backups = len(real_cluster.addresses) - 1
        forwarded = sum(real_cluster.forwarded()) - before - 3 * backups
        cached = [
            client._core.cluster.cached_primary(PartitionGroup("routing", "t", p))
            for p in range(PARTITIONS)
        ]
    # The first write of each partition may be forwarded; the rest go to its primary.
    assert forwarded <= PARTITIONS, f"{forwarded} of {PARTITIONS * SENDS_PER_PARTITION}"
    assert cached == [address_of(real_cluster, p) for p in primaries]


def test_client_follows_a_view_change_when_a_partition_primary_is_killed(
    real_cluster: RealCluster,
) -> None:
    with Client.from_connection_string(real_cluster.url(0, **OPTIONS)) as client:
        client.create_stream("failover")
        client.create_topic("failover", "t", partitions_count=PARTITIONS)
        groups = group_names(client, "failover", "t")
        # The partition whose primary is not the metadata primary (the node the client
        # logged in on), so killing it moves only that group's view.
        leader = real_cluster.wait_primary_of(METADATA_GROUP_NAME)
        partition, victim = next(
            (p, primary)
            for p, primary in enumerate(real_cluster.wait_primary_of(g) for g in groups)
            if primary != leader
        )
        sent = [f"before-{i}".encode() for i in range(5)]
        for body in sent:
            client.send_messages("failover", "t", [body], partition)
        real_cluster.kill(victim)
        started = time.monotonic()
        after = [f"after-{i}".encode() for i in range(20)]
        for body in after:
            client.send_messages("failover", "t", [body], partition)
        recovered_s = time.monotonic() - started
        new_primary = real_cluster.wait_primary_of(groups[partition])
        assert new_primary != victim
        cached = client._core.cluster.cached_primary(PartitionGroup("failover", "t", partition))
        assert cached is not None and cached != address_of(real_cluster, victim)
        assert payloads(client, "failover", "t", partition) == sent + after
        real_cluster.restart(victim)
    assert recovered_s < 20.0


def test_client_follows_the_metadata_primary_to_its_successor(real_cluster: RealCluster) -> None:
    with Client.from_connection_string(real_cluster.url(1, **OPTIONS)) as client:
        client.create_stream("before")
        leader = real_cluster.wait_primary_of(METADATA_GROUP_NAME)
        real_cluster.kill(leader)
        client.create_stream("after")
        successor = real_cluster.wait_primary_of(METADATA_GROUP_NAME)
        assert successor != leader
        client.get_cluster_metadata()
        assert client._core.cluster.metadata_primary == address_of(real_cluster, successor)
        names = {s.name for s in client.get_streams()}
        assert {"before", "after"} <= names
        real_cluster.restart(leader)


class DialLog:
    """When the blocking driver dialed which node."""

    def __init__(self) -> None:
        self.dials: list[tuple[float, NodeAddress]] = []
        self.lock = threading.Lock()


def test_client_reconnects_with_backoff_while_its_node_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One node, killed and restarted on the same port and data: a call made while it is
    down waits with growing pauses (not a busy loop) and succeeds once it is back, under
    the same session."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    node: NodeProcess = start_node(tmp_path / "data", address=address)
    log = DialLog()
    dial = BlockingClient._dial

    def logged(self: BlockingClient, target: NodeAddress, timeout_s: float) -> object:
        with log.lock:
            log.dials.append((time.monotonic(), target))
        return dial(self, target, timeout_s)

    monkeypatch.setattr(BlockingClient, "_dial", logged)
    restarted: list[NodeProcess] = []
    try:
        with Client.from_connection_string(node_url(address, **OPTIONS)) as client:
            client.create_stream("backoff")
            client.create_topic("backoff", "t", partitions_count=1)
            session = client.session
            node.kill()
            down_at = time.monotonic()
            timer = threading.Timer(
                1.5, lambda: restarted.append(start_node(tmp_path / "data", address=address))
            )
            timer.start()
            confirmations = client.send_messages("backoff", "t", [Message(b"x")], 0)
            timer.join()
            assert [c.partition_id for c in confirmations] == [0]
            assert client.session == session, "the session survived the restart"
            dials = [at for at, _ in log.dials if at >= down_at]
    finally:
        node.kill()
        for process in restarted:
            process.kill()
    # How long the outage lasts depends on how fast the node restarts (the machine's
    # load), so the bound on the dial count is taken over the first 1.5 s only, when
    # the node is down for certain: pauses of 20 ms doubling to 500 ms, each jittered
    # to half of it at least, allow 11 dials there; a busy loop would make hundreds.
    early = [at for at in dials if at < down_at + 1.5]
    assert len(dials) >= 3 and len(early) <= 11, f"{len(early)} dials in the first 1.5 s"
    gaps = [b - a for a, b in itertools.pairwise(dials)]
    assert max(gaps) >= 4 * min(gaps), f"the pauses between dials did not grow: {gaps}"
