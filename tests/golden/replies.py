"""Hand-built server replies for the recorder, written straight from docs/protocol.md.

They are deliberately independent of `sdk.wire`: a reply built here that the official SDK
accepts (and decodes to the values we put in) confirms the documented layout, and the
golden test then checks that our encoder produces the very same bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

from tests.golden.layouts import (
    BATCH_HEADER_SIZE,
    COMMAND_EVICTION,
    COMMAND_REPLY,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
)


def u8(value: int) -> bytes:
    return struct.pack("<B", value)


def u16(value: int) -> bytes:
    return struct.pack("<H", value)


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def f32(value: float) -> bytes:
    return struct.pack("<f", value)


def name(text: str) -> bytes:
    """`[len u8][utf-8]`."""
    raw = text.encode()
    assert 1 <= len(raw) <= 255
    return u8(len(raw)) + raw


def long_string(text: str) -> bytes:
    """`[len u32][utf-8]`, the reply-side string."""
    raw = text.encode()
    return u32(len(raw)) + raw


def key_values(entries: list[tuple[int, bytes, int, bytes]]) -> bytes:
    """A flat `[kind u8][len u32][data]` block of alternating keys and values."""
    out = bytearray()
    for key_kind, key, value_kind, value in entries:
        out += u8(key_kind) + u32(len(key)) + key + u8(value_kind) + u32(len(value)) + value
    return bytes(out)


def string_options(options: dict[str, str]) -> bytes:
    return key_values([(2, k.encode(), 2, v.encode()) for k, v in options.items()])


def prefixed_options(block: bytes) -> bytes:
    """Reply-side options: `[len u32][block]`."""
    return u32(len(block)) + block


# Frames.


def reply_frame(
    request: bytes,
    body: bytes,
    *,
    op: int = 0,
    commit: int = 0,
    status: int = 0,
) -> bytes:
    """A reply to `request`: echoes request_checksum, client, timestamp, request, operation."""
    header = bytearray(HEADER_SIZE)
    struct.pack_into("<I", header, 48, HEADER_SIZE + len(body))
    header[60] = COMMAND_REPLY
    header[128:144] = request[144:160]  # request_checksum
    header[160:176] = request[128:144]  # client
    struct.pack_into("<Q", header, 176, op)
    struct.pack_into("<Q", header, 184, commit)
    header[192:200] = request[160:168]  # timestamp
    header[200:208] = request[168:176]  # request
    header[208] = request[176]  # operation
    struct.pack_into("<I", header, 216, status)
    return bytes(header) + body


def eviction_frame(client: bytes, reason: int, version: int, version_min: int) -> bytes:
    header = bytearray(HEADER_SIZE)
    struct.pack_into("<I", header, 48, HEADER_SIZE)
    header[60] = COMMAND_EVICTION
    header[128:144] = client
    struct.pack_into("<I", header, 144, version)
    struct.pack_into("<I", header, 148, version_min)
    header[255] = reason
    return bytes(header)


def result_ok(payload: bytes) -> bytes:
    return u32(0) + payload


def result_error(code: int) -> bytes:
    return u32(1) + u32(0) + u32(code)


# Typed payloads.


def login_reply(user_id: int, session: int, protocol_version: int, server_version: str) -> bytes:
    return u32(user_id) + u64(session) + u32(protocol_version) + name(server_version)


@dataclass(frozen=True)
class Node:
    name: str
    ip: str
    tcp_port: int
    quic_port: int
    http_port: int
    websocket_port: int
    role: int
    status: int


def node_record(node: Node) -> bytes:
    out = long_string(node.name) + long_string(node.ip)
    out += u16(node.tcp_port) + u16(node.quic_port) + u16(node.http_port)
    return out + u16(node.websocket_port) + u8(node.role) + u8(node.status)


def cluster_metadata(cluster_name: str, nodes: list[Node]) -> bytes:
    return long_string(cluster_name) + u32(len(nodes)) + b"".join(node_record(n) for n in nodes)


@dataclass(frozen=True)
class Attachment:
    """The session a route names: `[client_id u128][session u64][metadata_op u64]`."""

    client_hex: str
    session: int
    metadata_op: int


def attachment(a: Attachment) -> bytes:
    return int(a.client_hex, 16).to_bytes(16, "little") + u64(a.session) + u64(a.metadata_op)


def poll_route(a: Attachment, primary: Node) -> bytes:
    """POLL_ROUTING (103) / CONSUMER_OFFSET_ROUTING (123) reply: attachment, then a node."""
    return attachment(a) + node_record(primary)


# Users (docs/protocol.md section 5.14).


@dataclass(frozen=True)
class TopicPerms:
    topic_id: int
    flags: tuple[bool, bool, bool, bool]  # manage_topic, read_topic, poll, send


@dataclass(frozen=True)
class StreamPerms:
    stream_id: int
    # manage_stream, read_stream, manage_topics, read_topics, poll, send
    flags: tuple[bool, bool, bool, bool, bool, bool]
    topics: list[TopicPerms] = field(default_factory=list)


@dataclass(frozen=True)
class Perms:
    # manage_servers, read_servers, manage_users, read_users, manage_streams,
    # read_streams, manage_topics, read_topics, poll_messages, send_messages
    global_flags: tuple[bool, ...]
    streams: list[StreamPerms] = field(default_factory=list)


def _bools(flags: tuple[bool, ...]) -> bytes:
    return bytes(1 if f else 0 for f in flags)


def permissions(p: Perms) -> bytes:
    """Ten flags, then the linked lists of streams and topics (`[has_next u8]` links)."""
    out = _bools(p.global_flags) + u8(1 if p.streams else 0)
    for i, s in enumerate(p.streams):
        out += u32(s.stream_id) + _bools(s.flags) + u8(1 if s.topics else 0)
        for j, t in enumerate(s.topics):
            out += u32(t.topic_id) + _bools(t.flags) + u8(1 if j + 1 < len(s.topics) else 0)
        out += u8(1 if i + 1 < len(p.streams) else 0)
    return out


@dataclass(frozen=True)
class User:
    id: int
    created_at: int
    status: int
    username: str
    permissions: Perms | None = None


def user_record(u: User) -> bytes:
    return u32(u.id) + u64(u.created_at) + u8(u.status) + name(u.username) + u32(0)


def user_details(u: User) -> bytes:
    if u.permissions is None:
        return user_record(u) + u32(0)
    block = permissions(u.permissions)
    return user_record(u) + u8(1) + u32(len(block)) + block


def users_list(users: list[User]) -> bytes:
    return b"".join(user_record(u) for u in users)


@dataclass(frozen=True)
class CacheMetric:
    stream_id: int
    topic_id: int
    partition_id: int
    hits: int
    misses: int
    hit_ratio: float


@dataclass(frozen=True)
class Stats:
    process_id: int
    cpu_usage: float
    total_cpu_usage: float
    memory_usage: int
    total_memory: int
    available_memory: int
    run_time: int
    start_time: int
    read_bytes: int
    written_bytes: int
    messages_size_bytes: int
    streams_count: int
    topics_count: int
    partitions_count: int
    segments_count: int
    messages_count: int
    clients_count: int
    consumer_groups_count: int
    hostname: str
    os_name: str
    os_version: str
    kernel_version: str
    iggy_server_version: str
    iggy_server_semver: int
    cache_metrics: list[CacheMetric]
    threads_count: int
    free_disk_space: int
    total_disk_space: int


def stats(s: Stats) -> bytes:
    out = u32(s.process_id) + f32(s.cpu_usage) + f32(s.total_cpu_usage)
    for value in (
        s.memory_usage,
        s.total_memory,
        s.available_memory,
        s.run_time,
        s.start_time,
        s.read_bytes,
        s.written_bytes,
        s.messages_size_bytes,
    ):
        out += u64(value)
    out += u32(s.streams_count) + u32(s.topics_count) + u32(s.partitions_count)
    out += u32(s.segments_count) + u64(s.messages_count)
    out += u32(s.clients_count) + u32(s.consumer_groups_count)
    for text in (s.hostname, s.os_name, s.os_version, s.kernel_version, s.iggy_server_version):
        out += long_string(text)
    out += u32(s.iggy_server_semver) + u32(len(s.cache_metrics))
    for m in s.cache_metrics:
        out += u32(m.stream_id) + u32(m.topic_id) + u32(m.partition_id)
        out += u64(m.hits) + u64(m.misses) + f32(m.hit_ratio)
    out += u32(s.threads_count) + u64(s.free_disk_space) + u64(s.total_disk_space)
    return out


def client_details(
    client_id: int,
    user_id: int,
    transport: int,
    address: str,
    groups: list[tuple[int, int, int]],
) -> bytes:
    out = u32(client_id) + u32(user_id) + u8(transport) + long_string(address) + u32(len(groups))
    for stream_id, topic_id, group_id in groups:
        out += u32(stream_id) + u32(topic_id) + u32(group_id)
    return out


@dataclass(frozen=True)
class Partition:
    id: int
    created_at: int
    segments_count: int
    current_offset: int
    size_bytes: int
    messages_count: int


@dataclass(frozen=True)
class Topic:
    id: int
    created_at: int
    message_expiry: int
    compression_algorithm: int
    max_topic_size: int
    size_bytes: int
    messages_count: int
    name: str
    options: bytes
    derived_options: bytes
    partitions: list[Partition] = field(default_factory=list)


@dataclass(frozen=True)
class Stream:
    id: int
    created_at: int
    size_bytes: int
    messages_count: int
    name: str
    options: bytes
    topics: list[Topic] = field(default_factory=list)


def partition_record(p: Partition) -> bytes:
    return (
        u32(p.id)
        + u64(p.created_at)
        + u32(p.segments_count)
        + u64(p.current_offset)
        + u64(p.size_bytes)
        + u64(p.messages_count)
    )


def topic_record(t: Topic) -> bytes:
    return (
        u32(t.id)
        + u64(t.created_at)
        + u32(len(t.partitions))
        + u64(t.message_expiry)
        + u8(t.compression_algorithm)
        + u64(t.max_topic_size)
        + u64(t.size_bytes)
        + u64(t.messages_count)
        + name(t.name)
        + prefixed_options(t.options)
        + prefixed_options(t.derived_options)
    )


def topic_details(t: Topic) -> bytes:
    return topic_record(t) + b"".join(partition_record(p) for p in t.partitions)


def topics_list(topics: list[Topic]) -> bytes:
    return u32(len(topics)) + b"".join(topic_record(t) for t in topics)


def stream_record(s: Stream) -> bytes:
    return (
        u32(s.id)
        + u64(s.created_at)
        + u32(len(s.topics))
        + u64(s.size_bytes)
        + u64(s.messages_count)
        + name(s.name)
        + prefixed_options(s.options)
    )


def stream_details(s: Stream) -> bytes:
    return stream_record(s) + b"".join(topic_record(t) for t in s.topics)


def streams_list(streams: list[Stream]) -> bytes:
    return b"".join(stream_record(s) for s in streams)


@dataclass(frozen=True)
class Member:
    id: int
    partitions: list[int]


@dataclass(frozen=True)
class Group:
    id: int
    partitions_count: int
    name: str
    members: list[Member] = field(default_factory=list)


def group_record(g: Group) -> bytes:
    return u32(g.id) + u32(g.partitions_count) + u32(len(g.members)) + name(g.name)


def group_details(g: Group) -> bytes:
    out = group_record(g)
    for m in g.members:
        out += u32(m.id) + u32(len(m.partitions)) + b"".join(u32(p) for p in m.partitions)
    return out


def groups_list(groups: list[Group]) -> bytes:
    return b"".join(group_record(g) for g in groups)


def sync_group(generation: int, partitions: list[int]) -> bytes:
    return u64(generation) + u32(len(partitions)) + b"".join(u32(p) for p in partitions)


def consumer_offset(partition_id: int, current_offset: int, stored_offset: int) -> bytes:
    return u32(partition_id) + u64(current_offset) + u64(stored_offset)


def send_confirmations(entries: list[tuple[int, int, int, int]]) -> bytes:
    out = u32(len(entries))
    for stream_id, topic_id, partition_id, base_offset in entries:
        out += u32(stream_id) + u32(topic_id) + u32(partition_id) + u64(base_offset)
    return out


@dataclass(frozen=True)
class Message:
    id: int
    payload: bytes
    user_headers: bytes
    timestamp_delta: int


@dataclass(frozen=True)
class Batch:
    partition_id: int
    base_offset: int
    base_timestamp: int
    origin_timestamp: int
    messages: list[Message]
    first_offset_delta: int = 0


def frame_checksum(frame_without_checksum: bytes) -> int:
    return xxhash.xxh3_64_intdigest(frame_without_checksum)


def batch_bytes(b: Batch) -> bytes:
    """A stamped batch record as the server stores and serves it."""
    frames: list[bytes] = []
    for index, m in enumerate(b.messages):
        tail = (
            m.id.to_bytes(16, "little")
            + u32(b.first_offset_delta + index)
            + u32(m.timestamp_delta)
            + u32(len(m.user_headers))
            + u32(len(m.payload))
            + u64(0)
            + m.payload
            + m.user_headers
        )
        frames.append(u64(frame_checksum(tail)) + tail)
    blob = b"".join(frames)
    batch_length = BATCH_HEADER_SIZE + len(blob)
    hasher = xxhash.xxh3_64()
    hasher.update(
        u64(b.partition_id)
        + u64(b.base_offset)
        + u64(b.base_timestamp)
        + u64(b.origin_timestamp)
        + u64(batch_length)
        + u32(len(b.messages))
    )
    for frame in frames:
        hasher.update(frame[:8])
    header = (
        u64(b.partition_id)
        + u64(b.base_offset)
        + u64(b.base_timestamp)
        + u64(b.origin_timestamp)
        + u64(batch_length)
        + u64(hasher.intdigest())
        + u32(len(b.messages))
    )
    header += bytes(BATCH_HEADER_SIZE - len(header))
    assert len(header) == BATCH_HEADER_SIZE
    assert all(len(f) >= FRAME_HEADER_SIZE for f in frames)
    return header + blob


def poll_reply(partition_id: int, current_offset: int, batches: list[Batch]) -> bytes:
    count = sum(len(b.messages) for b in batches)
    return (
        u32(partition_id)
        + u64(current_offset)
        + u32(count)
        + b"".join(batch_bytes(b) for b in batches)
    )
