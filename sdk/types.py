"""Public value types of the SDK: messages, consumers, partitioning, topic options, and the
settings and constants both drivers share.

Purpose: the small frozen values callers build and receive, and the settings of topics,
producers and consumers, so the trio client (``sdk.client``), the blocking client
(``sdk.blocking``), the producers and the consumers read them from one place and none of
those modules imports another's internals. Replies the wire codec
already types (``StreamDetails``, ``TopicDetails``, ``ConsumerGroupDetails``, ``Stats``,
``ClusterMetadata`` ...) are returned as they are and re-exported from ``sdk``.

Identifiers follow the official SDK: an ``int`` is a numeric id, a ``str`` is a name
unless it is all decimal digits (then it is a numeric id); pass an
:class:`~sdk.wire.Identifier` to force a kind.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Literal, TypeAlias, TypedDict

from sdk.wire import (
    BATCH_HEADER_SIZE,
    MESSAGE_HEADER_SIZE,
    Balanced,
    Buffer,
    Consumer,
    ConsumerKind,
    HeaderKind,
    Identifier,
    MessagesKey,
    OptionEntry,
    OutgoingMessage,
    PartitionId,
    PollingStrategy,
    PollMessagesReply,
    UserHeader,
    decode_header_value,
    decode_user_headers,
    encode_user_headers,
    frame_positions,
)
from sdk.wire.batch import MESSAGE_HEADER
from sdk.wire.primitives import HeaderValue

__all__ = [
    "CLOSE_TIMEOUT_S",
    "RECEIVE_BYTES_MAX",
    "U64_MAX",
    "AutoCommit",
    "Backpressure",
    "ConsumerRef",
    "ConsumerSettings",
    "Expiry",
    "HeaderValue",
    "IdLike",
    "Message",
    "MessageLike",
    "Partitioning",
    "PartitioningLike",
    "PolledMessages",
    "ProducerSettings",
    "ReceivedMessage",
    "TopicSettings",
    "TopicSize",
    "string_options",
    "topic_options",
    "to_identifier",
    "to_message",
    "to_partitioning",
]

U64_MAX: Final = 0xFFFF_FFFF_FFFF_FFFF
"""``message_expiry`` "never" and ``max_topic_size`` "unlimited" on the wire."""

IdLike: TypeAlias = int | str | Identifier
"""A stream, topic or group: numeric id, name, or an explicit :class:`Identifier`."""


def to_identifier(value: IdLike) -> Identifier:
    """The wire identifier for ``value`` (decimal-only strings are numeric ids)."""
    if isinstance(value, Identifier):
        return value
    if isinstance(value, bool):
        raise TypeError("a bool is not an identifier")
    if isinstance(value, int):
        return Identifier.numeric(value)
    if value.isdecimal() and value.isascii():
        return Identifier.numeric(int(value))
    return Identifier.named(value)


# --- messages ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """A message to send.

    Attributes:
        payload: The bytes (a ``str`` is encoded as UTF-8).
        id: A 128-bit id; 0 lets the SDK pick a random one, as the official SDK does.
        headers: User headers; keys are strings, values ``str``, ``bytes``, ``bool``,
            ``int`` or ``float`` (the wire kind is inferred as the official SDK does).
        origin_timestamp: Producer time in µs since the epoch; 0 = stamped when sent.
    """

    payload: bytes
    id: int = 0
    headers: Mapping[str, HeaderValue] | None = field(default=None, compare=True)
    origin_timestamp: int = 0

    def __post_init__(self) -> None:
        payload: object = self.payload
        if isinstance(payload, str):
            object.__setattr__(self, "payload", payload.encode("utf-8"))
        elif not isinstance(payload, bytes):
            object.__setattr__(self, "payload", bytes(payload))  # type: ignore[call-overload]
        if not 0 <= self.id < 1 << 128:
            raise ValueError("message id must fit 128 bits")

    def encoded_headers(self) -> bytes:
        """The user-headers block, keys sorted bytewise as the official SDK sends them."""
        if not self.headers:
            return b""
        items = sorted(self.headers.items(), key=lambda item: item[0].encode("utf-8"))
        return encode_user_headers([UserHeader.of(key, value) for key, value in items])

    @property
    def size_bytes(self) -> int:
        """The bytes this message takes in a batch (48-byte header included)."""
        return 48 + len(self.payload) + len(self.encoded_headers())

    def outgoing(self, message_id: int, origin_timestamp: int) -> OutgoingMessage:
        """This message for :func:`sdk.wire.build_batch`, with the id and timestamp given."""
        return OutgoingMessage(message_id, self.payload, self.encoded_headers(), origin_timestamp)


MessageLike: TypeAlias = Message | bytes | str
"""What the send calls accept: a :class:`Message`, or just its payload."""


def to_message(value: MessageLike) -> Message:
    """``value`` as a :class:`Message`."""
    if isinstance(value, Message):
        return value
    if isinstance(value, str):
        return Message(value.encode("utf-8"))
    return Message(bytes(value))


class _Record:
    """One batch record of a poll reply, shared by the messages read from it: the
    reply's bytes (read-only view), the batch fields every message adds to, and the
    payload and header sizes when all its frames share them (-1 when they vary)."""

    __slots__ = (
        "base_offset",
        "base_timestamp",
        "data",
        "headers_size",
        "origin_timestamp",
        "partition_id",
        "payload_size",
    )

    def __init__(
        self,
        data: memoryview,
        partition_id: int,
        base_offset: int,
        base_timestamp: int,
        origin_timestamp: int,
        payload_size: int = -1,
        headers_size: int = -1,
    ) -> None:
        self.data = data
        self.partition_id = partition_id
        self.base_offset = base_offset
        self.base_timestamp = base_timestamp
        self.origin_timestamp = origin_timestamp
        self.payload_size = payload_size
        self.headers_size = headers_size


_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_LENGTHS: Final = struct.Struct("<II")  # a frame's header bytes 32..40
_FIELD_NAMES: Final = (
    "partition_id",
    "offset",
    "id",
    "checksum",
    "timestamp",
    "origin_timestamp",
    "payload",
    "user_headers",
)


class ReceivedMessage:
    """A polled message, decoded lazily: each field is read from the poll reply when it
    is read, so a consumer pays only for the fields it reads.

    Polled messages share the reply's buffer: :attr:`payload_view` is a read-only
    ``memoryview`` slice of it (no copy), :attr:`payload` a ``bytes`` copy of just that
    payload. A message, or any view taken from it, keeps the whole reply buffer alive
    (up to the poll's ``count`` messages): keep ``bytes(message.payload_view)``, not
    the message, to hold one payload for long. The SDK never writes to or reuses a
    reply's buffer, so views stay valid as long as they are held.

    Made by hand (``ReceivedMessage(partition_id, offset, id, checksum, timestamp,
    origin_timestamp, payload, user_headers=b"")``, as the ``NamedTuple`` it used to be),
    it holds a one-message record of its own. Its fields are read-only properties;
    it is equal, hashed and iterated by its eight fields in that order.

    Attributes:
        partition_id: The partition it was read from.
        offset: Its offset in the partition.
        id: Its 128-bit id.
        checksum: Its XXH3-64 checksum as stored.
        timestamp: Broker append time, µs.
        origin_timestamp: Producer time, µs.
        payload: The bytes (a copy; see :attr:`payload_view`).
        payload_view: The bytes as a read-only view of the reply (no copy).
        user_headers: The raw user-headers block (see :attr:`headers`).
    """

    __slots__ = ("_position", "_record")

    _record: _Record
    _position: int
    _fields: Final = _FIELD_NAMES

    def __init__(
        self,
        partition_id: int,
        offset: int,
        id: int,
        checksum: int,
        timestamp: int,
        origin_timestamp: int,
        payload: Buffer,
        user_headers: Buffer = b"",
    ) -> None:
        payload_bytes = bytes(payload)
        headers_bytes = bytes(user_headers)
        if not 0 <= id < 1 << 128:
            raise ValueError("message id must fit 128 bits")
        header = MESSAGE_HEADER.pack(
            checksum,
            id & 0xFFFF_FFFF_FFFF_FFFF,
            id >> 64,
            0,
            0,
            len(headers_bytes),
            len(payload_bytes),
            0,
        )
        data = memoryview(header + payload_bytes + headers_bytes).toreadonly()
        self._record = _Record(
            data,
            partition_id,
            offset,
            timestamp,
            origin_timestamp,
            len(payload_bytes),
            len(headers_bytes),
        )
        self._position = 0

    @property
    def partition_id(self) -> int:
        """The partition it was read from."""
        return self._record.partition_id

    @property
    def offset(self) -> int:
        """Its offset in the partition."""
        record = self._record
        delta: int = _U32.unpack_from(record.data, self._position + 24)[0]
        return record.base_offset + delta

    @property
    def id(self) -> int:
        """Its 128-bit id."""
        position = self._position + 8
        return int.from_bytes(self._record.data[position : position + 16], "little")

    @property
    def checksum(self) -> int:
        """Its XXH3-64 checksum as stored (not verified by a poll)."""
        checksum: int = _U64.unpack_from(self._record.data, self._position)[0]
        return checksum

    @property
    def timestamp(self) -> int:
        """Broker append time, µs (the batch's)."""
        return self._record.base_timestamp

    @property
    def origin_timestamp(self) -> int:
        """Producer time, µs."""
        record = self._record
        delta: int = _U32.unpack_from(record.data, self._position + 28)[0]
        return record.origin_timestamp + delta

    @property
    def payload_view(self) -> memoryview:
        """The payload as a read-only view of the reply's buffer (no copy; see the
        class docstring for how long it keeps the buffer)."""
        record = self._record
        start = self._position + 48
        size = record.payload_size
        if size < 0:
            size = _U32.unpack_from(record.data, start - 12)[0]
        return record.data[start : start + size]

    @property
    def payload(self) -> bytes:
        """The payload, copied out of the reply (``bytes``, as before views existed)."""
        record = self._record
        start = self._position + 48
        size = record.payload_size
        if size < 0:
            size = _U32.unpack_from(record.data, start - 12)[0]
        return record.data[start : start + size].tobytes()

    @property
    def user_headers(self) -> bytes:
        """The raw user-headers block (see :attr:`headers`)."""
        record = self._record
        if record.headers_size == 0:
            return b""
        headers_size, payload_size = _LENGTHS.unpack_from(record.data, self._position + 32)
        if not headers_size:
            return b""
        start = self._position + 48 + payload_size
        return record.data[start : start + headers_size].tobytes()

    @property
    def headers(self) -> dict[str, HeaderValue]:
        """The user headers decoded by kind (string keys)."""
        decoded: dict[str, HeaderValue] = {}
        for header in decode_user_headers(self.user_headers):
            key = header.key.decode("utf-8", errors="replace")
            decoded[key] = decode_header_value(header.value_kind, header.value)
        return decoded

    def _values(self) -> tuple[int, int, int, int, int, int, bytes, bytes]:
        return (
            self.partition_id,
            self.offset,
            self.id,
            self.checksum,
            self.timestamp,
            self.origin_timestamp,
            self.payload,
            self.user_headers,
        )

    def __iter__(self) -> Iterator[int | bytes]:
        return iter(self._values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReceivedMessage):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={value!r}" for name, value in zip(_FIELD_NAMES, self._values(), strict=True)
        )
        return f"ReceivedMessage({fields})"

    def __reduce__(self) -> tuple[type[ReceivedMessage], tuple[int | bytes, ...]]:
        return (ReceivedMessage, self._values())

    def _asdict(self) -> dict[str, int | bytes]:
        """The fields by name (as a ``NamedTuple``'s ``_asdict``)."""
        return dict(zip(_FIELD_NAMES, self._values(), strict=True))

    def _replace(self, **changes: Any) -> ReceivedMessage:
        """A copy with some fields changed (as a ``NamedTuple``'s ``_replace``)."""
        return ReceivedMessage(**{**self._asdict(), **changes})


_new_message = object.__new__


def polled_messages(reply: PollMessagesReply) -> list[ReceivedMessage]:
    """The messages of a decoded poll reply, in order, each read lazily from the reply
    (one small object per message; no field decoded, no payload copied)."""
    return _messages_of(_reply_records(reply))


def _messages_of(records: list[tuple[_Record, Sequence[int]]]) -> list[ReceivedMessage]:
    messages: list[ReceivedMessage] = []
    append = messages.append
    for shared, positions in records:
        # The one loop a poll runs per message: an object of two slots, nothing read.
        for position in positions:
            message = _new_message(ReceivedMessage)
            message._record = shared
            message._position = position
            append(message)
    return messages


def _reply_records(reply: PollMessagesReply) -> list[tuple[_Record, Sequence[int]]]:
    """Each batch record of ``reply`` as the :class:`_Record` its messages share, with
    where its message frames start."""
    frames = reply.frames
    if len(frames) != len(reply.records):  # not from decode: find the frames now
        frames = tuple(map(frame_positions, reply.records))
    records: list[tuple[_Record, Sequence[int]]] = []
    partition_id = reply.partition_id
    for record, positions in zip(reply.records, frames, strict=True):
        data = memoryview(record).toreadonly()
        if data.format != "B" or data.ndim != 1:
            data = data.cast("B")
        base_offset, base_timestamp, origin_timestamp = _BASES.unpack_from(data, 8)
        payload_size = headers_size = -1
        if isinstance(positions, range) and positions:
            # Frames of one size (frame_positions proved every frame's lengths equal).
            headers_size, payload_size = _LENGTHS.unpack_from(data, positions[0] + 32)
        shared = _Record(
            data,
            partition_id,
            base_offset,
            base_timestamp,
            origin_timestamp,
            payload_size,
            headers_size,
        )
        records.append((shared, positions))
    return records


_BASES: Final = struct.Struct("<QQQ")  # a batch header's bytes 8..32
_new_polled = object.__new__


class PolledMessages:
    """The answer to one poll.

    The messages are read from the reply when they are first asked for: a consumer that
    wants only payloads (:meth:`payloads`), one message (:meth:`message`) or the
    sizes (:attr:`count`, :attr:`size_bytes`) makes no object per message.

    Attributes:
        partition_id: The partition polled (``0xFFFFFFFF`` on the consumer-group
            re-sync sentinel, which the client handles itself).
        current_offset: The partition's latest offset.
        messages: The messages in offset order (a list made on first read, then kept;
            see :class:`ReceivedMessage` for how they share the reply's buffer).
        count: How many messages the poll returned.
        size_bytes: Their bytes as Iggy frames them: per message its 48-byte header,
            payload and user headers.
    """

    __slots__ = ("_current_offset", "_messages", "_partition_id", "_records")

    _messages: list[ReceivedMessage] | None
    _records: list[tuple[_Record, Sequence[int]]] | None

    def __init__(
        self, partition_id: int, current_offset: int, messages: list[ReceivedMessage]
    ) -> None:
        self._partition_id = partition_id
        self._current_offset = current_offset
        self._messages = messages
        self._records = None

    @classmethod
    def of_reply(cls, reply: PollMessagesReply) -> PolledMessages:
        """The messages of a decoded poll reply, read lazily from its buffer."""
        polled = _new_polled(cls)
        polled._partition_id = reply.partition_id
        polled._current_offset = reply.current_offset
        polled._messages = None
        polled._records = _reply_records(reply)
        return polled

    @property
    def partition_id(self) -> int:
        return self._partition_id

    @property
    def current_offset(self) -> int:
        return self._current_offset

    @property
    def messages(self) -> list[ReceivedMessage]:
        messages = self._messages
        if messages is None:
            assert self._records is not None
            messages = self._messages = _messages_of(self._records)
        return messages

    @property
    def count(self) -> int:
        if self._records is None:
            return len(self.messages)
        return sum(len(positions) for _, positions in self._records)

    @property
    def size_bytes(self) -> int:
        if self._records is None:
            return sum(
                MESSAGE_HEADER_SIZE + len(m.payload_view) + len(m.user_headers)
                for m in self.messages
            )
        return sum(len(shared.data) - BATCH_HEADER_SIZE for shared, _ in self._records)

    def payloads(self) -> list[memoryview]:
        """Every message's payload, in order, as a read-only view of the reply (as
        :attr:`ReceivedMessage.payload_view`), without making the messages."""
        if self._records is None:
            return [message.payload_view for message in self.messages]
        payloads: list[memoryview] = []
        for shared, positions in self._records:
            data = shared.data
            size = shared.payload_size
            if size >= 0:
                assert isinstance(positions, range)
                start = positions.start + MESSAGE_HEADER_SIZE
                stop = positions.stop + MESSAGE_HEADER_SIZE
                payloads += [data[at : at + size] for at in range(start, stop, positions.step)]
            else:
                unpack = _U32.unpack_from
                for position in positions:
                    at = position + MESSAGE_HEADER_SIZE
                    payloads.append(data[at : at + unpack(data, position + 36)[0]])
        return payloads

    def message(self, index: int) -> ReceivedMessage:
        """The message at ``index`` (negative counts from the end), without making
        the others.

        Raises:
            IndexError: there is no such message.
        """
        if self._records is None or self._messages is not None:
            return self.messages[index]
        if index < 0:
            index += self.count
        if index >= 0:
            for shared, positions in self._records:
                if index < len(positions):
                    message = _new_message(ReceivedMessage)
                    message._record = shared
                    message._position = positions[index]
                    return message
                index -= len(positions)
        raise IndexError("polled message index out of range")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PolledMessages):
            return NotImplemented
        return (self.partition_id, self.current_offset, self.messages) == (
            other.partition_id,
            other.current_offset,
            other.messages,
        )

    __hash__ = None  # type: ignore[assignment]  # a list of messages: as the dataclass was

    def __repr__(self) -> str:
        return (
            f"PolledMessages(partition_id={self.partition_id!r}, "
            f"current_offset={self.current_offset!r}, messages={self.messages!r})"
        )


# --- consumers and partitioning ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """Who owns stored offsets: a single consumer or a consumer group.

    Attributes:
        id: The consumer's or group's id or name.
        is_group: Whether it names a consumer group.
    """

    id: IdLike
    is_group: bool = False

    @classmethod
    def single(cls, consumer_id: IdLike) -> ConsumerRef:
        """A single consumer."""
        return cls(consumer_id, False)

    @classmethod
    def group(cls, group_id: IdLike) -> ConsumerRef:
        """A consumer group."""
        return cls(group_id, True)

    def wire(self) -> Consumer:
        """The wire form."""
        kind = ConsumerKind.CONSUMER_GROUP if self.is_group else ConsumerKind.CONSUMER
        return Consumer(kind, to_identifier(self.id))


PartitioningLike: TypeAlias = Balanced | PartitionId | MessagesKey | int
"""How a send picks its partition; an ``int`` is a partition id."""


class Partitioning:
    """Factories of partitioning values, named as in the official SDK."""

    @staticmethod
    def balanced() -> Balanced:
        """Round robin over the topic's partitions (resolved by the client)."""
        return Balanced()

    @staticmethod
    def partition_id(partition_id: int) -> PartitionId:
        """This partition."""
        return PartitionId(partition_id)

    @staticmethod
    def messages_key(key: str | bytes) -> MessagesKey:
        """The partition ``xxh32(key) % partitions_count``."""
        return MessagesKey(key.encode("utf-8") if isinstance(key, str) else bytes(key))


def to_partitioning(value: PartitioningLike) -> Balanced | PartitionId | MessagesKey:
    """``value`` as a wire partitioning."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a partition id")
    if isinstance(value, int):
        return PartitionId(value)
    return value


# --- topic options ---------------------------------------------------------------------


Expiry: TypeAlias = timedelta | Literal["never"]
"""A topic's message expiry: a duration, or ``"never"``."""

TopicSize: TypeAlias = int | Literal["unlimited"]
"""A topic's size limit: bytes, or ``"unlimited"``."""


def _expiry_us(value: Expiry) -> int:
    if value == "never":
        return U64_MAX
    assert isinstance(value, timedelta)
    return value // timedelta(microseconds=1)


def topic_options(
    *,
    create: bool,
    compression_algorithm: str | None = None,
    durability: str | None = None,
    consumer_offset_durability: str | None = None,
    max_topic_size: TopicSize | None = None,
    message_expiry: Expiry | None = None,
    messages_required_to_save: int | None = None,
    preallocate_segments: bool | None = None,
    segment_size: int | None = None,
    size_of_messages_required_to_save: int | None = None,
    options: Mapping[str, str] | None = None,
) -> tuple[OptionEntry, ...]:
    """The options block of CREATE_TOPIC / UPDATE_TOPIC, as the official SDK builds it.

    On create both durabilities are always sent (default ``"replicated"``); on update
    only the settings given are sent (a patch). Keys are sorted bytewise; ``options`` are
    extra string options sent verbatim.
    """
    entries: dict[str, OptionEntry] = {}

    def put(key: str, kind: HeaderKind, value: HeaderValue) -> None:
        entries[key] = OptionEntry.of(key, value, kind)

    if create:
        durability = durability or "replicated"
        consumer_offset_durability = consumer_offset_durability or "replicated"
    if compression_algorithm is not None:
        put("compression_algorithm", HeaderKind.STRING, compression_algorithm)
    if consumer_offset_durability is not None:
        put("consumer_offset_durability", HeaderKind.STRING, consumer_offset_durability)
    if durability is not None:
        put("durability", HeaderKind.STRING, durability)
    if max_topic_size is not None:
        size = U64_MAX if max_topic_size == "unlimited" else max_topic_size
        assert isinstance(size, int)
        put("max_topic_size", HeaderKind.UINT64, size)
    if message_expiry is not None:
        put("message_expiry", HeaderKind.UINT64, _expiry_us(message_expiry))
    if messages_required_to_save is not None:
        put("messages_required_to_save", HeaderKind.UINT32, messages_required_to_save)
    if preallocate_segments is not None:
        put("preallocate_segments", HeaderKind.BOOL, preallocate_segments)
    if segment_size is not None:
        put("segment_size", HeaderKind.UINT64, segment_size)
    if size_of_messages_required_to_save is not None:
        put(
            "size_of_messages_required_to_save",
            HeaderKind.UINT64,
            size_of_messages_required_to_save,
        )
    for key, value in (options or {}).items():
        put(key, HeaderKind.STRING, value)
    return tuple(entries[key] for key in sorted(entries, key=lambda k: k.encode("utf-8")))


def string_options(options: Mapping[str, str] | None) -> tuple[OptionEntry, ...]:
    """String options sorted bytewise (streams' ``options=``)."""
    if not options:
        return ()
    keys = sorted(options, key=lambda k: k.encode("utf-8"))
    return tuple(OptionEntry.of(key, options[key], HeaderKind.STRING) for key in keys)


# --- settings shared by the drivers and the high-level clients -------------------------

RECEIVE_BYTES_MAX: Final = 256 * 1024
"""Largest single read from a socket."""

CLOSE_TIMEOUT_S: Final = 2.0
"""Longest a close waits for its best-effort logout."""


class TopicSettings(TypedDict, total=False):
    """Topic settings of ``create_topic`` and ``update_topic`` (the official SDK's names).

    Attributes:
        compression_algorithm: ``"none"`` or ``"gzip"``.
        message_expiry: A ``timedelta``, or ``"never"``.
        max_topic_size: Bytes, or ``"unlimited"``.
        segment_size: Bytes per segment.
        durability: ``"replicated"`` (ack once a quorum holds it) or ``"persisted"``
            (ack once a quorum has synced it).
        consumer_offset_durability: The same, for stored consumer offsets.
        messages_required_to_save: Messages buffered before a save.
        size_of_messages_required_to_save: Bytes buffered before a save.
        preallocate_segments: Preallocate segment files.
        options: Further options, sent verbatim as strings.
    """

    compression_algorithm: str
    message_expiry: Expiry
    max_topic_size: TopicSize
    segment_size: int
    durability: str
    consumer_offset_durability: str
    messages_required_to_save: int
    size_of_messages_required_to_save: int
    preallocate_segments: bool
    options: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Backpressure:
    """What ``send`` does when the buffer is full.

    Attributes:
        mode: ``"block"`` waits for room; ``"fail"`` raises at once.
        timeout_s: With ``"block"``, the longest wait before raising (``None``: forever).
    """

    mode: Literal["block", "fail"] = "block"
    timeout_s: float | None = None

    @classmethod
    def block(cls) -> Backpressure:
        """Wait for room as long as it takes."""
        return cls("block", None)

    @classmethod
    def block_with_timeout(cls, timeout_s: float) -> Backpressure:
        """Wait for room up to ``timeout_s``, then raise ProducerBufferFull."""
        return cls("block", timeout_s)

    @classmethod
    def fail(cls) -> Backpressure:
        """Raise ProducerBufferFull at once."""
        return cls("fail", None)


@dataclass(frozen=True, slots=True)
class AutoCommit:
    """When a consumer stores its offsets on its own.

    Attributes:
        mode: ``"disabled"`` (only an explicit ``commit()`` stores offsets),
            ``"interval"`` (every ``interval_s``, and on close), or ``"after_batch"``
            (once every message of a polled batch is consumed, and on close).
        interval_s: The interval of ``"interval"``.
    """

    mode: Literal["disabled", "interval", "after_batch"] = "interval"
    interval_s: float = 1.0

    @classmethod
    def disabled(cls) -> AutoCommit:
        """Never commit on its own (explicit ``commit()`` only)."""
        return cls("disabled")

    @classmethod
    def interval(cls, interval_s: float) -> AutoCommit:
        """Commit consumed offsets every ``interval_s`` (and on close)."""
        if interval_s <= 0:
            raise ValueError("the interval must be positive")
        return cls("interval", interval_s)

    @classmethod
    def after_each_batch(cls) -> AutoCommit:
        """Commit once every message of a polled batch has been consumed (and on close)."""
        return cls("after_batch")


class ProducerSettings(TypedDict, total=False):
    """Settings of a producer.

    Attributes:
        partitioning: Default partitioning of ``send`` (default balanced).
        batch_length: Most messages per batch (default 1000).
        batch_size_bytes: Most message bytes per batch (default 1 MiB).
        linger_s: How long a batch waits for more messages (default 5 ms).
        max_in_flight: Batches on the wire at once, one session each (default 1).
        buffer_size_bytes: Most bytes buffered or in flight (default 32 MiB).
        backpressure: What ``send`` does when the buffer is full (default block).
        ordered: Keep one batch per partition in flight, so each partition receives
            messages in send order (default ``True``).
    """

    partitioning: PartitioningLike
    batch_length: int
    batch_size_bytes: int
    linger_s: float
    max_in_flight: int
    buffer_size_bytes: int
    backpressure: Backpressure
    ordered: bool


class ConsumerSettings(TypedDict, total=False):
    """Settings of a consumer.

    Attributes:
        group: Join this consumer group (created if missing and ``create_group``); the
            cluster assigns the partitions. Without it the consumer is single.
        consumer_id: The single consumer's id, which owns its stored offsets (default 0).
        partition_ids: The single consumer's partitions (default: all of the topic's).
        start: Where a partition is first read from (default ``PollingStrategy.next()``:
            after the stored offset).
        batch_length: Most messages per poll (default 100).
        auto_commit: ``AutoCommit.interval(s)`` (default, 1 s),
            ``AutoCommit.after_each_batch()`` or ``AutoCommit.disabled()``.
        create_group: Create the group if it does not exist (default ``True``).
        poll_interval_min_s: First wait after an empty poll round (default 50 ms).
        poll_interval_max_s: Longest wait between empty rounds (default 1 s).
        sync_interval_s: How often a group member re-checks its assignment (default 1 s).
        long_poll: After an empty round, wait on the node for a message (viewstream's
            long poll, default ``True``); against a server without it (Iggy's) the
            consumer backs off between polls as with ``False``.
        long_poll_wait_s: Longest wait of one long poll (default 5 s, at most 30 s).
    """

    group: IdLike
    consumer_id: IdLike
    partition_ids: Sequence[int]
    start: PollingStrategy
    batch_length: int
    auto_commit: AutoCommit
    create_group: bool
    poll_interval_min_s: float
    poll_interval_max_s: float
    sync_interval_s: float
    long_poll: bool
    long_poll_wait_s: float
