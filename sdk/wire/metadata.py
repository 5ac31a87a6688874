"""Payloads of the metadata plane: streams, topics, partitions and consumer groups.

Purpose: typed request and reply payloads of GET/CREATE/DELETE/UPDATE/PURGE stream
(200..205) and topic (300..305), CREATE/DELETE_PARTITIONS (402, 403), DELETE_SEGMENTS
(503) and the consumer group commands (600..606).

Invariants (as for every payload module):

1. ``X.decode(x.encode()) == x``, and a successful ``X.decode(body)`` re-encodes to
   ``body`` exactly. Element counts carried in a header (``topics_count``,
   ``partitions_count``, ``members_count``) drive decoding and must equal the number
   of elements given to the encoder.
2. Decoders raise :class:`ProtocolError` only; encoders raise ``ValueError``.
3. A request type's ``read(reader)`` reads and validates every field from the front of
   a reader and leaves what follows unread; ``decode`` is ``read`` plus a refusal of
   trailing bytes. The server reads requests with ``read`` alone (Iggy's server ignores
   trailing bytes). A create or update request ends with an options block that runs to
   the end of the body, so its ``read`` consumes everything: bytes appended to it are
   read as options, and refused with ``INVALID_COMMAND`` unless they are well-formed.

Theory of operation: requests name their objects with identifiers (``StreamRef``,
``TopicRef``, ``GroupRef`` serve every command whose body is just identifiers).
Create and update requests end with an options block that runs to the end of the
body (``primitives.read_request_options``); replies carry options behind a u32 length.
CREATE_STREAM, CREATE_TOPIC and CREATE_CONSUMER_GROUP answer with the same details
payload as the matching GET.

Sources: apache/iggy ``core/binary_protocol/src/requests/{streams,topics,partitions,
consumer_groups}/*.rs`` and ``responses/**`` of the same names, and the reply types
the SDK decodes in ``core/common/src/traits/binary_impls/*.rs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Self

from sdk.wire._buffer import Buffer, Reader, Writer, read_whole
from sdk.wire._payload import check_count
from sdk.wire.primitives import (
    Identifier,
    OptionEntry,
    decode_identifier,
    decode_name,
    decode_options_prefixed,
    encode_identifier,
    encode_name,
    encode_options,
    encode_options_prefixed,
    read_request_options,
)

__all__ = [
    "ConsumerGroupAssignment",
    "ConsumerGroupDetails",
    "ConsumerGroupInfo",
    "ConsumerGroupMember",
    "ConsumerGroups",
    "CreateConsumerGroup",
    "CreateStream",
    "CreateTopic",
    "GroupRef",
    "PartitionInfo",
    "PartitionsChange",
    "StreamDetails",
    "StreamInfo",
    "StreamRef",
    "Streams",
    "TopicDetails",
    "TopicInfo",
    "TopicRef",
    "Topics",
    "UpdateStream",
    "UpdateTopic",
]


# --- identifiers of streams, topics and groups ---------------------------------------


@dataclass(frozen=True, slots=True)
class StreamRef:
    """``[stream Identifier]``: GET_STREAM, DELETE_STREAM, PURGE_STREAM, GET_TOPICS."""

    stream_id: Identifier

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the identifier; what follows is left unread."""
        return cls(decode_identifier(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "stream reference")


@dataclass(frozen=True, slots=True)
class TopicRef:
    """``[stream][topic]``: GET_TOPIC, DELETE_TOPIC, PURGE_TOPIC, GET_CONSUMER_GROUPS."""

    stream_id: Identifier
    topic_id: Identifier

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the two identifiers; what follows is left unread (the Node SDK appends a
        ``partitions_count`` u32 to DELETE_TOPIC)."""
        return cls(decode_identifier(reader), decode_identifier(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "topic reference")


@dataclass(frozen=True, slots=True)
class GroupRef:
    """``[stream][topic][group]``: GET/DELETE/JOIN/LEAVE/SYNC_CONSUMER_GROUP."""

    stream_id: Identifier
    topic_id: Identifier
    group_id: Identifier

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        encode_identifier(writer, self.group_id)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the three identifiers; what follows is left unread."""
        return cls(decode_identifier(reader), decode_identifier(reader), decode_identifier(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "consumer group reference")


# --- streams -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateStream:
    """CREATE_STREAM (202) request: ``[name][options]`` (options run to the end)."""

    name: str
    options: tuple[OptionEntry, ...] = ()

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_name(writer, self.name)
        encode_options(writer, self.options)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the options block consumes the rest of the reader."""
        name = decode_name(reader)
        return cls(name, read_request_options(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "create stream")


@dataclass(frozen=True, slots=True)
class UpdateStream:
    """UPDATE_STREAM (204) request: ``[stream][name][options]`` (options are a patch)."""

    stream_id: Identifier
    name: str
    options: tuple[OptionEntry, ...] = ()

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_name(writer, self.name)
        encode_options(writer, self.options)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the options block consumes the rest of the reader."""
        stream_id = decode_identifier(reader)
        name = decode_name(reader)
        return cls(stream_id, name, read_request_options(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "update stream")


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream in replies: ``[id u32][created_at u64][topics_count u32]
    [size_bytes u64][messages_count u64][name][options_len u32][options]``."""

    id: int
    created_at: int
    topics_count: int
    size_bytes: int
    messages_count: int
    name: str
    options: tuple[OptionEntry, ...] = ()

    def write(self, writer: Writer) -> None:
        """Append this stream."""
        writer.u32(self.id)
        writer.u64(self.created_at)
        writer.u32(self.topics_count)
        writer.u64(self.size_bytes)
        writer.u64(self.messages_count)
        encode_name(writer, self.name)
        encode_options_prefixed(writer, self.options)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read one stream."""
        return cls(
            reader.u32(),
            reader.u64(),
            reader.u32(),
            reader.u64(),
            reader.u64(),
            decode_name(reader),
            decode_options_prefixed(reader),
        )


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition in replies (40 bytes): ``[id u32][created_at u64]
    [segments_count u32][current_offset u64][size_bytes u64][messages_count u64]``."""

    id: int
    created_at: int
    segments_count: int
    current_offset: int
    size_bytes: int
    messages_count: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic in replies: ``[id u32][created_at u64][partitions_count u32]
    [message_expiry u64][compression_algorithm u8][max_topic_size u64][size_bytes u64]
    [messages_count u64][name][options_len u32][options][derived_len u32][derived]``."""

    id: int
    created_at: int
    partitions_count: int
    message_expiry: int
    compression_algorithm: int
    max_topic_size: int
    size_bytes: int
    messages_count: int
    name: str
    options: tuple[OptionEntry, ...] = ()
    derived_options: tuple[OptionEntry, ...] = ()

    def write(self, writer: Writer) -> None:
        """Append this topic."""
        writer.u32(self.id)
        writer.u64(self.created_at)
        writer.u32(self.partitions_count)
        writer.u64(self.message_expiry)
        writer.u8(self.compression_algorithm)
        writer.u64(self.max_topic_size)
        writer.u64(self.size_bytes)
        writer.u64(self.messages_count)
        encode_name(writer, self.name)
        encode_options_prefixed(writer, self.options)
        encode_options_prefixed(writer, self.derived_options)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read one topic."""
        return cls(
            reader.u32(),
            reader.u64(),
            reader.u32(),
            reader.u64(),
            reader.u8(),
            reader.u64(),
            reader.u64(),
            reader.u64(),
            decode_name(reader),
            decode_options_prefixed(reader),
            decode_options_prefixed(reader),
        )


# A topic element is at least its fixed fields, a 1-byte name and two empty option
# prefixes; bounding counts by it refuses absurd counts before looping on them.
_TOPIC_MIN_BYTES: Final = 49 + 2 + 4 + 4
_STREAM_MIN_BYTES: Final = 32 + 2 + 4
_PARTITION_BYTES: Final = 40


@dataclass(frozen=True, slots=True)
class StreamDetails:
    """GET_STREAM (200) and CREATE_STREAM (202) reply: the stream, then exactly
    ``stream.topics_count`` topics."""

    stream: StreamInfo
    topics: tuple[TopicInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        if self.stream.topics_count != len(self.topics):
            raise ValueError("topics_count disagrees with the topics given")
        writer = Writer()
        self.stream.write(writer)
        for topic in self.topics:
            topic.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        stream = StreamInfo.read(reader)
        check_count(stream.topics_count, reader, _TOPIC_MIN_BYTES, "topics")
        topics = tuple(TopicInfo.read(reader) for _ in range(stream.topics_count))
        reader.finish("stream details")
        return cls(stream, topics)


@dataclass(frozen=True, slots=True)
class Streams:
    """GET_STREAMS (201) reply: streams back to back until the body ends."""

    streams: tuple[StreamInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        for stream in self.streams:
            stream.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        streams = []
        while reader.remaining:
            streams.append(StreamInfo.read(reader))
        return cls(tuple(streams))


# --- topics ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """CREATE_TOPIC (302) request: ``[stream][partitions_count u32][name][options]``."""

    stream_id: Identifier
    partitions_count: int
    name: str
    options: tuple[OptionEntry, ...] = ()

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        writer.u32(self.partitions_count)
        encode_name(writer, self.name)
        encode_options(writer, self.options)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the options block consumes the rest of the reader."""
        stream_id = decode_identifier(reader)
        partitions_count = reader.u32()
        name = decode_name(reader)
        return cls(stream_id, partitions_count, name, read_request_options(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "create topic")


@dataclass(frozen=True, slots=True)
class UpdateTopic:
    """UPDATE_TOPIC (304) request: ``[stream][topic][name][options]``."""

    stream_id: Identifier
    topic_id: Identifier
    name: str
    options: tuple[OptionEntry, ...] = ()

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        encode_name(writer, self.name)
        encode_options(writer, self.options)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the options block consumes the rest of the reader."""
        stream_id = decode_identifier(reader)
        topic_id = decode_identifier(reader)
        name = decode_name(reader)
        return cls(stream_id, topic_id, name, read_request_options(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "update topic")


@dataclass(frozen=True, slots=True)
class TopicDetails:
    """GET_TOPIC (300) and CREATE_TOPIC (302) reply: the topic, then exactly
    ``topic.partitions_count`` partitions."""

    topic: TopicInfo
    partitions: tuple[PartitionInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        if self.topic.partitions_count != len(self.partitions):
            raise ValueError("partitions_count disagrees with the partitions given")
        writer = Writer()
        self.topic.write(writer)
        for partition in self.partitions:
            writer.u32(partition.id)
            writer.u64(partition.created_at)
            writer.u32(partition.segments_count)
            writer.u64(partition.current_offset)
            writer.u64(partition.size_bytes)
            writer.u64(partition.messages_count)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        topic = TopicInfo.read(reader)
        check_count(topic.partitions_count, reader, _PARTITION_BYTES, "partitions")
        partitions = tuple(
            PartitionInfo(
                reader.u32(), reader.u64(), reader.u32(), reader.u64(), reader.u64(), reader.u64()
            )
            for _ in range(topic.partitions_count)
        )
        reader.finish("topic details")
        return cls(topic, partitions)


@dataclass(frozen=True, slots=True)
class Topics:
    """GET_TOPICS (301) reply: ``[topics_count u32]`` then the topics."""

    topics: tuple[TopicInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(len(self.topics))
        for topic in self.topics:
            topic.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        count = reader.u32()
        check_count(count, reader, _TOPIC_MIN_BYTES, "topics")
        topics = tuple(TopicInfo.read(reader) for _ in range(count))
        reader.finish("topics")
        return cls(topics)


# --- partitions --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionsChange:
    """CREATE_PARTITIONS (402) / DELETE_PARTITIONS (403) request:
    ``[stream][topic][partitions_count u32]``."""

    stream_id: Identifier
    topic_id: Identifier
    partitions_count: int

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        writer.u32(self.partitions_count)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the count is left unread."""
        return cls(decode_identifier(reader), decode_identifier(reader), reader.u32())

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "partitions change")


@dataclass(frozen=True, slots=True)
class DeleteSegments:
    """DELETE_SEGMENTS (503) request: ``[stream][topic][partition_id u32]
    [segments_count u32]``, the oldest ``segments_count`` sealed segments of a partition.

    The reply is empty on success, as Iggy's (its server commits the deletion as a
    ``TruncatePartition`` and acks; nothing sealed to delete is a success too).
    """

    stream_id: Identifier
    topic_id: Identifier
    partition_id: int
    segments_count: int

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        writer.u32(self.partition_id)
        writer.u32(self.segments_count)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the count is left unread."""
        return cls(decode_identifier(reader), decode_identifier(reader), reader.u32(), reader.u32())

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "delete segments")


# --- consumer groups ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup:
    """CREATE_CONSUMER_GROUP (602) request: ``[stream][topic][name]``."""

    stream_id: Identifier
    topic_id: Identifier
    name: str

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        encode_name(writer, self.name)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the name is left unread."""
        return cls(decode_identifier(reader), decode_identifier(reader), decode_name(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "create consumer group")


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    """A consumer group in replies: ``[id u32][partitions_count u32]
    [members_count u32][name]``."""

    id: int
    partitions_count: int
    members_count: int
    name: str

    def write(self, writer: Writer) -> None:
        """Append this group."""
        writer.u32(self.id)
        writer.u32(self.partitions_count)
        writer.u32(self.members_count)
        encode_name(writer, self.name)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read one group."""
        return cls(reader.u32(), reader.u32(), reader.u32(), decode_name(reader))


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """A member in group details: ``[id u32][partitions_count u32][partition u32]*``."""

    id: int
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDetails:
    """GET_CONSUMER_GROUP (600) and CREATE_CONSUMER_GROUP (602) reply: the group,
    then exactly ``group.members_count`` members."""

    group: ConsumerGroupInfo
    members: tuple[ConsumerGroupMember, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        if self.group.members_count != len(self.members):
            raise ValueError("members_count disagrees with the members given")
        writer = Writer()
        self.group.write(writer)
        for member in self.members:
            writer.u32(member.id)
            writer.u32(len(member.partitions))
            for partition_id in member.partitions:
                writer.u32(partition_id)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        group = ConsumerGroupInfo.read(reader)
        check_count(group.members_count, reader, 8, "members")
        members = []
        for _ in range(group.members_count):
            member_id = reader.u32()
            count = reader.u32()
            check_count(count, reader, 4, "member partitions")
            members.append(
                ConsumerGroupMember(member_id, tuple(reader.u32() for _ in range(count)))
            )
        reader.finish("consumer group details")
        return cls(group, tuple(members))


@dataclass(frozen=True, slots=True)
class ConsumerGroups:
    """GET_CONSUMER_GROUPS (601) reply: groups back to back until the body ends."""

    groups: tuple[ConsumerGroupInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        for group in self.groups:
            group.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        groups = []
        while reader.remaining:
            groups.append(ConsumerGroupInfo.read(reader))
        return cls(tuple(groups))


@dataclass(frozen=True, slots=True)
class ConsumerGroupAssignment:
    """SYNC_CONSUMER_GROUP (606) reply: ``[generation u64][count u32][partition u32]*``
    (an empty body means "not a member")."""

    generation: int
    partitions: tuple[int, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u64(self.generation)
        writer.u32(len(self.partitions))
        for partition_id in self.partitions:
            writer.u32(partition_id)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        generation = reader.u64()
        count = reader.u32()
        check_count(count, reader, 4, "assigned partitions")
        partitions = tuple(reader.u32() for _ in range(count))
        reader.finish("consumer group assignment")
        return cls(generation, partitions)
