"""Client-side admin commands of the ``viewstream`` CLI, in the style of the ``iggy`` CLI.

Purpose: ``stream create|list|delete``, ``topic create|list|delete``, ``send``, ``poll``,
``cluster status`` and ``stats``, each one login and a few requests through
:class:`broker.runtime.client.WireClient`. Functions return the text to print, so the
CLI stays thin and tests can call them directly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Final

from broker.runtime.client import WireClient
from broker.runtime.node import RUNTIME_STATS_CODE
from sdk import wire
from sdk.wire import CommandCode

ADDRESS_DEFAULT: Final = "127.0.0.1:8090"


@dataclass(frozen=True, slots=True)
class Target:
    """Where and as whom the admin commands connect."""

    address: str
    username: str
    password: str


def identifier(text: str) -> wire.Identifier:
    """A numeric id when ``text`` is all digits, else a name (as the ``iggy`` CLI reads it)."""
    return wire.Identifier(int(text)) if text.isdigit() else wire.Identifier(text)


def _connect(target: Target) -> WireClient:
    client = WireClient(target.address)
    try:
        client.login(target.username, target.password)
    except BaseException:
        client.close()
        raise
    return client


def stream_create(target: Target, name: str) -> str:
    with _connect(target) as client:
        reply = client.call(CommandCode.CREATE_STREAM, wire.CreateStream(name))
    assert isinstance(reply, wire.StreamDetails)
    return f"created stream {reply.stream.name!r} (id {reply.stream.id})"


def stream_list(target: Target) -> str:
    with _connect(target) as client:
        reply = client.call(CommandCode.GET_STREAMS, wire.Empty())
    assert isinstance(reply, wire.Streams)
    lines = [f"{'id':>6}  {'topics':>6}  {'messages':>10}  {'bytes':>12}  name"]
    lines += [
        f"{s.id:>6}  {s.topics_count:>6}  {s.messages_count:>10}  {s.size_bytes:>12}  {s.name}"
        for s in reply.streams
    ]
    return "\n".join(lines)


def stream_delete(target: Target, stream: str) -> str:
    with _connect(target) as client:
        client.call(CommandCode.DELETE_STREAM, wire.StreamRef(identifier(stream)))
    return f"deleted stream {stream!r}"


def topic_create(target: Target, stream: str, name: str, partitions: int, durability: str) -> str:
    options = (wire.OptionEntry.of("durability", durability, wire.HeaderKind.STRING),)
    with _connect(target) as client:
        reply = client.call(
            CommandCode.CREATE_TOPIC,
            wire.CreateTopic(identifier(stream), partitions, name, options),
        )
    assert isinstance(reply, wire.TopicDetails)
    return (
        f"created topic {reply.topic.name!r} (id {reply.topic.id}) with "
        f"{reply.topic.partitions_count} partition(s), durability {durability}"
    )


def topic_list(target: Target, stream: str) -> str:
    with _connect(target) as client:
        reply = client.call(CommandCode.GET_TOPICS, wire.StreamRef(identifier(stream)))
    if reply is None:
        return f"no stream {stream!r}"
    assert isinstance(reply, wire.Topics)
    lines = [f"{'id':>6}  {'partitions':>10}  {'messages':>10}  {'bytes':>12}  name"]
    lines += [
        f"{t.id:>6}  {t.partitions_count:>10}  {t.messages_count:>10}  {t.size_bytes:>12}  {t.name}"
        for t in reply.topics
    ]
    return "\n".join(lines)


def topic_delete(target: Target, stream: str, topic: str) -> str:
    with _connect(target) as client:
        client.call(CommandCode.DELETE_TOPIC, wire.TopicRef(identifier(stream), identifier(topic)))
    return f"deleted topic {topic!r} of stream {stream!r}"


def send(
    target: Target,
    stream: str,
    topic: str,
    messages: list[str],
    *,
    partition: int | None = None,
    key: str | None = None,
) -> str:
    partitioning: wire.Partitioning
    if partition is not None:
        partitioning = wire.PartitionId(partition)
    elif key is not None:
        partitioning = wire.MessagesKey(key.encode("utf-8"))
    else:
        partitioning = wire.Balanced()
    outgoing = [
        wire.OutgoingMessage(int.from_bytes(os.urandom(16), "little"), text.encode("utf-8"))
        for text in messages
    ]
    body = wire.build_send_messages(identifier(stream), identifier(topic), partitioning, outgoing)
    with _connect(target) as client:
        reply = client.call(CommandCode.SEND_MESSAGES, wire.SendMessages.decode(body))
    if not isinstance(reply, wire.SendMessagesReply):
        return f"sent {len(messages)} message(s)"
    where = ", ".join(
        f"partition {c.partition_id} from offset {c.base_offset}" for c in reply.confirmations
    )
    return f"sent {len(messages)} message(s): {where}"


def poll(
    target: Target,
    stream: str,
    topic: str,
    *,
    partition: int,
    strategy: wire.PollingStrategy,
    count: int,
    consumer: str,
    auto_commit: bool,
) -> str:
    request = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, identifier(consumer)),
        identifier(stream),
        identifier(topic),
        partition,
        strategy,
        count,
        auto_commit,
    )
    with _connect(target) as client:
        reply = client.call(CommandCode.POLL_MESSAGES, request)
    assert isinstance(reply, wire.PollMessagesReply)
    lines = []
    for record in reply.records:
        _, messages = wire.read_batch(record)
        for message in messages:
            payload = bytes(message.payload).decode("utf-8", errors="backslashreplace")
            lines.append(f"{message.offset:>10}  {message.timestamp}  {payload}")
    lines.append(
        f"({reply.messages_count} message(s) from partition {reply.partition_id}; "
        f"newest offset {reply.current_offset})"
    )
    return "\n".join(lines)


def cluster_status(target: Target) -> str:
    with _connect(target) as client:
        reply = client.call(CommandCode.GET_CLUSTER_METADATA, wire.Empty())
    assert isinstance(reply, wire.ClusterMetadata)
    lines = [f"cluster {reply.name!r}, {len(reply.nodes)} node(s):"]
    for node in reply.nodes:
        address = f"{node.ip}:{node.tcp_port}"
        try:
            with WireClient(address, timeout_s=2) as probe:
                probe.ping()
            reachable = "reachable"
        except OSError:
            reachable = "UNREACHABLE"
        lines.append(f"  {node.name:<8} {address:<22} {node.role.name.lower():<9} {reachable}")
    return "\n".join(lines)


def stats(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        reply = client.call(CommandCode.GET_STATS, wire.Empty())
        frame = client.call_raw(RUNTIME_STATS_CODE)
    assert isinstance(reply, wire.Stats)
    runtime = json.loads(bytes(frame.body)) if frame.reply_header().status == 0 else {}
    if as_json:
        server = {
            name: getattr(reply, name)
            for name in reply.__dataclass_fields__
            if name != "cache_metrics"
        }
        return json.dumps({"server": server, "runtime": runtime}, indent=2)
    lines = [
        f"server {reply.iggy_server_version} pid {reply.process_id} on {reply.hostname}, "
        f"up {reply.run_time / 1e6:.1f} s",
        f"streams {reply.streams_count}  topics {reply.topics_count}  "
        f"partitions {reply.partitions_count}  segments {reply.segments_count}",
        f"messages {reply.messages_count}  bytes {reply.messages_size_bytes}  "
        f"clients {reply.clients_count}  consumer groups {reply.consumer_groups_count}",
    ]
    node = runtime.get("node", {})
    if "disk_used_bytes" in node:
        lines.append(
            f"disk: data directory {node['disk_used_bytes']} bytes, "
            f"{node['disk_free_bytes']} bytes free"
            + ("  FULL: new messages refused (4010)" if node["disk_full"] else "")
        )
    if "sync_scope" in node:
        flushes = node["flushes"]
        per_flush = node["groups_flushed"] / flushes if flushes else 0.0
        lines.append(
            f"syncs: scope {node['sync_scope']}, {flushes} shared flushes covering "
            f"{node['groups_flushed']} partition syncs ({per_flush:.1f} per flush)"
        )
    for name, group in runtime.get("groups", {}).items():
        lines.append(
            f"{name}: prepares {group['prepares']}  commits {group['commits']}  "
            f"commit rounds/s {group['commit_rounds_per_s']:.1f}  "
            f"msgs/prepare {group['messages_per_prepare']:.1f}  "
            f"bytes/prepare {group['bytes_per_prepare']:.0f}  syncs {group['syncs']}  "
            f"msgs/sync {group['messages_per_sync']:.1f}  "
            f"bytes to replicas {group['bytes_to_replicas']}"
        )
    return "\n".join(lines)
