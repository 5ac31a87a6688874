"""The message batch: one byte layout for the send body, the replicated prepare, the
stored record and the poll reply.

Purpose: build a batch on the client, verify and stamp it on the server in place, read
its messages, and cut a stored batch at an offset for a poll, all without copying
payloads.

Layout (little-endian; apache/iggy ``core/binary_protocol/src/batch.rs``)::

    batch   = [batch header: 256 bytes][message frame]*
    frame   = [message header: 48 bytes][payload][user headers]

    batch header                              message header
      0  partition_id      u64  server          0  checksum         u64
      8  base_offset       u64  server          8  id               u128
     16  base_timestamp    u64  server (µs)    24  offset_delta     u32
     24  origin_timestamp  u64  producer (µs)  28  timestamp_delta  u32 (µs)
     32  batch_length      u64  256 + frames   32  user_headers_len u32
     40  batch_checksum    u64                 36  payload_length   u32
     48  message_count     u32                 40  reserved         u64, zero
     52  reserved (204 bytes), zero

* A message's checksum is xxh3-64 (seed 0) over its frame bytes 8..end, i.e. the rest
  of its header, its payload and its user headers.
* The batch checksum is xxh3-64 over the little-endian header fields partition_id,
  base_offset, base_timestamp, origin_timestamp, batch_length (header bytes 0..40),
  message_count (bytes 48..52), then every message's 8 checksum bytes in order.
* A message's offset is ``base_offset + offset_delta``, its broker timestamp is the
  batch's ``base_timestamp`` and its origin timestamp is ``origin_timestamp +
  timestamp_delta``.

Invariants:

1. :func:`build_batch` writes offset deltas 0..n-1 and the minimum origin timestamp,
   leaves the server fields zero and seals both checksum levels.
2. :func:`verify_batch` accepts a batch only if the frames tile ``batch_length``
   exactly, ``message_count`` matches, reserved bytes are zero, deltas are consecutive,
   and every checksum matches. Its fast path only ever proves a batch valid; any fault
   is reported by the per-message walk, so a rejection always names the first faulty
   message with the walk's code and reason. It returns the packed message checksums
   so :func:`stamp_batch` re-seals the batch without a second walk.
3. Stamping rewrites only header bytes 0..24 and 40..48, in the caller's buffer.
4. Reading and slicing never copy a payload: they return ``memoryview`` slices of the
   buffer they were given. A slice is either the stored record itself (one part) or a
   fresh 256-byte header plus one view of the selected frames (two parts).
"""

from __future__ import annotations

import functools
import struct
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import and_, attrgetter, lshift, or_, rshift, sub
from typing import Final, Literal, NamedTuple

import xxhash

from sdk.wire._buffer import Buffer, as_byte_view
from sdk.wire.codes import IggyErrorCode
from sdk.wire.errors import ProtocolError
from sdk.wire.primitives import MAX_USER_HEADERS_BYTES, decode_user_headers

__all__ = [
    "BATCH_HEADER",
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "BatchMessage",
    "BatchSlice",
    "MAX_PAYLOAD_BYTES",
    "MAX_TIMESTAMP_DELTA_US",
    "MESSAGE_HEADER",
    "MESSAGE_HEADER_SIZE",
    "OutgoingMessage",
    "VerifiedBatch",
    "batch_checksum",
    "build_batch",
    "build_batch_columns",
    "frame_positions",
    "iter_batch_records",
    "read_batch",
    "slice_batch",
    "stamp_batch",
    "stamped_batch",
    "verify_batch",
]

BATCH_HEADER_SIZE: Final = 256
MESSAGE_HEADER_SIZE: Final = 48

MAX_PAYLOAD_BYTES: Final = 64_000_000
"""Largest payload of one message (Iggy's ``MAX_PAYLOAD_SIZE``)."""

MAX_TIMESTAMP_DELTA_US: Final = 0xFFFF_FFFF
"""A batch's origin timestamps may span at most this many µs (about 71.6 minutes)."""

BATCH_HEADER: Final = struct.Struct(
    "<"
    "Q"  # 0    partition_id: u64, stamped by the server at admission
    "Q"  # 8    base_offset: u64, stamped by the server at append
    "Q"  # 16   base_timestamp: u64 µs, stamped by the server at append
    "Q"  # 24   origin_timestamp: u64 µs, the producer's minimum over the batch
    "Q"  # 32   batch_length: u64, 256 + the frames' bytes
    "Q"  # 40   batch_checksum: u64, see the module docstring
    "I"  # 48   message_count: u32
    "204x"  # 52   reserved, zero
)
assert BATCH_HEADER.size == BATCH_HEADER_SIZE

MESSAGE_HEADER: Final = struct.Struct(
    "<"
    "Q"  # 0    checksum: u64, xxh3-64 of frame bytes 8..end
    "Q"  # 8    id, low 64 bits (u128 little-endian)
    "Q"  # 16   id, high 64 bits
    "I"  # 24   offset_delta: u32, offset - base_offset
    "I"  # 28   timestamp_delta: u32 µs, origin timestamp - batch origin_timestamp
    "I"  # 32   user_headers_length: u32
    "I"  # 36   payload_length: u32
    "Q"  # 40   reserved, zero
)
assert MESSAGE_HEADER.size == MESSAGE_HEADER_SIZE

# The message header after its checksum: what the builder packs before hashing.
_MESSAGE_TAIL: Final = struct.Struct("<QQIIII")
assert _MESSAGE_TAIL.size == MESSAGE_HEADER_SIZE - 8 - 8
# What verification needs, skipping the id: checksum, deltas, lengths, reserved.
_MESSAGE_CHECK: Final = struct.Struct("<Q16xIIIIQ")
assert _MESSAGE_CHECK.size == MESSAGE_HEADER_SIZE
# Header bytes 32..48 of a frame read as one field: lengths and reserved together.
_LENGTHS_RESERVED: Final = struct.Struct("<IIQ")
# The lengths alone, read at offset 32 of a message header.
_MESSAGE_LENGTHS: Final = struct.Struct("<II")
# What slicing needs: the checksum (for the new batch checksum) and the lengths.
_MESSAGE_WALK: Final = struct.Struct("<Q24xII")
assert _MESSAGE_WALK.size == MESSAGE_HEADER_SIZE - 8
_U64: Final = struct.Struct("<Q")
_STAMP: Final = struct.Struct("<QQQ")
_U32: Final = struct.Struct("<I")
_RESERVED_ZERO: Final = bytes(BATCH_HEADER_SIZE - 52)
_U64_MASK: Final = 0xFFFF_FFFF_FFFF_FFFF
_U32_MAX: Final = 0xFFFF_FFFF

_digest = xxhash.xxh3_64_intdigest
_BYTES_TYPES: Final = frozenset((bytes, bytearray))
"""Buffers a struct packs as ``s`` fields; other buffers are copied by slice assignment."""
_VIEW_SHAPE: Final = attrgetter("format", "ndim", "c_contiguous")
_FLAT_BYTES: Final = ("B", 1, True)

# Verifying a batch whose frames all have one size (the common producer batch) reads
# its message headers and hashed bytes with a few struct calls instead of a Python step
# per message. Thresholds measured on CPython 3.11 (see _uniform_checksums):
_UNIFORM_COUNT_MIN: Final = 16
"""Below this many messages the per-message scan is as cheap as the bulk setup."""
_UNIFORM_CHUNK_MAX: Final = 64
"""Most frames one compiled struct reads. Chunks are powers of two up to this, so one
frame size needs at most 7 cached structs whatever the message counts."""
_COPY_FRAME_MAX: Final = 2048
"""Largest frame whose hashed bytes are copied out by a struct for hashing: cheaper than
a memoryview slice per frame up to about here, dearer above."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fields of a 256-byte batch header."""

    partition_id: int
    base_offset: int
    base_timestamp: int
    origin_timestamp: int
    batch_length: int
    batch_checksum: int
    message_count: int


class OutgoingMessage(NamedTuple):
    """One message for :func:`build_batch`.

    A NamedTuple rather than a dataclass because producers make one per message and
    the build loop unpacks it positionally.
    """

    id: int
    payload: Buffer
    user_headers: Buffer = b""
    origin_timestamp: int = 0


class BatchMessage(NamedTuple):
    """One message read out of a batch; ``payload`` and ``user_headers`` are views.

    A NamedTuple because readers make one per message on the consume path.
    """

    offset: int
    id: int
    checksum: int
    timestamp: int
    origin_timestamp: int
    payload: memoryview
    user_headers: memoryview


@dataclass(frozen=True, slots=True)
class VerifiedBatch:
    """What :func:`verify_batch` learned: the header and the packed message checksums
    (``8 * message_count`` bytes) that the batch checksum covers."""

    header: BatchHeader
    message_checksums: bytes


@dataclass(frozen=True, slots=True)
class BatchSlice:
    """Part of a stored batch, ready to be sent as one poll-reply record.

    Attributes:
        parts: Either the stored record itself, or a new 256-byte header followed by a
            view of the selected frames. Their concatenation is a valid batch.
        message_count: Messages in the slice.
        first_offset: Offset of the first message in the slice.
        size: Total bytes of ``parts``.
    """

    parts: tuple[Buffer, ...]
    message_count: int
    first_offset: int
    size: int

    @property
    def last_offset(self) -> int:
        """Offset of the last message in the slice."""
        return self.first_offset + self.message_count - 1


def batch_checksum(header_bytes: Buffer, message_checksums: bytes) -> int:
    """The batch checksum from the header bytes (fields as they are now) and the
    packed message checksums."""
    header = as_byte_view(header_bytes)
    return _digest(bytes(header[0:40]) + bytes(header[48:52]) + message_checksums)


def _pack_checksums(checksums: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(checksums)}Q", *checksums)


def build_batch(messages: Sequence[OutgoingMessage], *, headroom: int = 0) -> bytearray:
    """Build a sealed batch from ``messages``, in order.

    Args:
        messages: At least one message. Ids are the producer's (0 is allowed but the
            official SDK mints a random one instead); origin timestamps are µs.
        headroom: Zero bytes to reserve before the batch, so the caller can write a
            frame header and request metadata in front of it without copying.

    Returns:
        ``headroom`` zero bytes followed by the batch.

    Raises:
        ValueError: no messages, a payload or user-header block too large, or origin
            timestamps spanning more than ``MAX_TIMESTAMP_DELTA_US``.
    """
    if not messages:
        raise ValueError("a batch holds at least one message")
    ids, payloads, user_headers, timestamps = zip(*messages, strict=True)
    return build_batch_columns(payloads, ids, timestamps, user_headers, headroom=headroom)


def build_batch_columns(
    payloads: Sequence[Buffer],
    ids: Sequence[int] | bytes,
    origin_timestamps: Sequence[int] | int,
    user_headers: Sequence[Buffer] | None = None,
    *,
    headroom: int = 0,
    reuse: bytearray | None = None,
) -> bytearray:
    """Build a sealed batch from its columns: the same bytes as :func:`build_batch` of
    the messages the columns describe, without an object per message.

    Args:
        payloads: At least one payload: ``bytes``, ``bytearray`` or any contiguous
            buffer (read, not kept: each is copied once, into the batch).
        ids: One id per payload, or the ids packed as 16 little-endian bytes each.
        origin_timestamps: One µs timestamp per payload, or one for them all.
        user_headers: One encoded user-header block per payload, or ``None``: none.
        headroom: Zero bytes to reserve before the batch (see :func:`build_batch`).
        reuse: A buffer an earlier build returned that nothing reads any more: it is
            rewritten and returned when the new batch has its length and one frame
            size (every byte is then written by the build), so a producer sending
            batches of one shape does not take fresh pages from the OS for each one;
            otherwise it is left alone and a new buffer is made.

    Returns:
        ``headroom`` zero bytes followed by the batch.

    Raises:
        ValueError: as :func:`build_batch`, or columns of different lengths.
    """
    count = len(payloads)
    if count == 0:
        raise ValueError("a batch holds at least one message")
    if count > _U32_MAX:
        raise ValueError(f"{count} messages do not fit a batch")
    kinds = set(map(type, payloads))
    packable = kinds <= _BYTES_TYPES
    if not packable and not (
        kinds == {memoryview} and set(map(_VIEW_SHAPE, payloads)) == {_FLAT_BYTES}
    ):
        # Any other buffer is copied by memoryview slice assignment, which needs it
        # flat and in bytes (a view's len counts items, not bytes).
        views: Iterator[memoryview] = map(memoryview, payloads)
        payloads = list(map(memoryview.cast, views, repeat("B")))  # type: ignore[arg-type]
    sizes = list(map(len, payloads))
    payload_size = sizes[0]
    same_sizes = sizes.count(payload_size) == count
    payload_size_max = payload_size if same_sizes else max(sizes)
    if isinstance(ids, bytes | bytearray):
        if len(ids) != 16 * count:
            raise ValueError(f"{len(ids)} bytes of packed ids for {count} messages")
        packed = bytes(ids)
        packed_ids: bytes | None = packed
        # Low and high halves of each id, in message order (u128 little-endian), read
        # only by the builders that pack ids as integers.
        halves: Iterable[int] = _LazyHalves(packed, count)
    else:
        if len(ids) != count:
            raise ValueError(f"{len(ids)} ids for {count} messages")
        packed_ids = None
        halves = _id_halves(ids)
    if isinstance(origin_timestamps, int):
        origin_timestamp = origin_timestamps
        timestamp_deltas: Sequence[int] | None = None
    else:
        if len(origin_timestamps) != count:
            raise ValueError(f"{len(origin_timestamps)} timestamps for {count} messages")
        origin_timestamp = min(origin_timestamps)
        span = max(origin_timestamps) - origin_timestamp
        if span > MAX_TIMESTAMP_DELTA_US:
            raise ValueError(f"origin timestamps span {span} µs, over the maximum")
        timestamp_deltas = (
            None if span == 0 else list(map(sub, origin_timestamps, repeat(origin_timestamp)))
        )
    if payload_size_max > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {payload_size_max} bytes exceeds {MAX_PAYLOAD_BYTES}")
    if user_headers is not None:
        if len(user_headers) != count:
            raise ValueError(f"{len(user_headers)} user-header blocks for {count} messages")
        if not any(user_headers):
            user_headers = None
    headers_size = 0 if user_headers is None else len(user_headers[0])
    uniform = same_sizes and (
        user_headers is None
        or (
            min(map(len, user_headers)) == max(map(len, user_headers))
            and _BYTES_TYPES.issuperset(map(type, user_headers))
        )
    )
    if uniform:
        frames_size = count * (MESSAGE_HEADER_SIZE + payload_size + headers_size)
    else:
        frames_size = (
            count * MESSAGE_HEADER_SIZE
            + sum(sizes)
            + (0 if user_headers is None else sum(map(len, user_headers)))
        )
    batch_length = BATCH_HEADER_SIZE + frames_size
    if uniform and reuse is not None and len(reuse) == headroom + batch_length:
        # A uniform build writes every byte of the batch (its structs zero their pad
        # bytes); only the headroom is zeroed here. A fresh buffer of this size would
        # cost a page fault per 4 KiB when the allocator gave the last one back.
        buffer = reuse
        buffer[:headroom] = bytes(headroom)
    else:
        buffer = bytearray(headroom + batch_length)
    start = headroom + BATCH_HEADER_SIZE
    if uniform:
        checksums = _build_uniform(
            buffer,
            start,
            payloads,
            packable,
            packed_ids,
            halves,
            timestamp_deltas,
            user_headers,
            zeroed=buffer is not reuse,
        )
    else:
        checksums = _build_walk(buffer, start, payloads, halves, timestamp_deltas, user_headers)
    BATCH_HEADER.pack_into(buffer, headroom, 0, 0, 0, origin_timestamp, batch_length, 0, count)
    # batch_checksum's input, sliced straight from the buffer (header bytes 0..40 and
    # 48..52, then the packed message checksums).
    hashed = buffer[headroom : headroom + 40] + buffer[headroom + 48 : headroom + 52] + checksums
    _U64.pack_into(buffer, headroom + 40, _digest(hashed))
    return buffer


class _LazyHalves:
    """The u64 halves of packed ids, unpacked only when iterated: the aligned uniform
    build copies packed ids as they are and never needs them as integers."""

    __slots__ = ("_count", "_packed")

    def __init__(self, packed: bytes, count: int) -> None:
        self._packed = packed
        self._count = count

    def __iter__(self) -> Iterator[int]:
        return iter(struct.unpack(f"<{2 * self._count}Q", self._packed))


def _id_halves(ids: Sequence[int]) -> Iterator[int]:
    """Each id's low and high 64 bits, interleaved (an id outside 0..2**128-1 gives a
    half that does not pack, as a struct would refuse the id itself)."""
    return chain.from_iterable(
        zip(map(and_, ids, repeat(_U64_MASK)), map(rshift, ids, repeat(64)), strict=True)
    )


@functools.lru_cache(maxsize=64)
def _aligned_frame_layout(
    count: int, payload_size: int, headers_size: int, payloads_packed: bool
) -> tuple[struct.Struct, struct.Struct, bytes, bytes, struct.Struct]:
    """For frames whose size is a multiple of 8: a struct writing only the payloads
    (and header blocks), every header left zero; the struct of the hashed bytes (as
    :func:`_frame_structs`); the offset-delta column 0..count-1 and the lengths
    column, packed as u64 words for strided copies into the frames; and the struct
    packing ``count`` checksums."""
    payload = f"{payload_size}s" if payloads_packed else f"{payload_size}x"
    headers = f"{headers_size}s" if headers_size else ""
    frame_size = MESSAGE_HEADER_SIZE + payload_size + headers_size
    return (
        struct.Struct("<" + (f"{MESSAGE_HEADER_SIZE}x" + payload + headers) * count),
        struct.Struct("<" + f"8x{frame_size - 8}s" * count),
        struct.pack(f"<{count}Q", *range(count)),
        _U64.pack(headers_size | payload_size << 32) * count,
        struct.Struct(f"<{count}Q"),
    )


@functools.lru_cache(maxsize=64)
def _frame_structs(
    count: int, payload_size: int, headers_size: int, payloads_packed: bool
) -> tuple[struct.Struct, struct.Struct]:
    """Structs writing and reading ``count`` back-to-back frames of one size in one
    call.

    The first packs every frame but its checksum: id low and high, the offset and
    timestamp deltas as one u64, the two lengths as one u64, and, when
    ``payloads_packed``, the payload (else left zero for the caller to copy in); the
    user-header block follows as bytes when there is one. The second yields each
    frame's bytes 8..end, the bytes its checksum covers (copied out: cheaper than a
    view per frame for the frames producers send, see _COPY_FRAME_MAX).
    Cached because compiling costs about as much as one build.
    """
    payload = f"{payload_size}s" if payloads_packed else f"{payload_size}x"
    headers = f"{headers_size}s" if headers_size else ""
    frame = "8xQQQQ8x" + payload + headers
    frame_size = MESSAGE_HEADER_SIZE + payload_size + headers_size
    return (
        struct.Struct("<" + frame * count),
        struct.Struct("<" + f"8x{frame_size - 8}s" * count),
    )


def _build_uniform(
    buffer: bytearray,
    start: int,
    payloads: Sequence[Buffer],
    packed_payloads: bool,
    packed_ids: bytes | None,
    halves: Iterable[int],
    timestamp_deltas: Sequence[int] | None,
    user_headers: Sequence[Buffer] | None,
    *,
    zeroed: bool,
) -> bytes:
    """Write frames that all have one payload size and one header size with a few
    struct calls, none per message; returns the packed message checksums. Every byte
    of the frames is written (``zeroed``: the buffer is fresh, so bytes that stay
    zero need not be).

    A header field of every frame is written by one strided copy (a memoryview slice
    with a step) of a column packed in advance, whatever the message count: as u64
    words when the frame size is a multiple of 8, else the checksums byte by byte and
    the other fields by the struct that packs the payloads.
    """
    count = len(payloads)
    payload_size = len(payloads[0])
    headers_size = 0 if user_headers is None else len(user_headers[0])
    frame_size = MESSAGE_HEADER_SIZE + payload_size + headers_size
    view = memoryview(buffer)
    end = start + count * frame_size
    if frame_size % 8 == 0:
        # Payloads (and header blocks) by one struct, then each header field as one
        # strided copy of u64 words into every frame at once.
        frames, bodies, offset_deltas, lengths, checksums_struct = _aligned_frame_layout(
            count, payload_size, headers_size, packed_payloads
        )
        blocks: list[Sequence[Buffer]] = []
        if packed_payloads:
            blocks.append(payloads)
        if user_headers is not None:
            blocks.append(user_headers)
        if len(blocks) == 1:
            frames.pack_into(buffer, start, *blocks[0])
        elif blocks:
            frames.pack_into(buffer, start, *chain.from_iterable(zip(*blocks, strict=True)))
        elif not zeroed:
            frames.pack_into(buffer, start)  # all padding: zeroes the reserved words
        # else: nothing to pack, the fresh buffer is zero where the views go
        if packed_ids is None:
            packed_ids = struct.pack(f"<{2 * count}Q", *halves)
        if timestamp_deltas is not None:
            offset_deltas = struct.pack(
                f"<{count}Q", *map(or_, range(count), map(lshift, timestamp_deltas, repeat(32)))
            )
        words = view[start:end].cast("Q")
        stride = frame_size // 8
        id_words = memoryview(packed_ids).cast("Q")
        words[1::stride] = id_words[0::2]
        words[2::stride] = id_words[1::2]
        words[3::stride] = memoryview(offset_deltas).cast("Q")
        words[4::stride] = memoryview(lengths).cast("Q")
    else:
        frames, bodies = _frame_structs(count, payload_size, headers_size, packed_payloads)
        checksums_struct = struct.Struct(f"<{count}Q")
        halves_iterator = iter(halves)
        # Offset delta i in the low half, the timestamp delta in the high half.
        delta_words: Iterable[int] = (
            range(count)
            if timestamp_deltas is None
            else map(or_, range(count), map(lshift, timestamp_deltas, repeat(32)))
        )
        lengths_words = repeat(headers_size | payload_size << 32)
        columns: list[Iterable[object]] = [
            halves_iterator,
            halves_iterator,
            delta_words,
            lengths_words,
        ]
        if packed_payloads:
            columns.append(payloads)
        if user_headers is not None:
            columns.append(user_headers)
        # Some columns repeat without end: the payloads bound the zip.
        frames.pack_into(buffer, start, *chain.from_iterable(zip(*columns, strict=False)))
    if not packed_payloads:
        # Views cannot be packed by a struct: one slice assignment each, run by map.
        payload_starts = range(start + MESSAGE_HEADER_SIZE, end, frame_size)
        payload_ends = range(start + MESSAGE_HEADER_SIZE + payload_size, end + 1, frame_size)
        deque(map(view.__setitem__, map(slice, payload_starts, payload_ends), payloads), 0)
    checksums = checksums_struct.pack(*map(_digest, bodies.unpack_from(buffer, start)))
    if frame_size % 8 == 0:
        # One strided copy of 8-byte items (a raw copy: byte order is kept).
        view[start:end].cast("Q")[:: frame_size // 8] = memoryview(checksums).cast("Q")
    else:
        for byte in range(8):
            view[start + byte : end : frame_size] = checksums[byte::8]
    return checksums


def _build_walk(
    buffer: bytearray,
    start: int,
    payloads: Sequence[Buffer],
    halves: Iterable[int],
    timestamp_deltas: Sequence[int] | None,
    user_headers: Sequence[Buffer] | None,
) -> bytes:
    """Write frames of any sizes one message at a time; returns the packed checksums."""
    count = len(payloads)
    view = memoryview(buffer)
    pack_tail = _MESSAGE_TAIL.pack_into
    pack_u64 = _U64.pack_into
    digest = _digest
    checksums = [0] * count
    halves_iterator = iter(halves)
    deltas: Iterable[int] = repeat(0) if timestamp_deltas is None else timestamp_deltas
    headers: Iterable[Buffer] = repeat(b"") if user_headers is None else user_headers
    position = start
    for index, (payload, id_low, id_high, timestamp_delta, user_header) in enumerate(
        zip(payloads, halves_iterator, halves_iterator, deltas, headers, strict=False)
    ):
        payload_size = len(payload)
        headers_size = len(user_header)
        pack_tail(
            buffer,
            position + 8,
            id_low,
            id_high,
            index,
            timestamp_delta,
            headers_size,
            payload_size,
        )
        payload_start = position + MESSAGE_HEADER_SIZE
        payload_end = payload_start + payload_size
        # Copy through the memoryview: bytearray slice assignment costs about 2.5x
        # as much per call for a 1 kB payload.
        view[payload_start:payload_end] = payload
        end = payload_end + headers_size
        if headers_size:
            view[payload_end:end] = user_header
        checksum = digest(view[position + 8 : end])
        pack_u64(buffer, position, checksum)
        checksums[index] = checksum
        position = end
    return _pack_checksums(checksums)


def _header_fields(view: memoryview) -> BatchHeader:
    return BatchHeader(*BATCH_HEADER.unpack_from(view, 0))


def _check_header(view: memoryview) -> BatchHeader:
    if len(view) < BATCH_HEADER_SIZE:
        raise ProtocolError(f"batch of {len(view)} bytes cannot hold its header")
    if view[52:BATCH_HEADER_SIZE] != _RESERVED_ZERO:
        raise ProtocolError(
            "batch header reserved bytes are not zero", IggyErrorCode.INVALID_RESERVED_FIELD
        )
    header = _header_fields(view)
    if header.batch_length < BATCH_HEADER_SIZE:
        raise ProtocolError(f"batch length {header.batch_length} below the header size")
    # Every message costs at least its header, which bounds the count before any
    # per-message work or allocation is done for it.
    if header.message_count > (header.batch_length - BATCH_HEADER_SIZE) // MESSAGE_HEADER_SIZE:
        raise ProtocolError(
            f"{header.message_count} messages cannot fit {header.batch_length} bytes",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    return header


def verify_batch(batch: Buffer, *, first_offset_delta: int | None = 0) -> VerifiedBatch:
    """Check a whole batch as the server does at admission.

    Args:
        batch: Exactly one batch (``batch_length`` must equal its size).
        first_offset_delta: The offset delta the first message must carry (0 for a
            producer's batch), or ``None`` to accept any start; later messages must
            follow consecutively either way.

    Raises:
        ProtocolError: with ``INVALID_MESSAGE_CHECKSUM`` or ``INVALID_BATCH_CHECKSUM``
            for checksum mismatches, and a format code for any layout fault.
    """
    view = as_byte_view(batch)
    header = _check_header(view)
    size = len(view)
    if header.batch_length != size:
        raise ProtocolError(f"batch length {header.batch_length} but {size} bytes given")
    count = header.message_count
    if count == 0:
        raise ProtocolError("empty batch", IggyErrorCode.INVALID_MESSAGES_COUNT)
    # The bulk proof of validity first; it returns None on any doubt, and the walk,
    # which reports the first fault exactly, has the last word.
    checksums: Sequence[int] | None = None
    if count >= _UNIFORM_COUNT_MIN:
        checksums = _uniform_checksums(view, count, first_offset_delta)
    if checksums is None:
        checksums = _walk_checksums(view, count, first_offset_delta)
    packed = _pack_checksums(checksums)
    if batch_checksum(view, packed) != header.batch_checksum:
        raise ProtocolError("batch checksum mismatch", IggyErrorCode.INVALID_BATCH_CHECKSUM)
    return VerifiedBatch(header, packed)


@functools.lru_cache(maxsize=64)
def _uniform_structs(frames: int, frame_size: int) -> tuple[struct.Struct, struct.Struct | None]:
    """Structs reading ``frames`` back-to-back frames of ``frame_size`` bytes in one call.

    The first yields, per frame, its checksum, its offset delta and its header bytes
    32..48 (lengths and reserved, as one 16-byte string). The second, only for frames
    up to ``_COPY_FRAME_MAX``, yields each frame's bytes 8..end: the checksummed bytes.
    Cached because compiling costs about as much as reading (~60 ns a frame).
    """
    body_size = frame_size - MESSAGE_HEADER_SIZE
    headers = struct.Struct("<" + f"Q16xI4x16s{body_size}x" * frames)
    if frame_size > _COPY_FRAME_MAX:
        return headers, None
    return headers, struct.Struct("<" + f"8x{frame_size - 8}s" * frames)


def _uniform_checksums(
    view: memoryview, count: int, first_offset_delta: int | None
) -> list[int] | None:
    """The message checksums of a valid batch whose frames all have one size, else None.

    A batch qualifies when its frame bytes split evenly into ``count`` frames and every
    frame declares the same lengths, summing to that frame size: then the frames tile
    the batch exactly as the walk would find them, and the remaining checks (reserved
    zero, consecutive deltas, checksums) are made over whole columns in C. ``None``
    means only "not proven valid here": the caller falls back to the walk.
    """
    frame_size, uneven = divmod(len(view) - BATCH_HEADER_SIZE, count)
    if uneven:
        return None
    # _check_header bounds count by the batch length, so frame_size >= 48.
    fields: list[int | bytes] = []
    hashes: list[int] = []
    digest = _digest
    position = BATCH_HEADER_SIZE
    remaining = count
    while remaining:
        frames = min(1 << (remaining.bit_length() - 1), _UNIFORM_CHUNK_MAX)
        headers, bodies = _uniform_structs(frames, frame_size)
        fields += headers.unpack_from(view, position)
        if bodies is not None:
            # Hash chunk by chunk so the copies live no longer than one chunk.
            hashes += map(digest, bodies.unpack_from(view, position))
        position += frames * frame_size
        remaining -= frames
    if frame_size > _COPY_FRAME_MAX:
        hashed_size = frame_size - 8
        hashes = [
            digest(view[start : start + hashed_size])
            for start in range(BATCH_HEADER_SIZE + 8, position, frame_size)
        ]
    checksums, deltas, tails = fields[0::3], fields[1::3], fields[2::3]
    tail = tails[0]
    assert isinstance(tail, bytes)
    headers_size, payload_size, reserved = _LENGTHS_RESERVED.unpack(tail)
    if (
        reserved
        or headers_size  # each header block is decoded: the walk does it
        or payload_size > MAX_PAYLOAD_BYTES
        or headers_size + payload_size != frame_size - MESSAGE_HEADER_SIZE
        or tails.count(tail) != count
    ):
        return None
    first = deltas[0]
    assert isinstance(first, int)
    # Comparing the first delta as the walk does keeps its semantics for any value.
    if first_offset_delta is not None and first != first_offset_delta:
        return None
    if deltas != list(range(first, first + count)) or hashes != checksums:
        return None
    return hashes  # equal to the checksums read, and typed as ints


def _walk_checksums(view: memoryview, count: int, first_offset_delta: int | None) -> list[int]:
    """The message checksums, checking each message in turn: the authority on errors.

    Raises:
        ProtocolError: for the first faulty message, or bytes after the last one.
    """
    unpack = _MESSAGE_CHECK.unpack_from
    digest = _digest
    size = len(view)
    checksums = [0] * count
    position = BATCH_HEADER_SIZE
    expected_delta = first_offset_delta
    for index in range(count):
        if size - position < MESSAGE_HEADER_SIZE:
            raise ProtocolError(f"message {index} header truncated")
        checksum, offset_delta, _, headers_size, payload_size, reserved = unpack(view, position)
        end = position + MESSAGE_HEADER_SIZE + payload_size + headers_size
        if end > size:
            raise ProtocolError(
                f"message {index} runs past the batch", IggyErrorCode.INVALID_MESSAGE_PAYLOAD_LENGTH
            )
        if reserved:
            raise ProtocolError(
                f"message {index} reserved bytes are not zero",
                IggyErrorCode.INVALID_RESERVED_FIELD,
            )
        if payload_size > MAX_PAYLOAD_BYTES:
            raise ProtocolError(
                f"message {index} payload of {payload_size} bytes is above {MAX_PAYLOAD_BYTES}",
                IggyErrorCode.TOO_BIG_MESSAGE_PAYLOAD,
            )
        if headers_size > MAX_USER_HEADERS_BYTES:
            raise ProtocolError(
                f"message {index} user headers of {headers_size} bytes are above "
                f"{MAX_USER_HEADERS_BYTES}",
                IggyErrorCode.TOO_BIG_USER_HEADERS,
            )
        if headers_size:
            # A block that does not decode would be stored and handed to every consumer.
            payload_end = position + MESSAGE_HEADER_SIZE + payload_size
            decode_user_headers(view[payload_end:end])
        if expected_delta is None:
            expected_delta = offset_delta
        elif offset_delta != expected_delta:
            raise ProtocolError(
                f"message {index} has offset delta {offset_delta}, expected {expected_delta}",
                IggyErrorCode.INVALID_OFFSET,
            )
        if digest(view[position + 8 : end]) != checksum:
            raise ProtocolError(
                f"message {index} checksum mismatch", IggyErrorCode.INVALID_MESSAGE_CHECKSUM
            )
        checksums[index] = checksum
        expected_delta += 1
        position = end
    if position != size:
        raise ProtocolError(
            f"{size - position} bytes after the last message",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    return checksums


def stamp_batch(
    batch: bytearray | memoryview,
    verified: VerifiedBatch,
    *,
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
) -> BatchHeader:
    """Stamp the server fields into ``batch`` in place and re-seal its checksum.

    ``verified`` must come from :func:`verify_batch` of these same bytes; only the
    header changes, so the message checksums it carries still hold.

    Returns:
        The header as now written.
    """
    view = as_byte_view(batch)
    assert len(view) == verified.header.batch_length, "stamping a different batch"
    _STAMP.pack_into(view, 0, partition_id, base_offset, base_timestamp)
    checksum = batch_checksum(view, verified.message_checksums)
    _U64.pack_into(view, 40, checksum)
    return _header_fields(view)


def stamped_batch(
    batch: Buffer,
    verified: VerifiedBatch,
    *,
    partition_id: int,
    base_offset: int,
    base_timestamp: int,
) -> bytes:
    """A stamped, re-sealed copy of ``batch``, which is left as it is.

    The same bytes :func:`stamp_batch` writes in place, built with one copy of the
    frames: the server's hand-over of a producer's batch into a prepare body.

    Returns:
        The stamped batch.
    """
    view = as_byte_view(batch)
    assert len(view) == verified.header.batch_length, "stamping a different batch"
    header = bytearray(view[:BATCH_HEADER_SIZE])
    _STAMP.pack_into(header, 0, partition_id, base_offset, base_timestamp)
    _U64.pack_into(header, 40, batch_checksum(header, verified.message_checksums))
    return b"".join((header, view[BATCH_HEADER_SIZE:]))


def iter_batch_records(data: Buffer) -> Iterator[memoryview]:
    """Split back-to-back batch records (a poll reply, a segment) into views.

    Only each record's header is checked here; :func:`read_batch` checks its frames.
    """
    view = as_byte_view(data)
    position = 0
    size = len(view)
    while position < size:
        header = _check_header(view[position:])
        end = position + header.batch_length
        if end > size:
            raise ProtocolError(f"batch record of {header.batch_length} bytes is truncated")
        yield view[position:end]
        position = end


def read_batch(record: Buffer) -> tuple[BatchHeader, list[BatchMessage]]:
    """The header and messages of exactly one batch record, checksums not verified.

    Poll replies pass checksums through as stored (the server verified them at
    admission); call :func:`verify_batch` to check them again. The layout is checked
    in full: frames must tile the record and match ``message_count``.
    """
    view = as_byte_view(record)
    header = _check_header(view)
    size = len(view)
    if header.batch_length != size:
        raise ProtocolError(f"batch length {header.batch_length} but {size} bytes given")
    unpack = MESSAGE_HEADER.unpack_from
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    origin_timestamp = header.origin_timestamp
    messages: list[BatchMessage] = []
    append = messages.append
    # ``_make`` is tuple.__new__, skipping the NamedTuple's Python-level __new__: the
    # difference is about 130 ns of the per-message cost on the consume path.
    make = BatchMessage._make
    position = BATCH_HEADER_SIZE
    for index in range(header.message_count):
        if size - position < MESSAGE_HEADER_SIZE:
            raise ProtocolError(f"message {index} header truncated")
        (
            checksum,
            id_low,
            id_high,
            offset_delta,
            timestamp_delta,
            headers_size,
            payload_size,
            reserved,
        ) = unpack(view, position)
        payload_start = position + MESSAGE_HEADER_SIZE
        payload_end = payload_start + payload_size
        end = payload_end + headers_size
        if end > size:
            raise ProtocolError(
                f"message {index} runs past the batch", IggyErrorCode.INVALID_MESSAGE_PAYLOAD_LENGTH
            )
        if reserved:
            raise ProtocolError(
                f"message {index} reserved bytes are not zero",
                IggyErrorCode.INVALID_RESERVED_FIELD,
            )
        append(
            make(
                (
                    base_offset + offset_delta,
                    id_low | (id_high << 64),
                    checksum,
                    base_timestamp,
                    origin_timestamp + timestamp_delta,
                    view[payload_start:payload_end],
                    view[payload_end:end],
                )
            )
        )
        position = end
    if position != size:
        raise ProtocolError(
            f"{size - position} bytes after the last message",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    return header, messages


def frame_positions(record: Buffer) -> Sequence[int]:
    """Where each message frame of exactly one batch record starts, its layout checked
    as :func:`read_batch` checks it (same faults, same errors), nothing decoded.

    A record whose frames all have one size (a producer's batch as stored) is proven
    with two strided reads of its frames' length and reserved fields, whatever its
    message count; any other record is walked frame by frame.

    Raises:
        ProtocolError: as :func:`read_batch`.
    """
    view = as_byte_view(record)
    header = _check_header(view)
    size = len(view)
    if header.batch_length != size:
        raise ProtocolError(f"batch length {header.batch_length} but {size} bytes given")
    count = header.message_count
    if count == 0:
        return _walk_positions(view, count)
    frame_size, uneven = divmod(size - BATCH_HEADER_SIZE, count)
    if not uneven and frame_size % 8 == 0:
        # Header bytes 32..40 hold both lengths, 40..48 the reserved field: read as
        # one u64 column each, every frame's must equal the first's and zero.
        words = view[BATCH_HEADER_SIZE:].cast("Q")
        stride = frame_size // 8
        lengths = words[4::stride].tobytes()
        first = lengths[:8]
        headers_size, payload_size = _MESSAGE_LENGTHS.unpack(first)
        if (
            MESSAGE_HEADER_SIZE + headers_size + payload_size == frame_size
            and lengths == first * count
            and words[5::stride].tobytes() == bytes(8 * count)
        ):
            return range(BATCH_HEADER_SIZE, size, frame_size)
    return _walk_positions(view, count)


def _walk_positions(view: memoryview, count: int) -> list[int]:
    """The frame starts, checking each message as :func:`read_batch` does."""
    unpack = _LENGTHS_RESERVED.unpack_from
    size = len(view)
    positions = [0] * count
    position = BATCH_HEADER_SIZE
    for index in range(count):
        if size - position < MESSAGE_HEADER_SIZE:
            raise ProtocolError(f"message {index} header truncated")
        headers_size, payload_size, reserved = unpack(view, position + 32)
        end = position + MESSAGE_HEADER_SIZE + payload_size + headers_size
        if end > size:
            raise ProtocolError(
                f"message {index} runs past the batch", IggyErrorCode.INVALID_MESSAGE_PAYLOAD_LENGTH
            )
        if reserved:
            raise ProtocolError(
                f"message {index} reserved bytes are not zero",
                IggyErrorCode.INVALID_RESERVED_FIELD,
            )
        positions[index] = position
        position = end
    if position != size:
        raise ProtocolError(
            f"{size - position} bytes after the last message",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    return positions


def slice_batch(record: Buffer, from_offset: int, count_max: int) -> BatchSlice | None:
    """The messages of a stored batch at or after ``from_offset``, at most ``count_max``.

    ``record`` must be a stored batch: verified at admission, so its offset deltas are
    0..n-1. The whole record is returned as its own single part when every message is
    selected; otherwise the result is a new header (same bases, clamped length and
    count, re-sealed checksum, as Iggy's server does) plus one view of the selected
    frames. Payload bytes are never copied.

    Returns:
        The slice, or ``None`` if no message of the batch is selected.
    """
    view = as_byte_view(record)
    header = _check_header(view)
    size = len(view)
    if header.batch_length != size:
        raise ProtocolError(f"batch length {header.batch_length} but {size} bytes given")
    count = header.message_count
    skip = max(0, from_offset - header.base_offset)
    if count_max <= 0 or skip >= count:
        return None
    take = min(count_max, count - skip)
    first_offset = header.base_offset + skip
    if skip == 0 and take == count:
        return BatchSlice((view,), count, first_offset, size)
    cut = _uniform_cut(view, skip, take)
    if cut is not None:
        start, end, packed = cut
        return _cut_slice(view, start, end, take, first_offset, packed)
    # Two tight loops rather than a helper per frame: a poll walks up to the whole
    # batch, and a Python call per frame costs as much as the walk itself.
    unpack_lengths = _MESSAGE_LENGTHS.unpack_from
    position = BATCH_HEADER_SIZE
    for _ in range(skip):
        if size - position < MESSAGE_HEADER_SIZE:
            raise ProtocolError("stored batch truncated inside a message header")
        headers_size, payload_size = unpack_lengths(view, position + 32)
        position += MESSAGE_HEADER_SIZE + payload_size + headers_size
    start = position
    unpack_walk = _MESSAGE_WALK.unpack_from
    checksums = [0] * take
    for index in range(take):
        if size - position < MESSAGE_HEADER_SIZE:
            raise ProtocolError("stored batch truncated inside a message header")
        checksums[index], headers_size, payload_size = unpack_walk(view, position)
        position += MESSAGE_HEADER_SIZE + payload_size + headers_size
    if position > size:
        raise ProtocolError("stored batch truncated inside a message")
    return _cut_slice(view, start, position, take, first_offset, _pack_checksums(checksums))


def _cut_slice(
    view: memoryview, start: int, end: int, take: int, first_offset: int, checksums: bytes
) -> BatchSlice:
    """The slice of the ``take`` frames at ``view[start:end]``: a new header (the stored
    one with the length and count clamped, re-sealed over ``checksums``, the selected
    messages' packed checksums) and one view of the frames."""
    selected = view[start:end]
    sliced = bytearray(view[:BATCH_HEADER_SIZE])
    _U64.pack_into(sliced, 32, BATCH_HEADER_SIZE + len(selected))
    _U32.pack_into(sliced, 48, take)
    _U64.pack_into(sliced, 40, batch_checksum(sliced, checksums))
    return BatchSlice((bytes(sliced), selected), take, first_offset, len(sliced) + len(selected))


# Column views of uniform frames: the widest item size dividing the frame size, so a
# field of every frame is one strided view of items (8 bytes: one column per field).
_COLUMN_FORMATS: Final[tuple[tuple[int, Literal["Q", "I", "H", "B"]], ...]] = (
    (8, "Q"),
    (4, "I"),
    (2, "H"),
    (1, "B"),
)


def _uniform_cut(view: memoryview, skip: int, take: int) -> tuple[int, int, bytes] | None:
    """Where messages ``skip .. skip + take - 1`` of a stored batch are, and their packed
    checksums, when the frames up to them all declare the first frame's lengths; None
    otherwise (the caller walks the frames).

    Then frame ``k`` starts at ``256 + k * frame_size``: each frame found there declares
    that size, which is what the walk would find frame by frame. The check and the
    checksums are strided views of the batch copied in C, with no Python step per frame
    (a poll's first and last batches are cut here; the ones between are sent whole).
    """
    size = len(view)
    frames = skip + take
    if size - BATCH_HEADER_SIZE < MESSAGE_HEADER_SIZE:
        return None
    headers_size, payload_size = _MESSAGE_LENGTHS.unpack_from(view, BATCH_HEADER_SIZE + 32)
    frame_size = MESSAGE_HEADER_SIZE + headers_size + payload_size
    covered_end = BATCH_HEADER_SIZE + frames * frame_size
    if covered_end > size:
        return None
    width, item = next((w, f) for w, f in _COLUMN_FORMATS if frame_size % w == 0)
    stride = frame_size // width
    columns = 8 // width
    covered = view[BATCH_HEADER_SIZE:covered_end].cast(item)
    # Header bytes 32..40 of every frame covered (both lengths) against the first's.
    first = 32 // width
    lengths = covered[first : first + columns].tobytes()
    for column in range(columns):
        expected = lengths[column * width : (column + 1) * width] * frames
        if covered[first + column :: stride].tobytes() != expected:
            return None
    start = BATCH_HEADER_SIZE + skip * frame_size
    selected = view[start:covered_end].cast(item)
    packed = bytearray(8 * take)
    checksums = memoryview(packed).cast(item)
    for column in range(columns):
        checksums[column::columns] = selected[column::stride]
    return start, covered_end, bytes(packed)
