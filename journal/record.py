"""Records: the unit of a journal, one per VSR op.

Purpose: frame one op (a stamped message batch for a partition, a CBOR op for the metadata
group; the journal never looks inside) as a fixed 128-byte header plus an opaque body, and
tell a valid record from anything else a disk may hand back.

Layout (little-endian; ``RECORD_HEADER_SIZE`` = 128, then ``body_size`` bytes of body)::

    offset size field
         0   16 checksum        xxh3-128 of header bytes [16, 128)
        16   16 checksum_body   xxh3-128 of the body
        32   16 client_id       u128, the client that sent the request
        48    8 op              VSR op number, >= 1
        56    8 view            view in which the op was prepared
        64    8 offset          message offset of the first message in the body
        72    8 timestamp_us    primary-assigned timestamp, microseconds
        80    8 request         the client's request number
        88    4 body_size       bytes of body that follow the header
        92    4 message_count   messages in the body, >= 0 (0: a record of no message)
        96    2 format_version  RECORD_FORMAT_VERSION
        98   30 reserved        zero

Invariants:

1. A header is valid iff its checksum matches, its format version is known, its reserved
   bytes are zero, ``body_size <= RECORD_BODY_SIZE_MAX`` and ``op >= 1``. Nothing else (no
   magic number) makes a header valid. A record may hold no message (``message_count``
   0): a partition's consumer offset store is an op of its log, but no message.
2. ``checksum`` covers ``checksum_body``, so a valid header pins the exact body; a record
   is valid iff its header is valid and its body hashes to ``checksum_body``.
3. Every record is checked whenever it is read back; the checksums are computed over the
   very bytes that are then written, and the codec's round trip is a property test.

Theory of operation: the header is built with ``pack_into`` into a fresh 128-byte
``bytearray`` with a zero checksum, hashed over ``[16, 128)`` through a ``memoryview``,
then the checksum is packed in place (kafka-python's ``write_header``). The body is never
copied here: the journal writes header and body with one vectored write. xxh3-128 runs at
tens of GB/s, far above disk speed, so checksums cost nothing measurable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

import xxhash

__all__ = [
    "RECORD_BODY_SIZE_MAX",
    "RECORD_FORMAT_VERSION",
    "RECORD_HEADER",
    "RECORD_HEADER_SIZE",
    "Bytes",
    "Record",
    "RecordHeader",
    "body_matches",
    "checksum",
    "encode_header",
    "header_in_range",
    "parse_header",
]

Bytes = bytes | bytearray | memoryview
"""Anything the journal accepts as bytes (``collections.abc.Buffer`` needs 3.12)."""

RECORD_FORMAT_VERSION: Final = 1
RECORD_HEADER_SIZE: Final = 128
RECORD_BODY_SIZE_MAX: Final = 64 * 1024 * 1024
"""Largest body a record may carry: Iggy's largest frame (``max_message_size``)."""

U64_MAX: Final = (1 << 64) - 1
U128_MAX: Final = (1 << 128) - 1

RECORD_HEADER: Final = struct.Struct(
    "<"
    "QQ"  # checksum: xxh3-128 of bytes [16, 128), low u64 then high u64
    "QQ"  # checksum_body: xxh3-128 of the body, low u64 then high u64
    "QQ"  # client_id: u128, low u64 then high u64
    "Q"  # op
    "Q"  # view
    "Q"  # offset: first message offset
    "Q"  # timestamp_us
    "Q"  # request
    "I"  # body_size
    "I"  # message_count
    "H"  # format_version
    "30x"  # reserved, zero
)
assert RECORD_HEADER.size == RECORD_HEADER_SIZE
assert RECORD_HEADER_SIZE % 16 == 0

CHECKSUM_SIZE: Final = 16
"""The header checksum covers every header byte after itself."""

_RESERVED_OFFSET: Final = 98
_RESERVED_ZERO: Final = bytes(RECORD_HEADER_SIZE - _RESERVED_OFFSET)
_U64_MASK: Final = U64_MAX


def checksum(data: Bytes) -> int:
    """The journal's checksum: xxh3-128 as an int (one function, so it can change once)."""
    return xxhash.xxh3_128_intdigest(data)


def _size(data: Bytes) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """A decoded, valid record header.

    Attributes:
        op: VSR op number.
        view: The view in which the op was prepared.
        client_id: The requesting client (u128).
        request: The client's request number.
        offset: Message offset of the first message in the body.
        message_count: Messages in the body (0 for a record of no message).
        timestamp_us: Primary-assigned timestamp in microseconds.
        body_size: Body length in bytes.
        checksum_body: xxh3-128 of the body.
        checksum: xxh3-128 of the header after this field.
    """

    op: int
    view: int
    client_id: int
    request: int
    offset: int
    message_count: int
    timestamp_us: int
    body_size: int
    checksum_body: int
    checksum: int

    @property
    def size(self) -> int:
        """Bytes the whole record takes in a segment: header plus body."""
        return RECORD_HEADER_SIZE + self.body_size

    @property
    def offset_next(self) -> int:
        """The offset of the first message after this record."""
        return self.offset + self.message_count


@dataclass(frozen=True, slots=True)
class Record:
    """A valid record: its header and a view of its body.

    ``body`` is a ``memoryview`` into the buffer the record was read into; several records
    of one range read share one buffer, so the bodies are copied only once, from the
    kernel.
    """

    header: RecordHeader
    body: memoryview


def encode_header(
    body: Bytes,
    *,
    op: int,
    view: int,
    client_id: int,
    request: int,
    offset: int,
    message_count: int,
    timestamp_us: int,
    body_prefix: Bytes = b"",
) -> tuple[bytearray, RecordHeader]:
    """Build the 128 header bytes for ``body``; return them and their decoded form.

    With ``body_prefix`` the record body is ``body_prefix`` then ``body``, hashed in one
    streaming pass, so a caller with a small header in front of a large body never has
    to join them.
    """
    assert 1 <= op <= U64_MAX
    assert 0 <= view <= U64_MAX
    assert 0 <= client_id <= U128_MAX
    assert 0 <= request <= U64_MAX
    assert 0 <= offset <= U64_MAX
    assert 0 <= message_count <= 0xFFFF_FFFF
    assert 0 <= timestamp_us <= U64_MAX
    body_size = _size(body_prefix) + _size(body)
    assert body_size <= RECORD_BODY_SIZE_MAX
    if body_prefix:
        hasher = xxhash.xxh3_128(body_prefix)
        hasher.update(body)
        checksum_body = hasher.intdigest()
    else:
        checksum_body = checksum(body)
    buffer = bytearray(RECORD_HEADER_SIZE)
    RECORD_HEADER.pack_into(
        buffer,
        0,
        0,
        0,
        checksum_body & _U64_MASK,
        checksum_body >> 64,
        client_id & _U64_MASK,
        client_id >> 64,
        op,
        view,
        offset,
        timestamp_us,
        request,
        body_size,
        message_count,
        RECORD_FORMAT_VERSION,
    )
    with memoryview(buffer) as view_bytes:
        header_checksum = checksum(view_bytes[CHECKSUM_SIZE:])
    struct.pack_into("<QQ", buffer, 0, header_checksum & _U64_MASK, header_checksum >> 64)
    header = RecordHeader(
        op=op,
        view=view,
        client_id=client_id,
        request=request,
        offset=offset,
        message_count=message_count,
        timestamp_us=timestamp_us,
        body_size=body_size,
        checksum_body=checksum_body,
        checksum=header_checksum,
    )
    # The pair assertion (what we built parses back to what we meant) lives in the codec's
    # property tests: at 2.7 us it would be a tenth of the append path's own cost.
    return buffer, header


def parse_header(buffer: Bytes, position: int) -> RecordHeader | None:
    """Decode the header at ``position``, or return None if it is not a valid header.

    ``buffer`` must hold at least ``RECORD_HEADER_SIZE`` bytes from ``position``.
    """
    assert position >= 0
    assert position + RECORD_HEADER_SIZE <= len(buffer)
    (
        checksum_low,
        checksum_high,
        checksum_body_low,
        checksum_body_high,
        client_id_low,
        client_id_high,
        op,
        view,
        offset,
        timestamp_us,
        request,
        body_size,
        message_count,
        format_version,
    ) = RECORD_HEADER.unpack_from(buffer, position)
    with memoryview(buffer) as data:
        header_checksum = checksum(data[position + CHECKSUM_SIZE : position + RECORD_HEADER_SIZE])
        if header_checksum != checksum_low | (checksum_high << 64):
            return None
        if data[position + _RESERVED_OFFSET : position + RECORD_HEADER_SIZE] != _RESERVED_ZERO:
            return None
    if format_version != RECORD_FORMAT_VERSION:
        return None
    if body_size > RECORD_BODY_SIZE_MAX or op == 0:
        return None
    return RecordHeader(
        op=op,
        view=view,
        client_id=client_id_low | (client_id_high << 64),
        request=request,
        offset=offset,
        message_count=message_count,
        timestamp_us=timestamp_us,
        body_size=body_size,
        checksum_body=checksum_body_low | (checksum_body_high << 64),
        checksum=header_checksum,
    )


def header_in_range(header: RecordHeader) -> bool:
    """Whether every field of ``header`` fits the layout (for headers from elsewhere)."""
    return (
        1 <= header.op <= U64_MAX
        and 0 <= header.view <= U64_MAX
        and 0 <= header.client_id <= U128_MAX
        and 0 <= header.request <= U64_MAX
        and 0 <= header.offset <= U64_MAX - 0xFFFF_FFFF
        and 0 <= header.message_count <= 0xFFFF_FFFF
        and 0 <= header.timestamp_us <= U64_MAX
        and 0 <= header.body_size <= RECORD_BODY_SIZE_MAX
    )


def body_matches(header: RecordHeader, body: Bytes) -> bool:
    """Whether ``body`` is the body ``header`` pins (length and checksum)."""
    return len(body) == header.body_size and checksum(body) == header.checksum_body
