"""Our SDK and the official ``apache-iggy`` 0.9.0 SDK on the two ends of a real node (and
of a 3-node cluster): what one writes the other reads with the same ids, payloads, user
headers, offsets and timestamps, and consumer offsets stored by one are seen by the other.

Our side runs under trio (or blocking), theirs under asyncio, one after the other; every
run is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar

from apache_iggy import AutoCommit as OfficialAutoCommit
from apache_iggy import AutoCommitWhen, Consumer, IggyClient, PollingStrategy, SendMessage

from sdk import AsyncClient, AutoCommit, Client, ConsumerRef, Message, ReceivedMessage
from sdk import PollingStrategy as OurPollingStrategy
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.sdk.conftest import run_trio
from tests.sdk.real import RealCluster, node_url

_T = TypeVar("_T")
RUN_TIMEOUT_S = 30.0
COUNT = 10
ORIGIN_US = 1_700_000_000_000_000


def official(awaitable: Awaitable[_T]) -> _T:
    async def bounded() -> _T:
        return await asyncio.wait_for(awaitable, RUN_TIMEOUT_S)

    return asyncio.run(bounded())


async def official_client(address: str) -> Any:
    client = IggyClient(address)
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    return client


async def official_poll(address: str, stream: str, consumer: Any, strategy: Any) -> list[Any]:
    client = await official_client(address)
    polled: list[Any] = await client.poll_messages(
        stream,
        "t",
        consumer=consumer,
        polling_strategy=strategy,
        count=100,
        auto_commit=False,
        partition_id=0,
    )
    return polled


def wait_stored_offset(client: Client, stream: str, consumer: ConsumerRef, offset: int) -> int:
    """The stored offset of ``consumer`` on partition 0 once it reaches ``offset``
    (bounded): offsets stored by another session or by the server's auto-commit reach
    the node serving this read a moment later."""
    deadline = time.monotonic() + 5.0
    while True:
        stored = client.get_consumer_offset(stream, "t", consumer=consumer, partition_id=0)
        value = -1 if stored is None else stored.stored_offset
        if value >= offset or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def our_headers(i: int) -> dict[str, Any]:
    return {"kind": "ours", "n": i, "flag": i % 2 == 0, "raw": bytes([i, 255]), "ratio": i / 4}


def their_headers(i: int) -> dict[str, Any]:
    return {"kind": "theirs", "n": i, "flag": i % 3 == 0, "raw": bytes([7, i])}


def view_of_theirs(message: Any) -> tuple[int, int, bytes, dict[Any, Any], int, int]:
    headers = message.user_headers()
    return (
        message.offset(),
        message.id(),
        bytes(message.payload()),
        {} if headers is None else headers.to_scalar_dict(),
        message.timestamp(),
        message.origin_timestamp(),
    )


def view_of_ours(message: ReceivedMessage) -> tuple[int, int, bytes, dict[Any, Any], int, int]:
    return (
        message.offset,
        message.id,
        message.payload,
        message.headers,
        message.timestamp,
        message.origin_timestamp,
    )


def our_messages() -> list[Message]:
    # Half carry their own origin timestamp, half are stamped by the producer.
    return [
        Message(
            f"ours-{i}".encode(),
            id=1000 + i,
            headers=our_headers(i),
            origin_timestamp=ORIGIN_US + i if i % 2 == 0 else 0,
        )
        for i in range(COUNT)
    ]


def produce_ours(url: str, stream: str) -> None:
    async def main() -> None:
        async with AsyncClient.from_connection_string(url) as client:
            await client.create_stream(stream)
            await client.create_topic(stream, "t", partitions_count=1)
            async with client.producer(stream, "t", partitioning=0, batch_length=4) as producer:
                await producer.send(*our_messages())
            assert producer.statistics().messages_sent == COUNT

    run_trio(main, RUN_TIMEOUT_S)


def check_ours_read_by_them(url: str, read_address: str, stream: str) -> None:
    started_us = time.time_ns() // 1000
    produce_ours(url, stream)
    theirs = official(
        official_poll(read_address, stream, Consumer.Single(1), PollingStrategy.First())
    )
    views = [view_of_theirs(m) for m in theirs]
    assert [v[0] for v in views] == list(range(COUNT))
    assert [v[1] for v in views] == [1000 + i for i in range(COUNT)]
    assert [v[2] for v in views] == [f"ours-{i}".encode() for i in range(COUNT)]
    assert [v[3] for v in views] == [our_headers(i) for i in range(COUNT)]
    for i, view in enumerate(views):
        timestamp, origin = view[4], view[5]
        assert origin == ORIGIN_US + i if i % 2 == 0 else started_us <= origin <= timestamp
        assert started_us <= timestamp
    assert [v[4] for v in views] == sorted(v[4] for v in views)
    # The same messages through our own poll: every field agrees.
    with Client.from_connection_string(url) as client:
        polled = client.poll_messages(
            stream,
            "t",
            consumer=ConsumerRef.single(1),
            polling_strategy=OurPollingStrategy.first(),
            count=100,
            partition_id=0,
        )
    assert [view_of_ours(m) for m in polled.messages] == views


def produce_theirs(address: str, stream: str, first: int, count: int) -> None:
    async def main() -> None:
        client = await official_client(address)
        if first == 0:
            await client.create_stream(stream)
            await client.create_topic(stream, "t", 1)
        for i in range(first, first + count):
            message = SendMessage(f"theirs-{i}".encode(), user_headers=their_headers(i), id=i + 1)
            await client.send_messages(stream, "t", 0, [message])

    official(main())


def check_theirs_read_by_us(url: str, address: str, stream: str) -> None:
    produce_theirs(address, stream, 0, COUNT)
    received: list[ReceivedMessage] = []

    async def consume() -> None:
        async with (
            AsyncClient.from_connection_string(url) as client,
            client.consumer(
                stream, "t", consumer_id=9, auto_commit=AutoCommit.after_each_batch()
            ) as consumer,
        ):
            async for message in consumer:
                received.append(message)
                if len(received) == COUNT:
                    break

    run_trio(consume, RUN_TIMEOUT_S)
    # Read the stored offset on the node the official SDK reads from, so that its next
    # poll there sees it too (a node serves reads from its own committed state).
    with Client.from_connection_string(node_url(address, cluster_discovery="false")) as client:
        stored = wait_stored_offset(client, stream, ConsumerRef.single(9), COUNT - 1)
    assert stored == COUNT - 1
    ours = [view_of_ours(m) for m in received]
    assert [v[0] for v in ours] == list(range(COUNT))
    assert [v[1] for v in ours] == [i + 1 for i in range(COUNT)]
    assert [v[2] for v in ours] == [f"theirs-{i}".encode() for i in range(COUNT)]
    assert [v[3] for v in ours] == [their_headers(i) for i in range(COUNT)]
    theirs = official(official_poll(address, stream, Consumer.Single(1), PollingStrategy.First()))
    assert ours == [view_of_theirs(m) for m in theirs]
    # Their consumer 9 continues after the offset our consumer committed.
    produce_theirs(address, stream, COUNT, 2)
    after = official(official_poll(address, stream, Consumer.Single(9), PollingStrategy.Next()))
    assert [m.offset() for m in after] == [COUNT, COUNT + 1]


def test_our_producer_to_the_official_sdk_on_a_real_node(real_node: NodeProcess) -> None:
    url = node_url(real_node.address)
    check_ours_read_by_them(url, real_node.address, "interop-ours")


def test_official_producer_to_our_consumer_on_a_real_node(real_node: NodeProcess) -> None:
    check_theirs_read_by_us(node_url(real_node.address), real_node.address, "interop-theirs")


def test_official_consumer_group_reads_what_our_producer_sent(real_node: NodeProcess) -> None:
    produce_ours(node_url(real_node.address), "interop-group")

    async def drain() -> list[tuple[int, bytes]]:
        client = await official_client(real_node.address)
        consumer = await client.consumer_group(
            "readers",
            "interop-group",
            "t",
            # Committed by the server on every poll: with auto-commit disabled and a
            # backlog larger than one batch the official consumer stops after its first
            # batch (it polls Next again and drops what it already saw).
            auto_commit=OfficialAutoCommit.IntervalOrWhen(
                timedelta(seconds=1), AutoCommitWhen.PollingMessages()
            ),
            polling_strategy=PollingStrategy.Next(),
            poll_interval=timedelta(milliseconds=20),
            batch_length=3,
        )
        got: list[tuple[int, bytes]] = []
        async for message in consumer.iter_messages():
            got.append((message.id(), bytes(message.payload())))
            if len(got) == COUNT:
                break
        return got

    got = official(drain())
    assert got == [(1000 + i, f"ours-{i}".encode()) for i in range(COUNT)]
    # The group's offset, stored by the server for their consumer, read by ours.
    with Client.from_connection_string(node_url(real_node.address)) as client:
        stored = wait_stored_offset(
            client, "interop-group", ConsumerRef.group("readers"), COUNT - 1
        )
    assert stored == COUNT - 1


def test_offsets_stored_by_the_official_sdk_are_read_by_ours(real_node: NodeProcess) -> None:
    produce_ours(node_url(real_node.address), "interop-offsets")

    async def poll_with_auto_commit() -> None:
        client = await official_client(real_node.address)
        polled = await client.poll_messages(
            "interop-offsets",
            "t",
            consumer=Consumer.Single(5),
            polling_strategy=PollingStrategy.Offset(0),
            count=4,
            auto_commit=True,
            partition_id=0,
        )
        assert [m.offset() for m in polled] == [0, 1, 2, 3]

    official(poll_with_auto_commit())
    # Auto-commit is stored after the poll is answered: wait for it (bounded).
    with Client.from_connection_string(node_url(real_node.address)) as client:
        stored = wait_stored_offset(client, "interop-offsets", ConsumerRef.single(5), 3)
    assert stored == 3


def test_both_sdks_interoperate_across_a_real_cluster(real_cluster: RealCluster) -> None:
    """Our producer writes through node 0, theirs reads on node 2; theirs writes on node
    1, ours reads through node 2."""
    check_ours_read_by_them(real_cluster.url(0), real_cluster.addresses[2], "cluster-ours")
    check_theirs_read_by_us(real_cluster.url(2), real_cluster.addresses[1], "cluster-theirs")
