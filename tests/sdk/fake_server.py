"""An in-process fake viewstream cluster for the SDK tests, built on ``sdk.wire``.

It speaks the real protocol over real TCP on 127.0.0.1 (ephemeral ports), keeps streams,
topics, messages, offsets and consumer groups in dicts, and models just enough of the
cluster for the client's routing and retries to be exercised:

* ``nodes`` listeners share one state; every group has a view, and the primary of group
  ``g`` is node ``(view_g + g) % n`` (metadata group 0; partition groups numbered from 1 in
  creation order). A write reaching a backup is answered ``TransientNotAccepted`` (58,
  with the group's view in the reply header) or silently dropped.
* A client table keyed by client id: ``(client, session, request)`` at or below the
  client's watermark is answered from the cached reply, so a retried write is applied at
  most once (``RequestAlreadyApplied`` once it aged out of the cache). Registering again
  with the same client id keeps the watermark, as Iggy's table does.
* Faults are injected per request: drop the reply (after applying), close the connection
  before or after applying, answer with a status, delay, evict. Nodes can be killed
  (listener and connections closed) and revived on the same port.

Everything is bounded: socket timeouts of 50 ms on every blocking call so the threads
notice ``close()``, and ``close()`` joins them with a timeout.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

import xxhash

from sdk.wire import (
    NEED_MORE_BYTES,
    PROTOCOL_VERSION,
    Balanced,
    ClientConsumerGroup,
    ClientInfoDetails,
    ClusterMetadata,
    ClusterNode,
    ClusterNodeRole,
    ClusterNodeStatus,
    CommandCode,
    ConsumerGroupAssignment,
    ConsumerGroupDetails,
    ConsumerGroupInfo,
    ConsumerGroupMember,
    ConsumerGroups,
    ConsumerKind,
    ConsumerOffsetInfo,
    CreateConsumerGroup,
    CreateStream,
    CreateTopic,
    DeleteConsumerOffset,
    Empty,
    EvictionReason,
    Frame,
    FrameDecoder,
    GetConsumerOffset,
    GroupRef,
    Identifier,
    IggyErrorCode,
    LoginRegister,
    LoginRegisterReply,
    MessagesKey,
    Operation,
    OptionEntry,
    PartitionId,
    PartitionInfo,
    PartitionsChange,
    PollingKind,
    PollMessages,
    ProtocolError,
    ReplyPayload,
    RequestHeader,
    RequestPayload,
    SendConfirmation,
    SendMessages,
    SendMessagesReply,
    Stats,
    StoreConsumerOffset,
    StreamDetails,
    StreamInfo,
    StreamRef,
    Streams,
    TopicDetails,
    TopicInfo,
    TopicRef,
    Topics,
    UpdateStream,
    UpdateTopic,
    build_eviction_frame,
    build_reply_frame,
    encode_reply_body,
    iter_batch_records,
    poll_reply_parts,
    read_batch,
    read_request,
    result_rejected,
    slice_batch,
    stamp_batch,
    validate_request_header,
    verify_send_messages,
)

SOCKET_POLL_S: Final = 0.05
REPLY_CACHE_MAX: Final = 128
NO_PARTITION: Final = 0xFFFF_FFFF

FaultAction = Literal[
    "drop_reply",
    "close_before",
    "close_after",
    "crash_before",
    "crash_after",
    "status",
    "delay",
    "evict",
]


@dataclass
class Fault:
    """One injected fault, matched against incoming requests in order.

    ``crash_before`` / ``crash_after`` model the node dying before / after applying the
    request: it is killed without replying, the view of the request's group moves on (so
    another node is primary) and the node comes back after ``delay_s``.

    Attributes:
        action: What to do.
        code: Only requests of this command code (``None``: any).
        node: Only requests arriving at this node (``None``: any).
        times: How many matching requests it applies to.
        status: The status of ``action="status"``.
        delay_s: The delay of ``action="delay"``.
        eviction: The reason of ``action="evict"``.
        when: Extra predicate on the request header.
    """

    action: FaultAction
    code: int | None = None
    node: int | None = None
    times: int = 1
    status: int = 0
    delay_s: float = 0.0
    eviction: EvictionReason = EvictionReason.NO_SESSION
    when: Callable[[RequestHeader], bool] | None = None

    def matches(self, node: int, header: RequestHeader, code: int) -> bool:
        return (
            self.times > 0
            and (self.code is None or self.code == code)
            and (self.node is None or self.node == node)
            and (self.when is None or self.when(header))
        )


@dataclass(frozen=True)
class RequestRecord:
    """What a node received (for assertions)."""

    node: int
    code: int
    client: int
    session: int
    request: int
    operation: Operation


class Rejected(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class _CachedReply:
    status: int
    body: bytes
    op: int


@dataclass
class _ClientEntry:
    session: int
    user_id: int
    watermark: int = 0
    replies: OrderedDict[int, _CachedReply] = field(default_factory=OrderedDict)
    number: int = 0


@dataclass
class _Partition:
    id: int
    group: int
    created_at: int
    records: list[bytes] = field(default_factory=list)
    next_offset: int = 0
    offsets: dict[tuple[int, int | str], int] = field(default_factory=dict)

    def messages_count(self) -> int:
        return self.next_offset

    def size_bytes(self) -> int:
        return sum(len(r) for r in self.records)


@dataclass
class _Group:
    id: int
    name: str
    members: list[int] = field(default_factory=list)
    generation: int = 0


@dataclass
class _Topic:
    id: int
    name: str
    created_at: int
    partitions: list[_Partition]
    options: tuple[OptionEntry, ...] = ()
    groups: dict[int, _Group] = field(default_factory=dict)
    balanced_next: int = 0


@dataclass
class _Stream:
    id: int
    name: str
    created_at: int
    topics: dict[int, _Topic] = field(default_factory=dict)
    options: tuple[OptionEntry, ...] = ()


def _now_us() -> int:
    return time.time_ns() // 1000


class _Node:
    def __init__(self, cluster: FakeCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.port = 0
        self.alive = False
        self.listener: socket.socket | None = None
        self.connections: set[socket.socket] = set()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(SOCKET_POLL_S)
        self.port = listener.getsockname()[1]
        self.listener = listener
        self.alive = True
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        self.alive = False
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        for connection in list(self.connections):
            _close(connection)
        self.connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while self.alive and self.listener is listener:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.settimeout(SOCKET_POLL_S)
            self.connections.add(connection)
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self, connection: socket.socket) -> None:
        decoder = FrameDecoder()
        connection_id = next(self.cluster._connection_ids)
        try:
            while self.alive and not self.cluster._closed:
                try:
                    data = connection.recv(256 * 1024)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                try:
                    decoder.feed(data)
                    while True:
                        frame = decoder.next_frame()
                        if frame is NEED_MORE_BYTES:
                            break
                        keep = self.cluster._on_frame(self, connection, connection_id, frame)
                        if not keep:
                            return
                except ProtocolError:
                    return
        finally:
            self.connections.discard(connection)
            _close(connection)


def _close(connection: socket.socket) -> None:
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
    connection.close()


class FakeCluster:
    """A fake cluster of ``nodes`` listeners over one shared state.

    Args:
        nodes: How many nodes (replicas).
        users: Username to password (default ``{"iggy": "iggy"}``).
        backup_behavior: What a backup does with a write: ``"reject"`` (58) or ``"drop"``.
        reply_cache_max: Cached replies per client (older ones answer 59).
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        users: dict[str, str] | None = None,
        backup_behavior: Literal["reject", "drop"] = "reject",
        reply_cache_max: int = REPLY_CACHE_MAX,
    ) -> None:
        self.users = users or {"iggy": "iggy"}
        self.backup_behavior = backup_behavior
        self.reply_cache_max = reply_cache_max
        self.lock = threading.RLock()
        self.nodes = [_Node(self, i) for i in range(nodes)]
        self.views: dict[int, int] = {}
        self.faults: list[Fault] = []
        self.requests: list[RequestRecord] = []
        #: Non-replicated codes outside Iggy's registry that clients sent, answered as
        #: Iggy's server answers them: InvalidCommand (3).
        self.unknown_codes: list[int] = []
        self.clients: dict[int, _ClientEntry] = {}
        self.streams: dict[int, _Stream] = {}
        self.op = 0
        self.applied: list[tuple[int, int, int]] = []
        self._next_stream_id = 0
        self._next_group = 1
        self._connection_ids = itertools.count(1)
        self._client_numbers = itertools.count(1)
        self._closed = False
        self.in_progress = 0
        self.in_progress_max = 0
        self.crashes = 0
        #: (client, request) of every request a crash fault hit, in order.
        self.crashed_requests: list[tuple[int, int]] = []
        self._timers: list[threading.Timer] = []

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> FakeCluster:
        for node in self.nodes:
            node.start()
        return self

    def close(self) -> None:
        with self.lock:
            self._closed = True
        for timer in self._timers:
            timer.cancel()
        for node in self.nodes:
            node.stop()
        deadline = time.monotonic() + 5
        for node in self.nodes:
            for thread in node.threads:
                thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def kill(self, index: int) -> None:
        """Close the node's listener and every connection to it."""
        with self.lock:
            self.nodes[index].stop()

    def revive(self, index: int) -> None:
        """Listen again on the same port."""
        with self.lock:
            self.nodes[index].start()

    def connection_string(self, node: int = 0, **options: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        base = f"iggy://iggy:iggy@127.0.0.1:{self.nodes[node].port}"
        return f"{base}?{query}" if query else base

    def address(self, node: int) -> tuple[str, int]:
        return ("127.0.0.1", self.nodes[node].port)

    # --- cluster model ---------------------------------------------------------------------

    def _crash(self, node: _Node, group: int, down_s: float) -> None:
        node.stop()
        self.crashes += 1
        self.views[group] = self.view(group) + 1
        if self.primary(group) == node.index:
            self.views[group] += 1
        timer = threading.Timer(down_s, self._revive_if_open, args=(node.index,))
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def _revive_if_open(self, index: int) -> None:
        with self.lock:
            if not self._closed and not self.nodes[index].alive:
                self.nodes[index].start()

    def view(self, group: int) -> int:
        return self.views.get(group, 0)

    def primary(self, group: int) -> int:
        return (self.view(group) + group) % len(self.nodes)

    def view_change(self, group: int = 0, steps: int = 1) -> None:
        with self.lock:
            self.views[group] = self.view(group) + steps

    def group_of(self, stream: int | str, topic: int | str, partition: int) -> int:
        with self.lock:
            return self._topic(Identifier(stream), Identifier(topic)).partitions[partition].group

    def add_fault(self, action: FaultAction, **fields: object) -> Fault:
        fault = Fault(action, **fields)  # type: ignore[arg-type]
        with self.lock:
            self.faults.append(fault)
        return fault

    def messages(
        self, stream: int | str, topic: int | str, partition: int
    ) -> list[tuple[int, int, bytes]]:
        """``(offset, id, payload)`` of every stored message of a partition."""
        with self.lock:
            stored = self._topic(Identifier(stream), Identifier(topic)).partitions[partition]
            out: list[tuple[int, int, bytes]] = []
            for record in stored.records:
                _, messages = read_batch(record)
                out.extend((m.offset, m.id, bytes(m.payload)) for m in messages)
            return out

    def requests_of(self, code: int) -> list[RequestRecord]:
        with self.lock:
            return [r for r in self.requests if r.code == code]

    # --- frame handling ----------------------------------------------------------------------

    def _on_frame(
        self, node: _Node, connection: socket.socket, connection_id: int, frame: Frame
    ) -> bool:
        with self.lock:
            self.in_progress += 1
            self.in_progress_max = max(self.in_progress_max, self.in_progress)
        try:
            return self._on_frame_counted(node, connection, connection_id, frame)
        finally:
            with self.lock:
                self.in_progress -= 1

    def _on_frame_counted(
        self, node: _Node, connection: socket.socket, connection_id: int, frame: Frame
    ) -> bool:
        try:
            header, code, payload = read_request(frame)
            validate_request_header(header)
        except ProtocolError:
            return self._unknown_code(node, connection, frame)
        delay = 0.0
        with self.lock:
            if not node.alive:
                return False
            self.requests.append(
                RequestRecord(
                    node.index,
                    code,
                    header.client,
                    header.session,
                    header.request,
                    header.operation,
                )
            )
            fault = next((f for f in self.faults if f.matches(node.index, header, code)), None)
            if fault is not None:
                fault.times -= 1
                if fault.action == "close_before":
                    return False
                if fault.action == "crash_before":
                    self.crashed_requests.append((header.client, header.request))
                    self._crash(node, self._group_for(code, payload), fault.delay_s)
                    return False
                if fault.action == "delay":
                    delay = fault.delay_s
                if fault.action == "status":
                    reply = build_reply_frame(header, status=fault.status, replica=node.index)
                    return _send(connection, reply)
                if fault.action == "evict":
                    return _send(connection, build_eviction_frame(header.client, fault.eviction))
            outcome = self._handle(node, connection_id, header, code, payload, frame.body)
            if fault is not None and fault.action == "crash_after":
                self.crashed_requests.append((header.client, header.request))
                self._crash(node, self._group_for(code, payload), fault.delay_s)
                return False
        if delay:
            time.sleep(delay)
        if outcome is None:
            return True
        if fault is not None and fault.action == "drop_reply":
            return True
        if fault is not None and fault.action == "close_after":
            return False
        return _send(connection, outcome)

    def _unknown_code(self, node: _Node, connection: socket.socket, frame: Frame) -> bool:
        """A well-formed non-replicated request with a code Iggy does not define (such
        as viewstream's long poll) gets InvalidCommand, as from Iggy's server; any other
        bad frame closes the connection."""
        try:
            header = frame.request_header()
            validate_request_header(header)
        except ProtocolError:
            return False
        if header.operation is not Operation.NON_REPLICATED:
            return False
        with self.lock:
            if not node.alive:
                return False
            self.unknown_codes.append(header.code)
        reply = build_reply_frame(header, status=IggyErrorCode.INVALID_COMMAND, replica=node.index)
        return _send(connection, reply)

    def _handle(
        self,
        node: _Node,
        connection_id: int,
        header: RequestHeader,
        code: CommandCode,
        payload: RequestPayload,
        body: memoryview,
    ) -> bytes | bytearray | None:
        operation = header.operation
        if operation is Operation.REGISTER:
            assert isinstance(payload, LoginRegister)
            if self.users.get(payload.username) != payload.password:
                return build_eviction_frame(header.client, EvictionReason.INVALID_CREDENTIALS)
            self.op += 1
            entry = self.clients.get(header.client)
            if entry is None:
                entry = _ClientEntry(self.op, 1, number=next(self._client_numbers))
                self.clients[header.client] = entry
            else:
                entry.session = self.op
            reply = LoginRegisterReply(entry.user_id, entry.session, PROTOCOL_VERSION, "0.9.0-fake")
            return build_reply_frame(
                header,
                encode_reply_body(operation, reply),
                op=self.op,
                commit=self.op,
                replica=node.index,
            )
        entry = self.clients.get(header.client)
        if operation is Operation.NON_REPLICATED:
            if code is not CommandCode.PING and (entry is None or entry.session != header.session):
                return build_reply_frame(
                    header, status=IggyErrorCode.UNAUTHENTICATED, replica=node.index
                )
            try:
                result = self._read(node, connection_id, header, code, payload)
            except Rejected as rejection:
                return build_reply_frame(header, status=rejection.code, replica=node.index)
            return build_reply_frame(header, result, replica=node.index)
        group = self._group_for(code, payload)
        view = self.view(group)
        if self.primary(group) != node.index:
            if self.backup_behavior == "drop":
                return None
            return build_reply_frame(
                header, status=IggyErrorCode.TRANSIENT_NOT_ACCEPTED, view=view, replica=node.index
            )
        if entry is None:
            return build_eviction_frame(header.client, EvictionReason.NO_SESSION)
        if header.session < entry.session:
            return build_eviction_frame(header.client, EvictionReason.SESSION_TOO_LOW)
        if header.session > entry.session:
            return build_eviction_frame(header.client, EvictionReason.SESSION_ERROR)
        if header.request <= entry.watermark:
            cached = entry.replies.get(header.request)
            if cached is None:
                return build_reply_frame(
                    header,
                    status=IggyErrorCode.REQUEST_ALREADY_APPLIED,
                    view=view,
                    replica=node.index,
                )
            return build_reply_frame(
                header,
                cached.body,
                status=cached.status,
                op=cached.op,
                commit=self.op,
                view=view,
                replica=node.index,
            )
        self.op += 1
        status, reply_body = self._apply(header, code, payload, entry)
        self.applied.append((header.client, header.request, code))
        entry.watermark = header.request
        entry.replies[header.request] = _CachedReply(status, reply_body, self.op)
        while len(entry.replies) > self.reply_cache_max:
            entry.replies.popitem(last=False)
        if operation is Operation.LOGOUT:
            del self.clients[header.client]
            self._leave_all(header.client)
        return build_reply_frame(
            header,
            reply_body,
            status=status,
            op=self.op,
            commit=self.op,
            view=view,
            replica=node.index,
        )

    def _group_for(self, code: CommandCode, payload: RequestPayload) -> int:
        if isinstance(payload, SendMessages | StoreConsumerOffset | DeleteConsumerOffset):
            try:
                topic = self._topic(payload.stream_id, payload.topic_id)
            except Rejected:
                return 0
            if isinstance(payload, SendMessages):
                partition = self._partition_of_send(topic, payload, peek=True)
            else:
                partition = payload.partition_id or 0
            if 0 <= partition < len(topic.partitions):
                return topic.partitions[partition].group
        return 0

    # --- lookups -------------------------------------------------------------------------

    def _stream(self, identifier: Identifier) -> _Stream:
        value = identifier.value
        if isinstance(value, int):
            stream = self.streams.get(value)
            if stream is None:
                raise Rejected(IggyErrorCode.STREAM_ID_NOT_FOUND)
            return stream
        for stream in self.streams.values():
            if stream.name == value:
                return stream
        raise Rejected(IggyErrorCode.STREAM_NAME_NOT_FOUND)

    def _topic(self, stream_id: Identifier, topic_id: Identifier) -> _Topic:
        stream = self._stream(stream_id)
        value = topic_id.value
        if isinstance(value, int):
            topic = stream.topics.get(value)
            if topic is None:
                raise Rejected(IggyErrorCode.TOPIC_ID_NOT_FOUND)
            return topic
        for topic in stream.topics.values():
            if topic.name == value:
                return topic
        raise Rejected(IggyErrorCode.TOPIC_NAME_NOT_FOUND)

    def _group(self, topic: _Topic, group_id: Identifier) -> _Group:
        value = group_id.value
        if isinstance(value, int):
            group = topic.groups.get(value)
            if group is None:
                raise Rejected(IggyErrorCode.CONSUMER_GROUP_ID_NOT_FOUND)
            return group
        for group in topic.groups.values():
            if group.name == value:
                return group
        raise Rejected(IggyErrorCode.CONSUMER_GROUP_NAME_NOT_FOUND)

    def _partition_of_send(self, topic: _Topic, payload: SendMessages, *, peek: bool) -> int:
        partitioning = payload.partitioning
        count = len(topic.partitions)
        if isinstance(partitioning, PartitionId):
            return partitioning.partition_id
        if count == 0:
            return -1
        if isinstance(partitioning, MessagesKey):
            return xxhash.xxh32_intdigest(partitioning.key) % count
        assert isinstance(partitioning, Balanced)
        partition = topic.balanced_next % count
        if not peek:
            topic.balanced_next += 1
        return partition

    # --- details -------------------------------------------------------------------------

    @staticmethod
    def _topic_info(topic: _Topic) -> TopicInfo:
        return TopicInfo(
            topic.id,
            topic.created_at,
            len(topic.partitions),
            0,
            1,
            0,
            sum(p.size_bytes() for p in topic.partitions),
            sum(p.messages_count() for p in topic.partitions),
            topic.name,
            topic.options,
            (),
        )

    def _topic_details(self, topic: _Topic) -> TopicDetails:
        partitions = tuple(
            PartitionInfo(
                p.id,
                p.created_at,
                1,
                max(0, p.next_offset - 1),
                p.size_bytes(),
                p.messages_count(),
            )
            for p in topic.partitions
        )
        return TopicDetails(self._topic_info(topic), partitions)

    def _stream_info(self, stream: _Stream) -> StreamInfo:
        topics = stream.topics.values()
        return StreamInfo(
            stream.id,
            stream.created_at,
            len(stream.topics),
            sum(sum(p.size_bytes() for p in t.partitions) for t in topics),
            sum(sum(p.messages_count() for p in t.partitions) for t in topics),
            stream.name,
            stream.options,
        )

    def _stream_details(self, stream: _Stream) -> StreamDetails:
        return StreamDetails(
            self._stream_info(stream),
            tuple(self._topic_info(t) for t in stream.topics.values()),
        )

    @staticmethod
    def _group_details(
        topic: _Topic, group: _Group, numbers: dict[int, int]
    ) -> ConsumerGroupDetails:
        members = tuple(
            ConsumerGroupMember(numbers.get(member, 0), tuple(_assigned(topic, group, member)))
            for member in group.members
        )
        info = ConsumerGroupInfo(group.id, len(topic.partitions), len(group.members), group.name)
        return ConsumerGroupDetails(info, members)

    def _numbers(self) -> dict[int, int]:
        return {client: entry.number for client, entry in self.clients.items()}

    # --- reads ---------------------------------------------------------------------------

    def _read(
        self,
        node: _Node,
        connection_id: int,
        header: RequestHeader,
        code: CommandCode,
        payload: RequestPayload,
    ) -> bytes:
        reply: ReplyPayload | None
        if code is CommandCode.PING:
            reply = Empty()
        elif code is CommandCode.GET_CLUSTER_METADATA:
            nodes = tuple(
                ClusterNode(
                    f"node-{n.index}",
                    "127.0.0.1",
                    n.port,
                    0,
                    0,
                    0,
                    ClusterNodeRole.LEADER
                    if n.index == self.primary(0)
                    else ClusterNodeRole.FOLLOWER,
                    ClusterNodeStatus.HEALTHY,
                )
                for n in self.nodes
            )
            reply = ClusterMetadata("fake", nodes)
        elif code is CommandCode.GET_ME:
            entry = self.clients[header.client]
            groups = tuple(
                ClientConsumerGroup(s.id, t.id, g.id)
                for s in self.streams.values()
                for t in s.topics.values()
                for g in t.groups.values()
                if header.client in g.members
            )
            reply = ClientInfoDetails(entry.number, entry.user_id, 1, "127.0.0.1", groups)
        elif code is CommandCode.GET_STATS:
            reply = self._stats()
        elif code is CommandCode.GET_STREAM:
            assert isinstance(payload, StreamRef)
            try:
                reply = self._stream_details(self._stream(payload.stream_id))
            except Rejected:
                return b""
        elif code is CommandCode.GET_STREAMS:
            reply = Streams(tuple(self._stream_info(s) for s in self.streams.values()))
        elif code is CommandCode.GET_TOPIC:
            assert isinstance(payload, TopicRef)
            try:
                reply = self._topic_details(self._topic(payload.stream_id, payload.topic_id))
            except Rejected:
                return b""
        elif code is CommandCode.GET_TOPICS:
            assert isinstance(payload, StreamRef)
            stream = self._stream(payload.stream_id)
            reply = Topics(tuple(self._topic_info(t) for t in stream.topics.values()))
        elif code is CommandCode.GET_CONSUMER_GROUP:
            assert isinstance(payload, GroupRef)
            topic = self._topic(payload.stream_id, payload.topic_id)
            try:
                group = self._group(topic, payload.group_id)
            except Rejected:
                return b""
            reply = self._group_details(topic, group, self._numbers())
        elif code is CommandCode.GET_CONSUMER_GROUPS:
            assert isinstance(payload, TopicRef)
            topic = self._topic(payload.stream_id, payload.topic_id)
            reply = ConsumerGroups(
                tuple(
                    ConsumerGroupInfo(g.id, len(topic.partitions), len(g.members), g.name)
                    for g in topic.groups.values()
                )
            )
        elif code is CommandCode.SYNC_CONSUMER_GROUP:
            assert isinstance(payload, GroupRef)
            topic = self._topic(payload.stream_id, payload.topic_id)
            group = self._group(topic, payload.group_id)
            if header.client not in group.members:
                return b""
            reply = ConsumerGroupAssignment(
                group.generation, tuple(_assigned(topic, group, header.client))
            )
        elif code is CommandCode.POLL_MESSAGES:
            assert isinstance(payload, PollMessages)
            return self._poll(header, payload)
        elif code is CommandCode.GET_CONSUMER_OFFSET:
            assert isinstance(payload, GetConsumerOffset)
            topic = self._topic(payload.stream_id, payload.topic_id)
            partition = self._partition(topic, payload.partition_id)
            key = self._offset_key(topic, payload.consumer.kind, payload.consumer.id)
            stored = partition.offsets.get(key)
            if stored is None:
                return b""
            reply = ConsumerOffsetInfo(partition.id, max(0, partition.next_offset - 1), stored)
        else:
            raise Rejected(IggyErrorCode.INVALID_COMMAND)
        return reply.encode()

    def _stats(self) -> Stats:
        topics = [t for s in self.streams.values() for t in s.topics.values()]
        partitions = [p for t in topics for p in t.partitions]
        return Stats(
            1,
            0.0,
            0.0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            sum(p.size_bytes() for p in partitions),
            len(self.streams),
            len(topics),
            len(partitions),
            len(partitions),
            sum(p.messages_count() for p in partitions),
            len(self.clients),
            sum(len(t.groups) for t in topics),
            "localhost",
            "fake",
            "0",
            "0",
            "0.9.0-fake",
            None,
            (),
            1,
            0,
            0,
        )

    def _partition(self, topic: _Topic, partition_id: int | None) -> _Partition:
        index = 0 if partition_id is None else partition_id
        if not 0 <= index < len(topic.partitions):
            raise Rejected(IggyErrorCode.PARTITION_NOT_FOUND)
        return topic.partitions[index]

    def _offset_key(
        self, topic: _Topic, kind: ConsumerKind, consumer_id: Identifier
    ) -> tuple[int, int | str]:
        if kind is ConsumerKind.CONSUMER_GROUP:
            return (2, self._group(topic, consumer_id).id)
        return (1, consumer_id.value)

    def _poll(self, header: RequestHeader, payload: PollMessages) -> bytes:
        topic = self._topic(payload.stream_id, payload.topic_id)
        consumer = payload.consumer
        if consumer.kind is ConsumerKind.CONSUMER_GROUP:
            group = self._group(topic, consumer.id)
            if header.client not in group.members:
                raise Rejected(IggyErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND)
            if payload.partition_id is not None and payload.partition_id not in _assigned(
                topic, group, header.client
            ):
                return b"".join(bytes(p) for p in poll_reply_parts(NO_PARTITION, 0, []))
        partition = self._partition(topic, payload.partition_id)
        key = self._offset_key(topic, consumer.kind, consumer.id)
        strategy = payload.strategy
        last = partition.next_offset - 1
        if strategy.kind is PollingKind.OFFSET:
            start = strategy.value
        elif strategy.kind is PollingKind.FIRST:
            start = 0
        elif strategy.kind is PollingKind.LAST:
            start = max(0, partition.next_offset - payload.count)
        elif strategy.kind is PollingKind.NEXT:
            stored = partition.offsets.get(key)
            start = 0 if stored is None else stored + 1
        else:
            start = partition.next_offset
            for record in partition.records:
                stamp = int.from_bytes(record[16:24], "little")
                if stamp >= strategy.value:
                    start = int.from_bytes(record[8:16], "little")
                    break
        slices = []
        remaining = payload.count
        for record in partition.records:
            if remaining <= 0:
                break
            piece = slice_batch(record, start, remaining)
            if piece is not None:
                slices.append(piece)
                remaining -= piece.message_count
                start = piece.last_offset + 1
        if payload.auto_commit and slices:
            partition.offsets[key] = slices[-1].last_offset
        parts = poll_reply_parts(partition.id, max(0, last), slices)
        return b"".join(bytes(p) for p in parts)

    # --- writes --------------------------------------------------------------------------

    def _apply(
        self, header: RequestHeader, code: CommandCode, payload: RequestPayload, entry: _ClientEntry
    ) -> tuple[int, bytes]:
        operation = header.operation
        try:
            reply = self._mutate(header, code, payload)
        except Rejected as rejection:
            if operation.is_result_framed:
                return 0, result_rejected(rejection.code)
            return rejection.code, b""
        return 0, encode_reply_body(operation, reply)

    def _mutate(
        self, header: RequestHeader, code: CommandCode, payload: RequestPayload
    ) -> ReplyPayload:
        now = _now_us()
        if code is CommandCode.LOGOUT_USER:
            return Empty()
        if code is CommandCode.CREATE_STREAM:
            assert isinstance(payload, CreateStream)
            if any(s.name == payload.name for s in self.streams.values()):
                raise Rejected(IggyErrorCode.STREAM_NAME_ALREADY_EXISTS)
            stream = _Stream(self._next_stream_id, payload.name, now, options=payload.options)
            self._next_stream_id += 1
            self.streams[stream.id] = stream
            return self._stream_details(stream)
        if code is CommandCode.UPDATE_STREAM:
            assert isinstance(payload, UpdateStream)
            stream = self._stream(payload.stream_id)
            stream.name = payload.name
            return Empty()
        if code is CommandCode.DELETE_STREAM:
            assert isinstance(payload, StreamRef)
            del self.streams[self._stream(payload.stream_id).id]
            return Empty()
        if code is CommandCode.PURGE_STREAM:
            assert isinstance(payload, StreamRef)
            for topic in self._stream(payload.stream_id).topics.values():
                _purge(topic)
            return Empty()
        if code is CommandCode.CREATE_TOPIC:
            assert isinstance(payload, CreateTopic)
            stream = self._stream(payload.stream_id)
            if any(t.name == payload.name for t in stream.topics.values()):
                raise Rejected(IggyErrorCode.TOPIC_NAME_ALREADY_EXISTS)
            topic_id = max(stream.topics, default=-1) + 1
            topic = _Topic(topic_id, payload.name, now, [], payload.options)
            self._add_partitions(topic, payload.partitions_count, now)
            stream.topics[topic_id] = topic
            return self._topic_details(topic)
        if code is CommandCode.UPDATE_TOPIC:
            assert isinstance(payload, UpdateTopic)
            self._topic(payload.stream_id, payload.topic_id).name = payload.name
            return Empty()
        if code is CommandCode.DELETE_TOPIC:
            assert isinstance(payload, TopicRef)
            stream = self._stream(payload.stream_id)
            del stream.topics[self._topic(payload.stream_id, payload.topic_id).id]
            return Empty()
        if code is CommandCode.PURGE_TOPIC:
            assert isinstance(payload, TopicRef)
            _purge(self._topic(payload.stream_id, payload.topic_id))
            return Empty()
        if code is CommandCode.CREATE_PARTITIONS:
            assert isinstance(payload, PartitionsChange)
            topic = self._topic(payload.stream_id, payload.topic_id)
            self._add_partitions(topic, payload.partitions_count, now)
            _regenerate(topic)
            return Empty()
        if code is CommandCode.DELETE_PARTITIONS:
            assert isinstance(payload, PartitionsChange)
            topic = self._topic(payload.stream_id, payload.topic_id)
            if payload.partitions_count > len(topic.partitions):
                raise Rejected(IggyErrorCode.INVALID_PARTITIONS_COUNT)
            del topic.partitions[len(topic.partitions) - payload.partitions_count :]
            _regenerate(topic)
            return Empty()
        if code is CommandCode.CREATE_CONSUMER_GROUP:
            assert isinstance(payload, CreateConsumerGroup)
            topic = self._topic(payload.stream_id, payload.topic_id)
            if any(g.name == payload.name for g in topic.groups.values()):
                raise Rejected(IggyErrorCode.CONSUMER_GROUP_NAME_ALREADY_EXISTS)
            group = _Group(max(topic.groups, default=-1) + 1, payload.name)
            topic.groups[group.id] = group
            return self._group_details(topic, group, self._numbers())
        if code is CommandCode.DELETE_CONSUMER_GROUP:
            assert isinstance(payload, GroupRef)
            topic = self._topic(payload.stream_id, payload.topic_id)
            del topic.groups[self._group(topic, payload.group_id).id]
            return Empty()
        if code is CommandCode.JOIN_CONSUMER_GROUP:
            assert isinstance(payload, GroupRef)
            topic = self._topic(payload.stream_id, payload.topic_id)
            group = self._group(topic, payload.group_id)
            if header.client not in group.members:
                group.members.append(header.client)
                group.generation += 1
            return Empty()
        if code is CommandCode.LEAVE_CONSUMER_GROUP:
            assert isinstance(payload, GroupRef)
            topic = self._topic(payload.stream_id, payload.topic_id)
            group = self._group(topic, payload.group_id)
            if header.client not in group.members:
                raise Rejected(IggyErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND)
            group.members.remove(header.client)
            group.generation += 1
            return Empty()
        if code is CommandCode.SEND_MESSAGES:
            assert isinstance(payload, SendMessages)
            return self._send(payload, now)
        if code is CommandCode.STORE_CONSUMER_OFFSET:
            assert isinstance(payload, StoreConsumerOffset)
            topic = self._topic(payload.stream_id, payload.topic_id)
            partition = self._partition(topic, payload.partition_id)
            self._check_owner(header, topic, payload.consumer.kind, payload.consumer.id, partition)
            key = self._offset_key(topic, payload.consumer.kind, payload.consumer.id)
            partition.offsets[key] = payload.offset
            return Empty()
        if code is CommandCode.DELETE_CONSUMER_OFFSET:
            assert isinstance(payload, DeleteConsumerOffset)
            topic = self._topic(payload.stream_id, payload.topic_id)
            partition = self._partition(topic, payload.partition_id)
            key = self._offset_key(topic, payload.consumer.kind, payload.consumer.id)
            if partition.offsets.pop(key, None) is None:
                raise Rejected(IggyErrorCode.CONSUMER_OFFSET_NOT_FOUND)
            return Empty()
        raise Rejected(IggyErrorCode.INVALID_COMMAND)

    def _check_owner(
        self,
        header: RequestHeader,
        topic: _Topic,
        kind: ConsumerKind,
        consumer_id: Identifier,
        partition: _Partition,
    ) -> None:
        if kind is not ConsumerKind.CONSUMER_GROUP:
            return
        group = self._group(topic, consumer_id)
        if header.client in group.members and partition.id not in _assigned(
            topic, group, header.client
        ):
            raise Rejected(IggyErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED)

    def _add_partitions(self, topic: _Topic, count: int, now: int) -> None:
        for _ in range(count):
            topic.partitions.append(_Partition(len(topic.partitions), self._next_group, now))
            self._next_group += 1

    def _send(self, payload: SendMessages, now: int) -> SendMessagesReply:
        topic = self._topic(payload.stream_id, payload.topic_id)
        try:
            verified = verify_send_messages(payload)
        except ProtocolError as error:
            raise Rejected(error.code) from None
        index = self._partition_of_send(topic, payload, peek=False)
        partition = self._partition(topic, index)
        record = bytearray(payload.batch)
        stamp_batch(
            record,
            verified,
            partition_id=partition.id,
            base_offset=partition.next_offset,
            base_timestamp=now,
        )
        partition.records.append(bytes(record))
        base = partition.next_offset
        partition.next_offset += verified.header.message_count
        assert len(list(iter_batch_records(record))) == 1
        stream = self._stream(payload.stream_id)
        return SendMessagesReply((SendConfirmation(stream.id, topic.id, partition.id, base),))

    def _leave_all(self, client: int) -> None:
        for stream in self.streams.values():
            for topic in stream.topics.values():
                for group in topic.groups.values():
                    if client in group.members:
                        group.members.remove(client)
                        group.generation += 1

    # --- test helpers ----------------------------------------------------------------------

    def expire_sessions(self) -> None:
        """Forget every client (as a restarted node without its client table would)."""
        with self.lock:
            self.clients.clear()

    def group_members(self, stream: int | str, topic: int | str, group: int | str) -> list[int]:
        with self.lock:
            found = self._group(
                self._topic(Identifier(stream), Identifier(topic)), Identifier(group)
            )
            return list(found.members)


def _assigned(topic: _Topic, group: _Group, client: int) -> list[int]:
    if client not in group.members:
        return []
    index = group.members.index(client)
    count = len(group.members)
    return [p.id for p in topic.partitions if p.id % count == index]


def _regenerate(topic: _Topic) -> None:
    for group in topic.groups.values():
        group.generation += 1


def _purge(topic: _Topic) -> None:
    for partition in topic.partitions:
        partition.records.clear()


def _send(connection: socket.socket, frame: bytes | bytearray) -> bool:
    try:
        connection.settimeout(2.0)
        connection.sendall(frame)
        connection.settimeout(SOCKET_POLL_S)
    except OSError:
        return False
    return True
