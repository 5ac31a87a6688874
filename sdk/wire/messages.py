"""Payloads of the partition plane and of polls: send, poll and consumer offsets.

Purpose: typed request and reply payloads of SEND_MESSAGES (101), POLL_MESSAGES (100)
and GET/STORE/DELETE_CONSUMER_OFFSET (120..122), plus the zero-copy paths: a send body
built around its batch in one buffer, and a poll reply emitted as a gather list of
stored batch slices.

Invariants (as for every payload module):

1. ``X.decode(x.encode()) == x``, and a successful ``X.decode(body)`` re-encodes to
   ``body`` exactly.
2. Decoders raise :class:`ProtocolError` only; encoders raise ``ValueError``.
3. Decoding a send does not verify its batch (``verify_send_messages`` does, once,
   on the server); it only checks that the batch fills the body: bytes after the
   batch's ``batch_length`` are refused. Decoding a poll reply checks every record's
   layout but passes the stored checksums through, as Iggy does.
4. A request type's ``read(reader)`` reads and validates every field from the front of
   a reader and leaves what follows unread; ``decode`` is ``read`` plus a refusal of
   trailing bytes. The server reads requests with ``read`` alone (Iggy's server ignores
   trailing bytes). SEND_MESSAGES is the exception: its batch runs to the end of the
   body and must fill it exactly. Iggy's server drops such a send without a reply; we
   refuse it with ``INVALID_FORMAT`` (4), the code the batch check gives a batch whose
   length disagrees with its bytes.

Sources: apache/iggy ``core/binary_protocol/src/requests/messages/*.rs``,
``requests/consumer_offsets/*.rs``, ``responses/messages/*.rs``,
``responses/consumer_offsets/get_consumer_offset.rs`` and
``core/server_common/src/send_messages.rs`` (admission).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import starmap
from typing import Final, Self

from sdk.wire._buffer import Buffer, Reader, Writer, as_byte_view, read_whole
from sdk.wire._payload import bool_flag, check_count, closed_enum
from sdk.wire.batch import (
    BATCH_HEADER_SIZE,
    BatchMessage,
    BatchSlice,
    OutgoingMessage,
    VerifiedBatch,
    build_batch,
    build_batch_columns,
    frame_positions,
    iter_batch_records,
    read_batch,
    verify_batch,
)
from sdk.wire.codes import IggyErrorCode
from sdk.wire.errors import ProtocolError
from sdk.wire.primitives import (
    AckLevel,
    Consumer,
    Identifier,
    Partitioning,
    PollingStrategy,
    decode_consumer,
    decode_identifier,
    decode_partition_flag,
    decode_partitioning,
    decode_polling_strategy,
    encode_consumer,
    encode_identifier,
    encode_partition_flag,
    encode_partitioning,
    encode_polling_strategy,
)

__all__ = [
    "ConsumerOffsetInfo",
    "DeleteConsumerOffset",
    "GetConsumerOffset",
    "LongPollMessages",
    "PollMessages",
    "PollMessagesReply",
    "SendConfirmation",
    "SendMessages",
    "SendMessagesReply",
    "StoreConsumerOffset",
    "build_send_messages",
    "build_send_messages_columns",
    "poll_reply_parts",
    "verify_send_messages",
]


# --- messages ----------------------------------------------------------------------

_BATCH_LENGTH: Final = struct.Struct(
    "<"
    "32x"  # 0   partition_id, base_offset, base_timestamp, origin_timestamp
    "Q"  # 32  batch_length: u64, 256 + the frames' bytes (batch.BATCH_HEADER)
)
assert _BATCH_LENGTH.size == 40 <= BATCH_HEADER_SIZE


@functools.lru_cache(maxsize=256)
def _send_metadata(
    stream_id: Identifier, topic_id: Identifier, partitioning: Partitioning, count: int
) -> bytes:
    """The metadata prefix of a send body (cached: a producer sends to a few partitions
    with a few batch lengths, and the prefix is immutable bytes)."""
    metadata = Writer()
    encode_identifier(metadata, stream_id)
    encode_identifier(metadata, topic_id)
    encode_partitioning(metadata, partitioning)
    metadata.u32(count)
    inner = metadata.getvalue()
    writer = Writer()
    writer.u32(len(inner))
    writer.raw(inner)
    return writer.getvalue()


@dataclass(frozen=True, slots=True)
class SendMessages:
    """SEND_MESSAGES (101) request: ``[metadata_length u32][stream][topic]
    [partitioning][messages_count u32][batch]``; ``metadata_length`` counts stream
    through messages_count. ``batch`` is carried as given (a view when decoded);
    :func:`verify_send_messages` checks it."""

    stream_id: Identifier
    topic_id: Identifier
    partitioning: Partitioning
    messages_count: int
    batch: Buffer

    def encode(self) -> bytes:
        """The request body (copies the batch; see :func:`build_send_messages`)."""
        prefix = _send_metadata(
            self.stream_id, self.topic_id, self.partitioning, self.messages_count
        )
        return prefix + bytes(self.batch)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the batch is the rest of the reader, a view of its bytes.

        The batch must fill the body: bytes after its ``batch_length`` are refused, not
        ignored (a shorter body is left to :func:`verify_send_messages`).

        Raises:
            ProtocolError: ``INVALID_COMMAND`` for a metadata length that disagrees or
                a body without a batch header; ``INVALID_FORMAT`` for trailing bytes.
        """
        metadata_length = reader.u32()
        start = reader.position
        stream_id = decode_identifier(reader)
        topic_id = decode_identifier(reader)
        partitioning = decode_partitioning(reader)
        messages_count = reader.u32()
        if reader.position - start != metadata_length:
            raise ProtocolError(
                f"metadata length {metadata_length} but {reader.position - start} bytes read",
                IggyErrorCode.INVALID_COMMAND,
            )
        batch = reader.rest()
        if len(batch) < BATCH_HEADER_SIZE:
            raise ProtocolError("send body without a batch", IggyErrorCode.INVALID_COMMAND)
        batch_length: int = _BATCH_LENGTH.unpack_from(batch)[0]
        if BATCH_HEADER_SIZE <= batch_length < len(batch):
            raise ProtocolError(
                f"send body: {len(batch) - batch_length} trailing bytes after its "
                f"{batch_length}-byte batch",
                IggyErrorCode.INVALID_FORMAT,
            )
        return cls(stream_id, topic_id, partitioning, messages_count, batch)

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body; the batch is a view of ``body``."""
        return read_whole(body, cls.read, "send messages")


def build_send_messages(
    stream_id: Identifier,
    topic_id: Identifier,
    partitioning: Partitioning,
    messages: Sequence[OutgoingMessage],
    *,
    headroom: int = 0,
) -> bytearray:
    """The SEND_MESSAGES body built in one buffer, payloads copied exactly once.

    Args:
        headroom: Zero bytes to leave in front (256 to write the request header in
            place with ``RequestHeader.pack_into``).

    Returns:
        ``headroom`` zero bytes followed by the body.
    """
    prefix = _send_metadata(stream_id, topic_id, partitioning, len(messages))
    buffer = build_batch(messages, headroom=headroom + len(prefix))
    buffer[headroom : headroom + len(prefix)] = prefix
    return buffer


def build_send_messages_columns(
    stream_id: Identifier,
    topic_id: Identifier,
    partitioning: Partitioning,
    payloads: Sequence[Buffer],
    ids: Sequence[int] | bytes,
    origin_timestamps: Sequence[int] | int,
    user_headers: Sequence[Buffer] | None = None,
    *,
    headroom: int = 0,
    reuse: bytearray | None = None,
) -> bytearray:
    """:func:`build_send_messages` from the batch's columns (see
    :func:`batch.build_batch_columns`, which says when ``reuse`` is rewritten): the
    same body, no object per message.

    Returns:
        ``headroom`` zero bytes followed by the body.
    """
    prefix = _send_metadata(stream_id, topic_id, partitioning, len(payloads))
    buffer = build_batch_columns(
        payloads,
        ids,
        origin_timestamps,
        user_headers,
        headroom=headroom + len(prefix),
        reuse=reuse,
    )
    buffer[headroom : headroom + len(prefix)] = prefix
    return buffer


def verify_send_messages(request: SendMessages) -> VerifiedBatch:
    """The server's admission check of a decoded send: the batch verifies and holds
    exactly ``messages_count`` messages.

    Raises:
        ProtocolError: see :func:`batch.verify_batch`, or a count mismatch.
    """
    verified = verify_batch(request.batch)
    if verified.header.message_count != request.messages_count:
        raise ProtocolError(
            f"batch holds {verified.header.message_count} messages, "
            f"metadata says {request.messages_count}",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    return verified


@dataclass(frozen=True, slots=True)
class SendConfirmation:
    """Where a sent batch landed: ``[stream u32][topic u32][partition u32][base u64]``."""

    stream_id: int
    topic_id: int
    partition_id: int
    base_offset: int


_CONFIRMATION: Final = struct.Struct(
    "<"
    "I"  # 0   stream_id: u32
    "I"  # 4   topic_id: u32
    "I"  # 8   partition_id: u32
    "Q"  # 12  base_offset: u64
)
assert _CONFIRMATION.size == 20
_U32: Final = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class SendMessagesReply:
    """SEND_MESSAGES reply (not result-framed): ``[count u32]`` then 20-byte entries."""

    confirmations: tuple[SendConfirmation, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(len(self.confirmations))
        for entry in self.confirmations:
            writer.u32(entry.stream_id)
            writer.u32(entry.topic_id)
            writer.u32(entry.partition_id)
            writer.u64(entry.base_offset)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        view = as_byte_view(body)
        if len(view) >= 4:
            # The well-formed reply in two struct calls; the reader below names what is
            # wrong with any other.
            (count,) = _U32.unpack_from(view)
            if len(view) == 4 + _CONFIRMATION.size * count:
                return cls(tuple(starmap(SendConfirmation, _CONFIRMATION.iter_unpack(view[4:]))))
        reader = Reader(view)
        count = reader.u32()
        check_count(count, reader, 20, "confirmations")
        confirmations = tuple(
            SendConfirmation(reader.u32(), reader.u32(), reader.u32(), reader.u64())
            for _ in range(count)
        )
        reader.finish("send confirmations")
        return cls(confirmations)


@dataclass(frozen=True, slots=True)
class PollMessages:
    """POLL_MESSAGES (100) request: ``[consumer][stream][topic][flag u8][partition u32]
    [strategy 9][count u32][auto_commit u8]``."""

    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None
    strategy: PollingStrategy
    count: int
    auto_commit: bool

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_consumer(writer, self.consumer)
        encode_identifier(writer, self.stream_id)
        encode_identifier(writer, self.topic_id)
        encode_partition_flag(writer, self.partition_id)
        encode_polling_strategy(writer, self.strategy)
        writer.u32(self.count)
        writer.u8(1 if self.auto_commit else 0)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows ``auto_commit`` is left unread."""
        consumer = decode_consumer(reader)
        stream_id = decode_identifier(reader)
        topic_id = decode_identifier(reader)
        partition_id = decode_partition_flag(reader)
        strategy = decode_polling_strategy(reader)
        count = reader.u32()
        auto_commit = bool_flag(reader.u8(), "auto_commit")
        return cls(consumer, stream_id, topic_id, partition_id, strategy, count, auto_commit)

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "poll messages")


@dataclass(frozen=True, slots=True)
class LongPollMessages:
    """viewstream's long poll (``LONG_POLL_CODE``), not Iggy's: ``[max_wait_ms u32]``
    then a POLL_MESSAGES body. Its reply is a POLL_MESSAGES reply."""

    max_wait_ms: int
    poll: PollMessages

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        writer.u32(self.max_wait_ms)
        return writer.getvalue() + self.poll.encode()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the poll's ``auto_commit`` is left unread."""
        max_wait_ms = reader.u32()
        return cls(max_wait_ms, PollMessages.read(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "long poll messages")


_POLL_PREFIX_BYTES: Final = 16


_POLL_PREFIX: Final = struct.Struct(
    "<"
    "I"  # partition_id
    "Q"  # current_offset
    "I"  # messages_count
)
assert _POLL_PREFIX.size == _POLL_PREFIX_BYTES


def _poll_prefix(partition_id: int, current_offset: int, messages_count: int) -> bytes:
    return _POLL_PREFIX.pack(partition_id, current_offset, messages_count)


@dataclass(frozen=True, slots=True)
class PollMessagesReply:
    """POLL_MESSAGES reply: ``[partition_id u32][current_offset u64]
    [messages_count u32]`` then batch records back to back.

    ``records`` are views of the body when decoded; ``messages_count`` equals the
    messages the records hold. Checksums are passed through, not verified.
    ``frames`` holds, when decoded, where each record's message frames start (what the
    layout check found, so readers need not walk the records again); it takes no part
    in equality.
    """

    partition_id: int
    current_offset: int
    messages_count: int
    records: tuple[Buffer, ...] = ()
    frames: tuple[Sequence[int], ...] = field(default=(), compare=False, repr=False)

    def encode(self) -> bytes:
        """The reply payload (copies; servers send :func:`poll_reply_parts`)."""
        return _poll_prefix(self.partition_id, self.current_offset, self.messages_count) + (
            b"".join(self.records)
        )

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload, checking every record's layout (as
        :func:`batch.read_batch` does, without reading the messages)."""
        reader = Reader(body)
        partition_id = reader.u32()
        current_offset = reader.u64()
        messages_count = reader.u32()
        records = tuple(iter_batch_records(reader.rest()))
        frames = tuple(frame_positions(record) for record in records)
        held = sum(len(positions) for positions in frames)
        if held != messages_count:
            raise ProtocolError(
                f"poll reply says {messages_count} messages but holds {held}",
                IggyErrorCode.INVALID_MESSAGES_COUNT,
            )
        return cls(partition_id, current_offset, messages_count, records, frames)

    def messages(self) -> list[BatchMessage]:
        """The polled messages in order; payloads are views of the reply body."""
        messages: list[BatchMessage] = []
        for record in self.records:
            messages.extend(read_batch(record)[1])
        return messages


def poll_reply_parts(
    partition_id: int, current_offset: int, slices: Sequence[BatchSlice]
) -> list[Buffer]:
    """A poll reply body as a gather list: the 16-byte prefix, then every slice's parts
    unchanged (stored payloads are not copied)."""
    count = sum(piece.message_count for piece in slices)
    parts: list[Buffer] = [_poll_prefix(partition_id, current_offset, count)]
    for piece in slices:
        parts.extend(piece.parts)
    return parts


# --- consumer offsets --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetConsumerOffset:
    """GET_CONSUMER_OFFSET (120) request: ``[consumer][stream][topic][flag u8][partition u32]``."""

    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        _write_offset_target(writer, self.consumer, self.stream_id, self.topic_id)
        encode_partition_flag(writer, self.partition_id)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the partition is left unread."""
        return cls(
            decode_consumer(reader),
            decode_identifier(reader),
            decode_identifier(reader),
            decode_partition_flag(reader),
        )

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "get consumer offset")


@dataclass(frozen=True, slots=True)
class StoreConsumerOffset:
    """STORE_CONSUMER_OFFSET (121) request: ``[consumer][stream][topic][flag u8]
    [partition u32][offset u64][ack u8]``."""

    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None
    offset: int
    ack: AckLevel = AckLevel.QUORUM

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        _write_offset_target(writer, self.consumer, self.stream_id, self.topic_id)
        encode_partition_flag(writer, self.partition_id)
        writer.u64(self.offset)
        writer.u8(self.ack)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the ack byte is left unread."""
        return cls(
            decode_consumer(reader),
            decode_identifier(reader),
            decode_identifier(reader),
            decode_partition_flag(reader),
            reader.u64(),
            closed_enum(AckLevel, reader.u8(), "ack level"),
        )

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "store consumer offset")


@dataclass(frozen=True, slots=True)
class DeleteConsumerOffset:
    """DELETE_CONSUMER_OFFSET (122) request: ``[consumer][stream][topic][flag u8]
    [partition u32][ack u8]``."""

    consumer: Consumer
    stream_id: Identifier
    topic_id: Identifier
    partition_id: int | None
    ack: AckLevel = AckLevel.QUORUM

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        _write_offset_target(writer, self.consumer, self.stream_id, self.topic_id)
        encode_partition_flag(writer, self.partition_id)
        writer.u8(self.ack)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the ack byte is left unread."""
        return cls(
            decode_consumer(reader),
            decode_identifier(reader),
            decode_identifier(reader),
            decode_partition_flag(reader),
            closed_enum(AckLevel, reader.u8(), "ack level"),
        )

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "delete consumer offset")


def _write_offset_target(
    writer: Writer, consumer: Consumer, stream_id: Identifier, topic_id: Identifier
) -> None:
    encode_consumer(writer, consumer)
    encode_identifier(writer, stream_id)
    encode_identifier(writer, topic_id)


@dataclass(frozen=True, slots=True)
class ConsumerOffsetInfo:
    """GET_CONSUMER_OFFSET reply: ``[partition_id u32][current_offset u64]
    [stored_offset u64]``."""

    partition_id: int
    current_offset: int
    stored_offset: int

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        writer.u32(self.partition_id)
        writer.u64(self.current_offset)
        writer.u64(self.stored_offset)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        value = cls(reader.u32(), reader.u64(), reader.u64())
        reader.finish("consumer offset")
        return value
