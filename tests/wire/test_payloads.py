"""Every request and reply payload: round trips, strictness, and hostile bytes."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import (
    COMMANDS,
    LONG_POLL_CODE,
    CommandCode,
    DeleteSegments,
    Identifier,
    LongPollMessages,
    PollMessages,
    ProtocolError,
    ReplyPayload,
    RequestPayload,
    Stats,
)
from tests.wire.strategies import REPLIES, REQUESTS

CODES = sorted(COMMANDS)
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOSTILE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _has_nan(value: object) -> bool:
    """Whether a decoded value holds a NaN float anywhere (f32 NaNs may not round-trip
    bit for bit: CPython quiets signalling NaNs when converting to and from binary32)."""
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, tuple):
        return any(_has_nan(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_has_nan(getattr(value, field.name)) for field in dataclasses.fields(value))
    return False


def _decode_or_protocol_error(decode: object, body: bytes) -> RequestPayload | ReplyPayload | None:
    """Decode ``body``; a ProtocolError is fine, any other exception fails the test.
    A successful decode must re-encode to exactly ``body``."""
    assert callable(decode)
    try:
        value = decode(body)
    except ProtocolError:
        return None
    if not _has_nan(value):
        assert value.encode() == body, "a decode that succeeds must be canonical"
    return value  # type: ignore[no-any-return]


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@FAST
@given(data=st.data())
def test_request_payload_encode_then_decode_is_identity(
    code: CommandCode, data: st.DataObject
) -> None:
    value = data.draw(REQUESTS[code])
    body = value.encode()
    decoded = COMMANDS[code].request.decode(body)
    assert decoded == value
    assert decoded.encode() == body


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@FAST
@given(data=st.data())
def test_reply_payload_encode_then_decode_is_identity(
    code: CommandCode, data: st.DataObject
) -> None:
    value = data.draw(REPLIES[code])
    body = value.encode()
    decoded = COMMANDS[code].reply.decode(body)
    assert decoded == value
    assert decoded.encode() == body


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@HOSTILE
@given(data=st.data())
def test_request_decoder_given_bit_flipped_body_raises_only_protocol_error(
    code: CommandCode, data: st.DataObject
) -> None:
    body = bytearray(data.draw(REQUESTS[code]).encode())
    if body:
        index = data.draw(st.integers(0, len(body) - 1))
        body[index] ^= 1 << data.draw(st.integers(0, 7))
    _decode_or_protocol_error(COMMANDS[code].request.decode, bytes(body))


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@HOSTILE
@given(data=st.data())
def test_reply_decoder_given_bit_flipped_body_raises_only_protocol_error(
    code: CommandCode, data: st.DataObject
) -> None:
    body = bytearray(data.draw(REPLIES[code]).encode())
    if body:
        index = data.draw(st.integers(0, len(body) - 1))
        body[index] ^= 1 << data.draw(st.integers(0, 7))
    _decode_or_protocol_error(COMMANDS[code].reply.decode, bytes(body))


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@HOSTILE
@given(body=st.binary(max_size=200))
def test_decoders_given_random_bytes_raise_only_protocol_error(
    code: CommandCode, body: bytes
) -> None:
    _decode_or_protocol_error(COMMANDS[code].request.decode, body)
    _decode_or_protocol_error(COMMANDS[code].reply.decode, body)


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decoders_given_truncated_or_extended_body_never_misread(
    code: CommandCode, data: st.DataObject
) -> None:
    # Every prefix and every one-byte extension either fails with ProtocolError or is
    # itself a canonical encoding (a shorter list that ends on an element boundary).
    for payload in (data.draw(REQUESTS[code]), data.draw(REPLIES[code])):
        body = payload.encode()
        decode = type(payload).decode
        for end in range(len(body)):
            _decode_or_protocol_error(decode, body[:end])
        _decode_or_protocol_error(decode, body + b"\x00")


def test_stats_with_signalling_nan_decodes_to_a_quiet_nan() -> None:
    # The documented exception to byte-identical re-encoding: binary32 fields.
    numbers = {
        field.name: 0 for field in dataclasses.fields(Stats) if field.type in ("int", "float")
    }
    value = Stats(
        **numbers,
        hostname="h",
        os_name="o",
        os_version="v",
        kernel_version="k",
        iggy_server_version="0.9.0",
        iggy_server_semver=None,
        cache_metrics=(),
    )
    body = bytearray(value.encode())
    body[4:8] = bytes.fromhex("0100807f")  # cpu_usage: a signalling NaN
    decoded = Stats.decode(bytes(body))
    assert math.isnan(decoded.cpu_usage)
    assert decoded.encode()[4:8] == bytes.fromhex("0100c07f")


def test_delete_segments_body_is_iggys_layout_and_round_trips() -> None:
    """``[stream][topic][partition_id u32][segments_count u32]``, as Iggy 0.9 sends it,
    decoded by the registry's entry for 503."""
    request = DeleteSegments(Identifier.numeric(1), Identifier.named("t"), 2, 3)
    body = request.encode()
    assert body == bytes([1, 4, 1, 0, 0, 0, 2, 1, ord("t"), 2, 0, 0, 0, 3, 0, 0, 0])
    assert DeleteSegments.decode(body) == request
    assert COMMANDS[CommandCode.DELETE_SEGMENTS].decode_request(body) == request
    for cut in range(len(body)):
        with pytest.raises(ProtocolError):
            DeleteSegments.decode(body[:cut])


@FAST
@given(wait=st.integers(0, 2**32 - 1), poll=REQUESTS[CommandCode.POLL_MESSAGES])
def test_long_poll_body_is_wait_then_a_poll_body_and_round_trips(
    wait: int, poll: RequestPayload
) -> None:
    """viewstream's long poll: ``[max_wait_ms u32]`` then POLL_MESSAGES' body, strict in
    both directions (a prefix fails; a decode that succeeds is canonical)."""
    assert isinstance(poll, PollMessages)
    request = LongPollMessages(wait, poll)
    body = request.encode()
    assert body == wait.to_bytes(4, "little") + poll.encode()
    assert LongPollMessages.decode(body) == request
    for end in range(len(body)):
        _decode_or_protocol_error(LongPollMessages.decode, body[:end])
    _decode_or_protocol_error(LongPollMessages.decode, body + b"\x00")


def test_long_poll_code_is_outside_iggys_registry() -> None:
    """Iggy's clients never send it, and Iggy's own planned codes (105/106) stay free."""
    assert LONG_POLL_CODE not in {int(code) for code in CommandCode}
    assert LONG_POLL_CODE not in (105, 106)
