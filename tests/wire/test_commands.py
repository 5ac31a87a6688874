"""Whole frames: reading requests and replies, result framing, known answers."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import (
    COMMANDS,
    HEADER_SIZE,
    PROTOCOL_VERSION,
    CommandCode,
    CreateStream,
    Empty,
    EvictionReason,
    IggyErrorCode,
    LoginRegister,
    LoginRegisterReply,
    Operation,
    ProtocolError,
    RequestHeader,
    SendMessagesReply,
    ServerRejected,
    SessionEvicted,
    StreamDetails,
    StreamInfo,
    build_eviction_frame,
    build_reply_frame,
    build_request_frame,
    decode_frame,
    encode_reply_body,
    read_reply,
    read_request,
    request_command_code,
    result_ok,
    result_rejected,
    split_result,
)
from tests.wire.strategies import REPLIES, REQUESTS, U64

CODES = sorted(COMMANDS)
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_login_body_matches_the_frame_captured_from_the_official_sdk() -> None:
    # iggy.md, top note: login_user("iggy", "secret") sent exactly these bytes.
    expected = (
        bytes.fromhex("002c0000")
        + b"\x08rust-sdk"
        + b"\x060.11.0"
        + b"\x04iggy"
        + b"\x06secret"
        + bytes(4)
    )
    login = LoginRegister("iggy", "secret", sdk_name="rust-sdk", sdk_version="0.11.0")
    assert login.protocol_version == PROTOCOL_VERSION
    assert login.encode() == expected
    assert LoginRegister.decode(expected) == login


def test_create_stream_body_matches_the_captured_frame() -> None:
    # iggy.md, top note: create_stream("s1") sent body 02 "s1" with operation 128.
    frame = build_request_frame(
        CommandCode.CREATE_STREAM, CreateStream("s1").encode(), client=1, session=1, request=1
    )
    assert bytes(frame[HEADER_SIZE:]) == b"\x02s1"
    assert frame[176] == Operation.CREATE_STREAM


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@SETTINGS
@given(data=st.data())
def test_request_frame_reads_back_as_its_command_and_payload(
    code: CommandCode, data: st.DataObject
) -> None:
    payload = data.draw(REQUESTS[code])
    frame = build_request_frame(
        code, payload.encode(), client=99, session=data.draw(U64), request=data.draw(U64)
    )
    header, read_code, read_payload = read_request(decode_frame(frame))
    assert read_code == code
    assert read_payload == payload
    assert header.client == 99


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@SETTINGS
@given(data=st.data())
def test_reply_frame_reads_back_as_its_payload(code: CommandCode, data: st.DataObject) -> None:
    request = RequestHeader.unpack_from(
        build_request_frame(
            code, data.draw(REQUESTS[code]).encode(), client=5, session=2, request=3
        )
    )
    payload = data.draw(REPLIES[code])
    body = encode_reply_body(request.operation, payload)
    framed = request.operation.is_result_framed or request.operation is Operation.REGISTER
    assert body[:4] == (b"\x00" * 4 if framed else payload.encode()[:4])
    reply = read_reply(code, decode_frame(build_reply_frame(request, body)))
    if COMMANDS[code].reply_optional and not payload.encode():
        assert reply is None
    else:
        assert reply == payload


def test_optional_replies_read_an_empty_body_as_none() -> None:
    request = RequestHeader.unpack_from(
        build_request_frame(
            CommandCode.GET_STREAM, b"\x01\x04\x00\x00\x00\x00", client=5, session=2, request=3
        )
    )
    assert read_reply(CommandCode.GET_STREAM, decode_frame(build_reply_frame(request))) is None
    send = RequestHeader.unpack_from(
        build_request_frame(CommandCode.SEND_MESSAGES, b"", client=5, session=2, request=3)
    )
    assert read_reply(CommandCode.SEND_MESSAGES, decode_frame(build_reply_frame(send))) is None
    assert SendMessagesReply.decode(SendMessagesReply().encode()) == SendMessagesReply()


def test_reply_with_a_status_is_a_server_rejection() -> None:
    request = RequestHeader.unpack_from(
        build_request_frame(CommandCode.GET_STREAMS, b"", client=5, session=2, request=3)
    )
    frame = decode_frame(build_reply_frame(request, status=IggyErrorCode.UNAUTHORIZED))
    with pytest.raises(ServerRejected) as rejected:
        read_reply(CommandCode.GET_STREAMS, frame)
    assert rejected.value.code == 41


def test_result_section_rejection_is_a_server_rejection() -> None:
    # The captured rejection: 01 00 00 00 | 00 00 00 00 | f4 03 00 00 (1012).
    body = result_rejected(IggyErrorCode.STREAM_NAME_ALREADY_EXISTS)
    assert body == bytes.fromhex("0100000000000000f4030000")
    request = RequestHeader.unpack_from(
        build_request_frame(CommandCode.CREATE_STREAM, b"\x02s1", client=5, session=2, request=3)
    )
    with pytest.raises(ServerRejected) as rejected:
        read_reply(CommandCode.CREATE_STREAM, decode_frame(build_reply_frame(request, body)))
    assert rejected.value.code == 1012


def test_eviction_frame_is_a_session_eviction() -> None:
    frame = decode_frame(
        build_eviction_frame(
            5,
            EvictionReason.INCOMPATIBLE_PROTOCOL,
            server_protocol_version=0x3003,
            server_protocol_version_min=0x3000,
        )
    )
    with pytest.raises(SessionEvicted) as evicted:
        read_reply(CommandCode.LOGIN_REGISTER, frame)
    assert evicted.value.reason is EvictionReason.INCOMPATIBLE_PROTOCOL
    assert (evicted.value.server_protocol_version, evicted.value.server_protocol_version_min) == (
        0x3003,
        0x3000,
    )


@pytest.mark.parametrize(
    ("operation", "body", "payload"),
    [
        (Operation.CREATE_STREAM, result_ok(b"abc"), b"abc"),
        (Operation.STORE_CONSUMER_OFFSET, result_ok(), b""),
        (Operation.REGISTER, result_ok(b"xy"), b"xy"),
        (Operation.REGISTER, b"", b""),  # a terminal login failure is not framed
        (Operation.NON_REPLICATED, b"\x01\x00\x00\x00", b"\x01\x00\x00\x00"),
        (Operation.SEND_MESSAGES, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00"),
        (Operation.LOGOUT, b"", b""),
    ],
)
def test_split_result_strips_only_result_framed_replies(
    operation: Operation, body: bytes, payload: bytes
) -> None:
    assert bytes(split_result(operation, body)) == payload


@pytest.mark.parametrize(
    "body",
    [b"", b"\x01\x00\x00\x00", b"\x01\x00\x00\x00\x00\x00\x00\x00", result_ok()[:3]],
    ids=["missing", "count-without-entry", "entry-without-result", "short-count"],
)
def test_malformed_result_sections_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        split_result(Operation.CREATE_TOPIC, body)


def test_a_result_entry_that_reports_success_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        split_result(Operation.CREATE_TOPIC, b"\x01\x00\x00\x00" + bytes(8))


def test_register_reply_round_trips_behind_its_result_section() -> None:
    reply = LoginRegisterReply(
        user_id=1, session=42, server_protocol_version=PROTOCOL_VERSION, server_version="0.9.0"
    )
    body = encode_reply_body(Operation.REGISTER, reply)
    assert body[:4] == bytes(4)
    assert LoginRegisterReply.decode(split_result(Operation.REGISTER, body)) == reply


def test_create_stream_reply_is_result_framed_stream_details() -> None:
    details = StreamDetails(StreamInfo(0, 1, 0, 0, 0, "s1"))
    body = encode_reply_body(Operation.CREATE_STREAM, details)
    assert body == bytes(4) + details.encode()
    assert encode_reply_body(Operation.NON_REPLICATED, Empty()) == b""


def _raw_request(operation: Operation, code: int = 0, body: bytes = b"") -> memoryview:
    header = RequestHeader(
        size=HEADER_SIZE + len(body), client=1, request=1, session=1, operation=operation, code=code
    )
    return memoryview(header.pack() + body)


@pytest.mark.parametrize(
    ("operation", "code"),
    [
        (Operation.NON_REPLICATED, 9999),  # not a command
        (Operation.NON_REPLICATED, CommandCode.FLUSH_UNSAVED_BUFFER),  # not supported here
        (Operation.NON_REPLICATED, CommandCode.CREATE_STREAM),  # a write sent as a read
        (Operation.TRUNCATE_PARTITION, 0),  # server-internal
    ],
)
def test_unsupported_commands_are_protocol_errors(operation: Operation, code: int) -> None:
    with pytest.raises(ProtocolError) as refused:
        request_command_code(RequestHeader.unpack_from(_raw_request(operation, code)))
    assert refused.value.code is IggyErrorCode.INVALID_COMMAND


def test_delete_segments_travels_as_its_replicated_operation() -> None:
    header = RequestHeader.unpack_from(_raw_request(Operation.DELETE_SEGMENTS))
    assert request_command_code(header) is CommandCode.DELETE_SEGMENTS


def test_register_and_logout_map_to_their_codes() -> None:
    assert request_command_code(RequestHeader.unpack_from(_raw_request(Operation.REGISTER))) is (
        CommandCode.LOGIN_REGISTER
    )
    assert request_command_code(RequestHeader.unpack_from(_raw_request(Operation.LOGOUT))) is (
        CommandCode.LOGOUT_USER
    )


@settings(max_examples=300, deadline=None)
@given(
    operation=st.sampled_from(Operation),
    code=st.sampled_from([*CommandCode, 0, 7, 9999]),
    body=st.binary(max_size=120),
)
def test_read_request_given_random_bodies_raises_only_protocol_error(
    operation: Operation, code: int, body: bytes
) -> None:
    with contextlib.suppress(ProtocolError):
        read_request(decode_frame(_raw_request(operation, code, body)))


@settings(max_examples=300, deadline=None)
@given(
    code=st.sampled_from(CODES), operation=st.sampled_from(Operation), body=st.binary(max_size=120)
)
def test_read_reply_given_random_bodies_raises_only_typed_errors(
    code: CommandCode, operation: Operation, body: bytes
) -> None:
    request = RequestHeader(size=HEADER_SIZE, client=1, request=1, session=1, operation=operation)
    with contextlib.suppress(ProtocolError, ServerRejected):
        read_reply(code, decode_frame(build_reply_frame(request, body)))
