"""Public value types of the SDK: messages, consumers, partitioning, topic options.

Purpose: the small frozen values callers build and receive. Replies the wire codec
already types (``StreamDetails``, ``TopicDetails``, ``ConsumerGroupDetails``, ``Stats``,
``ClusterMetadata`` ...) are returned as they are and re-exported from ``sdk``.

Identifiers follow the official SDK: an ``int`` is a numeric id, a ``str`` is a name
unless it is all decimal digits (then it is a numeric id); pass an
:class:`~sdk.wire.Identifier` to force a kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final, Literal, NamedTuple, TypeAlias

from sdk.wire import (
    Balanced,
    Consumer,
    ConsumerKind,
    HeaderKind,
    Identifier,
    MessagesKey,
    OptionEntry,
    OutgoingMessage,
    PartitionId,
    UserHeader,
    decode_header_value,
    decode_user_headers,
    encode_user_headers,
)
from sdk.wire.primitives import HeaderValue

__all__ = [
    "U64_MAX",
    "ConsumerRef",
    "Expiry",
    "HeaderValue",
    "IdLike",
    "Message",
    "MessageLike",
    "Partitioning",
    "PartitioningLike",
    "PolledMessages",
    "ReceivedMessage",
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


class ReceivedMessage(NamedTuple):
    """A polled message (immutable; a NamedTuple because a poll makes one per message,
    and building a tuple costs a third of building a frozen dataclass).

    Attributes:
        partition_id: The partition it was read from.
        offset: Its offset in the partition.
        id: Its 128-bit id.
        checksum: Its XXH3-64 checksum as stored.
        timestamp: Broker append time, µs.
        origin_timestamp: Producer time, µs.
        payload: The bytes.
        user_headers: The raw user-headers block (see :attr:`headers`).
    """

    partition_id: int
    offset: int
    id: int
    checksum: int
    timestamp: int
    origin_timestamp: int
    payload: bytes
    user_headers: bytes = b""

    @property
    def headers(self) -> dict[str, HeaderValue]:
        """The user headers decoded by kind (string keys)."""
        decoded: dict[str, HeaderValue] = {}
        for header in decode_user_headers(self.user_headers):
            key = header.key.decode("utf-8", errors="replace")
            decoded[key] = decode_header_value(header.value_kind, header.value)
        return decoded


@dataclass(frozen=True, slots=True)
class PolledMessages:
    """The answer to one poll.

    Attributes:
        partition_id: The partition polled (``0xFFFFFFFF`` on the consumer-group
            re-sync sentinel, which the client handles itself).
        current_offset: The partition's latest offset.
        messages: The messages in offset order.
    """

    partition_id: int
    current_offset: int
    messages: list[ReceivedMessage]


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
