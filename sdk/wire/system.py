"""Payloads of the session and system commands: login, get_me, cluster metadata, stats.

Purpose: typed request and reply payloads of LOGIN_REGISTER (40), GET_ME (20),
GET_CLUSTER_METADATA (12), GET_STATS (10) and GET_SNAPSHOT_FILE (11); PING (1),
LOGOUT_USER (39) and the argument-less reads use ``Empty``.

Invariants (as for every payload module):

1. ``X.decode(x.encode()) == x``, and a successful ``X.decode(body)`` re-encodes to
   ``body`` exactly: decoders are strict (no trailing bytes, counts equal to what
   follows, closed enums). The one exception is a signalling NaN in a binary32
   field of :class:`Stats`: CPython converts it to a quiet NaN on the way through
   ``float``, so it re-encodes with the quiet bit set.
2. Decoders raise :class:`ProtocolError` only; encoders raise ``ValueError`` for values
   the wire cannot carry.
3. A request type's ``read(reader)`` reads and validates every field from the front of
   a reader and leaves what follows unread; ``decode`` is ``read`` plus a refusal of
   trailing bytes. The server reads requests with ``read`` alone (Iggy's server ignores
   trailing bytes), so what it accepts is always a canonical encoding followed by bytes
   it never looked at.

Sources: apache/iggy ``core/binary_protocol/src/version.rs`` (``ClientVersionInfo``),
``requests/users/login_register.rs``, ``responses/users/login_register.rs``,
``responses/clients/*.rs`` (GET_ME decodes a client-details reply),
``responses/system/get_cluster_metadata.rs``, ``responses/system/get_stats.rs``,
``requests/system/get_snapshot.rs`` and ``core/common/src/types/snapshot/mod.rs``.
The login body layout is confirmed by a frame captured from the official 0.9.0 SDK.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, Self

from sdk.wire._buffer import Buffer, Reader, Writer, read_whole
from sdk.wire._payload import check_count, closed_enum, read_str32, write_str32
from sdk.wire.codes import PROTOCOL_VERSION, IggyErrorCode
from sdk.wire.errors import ProtocolError
from sdk.wire.primitives import decode_name, encode_name

__all__ = [
    "CLIENT_NO_USER",
    "CacheMetric",
    "ClientConsumerGroup",
    "ClientInfo",
    "ClientInfoDetails",
    "ClientRef",
    "Clients",
    "ClusterMetadata",
    "ClusterNode",
    "ClusterNodeRole",
    "ClusterNodeStatus",
    "ConsumerSessionAttachment",
    "DescribeOptions",
    "OptionDescriptor",
    "OptionsCatalog",
    "OptionsScope",
    "GetSnapshot",
    "SnapshotArchive",
    "SnapshotCompression",
    "SnapshotSection",
    "LoginRegister",
    "LoginRegisterReply",
    "PollRoute",
    "Stats",
]


# --- login -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginRegister:
    """LOGIN_REGISTER (40) request: client version prefix, then the credentials.

    ``[protocol_version u32][sdk_name name][sdk_version name]`` then
    ``[username name][password_len u8][password][context_len u32][context]``.
    """

    username: str
    password: str = field(repr=False)
    sdk_name: str = "viewstream"
    sdk_version: str = "0.1.0"
    protocol_version: int = PROTOCOL_VERSION
    context: str = ""

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        writer.u32(self.protocol_version)
        encode_name(writer, self.sdk_name)
        encode_name(writer, self.sdk_version)
        encode_name(writer, self.username)
        password = self.password.encode("utf-8")
        if len(password) > 255:
            raise ValueError("password longer than 255 bytes")
        writer.u8(len(password))
        writer.raw(password)
        context = self.context.encode("utf-8")
        writer.u32(len(context))
        writer.raw(context)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request's fields; what follows the context is left unread."""
        protocol_version = reader.u32()
        sdk_name = decode_name(reader)
        sdk_version = decode_name(reader)
        username = decode_name(reader)
        password = reader.utf8(reader.u8())
        context = reader.utf8(reader.u32())
        return cls(username, password, sdk_name, sdk_version, protocol_version, context)

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "login register")


@dataclass(frozen=True, slots=True)
class LoginRegisterReply:
    """LOGIN_REGISTER reply payload (behind a result section):
    ``[user_id u32][session u64][server_protocol_version u32][server_version name]``."""

    user_id: int
    session: int
    server_protocol_version: int
    server_version: str

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(self.user_id)
        writer.u64(self.session)
        writer.u32(self.server_protocol_version)
        encode_name(writer, self.server_version)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        value = cls(reader.u32(), reader.u64(), reader.u32(), decode_name(reader))
        reader.finish("login register reply")
        return value


# --- system ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientConsumerGroup:
    """A consumer group a client has joined: ``[stream u32][topic u32][group u32]``."""

    stream_id: int
    topic_id: int
    group_id: int


@dataclass(frozen=True, slots=True)
class ClientInfoDetails:
    """GET_ME (20) reply: ``[client_id u32][user_id u32][transport u8]
    [address_len u32][address][groups_count u32]`` then the groups, 12 bytes each."""

    client_id: int
    user_id: int
    transport: int
    address: str
    consumer_groups: tuple[ClientConsumerGroup, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(self.client_id)
        writer.u32(self.user_id)
        writer.u8(self.transport)
        write_str32(writer, self.address)
        writer.u32(len(self.consumer_groups))
        for group in self.consumer_groups:
            writer.u32(group.stream_id)
            writer.u32(group.topic_id)
            writer.u32(group.group_id)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        client_id = reader.u32()
        user_id = reader.u32()
        transport = reader.u8()
        address = read_str32(reader)
        count = reader.u32()
        check_count(count, reader, 12, "client consumer groups")
        groups = tuple(
            ClientConsumerGroup(reader.u32(), reader.u32(), reader.u32()) for _ in range(count)
        )
        reader.finish("client info")
        return cls(client_id, user_id, transport, address, groups)


CLIENT_NO_USER: Final = 0xFFFF_FFFF
"""The ``user_id`` Iggy reports for a client that has not logged in."""


@dataclass(frozen=True, slots=True)
class ClientRef:
    """GET_CLIENT (21) request: ``[client_id u32]``, the number GET_ME and GET_CLIENTS
    report for a client."""

    client_id: int

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        writer.u32(self.client_id)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the client id; what follows is left unread."""
        return cls(reader.u32())

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "client reference")


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """One client of GET_CLIENTS (22): ``[client_id u32][user_id u32][transport u8]
    [address_len u32][address][consumer_groups_count u32]``, the groups left out.
    ``user_id`` is ``CLIENT_NO_USER`` for a connection that has not logged in."""

    client_id: int
    user_id: int
    transport: int
    address: str
    consumer_groups_count: int

    def write(self, writer: Writer) -> None:
        writer.u32(self.client_id)
        writer.u32(self.user_id)
        writer.u8(self.transport)
        write_str32(writer, self.address)
        writer.u32(self.consumer_groups_count)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        return cls(reader.u32(), reader.u32(), reader.u8(), read_str32(reader), reader.u32())


@dataclass(frozen=True, slots=True)
class Clients:
    """GET_CLIENTS (22) reply: the node's clients back to back, no count before them."""

    clients: tuple[ClientInfo, ...]

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        for client in self.clients:
            client.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        clients = []
        while reader.remaining:
            clients.append(ClientInfo.read(reader))
        return cls(tuple(clients))


class OptionsScope(enum.IntEnum):
    """The resource whose option catalog DESCRIBE_OPTIONS asks for."""

    TOPIC = 1
    STREAM = 2
    USER = 3


@dataclass(frozen=True, slots=True)
class DescribeOptions:
    """DESCRIBE_OPTIONS (13) request: ``[scope u8]`` (``OptionsScope``: 1 topic, 2 stream,
    3 user). Kept as sent: a server answers an unknown scope with ``INVALID_COMMAND`` and
    keeps the connection, as Iggy does."""

    scope: int

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        writer.u8(self.scope)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the scope; what follows is left unread."""
        return cls(reader.u8())

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "describe options")


@dataclass(frozen=True, slots=True)
class OptionDescriptor:
    """One catalog entry: ``[key name][kind u8][default_len u32][default]
    [description_len u32][description]``. ``default_value`` is the default in ``kind``'s
    encoding, empty when the key has none."""

    key: str
    kind: int
    default_value: bytes
    description: str

    def write(self, writer: Writer) -> None:
        encode_name(writer, self.key)
        writer.u8(self.kind)
        writer.u32(len(self.default_value))
        writer.raw(self.default_value)
        write_str32(writer, self.description)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        key = decode_name(reader)
        kind = reader.u8()
        default = bytes(reader.take(reader.u32()))
        return cls(key, kind, default, read_str32(reader))


@dataclass(frozen=True, slots=True)
class OptionsCatalog:
    """DESCRIBE_OPTIONS (13) reply: ``[count u32]`` then the entries."""

    entries: tuple[OptionDescriptor, ...]

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(len(self.entries))
        for entry in self.entries:
            entry.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        count = reader.u32()
        check_count(count, reader, 11, "option descriptors")
        entries = tuple(OptionDescriptor.read(reader) for _ in range(count))
        reader.finish("options catalog")
        return cls(entries)


class SnapshotCompression(enum.IntEnum):
    """How GET_SNAPSHOT_FILE's archive compresses its files (Iggy's codes)."""

    STORED = 1
    DEFLATED = 2
    BZIP2 = 3
    ZSTD = 4
    LZMA = 5
    XZ = 6


class SnapshotSection(enum.IntEnum):
    """What GET_SNAPSHOT_FILE asks for (Iggy's ``SystemSnapshotType`` codes); ``ALL`` stands
    alone and means every section but ``TEST``."""

    FILESYSTEM_OVERVIEW = 1
    PROCESS_LIST = 2
    RESOURCE_USAGE = 3
    TEST = 4
    SERVER_LOGS = 5
    SERVER_CONFIG = 6
    ALL = 100


@dataclass(frozen=True, slots=True)
class GetSnapshot:
    """GET_SNAPSHOT_FILE (11) request: ``[compression u8][count u8][section u8]*``.

    Codes are kept as sent (``SnapshotCompression``, ``SnapshotSection``): a server judges
    them, as Iggy's answers an unknown one with ``INVALID_COMMAND``. A body too short for
    its count is ``INVALID_COMMAND`` too, the code Iggy's server gives it."""

    compression: int
    sections: tuple[int, ...]

    def encode(self) -> bytes:
        """The request body."""
        if len(self.sections) > 0xFF:
            raise ValueError(f"{len(self.sections)} snapshot sections: at most 255")
        writer = Writer()
        writer.u8(self.compression)
        writer.u8(len(self.sections))
        for section in self.sections:
            writer.u8(section)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the codes; what follows is left unread."""
        try:
            compression = reader.u8()
            count = reader.u8()
            sections = tuple(reader.take(count))
        except ProtocolError as error:
            raise ProtocolError(
                f"snapshot request: {error.reason}", IggyErrorCode.INVALID_COMMAND
            ) from None
        return cls(compression, sections)

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "snapshot request")


@dataclass(frozen=True, slots=True)
class SnapshotArchive:
    """GET_SNAPSHOT_FILE (11) reply: the zip archive, the whole body, unframed."""

    data: bytes

    def encode(self) -> bytes:
        """The reply payload."""
        return self.data

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Take the whole body."""
        return cls(bytes(body))


class ClusterNodeRole(enum.IntEnum):
    """A node's role in the metadata plane."""

    LEADER = 0
    FOLLOWER = 1


class ClusterNodeStatus(enum.IntEnum):
    """A node's health as the answering node sees it."""

    HEALTHY = 0
    STARTING = 1
    STOPPING = 2
    UNREACHABLE = 3
    MAINTENANCE = 4
    UNKNOWN = 5


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One node of GET_CLUSTER_METADATA: ``[name_len u32][name][ip_len u32][ip]
    [tcp u16][quic u16][http u16][websocket u16][role u8][status u8]``."""

    name: str
    ip: str
    tcp_port: int
    quic_port: int
    http_port: int
    websocket_port: int
    role: ClusterNodeRole
    status: ClusterNodeStatus

    def write(self, writer: Writer) -> None:
        """Append this node."""
        write_str32(writer, self.name)
        write_str32(writer, self.ip)
        writer.u16(self.tcp_port)
        writer.u16(self.quic_port)
        writer.u16(self.http_port)
        writer.u16(self.websocket_port)
        writer.u8(self.role)
        writer.u8(self.status)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read one node."""
        name = read_str32(reader)
        ip = read_str32(reader)
        ports = (reader.u16(), reader.u16(), reader.u16(), reader.u16())
        role = closed_enum(ClusterNodeRole, reader.u8(), "node role")
        status = closed_enum(ClusterNodeStatus, reader.u8(), "node status")
        return cls(name, ip, *ports, role, status)


_CLUSTER_NODE_MIN_BYTES: Final = 18


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """GET_CLUSTER_METADATA (12) reply: ``[name_len u32][name][nodes_count u32][node]*``."""

    name: str
    nodes: tuple[ClusterNode, ...]

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        write_str32(writer, self.name)
        writer.u32(len(self.nodes))
        for node in self.nodes:
            node.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        name = read_str32(reader)
        count = reader.u32()
        check_count(count, reader, _CLUSTER_NODE_MIN_BYTES, "cluster nodes")
        nodes = tuple(ClusterNode.read(reader) for _ in range(count))
        reader.finish("cluster metadata")
        return cls(name, nodes)


# --- routing of auto-commit polls and offset writes in a cluster ---------------------


@dataclass(frozen=True, slots=True)
class ConsumerSessionAttachment:
    """ATTACH_CONSUMER_SESSION (14) request, 32 bytes: ``[client_id u128][session u64]
    [metadata_op u64]``.

    It names the session a client holds on the node it first logged in to (its
    coordinator), so that a second connection, logged in as the same user on a
    partition's primary, may act for that session (its consumer-group membership).
    ``metadata_op`` is the coordinator's applied metadata op when it answered the
    route: the primary waits until it has applied that much before judging the
    session. The SDK echoes the route's attachment verbatim.
    """

    client_id: int
    session: int
    metadata_op: int

    def write(self, writer: Writer) -> None:
        """Append the 32 bytes."""
        writer.u128(self.client_id)
        writer.u64(self.session)
        writer.u64(self.metadata_op)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the 32 bytes; what follows is left unread."""
        return cls(reader.u128(), reader.u64(), reader.u64())

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        self.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "consumer session attachment")


@dataclass(frozen=True, slots=True)
class PollRoute:
    """POLL_ROUTING (103) and CONSUMER_OFFSET_ROUTING (123) reply: the attachment the
    client presents to the primary, then the primary's node record as in cluster
    metadata: ``[attachment 32][node]``."""

    attachment: ConsumerSessionAttachment
    primary: ClusterNode

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        self.attachment.write(writer)
        self.primary.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        value = cls(ConsumerSessionAttachment.read(reader), ClusterNode.read(reader))
        reader.finish("poll route")
        return value


@dataclass(frozen=True, slots=True)
class CacheMetric:
    """One cache-metrics entry of GET_STATS (32 bytes)."""

    stream_id: int
    topic_id: int
    partition_id: int
    hits: int
    misses: int
    hit_ratio: float


@dataclass(frozen=True, slots=True)
class Stats:
    """GET_STATS (10) reply: 108 bytes of numbers, five ``[len u32][utf8]`` strings,
    the packed server semver (0 = unknown), counted cache metrics, then threads and
    disk space."""

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
    iggy_server_semver: int | None
    cache_metrics: tuple[CacheMetric, ...]
    threads_count: int
    free_disk_space: int
    total_disk_space: int

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(self.process_id)
        writer.f32(self.cpu_usage)
        writer.f32(self.total_cpu_usage)
        for value in (
            self.memory_usage,
            self.total_memory,
            self.available_memory,
            self.run_time,
            self.start_time,
            self.read_bytes,
            self.written_bytes,
            self.messages_size_bytes,
        ):
            writer.u64(value)
        writer.u32(self.streams_count)
        writer.u32(self.topics_count)
        writer.u32(self.partitions_count)
        writer.u32(self.segments_count)
        writer.u64(self.messages_count)
        writer.u32(self.clients_count)
        writer.u32(self.consumer_groups_count)
        for text in (
            self.hostname,
            self.os_name,
            self.os_version,
            self.kernel_version,
            self.iggy_server_version,
        ):
            write_str32(writer, text)
        if self.iggy_server_semver == 0:
            raise ValueError("semver 0 is the wire's 'unknown'; use None")
        writer.u32(self.iggy_server_semver or 0)
        writer.u32(len(self.cache_metrics))
        for metric in self.cache_metrics:
            writer.u32(metric.stream_id)
            writer.u32(metric.topic_id)
            writer.u32(metric.partition_id)
            writer.u64(metric.hits)
            writer.u64(metric.misses)
            writer.f32(metric.hit_ratio)
        writer.u32(self.threads_count)
        writer.u64(self.free_disk_space)
        writer.u64(self.total_disk_space)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        process_id = reader.u32()
        cpu_usage = reader.f32()
        total_cpu_usage = reader.f32()
        memory_usage, total_memory, available_memory, run_time = (
            reader.u64(),
            reader.u64(),
            reader.u64(),
            reader.u64(),
        )
        start_time, read_bytes, written_bytes, messages_size_bytes = (
            reader.u64(),
            reader.u64(),
            reader.u64(),
            reader.u64(),
        )
        streams_count, topics_count = reader.u32(), reader.u32()
        partitions_count, segments_count = reader.u32(), reader.u32()
        messages_count = reader.u64()
        clients_count, consumer_groups_count = reader.u32(), reader.u32()
        hostname = read_str32(reader)
        os_name = read_str32(reader)
        os_version = read_str32(reader)
        kernel_version = read_str32(reader)
        server_version = read_str32(reader)
        semver = reader.u32()
        count = reader.u32()
        check_count(count, reader, 32, "cache metrics")
        metrics = tuple(
            CacheMetric(
                reader.u32(), reader.u32(), reader.u32(), reader.u64(), reader.u64(), reader.f32()
            )
            for _ in range(count)
        )
        threads_count = reader.u32()
        free_disk_space = reader.u64()
        total_disk_space = reader.u64()
        reader.finish("stats")
        return cls(
            process_id,
            cpu_usage,
            total_cpu_usage,
            memory_usage,
            total_memory,
            available_memory,
            run_time,
            start_time,
            read_bytes,
            written_bytes,
            messages_size_bytes,
            streams_count,
            topics_count,
            partitions_count,
            segments_count,
            messages_count,
            clients_count,
            consumer_groups_count,
            hostname,
            os_name,
            os_version,
            kernel_version,
            server_version,
            semver or None,
            metrics,
            threads_count,
            free_disk_space,
            total_disk_space,
        )
