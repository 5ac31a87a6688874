"""Trailing bytes after a request: ignored where Iggy's server ignores them, refused with
Iggy's code where it refuses them, and never a reason to misread a field.

The table below classifies every command of ``COMMANDS``; Iggy's behaviour per code is in
``docs/protocol.md`` section 1.8. Replies and the payloads' own ``decode`` stay strict.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import (
    COMMANDS,
    CommandCode,
    CreateStream,
    CreateTopic,
    CreateUser,
    Identifier,
    IggyErrorCode,
    OptionEntry,
    ProtocolError,
    RequestPayload,
    TopicRef,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    build_request_frame,
    decode_frame,
    read_request,
)
from sdk.wire._buffer import Writer
from sdk.wire.primitives import decode_options, encode_options
from tests.wire.strategies import REQUESTS

_IGNORED: Final = None

# Iggy's server per request code: ``None`` ignores trailing bytes, a code refuses them.
TRAILING: Final[dict[CommandCode, IggyErrorCode | None]] = {
    CommandCode.PING: _IGNORED,  # the body is never read
    CommandCode.GET_STATS: _IGNORED,
    CommandCode.GET_CLUSTER_METADATA: _IGNORED,
    CommandCode.GET_ME: _IGNORED,
    CommandCode.GET_CLIENT: _IGNORED,
    CommandCode.DESCRIBE_OPTIONS: _IGNORED,
    CommandCode.GET_SNAPSHOT_FILE: _IGNORED,
    CommandCode.GET_CLIENTS: _IGNORED,
    CommandCode.ATTACH_CONSUMER_SESSION: _IGNORED,  # ours; Iggy's general rule
    CommandCode.GET_USER: _IGNORED,
    CommandCode.GET_USERS: _IGNORED,
    CommandCode.CREATE_USER: IggyErrorCode.INVALID_COMMAND,  # ends with an options block
    CommandCode.DELETE_USER: _IGNORED,
    CommandCode.UPDATE_USER: IggyErrorCode.INVALID_COMMAND,  # ends with an options block
    CommandCode.UPDATE_PERMISSIONS: _IGNORED,  # after the length-prefixed permissions
    CommandCode.CHANGE_PASSWORD: _IGNORED,
    CommandCode.LOGOUT_USER: _IGNORED,
    CommandCode.LOGIN_REGISTER: _IGNORED,
    CommandCode.LOGIN_REGISTER_WITH_PAT: _IGNORED,
    CommandCode.GET_PERSONAL_ACCESS_TOKENS: _IGNORED,
    CommandCode.CREATE_PERSONAL_ACCESS_TOKEN: _IGNORED,
    CommandCode.DELETE_PERSONAL_ACCESS_TOKEN: _IGNORED,
    CommandCode.POLL_MESSAGES: _IGNORED,
    CommandCode.POLL_ROUTING: _IGNORED,  # ours; Iggy's general rule
    CommandCode.POLL_PRIMARY: _IGNORED,  # ours; Iggy's general rule
    # Iggy drops it without a reply; we refuse it with the batch-length code.
    CommandCode.SEND_MESSAGES: IggyErrorCode.INVALID_FORMAT,
    CommandCode.GET_CONSUMER_OFFSET: _IGNORED,
    CommandCode.STORE_CONSUMER_OFFSET: _IGNORED,  # after the ack byte
    CommandCode.DELETE_CONSUMER_OFFSET: _IGNORED,  # after the ack byte
    CommandCode.CONSUMER_OFFSET_ROUTING: _IGNORED,  # ours; Iggy's general rule
    CommandCode.GET_STREAM: _IGNORED,
    CommandCode.GET_STREAMS: _IGNORED,
    CommandCode.CREATE_STREAM: IggyErrorCode.INVALID_COMMAND,  # ends with an options block
    CommandCode.DELETE_STREAM: _IGNORED,
    CommandCode.UPDATE_STREAM: IggyErrorCode.INVALID_COMMAND,  # ends with an options block
    CommandCode.PURGE_STREAM: _IGNORED,
    CommandCode.GET_TOPIC: _IGNORED,
    CommandCode.GET_TOPICS: _IGNORED,
    CommandCode.CREATE_TOPIC: IggyErrorCode.INVALID_COMMAND,  # ends with an options block
    CommandCode.DELETE_TOPIC: _IGNORED,  # the Node SDK appends partitions_count u32
    CommandCode.UPDATE_TOPIC: IggyErrorCode.INVALID_COMMAND,  # ends with an options block
    CommandCode.PURGE_TOPIC: _IGNORED,
    CommandCode.CREATE_PARTITIONS: _IGNORED,
    CommandCode.DELETE_PARTITIONS: _IGNORED,
    CommandCode.DELETE_SEGMENTS: _IGNORED,  # a fixed layout, as DELETE_PARTITIONS
    CommandCode.GET_CONSUMER_GROUP: _IGNORED,
    CommandCode.GET_CONSUMER_GROUPS: _IGNORED,
    CommandCode.CREATE_CONSUMER_GROUP: _IGNORED,
    CommandCode.DELETE_CONSUMER_GROUP: _IGNORED,
    CommandCode.JOIN_CONSUMER_GROUP: _IGNORED,
    CommandCode.LEAVE_CONSUMER_GROUP: _IGNORED,
    CommandCode.SYNC_CONSUMER_GROUP: _IGNORED,
}

OPTION_REQUESTS: Final = (
    CreateUser,
    UpdateUser,
    CreateStream,
    UpdateStream,
    CreateTopic,
    UpdateTopic,
)
"""The requests whose options block runs to the end of the body."""

CODES = sorted(COMMANDS)
TABLE = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOSTILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _is_options_garbage(raw: bytes) -> bool:
    """Whether ``raw`` is not a well-formed options block on its own. A block is parsed
    front to back, so a well-formed block followed by such bytes is malformed too."""
    try:
        decode_options(raw)
    except ProtocolError:
        return True
    return False


def test_the_table_classifies_every_request_command() -> None:
    assert set(TRAILING) == set(COMMANDS)


def test_the_table_refuses_exactly_the_requests_that_end_in_a_rest_of_body_field() -> None:
    refused = {code for code, answer in TRAILING.items() if answer is not None}
    assert refused == {
        code for code, spec in COMMANDS.items() if spec.request in OPTION_REQUESTS
    } | {CommandCode.SEND_MESSAGES}


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@TABLE
@given(data=st.data())
def test_request_given_trailing_bytes_is_decoded_or_refused_as_iggy_does(
    code: CommandCode, data: st.DataObject
) -> None:
    spec = COMMANDS[code]
    payload = data.draw(REQUESTS[code])
    body = payload.encode()
    expected = TRAILING[code]
    if spec.request in OPTION_REQUESTS:
        trailing = data.draw(st.binary(min_size=1, max_size=64).filter(_is_options_garbage))
    else:
        trailing = data.draw(st.binary(min_size=1, max_size=64))
    # The strict decoder refuses every extension, whatever the server does.
    with pytest.raises(ProtocolError):
        spec.request.decode(body + trailing)
    if expected is None:
        assert spec.decode_request(body + trailing) == payload
        assert spec.decode_request(body) == payload
    else:
        with pytest.raises(ProtocolError) as refused:
            spec.decode_request(body + trailing)
        assert refused.value.code is expected


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@TABLE
@given(data=st.data())
def test_request_frame_given_trailing_bytes_reads_as_the_server_reads_its_body(
    code: CommandCode, data: st.DataObject
) -> None:
    payload = data.draw(REQUESTS[code])
    trailing = b"\x00" * data.draw(st.integers(1, 8))  # kind 0: never an options block
    frame = build_request_frame(code, payload.encode() + trailing, client=7, session=1, request=1)
    if code is CommandCode.LOGIN_REGISTER_WITH_PAT:
        # A token body with bytes appended may also read as a password login (the token
        # as the username); the shape alone cannot tell, so the server tries the password
        # first and then the token, as Iggy's does (``register_command_code``).
        assert COMMANDS[code].decode_request(frame[256:]) == payload
    elif TRAILING[code] is None:
        assert read_request(decode_frame(frame))[1:] == (code, payload)
    else:
        with pytest.raises(ProtocolError) as refused:
            read_request(decode_frame(frame))
        assert refused.value.code is TRAILING[code]


def test_delete_topic_from_the_node_sdk_with_partitions_count_names_the_topic() -> None:
    topic = TopicRef(Identifier(3), Identifier("orders"))
    body = topic.encode() + struct.pack("<I", 12)  # Node SDK: partitionsCount u32
    assert COMMANDS[CommandCode.DELETE_TOPIC].decode_request(body) == topic


@pytest.mark.parametrize(
    "code",
    [code for code in CODES if COMMANDS[code].request in OPTION_REQUESTS],
    ids=lambda code: code.name,
)
@TABLE
@given(data=st.data())
def test_options_request_given_a_well_formed_option_appended_reads_it_as_an_option(
    code: CommandCode, data: st.DataObject
) -> None:
    # Iggy parses the bytes after the other fields as options: a well-formed pair is an
    # option (the state machine then judges its key), not something to ignore.
    payload = data.draw(REQUESTS[code])
    assert isinstance(payload, OPTION_REQUESTS)
    extra = OptionEntry.of("appended-after-the-body", 7)
    if any(option.key == extra.key for option in payload.options):
        return
    block = Writer()
    encode_options(block, (extra,))
    decoded = COMMANDS[code].decode_request(payload.encode() + block.getvalue())
    assert decoded == dataclasses.replace(payload, options=(*payload.options, extra))


def _bodies(code: CommandCode) -> st.SearchStrategy[bytes]:
    """Hostile bodies near a valid one: random, truncated, extended, bit-flipped."""

    @st.composite
    def near(draw: st.DrawFn) -> bytes:
        body = bytearray(draw(REQUESTS[code]).encode())
        how = draw(st.sampled_from(["truncate", "extend", "flip"]))
        if how == "truncate":
            return bytes(body[: draw(st.integers(0, len(body)))])
        if how == "extend":
            return bytes(body) + draw(st.binary(min_size=1, max_size=32))
        if body:
            index = draw(st.integers(0, len(body) - 1))
            body[index] ^= 1 << draw(st.integers(0, 7))
        return bytes(body)

    return st.one_of(st.binary(max_size=200), near())


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
@HOSTILE
@given(data=st.data())
def test_server_decoder_accepts_only_a_canonical_request_followed_by_unread_bytes(
    code: CommandCode, data: st.DataObject
) -> None:
    # Never a misread: what the server accepts re-encodes to a prefix of the body (the
    # whole body where the last field runs to its end), so each field it used was read
    # and validated exactly as the strict decoder would have.
    body = data.draw(_bodies(code))
    spec = COMMANDS[code]
    try:
        value: RequestPayload = spec.decode_request(body)
    except ProtocolError:
        return
    encoded = value.encode()
    assert body.startswith(encoded)
    if TRAILING[code] is not None:
        assert encoded == body
    assert spec.request.decode(encoded) == value
