"""A raw-frame Iggy client on ``sdk.wire``, for tests that must name exact frames.

Purpose: speak the Iggy 0.9 protocol to one node with the standard library's sockets, one
request at a time, with the request number, session and client id in the test's hands
(forged numbers, replays, frames sent on a chosen connection). It is not the SDK
(``sdk.Client``): no reconnects, retries or leader discovery, on purpose, so each test
observes exactly what the node it was pointed at answers.

Invariants: every socket operation has a timeout; a reply is matched to its request by
request number; server refusals raise :class:`sdk.wire.ServerRejected`, evictions
:class:`sdk.wire.SessionEvicted`.
"""

from __future__ import annotations

import os
import socket
from typing import Final

from sdk import wire
from sdk.wire import (
    NEED_MORE_BYTES,
    CommandCode,
    Frame,
    FrameDecoder,
    Operation,
    build_request_frame,
    operation_for_code,
    read_reply,
)

TIMEOUT_S_DEFAULT: Final = 10.0
RECEIVE_BYTES: Final = 1 << 20


class WireClient:
    """A lock-step connection to one node.

    Args:
        address: ``HOST:PORT`` of the node's client listener.
        timeout_s: Bound on every connect, send and receive.
    """

    def __init__(
        self, address: str, *, timeout_s: float = TIMEOUT_S_DEFAULT, source: str | None = None
    ) -> None:
        """Connect to ``address``, from the local IP ``source`` if given (any address of
        127.0.0.0/8 is this machine: a test's second client host)."""
        host, _, port = address.rpartition(":")
        self.address = address
        self.sock = socket.create_connection(
            (host, int(port)),
            timeout=timeout_s,
            source_address=None if source is None else (source, 0),
        )
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = int.from_bytes(os.urandom(16), "little") | 1
        self.session = 0
        self.request = 1
        self._decoder = FrameDecoder()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw frames -------------------------------------------------------------------------

    def send_frame(self, frame: bytes | bytearray | memoryview) -> None:
        self.sock.sendall(frame)

    def read_frame(self) -> Frame | None:
        """The next frame, or None when the node closed the connection."""
        while True:
            frame = self._decoder.next_frame()
            if frame is not NEED_MORE_BYTES:
                return frame
            data = self.sock.recv(RECEIVE_BYTES)
            if not data:
                return None
            self._decoder.feed(data)

    def frame_for(self, code: int, body: bytes | bytearray = b"") -> bytearray:
        """A request frame stamped with this client's ids and the next request number."""
        return build_request_frame(
            code, body, client=self.client_id, session=self.session, request=self.request
        )

    def call_raw(self, code: int, body: bytes | bytearray = b"") -> Frame:
        """Send one request and return its reply frame (an eviction included)."""
        operation = operation_for_code(code)
        self.send_frame(self.frame_for(code, body))
        if operation is not Operation.NON_REPLICATED and operation is not Operation.REGISTER:
            self.request += 1  # replicated requests consume their number, as the SDK does
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("the node closed the connection")
        return frame

    # -- typed calls ------------------------------------------------------------------------

    def call(self, code: CommandCode, payload: wire.RequestPayload) -> wire.ReplyPayload | None:
        frame = self.call_raw(int(code), payload.encode())
        return read_reply(code, frame)

    def login(self, username: str, password: str) -> int:
        """Log in; returns the session."""
        reply = self.call(CommandCode.LOGIN_REGISTER, wire.LoginRegister(username, password))
        assert isinstance(reply, wire.LoginRegisterReply)
        self.session = reply.session
        self.request = 1
        return reply.session

    def ping(self) -> None:
        self.call(CommandCode.PING, wire.Empty())
