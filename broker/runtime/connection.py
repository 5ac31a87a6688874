"""One client connection: read Iggy frames, answer them in order, enforce the limits.

Purpose: move bytes between a client socket and the node, and nothing else: the node
decides every answer (``Node.handle``).

Invariants:

1. Bounded memory: one read is at most ``RECEIVE_BYTES_MAX`` bytes; a frame is at most
   ``limits.frame_size_bytes_max`` (a larger declared size is refused before any of its
   body is read); at most ``limits.requests_in_flight_per_connection_max`` decoded
   requests wait for their replies, after which the socket is not read (TCP backpressure).
2. Replies go out in request order: one handler task answers requests one at a time, so
   a session is lock-step whatever the client does.
3. Timeouts: no complete request for ``idle_timeout_s`` while nothing is in flight, a
   frame that does not finish within ``frame_read_timeout_s`` of its first byte (half a
   header, then silence), or a reply the client does not read within that time, and the
   connection is dropped. A framing error (bad size, unknown header kind) is answered
   with an eviction naming the reason, then the connection is closed. None of this
   touches other connections or any group.

With TLS configured the stream is a trio ``SSLStream``: its handshake is bounded by
``frame_read_timeout_s`` and a failed one ends the connection before any frame.

Theory of operation: a reader task feeds a ``FrameDecoder`` and passes whole frames to
the handler through an unbounded channel whose occupancy a semaphore bounds; the handler
awaits the node's answer, writes it with one gathered ``sendmsg`` per batch of parts, and
releases the slot.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

import trio

from sdk.wire import (
    NEED_MORE_BYTES,
    Buffer,
    EvictionReason,
    Frame,
    FrameDecoder,
    ProtocolError,
    build_eviction_frame,
)

if TYPE_CHECKING:
    from broker.runtime.node import Node

from broker.runtime.config import Config
from broker.runtime.node import ConnectionContext, Response
from broker.runtime.stats import NodeCounters

log = logging.getLogger("viewstream.connection")

RECEIVE_BYTES_MAX: Final = 256 * 1024
"""Bytes asked of the socket per read."""
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


_Item = Frame | _Malformed | _TimedOut


class Host(Protocol):
    """What a connection needs from its node (a test may stand in for it)."""

    config: Config
    counters: NodeCounters

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response: ...

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None: ...


class Connection:
    """One client connection; see the module docstring."""

    def __init__(self, node: Host, stream: trio.abc.Stream, context: ConnectionContext) -> None:
        self._node = node
        self._stream = stream
        self.context = context
        self._limits = node.config.limits
        self._in_flight = 0
        self._closing = False
        self._scope = trio.CancelScope()
        self.frames_read = 0
        self._read_timer: trio.CancelScope | None = None
        self._frame_started: float | None = None

    def shutdown(self) -> None:
        """Close after the request in hand, or at once if there is none."""
        self._closing = True
        if self._in_flight == 0:
            self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            send, receive = trio.open_memory_channel[_Item](math.inf)
            slots = trio.Semaphore(self._limits.requests_in_flight_per_connection_max)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read, send, slots)
                await self._answer(receive, slots)
                nursery.cancel_scope.cancel()

    async def _read(self, out: trio.MemorySendChannel[_Item], slots: trio.Semaphore) -> None:
        limits = self._limits
        decoder = FrameDecoder(limits.frame_size_bytes_max)
        counters = self._node.counters
        async with out:
            while True:
                data: bytes | bytearray = b""
                with trio.CancelScope() as timer:
                    self._read_timer = timer
                    self._arm_read_timer()
                    try:
                        data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
                    except _LINK_ERRORS:
                        return  # reset by the client: the same as a close
                self._read_timer = None
                if timer.cancelled_caught:
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
                    try:
                        frame = decoder.next_frame()
                    except ProtocolError:
                        break
                    if frame is NEED_MORE_BYTES:
                        break
                    completed = True
                    await slots.acquire()
                    self._in_flight += 1
                    self.frames_read += 1
                    await out.send(frame)
                if failure is not None:
                    await out.send(_Malformed(failure))
                    return
                if decoder.pending_bytes == 0:
                    self._frame_started = None
                elif self._frame_started is None or completed:
                    self._frame_started = trio.current_time()

    def _arm_read_timer(self) -> None:
        """Set the deadline of the read in progress: the frame's, the idle one, or none
        while requests are in flight (the client is waiting for us, not idle)."""
        timer = self._read_timer
        if timer is None:
            return
        if self._frame_started is not None:
            timer.deadline = self._frame_started + self._limits.frame_read_timeout_s
        elif self._in_flight == 0:
            timer.deadline = trio.current_time() + self._limits.idle_timeout_s
        else:
            timer.deadline = math.inf

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
            response = await node.handle(self.context, item)
            sent = await self._send(response.parts)
            self._in_flight -= 1
            slots.release()
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
            while pending and sent >= pending[0].nbytes:
                sent -= pending[0].nbytes
                pending.pop(0)
            if sent:
                pending[0] = pending[0][sent:]


async def serve_connection(node: Node, stream: trio.abc.Stream) -> None:
    """Serve one accepted client connection (plain TCP or TLS) until it ends."""
    if not node.connection_opened():
        await trio.aclose_forcefully(stream)
        return
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    try:
        assert isinstance(transport, trio.SocketStream)
        peer = transport.socket.getpeername()
        address = f"{peer[0]}:{peer[1]}"
    except OSError:
        address = "unknown"
    if isinstance(stream, trio.SSLStream):
        # The handshake is bounded like a frame: a client that connects and stalls, or
        # speaks plain TCP to a TLS listener, costs only its own connection.
        handshake_ok = False
        with trio.move_on_after(node.config.limits.frame_read_timeout_s):
            try:
                await stream.do_handshake()
                handshake_ok = True
            except _LINK_ERRORS as error:
                log.info("dropping %s: TLS handshake failed: %s", address, error)
        if not handshake_ok:
            node.counters.connections_dropped += 1
            node.connection_closed(ConnectionContext(address))
            await trio.aclose_forcefully(stream)
            return
    context = ConnectionContext(address)
    connection = Connection(node, stream, context)
    node.open_connections.add(connection)
    try:
        await connection.run()
    except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
        log.debug("connection %s ended: %s", address, group.exceptions[0])
    finally:
        node.open_connections.discard(connection)
        node.connection_closed(context)
        await trio.aclose_forcefully(stream)
