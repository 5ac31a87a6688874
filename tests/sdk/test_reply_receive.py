"""How the trio client's plain-TCP connection reads a reply larger than its first read:
straight into one buffer of the reply's size, to the reply's end and no further."""

from __future__ import annotations

import socket

import pytest
import trio

from sdk._protocol import ConnectionLost
from sdk.client import REPLY_HEAD_BYTES_MAX, _Connection
from sdk.connection_string import NodeAddress
from sdk.wire import CommandCode, RequestHeader, build_reply_frame, build_request_frame
from tests.sdk.conftest import run_trio

ADDRESS = NodeAddress("127.0.0.1", 1)


def _request(number: int) -> bytearray:
    return build_request_frame(CommandCode.PING, b"", client=7, session=3, request=number)


def _reply(number: int, body: bytes) -> bytearray:
    return build_reply_frame(RequestHeader.unpack_from(_request(number)), body)


async def _pair() -> tuple[_Connection, socket.socket]:
    """A client connection and the plain socket of its peer (the node's end)."""
    ours, theirs = socket.socketpair()
    connection = _Connection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    theirs.setblocking(False)
    return connection, theirs


def _close(connection: _Connection) -> None:
    if connection.sock is not None:
        connection.sock.close()


async def _write(sock: socket.socket, data: bytes | bytearray, piece: int) -> None:
    """Write ``data`` ``piece`` bytes at a time, with a scheduling turn between pieces, so
    the reader sees the reply arrive in parts."""
    for at in range(0, len(data), piece):
        chunk = memoryview(data)[at : at + piece]
        while chunk:
            await trio.lowlevel.wait_writable(sock)
            chunk = chunk[sock.send(chunk) :]
        await trio.sleep(0.001)


@pytest.mark.parametrize("piece", [1_000, 16_384, 70_000])
def test_a_large_reply_in_pieces_comes_whole_and_the_next_frame_stays_for_the_next_read(
    piece: int,
) -> None:
    first = bytes(range(256)) * 1_000  # 256 kB: many first reads' worth
    second = b"second reply"
    assert len(first) > REPLY_HEAD_BYTES_MAX

    async def body() -> None:
        connection, node = await _pair()
        try:
            async with trio.open_nursery() as nursery:
                # Both replies go out back to back: the first read of the second exchange
                # must find the second reply's bytes still in the socket.
                nursery.start_soon(_write, node, _reply(1, first) + _reply(2, second), piece)
                reply = await connection.exchange(_request(1), ADDRESS)
                assert reply.reply_header().request == 1
                assert bytes(reply.body) == first
                again = await connection.exchange(_request(2), ADDRESS)
                assert again.reply_header().request == 2
                assert bytes(again.body) == second
        finally:
            node.close()
            _close(connection)

    run_trio(body)


def test_a_reply_cut_off_by_the_node_closing_is_a_lost_connection() -> None:
    whole = _reply(1, b"x" * 100_000)

    async def cut_off(node: socket.socket) -> None:
        await trio.lowlevel.wait_readable(node)
        node.recv(1024)  # the request
        await _write(node, whole[: len(whole) // 2], 20_000)
        node.close()

    async def body() -> None:
        connection, node = await _pair()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cut_off, node)
                with pytest.raises(ConnectionLost):
                    await connection.exchange(_request(1), ADDRESS)
        finally:
            node.close()
            _close(connection)

    run_trio(body)
