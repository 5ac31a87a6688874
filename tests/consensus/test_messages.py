"""The replica wire codec: round trips, every truncation, bit flips and random bytes."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consensus.messages import (
    Commit,
    DoViewChange,
    Message,
    MessageError,
    Prepare,
    PrepareOk,
    RepairPrepare,
    RequestPrepares,
    RequestSnapshot,
    RequestStartView,
    SnapshotChunk,
    StartView,
    StartViewChange,
    decode_message,
    encode_message,
    encode_message_parts,
    make_prepare_header,
    root_header,
)


def _prepare(op: int, body: bytes = b"batch") -> Prepare:
    header = make_prepare_header(
        group=3,
        view=2,
        op=op,
        commit=op - 1,
        parent=root_header(3).checksum,
        client_id=(1 << 127) + 5,
        session=9,
        request=4,
        operation=160,
        timestamp_us=1_700_000_000_000_000,
        body=body,
    )
    return Prepare(header=header, body=body)


SAMPLES: list[Message] = [
    _prepare(1),
    _prepare(2, b""),
    PrepareOk(3, 1, 2, 7, bytes(range(16))),
    Commit(3, 0, 2, 99),
    StartViewChange(3, 2, 5),
    DoViewChange(3, 1, 5, 2, 2, 1, 1, (_prepare(1).header, _prepare(2).header), (True, False)),
    StartView(3, 2, 5, 2, 1, 77, (_prepare(1).header, _prepare(2).header)),
    RequestStartView(3, 1, 4, 12345),
    RequestPrepares(3, 1, 4, 10, 25),
    RequestSnapshot(3, 1, 4, 0, 0),
    SnapshotChunk(3, 0, 4, 50, 10, 4, bytes(16), b"abcdef"),
    RepairPrepare(3, 1, 2, _prepare(3, b"repaired")),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_codec_round_trip_gives_back_an_equal_message(message: Message) -> None:
    assert decode_message(encode_message(message, sender=2)) == message


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_codec_every_truncation_is_a_typed_error(message: Message) -> None:
    frame = encode_message(message)
    for cut in range(len(frame)):
        with pytest.raises(MessageError):
            decode_message(frame[:cut])


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_codec_any_flipped_bit_is_a_typed_error(message: Message) -> None:
    frame = bytearray(encode_message(message))
    for position in range(0, len(frame) * 8, 7):
        damaged = bytearray(frame)
        damaged[position // 8] ^= 1 << (position % 8)
        with pytest.raises(MessageError):
            decode_message(bytes(damaged))


@settings(max_examples=300)
@given(st.binary(max_size=600))
def test_codec_random_bytes_never_crash(data: bytes) -> None:
    with contextlib.suppress(MessageError):
        decode_message(data)


def test_prepare_checksum_identifies_header_and_body() -> None:
    a, b = _prepare(1, b"x"), _prepare(1, b"y")
    assert a.checksum != b.checksum
    assert a.header.parent == root_header(3).checksum


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_codec_parts_join_to_the_frame_and_a_prepare_body_is_not_copied(message: Message) -> None:
    parts = encode_message_parts(message, sender=2)
    assert b"".join(parts) == encode_message(message, sender=2)
    if isinstance(message, Prepare | RepairPrepare):
        prepare = message if isinstance(message, Prepare) else message.prepare
        assert len(parts) == 2 and parts[1] is prepare.body
    else:
        assert len(parts) == 1
