"""Replies written to a real socket: what the kernel takes at once is written without
waiting, the rest is waited for (bounded by ``frame_read_timeout_s``), in order, whole.

A connected pair of Unix sockets carries the bytes (in a ``trio.SocketStream``, the TCP
listener's stream type, so the connection writes to the socket itself); a node stand-in
answers each PING with a reply of many parts, large enough that the kernel never takes
it in one write.
"""

from __future__ import annotations

import trio
import trio.testing

from broker.core.connections import ConnectionContext, Response
from broker.runtime.config import load_config
from broker.runtime.connection import IOVECS_MAX, Connection
from broker.runtime.stats import NodeCounters
from sdk import wire
from sdk.wire import (
    HEADER_SIZE,
    NEED_MORE_BYTES,
    CommandCode,
    Frame,
    FrameDecoder,
    build_reply_frame_parts,
    build_request_frame,
)

CLIENT = 0x5EED
PART_SIZE = 4_099
"""Not a multiple of any buffer size, so writes stop inside parts."""
PARTS = 2 * IOVECS_MAX + 17
"""More parts than one gathered write takes."""


def _ping(request: int) -> bytes:
    return bytes(
        build_request_frame(CommandCode.PING, b"", client=CLIENT, session=0, request=request)
    )


def _part(request: int, index: int) -> bytes:
    return bytes([(request * 31 + index) % 251]) * PART_SIZE


class _Node:
    """Answers every request with ``PARTS`` parts of ``PART_SIZE`` bytes."""

    def __init__(self, **limits: float) -> None:
        self.config = load_config(limits=limits)
        self.counters = NodeCounters()
        self.refusals: list[str] = []

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response:
        header = frame.request_header()
        context.client_id = header.client
        body = [_part(header.request, index) for index in range(PARTS)]
        return Response(build_reply_frame_parts(header, body))

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None:
        self.refusals.append(reason)

    def connection_busy(self, context: ConnectionContext) -> None:
        pass


def _socket_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    first, second = trio.socket.socketpair()
    return trio.SocketStream(first), trio.SocketStream(second)


async def _frame(stream: trio.SocketStream, decoder: FrameDecoder, chunk: int) -> Frame | None:
    """The next frame, read ``chunk`` bytes at a time with a pause between reads, so the
    writer finds the socket full again and again."""
    while True:
        frame = decoder.next_frame()
        if frame is not NEED_MORE_BYTES:
            return frame
        data = await stream.receive_some(chunk)
        if not data:
            return None
        decoder.feed(data)
        await trio.sleep(0.001)


def test_large_replies_to_a_slow_reader_arrive_whole_and_in_order() -> None:
    async def main() -> None:
        node = _Node(frame_read_timeout_s=30.0)
        client, server = _socket_pair()
        connection = Connection(node, server, ConnectionContext("socket"))
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            await client.send_all(_ping(1) + _ping(2) + _ping(3))
            decoder = FrameDecoder()
            for request in (1, 2, 3):
                frame = await _frame(client, decoder, 65_536)
                assert frame is not None and frame.command is wire.Command.REPLY
                reply = frame.reply_header()
                assert (reply.request, reply.status) == (request, 0)
                body = bytes(frame.data[HEADER_SIZE:])
                assert len(body) == PARTS * PART_SIZE
                assert body == b"".join(_part(request, index) for index in range(PARTS))
            nursery.cancel_scope.cancel()
        assert node.counters.bytes_sent == 3 * (HEADER_SIZE + PARTS * PART_SIZE)
        assert node.counters.connections_dropped == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_reader_that_stops_reading_is_dropped_after_the_frame_read_timeout() -> None:
    async def main() -> None:
        node = _Node(frame_read_timeout_s=2.0)
        client, server = _socket_pair()
        connection = Connection(node, server, ConnectionContext("socket"))
        async with client, server:
            started = trio.current_time()
            await client.send_all(_ping(1))
            await connection.run()  # the client never reads: the reply cannot be written
            ended_after = trio.current_time() - started
        # Part of the reply went into the socket at once; the rest waited for the timeout.
        assert 0 < node.counters.bytes_sent < HEADER_SIZE + PARTS * PART_SIZE
        assert 2.0 <= ended_after < 2.5
        assert node.counters.connections_dropped == 1
        assert "connection closed: it does not read its replies" in node.refusals

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_reader_that_closes_its_socket_ends_the_connection_without_waiting() -> None:
    async def main() -> None:
        node = _Node(frame_read_timeout_s=60.0)
        client, server = _socket_pair()
        connection = Connection(node, server, ConnectionContext("socket"))
        async with server:
            await client.send_all(_ping(1))
            await client.aclose()
            started = trio.current_time()
            await connection.run()
        assert trio.current_time() - started < 1.0
        assert node.counters.connections_dropped == 1

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
