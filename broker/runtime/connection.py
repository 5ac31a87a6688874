"""One client connection: read Iggy frames, answer them in order, enforce the limits.

Purpose: move bytes between a client socket and the node, and nothing else: the node
decides every answer (``Node.handle``).

Invariants:

1. Bounded memory: one read is at most ``RECEIVE_BYTES_MAX`` bytes
   (``UNAUTHENTICATED_RECEIVE_BYTES_MAX`` before login); a frame is at most
   ``limits.frame_size_bytes_max`` (a larger declared size is refused before any of its
   body is read); at most ``limits.requests_in_flight_per_connection_max`` decoded
   requests wait for their replies, after which the socket is not read (TCP backpressure).
   Buffers grow with the bytes that arrive, never from a declared size.
2. Replies go out in request order: one handler task answers requests one at a time, so
   a session is lock-step whatever the client does. A long poll waiting for the
   connection (``broker.core.long_polls``) answers as soon as another frame arrives or
   the reader ends, so nothing waits behind it.
3. Timeouts: no complete request for ``idle_timeout_s`` while nothing is in flight, a
   frame that does not finish within ``frame_read_timeout_s`` of its first byte (half a
   header, then silence), or a reply the client does not read within that time, and the
   connection is dropped. A framing error (bad size, unknown header kind) is answered
   with an eviction naming the reason, then the connection is closed. None of this
   touches other connections or any group.
4. Before login (``logged_in``): a frame declaring more than
   ``UNAUTHENTICATED_FRAME_SIZE_MAX`` is refused on its header, before any body byte is
   buffered: with an eviction (INVALID_REQUEST_BODY_SIZE) and a close, or, for a request
   under a session (a client whose session lives on another connection: it logs in here
   and retries), with the node's answer to it, ``Unauthenticated`` (40), its body read
   and dropped. The decision waits for the requests already read to be answered, since
   one of them may be the login.
5. A connection that has not logged in ``limits.login_timeout_s`` after it was accepted
   stops being read, gets the answers to what it sent, and is closed unless one of them
   logged it in. PING is served before login but does not extend that time.
6. At most ``limits.unauthenticated_connections_per_address_max`` connections of one
   client address have not logged in; one more is closed as it is accepted (counted in
   ``connections_refused``, logged within a node-wide line budget).
7. Every frame's declared size is reserved from the node-wide
   ``limits.incoming_frame_bytes_max`` once its header has arrived and before its body
   is read, and released once it is answered; a frame that does not fit waits, unread,
   in arrival order (``ConnectionGuard``), so a frame admitted can always be read to its
   end. A waiting connection holds besides at most the rest of its last read.

With TLS configured the stream is a trio ``SSLStream``: its handshake is bounded by
``frame_read_timeout_s`` and a failed one ends the connection before any frame. A
WebSocket connection (``broker.runtime.websocket``) is the same connection over a stream
that unwraps binary messages: admitted, limited and answered exactly as TCP, after an
upgrade bounded like a TLS handshake.

Theory of operation: a reader task feeds a ``FrameDecoder`` and passes whole frames to
the handler through an unbounded channel whose occupancy a semaphore bounds; the handler
awaits the node's answer, writes it with one gathered write per batch of parts, and
releases the slot. A reply the socket takes at once (the common case, a poll's stored
batches included) is written without waiting: no cancel scope, no checkpoint; only the
rest of one the socket cannot take waits for it, within ``frame_read_timeout_s``. The
decoder shows the reader each header (``admit``): a frame that is small enough and fits
the budget goes on at once; any other is held at its header while the reader decides,
waiting if it must. The node-wide state (the per-address table and
the byte budget) is one ``ConnectionGuard`` per node (``connection_guard``). Once logged
in, a plain TCP connection first takes what its socket already holds without waiting
(``READS_NOWAIT_MAX`` in a row at most): no read timer and no trio checkpoint for bytes
that are there, such as the rest of a large frame; only a read that must wait is timed.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import trio

from broker.core.admission import (
    UNAUTHENTICATED_FRAME_SIZE_MAX,
    IncomingFrameBytes,
    UnauthenticatedConnections,
)
from broker.core.connections import ConnectionContext, Response
from broker.core.refusals import RefusalLimiter
from broker.runtime.config import Config, Limits
from broker.runtime.stats import NodeCounters
from sdk.wire import (
    NEED_MORE_BYTES,
    Buffer,
    CommandCode,
    EvictionReason,
    Frame,
    FrameDecoder,
    IggyErrorCode,
    Operation,
    ProtocolError,
    RequestHeader,
    build_eviction_frame,
    build_reply_frame,
)
from sdk.wire.header import peek_size

log = logging.getLogger("viewstream.connection")

RECEIVE_BYTES_MAX: Final = 256 * 1024
"""Bytes asked of the socket per read."""
UNAUTHENTICATED_RECEIVE_BYTES_MAX: Final = 16 * 1024
"""Bytes asked of the socket per read before login: what a connection that has not logged
in may hold beyond its admitted frames (the rest of a read, while a frame waits)."""
READS_NOWAIT_MAX: Final = 4
"""Reads in a row taken from the socket without waiting (no cancel scope, no trio
checkpoint) before one goes through trio, which yields to the other tasks: passing a frame
to the handler is a checkpoint too, so this bounds only the reads of one large frame."""
IOVECS_MAX: Final = 512
"""Buffers handed to one ``sendmsg`` (below the kernel's IOV_MAX of 1024)."""
_LINK_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
"""What a dropped client connection raises; it ends that connection and nothing else."""


@dataclass(frozen=True, slots=True)
class _Malformed:
    """The byte stream stopped being frames; answer with an eviction and close."""

    error: ProtocolError


@dataclass(frozen=True, slots=True)
class _TimedOut:
    why: str


@dataclass(frozen=True, slots=True)
class _Answered:
    """A request answered by the connection itself, in its turn (its body was dropped)."""

    response: Response
    command: str


_Item = Frame | _Malformed | _TimedOut | _Answered


class Host(Protocol):
    """What a connection needs from its node (a test may stand in for it)."""

    config: Config
    counters: NodeCounters

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response: ...

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None: ...

    def connection_busy(self, context: ConnectionContext) -> None:
        """The connection has another request to answer, or will read no more: a long
        poll waiting for it answers now."""
        ...


class Listener(Host, Protocol):
    """What serving an accepted connection needs from its node, beyond ``Host``."""

    open_connections: set[Connection]

    def connection_opened(self) -> bool:
        """Take a place among ``limits.connections_max``; False when they are all taken."""
        ...

    def connection_closed(self, context: ConnectionContext) -> None: ...

    def heard(self, connection: Connection) -> None:
        """A frame arrived on ``connection`` (its heartbeat, ``broker.core.liveness``)."""
        ...

    def connection_left(self, connection: Connection) -> None:
        """``connection`` ended: forget its heartbeat."""
        ...


def logged_in(context: ConnectionContext) -> bool:
    """Whether the connection has logged in (a login or a session check succeeded on it)."""
    sessions = context.registered_session, context.attached_session
    return context.client_id != 0 or any(sessions)


class ConnectionGuard:
    """One node's admission state of client connections (invariants 6 and 7).

    Owns the pure bookkeeping of ``broker.core.admission`` and the waiting it implies:
    connections wait for frame bytes one at a time, in arrival order (``trio.Lock`` is
    fair), so a large frame is not starved by a stream of small ones.

    Args:
        limits: The node's limits.
    """

    def __init__(self, limits: Limits) -> None:
        self.unauthenticated = UnauthenticatedConnections(
            limits.unauthenticated_connections_per_address_max
        )
        self.frame_bytes = IncomingFrameBytes(limits.incoming_frame_bytes_max)
        self.refusals = RefusalLimiter()
        """The line budget of connections refused at accept, shared by all of them."""
        self._turn = trio.Lock()
        self._released = trio.Event()

    def reserve_nowait(self, size: int) -> bool:
        """Reserve ``size`` frame bytes if they fit and nobody waits before us."""
        return not self._turn.locked() and self.frame_bytes.try_reserve(size)

    async def reserve(self, size: int) -> None:
        """Reserve ``size`` frame bytes, waiting in line until they fit."""
        async with self._turn:
            while not self.frame_bytes.try_reserve(size):
                self._released = trio.Event()
                await self._released.wait()

    def release(self, size: int) -> None:
        """Give back ``size`` frame bytes (their frame was answered or dropped)."""
        self.frame_bytes.release(size)
        self._released.set()


_GUARDS: Final[weakref.WeakKeyDictionary[Host, ConnectionGuard]] = weakref.WeakKeyDictionary()
"""Each node's guard, made on its first connection and gone with the node."""


def connection_guard(node: Host) -> ConnectionGuard:
    """``node``'s connection guard (made on first use, from its limits)."""
    guard = _GUARDS.get(node)
    if guard is None:
        guard = _GUARDS[node] = ConnectionGuard(node.config.limits)
    return guard


class AddressSlot:
    """A connection's place among its address's connections that have not logged in;
    given back once, at login or at close, whichever comes first."""

    __slots__ = ("_address", "_table")

    def __init__(self, table: UnauthenticatedConnections, address: str) -> None:
        self._table: UnauthenticatedConnections | None = table
        self._address = address

    def release(self) -> None:
        if self._table is not None:
            self._table.release(self._address)
            self._table = None


def _command_label(request: RequestHeader) -> str:
    if request.operation is Operation.NON_REPLICATED:
        try:
            return CommandCode(request.code).name
        except ValueError:
            return f"code {request.code}"
    return request.operation.name


class Connection:
    """One client connection; see the module docstring.

    Args:
        node: The node answering the requests.
        stream: The client's byte stream.
        context: What the node remembers about the connection.
        guard: The node's connection guard (default: ``connection_guard(node)``).
        address_slot: The connection's slot among its address's connections that have
            not logged in, given back once it logs in or closes.
    """

    def __init__(
        self,
        node: Host,
        stream: trio.abc.Stream,
        context: ConnectionContext,
        *,
        guard: ConnectionGuard | None = None,
        address_slot: AddressSlot | None = None,
    ) -> None:
        self._node = node
        self._stream = stream
        self.context = context
        self._limits = node.config.limits
        self._guard = guard if guard is not None else connection_guard(node)
        self._address_slot = address_slot
        self._unauthenticated_frame_size_max = min(
            UNAUTHENTICATED_FRAME_SIZE_MAX, self._limits.frame_size_bytes_max
        )
        self._in_flight = 0
        self._closing = False
        self._scope = trio.CancelScope()
        self.frames_read = 0
        self._read_timer: trio.CancelScope | None = None
        self._frame_started: float | None = None
        self._logged_in = False
        self._login_deadline = math.inf
        self._reserved = 0
        """Frame bytes of the node's budget held: admitted frames not yet answered."""
        self._drained: trio.Event | None = None
        self.on_frame: Callable[[], None] | None = None
        """Called on every whole frame read (the node's heartbeat bookkeeping)."""
        self._evicted: EvictionReason | None = None

    def evict(self, reason: EvictionReason) -> None:
        """Stop serving now and tell the client it was evicted with ``reason`` (its
        session is ended by the node), then close."""
        self._evicted = reason
        self._scope.cancel()

    def shutdown(self) -> None:
        """Close after the request in hand, or at once if there is none."""
        self._closing = True
        if self._in_flight == 0:
            self._scope.cancel()

    async def run(self) -> None:
        self._login_deadline = trio.current_time() + self._limits.login_timeout_s
        try:
            with self._scope:
                send, receive = trio.open_memory_channel[_Item](math.inf)
                slots = trio.Semaphore(self._limits.requests_in_flight_per_connection_max)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read, send, slots)
                    await self._answer(receive, slots)
                    nursery.cancel_scope.cancel()
            if self._evicted is not None:
                self._node.counters.connections_dropped += 1
                with trio.move_on_after(self._limits.frame_read_timeout_s):
                    frame = build_eviction_frame(self.context.client_id, self._evicted)
                    await self._send([frame])
        finally:
            if self._address_slot is not None:
                self._address_slot.release()
            if self._reserved:
                self._guard.release(self._reserved)
                self._reserved = 0

    def has_logged_in(self) -> bool:
        """Whether the connection logged in (``logged_in``, latched); the first time it
        is seen, the connection gives back its address slot (invariant 6)."""
        if not self._logged_in and logged_in(self.context):
            self._logged_in = True
            if self._address_slot is not None:
                self._address_slot.release()
        return self._logged_in

    async def _read(self, out: trio.MemorySendChannel[_Item], slots: trio.Semaphore) -> None:
        try:
            await self._read_frames(out, slots)
        finally:
            # Nothing more will be read: a long poll waiting for this connection answers
            # now instead of at its deadline.
            self._node.connection_busy(self.context)

    async def _read_frames(self, out: trio.MemorySendChannel[_Item], slots: trio.Semaphore) -> None:
        limits = self._limits
        decoder = FrameDecoder(limits.frame_size_bytes_max, admit=self._admit_header)
        counters = self._node.counters
        stream = self._stream
        fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None
        reads_nowait = 0
        async with out:
            while True:
                data: bytes | bytearray | None = None
                if fd is not None and reads_nowait < READS_NOWAIT_MAX and self._may_read_nowait():
                    try:
                        data = _read_nowait(fd)
                    except OSError:
                        return  # reset by the client: the same as a close
                if data is not None:
                    reads_nowait += 1
                else:
                    reads_nowait = 0
                    with trio.CancelScope() as timer:
                        self._read_timer = timer
                        self._arm_read_timer()
                        if self.has_logged_in():
                            want = RECEIVE_BYTES_MAX
                        else:
                            want = UNAUTHENTICATED_RECEIVE_BYTES_MAX
                        try:
                            data = await stream.receive_some(want)
                        except _LINK_ERRORS:
                            return  # reset by the client: the same as a close
                    self._read_timer = None
                if data is None:
                    if self._login_overdue():
                        # Stop reading; a login among the requests already read still counts.
                        await self._wait_drained()
                        if not self.has_logged_in():
                            timeout = f"{limits.login_timeout_s:g}"
                            await out.send(_TimedOut(f"not logged in within {timeout} s"))
                            return
                        continue
                    why = "a frame stalled half-way" if self._frame_started else "idle"
                    await out.send(_TimedOut(why))
                    return
                if not data:
                    return  # the client closed its side
                counters.bytes_received += len(data)
                failure: ProtocolError | None = None
                try:
                    decoder.feed(data)
                except ProtocolError as error:
                    failure = error
                completed = False
                while True:
                    completed = await self._pass_frames(decoder, out, slots) or completed
                    header = decoder.held_header
                    if failure is not None or header is None:
                        break
                    verdict = await self._admit_held(header)
                    try:
                        if verdict is None:
                            decoder.resume()
                        elif isinstance(verdict, _Answered):
                            await slots.acquire()
                            self._in_flight += 1
                            await out.send(verdict)
                            decoder.skip()
                        else:
                            failure = verdict
                    except ProtocolError as error:
                        failure = error
                if failure is not None:
                    await out.send(_Malformed(failure))
                    return
                if completed:
                    reads_nowait = 0  # passing a frame was a checkpoint
                if decoder.pending_bytes == 0:
                    self._frame_started = None
                elif self._frame_started is None or completed:
                    self._frame_started = trio.current_time()

    async def _pass_frames(
        self, decoder: FrameDecoder, out: trio.MemorySendChannel[_Item], slots: trio.Semaphore
    ) -> bool:
        """Hand the decoder's whole frames to the handler; whether there were any."""
        completed = False
        while True:
            try:
                frame = decoder.next_frame()
            except ProtocolError:
                return completed
            if frame is NEED_MORE_BYTES:
                return completed
            completed = True
            if self._in_flight:
                # A long poll waiting for this connection answers now: in request order,
                # this frame would wait behind it (``broker.core.long_polls``).
                self._node.connection_busy(self.context)
            if self.on_frame is not None:
                self.on_frame()
            await slots.acquire()
            self._in_flight += 1
            self.frames_read += 1
            await out.send(frame)

    def _admit_header(self, header: memoryview) -> bool:
        """The decoder's question on each header: may its body be taken in right now?
        (Invariants 4 and 7; a False holds the frame for ``_admit_held``.)"""
        size = peek_size(header)
        if size > self._unauthenticated_frame_size_max and not self.has_logged_in():
            return False
        if not self._guard.reserve_nowait(size):
            return False
        self._reserved += size
        return True

    async def _admit_held(self, header: bytes) -> _Answered | ProtocolError | None:
        """Decide about the frame held at ``header``: None once its bytes are reserved
        (read its body), an answer to send in its turn (drop its body), or the failure
        that ends the connection."""
        size = peek_size(header)
        bound = self._unauthenticated_frame_size_max
        if size > bound and not self.has_logged_in():
            await self._wait_drained()  # the login may be among the requests in flight
            if not self.has_logged_in():
                return self._refuse_before_login(header, size)
        await self._guard.reserve(size)
        self._reserved += size
        return None

    def _refuse_before_login(self, header: bytes, size: int) -> _Answered | ProtocolError:
        bound = self._unauthenticated_frame_size_max
        try:
            request = RequestHeader.unpack_from(header)
        except ProtocolError:
            request = None
        if request is not None and request.session != 0:
            # What the node answers a session this connection did not log in to, so the
            # client logs in here and retries (the SDK does): its body is never kept.
            reason = f"a {size}-byte frame before login, its body dropped: not logged in"
            reply = build_reply_frame(request, status=IggyErrorCode.UNAUTHENTICATED)
            return _Answered(Response([reply], refusal=reason), _command_label(request))
        return ProtocolError(
            f"frame size {size} exceeds the maximum of {bound} before login",
            IggyErrorCode.INVALID_COMMAND,
            EvictionReason.INVALID_REQUEST_BODY_SIZE,
        )

    async def _wait_drained(self) -> None:
        """Wait until every request read so far has been answered."""
        while self._in_flight:
            self._drained = trio.Event()
            await self._drained.wait()

    def _may_read_nowait(self) -> bool:
        """Whether the next read may skip the read timer: the connection logged in (the
        login deadline is checked by the timed reads alone) and the frame in progress,
        if any, is still within ``frame_read_timeout_s`` of its first byte."""
        started = self._frame_started
        if started is not None and (
            trio.current_time() >= started + self._limits.frame_read_timeout_s
        ):
            return False  # the timed read finds its deadline passed and times out
        return self.has_logged_in()

    def _login_overdue(self) -> bool:
        return not self.has_logged_in() and trio.current_time() >= self._login_deadline

    def _arm_read_timer(self) -> None:
        """Set the deadline of the read in progress: the frame's, the idle one, or none
        while requests are in flight (the client is waiting for us, not idle); and never
        past the login deadline before login."""
        timer = self._read_timer
        if timer is None:
            return
        if self._frame_started is not None:
            deadline = self._frame_started + self._limits.frame_read_timeout_s
        elif self._in_flight == 0:
            deadline = trio.current_time() + self._limits.idle_timeout_s
        else:
            deadline = math.inf
        if not self.has_logged_in():
            deadline = min(deadline, self._login_deadline)
        timer.deadline = deadline

    async def _answer(self, items: trio.MemoryReceiveChannel[_Item], slots: trio.Semaphore) -> None:
        node = self._node
        async for item in items:
            if isinstance(item, _TimedOut):
                node.counters.connections_dropped += 1
                node.log_refusal(self.context, "-", f"connection closed: {item.why}")
                return
            if isinstance(item, _Malformed):
                node.counters.connections_dropped += 1
                reason = item.error.eviction or EvictionReason.INVALID_REQUEST_OPERATION
                why = f"invalid frame ({item.error.reason}), evicted with {reason.name}"
                node.log_refusal(self.context, "-", f"{why}, connection closed")
                await self._send([build_eviction_frame(self.context.client_id, reason)])
                return
            if isinstance(item, _Answered):
                response = item.response
                node.log_refusal(self.context, item.command, response.refusal)
            else:
                response = await node.handle(self.context, item)
                self._reserved -= len(item.data)
                self._guard.release(len(item.data))
            sent = await self._send(response.parts)
            self._in_flight -= 1
            slots.release()
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()
            self.has_logged_in()
            self._arm_read_timer()
            if not sent:
                node.counters.connections_dropped += 1
                why = "connection closed: it does not read its replies"
                node.log_refusal(self.context, "-", why)
                return
            if response.close:
                node.counters.connections_dropped += 1
                return
            if self._closing:
                return

    def statistics(self) -> tuple[int, int]:
        """``(frames read, requests in flight)``."""
        return self.frames_read, self._in_flight

    async def _send(self, parts: list[Buffer]) -> bool:
        """Write ``parts`` in order; False if the client would not take them in time."""
        pending = [memoryview(part).cast("B") for part in parts if len(part)]
        stream = self._stream
        if isinstance(stream, trio.SocketStream):
            # The kernel usually takes a whole reply at once (a poll's 250 KB included):
            # then no cancel scope, no checkpoint and no deadline are needed for it.
            try:
                pending = self._write_nowait(stream.socket.fileno(), pending)
            except _LINK_ERRORS:
                return False
            if not pending:
                return True
        with trio.move_on_after(self._limits.frame_read_timeout_s):
            try:
                await self._send_parts(pending)
            except _LINK_ERRORS:
                return False
            return True
        return False

    async def _send_parts(self, pending: list[memoryview]) -> None:
        counters = self._node.counters
        stream = self._stream
        if not isinstance(stream, trio.SocketStream):
            # TLS (or a test's memory stream): one write per reply, so one TLS record
            # batch rather than one per part.
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            await stream.send_all(data)
            counters.bytes_sent += len(data)
            return
        sock = stream.socket
        while pending:
            sent = await sock.sendmsg(pending[:IOVECS_MAX])
            counters.bytes_sent += sent
            pending = _after(pending, sent)

    def _write_nowait(self, fd: int, pending: list[memoryview]) -> list[memoryview]:
        """Write what the socket takes now, without waiting (one gathered write per
        ``IOVECS_MAX`` parts); returns what is left to send.

        Raises:
            OSError: the connection is broken.
        """
        counters = self._node.counters
        while pending:
            try:
                sent = os.writev(fd, pending[:IOVECS_MAX])
            except BlockingIOError:
                return pending
            counters.bytes_sent += sent
            pending = _after(pending, sent)
            if not sent:
                return pending
        return pending


def _read_nowait(fd: int) -> bytes | None:
    """What the socket holds now, up to ``RECEIVE_BYTES_MAX`` bytes (empty once the client
    closed its side), or None when it holds nothing yet.

    Raises:
        OSError: the connection is broken.
    """
    try:
        return os.read(fd, RECEIVE_BYTES_MAX)
    except BlockingIOError:
        return None


def _after(pending: list[memoryview], sent: int) -> list[memoryview]:
    """``pending`` without its first ``sent`` bytes (whole parts dropped, the next one
    cut), mutated in place."""
    while pending and sent >= pending[0].nbytes:
        sent -= pending[0].nbytes
        pending.pop(0)
    if sent:
        pending[0] = pending[0][sent:]
    return pending


def _peer_address(stream: trio.abc.Stream) -> str:
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        assert isinstance(transport, trio.SocketStream)
        peer = transport.socket.getpeername()
    except OSError:
        return "unknown"
    return f"{peer[0]}:{peer[1]}"


class Refusals(Protocol):
    """What admitting an address needs of its node: counters and a refusal log."""

    counters: NodeCounters

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None: ...


def admit_address(node: Refusals, guard: ConnectionGuard, address: str) -> AddressSlot | None:
    """A place for a new connection from ``address`` (``ip:port``) among its IP's
    connections that have not logged in, or None when they are as many as may be
    (invariant 6: counted in ``connections_refused`` and logged within one node-wide line
    budget). The TCP, WebSocket and HTTP listeners all take it, before
    ``connections_max``, so one address cannot fill the node with connections that
    never log in."""
    host = address.rpartition(":")[0] or address
    if guard.unauthenticated.admit(host):
        return AddressSlot(guard.unauthenticated, host)
    node.counters.connections_refused += 1
    limit = guard.unauthenticated.per_address_max
    reason = f"connection refused: {limit} connections of this address have not logged in"
    node.log_refusal(ConnectionContext(address, refusals=guard.refusals), "-", reason)
    return None


async def serve_connection(
    node: Listener, stream: trio.abc.Stream, *, websocket: bool = False
) -> None:
    """Serve one accepted client connection (plain TCP or TLS, carrying Iggy frames
    directly or, with ``websocket``, in WebSocket messages) until it ends."""
    address = _peer_address(stream)
    guard = connection_guard(node)
    slot = admit_address(node, guard, address)
    if slot is None:
        await trio.aclose_forcefully(stream)
        return
    try:
        await _serve_admitted(node, stream, address, guard, slot, websocket=websocket)
    finally:
        slot.release()


async def _handshake(
    node: Listener, stream: trio.abc.Stream, address: str, *, websocket: bool
) -> trio.abc.Stream | None:
    """The stream that carries frames once the TLS handshake and the WebSocket upgrade
    (whichever apply) are done, or None if the client failed them. Each is bounded like a
    frame: a client that connects and stalls, or speaks another protocol, costs only its
    own connection."""
    timeout_s = node.config.limits.frame_read_timeout_s
    if isinstance(stream, trio.SSLStream):
        handshake_ok = False
        with trio.move_on_after(timeout_s):
            try:
                await stream.do_handshake()
                handshake_ok = True
            except _LINK_ERRORS as error:
                log.info("dropping %s: TLS handshake failed: %s", address, error)
        if not handshake_ok:
            return None
    if not websocket:
        return stream
    from broker.runtime.websocket import HandshakeFailed, accept_websocket

    with trio.move_on_after(timeout_s):
        try:
            return await accept_websocket(stream, node.config.limits.frame_size_bytes_max)
        except HandshakeFailed as error:
            log.info("dropping %s: WebSocket upgrade failed: %s", address, error)
            return None
    log.info("dropping %s: WebSocket upgrade not completed within %g s", address, timeout_s)
    return None


async def _serve_admitted(
    node: Listener,
    stream: trio.abc.Stream,
    address: str,
    guard: ConnectionGuard,
    slot: AddressSlot,
    *,
    websocket: bool,
) -> None:
    if not node.connection_opened():
        await trio.aclose_forcefully(stream)
        return
    frames = await _handshake(node, stream, address, websocket=websocket)
    if frames is None:
        node.counters.connections_dropped += 1
        node.connection_closed(ConnectionContext(address))
        await trio.aclose_forcefully(stream)
        return
    context = ConnectionContext(address)
    connection = Connection(node, frames, context, guard=guard, address_slot=slot)
    connection.on_frame = functools.partial(node.heard, connection)
    node.open_connections.add(connection)
    node.heard(connection)
    try:
        await connection.run()
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
        log.debug("connection %s ended: %s", address, group.exceptions[0])
    finally:
        node.open_connections.discard(connection)
        node.connection_left(connection)
        node.connection_closed(context)
        await _close(node, frames, context)


async def _close(node: Listener, stream: trio.abc.Stream, context: ConnectionContext) -> None:
    from broker.runtime.websocket import WebSocketStream

    if isinstance(stream, WebSocketStream):
        if stream.failure is not None:
            # A WebSocket protocol violation: the stream ended as if the client closed,
            # but the node closed it for cause.
            node.counters.connections_dropped += 1
            node.log_refusal(context, "-", f"{stream.failure}, connection closed")
        with trio.CancelScope(shield=True):
            await stream.close_gracefully()
    await trio.aclose_forcefully(stream)
