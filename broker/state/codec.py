"""The bodies of metadata prepares: typed commands as canonical CBOR, and their operations.

A metadata prepare never carries the client's wire body. The primary decodes the request,
settles what must be chosen once (a password becomes an scrypt hash with a fresh salt; a
login becomes the user it authenticated), and proposes the resulting command in this
encoding. Every replica decodes the same bytes back into the same command, so the state
machine never sees a clear password or a raw access token and never has to choose
anything.

Invariants:

1. ``decode_command(*encode_command(c)) == c`` for every command, and equal commands
   encode to equal bytes (canonical CBOR, fields in declaration order).
2. Each command type travels under exactly one operation number: Iggy's operation for
   client commands (``Register`` = 1, ``Logout`` = 3, 128..149), and a server-internal
   number in 64..127 for the system commands, which no client may send.
3. Decoding is strict: an unknown operation, a wrong field count or a wrong field type
   raises :class:`BodyError`. A committed body comes from our own primary through
   checksummed storage, so a decode failure on apply is a bug, never client input.
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum, IntEnum
from typing import Any, Final

import cbor2

from broker.state.credentials import TOKEN_HASH_SIZE_BYTES, PasswordHash
from broker.state.metadata import (
    TOPIC_OPTION_FIELDS,
    ChangePassword,
    Compression,
    CreateConsumerGroup,
    CreatePartitions,
    CreatePersonalAccessToken,
    CreateRootUser,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerGroup,
    DeletePartitions,
    DeletePersonalAccessToken,
    DeleteStream,
    DeleteTopic,
    DeleteUser,
    Durability,
    EndSession,
    ExpireRevocations,
    ExpireTokens,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    MetadataCommand,
    PurgeStream,
    PurgeTopic,
    Register,
    RevocationDrained,
    TopicOptionsPatch,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserStatus,
)
from broker.state.permissions import Permissions, permissions_from_plain, permissions_to_plain
from sdk.wire.codes import Operation


class InternalOperation(IntEnum):
    """Server-internal metadata operations (Iggy reserves 64..127 for these; 64..68 are
    Iggy's own, so ours start well above them)."""

    CREATE_ROOT_USER = 96
    END_SESSION = 97
    EXPIRE_TOKENS = 98
    REVOCATION_DRAINED = 99
    EXPIRE_REVOCATIONS = 100


OPERATION_BY_COMMAND: Final[dict[type, int]] = {
    Register: Operation.REGISTER,
    Logout: Operation.LOGOUT,
    CreateStream: Operation.CREATE_STREAM,
    UpdateStream: Operation.UPDATE_STREAM,
    DeleteStream: Operation.DELETE_STREAM,
    PurgeStream: Operation.PURGE_STREAM,
    CreateTopic: Operation.CREATE_TOPIC,
    UpdateTopic: Operation.UPDATE_TOPIC,
    DeleteTopic: Operation.DELETE_TOPIC,
    PurgeTopic: Operation.PURGE_TOPIC,
    CreatePartitions: Operation.CREATE_PARTITIONS,
    DeletePartitions: Operation.DELETE_PARTITIONS,
    CreateConsumerGroup: Operation.CREATE_CONSUMER_GROUP,
    DeleteConsumerGroup: Operation.DELETE_CONSUMER_GROUP,
    JoinConsumerGroup: Operation.JOIN_CONSUMER_GROUP,
    LeaveConsumerGroup: Operation.LEAVE_CONSUMER_GROUP,
    CreateUser: Operation.CREATE_USER,
    UpdateUser: Operation.UPDATE_USER,
    DeleteUser: Operation.DELETE_USER,
    ChangePassword: Operation.CHANGE_PASSWORD,
    UpdatePermissions: Operation.UPDATE_PERMISSIONS,
    CreatePersonalAccessToken: Operation.CREATE_PERSONAL_ACCESS_TOKEN,
    DeletePersonalAccessToken: Operation.DELETE_PERSONAL_ACCESS_TOKEN,
    CreateRootUser: InternalOperation.CREATE_ROOT_USER,
    EndSession: InternalOperation.END_SESSION,
    ExpireTokens: InternalOperation.EXPIRE_TOKENS,
    RevocationDrained: InternalOperation.REVOCATION_DRAINED,
    ExpireRevocations: InternalOperation.EXPIRE_REVOCATIONS,
}
COMMAND_BY_OPERATION: Final[dict[int, type]] = {
    int(operation): command for command, operation in OPERATION_BY_COMMAND.items()
}
assert len(COMMAND_BY_OPERATION) == len(OPERATION_BY_COMMAND), "operations are unique"

SYSTEM_OPERATIONS: Final = tuple(int(op) for op in InternalOperation)
"""Operations whose commands act as the system (no session), never sent by a client."""


class BodyError(Exception):
    """A metadata prepare body that is not an encoding of a command."""


def encode_command(command: MetadataCommand) -> tuple[int, bytes]:
    """``(operation, body)`` of a metadata prepare carrying ``command``."""
    operation = OPERATION_BY_COMMAND[type(command)]
    plain = [_to_plain(getattr(command, f.name)) for f in fields(command)]
    return int(operation), cbor2.dumps(plain, canonical=True)


def decode_command(operation: int, body: bytes | bytearray | memoryview) -> MetadataCommand:
    """The command a metadata prepare carries.

    Raises:
        BodyError: the operation is not a metadata operation or the body does not decode.
    """
    command_type = COMMAND_BY_OPERATION.get(operation)
    if command_type is None:
        raise BodyError(f"operation {operation} carries no metadata command")
    try:
        plain = cbor2.loads(bytes(body))
        declared = fields(command_type)
        if not isinstance(plain, list) or len(plain) != len(declared):
            raise BodyError(f"{command_type.__name__} body has the wrong shape")
        values = {
            f.name: None if item is None and _optional(f.type) else _from_plain(f.name, item)
            for f, item in zip(declared, plain, strict=True)
        }
        command: MetadataCommand = command_type(**values)
    except (cbor2.CBORDecodeError, TypeError, ValueError, KeyError) as error:
        raise BodyError(f"{command_type.__name__} body: {error}") from error
    return command


def _to_plain(value: Any) -> Any:
    if isinstance(value, TopicOptionsPatch):
        return {name: _to_plain(getattr(value, name)) for name in value.given()}
    if isinstance(value, PasswordHash):
        return value.to_plain()
    if isinstance(value, Permissions):
        return permissions_to_plain(value)
    if isinstance(value, Enum):
        return value.value
    assert value is None or isinstance(value, int | str | bool | bytes), f"unencodable {value!r}"
    return value


def _optional(annotation: Any) -> bool:
    # Annotations are strings here (postponed evaluation); "X | None" marks an optional.
    return isinstance(annotation, str) and annotation.endswith("| None")


# How each field name decodes. Field names are shared across commands with one meaning
# each, which keeps this table small and the encoding uniform.
def _from_plain(name: str, item: Any) -> Any:
    match name:
        case "stream" | "topic" | "group" | "user":
            return _ident(item)
        case "name" | "username":
            return _text(item)
        case (
            "partitions_count"
            | "count"
            | "client_id"
            | "user_id"
            | "session"
            | "expiry_us"
            | "partition_id"
            | "node"
            | "nodes"
            | "timeout_us"
        ):
            return _natural(item)
        case "token_hash":
            return _token_hash(item)
        case "password":
            return PasswordHash.from_plain(item)
        case "status":
            return UserStatus(item)
        case "permissions":
            return permissions_from_plain(item)
        case "options":
            return _options(item)
    raise BodyError(f"unknown field {name}")


def _options(item: Any) -> TopicOptionsPatch:
    if not isinstance(item, dict) or not all(key in TOPIC_OPTION_FIELDS for key in item):
        raise BodyError("topic options")
    values: dict[str, Any] = {}
    for key, raw in item.items():
        if key in ("durability", "consumer_offset_durability"):
            values[key] = Durability(raw)
        elif key == "compression":
            values[key] = Compression(raw)
        elif key == "preallocate_segments":
            if not isinstance(raw, bool):
                raise BodyError("preallocate_segments")
            values[key] = raw
        else:
            values[key] = _natural(raw)
    return TopicOptionsPatch(**values)


def _token_hash(item: Any) -> bytes:
    if isinstance(item, bytes) and len(item) == TOKEN_HASH_SIZE_BYTES:
        return item
    raise BodyError(f"expected a {TOKEN_HASH_SIZE_BYTES}-byte token hash")


def _ident(item: Any) -> int | str:
    if isinstance(item, str):
        return item
    return _natural(item)


def _text(item: Any) -> str:
    if isinstance(item, str):
        return item
    raise BodyError(f"expected text, got {item!r}")


def _natural(item: Any) -> int:
    if not isinstance(item, int) or isinstance(item, bool) or item < 0:
        raise BodyError(f"expected a non-negative integer, got {item!r}")
    return item
