"""The official apache-iggy 0.9.0 SDK against a real single-node viewstream process.

Each test drives the SDK (asyncio, its own event loop, a bounded timeout) against the
module's node process; tests use distinct stream names so they do not interfere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import xxhash
from apache_iggy import (
    AutoCommit,
    Consumer,
    Durability,
    HeaderKey,
    HeaderValue,
    IggyClient,
    Partitioning,
    PollingStrategy,
    SendMessage,
)

from sdk import wire
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node

_T = TypeVar("_T")
TIMEOUT_S = 30.0


def run(awaitable: Awaitable[_T], timeout_s: float = TIMEOUT_S) -> _T:
    async def bounded() -> _T:
        return await asyncio.wait_for(awaitable, timeout_s)

    return asyncio.run(bounded())


async def connect(node: NodeProcess, password: str = ROOT_PASSWORD) -> Any:
    client = IggyClient(node.address)
    await client.connect()
    await client.login_user("iggy", password)
    return client


def payloads(messages: list[Any]) -> list[bytes]:
    return [bytes(m.payload()) for m in messages]


def test_sdk_connects_logs_in_pings_and_reads_cluster_metadata(node: NodeProcess) -> None:
    async def scenario() -> bytes:
        client = await connect(node)
        await client.ping()
        raw: bytes = await client.send_binary_request(12, b"")
        return raw

    raw = run(scenario())
    # One node, named as the leader, at the address the SDK dialed.
    assert b"node-0" in raw and b"127.0.0.1" in raw


def test_cluster_and_node_names_are_the_configured_ones(tmp_path: Path) -> None:
    named = start_node(
        tmp_path / "data", extra=["--cluster-name", "prod-east", "--node-names", "n1"]
    )
    try:

        async def scenario() -> bytes:
            client = await connect(named)
            raw: bytes = await client.send_binary_request(12, b"")
            return raw

        raw = run(scenario())
    finally:
        named.kill()
    assert b"prod-east" in raw and b"n1" in raw and b"node-0" not in raw


def test_names_from_the_config_file_and_environment_and_only_tcp_has_a_port(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('cluster_name = "from-file"\nnode_name = "file-node"\n', encoding="utf-8")
    named = start_node(
        tmp_path / "data",
        extra=["--config", str(toml)],
        env={"VIEWSTREAM_NODE_NAME": "env-node"},  # the environment beats the file
    )
    try:

        async def scenario() -> bytes:
            client = await connect(named)
            raw: bytes = await client.send_binary_request(12, b"")
            return raw

        metadata = wire.ClusterMetadata.decode(run(scenario()))
        port = named.port
    finally:
        named.kill()
    assert metadata.name == "from-file"
    (only,) = metadata.nodes
    assert (only.name, only.ip, only.tcp_port) == ("env-node", "127.0.0.1", port)
    # start_node turns the WebSocket listener off; QUIC and HTTP a node does not have.
    assert (only.quic_port, only.http_port, only.websocket_port) == (0, 0, 0)


def test_sdk_describe_options_gives_the_topic_keys_the_node_accepts(node: NodeProcess) -> None:
    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        client = await connect(node)
        topic = await client.describe_options("topic")
        stream = await client.describe_options("stream")
        user = await client.describe_options("user")
        return topic, stream, user

    topic, stream, user = run(scenario())
    keys = {spec.key: spec for spec in topic}
    assert set(keys) == {
        "compression_algorithm",
        "message_expiry",
        "max_topic_size",
        "segment_size",
        "durability",
        "enforce_fsync",
        "consumer_offset_durability",
        "messages_required_to_save",
        "size_of_messages_required_to_save",
        "preallocate_segments",
    }
    assert all(spec.description for spec in topic)
    assert stream == [] and user == []

    # The SDK decodes each default by the entry's kind.
    assert keys["durability"].default_value == HeaderValue.String("replicated")
    assert keys["preallocate_segments"].default_value == HeaderValue.Bool(False)
    assert keys["message_expiry"].default_value == HeaderValue.UnsignedInt64(2**64 - 1)


def test_sdk_topic_options_as_text_are_read_as_iggy_reads_them(node: NodeProcess) -> None:
    async def scenario() -> Any:
        client = await connect(node)
        await client.create_stream("texts")
        options = {"message_expiry": "7 days", "segment_size": "128 MiB", "enforce_fsync": "true"}
        await client.create_topic("texts", "t", 1, options=options)
        return await client.get_topic("texts", "t")

    topic = run(scenario())
    # Stored as parsed, in the canonical kind: the microseconds and the bytes.
    options = topic.options
    week_us = 7 * 86_400 * 1_000_000
    assert options[HeaderKey.String("message_expiry")] == HeaderValue.UnsignedInt64(week_us)
    assert options[HeaderKey.String("segment_size")] == HeaderValue.UnsignedInt64(128 << 20)
    assert options[HeaderKey.String("durability")] == HeaderValue.String("persisted")


def test_sdk_login_with_a_wrong_password_is_refused(node: NodeProcess) -> None:
    with pytest.raises(RuntimeError):
        run(connect(node, password="not-the-password"), timeout_s=10)


def test_sdk_creates_stream_and_topic_and_reads_them_back(node: NodeProcess) -> None:
    async def scenario() -> tuple[Any, Any, list[Any], list[Any]]:
        client = await connect(node)
        await client.create_stream("catalog")
        await client.create_topic("catalog", "events", 3)
        stream = await client.get_stream("catalog")
        topic = await client.get_topic("catalog", "events")
        streams = await client.get_streams()
        topics = await client.get_topics("catalog")
        return stream, topic, streams, topics

    stream, topic, streams, topics = run(scenario())
    assert stream.name == "catalog" and stream.topics_count == 1
    assert topic.name == "events" and topic.partitions_count == 3
    assert [p.id for p in topic.partitions] == [0, 1, 2]
    assert "catalog" in [s.name for s in streams]
    assert [t.name for t in topics] == ["events"]


def test_sdk_sends_with_each_partitioning_kind(node: NodeProcess) -> None:
    async def scenario() -> tuple[list[int], list[int], list[int], dict[int, list[bytes]]]:
        client = await connect(node)
        await client.create_stream("routing")
        await client.create_topic("routing", "t", 3)
        explicit = []
        for partition in (2, 0):
            reply = await client.send_messages(
                "routing", "t", Partitioning.partition_id(partition), [SendMessage(b"p")]
            )
            explicit += [c.partition_id for c in reply.confirmations]
        balanced = []
        for i in range(3):
            reply = await client.send_messages(
                "routing", "t", Partitioning.balanced(), [SendMessage(f"b{i}".encode())]
            )
            balanced += [c.partition_id for c in reply.confirmations]
        keyed = []
        for _ in range(2):
            reply = await client.send_messages(
                "routing", "t", Partitioning.messages_key("user-42"), [SendMessage(b"k")]
            )
            keyed += [c.partition_id for c in reply.confirmations]
        seen = {}
        for partition in range(3):
            polled = await client.poll_messages(
                "routing",
                "t",
                consumer=Consumer.Single(1),
                polling_strategy=PollingStrategy.First(),
                count=100,
                auto_commit=False,
                partition_id=partition,
            )
            seen[partition] = payloads(polled)
        return explicit, balanced, keyed, seen

    explicit, balanced, keyed, seen = run(scenario())
    assert explicit == [2, 0]
    assert sorted(balanced) == [0, 1, 2]  # round-robin over the three partitions
    key_partition = xxhash.xxh32_intdigest(b"user-42", seed=0) % 3
    assert keyed == [key_partition, key_partition]
    assert sum(len(v) for v in seen.values()) == 7
    assert seen[key_partition].count(b"k") == 2


def test_sdk_polls_with_each_polling_strategy(node: NodeProcess) -> None:
    async def scenario() -> dict[str, list[int]]:
        client = await connect(node)
        await client.create_stream("polling")
        await client.create_topic("polling", "t", 1)
        for batch in range(5):
            messages = [SendMessage(f"m{batch}-{i}".encode()) for i in range(4)]
            await client.send_messages("polling", "t", 0, messages)
            if batch == 2:
                middle_us = int(time.time() * 1_000_000)
                await asyncio.sleep(0.01)

        async def offsets(strategy: Any, count: int, *, auto_commit: bool = False) -> list[int]:
            polled = await client.poll_messages(
                "polling",
                "t",
                consumer=Consumer.Single("reader"),
                polling_strategy=strategy,
                count=count,
                auto_commit=auto_commit,
                partition_id=0,
            )
            return [m.offset() for m in polled]

        found = {
            "offset": await offsets(PollingStrategy.Offset(5), 3),
            "timestamp": await offsets(PollingStrategy.Timestamp(middle_us), 100),
            "first": await offsets(PollingStrategy.First(), 2),
            "last": await offsets(PollingStrategy.Last(), 3),
            "next_1": await offsets(PollingStrategy.Next(), 6, auto_commit=True),
        }
        # Auto-commit stores the offset asynchronously: wait until the next poll moves on.
        for _ in range(50):
            following = await offsets(PollingStrategy.Next(), 6)
            if following and following[0] == 6:
                break
            await asyncio.sleep(0.05)
        found["next_2"] = following
        return found

    found = run(scenario())
    assert found["offset"] == [5, 6, 7]
    assert found["timestamp"] == list(range(12, 20))  # the batches sent after the mark
    assert found["first"] == [0, 1]
    assert found["last"] == [17, 18, 19]
    assert found["next_1"] == [0, 1, 2, 3, 4, 5]
    assert found["next_2"] == [6, 7, 8, 9, 10, 11]


def test_sdk_consumer_group_members_share_the_partitions(node: NodeProcess) -> None:
    async def scenario() -> tuple[list[bytes], int]:
        producer = await connect(node)
        await producer.create_stream("grouped")
        await producer.create_topic("grouped", "t", 3)
        sent = []
        for i in range(9):
            payload = f"g{i}".encode()
            sent.append(payload)
            await producer.send_messages("grouped", "t", i % 3, [SendMessage(payload)])
        got: list[bytes] = []
        members = []
        for _ in range(2):
            client = await connect(node)
            consumer = await client.consumer_group(
                "workers",
                "grouped",
                "t",
                auto_commit=AutoCommit.Disabled(),
                polling_strategy=PollingStrategy.Next(),
                poll_interval=timedelta(milliseconds=20),
                batch_length=10,
            )
            members.append(consumer)

        async def drain(consumer: Any) -> None:
            async for message in consumer.iter_messages():
                got.append(bytes(message.payload()))
                if len(got) >= len(sent):
                    return

        tasks = [asyncio.ensure_future(drain(c)) for c in members]
        await asyncio.wait(tasks, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        group = await producer.get_consumer_group("grouped", "t", "workers")
        return got, group.members_count

    got, members = run(scenario())
    assert sorted(got) == sorted(f"g{i}".encode() for i in range(9))
    assert members == 2


def test_sdk_reads_server_stats(node: NodeProcess) -> None:
    async def scenario() -> Any:
        client = await connect(node)
        await client.create_stream("counted")
        await client.create_topic("counted", "t", 2, durability=Durability.PERSISTED)
        await client.send_messages("counted", "t", 1, [SendMessage(b"x"), SendMessage(b"y")])
        return await client.get_stats()

    stats = run(scenario())
    assert stats.streams_count >= 1 and stats.partitions_count >= 2
    assert stats.messages_count >= 2
    assert stats.clients_count >= 1
    assert stats.iggy_server_version.startswith("viewstream")


def test_sdk_purge_topic_hides_old_messages_and_offsets_continue(node: NodeProcess) -> None:
    async def scenario() -> tuple[list[bytes], list[int], Any]:
        client = await connect(node)
        await client.create_stream("purged")
        await client.create_topic("purged", "t", 1)
        await client.send_messages("purged", "t", 0, [SendMessage(b"old-1"), SendMessage(b"old-2")])
        await client.purge_topic("purged", "t")

        async def first() -> list[Any]:
            polled: list[Any] = await client.poll_messages(
                "purged",
                "t",
                consumer=Consumer.Single(1),
                polling_strategy=PollingStrategy.First(),
                count=10,
                auto_commit=False,
                partition_id=0,
            )
            return polled

        # Answered once the partition applied it, as Iggy answers once the topic is empty.
        purged = await client.get_topic("purged", "t")
        assert await first() == []
        await client.send_messages("purged", "t", 0, [SendMessage(b"new")])
        after = await first()
        return payloads(after), [m.offset() for m in after], purged

    found, offsets, purged = run(scenario())
    assert found == [b"new"]
    assert offsets == [2]  # offsets stay dense across a purge
    # As Iggy's get_topic after a purge: nothing counted, no bytes.
    assert (purged.messages_count, purged.size) == (0, 0)
