"""Sans-IO framing: bytes in, whole frames out; and the builders of outgoing frames.

Purpose: turn a byte stream (either direction of a client connection) into frames of
``[256-byte header][body]`` without doing any IO, and build request, reply and
eviction frames for the other direction.

Invariants:

1. :meth:`FrameDecoder.next_frame` returns a :class:`Frame` only once all ``size``
   bytes of it have arrived; before that it returns :data:`NEED_MORE_BYTES`.
2. A declared ``size`` below 256 or above the decoder's ``frame_size_max`` is refused
   with :class:`ProtocolError` as soon as the 52 bytes holding it have arrived, so no
   body byte of such a frame is ever buffered. An unknown ``command`` is refused as
   soon as the header is complete, before its body is buffered.
3. After a :class:`ProtocolError` the decoder is poisoned: frames completed before
   the fault can still be drained, then every call re-raises it. A byte stream that
   lost framing cannot be trusted to regain it.
4. Each frame owns one ``bytearray`` of exactly ``size`` bytes; ``Frame.body`` and
   ``Frame.header`` are ``memoryview`` slices of it, never copies, and the decoder
   never touches a buffer again once its frame is handed out (so the server may
   stamp a message batch in place).
5. Buffered bytes are bounded by one frame: the decoder holds at most the frame in
   progress plus the frames completed by the last :meth:`FrameDecoder.feed`.

Theory of operation: ``feed`` copies incoming bytes exactly once, into the buffer of
the frame they belong to (first a 256-byte header scratch, then a buffer sized from
the header). That copy is the ownership boundary between the transport's receive
buffer and the frame. Validation of the request fields the server enforces lives in
``header.validate_request_header``, not here, so the same decoder serves the client.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import xxhash

from sdk.wire._buffer import Buffer, as_byte_view
from sdk.wire.codes import Command, EvictionReason, IggyErrorCode, Operation, operation_for_code
from sdk.wire.errors import NEED_MORE_BYTES, NeedMoreBytes, ProtocolError
from sdk.wire.header import (
    COMMAND_OFFSET,
    FRAME_SIZE_MAX,
    HEADER_SIZE,
    SIZE_OFFSET,
    EvictionHeader,
    ReplyHeader,
    RequestHeader,
    peek_command,
    peek_size,
)

__all__ = [
    "Frame",
    "FrameDecoder",
    "build_eviction_frame",
    "build_reply_frame",
    "build_reply_frame_parts",
    "build_request_frame",
    "decode_frame",
    "request_checksum",
]

_SIZE_END: Final = SIZE_OFFSET + 4
_U32_MAX: Final = 0xFFFF_FFFF


@dataclass(frozen=True, slots=True)
class Frame:
    """One whole frame: ``data`` is the ``size`` bytes, header included.

    Attributes:
        data: The frame's bytes as a view of the buffer the frame owns.
        command: The header shape (byte 60), already checked to be a known one.
    """

    data: memoryview
    command: Command

    @property
    def header(self) -> memoryview:
        """The 256 header bytes (a view)."""
        return self.data[:HEADER_SIZE]

    @property
    def body(self) -> memoryview:
        """The ``size - 256`` body bytes (a view)."""
        return self.data[HEADER_SIZE:]

    def request_header(self) -> RequestHeader:
        """Parse the header as a request (refused unless ``command`` is REQUEST)."""
        return RequestHeader.unpack_from(self.data)

    def reply_header(self) -> ReplyHeader:
        """Parse the header as a reply (refused unless ``command`` is REPLY)."""
        return ReplyHeader.unpack_from(self.data)

    def eviction_header(self) -> EvictionHeader:
        """Parse the header as an eviction (refused unless ``command`` is EVICTION)."""
        return EvictionHeader.unpack_from(self.data)


def _check_size(size: int, frame_size_max: int) -> None:
    if size < HEADER_SIZE:
        raise ProtocolError(
            f"frame size {size} is smaller than its {HEADER_SIZE}-byte header",
            IggyErrorCode.INVALID_COMMAND,
        )
    if size > frame_size_max:
        raise ProtocolError(
            f"frame size {size} exceeds the maximum of {frame_size_max}",
            IggyErrorCode.INVALID_COMMAND,
            EvictionReason.INVALID_REQUEST_BODY_SIZE,
        )


class FrameDecoder:
    """Incremental frame decoder: :meth:`feed` bytes, then drain :meth:`next_frame`.

    Args:
        frame_size_max: The largest ``size`` accepted, header included.
    """

    __slots__ = (
        "_error",
        "_frame",
        "_frame_filled",
        "_frame_size_max",
        "_head",
        "_head_filled",
        "_ready",
    )

    def __init__(self, frame_size_max: int = FRAME_SIZE_MAX) -> None:
        assert HEADER_SIZE <= frame_size_max <= _U32_MAX, frame_size_max
        self._frame_size_max = frame_size_max
        self._head = bytearray(HEADER_SIZE)
        self._head_filled = 0
        self._frame: bytearray | None = None
        self._frame_filled = 0
        self._ready: deque[Frame] = deque()
        self._error: ProtocolError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes of the incomplete frame buffered so far."""
        return self._frame_filled if self._frame is not None else self._head_filled

    def feed(self, data: Buffer) -> None:
        """Take bytes from the transport.

        Raises:
            ProtocolError: on a frame size out of bounds or an unknown command; the
                decoder stays poisoned afterwards.
        """
        if self._error is not None:
            raise self._error
        view = as_byte_view(data)
        position = 0
        available = len(view)
        try:
            while position < available:
                frame = self._frame
                if frame is None:
                    position += self._fill_head(view, position, available)
                else:
                    take = min(len(frame) - self._frame_filled, available - position)
                    frame[self._frame_filled : self._frame_filled + take] = view[
                        position : position + take
                    ]
                    self._frame_filled += take
                    position += take
                    if self._frame_filled == len(frame):
                        self._emit(frame)
                        self._frame = None
                        self._frame_filled = 0
        except ProtocolError as error:
            self._error = error
            self._frame = None
            self._frame_filled = 0
            self._head_filled = 0
            raise

    def _fill_head(self, view: memoryview, position: int, available: int) -> int:
        filled = self._head_filled
        # Stop at the end of the size field first, so a bad size is refused before a
        # single further byte is taken in.
        limit = _SIZE_END if filled < _SIZE_END else HEADER_SIZE
        take = min(limit - filled, available - position)
        self._head[filled : filled + take] = view[position : position + take]
        filled += take
        self._head_filled = filled
        if filled == _SIZE_END:
            _check_size(peek_size(self._head), self._frame_size_max)
        elif filled == HEADER_SIZE:
            command = peek_command(self._head)
            size = peek_size(self._head)
            self._head_filled = 0
            if size == HEADER_SIZE:
                self._ready.append(Frame(memoryview(bytearray(self._head)), command))
            else:
                frame = bytearray(size)
                frame[:HEADER_SIZE] = self._head
                self._frame = frame
                self._frame_filled = HEADER_SIZE
        return take

    def _emit(self, frame: bytearray) -> None:
        command = Command(frame[COMMAND_OFFSET])
        self._ready.append(Frame(memoryview(frame), command))

    def next_frame(self) -> Frame | NeedMoreBytes:
        """The next whole frame, or :data:`NEED_MORE_BYTES`.

        Raises:
            ProtocolError: if an earlier :meth:`feed` failed.
        """
        if self._ready:
            return self._ready.popleft()
        if self._error is not None:
            raise self._error
        return NEED_MORE_BYTES


def decode_frame(data: Buffer, frame_size_max: int = FRAME_SIZE_MAX) -> Frame:
    """Parse a buffer that holds exactly one frame, without copying it.

    Raises:
        ProtocolError: if the buffer is not exactly one frame of a known command.
    """
    view = as_byte_view(data)
    if len(view) < HEADER_SIZE:
        raise ProtocolError(
            f"{len(view)} bytes cannot hold a {HEADER_SIZE}-byte header",
            IggyErrorCode.INVALID_COMMAND,
        )
    size = peek_size(view)
    _check_size(size, frame_size_max)
    if size != len(view):
        raise ProtocolError(
            f"frame declares {size} bytes but {len(view)} were given",
            IggyErrorCode.INVALID_COMMAND,
        )
    return Frame(view, peek_command(view))


def request_checksum(body: Buffer) -> int:
    """The ``request_checksum`` stamp: xxh3-64 of the body, widened to u128."""
    return xxhash.xxh3_64_intdigest(body)


def build_request_frame(
    code: int,
    body: Buffer,
    *,
    client: int,
    session: int,
    request: int,
    timestamp: int = 0,
) -> bytearray:
    """A request frame for command ``code`` carrying ``body``.

    The operation comes from ``code`` (``codes.operation_for_code``). Register
    requests always carry ``session = 0`` and ``request = 0``. As the official SDK
    does, the body checksum is stamped for the operations the server's client table
    deduplicates (Register, Logout and the metadata plane) and left zero for the
    partition plane and non-replicated reads.

    Args:
        code: The command code.
        body: The encoded request payload.
        client: The client id (non-zero).
        session: The session from the register reply (0 before login).
        request: The request number.
        timestamp: Informational; echoed in the reply.
    """
    operation = operation_for_code(code)
    if operation is Operation.REGISTER:
        session = 0
        request = 0
    stamped = not (operation.is_partition or operation is Operation.NON_REPLICATED)
    size = HEADER_SIZE + len(body)
    if size > _U32_MAX:
        raise ValueError(f"request body of {len(body)} bytes does not fit a frame")
    frame = bytearray(size)
    RequestHeader(
        size=size,
        client=client,
        request=request,
        session=session,
        operation=operation,
        code=code if operation is Operation.NON_REPLICATED else 0,
        request_checksum=request_checksum(body) if stamped else 0,
        timestamp=timestamp,
    ).pack_into(frame)
    frame[HEADER_SIZE:] = body
    return frame


def _reply_header(
    request: RequestHeader,
    size: int,
    *,
    status: int,
    op: int,
    commit: int,
    view: int,
    replica: int,
) -> ReplyHeader:
    return ReplyHeader(
        size=size,
        client=request.client,
        request=request.request,
        operation=request.operation,
        status=status,
        op=op,
        commit=commit,
        timestamp=request.timestamp,
        request_checksum=request.request_checksum,
        view=view,
        replica=replica,
    )


def build_reply_frame(
    request: RequestHeader,
    body: Buffer = b"",
    *,
    status: int = 0,
    op: int = 0,
    commit: int = 0,
    view: int = 0,
    replica: int = 0,
) -> bytearray:
    """A reply frame answering ``request``: client, request number, operation,
    timestamp and request checksum are echoed from it.

    A non-zero ``status`` is an error decided before commit and carries no body.
    """
    assert status == 0 or not body, "a failed reply carries no body"
    size = HEADER_SIZE + len(body)
    frame = bytearray(size)
    _reply_header(
        request, size, status=status, op=op, commit=commit, view=view, replica=replica
    ).pack_into(frame)
    frame[HEADER_SIZE:] = body
    return frame


def build_reply_frame_parts(
    request: RequestHeader,
    body_parts: Sequence[Buffer],
    *,
    op: int = 0,
    commit: int = 0,
    view: int = 0,
    replica: int = 0,
) -> list[Buffer]:
    """A successful reply as a gather list: a new 256-byte header, then ``body_parts``
    unchanged, so large bodies (poll replies) reach the socket without being copied.
    """
    size = HEADER_SIZE + sum(len(part) for part in body_parts)
    if size > _U32_MAX:
        raise ValueError(f"reply of {size} bytes does not fit a frame")
    header = bytearray(HEADER_SIZE)
    _reply_header(
        request, size, status=0, op=op, commit=commit, view=view, replica=replica
    ).pack_into(header)
    return [header, *body_parts]


def build_eviction_frame(
    client: int,
    reason: EvictionReason,
    *,
    server_protocol_version: int = 0,
    server_protocol_version_min: int = 0,
    view: int = 0,
    replica: int = 0,
) -> bytes:
    """A header-only eviction frame ending ``client``'s session."""
    assert reason is not EvictionReason.RESERVED
    return EvictionHeader(
        client=client,
        reason=reason,
        server_protocol_version=server_protocol_version,
        server_protocol_version_min=server_protocol_version_min,
        view=view,
        replica=replica,
    ).pack()
