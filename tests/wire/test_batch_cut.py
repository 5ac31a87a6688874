"""Cutting a stored batch for a poll: frames of one size are cut from strided views, any
other batch by walking its frames, and both give the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdk.wire.batch as batch_module
from sdk.wire import (
    BATCH_HEADER_SIZE,
    BatchSlice,
    OutgoingMessage,
    build_batch,
    read_batch,
    slice_batch,
    stamp_batch,
    verify_batch,
)
from sdk.wire.primitives import UserHeader, encode_user_headers
from tests.wire.strategies import outgoing_messages

BASE_OFFSET = 1_000


def _stored(messages: list[OutgoingMessage]) -> bytes:
    batch = build_batch(messages)
    stamp_batch(
        batch, verify_batch(batch), partition_id=2, base_offset=BASE_OFFSET, base_timestamp=77
    )
    return bytes(batch)


def _uniform(count: int, payload_size: int, headers: bytes = b"") -> list[OutgoingMessage]:
    return [
        OutgoingMessage(i + 1, bytes((i + j) % 251 for j in range(payload_size)), headers, 10 + i)
        for i in range(count)
    ]


def _walked(stored: bytes, from_offset: int, count_max: int) -> BatchSlice | None:
    """``slice_batch`` made to walk every frame, the reference for the strided cut."""
    saved = batch_module._uniform_cut
    batch_module._uniform_cut = lambda *_: None
    try:
        return slice_batch(stored, from_offset, count_max)
    finally:
        batch_module._uniform_cut = saved


def _same_cut(stored: bytes, from_offset: int, count_max: int) -> BatchSlice | None:
    piece = slice_batch(stored, from_offset, count_max)
    walked = _walked(stored, from_offset, count_max)
    if piece is None or walked is None:
        assert piece is None and walked is None
        return None
    assert [bytes(part) for part in piece.parts] == [bytes(part) for part in walked.parts]
    assert (piece.message_count, piece.first_offset, piece.size) == (
        walked.message_count,
        walked.first_offset,
        walked.size,
    )
    return piece


def _check_messages(piece: BatchSlice, stored: bytes, from_offset: int, count_max: int) -> None:
    _, everything = read_batch(stored)
    expected = [m for m in everything if m.offset >= from_offset][:count_max]
    record = b"".join(bytes(part) for part in piece.parts)
    verify_batch(record, first_offset_delta=None)  # a sealed batch in its own right
    _, got = read_batch(record)
    assert [(m.offset, m.id, bytes(m.payload), bytes(m.user_headers)) for m in got] == [
        (m.offset, m.id, bytes(m.payload), bytes(m.user_headers)) for m in expected
    ]


@pytest.mark.parametrize("payload_size", [0, 1, 2, 3, 4, 5, 6, 7, 8, 1000, 1001, 1002, 1004])
def test_cut_of_uniform_frames_of_every_width_matches_the_walk(payload_size: int) -> None:
    # Frame sizes 48 + payload: every residue modulo 8, so every column width is used.
    stored = _stored(_uniform(9, payload_size))
    for skip in range(9):
        for take in range(1, 10 - skip):
            piece = _same_cut(stored, BASE_OFFSET + skip, take)
            assert piece is not None and len(piece.parts) == (1 if take == 9 else 2)
            _check_messages(piece, stored, BASE_OFFSET + skip, take)


def test_cut_with_user_headers_in_every_frame_matches_the_walk() -> None:
    headers = encode_user_headers([UserHeader.of("k", "v")])
    stored = _stored(_uniform(6, 33, headers))
    piece = _same_cut(stored, BASE_OFFSET + 2, 3)
    assert piece is not None
    _check_messages(piece, stored, BASE_OFFSET + 2, 3)


def test_frames_of_one_size_but_different_lengths_are_walked() -> None:
    # Frame 1 moves 12 bytes from its payload to user headers: same size, other lengths.
    headers = encode_user_headers([UserHeader.of("k", "v")])
    assert len(headers) == 12
    messages = _uniform(4, 40)
    messages[1] = OutgoingMessage(2, bytes(28), headers, 11)
    stored = _stored(messages)
    view = memoryview(stored)
    assert batch_module._uniform_cut(view, 1, 2) is None
    assert batch_module._uniform_cut(view, 0, 1) is not None  # frame 1 is not covered
    piece = _same_cut(stored, BASE_OFFSET + 1, 2)
    assert piece is not None
    _check_messages(piece, stored, BASE_OFFSET + 1, 2)


def test_a_uniform_prefix_is_cut_even_if_later_frames_differ() -> None:
    messages = [*_uniform(5, 16), OutgoingMessage(99, b"longer payload" * 3, b"", 20)]
    stored = _stored(messages)
    assert batch_module._uniform_cut(memoryview(stored), 1, 3) is not None
    assert batch_module._uniform_cut(memoryview(stored), 1, 5) is None
    for skip, take in ((1, 3), (1, 5), (5, 1), (0, 5)):
        piece = _same_cut(stored, BASE_OFFSET + skip, take)
        assert piece is not None
        _check_messages(piece, stored, BASE_OFFSET + skip, take)


def test_cut_of_a_truncated_batch_is_refused_as_the_walk_refuses_it() -> None:
    stored = bytearray(_stored(_uniform(4, 16)))
    # The first frame declares a payload running past the batch: no uniform cut, and the
    # walk finds the batch truncated.
    stored[BATCH_HEADER_SIZE + 36] = 0xFF
    assert batch_module._uniform_cut(memoryview(stored), 1, 2) is None


@settings(max_examples=150, deadline=None)
@given(
    messages=st.one_of(
        outgoing_messages(max_size=8),
        st.builds(_uniform, st.integers(1, 12), st.integers(0, 40)),
    ),
    skip=st.integers(0, 12),
    count_max=st.integers(1, 14),
)
def test_cut_of_any_batch_matches_the_walk_and_the_messages(
    messages: list[OutgoingMessage], skip: int, count_max: int
) -> None:
    stored = _stored(messages)
    piece = _same_cut(stored, BASE_OFFSET + skip, count_max)
    if piece is None:
        assert skip >= len(messages)
        return
    _check_messages(piece, stored, BASE_OFFSET + skip, count_max)
