"""The WebSocket transport against real node processes: the official SDK over
``iggy+ws://`` on one node and on a 3-node cluster, messages crossing between TCP and
WebSocket clients, and bad WebSocket clients that must not disturb the others.

Every node is started with its own free WebSocket port and killed in teardown.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
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
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import start_cluster
from sdk import wire
from sdk.wire import (
    NEED_MORE_BYTES,
    CommandCode,
    FrameDecoder,
    build_request_frame,
    read_reply,
)
from tests.runtime.processes import (
    ROOT_PASSWORD,
    NodeProcess,
    free_port,
    start_node,
)
from tests.runtime.test_interop_node import run

TICK_MS = 5
FRAME_READ_TIMEOUT_S = 3.0
FRAME_SIZE_MAX = 2 * 1024 * 1024
"""The single node's largest frame: small, so oversized messages are cheap to send."""
SOCKET_TIMEOUT_S = 15.0


# -- nodes -------------------------------------------------------------------------------------


class Target:
    """Where the SDK reaches a node or a cluster, over TCP and over WebSocket."""

    def __init__(self, tcp: list[str], ws: list[str]) -> None:
        self.tcp = tcp
        self.ws = ws

    async def client(self, transport: str, index: int = 0) -> Any:
        if transport == "ws":
            url = f"iggy+ws://iggy:{ROOT_PASSWORD}@{self.ws[index]}"
        else:
            url = f"iggy+tcp://iggy:{ROOT_PASSWORD}@{self.tcp[index]}"
        client = IggyClient.from_connection_string(url)
        await client.connect()
        return client


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Target, NodeProcess]]:
    data_dir: Path = tmp_path_factory.mktemp("ws-node") / "data"
    ws = f"127.0.0.1:{free_port()}"
    env = {
        "VIEWSTREAM_LIMITS__FRAME_READ_TIMEOUT_S": str(FRAME_READ_TIMEOUT_S),
        "VIEWSTREAM_LIMITS__FRAME_SIZE_BYTES_MAX": str(FRAME_SIZE_MAX),
    }
    node = start_node(data_dir, ws_address=ws, env=env)
    try:
        yield Target([node.address], [ws]), node
    finally:
        node.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    folder: Path = tmp_path_factory.mktemp("ws-cluster")
    chosen = cluster_layout(folder, 3, ws=True)
    processes = start_cluster(chosen, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
    try:
        yield Target(chosen.client_addresses, chosen.ws_addresses)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=20)


# -- the SDK over WebSocket --------------------------------------------------------------------


async def _until(probe: Any, done: Any, timeout_s: float = 20.0) -> Any:
    """``await probe()`` until ``done(result)``, bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if done(result) or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.05)


async def _end_to_end(target: Target, name: str, writer: str, reader: str) -> dict[str, Any]:
    """Create, send over ``writer``, read over ``reader`` (another node in a cluster)."""
    source = await target.client(writer, 0)
    sink = await target.client(reader, len(target.tcp) - 1)
    await source.create_stream(name)
    await source.create_topic(name, "t", 2)
    sent = [f"{name}-{i}".encode() for i in range(8)]
    for i, payload in enumerate(sent):
        await source.send_messages(
            name, "t", Partitioning.partition_id(i % 2), [SendMessage(payload)]
        )
    # A large message: more than one WebSocket frame of a reply (1 MiB each).
    big = bytes(range(256)) * (6 * 1024)
    await source.send_messages(name, "t", Partitioning.partition_id(1), [SendMessage(big)])
    topic = await _until(lambda: sink.get_topic(name, "t"), lambda t: t is not None)

    async def offsets(strategy: Any, count: int, *, auto_commit: bool = False) -> list[int]:
        polled = await sink.poll_messages(
            name,
            "t",
            consumer=Consumer.Single("reader"),
            polling_strategy=strategy,
            count=count,
            auto_commit=auto_commit,
            partition_id=0,
        )
        return [m.offset() for m in polled]

    async def payloads(partition: int) -> list[bytes]:
        polled = await sink.poll_messages(
            name,
            "t",
            consumer=Consumer.Single("all"),
            polling_strategy=PollingStrategy.First(),
            count=100,
            auto_commit=False,
            partition_id=partition,
        )
        return [bytes(m.payload()) for m in polled]

    everything = [
        await _until(lambda p=p: payloads(p), lambda got, p=p: len(got) >= 4 + p) for p in (0, 1)
    ]
    strategies = {
        "offset": await offsets(PollingStrategy.Offset(1), 2),
        "first": await offsets(PollingStrategy.First(), 1),
        "last": await offsets(PollingStrategy.Last(), 1),
        "timestamp": await offsets(PollingStrategy.Timestamp(0), 2),
        "next": await offsets(PollingStrategy.Next(), 2, auto_commit=True),
    }
    # The offset the auto-commit stored, read back over the writer's transport.
    reader_consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier("reader"))
    request = wire.GetConsumerOffset(
        reader_consumer, wire.Identifier(name), wire.Identifier("t"), 0
    ).encode()

    async def stored() -> int:
        raw = await source.send_binary_request(int(CommandCode.GET_CONSUMER_OFFSET), request)
        return wire.ConsumerOffsetInfo.decode(raw).stored_offset if raw else -1

    stored_offset = await _until(stored, lambda offset: offset == 1)
    strategies["next_after_commit"] = await _until(
        lambda: offsets(PollingStrategy.Next(), 2), lambda got: got[:1] == [2]
    )
    # A consumer group over the reader's transport gets every message once.
    member = await sink.consumer_group(
        "workers",
        name,
        "t",
        auto_commit=AutoCommit.Disabled(),
        polling_strategy=PollingStrategy.Next(),
        poll_interval=timedelta(milliseconds=20),
        batch_length=100,
    )
    grouped: list[bytes] = []

    async def drain() -> None:
        async for message in member.iter_messages():
            grouped.append(bytes(message.payload()))
            if len(grouped) >= len(sent) + 1:
                return

    await asyncio.wait_for(drain(), 30)
    group = await sink.get_consumer_group(name, "t", "workers")
    return {
        "sent": sent,
        "big": big,
        "topic": topic,
        "everything": everything,
        "strategies": strategies,
        "stored": stored_offset,
        "grouped": grouped,
        "members": group.members_count,
    }


def _check_end_to_end(found: dict[str, Any]) -> None:
    sent, big = found["sent"], found["big"]
    assert found["topic"].partitions_count == 2
    assert found["everything"] == [sent[0::2], [*sent[1::2], big]]
    assert found["strategies"] == {
        "offset": [1, 2],
        "first": [0],
        "last": [3],
        "timestamp": [0, 1],
        "next": [0, 1],
        "next_after_commit": [2, 3],
    }
    assert found["stored"] == 1
    assert sorted(found["grouped"]) == sorted([*sent, big])
    assert found["members"] == 1


@pytest.mark.parametrize(
    ("writer", "reader"), [("ws", "ws"), ("tcp", "ws"), ("ws", "tcp")], ids=lambda t: t
)
def test_sdk_over_websocket_on_one_node(
    single: tuple[Target, NodeProcess], writer: str, reader: str
) -> None:
    target, _ = single
    _check_end_to_end(run(_end_to_end(target, f"one-{writer}-{reader}", writer, reader), 90))


@pytest.mark.parametrize(
    ("writer", "reader"), [("ws", "ws"), ("tcp", "ws"), ("ws", "tcp")], ids=lambda t: t
)
def test_sdk_over_websocket_on_a_cluster(cluster: Target, writer: str, reader: str) -> None:
    name = f"three-{writer}-{reader}"
    _check_end_to_end(run(_end_to_end(cluster, name, writer, reader), 120))


def test_cluster_metadata_reports_every_nodes_websocket_port(cluster: Target) -> None:
    async def scenario() -> bytes:
        client = await cluster.client("ws", 1)
        raw: bytes = await client.send_binary_request(int(CommandCode.GET_CLUSTER_METADATA), b"")
        return raw

    metadata = wire.ClusterMetadata.decode(run(scenario()))
    ports = {node.tcp_port: node.websocket_port for node in metadata.nodes}
    expected = {
        int(tcp.rpartition(":")[2]): int(ws.rpartition(":")[2])
        for tcp, ws in zip(cluster.tcp, cluster.ws, strict=True)
    }
    assert ports == expected


def test_a_node_without_a_websocket_listener_reports_port_zero(
    single: tuple[Target, NodeProcess], tmp_path: Path
) -> None:
    target, _ = single

    async def metadata_of(address: str) -> wire.ClusterMetadata:
        client = IggyClient.from_connection_string(f"iggy+tcp://iggy:{ROOT_PASSWORD}@{address}")
        await client.connect()
        return wire.ClusterMetadata.decode(
            await client.send_binary_request(int(CommandCode.GET_CLUSTER_METADATA), b"")
        )

    (with_ws,) = run(metadata_of(target.tcp[0])).nodes
    assert with_ws.websocket_port == int(target.ws[0].rpartition(":")[2])
    plain = start_node(tmp_path / "data")  # ws_address empty
    try:
        (without,) = run(metadata_of(plain.address)).nodes
    finally:
        plain.kill()
    assert without.websocket_port == 0


# -- raw WebSocket clients ---------------------------------------------------------------------


class RawWs:
    """A blocking WebSocket client (wsproto) that sends exactly the frames a test names."""

    def __init__(self, address: str, *, upgrade: bool = True) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.decoder = FrameDecoder()
        self.events: list[Any] = []
        self.client_id = 0x5EED | (1 << 100)
        self.session = 0
        self.request = 1
        self.closed: CloseConnection | None = None
        if upgrade:
            self.sock.sendall(self.ws.send(Request(host=address, target="/")))
            accepted = self._next_event()
            assert isinstance(accepted, AcceptConnection), accepted

    def close(self) -> None:
        self.sock.close()

    def _next_event(self) -> Any:
        while not self.events:
            data = self.sock.recv(1 << 20)
            self.ws.receive_data(data or None)
            self.events.extend(self.ws.events())
            if not data and not self.events:
                return None
        return self.events.pop(0)

    def send_message(self, data: bytes, *, chunks: int = 1) -> None:
        """One binary message, in ``chunks`` WebSocket frames (continuation frames)."""
        size = -(-len(data) // chunks)
        for index in range(chunks):
            part = data[index * size : (index + 1) * size]
            last = index == chunks - 1
            self.sock.sendall(self.ws.send(BytesMessage(data=part, message_finished=last)))

    def read_frame(self) -> wire.Frame | None:
        """The next Iggy frame, or None once the node closed (``closed`` says how)."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_MORE_BYTES:
                assert isinstance(frame, wire.Frame)
                return frame
            event = self._next_event()
            if event is None or isinstance(event, CloseConnection):
                self.closed = event
                return None
            if isinstance(event, BytesMessage):
                self.decoder.feed(event.data)
            else:
                assert isinstance(event, Pong), event

    def wait_closed(self) -> CloseConnection | None:
        """Read until the node closes; its close frame, or None (the socket just ended)."""
        while True:
            event = self._next_event()
            if event is None or isinstance(event, CloseConnection):
                return event

    def frame_for(self, code: int, body: bytes = b"") -> bytearray:
        return build_request_frame(
            code, body, client=self.client_id, session=self.session, request=self.request
        )

    def login(self) -> None:
        frame = self.frame_for(
            int(CommandCode.LOGIN_REGISTER), wire.LoginRegister("iggy", ROOT_PASSWORD).encode()
        )
        self.send_message(bytes(frame))
        reply = self.read_frame()
        assert reply is not None
        decoded = read_reply(CommandCode.LOGIN_REGISTER, reply)
        assert isinstance(decoded, wire.LoginRegisterReply)
        self.session = decoded.session

    def ping(self, *, chunks: int = 1) -> bool:
        self.send_message(bytes(self.frame_for(int(CommandCode.PING))), chunks=chunks)
        reply = self.read_frame()
        if reply is None:
            return False
        read_reply(CommandCode.PING, reply)  # raises on a refusal or an eviction
        return reply.reply_header().request == self.request


def _sdk_still_works(target: Target, name: str) -> list[bytes]:
    async def scenario() -> list[bytes]:
        client = await target.client("ws")
        await client.create_stream(name)
        await client.create_topic(name, "t", 1)
        await client.send_messages(name, "t", 0, [SendMessage(b"still here")])
        polled = await client.poll_messages(
            name,
            "t",
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.First(),
            count=10,
            auto_commit=False,
            partition_id=0,
        )
        return [bytes(m.payload()) for m in polled]

    return run(scenario())


def test_a_request_fragmented_into_continuation_frames_is_answered(
    single: tuple[Target, NodeProcess],
) -> None:
    target, _ = single
    client = RawWs(target.ws[0])
    try:
        assert client.ping(chunks=3)  # one 256-byte header over three frames
        client.login()
        assert client.ping(chunks=256)  # one byte per frame
        # A WebSocket ping between requests is answered with a pong; requests go on.
        client.sock.sendall(client.ws.send(Ping(payload=b"are you there")))
        assert client.ping()
    finally:
        client.close()


def test_a_frame_declared_over_the_limit_is_refused_and_others_are_served(
    single: tuple[Target, NodeProcess],
) -> None:
    target, _ = single
    bad = RawWs(target.ws[0])
    try:
        bad.login()
        # A frame header declaring more than the node's largest frame: refused on its
        # header, as over TCP, with an eviction, before any of its body is taken.
        header = bytearray(bad.frame_for(int(CommandCode.PING)))
        header[48:52] = (FRAME_SIZE_MAX + 1).to_bytes(4, "little")
        bad.send_message(bytes(header) + bytes(1024))
        evicted = bad.read_frame()
        assert evicted is not None and evicted.data[60] == 13  # an eviction frame
        assert bad.read_frame() is None
    finally:
        bad.close()
    assert _sdk_still_works(target, "after-oversized") == [b"still here"]


def test_a_message_longer_than_the_largest_frame_is_closed_with_1009(
    single: tuple[Target, NodeProcess],
) -> None:
    target, _ = single
    bad = RawWs(target.ws[0])
    try:
        bad.login()
        # One message of the largest frame and one byte more, in 64 KiB frames: the node
        # closes it (1009) at the byte past the limit.
        header = bytearray(bad.frame_for(int(CommandCode.PING)))
        header[48:52] = FRAME_SIZE_MAX.to_bytes(4, "little")
        message = bytes(header) + bytes(FRAME_SIZE_MAX + 1 - len(header))
        bad.send_message(message, chunks=len(message) // (64 * 1024) + 1)
        closed = bad.wait_closed()
    finally:
        bad.close()
    assert closed is not None and closed.code == 1009
    assert _sdk_still_works(target, "after-long-message") == [b"still here"]


def test_a_text_message_ends_the_connection_with_1003(single: tuple[Target, NodeProcess]) -> None:
    target, _ = single
    bad = RawWs(target.ws[0])
    try:
        bad.sock.sendall(bad.ws.send(TextMessage(data="hello")))
        closed = bad.wait_closed()
    finally:
        bad.close()
    assert closed is not None and closed.code == 1003


def test_garbage_instead_of_an_upgrade_gets_an_http_error(
    single: tuple[Target, NodeProcess],
) -> None:
    target, _ = single
    host, _, port = target.ws[0].rpartition(":")
    for garbage in (b"\x00\x01\x02 not http\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as sock:
            sock.sendall(garbage)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 4"), answer
    # Garbage after a good upgrade: an Iggy frame that is not one, evicted as over TCP.
    bad = RawWs(target.ws[0])
    try:
        bad.send_message(b"\xff" * 300)
        frame = bad.read_frame()
        assert frame is None or frame.data[60] == 13
        assert bad.read_frame() is None
    finally:
        bad.close()
    assert _sdk_still_works(target, "after-garbage") == [b"still here"]


def test_a_client_that_never_completes_the_upgrade_is_dropped(
    single: tuple[Target, NodeProcess],
) -> None:
    target, _ = single
    host, _, port = target.ws[0].rpartition(":")
    stalled = [
        socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) for _ in range(3)
    ]
    try:
        stalled[0].sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")  # no end
        stalled[1].sendall(b"GET / HT")
        # The others are served while the stalled clients hang on.
        assert _sdk_still_works(target, "beside-stalled") == [b"still here"]
        for sock in stalled:
            # Closed by the node after its frame read timeout, without an answer (the
            # socket's own timeout, far longer, would raise instead).
            assert sock.recv(4096) == b""
    finally:
        for sock in stalled:
            sock.close()
