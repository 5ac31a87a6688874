"""The 256-byte frame headers of the client protocol: request, reply and eviction.

Purpose: pack and parse the three header shapes a client connection carries. Every
frame in both directions is one 256-byte little-endian header followed by a body of
``size - 256`` bytes; the byte at offset 60 (``command``) says which shape it is.

Invariants:

1. Each layout is one ``struct.Struct`` compiled at import, asserted to be 256 bytes,
   with one comment per field giving its offset.
2. ``pack_into`` writes all 256 bytes (reserved regions as zeros) into a caller's
   buffer; ``unpack_from`` reads from any buffer at an offset without copying it.
3. Parsing refuses a ``command`` byte of the wrong shape and an ``operation`` or
   eviction ``reason`` this protocol does not define, with :class:`ProtocolError`.
4. Parsing does not judge the semantic fields: ``validate_request_header`` holds the
   server's admission rules, so the client side can use the same parser.

Theory of operation: u128 fields are carried as 16-byte strings in the struct and
converted with ``int.from_bytes``; the reserved regions are ``x`` pad bytes, so a
parse ignores them and a pack zeroes them. The layouts follow apache/iggy
``core/binary_protocol/src/consensus/header.rs`` (``RequestHeader``, ``ReplyHeader``,
``EvictionHeader``), whose compile-time offset asserts pin the same numbers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from sdk.wire._buffer import Buffer
from sdk.wire.codes import Command, EvictionReason, IggyErrorCode, Operation
from sdk.wire.errors import ProtocolError

__all__ = [
    "COMMAND_OFFSET",
    "EVICTION_HEADER",
    "EvictionHeader",
    "FRAME_SIZE_MAX",
    "HEADER_SIZE",
    "REPLY_HEADER",
    "REQUEST_HEADER",
    "ReplyHeader",
    "RequestHeader",
    "SIZE_OFFSET",
    "STATUS_OFFSET",
    "peek_command",
    "peek_size",
    "validate_request_header",
]

HEADER_SIZE: Final = 256
"""Every frame starts with exactly this many header bytes."""

FRAME_SIZE_MAX: Final = 64 * 1024 * 1024
"""Largest frame (header included) accepted by default, Iggy's ``max_message_size``."""

SIZE_OFFSET: Final = 48
"""Offset of the u32 ``size`` field (total frame length) common to all shapes."""

COMMAND_OFFSET: Final = 60
"""Offset of the u8 ``command`` field common to all shapes."""

STATUS_OFFSET: Final = 216
"""Offset of the u32 ``status`` field of a reply header."""

_SIZE: Final = struct.Struct("<I")

REQUEST_HEADER: Final = struct.Struct(
    "<"
    "16s"  # 0    checksum: u128, zero on client frames (they are not sealed)
    "16s"  # 16   checksum_body: u128, zero on client frames
    "16s"  # 32   cluster: u128, zero from clients
    "I"  # 48   size: u32, whole frame length including this header
    "I"  # 52   view: u32, zero from clients
    "I"  # 56   release: u32, zero from clients
    "B"  # 60   command: u8, Command.REQUEST
    "B"  # 61   replica: u8, zero from clients
    "66x"  # 62   reserved_frame
    "16s"  # 128  client: u128, the client id, random and non-zero
    "16s"  # 144  request_checksum: u128, xxh3-64 of the body widened to u128, 0 = unstamped
    "Q"  # 160  timestamp: u64, informational, echoed in the reply
    "Q"  # 168  request: u64, the request number
    "B"  # 176  operation: u8, Operation
    "7x"  # 177  operation padding
    "Q"  # 184  session: u64, from the register reply; 0 on Register and pre-login reads
    "I"  # 192  user_id: u32, stamped by the server, ignored from clients
    "I"  # 196  code: u32, the command code when operation is NON_REPLICATED, else 0
    "56x"  # 200  reserved
)
assert REQUEST_HEADER.size == HEADER_SIZE

REPLY_HEADER: Final = struct.Struct(
    "<"
    "16s"  # 0    checksum: u128, zero on client frames
    "16s"  # 16   checksum_body: u128, zero on client frames
    "16s"  # 32   cluster: u128
    "I"  # 48   size: u32, whole frame length including this header
    "I"  # 52   view: u32, the view the reply was produced in
    "I"  # 56   release: u32, zero
    "B"  # 60   command: u8, Command.REPLY
    "B"  # 61   replica: u8, the answering replica
    "66x"  # 62   reserved_frame
    "16s"  # 128  request_checksum: u128, echoed from the request
    "16s"  # 144  context: u128
    "16s"  # 160  client: u128, echoed from the request
    "Q"  # 176  op: u64, log position of the committed op (0 for reads)
    "Q"  # 184  commit: u64, commit point at reply time
    "Q"  # 192  timestamp: u64, echoed from the request
    "Q"  # 200  request: u64, echoed from the request, the correlation key
    "B"  # 208  operation: u8, echoed from the request
    "7x"  # 209  operation padding
    "I"  # 216  status: u32, 0 = ok, else an Iggy error decided before commit (empty body)
    "36x"  # 220  reserved
)
assert REPLY_HEADER.size == HEADER_SIZE

EVICTION_HEADER: Final = struct.Struct(
    "<"
    "16s"  # 0    checksum: u128
    "16s"  # 16   checksum_body: u128
    "16s"  # 32   cluster: u128
    "I"  # 48   size: u32, always HEADER_SIZE (evictions carry no body)
    "I"  # 52   view: u32
    "I"  # 56   release: u32
    "B"  # 60   command: u8, Command.EVICTION
    "B"  # 61   replica: u8
    "66x"  # 62   reserved_frame
    "16s"  # 128  client: u128, the evicted client
    "I"  # 144  server_protocol_version: u32, packed, for IncompatibleProtocol
    "I"  # 148  server_protocol_version_min: u32, packed, for IncompatibleProtocol
    "103x"  # 152  reserved
    "B"  # 255  reason: u8, EvictionReason (never 0)
)
assert EVICTION_HEADER.size == HEADER_SIZE


def _u128(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


def _b128(value: int) -> bytes:
    return value.to_bytes(16, "little")


def _check_room(buffer: Buffer, offset: int) -> None:
    if offset < 0 or len(buffer) - offset < HEADER_SIZE:
        raise ProtocolError(
            f"header needs {HEADER_SIZE} bytes at offset {offset}, have {len(buffer) - offset}",
            IggyErrorCode.INVALID_COMMAND,
        )


def peek_size(buffer: Buffer, offset: int = 0) -> int:
    """The ``size`` field of the header at ``offset`` (needs 52 bytes, not 256)."""
    if offset < 0 or len(buffer) - offset < SIZE_OFFSET + 4:
        raise ProtocolError("header too short to hold its size", IggyErrorCode.INVALID_COMMAND)
    size: int = _SIZE.unpack_from(buffer, offset + SIZE_OFFSET)[0]
    return size


def peek_command(buffer: Buffer, offset: int = 0) -> Command:
    """The ``command`` of the header at ``offset``; unknown commands are refused."""
    if offset < 0 or len(buffer) - offset <= COMMAND_OFFSET:
        raise ProtocolError("header too short to hold its command", IggyErrorCode.INVALID_COMMAND)
    raw = buffer[offset + COMMAND_OFFSET]
    try:
        return Command(raw)
    except ValueError:
        raise ProtocolError(f"unknown command {raw}", IggyErrorCode.INVALID_COMMAND) from None


def _operation(raw: int) -> Operation:
    try:
        return Operation(raw)
    except ValueError:
        raise ProtocolError(
            f"unknown operation {raw}",
            IggyErrorCode.INVALID_COMMAND,
            EvictionReason.INVALID_REQUEST_OPERATION,
        ) from None


def _expect_command(raw: int, expected: Command) -> None:
    if raw != expected:
        raise ProtocolError(
            f"command {raw} where {expected.name} ({int(expected)}) was expected",
            IggyErrorCode.INVALID_COMMAND,
        )


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A client request header (``command = REQUEST``).

    Attributes are the wire fields of the same name; ``code`` is the u32 at bytes
    196..200, the command code of a ``NON_REPLICATED`` request and zero otherwise.
    """

    size: int
    client: int
    request: int
    session: int
    operation: Operation
    code: int = 0
    request_checksum: int = 0
    timestamp: int = 0
    user_id: int = 0
    checksum: int = 0
    checksum_body: int = 0
    cluster: int = 0
    view: int = 0
    release: int = 0
    replica: int = 0

    def pack_into(self, buffer: bytearray | memoryview, offset: int = 0) -> None:
        """Write this header as 256 bytes at ``offset`` of ``buffer``."""
        REQUEST_HEADER.pack_into(
            buffer,
            offset,
            _b128(self.checksum),
            _b128(self.checksum_body),
            _b128(self.cluster),
            self.size,
            self.view,
            self.release,
            Command.REQUEST,
            self.replica,
            _b128(self.client),
            _b128(self.request_checksum),
            self.timestamp,
            self.request,
            self.operation,
            self.session,
            self.user_id,
            self.code,
        )

    def pack(self) -> bytes:
        """This header as 256 new bytes."""
        buffer = bytearray(HEADER_SIZE)
        self.pack_into(buffer)
        return bytes(buffer)

    @classmethod
    def unpack_from(cls, buffer: Buffer, offset: int = 0) -> RequestHeader:
        """Parse the request header at ``offset`` of ``buffer``."""
        _check_room(buffer, offset)
        (
            checksum,
            checksum_body,
            cluster,
            size,
            view,
            release,
            command,
            replica,
            client,
            request_checksum,
            timestamp,
            request,
            operation,
            session,
            user_id,
            code,
        ) = REQUEST_HEADER.unpack_from(buffer, offset)
        _expect_command(command, Command.REQUEST)
        return cls(
            size=size,
            client=_u128(client),
            request=request,
            session=session,
            operation=_operation(operation),
            code=code,
            request_checksum=_u128(request_checksum),
            timestamp=timestamp,
            user_id=user_id,
            checksum=_u128(checksum),
            checksum_body=_u128(checksum_body),
            cluster=_u128(cluster),
            view=view,
            release=release,
            replica=replica,
        )


def validate_request_header(header: RequestHeader) -> None:
    """Apply the server's admission rules to a parsed request header.

    The rules of Iggy's ``validate_request_fields`` plus the operation gate:
    ``client != 0``; the operation is one a client may send (not reserved, not
    server-internal); ``REGISTER`` carries ``session == 0`` and ``request == 0``;
    every other operation except ``NON_REPLICATED`` carries ``session > 0`` and
    ``request > 0``. ``NON_REPLICATED`` is sessionless by design so that ping works
    before login. Kept apart from parsing so a client can parse replies' echoes
    without inheriting server policy.

    Raises:
        ProtocolError: naming the first rule broken.
    """
    if header.client == 0:
        raise ProtocolError("request: client must be non-zero", IggyErrorCode.INVALID_CLIENT_ID)
    operation = header.operation
    if not operation.is_client_allowed:
        raise ProtocolError(
            f"request: operation {operation.name} is not allowed from clients",
            IggyErrorCode.INVALID_COMMAND,
            EvictionReason.INVALID_REQUEST_OPERATION,
        )
    if operation is Operation.REGISTER:
        if header.session != 0 or header.request != 0:
            raise ProtocolError(
                "register: session and request must be 0", IggyErrorCode.INVALID_COMMAND
            )
    elif operation is not Operation.NON_REPLICATED and (header.session == 0 or header.request == 0):
        raise ProtocolError(
            f"{operation.name}: session and request must be > 0",
            IggyErrorCode.INVALID_SESSION,
            EvictionReason.NO_SESSION if header.session == 0 else None,
        )


@dataclass(frozen=True, slots=True)
class ReplyHeader:
    """A server reply header (``command = REPLY``); fields as on the wire."""

    size: int
    client: int
    request: int
    operation: Operation
    status: int = 0
    op: int = 0
    commit: int = 0
    timestamp: int = 0
    request_checksum: int = 0
    context: int = 0
    checksum: int = 0
    checksum_body: int = 0
    cluster: int = 0
    view: int = 0
    release: int = 0
    replica: int = 0

    def pack_into(self, buffer: bytearray | memoryview, offset: int = 0) -> None:
        """Write this header as 256 bytes at ``offset`` of ``buffer``."""
        REPLY_HEADER.pack_into(
            buffer,
            offset,
            _b128(self.checksum),
            _b128(self.checksum_body),
            _b128(self.cluster),
            self.size,
            self.view,
            self.release,
            Command.REPLY,
            self.replica,
            _b128(self.request_checksum),
            _b128(self.context),
            _b128(self.client),
            self.op,
            self.commit,
            self.timestamp,
            self.request,
            self.operation,
            self.status,
        )

    def pack(self) -> bytes:
        """This header as 256 new bytes."""
        buffer = bytearray(HEADER_SIZE)
        self.pack_into(buffer)
        return bytes(buffer)

    @classmethod
    def unpack_from(cls, buffer: Buffer, offset: int = 0) -> ReplyHeader:
        """Parse the reply header at ``offset`` of ``buffer``."""
        _check_room(buffer, offset)
        (
            checksum,
            checksum_body,
            cluster,
            size,
            view,
            release,
            command,
            replica,
            request_checksum,
            context,
            client,
            op,
            commit,
            timestamp,
            request,
            operation,
            status,
        ) = REPLY_HEADER.unpack_from(buffer, offset)
        _expect_command(command, Command.REPLY)
        return cls(
            size=size,
            client=_u128(client),
            request=request,
            operation=_operation(operation),
            status=status,
            op=op,
            commit=commit,
            timestamp=timestamp,
            request_checksum=_u128(request_checksum),
            context=_u128(context),
            checksum=_u128(checksum),
            checksum_body=_u128(checksum_body),
            cluster=_u128(cluster),
            view=view,
            release=release,
            replica=replica,
        )


@dataclass(frozen=True, slots=True)
class EvictionHeader:
    """A session-terminal eviction (``command = EVICTION``), always header-only."""

    client: int
    reason: EvictionReason
    server_protocol_version: int = 0
    server_protocol_version_min: int = 0
    size: int = HEADER_SIZE
    checksum: int = 0
    checksum_body: int = 0
    cluster: int = 0
    view: int = 0
    release: int = 0
    replica: int = 0

    def pack_into(self, buffer: bytearray | memoryview, offset: int = 0) -> None:
        """Write this header as 256 bytes at ``offset`` of ``buffer``."""
        EVICTION_HEADER.pack_into(
            buffer,
            offset,
            _b128(self.checksum),
            _b128(self.checksum_body),
            _b128(self.cluster),
            self.size,
            self.view,
            self.release,
            Command.EVICTION,
            self.replica,
            _b128(self.client),
            self.server_protocol_version,
            self.server_protocol_version_min,
            self.reason,
        )

    def pack(self) -> bytes:
        """This header as 256 new bytes."""
        buffer = bytearray(HEADER_SIZE)
        self.pack_into(buffer)
        return bytes(buffer)

    @classmethod
    def unpack_from(cls, buffer: Buffer, offset: int = 0) -> EvictionHeader:
        """Parse the eviction header at ``offset`` of ``buffer``."""
        _check_room(buffer, offset)
        (
            checksum,
            checksum_body,
            cluster,
            size,
            view,
            release,
            command,
            replica,
            client,
            version,
            version_min,
            reason,
        ) = EVICTION_HEADER.unpack_from(buffer, offset)
        _expect_command(command, Command.EVICTION)
        if reason == EvictionReason.RESERVED:
            raise ProtocolError("eviction without a reason", IggyErrorCode.INVALID_COMMAND)
        try:
            known_reason = EvictionReason(reason)
        except ValueError:
            raise ProtocolError(
                f"unknown eviction reason {reason}", IggyErrorCode.INVALID_COMMAND
            ) from None
        return cls(
            client=_u128(client),
            reason=known_reason,
            server_protocol_version=version,
            server_protocol_version_min=version_min,
            size=size,
            checksum=_u128(checksum),
            checksum_body=_u128(checksum_body),
            cluster=_u128(cluster),
            view=view,
            release=release,
            replica=replica,
        )
