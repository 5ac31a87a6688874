"""Building a batch from its columns: the same bytes as the reference layout, whichever
path (one payload size or many) and whichever buffers the payloads come in."""

from __future__ import annotations

import array
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import (
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_DELTA_US,
    Identifier,
    OutgoingMessage,
    PartitionId,
    build_batch,
    build_batch_columns,
    build_send_messages,
    build_send_messages_columns,
    encode_user_headers,
    verify_batch,
)
from tests.wire.strategies import U128, user_headers
from tests.wire.test_batch import reference_batch

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def uniform_messages(draw: st.DrawFn) -> list[OutgoingMessage]:
    """Batches whose messages share one payload size (the columns' one-struct path),
    some with one header block size too, counts across the struct chunk sizes."""
    count = draw(st.sampled_from([1, 2, 7, 16, 63, 64, 65, 130]))
    # Frame sizes that are multiples of 8 take the u64-column path, others the struct's.
    size = draw(st.one_of(st.integers(0, 300), st.sampled_from([0, 8, 1000, 1016])))
    base = draw(st.integers(0, 1 << 60))
    spread = draw(st.sampled_from([0, 0, 1, 0xFFFF_FFFF]))
    block = encode_user_headers(draw(st.lists(user_headers(), max_size=2)))
    with_headers = draw(st.booleans())
    return [
        OutgoingMessage(
            draw(U128),
            draw(st.binary(min_size=size, max_size=size)),
            block if with_headers else b"",
            base + draw(st.integers(0, spread)),
        )
        for _ in range(count)
    ]


def packed_ids(messages: list[OutgoingMessage]) -> bytes:
    return b"".join(message.id.to_bytes(16, "little") for message in messages)


@SETTINGS
@given(messages=uniform_messages(), headroom=st.sampled_from([0, 1, 5, 256, 301]))
def test_one_size_batches_match_the_reference_from_every_kind_of_column(
    messages: list[OutgoingMessage], headroom: int
) -> None:
    expected = reference_batch(messages)
    built = build_batch(messages, headroom=headroom)
    assert built[:headroom] == bytes(headroom)
    assert bytes(built[headroom:]) == expected
    payloads = [message.payload for message in messages]
    timestamps = [message.origin_timestamp for message in messages]
    headers = [message.user_headers for message in messages]
    for ids in ([message.id for message in messages], packed_ids(messages)):
        for kind in (bytes, bytearray, memoryview):
            given_payloads = [kind(payload) for payload in payloads]
            columns = build_batch_columns(given_payloads, ids, timestamps, headers)
            assert bytes(columns) == expected
    if len(set(timestamps)) == 1:
        assert bytes(build_batch_columns(payloads, packed_ids(messages), timestamps[0])) == (
            reference_batch([message._replace(user_headers=b"") for message in messages])
        )


@SETTINGS
@given(messages=uniform_messages(), headroom=st.sampled_from([0, 5, 256]))
def test_a_reused_buffer_full_of_garbage_is_rewritten_to_the_fresh_build(
    messages: list[OutgoingMessage], headroom: int
) -> None:
    payloads = [message.payload for message in messages]
    timestamps = [message.origin_timestamp for message in messages]
    headers = [message.user_headers for message in messages]
    ids = packed_ids(messages)
    for kind in (bytes, memoryview):
        given_payloads = [kind(payload) for payload in payloads]
        for plain in (True, False):  # with and without the user-header blocks
            blocks = None if plain else headers
            fresh = build_batch_columns(given_payloads, ids, timestamps, blocks, headroom=headroom)
            garbage = bytearray(b"\xa5" * len(fresh))
            built = build_batch_columns(
                given_payloads, ids, timestamps, blocks, headroom=headroom, reuse=garbage
            )
            assert built is garbage
            assert built == fresh


def test_a_reused_buffer_of_another_length_or_for_mixed_sizes_is_left_alone() -> None:
    spare = bytearray(b"\xa5" * 100)
    built = build_batch_columns([b"abc", b"def"], [1, 2], 5, reuse=spare)
    assert built is not spare and spare == b"\xa5" * 100
    mixed = [b"a", b"bcd"]
    length = len(build_batch_columns(mixed, [1, 2], 5))
    spare = bytearray(b"\xa5" * length)
    built = build_batch_columns(mixed, [1, 2], 5, reuse=spare)
    assert built is not spare and spare == b"\xa5" * length
    assert bytes(built) == reference_batch(
        [OutgoingMessage(1, b"a", b"", 5), OutgoingMessage(2, b"bcd", b"", 5)]
    )


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 200), min_size=2, max_size=40).filter(
        lambda sizes: len(set(sizes)) > 1
    ),
    data=st.data(),
)
def test_batches_of_several_payload_sizes_match_the_reference(
    sizes: list[int], data: st.DataObject
) -> None:
    messages = [
        OutgoingMessage(data.draw(U128), data.draw(st.binary(min_size=n, max_size=n)), b"", 9)
        for n in sizes
    ]
    expected = reference_batch(messages)
    views = [memoryview(message.payload) for message in messages]
    assert bytes(build_batch(messages)) == expected
    assert bytes(build_batch_columns(views, packed_ids(messages), 9)) == expected


def test_buffers_of_wider_items_are_copied_as_their_bytes() -> None:
    words = array.array("I", [1, 2, 3])  # 12 bytes, 3 items
    built = build_batch_columns([words, memoryview(words)], [1, 2], 5)  # type: ignore[list-item]
    expected = reference_batch(
        [OutgoingMessage(1, words.tobytes(), b"", 5), OutgoingMessage(2, words.tobytes(), b"", 5)]
    )
    assert bytes(built) == expected
    verify_batch(built)


def test_send_body_from_columns_equals_the_one_from_messages() -> None:
    messages = [OutgoingMessage(i + 1, b"m%03d" % i, b"", 77) for i in range(20)]
    stream, topic = Identifier.named("s"), Identifier.numeric(3)
    from_messages = build_send_messages(stream, topic, PartitionId(2), messages, headroom=256)
    from_columns = build_send_messages_columns(
        stream,
        topic,
        PartitionId(2),
        [message.payload for message in messages],
        [message.id for message in messages],
        77,
        headroom=256,
    )
    assert from_columns == from_messages


def test_column_lengths_and_limits_are_checked_before_building() -> None:
    with pytest.raises(ValueError, match="at least one"):
        build_batch_columns([], [], 0)
    with pytest.raises(ValueError, match="ids"):
        build_batch_columns([b"a", b"b"], [1], 0)
    with pytest.raises(ValueError, match="packed ids"):
        build_batch_columns([b"a", b"b"], bytes(16), 0)
    with pytest.raises(ValueError, match="timestamps"):
        build_batch_columns([b"a"], [1], [1, 2])
    with pytest.raises(ValueError, match="user-header"):
        build_batch_columns([b"a"], [1], 0, [b"", b""])
    with pytest.raises(ValueError, match="span"):
        build_batch_columns([b"a", b"b"], [1, 2], [0, MAX_TIMESTAMP_DELTA_US + 1])
    with pytest.raises(ValueError, match="exceeds"):
        build_batch_columns([bytes(MAX_PAYLOAD_BYTES + 1)], [1], 0)
    with pytest.raises(struct.error):
        build_batch_columns([b"a", b"b"], [1, 1 << 128], 0)
    with pytest.raises(struct.error):
        build_batch_columns([b"a"], [-1], 0)
