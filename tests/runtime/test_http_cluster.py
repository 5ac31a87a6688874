"""Iggy's HTTP API on a real 3-node cluster: the official SDK on every node, tokens that
travel between nodes, and messages crossing between HTTP and TCP.

Reads on another node than the one that wrote see the write once that node applied it
(read-your-writes holds per session and node, as per TCP connection), so a read of
another node's write waits for it, bounded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import ClusterLayout, start_cluster
from tests.runtime.processes import ROOT_PASSWORD
from tests.runtime.test_http import login, payloads, request
from tests.runtime.test_interop_node import run

TICK_MS = 5
VISIBLE_WITHIN_S = 20.0
_T = TypeVar("_T")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterLayout]:
    folder: Path = tmp_path_factory.mktemp("http-cluster")
    layout = cluster_layout(folder, 3)
    processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
    try:
        yield layout
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=20)


def http_port(layout: ClusterLayout, index: int) -> int:
    return int(layout.http_addresses[index].rpartition(":")[2])


async def http_client(layout: ClusterLayout, index: int) -> Any:
    client = IggyClient.from_connection_string(
        f"iggy+http://iggy:{ROOT_PASSWORD}@127.0.0.1:{http_port(layout, index)}"
    )
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    return client


async def eventually(read: Callable[[], Awaitable[_T]], done: Callable[[_T], bool]) -> _T:
    """``read()`` until ``done`` says its result is complete, within ``VISIBLE_WITHIN_S``."""
    deadline = time.monotonic() + VISIBLE_WITHIN_S
    while True:
        result = await read()
        if done(result) or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.05)


def test_sdk_over_http_on_every_node(cluster: ClusterLayout) -> None:
    async def scenario() -> dict[str, list[bytes]]:
        web = [await http_client(cluster, index) for index in range(3)]
        tcp = IggyClient(cluster.client_addresses[1])
        await tcp.connect()
        await tcp.login_user("iggy", ROOT_PASSWORD)
        await web[1].create_stream("hc")
        await web[1].create_topic("hc", "t", 3)
        topic = await web[1].get_topic("hc", "t")
        assert topic is not None and topic.partitions_count == 3
        # Node 2 knows the topic once it applied its creation.
        await eventually(lambda: web[2].get_topic("hc", "t"), lambda found: found is not None)
        await web[2].send_messages("hc", "t", 0, [SendMessage(f"h{i}") for i in range(4)])
        await tcp.send_messages("hc", "t", 1, [SendMessage(b"from tcp")])

        def poller(client: Any, partition: int, strategy: Any) -> Callable[[], Awaitable[Any]]:
            async def poll() -> list[bytes]:
                messages = await client.poll_messages(
                    "hc",
                    "t",
                    consumer=Consumer.Single(3),
                    polling_strategy=strategy,
                    count=10,
                    auto_commit=False,
                    partition_id=partition,
                )
                return payloads(messages)

            return poll

        def four(result: list[bytes]) -> bool:
            return len(result) >= 4

        seen = {
            "first": await eventually(poller(web[0], 0, PollingStrategy.First()), four),
            "offset": await poller(web[0], 0, PollingStrategy.Offset(2))(),
            "last": await poller(web[0], 0, PollingStrategy.Last())(),
            "timestamp": await poller(web[0], 0, PollingStrategy.Timestamp(0))(),
            "tcp reads http": await eventually(poller(tcp, 0, PollingStrategy.First()), four),
            "http reads tcp": await eventually(poller(web[2], 1, PollingStrategy.First()), bool),
        }
        await web[0].create_consumer_group("hc", "t", "g")
        group = await web[0].get_consumer_group("hc", "t", "g")
        assert group is not None and group.partitions_count == 3
        return seen

    seen = run(scenario(), timeout_s=120)
    sent = [b"h0", b"h1", b"h2", b"h3"]
    assert seen["first"] == sent
    assert seen["offset"] == sent[2:]
    assert seen["last"][-1] == b"h3"
    assert seen["timestamp"] == sent
    assert seen["tcp reads http"] == sent
    assert seen["http reads tcp"] == [b"from tcp"]


def test_a_token_from_one_node_works_on_the_others(cluster: ClusterLayout) -> None:
    token = login(http_port(cluster, 0))["access_token"]["token"]
    body = json.dumps({"name": "hc-token"}).encode()
    assert request(http_port(cluster, 2), "POST", "/streams", body, token)[0] == 200
    for index in range(3):
        deadline = time.monotonic() + VISIBLE_WITHIN_S
        while True:
            status, _ = request(http_port(cluster, index), "GET", "/streams/hc-token", token=token)
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert status == 200, index
    # Logged out on one node, the token is refused on every node.
    assert request(http_port(cluster, 1), "DELETE", "/users/logout", token=token)[0] == 204
    for index in range(3):
        deadline = time.monotonic() + VISIBLE_WITHIN_S
        while True:
            status, _ = request(http_port(cluster, index), "GET", "/streams", token=token)
            if status == 401 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert status == 401, index


def test_cluster_metadata_lists_every_nodes_http_port(cluster: ClusterLayout) -> None:
    token = login(http_port(cluster, 2))["access_token"]["token"]
    status, metadata = request(http_port(cluster, 2), "GET", "/cluster/metadata", token=token)
    assert status == 200
    ports = [node["endpoints"]["http"] for node in metadata["nodes"]]
    assert ports == [http_port(cluster, index) for index in range(3)]
    tcp = [node["endpoints"]["tcp"] for node in metadata["nodes"]]
    assert tcp == [int(a.rpartition(":")[2]) for a in cluster.client_addresses]
    assert sum(node["role"] == "leader" for node in metadata["nodes"]) == 1


def test_consumer_offsets_over_http_on_a_backup(cluster: ClusterLayout) -> None:
    for index in range(3):
        port = http_port(cluster, index)
        token = login(port)["access_token"]["token"]
        stream = f"hc-off-{index}"
        assert (
            request(port, "POST", "/streams", json.dumps({"name": stream}).encode(), token)[0]
            == 200
        )
        topic = {"name": "t", "partitions_count": 1}
        path = f"/streams/{stream}/topics"
        assert request(port, "POST", path, json.dumps(topic).encode(), token)[0] == 200
        offsets = f"/streams/{stream}/topics/t/consumer-offsets"
        store = json.dumps({"consumer_id": 9, "partition_id": 0, "offset": 0}).encode()
        message = {"messages": [{"id": 0, "payload": "eA=="}]}
        sent = json.dumps({"partitioning": {"kind": "balanced", "value": ""}, **message})
        assert (
            request(port, "POST", f"/streams/{stream}/topics/t/messages", sent.encode(), token)[0]
            == 201
        )
        assert request(port, "PUT", offsets, store, token)[0] == 204
        status, info = request(port, "GET", f"{offsets}?consumer_id=9&partition_id=0", token=token)
        assert status == 200 and info["stored_offset"] == 0, index
