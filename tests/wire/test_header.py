"""The 256-byte headers: layouts at the documented offsets, round trips, validation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.wire import (
    HEADER_SIZE,
    Command,
    EvictionHeader,
    EvictionReason,
    Operation,
    ProtocolError,
    ReplyHeader,
    RequestHeader,
    validate_request_header,
)
from tests.wire.strategies import U8, U32, U64, U128

SETTINGS = settings(max_examples=100, deadline=None)

request_headers = st.builds(
    RequestHeader,
    size=U32,
    client=U128,
    request=U64,
    session=U64,
    operation=st.sampled_from(Operation),
    code=U32,
    request_checksum=U128,
    timestamp=U64,
    user_id=U32,
    checksum=U128,
    checksum_body=U128,
    cluster=U128,
    view=U32,
    release=U32,
    replica=U8,
)
reply_headers = st.builds(
    ReplyHeader,
    size=U32,
    client=U128,
    request=U64,
    operation=st.sampled_from(Operation),
    status=U32,
    op=U64,
    commit=U64,
    timestamp=U64,
    request_checksum=U128,
    context=U128,
    checksum=U128,
    checksum_body=U128,
    cluster=U128,
    view=U32,
    release=U32,
    replica=U8,
)
eviction_headers = st.builds(
    EvictionHeader,
    client=U128,
    reason=st.sampled_from([r for r in EvictionReason if r is not EvictionReason.RESERVED]),
    server_protocol_version=U32,
    server_protocol_version_min=U32,
    size=U32,
    checksum=U128,
    checksum_body=U128,
    cluster=U128,
    view=U32,
    release=U32,
    replica=U8,
)


@SETTINGS
@given(header=request_headers, offset=st.integers(0, 40))
def test_request_header_pack_then_unpack_is_identity_at_any_offset(
    header: RequestHeader, offset: int
) -> None:
    buffer = bytearray(offset + HEADER_SIZE)
    header.pack_into(buffer, offset)
    assert RequestHeader.unpack_from(memoryview(buffer), offset) == header
    assert header.pack() == bytes(buffer[offset:])


@SETTINGS
@given(header=reply_headers)
def test_reply_header_pack_then_unpack_is_identity(header: ReplyHeader) -> None:
    assert ReplyHeader.unpack_from(header.pack()) == header


@SETTINGS
@given(header=eviction_headers)
def test_eviction_header_pack_then_unpack_is_identity(header: EvictionHeader) -> None:
    assert EvictionHeader.unpack_from(header.pack()) == header


def test_request_header_fields_sit_at_the_reference_offsets() -> None:
    # Offsets from the reference table (iggy.md 1.2), read back independently.
    raw = RequestHeader(
        size=300,
        client=0x0102030405060708090A0B0C0D0E0F10,
        request=0x1112131415161718,
        session=0x2122232425262728,
        operation=Operation.NON_REPLICATED,
        code=100,
        request_checksum=0x31,
        timestamp=0x41,
        user_id=0x51,
        view=0x61,
        release=0x71,
        replica=0x81,
    ).pack()
    assert len(raw) == HEADER_SIZE
    assert struct.unpack_from("<III", raw, 48) == (300, 0x61, 0x71)
    assert raw[60] == Command.REQUEST
    assert raw[61] == 0x81
    assert raw[62:128] == bytes(66)
    assert int.from_bytes(raw[128:144], "little") == 0x0102030405060708090A0B0C0D0E0F10
    assert int.from_bytes(raw[144:160], "little") == 0x31
    assert struct.unpack_from("<QQ", raw, 160) == (0x41, 0x1112131415161718)
    assert raw[176] == Operation.NON_REPLICATED
    assert raw[177:184] == bytes(7)
    assert struct.unpack_from("<QII", raw, 184) == (0x2122232425262728, 0x51, 100)
    assert raw[200:256] == bytes(56)


def test_reply_header_fields_sit_at_the_reference_offsets() -> None:
    raw = ReplyHeader(
        size=260,
        client=0xC1,
        request=0xD1,
        operation=Operation.CREATE_STREAM,
        status=1012,
        op=0xE1,
        commit=0xF1,
        timestamp=0xA1,
        request_checksum=0xB1,
        context=0x91,
    ).pack()
    assert raw[60] == Command.REPLY
    assert int.from_bytes(raw[128:144], "little") == 0xB1
    assert int.from_bytes(raw[144:160], "little") == 0x91
    assert int.from_bytes(raw[160:176], "little") == 0xC1
    assert struct.unpack_from("<QQQQ", raw, 176) == (0xE1, 0xF1, 0xA1, 0xD1)
    assert raw[208] == Operation.CREATE_STREAM
    assert struct.unpack_from("<I", raw, 216)[0] == 1012
    assert raw[220:] == bytes(36)


def test_eviction_header_fields_sit_at_the_reference_offsets() -> None:
    raw = EvictionHeader(
        client=0x77,
        reason=EvictionReason.STALE_CLIENT,
        server_protocol_version=0x2C00,
        server_protocol_version_min=0x2C00,
    ).pack()
    assert struct.unpack_from("<I", raw, 48)[0] == HEADER_SIZE
    assert raw[60] == Command.EVICTION
    assert int.from_bytes(raw[128:144], "little") == 0x77
    assert struct.unpack_from("<II", raw, 144) == (0x2C00, 0x2C00)
    assert raw[152:255] == bytes(103)
    assert raw[255] == EvictionReason.STALE_CLIENT


def test_unpacking_a_header_of_another_shape_is_refused() -> None:
    reply = ReplyHeader(size=256, client=1, request=1, operation=Operation.NON_REPLICATED).pack()
    with pytest.raises(ProtocolError):
        RequestHeader.unpack_from(reply)
    with pytest.raises(ProtocolError):
        EvictionHeader.unpack_from(reply)
    request = RequestHeader(
        size=256, client=1, request=1, session=0, operation=Operation.NON_REPLICATED
    ).pack()
    with pytest.raises(ProtocolError):
        ReplyHeader.unpack_from(request)


def test_unknown_operation_is_refused_with_an_eviction_reason() -> None:
    raw = bytearray(
        RequestHeader(
            size=256, client=1, request=1, session=1, operation=Operation.PURGE_TOPIC
        ).pack()
    )
    raw[176] = 150  # between the metadata and partition ranges: undefined
    with pytest.raises(ProtocolError) as refused:
        RequestHeader.unpack_from(raw)
    assert refused.value.eviction is EvictionReason.INVALID_REQUEST_OPERATION


def test_eviction_without_a_reason_is_refused() -> None:
    raw = bytearray(EvictionHeader(client=1, reason=EvictionReason.NO_SESSION).pack())
    raw[255] = 0
    with pytest.raises(ProtocolError):
        EvictionHeader.unpack_from(raw)
    raw[255] = 200
    with pytest.raises(ProtocolError):
        EvictionHeader.unpack_from(raw)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(min_size=0, max_size=300), offset=st.integers(0, 50))
def test_header_parsers_given_random_bytes_raise_only_protocol_error(
    raw: bytes, offset: int
) -> None:
    for parser in (RequestHeader.unpack_from, ReplyHeader.unpack_from, EvictionHeader.unpack_from):
        try:
            parsed = parser(raw, offset)
        except ProtocolError:
            continue
        # Whatever parses re-packs to a header that parses the same (reserved bytes
        # are the only thing a parse drops).
        assert parser(parsed.pack(), 0) == parsed


def _request(
    operation: Operation, *, client: int = 5, session: int = 1, request: int = 1
) -> RequestHeader:
    return RequestHeader(
        size=HEADER_SIZE, client=client, request=request, session=session, operation=operation
    )


@pytest.mark.parametrize(
    "header",
    [
        _request(Operation.REGISTER, session=0, request=0),
        _request(Operation.NON_REPLICATED, session=0, request=1),  # ping before login
        _request(Operation.NON_REPLICATED, session=0, request=0),
        _request(Operation.CREATE_STREAM),
        _request(Operation.SEND_MESSAGES, session=3, request=9),
        _request(Operation.LOGOUT),
    ],
    ids=["register", "pre-login-ping", "zero-request-read", "metadata", "partition", "logout"],
)
def test_validate_request_header_admits_well_formed_requests(header: RequestHeader) -> None:
    validate_request_header(header)


@pytest.mark.parametrize(
    "header",
    [
        _request(Operation.NON_REPLICATED, client=0),
        _request(Operation.RESERVED),
        _request(Operation.CREATE_TOPIC_WITH_ASSIGNMENTS),
        _request(Operation.TRUNCATE_PARTITION),
        _request(Operation.REGISTER, session=1, request=0),
        _request(Operation.REGISTER, session=0, request=1),
        _request(Operation.CREATE_STREAM, session=0),
        _request(Operation.CREATE_STREAM, request=0),
        _request(Operation.SEND_MESSAGES, session=0),
        _request(Operation.LOGOUT, request=0),
    ],
    ids=[
        "zero-client",
        "reserved-operation",
        "internal-operation",
        "internal-truncate",
        "register-with-session",
        "register-with-request",
        "metadata-without-session",
        "metadata-without-request",
        "partition-without-session",
        "logout-without-request",
    ],
)
def test_validate_request_header_refuses_what_the_server_refuses(header: RequestHeader) -> None:
    with pytest.raises(ProtocolError):
        validate_request_header(header)
