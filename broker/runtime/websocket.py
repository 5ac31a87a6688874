"""The WebSocket transport: Iggy's binary frames in binary WebSocket messages.

Purpose: let a client that speaks Iggy 0.9's binary protocol over WebSocket (the SDK's
``iggy+ws://``) reach the very same connection handling as TCP. This module only turns a
WebSocket into a byte stream: :func:`accept_websocket` runs the HTTP/1.1 upgrade (h11),
and :class:`WebSocketStream` carries the payload of the client's binary messages to the
connection's frame decoder and each reply as one binary message (wsproto). Admission,
limits, timeouts and answers are ``broker.runtime.connection``'s, unchanged.

As Iggy 0.9's ``ws`` listener: any request path is accepted, no subprotocol and no
extension is negotiated (so no compression, and no decompression bomb), each reply frame
goes out as one binary message, a ping is answered with a pong, and a text message ends
the connection. The client's binary messages are read as one byte stream, as the SDK reads
the replies: a frame split over several messages, or a message fragmented into
continuation frames, is reassembled by the same decoder that reads TCP.

Invariants:

1. The upgrade request is at most ``HANDSHAKE_BYTES_MAX`` bytes and must complete within
   the caller's deadline (``limits.frame_read_timeout_s``, as a TLS handshake); anything
   but a well-formed upgrade is answered with an HTTP error and the connection closed.
2. Bounded memory: payload is taken from the socket only once what was read before has
   been handed to the connection, one read of at most the connection's ``max_bytes`` at a
   time; a message is at most ``message_size_bytes_max`` (the node's largest frame),
   checked as its bytes arrive; a larger one is refused (close code 1009) before it is
   buffered.
3. Writes are serialised: a reply and a pong never interleave on the socket, and a
   control frame is never cut by a cancelled read.
4. A WebSocket protocol violation (a text message, a bad frame, an unmasked client frame,
   an oversized message) is answered with a close frame naming it, recorded in
   ``failure``, and seen by the connection as the end of its stream.
"""

from __future__ import annotations

from typing import Final

import h11
import trio
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError, generate_accept_token

HANDSHAKE_BYTES_MAX: Final = 16 * 1024
"""Bytes of the HTTP upgrade request (request line and headers)."""
HANDSHAKE_RECEIVE_BYTES_MAX: Final = 4096
"""Bytes asked of the socket per read during the upgrade."""
CLOSE_TIMEOUT_S: Final = 1.0
"""How long a close frame may take to go out before the socket is closed anyway."""
MESSAGE_FRAME_BYTES_MAX: Final = 1024 * 1024
"""Payload bytes per WebSocket frame of a reply: a larger reply goes out as one message in
several frames (continuation frames), under the SDK's 16 MiB frame limit whatever the
reply's size."""
WEBSOCKET_VERSION: Final = b"13"
_LINK_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class HandshakeFailed(Exception):
    """The client did not complete a WebSocket upgrade (the message says why)."""


def _header_tokens(headers: list[tuple[bytes, bytes]], name: bytes) -> set[bytes]:
    tokens: set[bytes] = set()
    for key, value in headers:
        if key == name:
            tokens.update(part.strip().lower() for part in value.split(b","))
    return tokens


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _upgrade_problem(request: h11.Request) -> tuple[int, str] | None:
    """Why ``request`` is not a WebSocket upgrade this listener takes (HTTP status and
    reason), or None."""
    headers = list(request.headers)
    if request.method != b"GET":
        return 405, "a WebSocket upgrade is a GET"
    if b"websocket" not in _header_tokens(headers, b"upgrade"):
        return 426, "not a WebSocket upgrade (Upgrade: websocket missing)"
    if b"upgrade" not in _header_tokens(headers, b"connection"):
        return 426, "not a WebSocket upgrade (Connection: Upgrade missing)"
    if _header(headers, b"sec-websocket-version") != WEBSOCKET_VERSION:
        return 426, "unsupported WebSocket version (13 only)"
    key = _header(headers, b"sec-websocket-key")
    if key is None or not key.strip():
        return 400, "Sec-WebSocket-Key missing"
    return None


async def accept_websocket(stream: trio.abc.Stream, message_size_bytes_max: int) -> WebSocketStream:
    """Run the server side of the upgrade on ``stream`` (the caller bounds its time).

    Returns:
        The upgraded stream.

    Raises:
        HandshakeFailed: the client sent something else than an upgrade (it was answered
            with an HTTP error where it could be), or went away.
    """
    http = h11.Connection(h11.SERVER, max_incomplete_event_size=HANDSHAKE_BYTES_MAX)
    while True:
        try:
            event = http.next_event()
        except h11.RemoteProtocolError as error:
            await _refuse(stream, http, error.error_status_hint, f"bad HTTP request: {error}")
            raise HandshakeFailed(f"bad HTTP request: {error}") from None
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive_some(HANDSHAKE_RECEIVE_BYTES_MAX)
            except _LINK_ERRORS as error:
                raise HandshakeFailed(f"connection lost during the upgrade: {error}") from None
            if not data:
                raise HandshakeFailed("closed before completing the upgrade")
            http.receive_data(bytes(data))
            continue
        if isinstance(event, h11.Request):
            break
        raise HandshakeFailed(f"unexpected {type(event).__name__} during the upgrade")
    problem = _upgrade_problem(event)
    if problem is not None:
        status, reason = problem
        await _refuse(stream, http, status, reason)
        raise HandshakeFailed(reason)
    key = _header(list(event.headers), b"sec-websocket-key")
    assert key is not None
    response = h11.InformationalResponse(
        status_code=101,
        headers=[
            (b"Upgrade", b"websocket"),
            (b"Connection", b"Upgrade"),
            (b"Sec-WebSocket-Accept", generate_accept_token(key.strip())),
        ],
        reason=b"Switching Protocols",
    )
    data = http.send(response)
    assert data is not None
    try:
        await stream.send_all(data)
    except _LINK_ERRORS as error:
        raise HandshakeFailed(f"connection lost during the upgrade: {error}") from None
    # Bytes a client sent after its request without waiting for the 101 are WebSocket
    # frames already: they are the new connection's first bytes.
    trailing, _closed = http.trailing_data
    connection = WsConnection(ConnectionType.SERVER)
    return WebSocketStream(stream, connection, message_size_bytes_max, bytes(trailing))


async def _refuse(stream: trio.abc.Stream, http: h11.Connection, status: int, reason: str) -> None:
    """Answer a failed upgrade with an HTTP error, if the client is still there."""
    if http.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = (reason + "\n").encode()
    try:
        head = http.send(
            h11.Response(
                status_code=status,
                headers=[
                    (b"Content-Type", b"text/plain; charset=utf-8"),
                    (b"Content-Length", str(len(body)).encode()),
                    (b"Connection", b"close"),
                    (b"Sec-WebSocket-Version", WEBSOCKET_VERSION),
                ],
            )
        )
        tail = http.send(h11.Data(data=body)) or b""
        end = http.send(h11.EndOfMessage()) or b""
        await stream.send_all((head or b"") + tail + end)
    except (h11.LocalProtocolError, *_LINK_ERRORS):
        return


class WebSocketStream(trio.abc.Stream):
    """An upgraded WebSocket as the byte stream a client connection reads and writes.

    ``receive_some`` returns the payload of binary messages, in order, as it arrives;
    ``send_all`` sends its bytes as one binary message. See the module docstring.

    Args:
        transport: The upgraded TCP or TLS stream.
        connection: The wsproto server connection, past the upgrade.
        message_size_bytes_max: The largest binary message taken.
        initial: Bytes read past the upgrade request.
    """

    def __init__(
        self,
        transport: trio.abc.Stream,
        connection: WsConnection,
        message_size_bytes_max: int,
        initial: bytes = b"",
    ) -> None:
        self.transport = transport
        self._ws = connection
        self._message_size_bytes_max = message_size_bytes_max
        self._message_bytes = 0
        """Payload bytes of the message arriving so far."""
        self._pending = bytearray()
        """Payload received and not yet handed out (invariant 2)."""
        self._initial = initial
        self._ended = False
        self._send_lock = trio.Lock()
        self.failure: str | None = None
        """The protocol violation that ended the stream (invariant 4), or None."""
        self.messages_received = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        want = max_bytes if max_bytes is not None else HANDSHAKE_BYTES_MAX
        while not self._pending:
            if self._ended:
                return b""
            if self._initial:
                data, self._initial = self._initial, b""
            else:
                data = bytes(await self.transport.receive_some(want))
            if not data:
                self._ended = True
                return b""
            self._ws.receive_data(data)
            await self._on_events()
        taken = bytes(self._pending[:want])
        del self._pending[:want]
        return taken

    async def _on_events(self) -> None:
        for event in self._ws.events():
            if self._ended:
                return
            await self._on_event(event)

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, BytesMessage):
            self._message_bytes += len(event.data)
            if self._message_bytes > self._message_size_bytes_max:
                reason = f"a message over {self._message_size_bytes_max} bytes"
                await self._fail(CloseReason.MESSAGE_TOO_BIG, reason)
                return
            self._pending += event.data
            if event.message_finished:
                self._message_bytes = 0
                self.messages_received += 1
        elif isinstance(event, TextMessage):
            await self._fail(CloseReason.UNSUPPORTED_DATA, "a text message (binary frames only)")
        elif isinstance(event, Ping):
            await self._send_event(event.response())
        elif isinstance(event, CloseConnection):
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                # The client closed: answer its close and end the stream.
                await self._send_event(event.response())
                self._ended = True
            else:
                # wsproto reports a frame it cannot parse as a close with its reason.
                code = event.code if isinstance(event.code, CloseReason) else None
                await self._fail(code or CloseReason.PROTOCOL_ERROR, event.reason or "a bad frame")
        else:
            assert isinstance(event, Pong), event  # a pong needs no answer

    async def _fail(self, code: CloseReason, reason: str) -> None:
        self.failure = f"WebSocket {code.name.lower().replace('_', ' ')}: {reason}"
        self._ended = True
        self._pending.clear()
        await self._send_event(CloseConnection(code=code, reason=reason[:120]))

    async def _send_event(self, event: Event) -> None:
        """Send a control frame, if the connection still takes frames; a client gone is
        found by the next read. The send is shielded (and bounded by ``CLOSE_TIMEOUT_S``):
        a read cancelled by the connection's timers must not leave half a frame on the
        socket ahead of the next reply."""
        with trio.CancelScope(shield=True):
            await self._send_control(event)

    async def _send_control(self, event: Event) -> None:
        async with self._send_lock:
            try:
                data = self._ws.send(event)
            except LocalProtocolError:
                return
            sent = False
            try:
                with trio.move_on_after(CLOSE_TIMEOUT_S):
                    await self.transport.send_all(data)
                    sent = True
            except _LINK_ERRORS:
                pass
            if not sent:
                self._ended = True  # the client does not read: nothing more from it

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        async with self._send_lock:
            out = bytearray()
            try:
                for start in range(0, max(1, len(view)), MESSAGE_FRAME_BYTES_MAX):
                    chunk = bytes(view[start : start + MESSAGE_FRAME_BYTES_MAX])
                    last = start + MESSAGE_FRAME_BYTES_MAX >= len(view)
                    out += self._ws.send(BytesMessage(data=chunk, message_finished=last))
            except LocalProtocolError:
                raise trio.ClosedResourceError("the WebSocket is closing") from None
            await self.transport.send_all(out)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def close_gracefully(self) -> None:
        """Send a normal close frame if none went either way yet (bounded)."""
        if self._ws.state is ConnectionState.OPEN:
            await self._send_event(CloseConnection(code=CloseReason.NORMAL_CLOSURE))

    async def aclose(self) -> None:
        await self.transport.aclose()
