"""The message batch: build, verify, stamp, read, slice, and tamper detection."""

from __future__ import annotations

import contextlib
import struct

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import (
    BATCH_HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_DELTA_US,
    IggyErrorCode,
    OutgoingMessage,
    PollMessagesReply,
    ProtocolError,
    build_batch,
    iter_batch_records,
    poll_reply_parts,
    read_batch,
    slice_batch,
    stamp_batch,
    stamped_batch,
    verify_batch,
)
from tests.wire.strategies import outgoing_messages

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_batch(messages: list[OutgoingMessage]) -> bytes:
    """The batch spelled out from the reference (iggy.md 2.1), field by field, with no
    code shared with the codec."""
    origin = min(message.origin_timestamp for message in messages)
    frames = []
    for index, message in enumerate(messages):
        rest = (
            message.id.to_bytes(16, "little")
            + struct.pack("<I", index)
            + struct.pack("<I", message.origin_timestamp - origin)
            + struct.pack("<I", len(message.user_headers))
            + struct.pack("<I", len(message.payload))
            + bytes(8)
            + bytes(message.payload)
            + bytes(message.user_headers)
        )
        frames.append(struct.pack("<Q", xxhash.xxh3_64_intdigest(rest)) + rest)
    blob = b"".join(frames)
    length = 256 + len(blob)
    fields = struct.pack("<QQQQQ", 0, 0, 0, origin, length) + struct.pack("<I", len(messages))
    checksum = xxhash.xxh3_64_intdigest(fields + b"".join(frame[:8] for frame in frames))
    header = struct.pack("<QQQQQQI", 0, 0, 0, origin, length, checksum, len(messages))
    return header + bytes(256 - len(header)) + blob


def test_built_batch_matches_the_reference_layout_byte_for_byte() -> None:
    messages = [
        OutgoingMessage(42, b"payload-1", b"", 1_700_000_000_000_000),
        OutgoingMessage(
            2**100 + 7, b"two", b"\x02\x01\x00\x00\x00k\x02\x01\x00\x00\x00v", 1_700_000_000_000_123
        ),
        OutgoingMessage(0, b"", b"", 1_699_999_999_999_999),
    ]
    assert bytes(build_batch(messages)) == reference_batch(messages)


@SETTINGS
@given(messages=outgoing_messages())
def test_built_batch_matches_the_reference_for_any_messages(
    messages: list[OutgoingMessage],
) -> None:
    assert bytes(build_batch(messages)) == reference_batch(messages)


@SETTINGS
@given(
    messages=outgoing_messages(),
    partition_id=st.integers(0, 2**32 - 1),
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.integers(0, 2**63),
)
def test_build_verify_stamp_read_keeps_every_message(
    messages: list[OutgoingMessage], partition_id: int, base_offset: int, base_timestamp: int
) -> None:
    batch = build_batch(messages)
    before = bytes(batch)
    verified = verify_batch(batch)
    assert verified.header.message_count == len(messages)
    header = stamp_batch(
        batch,
        verified,
        partition_id=partition_id,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
    )
    # Only the server fields and the batch checksum changed.
    assert batch[24:40] == before[24:40]
    assert batch[48:] == before[48:]
    assert (header.partition_id, header.base_offset, header.base_timestamp) == (
        partition_id,
        base_offset,
        base_timestamp,
    )
    # The re-sealed batch verifies again, with its new fields.
    assert verify_batch(batch).header == header
    read_header, read = read_batch(batch)
    assert read_header == header
    origin = min(message.origin_timestamp for message in messages)
    for index, (sent, got) in enumerate(zip(messages, read, strict=True)):
        assert got.offset == base_offset + index
        assert got.id == sent.id
        assert got.timestamp == base_timestamp
        assert got.origin_timestamp == sent.origin_timestamp
        assert bytes(got.payload) == bytes(sent.payload)
        assert bytes(got.user_headers) == bytes(sent.user_headers)
        assert got.payload.obj is batch  # a view into the batch, not a copy
        assert origin <= got.origin_timestamp


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=outgoing_messages(max_size=3), data=st.data())
def test_any_single_byte_change_is_detected_by_verification(
    messages: list[OutgoingMessage], data: st.DataObject
) -> None:
    batch = build_batch(messages)
    index = data.draw(st.integers(0, len(batch) - 1))
    batch[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(ProtocolError):
        verify_batch(batch)


def test_payload_tamper_is_a_message_checksum_error() -> None:
    batch = build_batch([OutgoingMessage(1, b"hello", b"", 10)])
    batch[BATCH_HEADER_SIZE + 48] ^= 1
    with pytest.raises(ProtocolError) as refused:
        verify_batch(batch)
    assert refused.value.code is IggyErrorCode.INVALID_MESSAGE_CHECKSUM


def test_header_field_tamper_is_a_batch_checksum_error() -> None:
    batch = build_batch([OutgoingMessage(1, b"hello", b"", 10)])
    batch[8] ^= 1  # base_offset, covered by the batch checksum only
    with pytest.raises(ProtocolError) as refused:
        verify_batch(batch)
    assert refused.value.code is IggyErrorCode.INVALID_BATCH_CHECKSUM


def _reseal(batch: bytearray) -> None:
    """Recompute every checksum of a batch after a deliberate field change."""
    position = BATCH_HEADER_SIZE
    checksums = b""
    while position < len(batch):
        headers_size, payload_size = struct.unpack_from("<II", batch, position + 32)
        end = position + 48 + payload_size + headers_size
        struct.pack_into(
            "<Q", batch, position, xxhash.xxh3_64_intdigest(bytes(batch[position + 8 : end]))
        )
        checksums += bytes(batch[position : position + 8])
        position = end
    struct.pack_into(
        "<Q",
        batch,
        40,
        xxhash.xxh3_64_intdigest(bytes(batch[:40]) + bytes(batch[48:52]) + checksums),
    )


def test_offset_deltas_must_count_from_zero_in_a_producer_batch() -> None:
    batch = build_batch([OutgoingMessage(1, b"a", b"", 0), OutgoingMessage(2, b"b", b"", 0)])
    second = BATCH_HEADER_SIZE + 48 + 1
    struct.pack_into("<I", batch, second + 24, 5)
    _reseal(batch)
    with pytest.raises(ProtocolError) as refused:
        verify_batch(batch)
    assert refused.value.code is IggyErrorCode.INVALID_OFFSET


@pytest.mark.parametrize(
    ("field_offset", "value"),
    [(32, 10_000), (48, 0), (48, 3), (60, 1)],
    ids=["length-mismatch", "zero-count", "count-too-high", "reserved-byte"],
)
def test_structural_faults_are_refused_even_with_valid_checksums(
    field_offset: int, value: int
) -> None:
    batch = build_batch([OutgoingMessage(1, b"a", b"", 0), OutgoingMessage(2, b"b", b"", 0)])
    if field_offset == 32:
        struct.pack_into("<Q", batch, 32, value)
    elif field_offset == 48:
        struct.pack_into("<I", batch, 48, value)
    else:
        batch[field_offset] = value
    _reseal(batch)
    with pytest.raises(ProtocolError):
        verify_batch(batch)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=700), offset=st.integers(0, 10), count=st.integers(0, 10))
def test_batch_readers_given_random_bytes_raise_only_protocol_error(
    raw: bytes, offset: int, count: int
) -> None:
    for call in (
        lambda: verify_batch(raw),
        lambda: read_batch(raw),
        lambda: list(iter_batch_records(raw)),
        lambda: slice_batch(raw, offset, count),
    ):
        with contextlib.suppress(ProtocolError):
            call()


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_batch_readers_given_a_corrupted_batch_raise_only_protocol_error(
    data: st.DataObject,
) -> None:
    batch = build_batch(data.draw(outgoing_messages(max_size=3)))
    stamp_batch(batch, verify_batch(batch), partition_id=1, base_offset=5, base_timestamp=9)
    index = data.draw(st.integers(0, len(batch) - 1))
    batch[index] ^= data.draw(st.integers(1, 255))
    for call in (
        lambda: read_batch(batch),
        lambda: list(iter_batch_records(batch)),
        lambda: slice_batch(batch, 6, 2),
    ):
        with contextlib.suppress(ProtocolError):
            call()


def _stored(count: int, base_offset: int = 100) -> bytearray:
    batch = build_batch(
        [OutgoingMessage(i + 1, f"m{i}".encode() * (i + 1), b"", 1000 + i) for i in range(count)]
    )
    stamp_batch(
        batch, verify_batch(batch), partition_id=3, base_offset=base_offset, base_timestamp=5000
    )
    return batch


def test_slice_of_a_whole_batch_is_the_stored_record_itself() -> None:
    stored = _stored(5)
    piece = slice_batch(stored, 0, 100)
    assert piece is not None
    assert len(piece.parts) == 1
    assert isinstance(piece.parts[0], memoryview) and piece.parts[0].obj is stored
    assert (piece.message_count, piece.first_offset, piece.last_offset) == (5, 100, 104)


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 8), from_offset=st.integers(90, 115), count_max=st.integers(0, 10))
def test_slice_from_an_offset_selects_the_right_messages_without_copying_payloads(
    count: int, from_offset: int, count_max: int
) -> None:
    stored = _stored(count)
    _, everything = read_batch(stored)
    expected = [m for m in everything if m.offset >= from_offset][:count_max]
    piece = slice_batch(stored, from_offset, count_max)
    if not expected:
        assert piece is None
        return
    assert piece is not None
    assert piece.message_count == len(expected)
    assert piece.first_offset == expected[0].offset
    assert piece.last_offset == expected[-1].offset
    record = b"".join(bytes(part) for part in piece.parts)
    assert len(record) == piece.size
    # The slice is a valid batch in its own right, checksums included.
    header = verify_batch(record, first_offset_delta=None).header
    assert (header.base_offset, header.base_timestamp, header.partition_id) == (100, 5000, 3)
    _, got = read_batch(record)
    assert [(m.offset, m.id, bytes(m.payload)) for m in got] == [
        (m.offset, m.id, bytes(m.payload)) for m in expected
    ]
    if len(piece.parts) == 2:
        assert len(piece.parts[0]) == BATCH_HEADER_SIZE
        assert isinstance(piece.parts[1], memoryview) and piece.parts[1].obj is stored


def test_poll_reply_from_slices_decodes_to_the_selected_messages() -> None:
    first, second = _stored(4, base_offset=0), _stored(3, base_offset=4)
    slices = [slice_batch(first, 2, 10), slice_batch(second, 0, 2)]
    assert all(piece is not None for piece in slices)
    parts = poll_reply_parts(7, 6, [piece for piece in slices if piece is not None])
    reply = PollMessagesReply.decode(b"".join(bytes(part) for part in parts))
    assert (reply.partition_id, reply.current_offset, reply.messages_count) == (7, 6, 4)
    assert [m.offset for m in reply.messages()] == [2, 3, 4, 5]
    assert reply.encode() == b"".join(bytes(part) for part in parts)


def test_poll_reply_with_a_wrong_message_count_is_refused() -> None:
    stored = bytes(_stored(2))
    body = struct.pack("<IQI", 0, 1, 3) + stored
    with pytest.raises(ProtocolError):
        PollMessagesReply.decode(body)


def test_build_refuses_what_cannot_be_represented() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch(
            [
                OutgoingMessage(1, b"", b"", 0),
                OutgoingMessage(2, b"", b"", MAX_TIMESTAMP_DELTA_US + 1),
            ]
        )
    with pytest.raises(ValueError):
        build_batch([OutgoingMessage(1, bytes(MAX_PAYLOAD_BYTES + 1), b"", 0)])


def test_build_headroom_leaves_zero_bytes_in_front_of_the_batch() -> None:
    messages = [OutgoingMessage(1, b"x", b"", 5)]
    with_room = build_batch(messages, headroom=300)
    assert with_room[:300] == bytes(300)
    assert bytes(with_room[300:]) == bytes(build_batch(messages))


@SETTINGS
@given(
    messages=outgoing_messages(),
    partition_id=st.integers(0, 2**32 - 1),
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.integers(0, 2**63),
)
def test_stamped_batch_is_the_in_place_stamp_as_a_copy(
    messages: list[OutgoingMessage], partition_id: int, base_offset: int, base_timestamp: int
) -> None:
    batch = build_batch(messages)
    before = bytes(batch)
    verified = verify_batch(batch)
    fields = {
        "partition_id": partition_id,
        "base_offset": base_offset,
        "base_timestamp": base_timestamp,
    }
    copy = stamped_batch(memoryview(batch), verified, **fields)
    assert bytes(batch) == before  # the source is left as it is
    stamp_batch(batch, verified, **fields)
    assert copy == bytes(batch)
    assert verify_batch(copy).header.base_offset == base_offset
