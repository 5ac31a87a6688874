"""An independent, deliberately plain reader of captured request frames.

The recorder uses it to write the decoded fields of every captured frame into
`manifest.json`, so the golden test can compare our codec's decoder against a second
reading of the same bytes that shares no code with `sdk.wire`. It only reads: the encoder
under test is never checked against itself.

Layouts follow `docs/protocol.md` (sections 1, 3, 5 and 6). Every reader consumes its
input exactly; trailing or missing bytes raise `LayoutError`.
"""

from __future__ import annotations

import struct
from typing import Any

HEADER_SIZE = 256
BATCH_HEADER_SIZE = 256
FRAME_HEADER_SIZE = 48

COMMAND_REQUEST = 5
COMMAND_REPLY = 8
COMMAND_EVICTION = 13

OPERATION_REGISTER = 1
OPERATION_NON_REPLICATED = 2
OPERATION_LOGOUT = 3

# Replicated commands travel as their operation; this maps each back to its code.
CODE_BY_OPERATION: dict[int, int] = {
    1: 40,
    3: 39,
    128: 202,
    129: 204,
    130: 203,
    131: 205,
    132: 302,
    133: 304,
    134: 303,
    135: 305,
    136: 402,
    137: 403,
    139: 602,
    140: 603,
    141: 33,
    142: 35,
    143: 34,
    144: 37,
    145: 36,
    148: 604,
    149: 605,
    160: 101,
    161: 121,
    162: 122,
}
OPERATION_BY_CODE: dict[int, int] = {code: op for op, code in CODE_BY_OPERATION.items()}

COMMAND_NAMES: dict[int, str] = {
    1: "PING",
    10: "GET_STATS",
    12: "GET_CLUSTER_METADATA",
    14: "ATTACH_CONSUMER_SESSION",
    20: "GET_ME",
    31: "GET_USER",
    32: "GET_USERS",
    33: "CREATE_USER",
    34: "DELETE_USER",
    35: "UPDATE_USER",
    36: "UPDATE_PERMISSIONS",
    37: "CHANGE_PASSWORD",
    39: "LOGOUT_USER",
    40: "LOGIN_REGISTER",
    100: "POLL_MESSAGES",
    101: "SEND_MESSAGES",
    103: "POLL_ROUTING",
    104: "POLL_PRIMARY",
    120: "GET_CONSUMER_OFFSET",
    121: "STORE_CONSUMER_OFFSET",
    122: "DELETE_CONSUMER_OFFSET",
    123: "CONSUMER_OFFSET_ROUTING",
    200: "GET_STREAM",
    201: "GET_STREAMS",
    202: "CREATE_STREAM",
    203: "DELETE_STREAM",
    204: "UPDATE_STREAM",
    205: "PURGE_STREAM",
    300: "GET_TOPIC",
    301: "GET_TOPICS",
    302: "CREATE_TOPIC",
    303: "DELETE_TOPIC",
    304: "UPDATE_TOPIC",
    305: "PURGE_TOPIC",
    402: "CREATE_PARTITIONS",
    403: "DELETE_PARTITIONS",
    600: "GET_CONSUMER_GROUP",
    601: "GET_CONSUMER_GROUPS",
    602: "CREATE_CONSUMER_GROUP",
    603: "DELETE_CONSUMER_GROUP",
    604: "JOIN_CONSUMER_GROUP",
    605: "LEAVE_CONSUMER_GROUP",
    606: "SYNC_CONSUMER_GROUP",
}

# Operations whose replies start with the result section (docs/protocol.md section 4).
RESULT_FRAMED_OPERATIONS = frozenset(range(128, 150)) | {161, 162}


class LayoutError(ValueError):
    """The bytes do not match the documented layout."""


class Reader:
    """Reads little-endian fields from a buffer, refusing to run past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, size: int) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise LayoutError(f"need {size} bytes at {self.position}, have {len(self.data)}")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        value: int = struct.unpack("<H", self.take(2))[0]
        return value

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self.take(8))[0]
        return value

    def u128(self) -> int:
        return int.from_bytes(self.take(16), "little")

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.position)

    def done(self) -> bool:
        return self.position == len(self.data)

    def finish(self) -> None:
        if not self.done():
            raise LayoutError(f"{len(self.data) - self.position} trailing bytes")

    # Shared encodings (docs/protocol.md section 3).

    def name(self) -> str:
        size = self.u8()
        if size == 0:
            raise LayoutError("empty name")
        return self.take(size).decode("utf-8")

    def identifier(self) -> int | str:
        kind = self.u8()
        size = self.u8()
        if kind == 1:
            if size != 4:
                raise LayoutError(f"numeric identifier of length {size}")
            return self.u32()
        if kind == 2:
            if size == 0:
                raise LayoutError("empty string identifier")
            return self.take(size).decode("utf-8")
        raise LayoutError(f"identifier kind {kind}")

    def consumer(self) -> dict[str, Any]:
        kind = self.u8()
        kinds = {1: "consumer", 2: "consumer_group"}
        if kind not in kinds:
            raise LayoutError(f"consumer kind {kind}")
        return {"kind": kinds[kind], "id": self.identifier()}

    def optional_partition(self) -> int | None:
        flag = self.u8()
        partition_id = self.u32()
        if flag == 0:
            if partition_id != 0:
                raise LayoutError("absent partition with a non-zero id")
            return None
        if flag != 1:
            raise LayoutError(f"partition flag {flag}")
        return partition_id

    def partitioning(self) -> dict[str, Any]:
        kind = self.u8()
        size = self.u8()
        if kind == 1 and size == 0:
            return {"kind": "balanced"}
        if kind == 2 and size == 4:
            return {"kind": "partition_id", "value": self.u32()}
        if kind == 3 and size > 0:
            return {"kind": "messages_key", "value_hex": self.take(size).hex()}
        raise LayoutError(f"partitioning kind {kind} length {size}")

    def strategy(self) -> dict[str, Any]:
        kind = self.u8()
        kinds = {1: "offset", 2: "timestamp", 3: "first", 4: "last", 5: "next"}
        if kind not in kinds:
            raise LayoutError(f"polling strategy kind {kind}")
        return {"kind": kinds[kind], "value": self.u64()}

    def flags(self, count: int) -> list[bool]:
        out = []
        for _ in range(count):
            value = self.u8()
            if value > 1:
                raise LayoutError(f"flag byte {value}")
            out.append(value == 1)
        return out

    def permissions(self) -> dict[str, Any]:
        """Ten global flags, then the `[has_next u8]`-linked streams and their topics."""
        result: dict[str, Any] = {"global": self.flags(10), "streams": []}
        more = self.flags(1)[0]
        while more:
            stream: dict[str, Any] = {"id": self.u32(), "flags": self.flags(6), "topics": []}
            more_topics = self.flags(1)[0]
            while more_topics:
                stream["topics"].append({"id": self.u32(), "flags": self.flags(4)})
                more_topics = self.flags(1)[0]
            result["streams"].append(stream)
            more = self.flags(1)[0]
        return result

    def optional_permissions(self) -> dict[str, Any] | None:
        """`[0 u8]` or `[1 u8][len u32][permissions]`."""
        if not self.flags(1)[0]:
            return None
        inner = Reader(self.take(self.u32()))
        found = inner.permissions()
        inner.finish()
        return found

    def key_values(self, data: bytes) -> list[dict[str, Any]]:
        """A flat `[kind u8][len u32][data]` list of alternating keys and values."""
        inner = Reader(data)
        entries: list[dict[str, Any]] = []
        while not inner.done():
            key_kind = inner.u8()
            key = inner.take(inner.u32())
            value_kind = inner.u8()
            value = inner.take(inner.u32())
            entries.append(
                {
                    "key_kind": key_kind,
                    "key_hex": key.hex(),
                    "value_kind": value_kind,
                    "value_hex": value.hex(),
                }
            )
        return entries


def describe_request_header(frame: bytes) -> dict[str, Any]:
    """Every field of a 256-byte request header, and the command code it carries."""
    if len(frame) < HEADER_SIZE:
        raise LayoutError("short header")
    header = Reader(frame[:HEADER_SIZE])
    fields: dict[str, Any] = {
        "checksum": header.u128(),
        "checksum_body": header.u128(),
        "cluster": header.u128(),
        "size": header.u32(),
        "view": header.u32(),
        "release": header.u32(),
        "command": header.u8(),
        "replica": header.u8(),
    }
    reserved_frame = header.take(66)
    fields["client_hex"] = f"{header.u128():032x}"
    fields["request_checksum"] = header.u128()
    fields["timestamp"] = header.u64()
    fields["request"] = header.u64()
    fields["operation"] = header.u8()
    padding = header.take(7)
    fields["session"] = header.u64()
    fields["user_id"] = header.u32()
    reserved = header.take(60)
    code_bytes, reserved_tail = reserved[:4], reserved[4:]
    operation = fields["operation"]
    if operation == OPERATION_NON_REPLICATED:
        fields["code"] = struct.unpack("<I", code_bytes)[0]
    else:
        if any(code_bytes):
            raise LayoutError("command code bytes set on a replicated operation")
        fields["code"] = CODE_BY_OPERATION.get(operation)
    if any(reserved_frame) or any(padding) or any(reserved_tail):
        raise LayoutError("non-zero reserved bytes in a request header")
    if fields["size"] != len(frame):
        raise LayoutError(f"size field {fields['size']} but frame is {len(frame)} bytes")
    return fields


def describe_batch(reader: Reader, expected_count: int) -> dict[str, Any]:
    header = Reader(reader.take(BATCH_HEADER_SIZE))
    batch: dict[str, Any] = {
        "partition_id": header.u64(),
        "base_offset": header.u64(),
        "base_timestamp": header.u64(),
        "origin_timestamp": header.u64(),
        "batch_length": header.u64(),
        "batch_checksum": header.u64(),
        "message_count": header.u32(),
    }
    if any(header.take(204)):
        raise LayoutError("non-zero reserved bytes in a batch header")
    if batch["message_count"] != expected_count:
        raise LayoutError("batch message_count disagrees with the request's messages_count")
    blob = Reader(reader.take(batch["batch_length"] - BATCH_HEADER_SIZE))
    messages: list[dict[str, Any]] = []
    for _ in range(batch["message_count"]):
        frame = Reader(blob.take(FRAME_HEADER_SIZE))
        message: dict[str, Any] = {
            "checksum": frame.u64(),
            "id": frame.u128(),
            "offset_delta": frame.u32(),
            "timestamp_delta": frame.u32(),
        }
        user_headers_length = frame.u32()
        payload_length = frame.u32()
        if frame.u64() != 0:
            raise LayoutError("non-zero reserved bytes in a frame header")
        message["payload_hex"] = blob.take(payload_length).hex()
        user_headers = blob.take(user_headers_length)
        message["user_headers"] = blob.key_values(user_headers)
        messages.append(message)
    blob.finish()
    batch["messages"] = messages
    return batch


def describe_request_body(code: int, body: bytes) -> dict[str, Any]:
    """The typed fields of a request body, per command code."""
    r = Reader(body)
    fields: dict[str, Any] = {}
    if code in (1, 10, 12, 20, 39, 201):
        pass
    elif code == 40:
        fields["protocol_version"] = r.u32()
        fields["sdk_name"] = r.name()
        fields["sdk_version"] = r.name()
        fields["username"] = r.name()
        fields["password"] = r.name()
        fields["context_hex"] = r.take(r.u32()).hex()
    elif code == 100:
        fields["consumer"] = r.consumer()
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["partition_id"] = r.optional_partition()
        fields["strategy"] = r.strategy()
        fields["count"] = r.u32()
        fields["auto_commit"] = r.u8()
    elif code == 101:
        fields["metadata_length"] = r.u32()
        start = r.position
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["partitioning"] = r.partitioning()
        fields["messages_count"] = r.u32()
        if r.position - start != fields["metadata_length"]:
            raise LayoutError("metadata_length does not cover stream..messages_count")
        fields["batch"] = describe_batch(r, fields["messages_count"])
    elif code == 14:
        fields["client_hex"] = f"{r.u128():032x}"
        fields["session"] = r.u64()
        fields["metadata_op"] = r.u64()
    elif code in (31, 34):
        fields["user"] = r.identifier()
    elif code == 32:
        pass
    elif code == 33:
        fields["username"] = r.name()
        fields["password"] = r.take(r.u8()).decode("utf-8")
        fields["status"] = r.u8()
        fields["permissions"] = r.optional_permissions()
        fields["options"] = r.key_values(r.rest())
    elif code == 35:
        fields["user"] = r.identifier()
        fields["username"] = r.name() if r.flags(1)[0] else None
        fields["status"] = r.u8() if r.flags(1)[0] else None
        fields["options"] = r.key_values(r.rest())
    elif code == 36:
        fields["user"] = r.identifier()
        fields["permissions"] = r.optional_permissions()
    elif code == 37:
        fields["user"] = r.identifier()
        fields["current_password"] = r.take(r.u8()).decode("utf-8")
        fields["new_password"] = r.take(r.u8()).decode("utf-8")
    elif code in (103, 104):
        fields["consumer"] = r.consumer()
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["partition_id"] = r.optional_partition()
        fields["strategy"] = r.strategy()
        fields["count"] = r.u32()
        fields["auto_commit"] = r.u8()
    elif code in (120, 121, 122, 123):
        fields["consumer"] = r.consumer()
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["partition_id"] = r.optional_partition()
        if code == 121:
            fields["offset"] = r.u64()
        if code in (121, 122):
            fields["ack"] = r.u8()
    elif code in (200, 203, 205, 301):
        fields["stream"] = r.identifier()
    elif code == 202:
        fields["name"] = r.name()
        fields["options"] = r.key_values(r.rest())
    elif code == 204:
        fields["stream"] = r.identifier()
        fields["name"] = r.name()
        fields["options"] = r.key_values(r.rest())
    elif code in (300, 303, 305, 601):
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
    elif code == 302:
        fields["stream"] = r.identifier()
        fields["partitions_count"] = r.u32()
        fields["name"] = r.name()
        fields["options"] = r.key_values(r.rest())
    elif code == 304:
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["name"] = r.name()
        fields["options"] = r.key_values(r.rest())
    elif code in (402, 403):
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["partitions_count"] = r.u32()
    elif code in (600, 603, 604, 605, 606):
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["group"] = r.identifier()
    elif code == 602:
        fields["stream"] = r.identifier()
        fields["topic"] = r.identifier()
        fields["name"] = r.name()
    else:
        raise LayoutError(f"no request layout for command code {code}")
    r.finish()
    return fields
