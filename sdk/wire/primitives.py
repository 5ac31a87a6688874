"""Shared encodings of the Iggy 0.9 payloads: names, identifiers, consumers, partitioning,
polling strategies, user headers and option blocks.

Purpose: the building blocks every request and reply payload is made of, each with an
``encode_*(writer, value)`` / ``decode_*(reader)`` pair.

Invariants:

1. Decoders are strict: any value an encoder would not produce is refused with
   :class:`ProtocolError` (bad kind, bad length, invalid UTF-8, a partition flag other
   than 0/1, a non-zero partition id under flag 0, a duplicate option key). Hence a
   successful decode re-encodes to the identical bytes.
2. Encoders refuse values that cannot be represented (a 300-byte name, an empty key)
   with ``ValueError``: that is the caller's mistake, not the remote's.
3. TLV blocks keep the order of their entries, so they round-trip byte for byte.

Layouts (all little-endian; apache/iggy ``core/binary_protocol/src/primitives/``):

* Name: ``[len u8][utf8]``, 1..255 bytes.
* Identifier: ``[kind u8][len u8][value]``; kind 1 numeric (len 4, u32), kind 2 string
  (len 1..255).
* Consumer: ``[kind u8][Identifier]``; kind 1 consumer, 2 consumer group.
* Optional partition id: ``[flag u8][id u32]``, id 0 when the flag is 0.
* Partitioning: ``[kind u8][len u8][value]``; 1 balanced (len 0), 2 partition id
  (len 4, u32), 3 messages key (len 1..255).
* Polling strategy: ``[kind u8][value u64]``; 1 offset, 2 timestamp (µs), 3 first,
  4 last, 5 next.
* User headers and option blocks: TLV ``[kind u8][len u32][data]``, alternating key
  and value, each 1..255 bytes. Option keys are strings, unique, at most 1024 pairs
  and 100,000 bytes. A request's options block has no length: it runs to the end of
  the body (:func:`read_request_options`); a reply's is behind a u32 length.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

import xxhash

from sdk.wire._buffer import Buffer, Reader, Writer
from sdk.wire.codes import IggyErrorCode
from sdk.wire.errors import ProtocolError

__all__ = [
    "AckLevel",
    "Balanced",
    "Consumer",
    "ConsumerKind",
    "HeaderKind",
    "Identifier",
    "MAX_NAME_LENGTH",
    "MAX_OPTIONS",
    "MAX_OPTIONS_BYTES",
    "MAX_USER_HEADERS_BYTES",
    "MessagesKey",
    "OptionEntry",
    "PartitionId",
    "Partitioning",
    "PartitioningKind",
    "PollingKind",
    "PollingStrategy",
    "UserHeader",
    "decode_consumer",
    "decode_header_value",
    "decode_identifier",
    "decode_name",
    "decode_options",
    "decode_options_prefixed",
    "decode_partition_flag",
    "decode_partitioning",
    "decode_polling_strategy",
    "decode_user_headers",
    "encode_consumer",
    "encode_header_value",
    "encode_identifier",
    "encode_name",
    "encode_options",
    "encode_options_prefixed",
    "encode_partition_flag",
    "encode_partitioning",
    "encode_polling_strategy",
    "encode_user_headers",
    "read_request_options",
]

MAX_NAME_LENGTH: Final = 255
"""Longest name, string identifier, messages key or TLV field, in bytes."""

MAX_USER_HEADERS_BYTES: Final = 100_000
"""Largest user-headers block of one message."""

MAX_OPTIONS: Final = 1024
"""Most key/value pairs in one options block."""

MAX_OPTIONS_BYTES: Final = 100_000
"""Largest options block, in bytes."""

_U32_MAX: Final = 0xFFFF_FFFF
_U64_MAX: Final = 0xFFFF_FFFF_FFFF_FFFF


# --- names -------------------------------------------------------------------------


def _check_name(name: str, what: str) -> bytes:
    raw = name.encode("utf-8")
    if not 1 <= len(raw) <= MAX_NAME_LENGTH:
        raise ValueError(f"{what} must be 1..{MAX_NAME_LENGTH} UTF-8 bytes, got {len(raw)}")
    return raw


def encode_name(writer: Writer, name: str) -> None:
    """Append ``[len u8][utf8]``."""
    raw = _check_name(name, "name")
    writer.u8(len(raw))
    writer.raw(raw)


def decode_name(reader: Reader) -> str:
    """Read ``[len u8][utf8]`` with a length of 1..255."""
    length = reader.u8()
    if length == 0:
        raise ProtocolError("empty name", IggyErrorCode.INVALID_FORMAT)
    return reader.utf8(length)


# --- identifiers -------------------------------------------------------------------

_ID_NUMERIC: Final = 1
_ID_STRING: Final = 2


@dataclass(frozen=True, slots=True)
class Identifier:
    """A stream, topic, group or user identifier: a u32 id or a name.

    A string that happens to be all digits stays a string identifier; the choice of
    kind is the sender's and is preserved on the wire.
    """

    value: int | str

    @classmethod
    def numeric(cls, value: int) -> Identifier:
        """A numeric identifier (kind 1)."""
        return cls(value)

    @classmethod
    def named(cls, name: str) -> Identifier:
        """A string identifier (kind 2)."""
        return cls(name)

    def __str__(self) -> str:
        return str(self.value)


def encode_identifier(writer: Writer, identifier: Identifier) -> None:
    """Append ``[kind u8][len u8][value]``."""
    value = identifier.value
    if isinstance(value, int):
        if not 0 <= value <= _U32_MAX:
            raise ValueError(f"numeric identifier {value} outside u32")
        writer.u8(_ID_NUMERIC)
        writer.u8(4)
        writer.u32(value)
    else:
        raw = _check_name(value, "string identifier")
        writer.u8(_ID_STRING)
        writer.u8(len(raw))
        writer.raw(raw)


def decode_identifier(reader: Reader) -> Identifier:
    """Read ``[kind u8][len u8][value]``."""
    kind = reader.u8()
    length = reader.u8()
    if kind == _ID_NUMERIC:
        if length != 4:
            raise ProtocolError(
                f"numeric identifier of length {length}", IggyErrorCode.INVALID_IDENTIFIER
            )
        return Identifier(reader.u32())
    if kind == _ID_STRING:
        if length == 0:
            raise ProtocolError("empty string identifier", IggyErrorCode.INVALID_IDENTIFIER)
        return Identifier(reader.utf8(length))
    raise ProtocolError(f"unknown identifier kind {kind}", IggyErrorCode.INVALID_IDENTIFIER)


# --- consumers ---------------------------------------------------------------------


class ConsumerKind(enum.IntEnum):
    """Whether offsets belong to a single consumer or to a consumer group."""

    CONSUMER = 1
    CONSUMER_GROUP = 2


@dataclass(frozen=True, slots=True)
class Consumer:
    """A consumer or consumer group, the owner of a stored offset."""

    kind: ConsumerKind
    id: Identifier


def encode_consumer(writer: Writer, consumer: Consumer) -> None:
    """Append ``[kind u8][Identifier]``."""
    writer.u8(consumer.kind)
    encode_identifier(writer, consumer.id)


def decode_consumer(reader: Reader) -> Consumer:
    """Read ``[kind u8][Identifier]``."""
    raw = reader.u8()
    try:
        kind = ConsumerKind(raw)
    except ValueError:
        raise ProtocolError(f"unknown consumer kind {raw}", IggyErrorCode.INVALID_FORMAT) from None
    return Consumer(kind, decode_identifier(reader))


# --- optional partition id ---------------------------------------------------------


def encode_partition_flag(writer: Writer, partition_id: int | None) -> None:
    """Append ``[flag u8][id u32]``: flag 0 and id 0 for ``None``."""
    if partition_id is None:
        writer.u8(0)
        writer.u32(0)
    else:
        writer.u8(1)
        writer.u32(partition_id)


def decode_partition_flag(reader: Reader) -> int | None:
    """Read ``[flag u8][id u32]``."""
    flag = reader.u8()
    partition_id = reader.u32()
    if flag == 1:
        return partition_id
    if flag == 0 and partition_id == 0:
        return None
    raise ProtocolError(
        f"partition flag {flag} with id {partition_id}", IggyErrorCode.INVALID_FORMAT
    )


# --- partitioning ------------------------------------------------------------------


class PartitioningKind(enum.IntEnum):
    """How a send picks its partition."""

    BALANCED = 1
    PARTITION_ID = 2
    MESSAGES_KEY = 3


@dataclass(frozen=True, slots=True)
class Balanced:
    """Let the server pick a partition round-robin."""


@dataclass(frozen=True, slots=True)
class PartitionId:
    """Send to this partition."""

    partition_id: int


@dataclass(frozen=True, slots=True)
class MessagesKey:
    """Send to the partition ``xxh32(key) % partitions_count``."""

    key: bytes

    def partition(self, partitions_count: int) -> int:
        """The partition this key maps to: XxHash32 (seed 0) of the key, modulo the count.

        Client and server must agree on it, so both call this one function.
        """
        assert partitions_count > 0
        return xxhash.xxh32_intdigest(self.key, seed=0) % partitions_count


Partitioning: TypeAlias = Balanced | PartitionId | MessagesKey


def encode_partitioning(writer: Writer, partitioning: Partitioning) -> None:
    """Append ``[kind u8][len u8][value]``."""
    if isinstance(partitioning, Balanced):
        writer.u8(PartitioningKind.BALANCED)
        writer.u8(0)
    elif isinstance(partitioning, PartitionId):
        writer.u8(PartitioningKind.PARTITION_ID)
        writer.u8(4)
        writer.u32(partitioning.partition_id)
    else:
        key = partitioning.key
        if not 1 <= len(key) <= MAX_NAME_LENGTH:
            raise ValueError(f"messages key must be 1..{MAX_NAME_LENGTH} bytes, got {len(key)}")
        writer.u8(PartitioningKind.MESSAGES_KEY)
        writer.u8(len(key))
        writer.raw(key)


def decode_partitioning(reader: Reader) -> Partitioning:
    """Read ``[kind u8][len u8][value]``."""
    kind = reader.u8()
    length = reader.u8()
    if kind == PartitioningKind.BALANCED:
        if length != 0:
            raise ProtocolError(f"balanced partitioning of length {length}")
        return Balanced()
    if kind == PartitioningKind.PARTITION_ID:
        if length != 4:
            raise ProtocolError(f"partition-id partitioning of length {length}")
        return PartitionId(reader.u32())
    if kind == PartitioningKind.MESSAGES_KEY:
        if length == 0:
            raise ProtocolError("empty messages key", IggyErrorCode.INVALID_KEY_VALUE_LENGTH)
        return MessagesKey(bytes(reader.take(length)))
    raise ProtocolError(f"unknown partitioning kind {kind}")


# --- polling strategy --------------------------------------------------------------


class PollingKind(enum.IntEnum):
    """Where a poll starts."""

    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


@dataclass(frozen=True, slots=True)
class PollingStrategy:
    """``[kind u8][value u64]``; ``value`` is an offset, a µs timestamp, or ignored
    (but carried, so it round-trips) for first/last/next."""

    kind: PollingKind
    value: int = 0

    @classmethod
    def offset(cls, offset: int) -> PollingStrategy:
        """Start at ``offset``."""
        return cls(PollingKind.OFFSET, offset)

    @classmethod
    def timestamp(cls, timestamp_us: int) -> PollingStrategy:
        """Start at the first message appended at or after ``timestamp_us``."""
        return cls(PollingKind.TIMESTAMP, timestamp_us)

    @classmethod
    def first(cls) -> PollingStrategy:
        """Start at the oldest message."""
        return cls(PollingKind.FIRST)

    @classmethod
    def last(cls) -> PollingStrategy:
        """Start at the newest messages."""
        return cls(PollingKind.LAST)

    @classmethod
    def next(cls) -> PollingStrategy:
        """Continue after this consumer's stored offset."""
        return cls(PollingKind.NEXT)


_POLLING: Final = struct.Struct("<BQ")


def encode_polling_strategy(writer: Writer, strategy: PollingStrategy) -> None:
    """Append the fixed 9 bytes."""
    writer.raw(_POLLING.pack(strategy.kind, strategy.value))


def decode_polling_strategy(reader: Reader) -> PollingStrategy:
    """Read the fixed 9 bytes."""
    raw = reader.u8()
    value = reader.u64()
    try:
        kind = PollingKind(raw)
    except ValueError:
        raise ProtocolError(f"unknown polling kind {raw}") from None
    return PollingStrategy(kind, value)


# --- consumer offset acknowledgement -----------------------------------------------


class AckLevel(enum.IntEnum):
    """How durable a stored or deleted consumer offset must be before the reply."""

    NO_ACK = 0
    QUORUM = 1


# --- header kinds, user headers, options ---------------------------------------------


class HeaderKind(enum.IntEnum):
    """The type of a user-header or option field."""

    RAW = 1
    STRING = 2
    BOOL = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    INT128 = 8
    UINT8 = 9
    UINT16 = 10
    UINT32 = 11
    UINT64 = 12
    UINT128 = 13
    FLOAT32 = 14
    FLOAT64 = 15


_FIXED_SIZE: Final[dict[HeaderKind, int]] = {
    HeaderKind.BOOL: 1,
    HeaderKind.INT8: 1,
    HeaderKind.UINT8: 1,
    HeaderKind.INT16: 2,
    HeaderKind.UINT16: 2,
    HeaderKind.INT32: 4,
    HeaderKind.UINT32: 4,
    HeaderKind.FLOAT32: 4,
    HeaderKind.INT64: 8,
    HeaderKind.UINT64: 8,
    HeaderKind.FLOAT64: 8,
    HeaderKind.INT128: 16,
    HeaderKind.UINT128: 16,
}

_INT_KINDS: Final[dict[HeaderKind, tuple[int, bool]]] = {
    HeaderKind.INT8: (1, True),
    HeaderKind.INT16: (2, True),
    HeaderKind.INT32: (4, True),
    HeaderKind.INT64: (8, True),
    HeaderKind.INT128: (16, True),
    HeaderKind.UINT8: (1, False),
    HeaderKind.UINT16: (2, False),
    HeaderKind.UINT32: (4, False),
    HeaderKind.UINT64: (8, False),
    HeaderKind.UINT128: (16, False),
}

HeaderValue: TypeAlias = bytes | str | bool | int | float


def encode_header_value(kind: HeaderKind, value: HeaderValue) -> bytes:
    """The wire bytes of a typed header or option value."""
    if kind is HeaderKind.RAW and isinstance(value, bytes):
        return value
    if kind is HeaderKind.STRING and isinstance(value, str):
        return value.encode("utf-8")
    if kind is HeaderKind.BOOL and isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    if kind in _INT_KINDS and isinstance(value, int) and not isinstance(value, bool):
        size, signed = _INT_KINDS[kind]
        return value.to_bytes(size, "little", signed=signed)
    if kind is HeaderKind.FLOAT32 and isinstance(value, float):
        return struct.pack("<f", value)
    if kind is HeaderKind.FLOAT64 and isinstance(value, float):
        return struct.pack("<d", value)
    raise ValueError(f"{type(value).__name__} value does not match header kind {kind.name}")


def decode_header_value(kind: HeaderKind, raw: Buffer) -> HeaderValue:
    """The typed value of header or option bytes (already validated for size)."""
    if kind is HeaderKind.RAW:
        return bytes(raw)
    if kind is HeaderKind.STRING:
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(
                "string header is not UTF-8", IggyErrorCode.INVALID_HEADER_VALUE
            ) from None
    if kind is HeaderKind.BOOL:
        if bytes(raw) not in (b"\x00", b"\x01"):
            raise ProtocolError("bool header is not 0 or 1", IggyErrorCode.INVALID_HEADER_VALUE)
        return raw[0] == 1
    if kind in _INT_KINDS:
        _, signed = _INT_KINDS[kind]
        return int.from_bytes(raw, "little", signed=signed)
    if kind is HeaderKind.FLOAT32:
        value32: float = struct.unpack("<f", raw)[0]
        return value32
    value64: float = struct.unpack("<d", raw)[0]
    return value64


@dataclass(frozen=True, slots=True)
class UserHeader:
    """One key/value pair of a message's user headers, kinds and raw bytes kept."""

    key_kind: HeaderKind
    key: bytes
    value_kind: HeaderKind
    value: bytes

    @classmethod
    def of(cls, key: str, value: HeaderValue, kind: HeaderKind | None = None) -> UserHeader:
        """A pair with a string key and a typed value (kind inferred when omitted)."""
        if kind is None:
            kind = _infer_kind(value)
        return cls(HeaderKind.STRING, key.encode("utf-8"), kind, encode_header_value(kind, value))


def _infer_kind(value: HeaderValue) -> HeaderKind:
    """The kind the official SDK picks for a Python value: integers get the narrowest
    kind that holds them (unsigned when non-negative), floats Float32 when exact in
    32 bits."""
    if isinstance(value, bool):
        return HeaderKind.BOOL
    if isinstance(value, bytes):
        return HeaderKind.RAW
    if isinstance(value, str):
        return HeaderKind.STRING
    if isinstance(value, int):
        kinds = _UNSIGNED_BY_SIZE if value >= 0 else _SIGNED_BY_SIZE
        for size, kind in kinds:
            try:
                value.to_bytes(size, "little", signed=value < 0)
            except OverflowError:
                continue
            return kind
        raise ValueError(f"integer {value} does not fit 128 bits")
    if struct.unpack("<f", struct.pack("<f", value))[0] == value:
        return HeaderKind.FLOAT32
    return HeaderKind.FLOAT64


_UNSIGNED_BY_SIZE: Final = (
    (1, HeaderKind.UINT8),
    (2, HeaderKind.UINT16),
    (4, HeaderKind.UINT32),
    (8, HeaderKind.UINT64),
    (16, HeaderKind.UINT128),
)
_SIGNED_BY_SIZE: Final = (
    (1, HeaderKind.INT8),
    (2, HeaderKind.INT16),
    (4, HeaderKind.INT32),
    (8, HeaderKind.INT64),
    (16, HeaderKind.INT128),
)


def _write_field(writer: Writer, kind: HeaderKind, data: bytes) -> None:
    if not 1 <= len(data) <= MAX_NAME_LENGTH:
        raise ValueError(f"header field must be 1..{MAX_NAME_LENGTH} bytes, got {len(data)}")
    expected = _FIXED_SIZE.get(kind)
    if expected is not None and len(data) != expected:
        raise ValueError(f"{kind.name} field must be {expected} bytes, got {len(data)}")
    writer.u8(kind)
    writer.u32(len(data))
    writer.raw(data)


def _read_field(reader: Reader) -> tuple[HeaderKind, bytes]:
    raw_kind = reader.u8()
    length = reader.u32()
    try:
        kind = HeaderKind(raw_kind)
    except ValueError:
        raise ProtocolError(
            f"unknown header kind {raw_kind}", IggyErrorCode.INVALID_HEADER_KIND
        ) from None
    if not 1 <= length <= MAX_NAME_LENGTH:
        raise ProtocolError(
            f"header field of {length} bytes", IggyErrorCode.INVALID_KEY_VALUE_LENGTH
        )
    expected = _FIXED_SIZE.get(kind)
    if expected is not None and length != expected:
        raise ProtocolError(
            f"{kind.name} field of {length} bytes", IggyErrorCode.INVALID_HEADER_VALUE
        )
    return kind, bytes(reader.take(length))


def encode_user_headers(headers: Sequence[UserHeader]) -> bytes:
    """The TLV block of a message's user headers (empty for no headers)."""
    writer = Writer()
    for header in headers:
        _write_field(writer, header.key_kind, header.key)
        _write_field(writer, header.value_kind, header.value)
    block = writer.getvalue()
    if len(block) > MAX_USER_HEADERS_BYTES:
        raise ValueError(f"user headers of {len(block)} bytes exceed {MAX_USER_HEADERS_BYTES}")
    return block


def decode_user_headers(block: Buffer) -> tuple[UserHeader, ...]:
    """Parse a whole user-headers block (it must consume its range exactly)."""
    if len(block) > MAX_USER_HEADERS_BYTES:
        raise ProtocolError(
            f"user headers of {len(block)} bytes", IggyErrorCode.TOO_BIG_USER_HEADERS
        )
    reader = Reader(block)
    headers: list[UserHeader] = []
    while reader.remaining:
        key_kind, key = _read_field(reader)
        if not reader.remaining:
            raise ProtocolError("user header key without a value", IggyErrorCode.INVALID_FORMAT)
        value_kind, value = _read_field(reader)
        headers.append(UserHeader(key_kind, key, value_kind, value))
    return tuple(headers)


@dataclass(frozen=True, slots=True)
class OptionEntry:
    """One option of a stream, topic or user: a string key and a typed raw value."""

    key: str
    kind: HeaderKind
    value: bytes

    @classmethod
    def of(cls, key: str, value: HeaderValue, kind: HeaderKind | None = None) -> OptionEntry:
        """An option with a typed value (kind inferred when omitted)."""
        if kind is None:
            kind = _infer_kind(value)
        return cls(key, kind, encode_header_value(kind, value))


def encode_options(writer: Writer, options: Sequence[OptionEntry]) -> None:
    """Append an options block (the trailing, unprefixed form used by requests)."""
    if len(options) > MAX_OPTIONS:
        raise ValueError(f"{len(options)} options exceed {MAX_OPTIONS}")
    keys = [option.key for option in options]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate option key")
    block = Writer()
    for option in options:
        _write_field(block, HeaderKind.STRING, option.key.encode("utf-8"))
        _write_field(block, option.kind, option.value)
    raw = block.getvalue()
    if len(raw) > MAX_OPTIONS_BYTES:
        raise ValueError(f"options block of {len(raw)} bytes exceeds {MAX_OPTIONS_BYTES}")
    writer.raw(raw)


def decode_options(block: Buffer) -> tuple[OptionEntry, ...]:
    """Parse a whole options block: string keys, unique, bounded in count and size."""
    if len(block) > MAX_OPTIONS_BYTES:
        raise ProtocolError(
            f"options block of {len(block)} bytes", IggyErrorCode.OPTIONS_BLOCK_TOO_LARGE
        )
    reader = Reader(block)
    options: list[OptionEntry] = []
    seen: dict[str, None] = {}
    while reader.remaining:
        key_kind, key = _read_field(reader)
        if key_kind is not HeaderKind.STRING:
            raise ProtocolError(
                f"option key of kind {key_kind.name}", IggyErrorCode.INVALID_HEADER_KEY
            )
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(
                "option key is not UTF-8", IggyErrorCode.INVALID_HEADER_KEY
            ) from None
        if name in seen:
            raise ProtocolError(f"duplicate option key {name!r}", IggyErrorCode.INVALID_FORMAT)
        seen[name] = None
        if not reader.remaining:
            raise ProtocolError("option key without a value", IggyErrorCode.INVALID_FORMAT)
        kind, value = _read_field(reader)
        options.append(OptionEntry(name, kind, value))
        if len(options) > MAX_OPTIONS:
            raise ProtocolError(
                f"more than {MAX_OPTIONS} options", IggyErrorCode.OPTIONS_BLOCK_TOO_LARGE
            )
    return tuple(options)


def read_request_options(reader: Reader) -> tuple[OptionEntry, ...]:
    """Read the options block that ends a create or update request: all that is left.

    The block must fill the rest of the body, so bytes a sender appends after the
    request's other fields are read as options; as Iggy's server does, anything that is
    not a well-formed block is refused with ``INVALID_COMMAND`` (3), whichever rule it
    broke. Unknown keys and bad values are well-formed here: the state machine refuses
    them (4041, 4042).

    Raises:
        ProtocolError: with ``INVALID_COMMAND`` for a malformed block.
    """
    try:
        return decode_options(reader.rest())
    except ProtocolError as error:
        raise ProtocolError(
            f"options block: {error.reason}", IggyErrorCode.INVALID_COMMAND
        ) from None


def encode_options_prefixed(writer: Writer, options: Sequence[OptionEntry]) -> None:
    """Append ``[len u32][options block]``, the form used inside replies."""
    block = Writer()
    encode_options(block, options)
    raw = block.getvalue()
    writer.u32(len(raw))
    writer.raw(raw)


def decode_options_prefixed(reader: Reader) -> tuple[OptionEntry, ...]:
    """Read ``[len u32][options block]``."""
    length = reader.u32()
    return decode_options(reader.take(length))
