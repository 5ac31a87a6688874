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
5. Memory follows the bytes received, never a declared size: the decoder holds the
   bytes of the frame in progress that have arrived (a kept ``bytes`` input may carry
   up to one input's worth beyond them), the unread rest of the last :meth:`feed` while
   a frame is held, and the frames completed but not yet drained. A header declaring
   64 MiB costs 256 bytes until its body arrives.
6. With an ``admit`` callback, every complete header is shown to it before any of its
   body is taken in; a header it refuses is *held*: :meth:`FrameDecoder.feed` must not
   be called again until the caller resumes the frame (:meth:`FrameDecoder.resume`: its
   body is then buffered as usual) or skips it (:meth:`FrameDecoder.skip`: its body is
   read and discarded, and the frame never comes out).

Theory of operation: the header is copied into a 256-byte scratch. A frame whose rest
is all in hand is then copied once into its own buffer. Otherwise its bytes accumulate
as they arrive: small pieces are appended to a tail ``bytearray`` of at most
``CHUNK_COALESCE_BYTES``, and large pieces of an immutable ``bytes`` input are kept as
views of it, not copied; once the last byte arrives the pieces are joined into the
frame's buffer, one copy (for a moment the frame is held twice). That copy is the
ownership boundary between the transport's receive buffers and the frame. Validation of
the request fields the server enforces lives in ``header.validate_request_header``, not
here, so the same decoder serves the client.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

import xxhash

from sdk.wire._buffer import Buffer, as_byte_view
from sdk.wire.codes import Command, EvictionReason, IggyErrorCode, Operation, operation_for_code
from sdk.wire.errors import NEED_MORE_BYTES, NeedMoreBytes, ProtocolError
from sdk.wire.header import (
    COMMAND_OFFSET,
    FRAME_SIZE_MAX,
    HEADER_SIZE,
    REPLY_HEADER,
    SIZE_OFFSET,
    EvictionHeader,
    ReplyHeader,
    RequestHeader,
    peek_command,
    peek_size,
)

__all__ = [
    "CHUNK_COALESCE_BYTES",
    "AdmitHeader",
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

CHUNK_COALESCE_BYTES: Final = 64 * 1024
"""Pieces of a frame smaller than this are copied into one tail buffer as they arrive,
up to this size, so a trickle of tiny reads costs bytes, not one object per read."""


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


AdmitHeader: TypeAlias = Callable[[memoryview], bool]
"""Shown each complete header (a view valid only during the call); False holds the frame."""


class FrameDecoder:
    """Incremental frame decoder: :meth:`feed` bytes, then drain :meth:`next_frame`.

    Args:
        frame_size_max: The largest ``size`` accepted, header included.
        admit: Asked about each complete header before its body is taken in; a header
            it answers False for is held (module invariant 6). None: every frame is
            taken in.
    """

    __slots__ = (
        "_admit",
        "_backlog",
        "_error",
        "_filled",
        "_frame_size_max",
        "_head",
        "_head_filled",
        "_held",
        "_parts",
        "_ready",
        "_size",
        "_skipping",
        "_tail",
    )

    def __init__(
        self, frame_size_max: int = FRAME_SIZE_MAX, *, admit: AdmitHeader | None = None
    ) -> None:
        assert HEADER_SIZE <= frame_size_max <= _U32_MAX, frame_size_max
        self._frame_size_max = frame_size_max
        self._admit = admit
        self._head = bytearray(HEADER_SIZE)
        self._head_filled = 0
        # The frame in progress once its header is complete: its declared size, the
        # bytes of it taken in (header included), and where they are (module invariant 5).
        self._size = 0
        self._filled = 0
        self._parts: list[Buffer] = []
        self._tail = bytearray()
        self._skipping = False
        self._held = False
        # While a frame is held: the rest of the feed that brought its header (bytes, or
        # a view of an immutable input).
        self._backlog: Buffer = b""
        self._ready: deque[Frame] = deque()
        self._error: ProtocolError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes of the incomplete frame taken in so far, header included (read and
        dropped ones too while a frame is skipped); 0 exactly between frames."""
        return self._filled if self._size else self._head_filled

    @property
    def held_header(self) -> bytes | None:
        """The header of the frame held at its header, or None when none is."""
        return bytes(self._head) if self._held else None

    def feed(self, data: Buffer) -> None:
        """Take bytes from the transport.

        An immutable ``bytes`` input may be kept by reference (views of it) until the
        frame it carries is complete; any other buffer is copied before this returns.

        Raises:
            ProtocolError: on a frame size out of bounds or an unknown command; the
                decoder stays poisoned afterwards.
        """
        if self._error is not None:
            raise self._error
        assert not self._held, "a held frame is resumed or skipped before more is fed"
        view = as_byte_view(data)
        self._consume(view, isinstance(view.obj, bytes))

    def resume(self) -> None:
        """Take in the held frame's body, then the bytes fed after its header.

        Raises:
            ProtocolError: as :meth:`feed`, for the bytes after the held frame.
        """
        assert self._held, "no frame is held"
        self._held = False
        self._begin_body()
        self._consume_backlog()

    def skip(self) -> None:
        """Read the held frame's body and drop it; the frame never comes out.

        Raises:
            ProtocolError: as :meth:`feed`, for the bytes after the held frame.
        """
        assert self._held, "no frame is held"
        self._held = False
        if self._size == HEADER_SIZE:
            self._end_frame()
        else:
            self._skipping = True
        self._consume_backlog()

    def _consume_backlog(self) -> None:
        backlog, self._backlog = self._backlog, b""
        self._consume(as_byte_view(backlog), True)

    def _consume(self, view: memoryview, immutable: bool) -> None:
        position = 0
        available = len(view)
        try:
            while position < available:
                if not self._size:
                    position += self._fill_head(view, position, available)
                    if self._held:
                        rest = view[position:]
                        self._backlog = rest if immutable else bytes(rest)
                        return
                elif self._skipping:
                    take = min(self._size - self._filled, available - position)
                    self._filled += take
                    position += take
                    if self._filled == self._size:
                        self._end_frame()
                else:
                    position += self._fill_body(view, position, available, immutable)
        except ProtocolError as error:
            self._error = error
            self._end_frame()
            self._head_filled = 0
            self._held = False
            self._backlog = b""
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
            command = peek_command(self._head)  # refuses an unknown one before the body
            self._head_filled = 0
            size = peek_size(self._head)
            admit = self._admit
            if admit is not None and not admit(memoryview(self._head)):
                self._size = size
                self._filled = HEADER_SIZE
                self._held = True
            elif size == HEADER_SIZE:
                self._ready.append(Frame(memoryview(bytearray(self._head)), command))
            else:
                self._size = size
                self._filled = HEADER_SIZE
                self._tail = bytearray(self._head)
        return take

    def _begin_body(self) -> None:
        self._tail = bytearray(self._head)
        if self._size == HEADER_SIZE:
            self._emit()

    def _fill_body(self, view: memoryview, position: int, available: int, immutable: bool) -> int:
        take = min(self._size - self._filled, available - position)
        piece = view[position : position + take]
        if take >= CHUNK_COALESCE_BYTES and immutable:
            # A large piece of an immutable input: keep a view of it, copy it once when
            # the frame is joined.
            if self._tail:
                self._parts.append(self._tail)
                self._tail = bytearray()
            self._parts.append(piece)
        else:
            # Copied as it comes: a small frame whose rest is all here lands in the tail
            # at once, exactly sized, and becomes the frame's buffer; a trickle of small
            # pieces is coalesced rather than kept as many small objects.
            self._tail += piece
            if len(self._tail) >= CHUNK_COALESCE_BYTES and self._filled + take < self._size:
                self._parts.append(self._tail)
                self._tail = bytearray()
        self._filled += take
        if self._filled == self._size:
            self._emit()
        return take

    def _emit(self) -> None:
        parts = self._parts
        if parts:
            if self._tail:
                parts.append(self._tail)
            frame = bytearray().join(parts)
        else:
            frame = self._tail
        assert len(frame) == self._size, (len(frame), self._size)
        self._ready.append(Frame(memoryview(frame), Command(frame[COMMAND_OFFSET])))
        self._end_frame()

    def _end_frame(self) -> None:
        self._size = 0
        self._filled = 0
        if self._parts:
            self._parts = []
        self._tail = bytearray()
        self._skipping = False

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


_ZERO_U128: Final = bytes(16)


def _pack_reply_header(
    buffer: bytearray,
    request: RequestHeader,
    size: int,
    *,
    status: int,
    op: int,
    commit: int,
    view: int,
    replica: int,
) -> None:
    """Write the header of a reply to ``request`` at the start of ``buffer``: the bytes of
    ``ReplyHeader(...).pack_into`` with client, request number, operation, timestamp and
    request checksum echoed, packed in one call rather than through a ``ReplyHeader``
    (one per reply on the server's hot path)."""
    REPLY_HEADER.pack_into(
        buffer,
        0,
        _ZERO_U128,  # checksum
        _ZERO_U128,  # checksum_body
        _ZERO_U128,  # cluster
        size,
        view,
        0,  # release
        Command.REPLY,
        replica,
        request.request_checksum.to_bytes(16, "little"),
        _ZERO_U128,  # context
        request.client.to_bytes(16, "little"),
        op,
        commit,
        request.timestamp,
        request.request,
        request.operation,
        status,
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
    _pack_reply_header(
        frame, request, size, status=status, op=op, commit=commit, view=view, replica=replica
    )
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
    _pack_reply_header(
        header, request, size, status=0, op=op, commit=commit, view=view, replica=replica
    )
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
