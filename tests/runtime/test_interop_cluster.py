"""A real 3-node cluster on 127.0.0.1: the official SDK, forwarding, and a node killed.

The cluster is started by ``broker.cli.cluster.start_cluster`` (what ``viewstream
cluster up`` runs) with a 5 ms tick, so a view change after a crash takes a couple of
seconds instead of five or more. Every process is killed in teardown.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from apache_iggy import (
    AutoCommit,
    Consumer,
    IggyClient,
    Partitioning,
    PollingStrategy,
    SendMessage,
)

from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import (
    ClusterLayout,
    start_cluster,
    start_node_process,
    stop_processes,
    wait_ready,
)
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD
from tests.runtime.test_interop_node import run
from tests.wire_client import WireClient

TICK_MS = 5
RUNTIME_STATS_CODE = 9000
TRANSIENT = (IggyErrorCode.TRANSIENT_NOT_ACCEPTED, IggyErrorCode.TRANSIENT_NOT_COMMITTED)


@dataclass
class Cluster:
    layout: ClusterLayout
    processes: list[subprocess.Popen[bytes]]

    def address(self, index: int) -> str:
        return self.layout.client_addresses[index]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder: Path = tmp_path_factory.mktemp("cluster")
    layout = cluster_layout(folder, 3)
    processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
    try:
        yield Cluster(layout, processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=20)


def _ports(layout: ClusterLayout) -> list[int]:
    return [
        int(a.rpartition(":")[2])
        for a in layout.client_addresses + layout.bus_addresses + layout.http_addresses
    ]


def _wire_login(address: str) -> WireClient:
    deadline = time.monotonic() + 20
    while True:
        client = WireClient(address, timeout_s=15)
        try:
            client.login("iggy", ROOT_PASSWORD)
            return client
        except wire.ServerRejected as rejected:
            client.close()
            if rejected.code not in TRANSIENT or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _send_until_acked(
    client: WireClient, stream: str, partition: int, payload: bytes, deadline_s: float = 30
) -> None:
    """Send one message, retrying the *same* request (same client, session and request
    number) on transient errors, so a retry of an applied request is deduplicated."""
    body = wire.build_send_messages(
        wire.Identifier(stream),
        wire.Identifier("t"),
        wire.PartitionId(partition),
        [wire.OutgoingMessage(int.from_bytes(payload[:16].ljust(16, b"\0"), "little"), payload)],
    )
    frame = client.frame_for(int(CommandCode.SEND_MESSAGES), body)
    client.request += 1
    deadline = time.monotonic() + deadline_s
    while True:
        client.send_frame(frame)
        reply = client.read_frame()
        assert reply is not None, "the node closed the connection"
        if reply.command is wire.Command.EVICTION:
            raise AssertionError(f"evicted: {reply.eviction_header().reason.name}")
        status = reply.reply_header().status
        if status == 0:
            return
        assert status in TRANSIENT, f"send failed with {status}"
        assert time.monotonic() < deadline, "no primary took the request in time"
        time.sleep(0.05)


def _poll_all(client: WireClient, stream: str, partition: int) -> list[bytes]:
    reply = client.call(
        CommandCode.POLL_MESSAGES,
        wire.PollMessages(
            wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
            wire.Identifier(stream),
            wire.Identifier("t"),
            partition,
            wire.PollingStrategy(wire.PollingKind.FIRST, 0),
            100_000,
            False,
        ),
    )
    assert isinstance(reply, wire.PollMessagesReply)
    found: list[bytes] = []
    for record in reply.records:
        _, messages = wire.read_batch(record)
        found.extend(bytes(m.payload) for m in messages)
    return found


def _poll_until(
    client: WireClient, stream: str, partition: int, expected: list[bytes], timeout_s: float = 10
) -> list[bytes]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = _poll_all(client, stream, partition)
        except wire.ServerRejected as rejected:
            # A node that just restarted answers 58 until its replica may serve a read
            # (recovering, or before it can ask the primary for its commit): not yet.
            assert rejected.code in TRANSIENT and time.monotonic() < deadline, rejected
        else:
            if found == expected or time.monotonic() > deadline:
                assert found == expected
                return found
        time.sleep(0.05)


def test_cluster_sdk_end_to_end_through_a_backup(cluster: Cluster) -> None:
    async def scenario() -> dict[str, Any]:
        client = IggyClient(cluster.address(1))  # not the metadata primary
        await client.connect()
        await client.login_user("iggy", ROOT_PASSWORD)
        raw = await client.send_binary_request(12, b"")
        metadata = wire.ClusterMetadata.decode(raw)
        await client.create_stream("sdk")
        await client.create_topic("sdk", "t", 3)
        confirmations = []
        for partitioning in (
            Partitioning.partition_id(0),
            Partitioning.partition_id(1),
            Partitioning.partition_id(2),
            Partitioning.balanced(),
            Partitioning.messages_key("user-42"),
        ):
            reply = await client.send_messages(
                "sdk", "t", partitioning, [SendMessage(b"one"), SendMessage(b"two")]
            )
            confirmations += [c.partition_id for c in reply.confirmations]
        strategies = {}
        for name, strategy in (
            ("offset", PollingStrategy.Offset(1)),
            ("first", PollingStrategy.First()),
            ("last", PollingStrategy.Last()),
            ("timestamp", PollingStrategy.Timestamp(0)),
            ("next", PollingStrategy.Next()),
        ):
            polled = await client.poll_messages(
                "sdk",
                "t",
                consumer=Consumer.Single(5),
                polling_strategy=strategy,
                count=1,
                auto_commit=False,
                partition_id=0,
            )
            strategies[name] = [m.offset() for m in polled]
        consumer = await client.consumer_group(
            "workers",
            "sdk",
            "t",
            auto_commit=AutoCommit.Disabled(),
            polling_strategy=PollingStrategy.Next(),
            poll_interval=timedelta(milliseconds=20),
            batch_length=100,
        )
        got: list[bytes] = []

        async def drain() -> None:
            async for message in consumer.iter_messages():
                got.append(bytes(message.payload()))
                if len(got) >= 10:
                    return

        await asyncio.wait_for(drain(), 20)
        stats = await client.get_stats()
        return {
            "metadata": metadata,
            "confirmations": confirmations,
            "strategies": strategies,
            "group": got,
            "stats": stats,
        }

    found = run(scenario(), timeout_s=90)
    metadata = found["metadata"]
    assert len(metadata.nodes) == 3
    leaders = [n for n in metadata.nodes if n.role == wire.ClusterNodeRole.LEADER]
    assert len(leaders) == 1
    assert len(found["confirmations"]) == 5
    on_zero = 2 * found["confirmations"].count(0)  # two messages per send
    assert found["strategies"] == {
        "offset": [1],
        "first": [0],
        "last": [on_zero - 1],
        "timestamp": [0],
        "next": [0],
    }
    assert sorted(found["group"]) == sorted([b"one", b"two"] * 5)
    assert found["stats"].partitions_count >= 3


def _offset_request(stream: str, partition: int, consumer: wire.Consumer) -> bytes:
    return wire.GetConsumerOffset(
        consumer, wire.Identifier(stream), wire.Identifier("t"), partition
    ).encode()


def test_cluster_sdk_auto_commit_poll_is_routed_to_the_partition_primary(
    cluster: Cluster,
) -> None:
    """poll_messages(auto_commit=True) against three nodes: the SDK asks its node for the
    route (103), logs in on the partition's primary, attaches its session (14) and polls
    there (104); the offset it auto-commits is what the next Next poll continues from.
    The three partitions have their primaries spread over the nodes, so at least one
    route leads away from the node the client is on."""

    async def scenario() -> dict[int, list[list[int]]]:
        client = IggyClient(cluster.address(2))
        await client.connect()
        await client.login_user("iggy", ROOT_PASSWORD)
        await client.create_stream("ac")
        await client.create_topic("ac", "t", 3)
        for partition in range(3):
            await client.send_messages(
                "ac",
                "t",
                Partitioning.partition_id(partition),
                [SendMessage(f"p{partition}-{i}".encode()) for i in range(3)],
            )
        polled: dict[int, list[list[int]]] = {}
        for partition in range(3):
            offsets = []
            for _ in range(2):
                messages = await client.poll_messages(
                    "ac",
                    "t",
                    consumer=Consumer.Single(7),
                    polling_strategy=PollingStrategy.Next(),
                    count=2,
                    auto_commit=True,
                    partition_id=partition,
                )
                offsets.append([m.offset() for m in messages])
                # Auto-commit is asynchronous (Iggy's NoAck path): wait until the stored
                # offset is visible before the next poll continues from it.
                last = offsets[-1][-1]
                request = _offset_request(
                    "ac", partition, wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(7))
                )
                deadline = time.monotonic() + 15
                while True:
                    raw = await client.send_binary_request(120, request)
                    if raw and wire.ConsumerOffsetInfo.decode(raw).stored_offset == last:
                        break
                    assert time.monotonic() < deadline, "the auto-commit never landed"
                    await asyncio.sleep(0.05)
            polled[partition] = offsets
        return polled

    found = run(scenario(), timeout_s=120)
    assert found == {p: [[0, 1], [2]] for p in range(3)}


def test_cluster_sdk_group_consumer_with_auto_commit_keeps_its_progress(cluster: Cluster) -> None:
    """A consumer-group member with the SDK's default auto-commit (on every poll, and on
    an interval through the offset route 123) reads each message once, and a second
    member joining later continues where the first one's commits left off."""

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        client = IggyClient(cluster.address(0))
        await client.connect()
        await client.login_user("iggy", ROOT_PASSWORD)
        await client.create_stream("acg")
        await client.create_topic("acg", "t", 2)
        for partition in range(2):
            await client.send_messages(
                "acg",
                "t",
                Partitioning.partition_id(partition),
                [SendMessage(f"first-{partition}-{i}".encode()) for i in range(3)],
            )
        consumer = await client.consumer_group(
            "g",
            "acg",
            "t",
            polling_strategy=PollingStrategy.Next(),
            poll_interval=timedelta(milliseconds=20),
            batch_length=10,
        )
        first: list[bytes] = []

        async def drain(into: list[bytes], wanted: int, source: Any) -> None:
            async for message in source.iter_messages():
                into.append(bytes(message.payload()))
                if len(into) >= wanted:
                    return

        await asyncio.wait_for(drain(first, 6, consumer), 30)
        group = wire.Consumer(wire.ConsumerKind.CONSUMER_GROUP, wire.Identifier("g"))
        deadline = time.monotonic() + 15
        for partition in range(2):
            while True:
                raw = await client.send_binary_request(
                    120, _offset_request("acg", partition, group)
                )
                if raw and wire.ConsumerOffsetInfo.decode(raw).stored_offset == 2:
                    break
                assert time.monotonic() < deadline, "the group's auto-commit never landed"
                await asyncio.sleep(0.05)
        await client.logout_user()  # leaves the group: the next member gets both partitions
        other = IggyClient(cluster.address(1))
        await other.connect()
        await other.login_user("iggy", ROOT_PASSWORD)
        for partition in range(2):
            await other.send_messages(
                "acg",
                "t",
                Partitioning.partition_id(partition),
                [SendMessage(f"second-{partition}".encode())],
            )
        later = await other.consumer_group(
            "g",
            "acg",
            "t",
            polling_strategy=PollingStrategy.Next(),
            poll_interval=timedelta(milliseconds=20),
            batch_length=10,
        )
        second: list[bytes] = []
        await asyncio.wait_for(drain(second, 2, later), 30)
        return first, second

    first, second = run(scenario(), timeout_s=120)
    assert sorted(first) == sorted(f"first-{p}-{i}".encode() for p in range(2) for i in range(3))
    assert sorted(second) == [b"second-0", b"second-1"]


def test_cluster_every_node_takes_writes_and_serves_them(cluster: Cluster) -> None:
    clients = [_wire_login(cluster.address(i)) for i in range(3)]
    try:
        clients[0].call(CommandCode.CREATE_STREAM, wire.CreateStream("spread"))
        clients[0].call(
            CommandCode.CREATE_TOPIC, wire.CreateTopic(wire.Identifier("spread"), 3, "t", ())
        )
        expected: dict[int, list[bytes]] = {p: [] for p in range(3)}
        for node, client in enumerate(clients):
            for partition in range(3):
                payload = f"n{node}-p{partition}".encode()
                _send_until_acked(client, "spread", partition, payload)
                expected[partition].append(payload)
        # A node serves reads from its own committed state: what another connection wrote
        # shows up once this node learns the commit (a heartbeat or the next prepare).
        for client in clients:
            for partition in range(3):
                assert _poll_until(client, "spread", partition, expected[partition])
    finally:
        for client in clients:
            client.close()


def test_cluster_a_stranger_cannot_join_the_replica_bus(cluster: Cluster) -> None:
    host, _, port = cluster.layout.bus_addresses[2].rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.settimeout(10)
        challenge = sock.recv(64)
        assert challenge.startswith(b"VSBUS")
        # Claim to be replica 0 with a made-up MAC.
        sock.sendall(bytes([0]) + bytes(32) + bytes(32))
        assert sock.recv(64) == b""  # refused: the connection is closed
    with _wire_login(cluster.address(2)) as client:
        client.ping()


def test_cluster_keeps_every_acknowledged_message_when_a_node_is_killed(
    cluster: Cluster,
) -> None:
    client = _wire_login(cluster.address(0))
    try:
        client.call(CommandCode.CREATE_STREAM, wire.CreateStream("survive"))
        client.call(
            CommandCode.CREATE_TOPIC, wire.CreateTopic(wire.Identifier("survive"), 3, "t", ())
        )
        acked: dict[int, list[bytes]] = {p: [] for p in range(3)}
        for i in range(6):
            payload = f"before-{i}".encode()
            _send_until_acked(client, "survive", i % 3, payload)
            acked[i % 3].append(payload)
        victim = cluster.processes[2]
        victim.kill()
        victim.wait(timeout=20)
        # Every partition, whichever node was its primary, keeps taking writes: the
        # group whose primary died elects another in a view change.
        for i in range(6):
            payload = f"after-{i}".encode()
            _send_until_acked(client, "survive", i % 3, payload)
            acked[i % 3].append(payload)
        for partition in range(3):
            assert _poll_all(client, "survive", partition) == acked[partition]
        # Node 0 never restarted and opened every group in view 0: a group is in a later
        # view exactly when its counters show a view change.
        report = json.loads(bytes(client.call_raw(RUNTIME_STATS_CODE).body))
        groups = report["groups"].values()
        assert all((g["view"] > 0) == (g["view_changes"] > 0) for g in groups), groups
    finally:
        client.close()
    # The killed node restarts, catches up from its peers and serves the same data.
    restarted = start_cluster_node(cluster.layout, 2)
    cluster.processes[2] = restarted
    with _wire_login(cluster.address(2)) as late:
        for partition in range(3):
            _poll_until(late, "survive", partition, acked[partition], timeout_s=30)


def start_cluster_node(layout: ClusterLayout, index: int) -> subprocess.Popen[bytes]:
    """Restart one node of a running local cluster (same folder, ports and secret)."""
    process = start_node_process(layout, index, root_password=ROOT_PASSWORD, tick_ms=TICK_MS)
    try:
        wait_ready(layout, [process], [index])
    except BaseException:
        stop_processes([process])
        raise
    return process
