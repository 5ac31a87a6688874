"""Client-side admin commands of the ``viewstream`` CLI, in the style of the ``iggy`` CLI.

Purpose: ``stream create|list|delete``, ``topic create|list|delete``, ``send``, ``poll``,
``cluster status`` and ``stats``, each a login and a few requests through the SDK's
blocking client (:class:`sdk.Client`). Functions return the text to print, so the CLI
stays thin and tests can call them directly.

Invariants:

1. A command talks to the node it was pointed at and to no other: the client is pinned
   to that address (``cluster_discovery`` off), so it reports what that node says. The
   node itself forwards what its group's primary must decide.
2. Every call is bounded by ``TIMEOUT_S`` (a probe of ``cluster status`` by
   ``PROBE_TIMEOUT_S``), retries included.
3. A failure is an :class:`sdk.errors.IggyError`; :func:`failure_text` words it as the
   CLI prints it, telling the server's refusals from failures to reach it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from sdk import wire
from sdk.blocking import Client
from sdk.connection_string import ClientConfig
from sdk.errors import (
    ClientClosed,
    ConnectionFailed,
    Disconnected,
    IggyError,
    InvalidConnectionString,
    RequestTimeout,
)
from sdk.types import ConsumerRef, Message

ADDRESS_DEFAULT: Final = "127.0.0.1:8090"
TIMEOUT_S: Final = 10.0
"""Bound on one command's call, retries included."""
PROBE_TIMEOUT_S: Final = 2.0
"""Bound on the ping of one node by ``cluster status``."""

_NOT_ANSWERED: Final = (
    ClientClosed,
    ConnectionFailed,
    Disconnected,
    InvalidConnectionString,
    RequestTimeout,
)
"""Failures to reach a node or to hear its answer, as opposed to its refusals."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where and as whom the admin commands connect."""

    address: str
    username: str
    password: str


@contextmanager
def _connect(target: Target) -> Iterator[Client]:
    config = ClientConfig.one_node(
        target.address, username=target.username, password=target.password, timeout_s=TIMEOUT_S
    )
    client = Client(config)
    try:
        client.login_user(target.username, target.password)
        yield client
    finally:
        client.close()


def failure_text(error: IggyError) -> str:
    """How the CLI words a failed command (after ``"<command>: "``).

    A node's refusal reads ``the server refused: server rejected the request: NAME=code``;
    an eviction and a failure to reach the node or hear it read as the error itself.
    """
    if error.eviction is not None or isinstance(error, _NOT_ANSWERED):
        return str(error)
    return f"the server refused: {wire.ServerRejected(error.code)}"


def _refused(error: IggyError) -> bool:
    return error.eviction is None and not isinstance(error, _NOT_ANSWERED)


def stream_create(target: Target, name: str) -> str:
    with _connect(target) as client:
        details = client.create_stream(name)
    return f"created stream {details.stream.name!r} (id {details.stream.id})"


def stream_list(target: Target) -> str:
    with _connect(target) as client:
        streams = client.get_streams()
    lines = [f"{'id':>6}  {'topics':>6}  {'messages':>10}  {'bytes':>12}  name"]
    lines += [
        f"{s.id:>6}  {s.topics_count:>6}  {s.messages_count:>10}  {s.size_bytes:>12}  {s.name}"
        for s in streams
    ]
    return "\n".join(lines)


def stream_delete(target: Target, stream: str) -> str:
    with _connect(target) as client:
        client.delete_stream(stream)
    return f"deleted stream {stream!r}"


def topic_create(target: Target, stream: str, name: str, partitions: int, durability: str) -> str:
    with _connect(target) as client:
        details = client.create_topic(stream, name, partitions, durability=durability)
    return (
        f"created topic {details.topic.name!r} (id {details.topic.id}) with "
        f"{details.topic.partitions_count} partition(s), durability {durability}"
    )


def topic_list(target: Target, stream: str) -> str:
    with _connect(target) as client:
        details = client.get_stream(stream)
    if details is None:
        return f"no stream {stream!r}"
    lines = [f"{'id':>6}  {'partitions':>10}  {'messages':>10}  {'bytes':>12}  name"]
    lines += [
        f"{t.id:>6}  {t.partitions_count:>10}  {t.messages_count:>10}  {t.size_bytes:>12}  {t.name}"
        for t in details.topics
    ]
    return "\n".join(lines)


def topic_delete(target: Target, stream: str, topic: str) -> str:
    with _connect(target) as client:
        client.delete_topic(stream, topic)
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
    outgoing = [Message(text.encode("utf-8")) for text in messages]
    with _connect(target) as client:
        confirmations = client.send_messages(stream, topic, outgoing, partitioning)
    if not confirmations:  # applied by an earlier attempt whose reply aged out
        return f"sent {len(messages)} message(s)"
    where = ", ".join(
        f"partition {c.partition_id} from offset {c.base_offset}" for c in confirmations
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
    with _connect(target) as client:
        polled = client.poll_messages(
            stream,
            topic,
            consumer=ConsumerRef.single(consumer),
            polling_strategy=strategy,
            count=count,
            auto_commit=auto_commit,
            partition_id=partition,
        )
    lines = []
    for message in polled.messages:
        payload = bytes(message.payload).decode("utf-8", errors="backslashreplace")
        lines.append(f"{message.offset:>10}  {message.timestamp}  {payload}")
    lines.append(
        f"({len(polled.messages)} message(s) from partition {polled.partition_id}; "
        f"newest offset {polled.current_offset})"
    )
    return "\n".join(lines)


def _reachable(address: str) -> bool:
    probe = Client(ClientConfig.one_node(address, timeout_s=PROBE_TIMEOUT_S))
    try:
        probe.ping()
    except IggyError as error:
        return _refused(error)  # a node that refuses a ping still answers
    finally:
        probe.close()
    return True


def cluster_status(target: Target) -> str:
    with _connect(target) as client:
        metadata = client.get_cluster_metadata()
    lines = [f"cluster {metadata.name!r}, {len(metadata.nodes)} node(s):"]
    for node in metadata.nodes:
        address = f"{node.ip}:{node.tcp_port}"
        reachable = "reachable" if _reachable(address) else "UNREACHABLE"
        lines.append(f"  {node.name:<8} {address:<22} {node.role.name.lower():<9} {reachable}")
    return "\n".join(lines)


def stats(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        reply = client.get_stats()
        try:
            runtime: dict[str, Any] = client.get_runtime_stats()
        except IggyError as error:
            if not _refused(error):
                raise
            runtime = {}  # a server without viewstream's counters
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
