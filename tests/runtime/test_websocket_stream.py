"""The WebSocket adapter on trio memory streams: the upgrade, how messages become the
byte stream a connection reads, and how it refuses what it must (no sockets, no node)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import FrameProtocol

from broker.runtime.websocket import (
    MESSAGE_FRAME_BYTES_MAX,
    HandshakeFailed,
    WebSocketStream,
    accept_websocket,
)

MESSAGE_MAX = 64 * 1024
TIMEOUT_S = 5.0


class Peer:
    """The client end: a wsproto client over one end of a memory stream pair."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[Any] = []

    async def send(self, event: Any) -> None:
        await self.stream.send_all(self.ws.send(event))

    async def next_event(self) -> Any:
        while not self.events:
            data = await self.stream.receive_some(1 << 20)
            self.ws.receive_data(bytes(data) or None)
            self.events.extend(self.ws.events())
        return self.events.pop(0)


def run(scenario: Callable[[Peer, trio.abc.Stream], Awaitable[None]]) -> None:
    async def main() -> None:
        client, server = trio.testing.memory_stream_pair()
        with trio.fail_after(TIMEOUT_S):
            await scenario(Peer(client), server)

    trio.run(main)


async def upgraded(peer: Peer, server: trio.abc.Stream, *, then: bytes = b"") -> WebSocketStream:
    """Run the upgrade: the client's request (and ``then`` in the same write) and the
    server's acceptance."""
    request = peer.ws.send(Request(host="node", target="/any/path"))
    await peer.stream.send_all(request + then)
    stream = await accept_websocket(server, MESSAGE_MAX)
    assert isinstance(await peer.next_event(), AcceptConnection)
    return stream


async def read_all(stream: WebSocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(1024)
        assert chunk, "the stream ended early"
        data += chunk
    return data


def test_frames_sent_right_after_the_upgrade_request_are_not_lost() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        # A client that does not wait for the 101: its first message is in the same write.
        request = peer.ws.send(Request(host="node", target="/"))
        first = FrameProtocol(client=True, extensions=[]).send_data(b"early bytes", True)
        await peer.stream.send_all(request + first)
        stream = await accept_websocket(server, MESSAGE_MAX)
        assert await read_all(stream, 11) == b"early bytes"

    run(scenario)


def test_continuation_frames_and_a_ping_between_them_make_one_ordered_byte_stream() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        stream = await upgraded(peer, server)
        await peer.send(BytesMessage(data=b"abc", message_finished=False))
        await peer.send(Ping(payload=b"p"))  # a control frame may come between fragments
        await peer.send(BytesMessage(data=b"def", message_finished=False))
        await peer.send(BytesMessage(data=b"ghi", message_finished=True))
        await peer.send(BytesMessage(data=b"jkl"))
        assert await read_all(stream, 12) == b"abcdefghijkl"
        assert isinstance(await peer.next_event(), Pong)
        assert stream.messages_received == 2
        # A read asks for at most what the connection wants.
        await peer.send(BytesMessage(data=b"0123456789"))
        chunks: list[bytes] = []
        while sum(map(len, chunks)) < 10:
            chunks.append(await stream.receive_some(4))
        assert b"".join(chunks) == b"0123456789"
        assert max(map(len, chunks)) <= 4

    run(scenario)


def test_a_reply_is_one_message_in_frames_of_at_most_a_mebibyte() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        stream = await upgraded(peer, server)
        reply = bytes(range(256)) * ((2 * MESSAGE_FRAME_BYTES_MAX + 1000) // 256)

        async def receive() -> tuple[bytes, int]:
            data, frames = b"", 0
            while True:
                event = await peer.next_event()
                assert isinstance(event, BytesMessage)
                data += event.data
                frames += event.frame_finished
                if event.message_finished:
                    return data, frames

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, reply)
            data, frames = await receive()
        assert data == reply
        assert frames == 3
        await stream.send_all(b"small")
        assert await receive() == (b"small", 1)

    run(scenario)


def test_a_client_close_is_answered_and_ends_the_stream_without_a_failure() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        stream = await upgraded(peer, server)
        await peer.send(CloseConnection(code=1000))
        assert await stream.receive_some(100) == b""
        assert stream.failure is None
        answer = await peer.next_event()
        assert isinstance(answer, CloseConnection) and answer.code == 1000
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"too late")

    run(scenario)


@pytest.mark.parametrize(
    ("send", "code"),
    [
        (BytesMessage(data=bytes(MESSAGE_MAX + 1)), 1009),
        (TextMessage(data="text"), 1003),
    ],
    ids=["too-long", "text"],
)
def test_a_message_the_node_does_not_take_closes_with_its_code(send: Any, code: int) -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        stream = await upgraded(peer, server)
        await peer.send(BytesMessage(data=b"kept"))
        assert await stream.receive_some(100) == b"kept"

        async def send_it() -> None:
            await peer.send(send)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_it)
            assert await stream.receive_some(1 << 20) == b""
        assert stream.failure is not None
        answer = await peer.next_event()
        assert isinstance(answer, CloseConnection) and answer.code == code

    run(scenario)


def test_an_unmasked_client_frame_is_a_protocol_error() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        stream = await upgraded(peer, server)
        await peer.stream.send_all(b"\x82\x05hello")  # FIN, binary, no mask bit
        assert await stream.receive_some(100) == b""
        assert stream.failure is not None
        answer = await peer.next_event()
        assert isinstance(answer, CloseConnection) and answer.code == 1002

    run(scenario)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST / HTTP/1.1\r\nHost: n\r\nContent-Length: 0\r\n\r\n", 405),
        (b"GET / HTTP/1.1\r\nHost: n\r\n\r\n", 426),
        (
            b"GET / HTTP/1.1\r\nHost: n\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: a2V5a2V5a2V5a2V5a2V5aw==\r\n\r\n",
            426,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: n\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n",
            400,
        ),
        (b"\x16\x03\x01 a TLS hello to a plain listener\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: n\r\nX-Long: " + b"x" * (20 * 1024) + b"\r\n\r\n", 431),
    ],
    ids=["post", "no-upgrade", "version-8", "no-key", "garbage", "headers-too-long"],
)
def test_anything_but_an_upgrade_gets_an_http_error(request_bytes: bytes, status: int) -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        async def send() -> None:
            await peer.stream.send_all(request_bytes)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            with pytest.raises(HandshakeFailed):
                await accept_websocket(server, MESSAGE_MAX)
        answer = await peer.stream.receive_some(4096)
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer

    run(scenario)


def test_a_client_that_closes_during_the_upgrade_fails_it() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        await peer.stream.send_all(b"GET / HTTP/1.1\r\nHost: n\r\n")
        await peer.stream.aclose()
        with pytest.raises(HandshakeFailed, match="closed before"):
            await accept_websocket(server, MESSAGE_MAX)

    run(scenario)


def test_the_upgrade_names_no_subprotocol_even_when_offered() -> None:
    async def scenario(peer: Peer, server: trio.abc.Stream) -> None:
        request = peer.ws.send(Request(host="node", target="/", subprotocols=["iggy"]))
        await peer.stream.send_all(request)
        await accept_websocket(server, MESSAGE_MAX)
        event = await peer.next_event()
        # wsproto's client refuses a 101 without a subprotocol it asked for; the point
        # is the node did not pick one (as Iggy's listener, which negotiates none).
        assert isinstance(event, AcceptConnection | RejectConnection)
        if isinstance(event, AcceptConnection):
            assert event.subprotocol is None

    run(scenario)
