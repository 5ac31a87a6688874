"""Golden vectors: our codec against frames captured from the official apache-iggy SDK.

`tests/golden/manifest.json` names every captured frame and lists its fields as an
independent reader (`tests.golden.layouts`) saw them. For each frame our decoder must read
those fields, and our encoder, given the same fields (the random ones, such as the client
id, taken from the capture), must reproduce the frame byte for byte. The replies the
recorder sent were built by hand from docs/protocol.md and accepted by the SDK; our reply
encoder must produce the very same bytes. Regenerate the vectors with
`python -m tests.golden.record`.
"""

from __future__ import annotations

import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sdk.wire import (
    HEADER_SIZE,
    CommandCode,
    EvictionHeader,
    EvictionReason,
    HeaderKind,
    Operation,
    ProtocolError,
    ReplyHeader,
    RequestHeader,
    SendMessages,
    ServerRejected,
    SessionEvicted,
    UserHeader,
    build_batch,
    build_eviction_frame,
    build_reply_frame,
    build_request_frame,
    build_send_messages,
    decode_frame,
    decode_header_value,
    decode_user_headers,
    encode_reply_body,
    read_batch,
    read_reply,
    read_request,
    verify_batch,
    verify_send_messages,
)
from tests.golden.layouts import describe_request_body, describe_request_header
from tests.golden.typed import (
    identifier,
    outgoing_messages,
    partitioning,
    reply_payload,
    request_payload,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@cache
def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text())
    return data


def frames() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = manifest()["frames"]
    return entries


def frame_id(entry: dict[str, Any]) -> str:
    return f"{entry['index']:03d}-{entry['step']}"


def request_bytes(entry: dict[str, Any]) -> bytes:
    return GOLDEN.joinpath(str(entry["request"]["file"])).read_bytes()


def reply_bytes(entry: dict[str, Any]) -> bytes:
    return GOLDEN.joinpath(str(entry["reply"]["file"])).read_bytes()


def send_frames() -> list[dict[str, Any]]:
    return [e for e in frames() if e["command"] == 101]


def poll_reply_frames() -> list[dict[str, Any]]:
    return [e for e in frames() if e["reply"]["kind"] == "poll"]


ALL = pytest.mark.parametrize("entry", frames(), ids=frame_id)
SENDS = pytest.mark.parametrize("entry", send_frames(), ids=frame_id)
POLLS = pytest.mark.parametrize("entry", poll_reply_frames(), ids=frame_id)


def test_golden_manifest_covers_every_command_of_the_supported_subset() -> None:
    codes = {e["command"] for e in frames()}
    wanted = {1, 10, 12, 14, 20, 39, 40, 100, 101, 103, 104, 120, 121, 122, 123}
    wanted |= {31, 32, 33, 34, 35, 36, 37}
    wanted |= {200, 201, 202, 203, 204, 205, 300, 301, 302, 303, 304, 305, 402, 403}
    wanted |= {600, 601, 602, 603, 604, 605, 606}
    assert wanted <= codes, f"no golden frame for codes {sorted(wanted - codes)}"


@ALL
def test_golden_manifest_agrees_with_the_frame_files(entry: dict[str, Any]) -> None:
    frame = request_bytes(entry)
    header = describe_request_header(frame)
    assert header == entry["request"]["header"]
    assert describe_request_body(header["code"], frame[HEADER_SIZE:]) == entry["request"]["body"]


# Request headers.


@ALL
def test_golden_request_header_decodes_to_the_captured_fields(entry: dict[str, Any]) -> None:
    fields = entry["request"]["header"]
    header = RequestHeader.unpack_from(memoryview(request_bytes(entry)))
    assert header.size == fields["size"]
    assert header.client == int(fields["client_hex"], 16)
    assert header.request_checksum == fields["request_checksum"]
    assert header.timestamp == fields["timestamp"]
    assert header.request == fields["request"]
    assert header.operation == fields["operation"]
    assert header.session == fields["session"]
    assert header.user_id == fields["user_id"]
    if header.operation == Operation.NON_REPLICATED:
        assert header.code == fields["code"]
    else:
        assert header.code == 0


@ALL
def test_golden_request_frame_reencodes_byte_exact(entry: dict[str, Any]) -> None:
    """Header from our encoder (client id from the capture) around the captured body."""
    frame = request_bytes(entry)
    fields = entry["request"]["header"]
    ours = build_request_frame(
        entry["command"],
        frame[HEADER_SIZE:],
        client=int(fields["client_hex"], 16),
        session=fields["session"],
        request=fields["request"],
    )
    assert bytes(ours) == frame


@ALL
def test_golden_request_payload_decodes_to_the_captured_fields(entry: dict[str, Any]) -> None:
    """Our decoder, from the frame, agrees with the independent reading in the manifest."""
    header, code, payload = read_request(decode_frame(request_bytes(entry)))
    assert code == entry["command"]
    assert header.operation == entry["operation"]
    assert payload == request_payload(entry["command"], entry["request"]["body"])


@ALL
def test_golden_request_payload_reencodes_byte_exact(entry: dict[str, Any]) -> None:
    """Our encoder, from the manifest's fields (random ones as captured), rebuilds the frame."""
    fields = entry["request"]["header"]
    body = request_payload(entry["command"], entry["request"]["body"]).encode()
    ours = build_request_frame(
        entry["command"],
        body,
        client=int(fields["client_hex"], 16),
        session=fields["session"],
        request=fields["request"],
    )
    assert bytes(ours) == request_bytes(entry)


@SENDS
def test_golden_send_body_builds_in_one_buffer_byte_exact(entry: dict[str, Any]) -> None:
    body = entry["request"]["body"]
    ours = build_send_messages(
        identifier(body["stream"]),
        identifier(body["topic"]),
        partitioning(body["partitioning"]),
        outgoing(entry),
        headroom=HEADER_SIZE,
    )
    assert bytes(ours[HEADER_SIZE:]) == request_bytes(entry)[HEADER_SIZE:]


@SENDS
def test_golden_send_passes_server_admission(entry: dict[str, Any]) -> None:
    _, _, payload = read_request(decode_frame(request_bytes(entry)))
    assert isinstance(payload, SendMessages)
    verified = verify_send_messages(payload)
    assert verified.header.message_count == entry["request"]["body"]["messages_count"]


# Reply frames the SDK accepted.


@ALL
def test_golden_reply_frame_reencodes_byte_exact(entry: dict[str, Any]) -> None:
    """Our reply and eviction builders reproduce the recorder's hand-built frames."""
    request = RequestHeader.unpack_from(request_bytes(entry))
    expected = reply_bytes(entry)
    reply = entry["reply"]
    if reply["framing"] == "eviction":
        ours = build_eviction_frame(
            request.client,
            EvictionReason(reply["eviction_reason"]),
            server_protocol_version=reply["server_protocol_version"],
            server_protocol_version_min=reply["server_protocol_version_min"],
        )
        assert ours == expected
        evicted = EvictionHeader.unpack_from(expected)
        assert evicted.reason == reply["eviction_reason"]
        assert evicted.client == request.client
        assert evicted.server_protocol_version == reply["server_protocol_version"]
        assert evicted.server_protocol_version_min == reply["server_protocol_version_min"]
        return
    if reply["framing"] == "probe_junk_echo":
        # Deliberately not what we send: it shows which echoed fields the SDK ignores.
        parsed_probe = ReplyHeader.unpack_from(expected)
        assert parsed_probe.operation == request.operation
        assert parsed_probe.status == 0
        return
    ours_frame = build_reply_frame(
        request,
        expected[HEADER_SIZE:],
        status=reply.get("status", 0),
        op=reply["op"],
        commit=reply["commit"],
    )
    assert bytes(ours_frame) == expected
    parsed = ReplyHeader.unpack_from(expected)
    assert parsed.client == request.client
    assert parsed.request == request.request
    assert parsed.operation == request.operation
    assert parsed.status == reply.get("status", 0)


def typed_reply_entries() -> list[dict[str, Any]]:
    return [
        e
        for e in frames()
        if e["reply"]["framing"] in ("plain", "result_ok")
        and not e["reply"]["built_by"].startswith("hand")
    ]


TYPED_REPLIES = pytest.mark.parametrize("entry", typed_reply_entries(), ids=frame_id)


@TYPED_REPLIES
def test_golden_reply_payload_reencodes_byte_exact(entry: dict[str, Any]) -> None:
    """Our typed encoder, from the manifest's fields, rebuilds the reply the SDK accepted."""
    request = RequestHeader.unpack_from(request_bytes(entry))
    payload = reply_payload(entry["reply"]["kind"], entry["reply"]["fields"])
    assert payload is not None
    body = encode_reply_body(request.operation, payload)
    ours = build_reply_frame(
        request, body, op=entry["reply"]["op"], commit=entry["reply"]["commit"]
    )
    assert bytes(ours) == reply_bytes(entry)


@TYPED_REPLIES
def test_golden_reply_payload_decodes_to_the_manifest_fields(entry: dict[str, Any]) -> None:
    code = CommandCode(entry["command"])
    got = read_reply(code, decode_frame(reply_bytes(entry)))
    wanted = reply_payload(entry["reply"]["kind"], entry["reply"]["fields"])
    empty_means_nothing = entry["reply"]["kind"] == "empty" and code in (
        CommandCode.GET_STREAM,
        CommandCode.GET_TOPIC,
        CommandCode.GET_CONSUMER_GROUP,
        CommandCode.SYNC_CONSUMER_GROUP,
        CommandCode.SEND_MESSAGES,
        CommandCode.GET_USER,
    )
    if empty_means_nothing:
        # "not found", "not a member", "no confirmations": the official SDK's reading.
        assert got is None
    else:
        assert got == wanted


def error_reply_entries() -> list[dict[str, Any]]:
    return [e for e in frames() if e["reply"]["framing"] in ("status", "result_rejection")]


@pytest.mark.parametrize("entry", error_reply_entries(), ids=frame_id)
def test_golden_error_reply_reads_as_server_rejected(entry: dict[str, Any]) -> None:
    reply = entry["reply"]
    with pytest.raises(ServerRejected) as raised:
        read_reply(CommandCode(entry["command"]), decode_frame(reply_bytes(entry)))
    assert raised.value.code == reply.get("status", reply.get("result"))


def eviction_entries() -> list[dict[str, Any]]:
    return [e for e in frames() if e["reply"]["framing"] == "eviction"]


@pytest.mark.parametrize("entry", eviction_entries(), ids=frame_id)
def test_golden_eviction_reads_as_session_evicted(entry: dict[str, Any]) -> None:
    reply = entry["reply"]
    with pytest.raises(SessionEvicted) as raised:
        read_reply(CommandCode(entry["command"]), decode_frame(reply_bytes(entry)))
    assert raised.value.reason == reply["eviction_reason"]
    assert raised.value.server_protocol_version == reply["server_protocol_version"]
    assert raised.value.server_protocol_version_min == reply["server_protocol_version_min"]


def malformed_probe_entries() -> list[dict[str, Any]]:
    return [e for e in frames() if e["reply"]["built_by"] == "hand (probe)" and e["sdk_error"]]


@pytest.mark.parametrize("entry", malformed_probe_entries(), ids=frame_id)
def test_golden_reply_the_sdk_refused_is_refused_by_our_decoder(entry: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        read_reply(CommandCode(entry["command"]), decode_frame(reply_bytes(entry)))


# Message batches.


def captured_batch(entry: dict[str, Any]) -> bytes:
    body = request_bytes(entry)[HEADER_SIZE:]
    metadata_length = struct.unpack_from("<I", body, 0)[0]
    return body[4 + metadata_length :]


def outgoing(entry: dict[str, Any]) -> list[Any]:
    return outgoing_messages(entry["request"]["body"]["batch"])


@SENDS
def test_golden_send_batch_rebuilds_byte_exact(entry: dict[str, Any]) -> None:
    """Ids and origin timestamps come from the capture; both checksum levels are ours."""
    assert bytes(build_batch(outgoing(entry))) == captured_batch(entry)


@SENDS
def test_golden_send_batch_verifies(entry: dict[str, Any]) -> None:
    batch = entry["request"]["body"]["batch"]
    verified = verify_batch(captured_batch(entry))
    assert verified.header.message_count == batch["message_count"]
    assert verified.header.batch_checksum == batch["batch_checksum"]
    assert verified.header.origin_timestamp == batch["origin_timestamp"]


@SENDS
def test_golden_user_headers_decode_to_the_captured_fields(entry: dict[str, Any]) -> None:
    for wanted, message in zip(
        entry["request"]["body"]["batch"]["messages"], outgoing(entry), strict=True
    ):
        decoded = decode_user_headers(message.user_headers)
        assert [
            (int(h.key_kind), h.key.hex(), int(h.value_kind), h.value.hex()) for h in decoded
        ] == [
            (h["key_kind"], h["key_hex"], h["value_kind"], h["value_hex"])
            for h in wanted["user_headers"]
        ]


@SENDS
def test_golden_user_header_kinds_are_inferred_as_the_sdk_does(entry: dict[str, Any]) -> None:
    """From each captured value, `UserHeader.of` picks the kind the official SDK picked."""
    for message in entry["request"]["body"]["batch"]["messages"]:
        for header in message["user_headers"]:
            kind = HeaderKind(header["value_kind"])
            raw = bytes.fromhex(header["value_hex"])
            key = bytes.fromhex(header["key_hex"]).decode("utf-8")
            value = decode_header_value(kind, raw)
            assert UserHeader.of(key, value) == UserHeader(
                HeaderKind.STRING, key.encode("utf-8"), kind, raw
            )


@POLLS
def test_golden_poll_reply_batches_read_as_sent(entry: dict[str, Any]) -> None:
    body = reply_bytes(entry)[HEADER_SIZE:]
    fields = entry["reply"]["fields"]
    partition_id, current_offset, count = struct.unpack_from("<IQI", body, 0)
    assert (partition_id, current_offset) == (fields["partition_id"], fields["current_offset"])
    position = 16
    seen = 0
    for batch in fields["batches"]:
        record_length = struct.unpack_from("<Q", body, position + 32)[0]
        header, messages = read_batch(body[position : position + record_length])
        assert header.base_offset == batch["base_offset"]
        assert header.base_timestamp == batch["base_timestamp"]
        for index, (got, wanted) in enumerate(zip(messages, batch["messages"], strict=True)):
            assert got.offset == batch["base_offset"] + batch["first_offset_delta"] + index
            assert got.id == wanted["id"]
            assert bytes(got.payload) == bytes.fromhex(wanted["payload"]["hex"])
            assert bytes(got.user_headers) == bytes.fromhex(wanted["user_headers"]["hex"])
            assert got.timestamp == batch["base_timestamp"]
            assert got.origin_timestamp == batch["origin_timestamp"] + wanted["timestamp_delta"]
        seen += len(messages)
        position += record_length
    assert position == len(body)
    assert seen == count
