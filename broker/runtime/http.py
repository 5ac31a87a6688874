"""The HTTP listener: HTTP/1.1 (h11) over trio, TLS with the client listener's certificate.

Purpose: move HTTP requests between sockets and ``broker.runtime.http_api`` and enforce
the same kind of bounds as the TCP listener (``broker.runtime.connection``); the API
decides every answer, through the node's own request handling.

Invariants:

1. Connections count against ``limits.connections_max`` together with the TCP ones
   (``Node.connection_opened``); one more is closed as it is accepted. Until one of its
   requests carries a valid token or logs in, a connection counts besides among its
   address's connections that have not logged in, in the table the TCP listener uses
   (``limits.unauthenticated_connections_per_address_max``; one more is closed as it is
   accepted), and it is closed once ``limits.login_timeout_s`` have passed since it was
   accepted (the request in hand is answered first; it may be the login). Public routes
   (ping, metrics, login) are served meanwhile but do not extend that time.
2. Bounded memory: a request head is at most ``HEAD_SIZE_MAX`` bytes (431 beyond it); a
   body at most ``limits.frame_size_bytes_max`` (413, then the connection is closed,
   before the body is read when its length is declared); a request without a valid
   bearer token at most ``UNAUTHENTICATED_FRAME_SIZE_MAX`` (413). A declared body is
   reserved from the node-wide ``limits.incoming_frame_bytes_max`` budget (the TCP
   listener's ``ConnectionGuard``) before it is read, and released once answered.
3. Timeouts: a connection with no request started for ``limits.idle_timeout_s`` is
   closed; a request whose head and body do not arrive within
   ``limits.frame_read_timeout_s`` of its first byte (a client that trickles its headers)
   is closed; an answer the client does not take within that time closes it. None of
   this touches another connection.
4. One request at a time per connection (HTTP/1.1 without pipelining in flight): h11
   holds any pipelined bytes until the answer is sent.
5. A malformed request (h11's protocol error) is answered 400 and the connection closed.

Theory of operation: ``serve_http`` accepts on the listeners; each connection runs
``HttpConnection.run``: read until h11 has a whole request (head, then body, under the
bounds above), hand it to ``HttpApi.answer``, write the answer, start the next cycle.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final, Protocol

import h11
import trio

from broker.core.admission import UNAUTHENTICATED_FRAME_SIZE_MAX
from broker.core.connections import ConnectionContext
from broker.runtime.config import Config
from broker.runtime.connection import AddressSlot, ConnectionGuard, admit_address
from broker.runtime.http_api import ApiRequest, ApiResponse, HttpApi, parse_query
from broker.runtime.stats import NodeCounters

log = logging.getLogger("viewstream.http")

HEAD_SIZE_MAX: Final = 16 * 1024
"""Bytes of a request line and headers; more is answered 431 and the connection closed."""
RECEIVE_BYTES_MAX: Final = 64 * 1024
"""Bytes asked of the socket per read."""
SERVER_HEADER: Final = b"viewstream"
_LINK_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class HttpHost(Protocol):
    """What the HTTP listener needs of its node."""

    config: Config
    counters: NodeCounters

    def connection_opened(self) -> bool: ...

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None: ...


class _Closed(Exception):
    """The connection is over (the client left, timed out or broke the protocol)."""


class HttpConnection:
    """One HTTP client connection; see the module docstring.

    Args:
        host: The node (its limits and counters).
        api: The routes.
        stream: The client's byte stream.
        address: The client's ``ip:port``.
        guard: The node's connection guard (its incoming byte budget).
        slot: The connection's place among its address's connections that have not
            logged in; given back at its first authenticated request.
    """

    def __init__(
        self,
        host: HttpHost,
        api: HttpApi,
        stream: trio.abc.Stream,
        address: str,
        guard: ConnectionGuard,
        slot: AddressSlot,
    ) -> None:
        self._host = host
        self._slot = slot
        self._authenticated = False
        self._login_deadline = trio.current_time() + host.config.limits.login_timeout_s
        self._api = api
        self._stream = stream
        self._address = address
        self._guard = guard
        self._limits = host.config.limits
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_SIZE_MAX)
        self.requests = 0
        self._scope = trio.CancelScope()
        self._answering = False
        self._closing = False

    def shutdown(self) -> None:
        """Close after the request being answered, or at once if there is none."""
        self._closing = True
        if not self._answering:
            self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            try:
                while not self._closing:
                    await self._one_request()
                    if self._h11.our_state is not h11.DONE:
                        return
                    if self._h11.their_state is not h11.DONE:
                        return
                    self._h11.start_next_cycle()
            except _Closed:
                return

    async def _next_event(self, deadline: float) -> h11.Event | type[h11.PAUSED]:
        """h11's next event, reading the socket (until ``deadline``) when it needs bytes."""
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as error:
                await self._refuse(error.error_status_hint, f"malformed request: {error}")
                raise _Closed from None
            if event is not h11.NEED_DATA:
                assert event is h11.PAUSED or isinstance(event, h11.Event)
                return event
            with trio.move_on_at(deadline):
                try:
                    data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
                except _LINK_ERRORS:
                    raise _Closed from None
                self._host.counters.bytes_received += len(data)
                self._h11.receive_data(bytes(data))
                continue
            self._host.counters.connections_dropped += 1
            log.info("closing HTTP connection %s: request timed out", self._address)
            raise _Closed

    def _login_expired(self) -> bool:
        if self._authenticated or trio.current_time() < self._login_deadline:
            return False
        self._host.counters.connections_dropped += 1
        timeout = f"{self._limits.login_timeout_s:g}"
        log.info("closing HTTP connection %s: not logged in within %s s", self._address, timeout)
        return True

    async def _one_request(self) -> None:
        limits = self._limits
        if self._login_expired():
            raise _Closed
        # Idle until the first byte of a request, then the whole request within the
        # frame read time (invariant 3); before login, no later than the login deadline
        # (invariant 1).
        if not self._h11.trailing_data[0]:
            idle_deadline = trio.current_time() + limits.idle_timeout_s
            if not self._authenticated:
                idle_deadline = min(idle_deadline, self._login_deadline)
            with trio.move_on_at(idle_deadline):
                try:
                    data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
                except _LINK_ERRORS:
                    raise _Closed from None
                if not data:
                    raise _Closed
                self._host.counters.bytes_received += len(data)
                self._h11.receive_data(bytes(data))
            if self._h11.their_state is h11.IDLE and not self._h11.trailing_data[0]:
                self._login_expired()  # logs why, if that is why
                raise _Closed  # idle: nothing arrived in time
        deadline = trio.current_time() + limits.frame_read_timeout_s
        event = await self._next_event(deadline)
        if isinstance(event, h11.ConnectionClosed):
            raise _Closed
        if not isinstance(event, h11.Request):
            await self._refuse(400, "expected a request")
            raise _Closed
        self.requests += 1
        # h11 bounds a head that is still arriving; one that came whole in a read is
        # bounded here.
        head_size = len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers)
        if head_size > HEAD_SIZE_MAX:
            await self._refuse(431, f"a request head of {head_size} bytes")
            raise _Closed
        headers = {name.lower(): value for name, value in event.headers}
        authorization = headers.get(b"authorization")
        size_max = limits.frame_size_bytes_max
        if authorization is None:
            size_max = min(size_max, UNAUTHENTICATED_FRAME_SIZE_MAX)
        declared = headers.get(b"content-length")
        declared_size = int(declared) if declared is not None else 0  # h11 checked digits
        if declared_size > size_max:
            await self._refuse(413, f"a body of {declared_size} bytes exceeds {size_max}")
            raise _Closed
        if declared_size:
            with trio.move_on_at(deadline) as waited:
                await self._guard.reserve(declared_size)
            if waited.cancelled_caught:  # not reserved: nothing to give back
                self._host.counters.connections_dropped += 1
                raise _Closed
        reserved = declared_size
        try:
            if self._h11.they_are_waiting_for_100_continue:
                # The client waits for a go-ahead before its body (curl does past 1 KiB).
                await self._send_bytes(
                    self._h11.send(h11.InformationalResponse(status_code=100, headers=[]))
                )
            body = await self._read_body(deadline, size_max)
            if len(body) > reserved and not self._guard.reserve_nowait(len(body) - reserved):
                await self._refuse(503, "the node's incoming byte budget is spent")
                raise _Closed
            reserved = max(reserved, len(body))
            self._answering = True
            target = event.target.decode("ascii", "replace")
            path, _, query = target.partition("?")
            request = ApiRequest(
                method=event.method.decode("ascii", "replace").upper(),
                path=path,
                query=parse_query(query),
                body=body,
                address=self._address,
                authorization=(
                    authorization.decode("latin-1") if authorization is not None else None
                ),
            )
            answer = await self._api.answer(request)
            if request.authenticated and not self._authenticated:
                self._authenticated = True
                self._slot.release()
            if self._closing:
                answer.headers.append((b"connection", b"close"))
            await self._send(answer)
        finally:
            self._answering = False
            if reserved:
                self._guard.release(reserved)

    async def _read_body(self, deadline: float, size_max: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event(deadline)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > size_max:
                    await self._refuse(413, f"the body exceeds {size_max} bytes")
                    raise _Closed
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise _Closed

    async def _refuse(self, status: int, reason: str) -> None:
        """Answer ``status`` (if a response can still be sent) and close (invariant 5)."""
        self._host.counters.connections_dropped += 1
        log.info("refusing HTTP request of %s: %s", self._address, reason)
        if self._h11.our_state not in {h11.IDLE, h11.SEND_RESPONSE}:
            return
        code = {413: 4, 431: 4}.get(status, 3)
        name = {413: "payload_too_large", 431: "headers_too_large"}.get(status, "invalid_request")
        answer = ApiResponse(
            status,
            {"id": code, "code": name, "reason": reason, "field": None},
            [(b"connection", b"close")],
        )
        with contextlib.suppress(_Closed):
            await self._send(answer)

    async def _send(self, answer: ApiResponse) -> None:
        body = answer.encode()
        headers = [
            (b"server", SERVER_HEADER),
            (b"content-length", str(len(body)).encode()),
            *answer.headers,
        ]
        if body:
            headers.append((b"content-type", answer.content_type))
        try:
            data = self._h11.send(h11.Response(status_code=answer.status, headers=headers))
            assert data is not None
            if body:
                data += self._h11.send(h11.Data(data=body)) or b""
            data += self._h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as error:
            log.info("cannot answer %s: %s", self._address, error)
            raise _Closed from None
        await self._send_bytes(data)

    async def _send_bytes(self, data: bytes | None) -> None:
        """Write ``data``; a client that does not take it in time is dropped."""
        if not data:
            return
        with trio.move_on_after(self._limits.frame_read_timeout_s):
            try:
                await self._stream.send_all(data)
            except _LINK_ERRORS:
                raise _Closed from None
            self._host.counters.bytes_sent += len(data)
            return
        self._host.counters.connections_dropped += 1
        raise _Closed


def peer_address(stream: trio.abc.Stream) -> str:
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        assert isinstance(transport, trio.SocketStream)
        peer = transport.socket.getpeername()
    except OSError:
        return "unknown"
    return f"{peer[0]}:{peer[1]}"


async def serve_http_connection(
    host: HttpHost,
    api: HttpApi,
    stream: trio.abc.Stream,
    guard: ConnectionGuard,
    open_connections: set[Any],
) -> None:
    """Serve one accepted HTTP connection until it ends; it is in ``open_connections``
    meanwhile (so the node can shut it down)."""
    address = peer_address(stream)
    slot = admit_address(host, guard, address)  # as over TCP (invariant 1)
    if slot is None:
        await trio.aclose_forcefully(stream)
        return
    try:
        await _serve_admitted(host, api, stream, address, guard, slot, open_connections)
    finally:
        slot.release()


async def _serve_admitted(
    host: HttpHost,
    api: HttpApi,
    stream: trio.abc.Stream,
    address: str,
    guard: ConnectionGuard,
    slot: AddressSlot,
    open_connections: set[Any],
) -> None:
    try:
        if isinstance(stream, trio.SSLStream):
            with trio.move_on_after(host.config.limits.frame_read_timeout_s) as scope:
                try:
                    await stream.do_handshake()
                except _LINK_ERRORS as error:
                    log.info("dropping HTTP %s: TLS handshake failed: %s", address, error)
                    return
            if scope.cancelled_caught:
                return
        connection = HttpConnection(host, api, stream, address, guard, slot)
        open_connections.add(connection)
        try:
            await connection.run()
        finally:
            open_connections.discard(connection)
    finally:
        await trio.aclose_forcefully(stream)
