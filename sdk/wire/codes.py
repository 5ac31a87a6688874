"""Numbers of the Iggy 0.9 protocol: header commands, operations, command codes, errors.

Purpose: one place for every discriminant that travels on the wire, with the mapping
between a client command code (``PING = 1`` ... ``SYNC_CONSUMER_GROUP = 606``) and the
``operation`` byte that carries it in the request header.

Invariants:

1. ``Command`` is the byte at header offset 60 and selects the header shape. A client
   connection only ever carries ``REQUEST``, ``REPLY`` and ``EVICTION``; the others are
   the replica protocol's and are listed so the frame decoder can name them.
2. A replicated command travels as its own ``Operation``; every other command travels
   as ``Operation.NON_REPLICATED`` with its ``CommandCode`` in header bytes 196..200.
   ``LOGIN_REGISTER`` (40) and ``LOGIN_REGISTER_WITH_PAT`` (45) travel as
   ``Operation.REGISTER``, ``LOGOUT_USER`` (39) as ``Operation.LOGOUT``.
3. The operation <-> code mapping is a bijection on the replicated commands:
   ``code_for_operation(operation_for_code(c)) == c`` for each of them.
4. A protocol version packs ``major << 20 | minor << 10 | patch`` with 10 bits each.

The values are those of apache/iggy ``core/binary_protocol/src/codes.rs``,
``consensus/operation.rs``, ``consensus/command.rs``, ``consensus/header.rs``
(``EvictionReason``) and ``core/common/src/error/iggy_error.rs``.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "Command",
    "CommandCode",
    "EvictionReason",
    "IggyErrorCode",
    "Operation",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSION_MIN",
    "LONG_POLL_CODE",
    "LONG_POLL_WAIT_MS_MAX",
    "RUNTIME_STATS_CODE",
    "code_for_operation",
    "format_protocol_version",
    "is_protocol_compatible",
    "operation_for_code",
    "pack_protocol_version",
    "unpack_protocol_version",
]


class Command(enum.IntEnum):
    """The header shape, the byte at offset 60 of every frame."""

    RESERVED = 0
    PING = 1
    PONG = 2
    PING_CLIENT = 3
    PONG_CLIENT = 4
    REQUEST = 5
    PREPARE = 6
    PREPARE_OK = 7
    REPLY = 8
    COMMIT = 9
    START_VIEW_CHANGE = 10
    DO_VIEW_CHANGE = 11
    START_VIEW = 12
    EVICTION = 13
    REPLICA_HELLO = 14
    REPLICA_CHALLENGE = 15
    REPLICA_FINISH = 16
    REQUEST_START_VIEW = 17
    REQUEST_PREPARES = 18
    REPAIR_PREPARE = 19
    REPAIR_DONE = 20
    RANGE_EVICTED = 21
    REQUEST_STATE_TRANSFER = 22
    STATE_TRANSFER_TARGET = 23
    REQUEST_STATE_CHUNK = 24
    STATE_CHUNK = 25
    FORWARD_REGISTER = 26
    FORWARD_REGISTER_RESULT = 27
    FORWARD_LOGOUT = 28
    FORWARD_LOGOUT_RESULT = 29


class Operation(enum.IntEnum):
    """The ``operation`` byte of request and reply headers."""

    RESERVED = 0
    REGISTER = 1
    NON_REPLICATED = 2
    LOGOUT = 3
    # 64..127: server-internal metadata operations, refused from clients.
    CREATE_TOPIC_WITH_ASSIGNMENTS = 64
    CREATE_PARTITIONS_WITH_ASSIGNMENTS = 65
    REMOVE_CONSUMER_GROUP_MEMBER = 66
    COMPLETE_CONSUMER_GROUP_REVOCATION = 67
    TRUNCATE_PARTITION = 68
    # 128..149: the metadata plane.
    CREATE_STREAM = 128
    UPDATE_STREAM = 129
    DELETE_STREAM = 130
    PURGE_STREAM = 131
    CREATE_TOPIC = 132
    UPDATE_TOPIC = 133
    DELETE_TOPIC = 134
    PURGE_TOPIC = 135
    CREATE_PARTITIONS = 136
    DELETE_PARTITIONS = 137
    DELETE_SEGMENTS = 138
    CREATE_CONSUMER_GROUP = 139
    DELETE_CONSUMER_GROUP = 140
    CREATE_USER = 141
    UPDATE_USER = 142
    DELETE_USER = 143
    CHANGE_PASSWORD = 144
    UPDATE_PERMISSIONS = 145
    CREATE_PERSONAL_ACCESS_TOKEN = 146
    DELETE_PERSONAL_ACCESS_TOKEN = 147
    JOIN_CONSUMER_GROUP = 148
    LEAVE_CONSUMER_GROUP = 149
    # 160..: the partition plane, routed by the partition named in the body.
    SEND_MESSAGES = 160
    STORE_CONSUMER_OFFSET = 161
    DELETE_CONSUMER_OFFSET = 162

    @property
    def is_internal(self) -> bool:
        """Server-internal operations (64..127) that a client must never send."""
        return 64 <= self < 128

    @property
    def is_metadata(self) -> bool:
        """Metadata-plane mutations (internal ones included), excluding DeleteSegments.

        DeleteSegments is resolved by the server into an internal TruncatePartition,
        so it is neither a metadata nor a partition operation itself.
        """
        return self.is_internal or (128 <= self < 150 and self is not Operation.DELETE_SEGMENTS)

    @property
    def is_partition(self) -> bool:
        """Partition-plane operations, routed to the group of the partition in the body."""
        return self >= 160

    @property
    def is_metadata_plane(self) -> bool:
        """Operations replicated by the metadata group (mutations plus sessions)."""
        return self.is_metadata or self in (Operation.REGISTER, Operation.LOGOUT)

    @property
    def is_client_allowed(self) -> bool:
        """Whether a client may put this operation in a request header."""
        return self is not Operation.RESERVED and not self.is_internal

    @property
    def is_result_framed(self) -> bool:
        """Whether a reply body opens with the ``[count u32]{index, result}*`` section.

        Register replies are result-framed only when non-empty; that nuance belongs
        to the reply reader, which sees the body (see ``messages.split_result``).
        """
        return self.is_metadata or self in (
            Operation.STORE_CONSUMER_OFFSET,
            Operation.DELETE_CONSUMER_OFFSET,
        )


RUNTIME_STATS_CODE: Final = 9000
"""viewstream's own non-replicated command code, outside Iggy's registry: a node's
per-group consensus counters and node counters, as a JSON body. Iggy lets a server decide
about codes it does not define (the official SDK sends them with ``send_binary_request``);
``CommandCode`` stays Iggy's registry, so this code travels as ``Operation.NON_REPLICATED``."""

LONG_POLL_CODE: Final = 9001
"""viewstream's long poll, outside Iggy's registry (Iggy's own deferred poll, planned after
0.9, takes 105/106): ``[max_wait_ms u32]`` then a POLL_MESSAGES body. The node answers as
POLL_MESSAGES does, but when the poll finds no message it waits, up to ``max_wait_ms``
(at most ``LONG_POLL_WAIT_MS_MAX``), until one is applied on the answering replica.
Iggy's clients never send it; a server that does not know it answers INVALID_COMMAND (3),
which tells a client to poll the ordinary way (``docs/protocol.md``)."""

LONG_POLL_WAIT_MS_MAX: Final = 30_000
"""The longest wait a long poll gets; a longer ``max_wait_ms`` is cut to it."""


class CommandCode(enum.IntEnum):
    """Client command codes, the protocol registry of Iggy."""

    PING = 1
    GET_STATS = 10
    GET_SNAPSHOT_FILE = 11
    GET_CLUSTER_METADATA = 12
    DESCRIBE_OPTIONS = 13
    ATTACH_CONSUMER_SESSION = 14
    GET_ME = 20
    GET_CLIENT = 21
    GET_CLIENTS = 22
    GET_USER = 31
    GET_USERS = 32
    CREATE_USER = 33
    DELETE_USER = 34
    UPDATE_USER = 35
    UPDATE_PERMISSIONS = 36
    CHANGE_PASSWORD = 37
    LOGIN_USER = 38
    LOGOUT_USER = 39
    LOGIN_REGISTER = 40
    GET_PERSONAL_ACCESS_TOKENS = 41
    CREATE_PERSONAL_ACCESS_TOKEN = 42
    DELETE_PERSONAL_ACCESS_TOKEN = 43
    LOGIN_WITH_PERSONAL_ACCESS_TOKEN = 44
    LOGIN_REGISTER_WITH_PAT = 45
    POLL_MESSAGES = 100
    SEND_MESSAGES = 101
    FLUSH_UNSAVED_BUFFER = 102
    POLL_ROUTING = 103
    POLL_PRIMARY = 104
    GET_CONSUMER_OFFSET = 120
    STORE_CONSUMER_OFFSET = 121
    DELETE_CONSUMER_OFFSET = 122
    CONSUMER_OFFSET_ROUTING = 123
    GET_STREAM = 200
    GET_STREAMS = 201
    CREATE_STREAM = 202
    DELETE_STREAM = 203
    UPDATE_STREAM = 204
    PURGE_STREAM = 205
    GET_TOPIC = 300
    GET_TOPICS = 301
    CREATE_TOPIC = 302
    DELETE_TOPIC = 303
    UPDATE_TOPIC = 304
    PURGE_TOPIC = 305
    CREATE_PARTITIONS = 402
    DELETE_PARTITIONS = 403
    DELETE_SEGMENTS = 503
    GET_CONSUMER_GROUP = 600
    GET_CONSUMER_GROUPS = 601
    CREATE_CONSUMER_GROUP = 602
    DELETE_CONSUMER_GROUP = 603
    JOIN_CONSUMER_GROUP = 604
    LEAVE_CONSUMER_GROUP = 605
    SYNC_CONSUMER_GROUP = 606


_OPERATION_BY_CODE: Final[dict[CommandCode, Operation]] = {
    CommandCode.LOGIN_REGISTER: Operation.REGISTER,
    CommandCode.LOGIN_REGISTER_WITH_PAT: Operation.REGISTER,
    CommandCode.LOGOUT_USER: Operation.LOGOUT,
    CommandCode.SEND_MESSAGES: Operation.SEND_MESSAGES,
    CommandCode.STORE_CONSUMER_OFFSET: Operation.STORE_CONSUMER_OFFSET,
    CommandCode.DELETE_CONSUMER_OFFSET: Operation.DELETE_CONSUMER_OFFSET,
    CommandCode.CREATE_STREAM: Operation.CREATE_STREAM,
    CommandCode.UPDATE_STREAM: Operation.UPDATE_STREAM,
    CommandCode.DELETE_STREAM: Operation.DELETE_STREAM,
    CommandCode.PURGE_STREAM: Operation.PURGE_STREAM,
    CommandCode.CREATE_TOPIC: Operation.CREATE_TOPIC,
    CommandCode.UPDATE_TOPIC: Operation.UPDATE_TOPIC,
    CommandCode.DELETE_TOPIC: Operation.DELETE_TOPIC,
    CommandCode.PURGE_TOPIC: Operation.PURGE_TOPIC,
    CommandCode.CREATE_PARTITIONS: Operation.CREATE_PARTITIONS,
    CommandCode.DELETE_PARTITIONS: Operation.DELETE_PARTITIONS,
    CommandCode.DELETE_SEGMENTS: Operation.DELETE_SEGMENTS,
    CommandCode.CREATE_CONSUMER_GROUP: Operation.CREATE_CONSUMER_GROUP,
    CommandCode.DELETE_CONSUMER_GROUP: Operation.DELETE_CONSUMER_GROUP,
    CommandCode.JOIN_CONSUMER_GROUP: Operation.JOIN_CONSUMER_GROUP,
    CommandCode.LEAVE_CONSUMER_GROUP: Operation.LEAVE_CONSUMER_GROUP,
    CommandCode.CREATE_USER: Operation.CREATE_USER,
    CommandCode.UPDATE_USER: Operation.UPDATE_USER,
    CommandCode.DELETE_USER: Operation.DELETE_USER,
    CommandCode.CHANGE_PASSWORD: Operation.CHANGE_PASSWORD,
    CommandCode.UPDATE_PERMISSIONS: Operation.UPDATE_PERMISSIONS,
    CommandCode.CREATE_PERSONAL_ACCESS_TOKEN: Operation.CREATE_PERSONAL_ACCESS_TOKEN,
    CommandCode.DELETE_PERSONAL_ACCESS_TOKEN: Operation.DELETE_PERSONAL_ACCESS_TOKEN,
}

# Register has two codes and Logout has no result framing of its own, so the reverse
# map covers the operations whose code is unique: every replicated command.
_CODE_BY_OPERATION: Final[dict[Operation, CommandCode]] = {
    operation: code
    for code, operation in _OPERATION_BY_CODE.items()
    if operation is not Operation.REGISTER
}
assert len(_CODE_BY_OPERATION) == len(_OPERATION_BY_CODE) - 2
_OPERATION_BY_INT: Final[dict[int, Operation]] = {
    int(code): operation for code, operation in _OPERATION_BY_CODE.items()
}


def operation_for_code(code: int) -> Operation:
    """The header operation that carries command ``code``.

    Codes without a replicated operation, including codes this codec does not name,
    travel as ``NON_REPLICATED`` and the server decides (as Iggy's ``send_raw`` does).
    """
    # Keyed by plain ints, which a CommandCode member hashes and compares as: no
    # CommandCode(code) enum lookup on every request.
    return _OPERATION_BY_INT.get(code, Operation.NON_REPLICATED)


def code_for_operation(operation: Operation) -> CommandCode | None:
    """The command code a replicated operation stands for; ``None`` for the others.

    ``REGISTER`` is ambiguous on the wire (40 or 45, told apart by the body) and
    ``NON_REPLICATED`` carries its code in the header, so both map to ``None``.
    """
    return _CODE_BY_OPERATION.get(operation)


class EvictionReason(enum.IntEnum):
    """Why the server ended a session (byte 255 of an eviction header)."""

    RESERVED = 0
    NO_SESSION = 1
    CLIENT_RELEASE_TOO_LOW = 2
    CLIENT_RELEASE_TOO_HIGH = 3
    INVALID_REQUEST_OPERATION = 4
    INVALID_REQUEST_BODY = 5
    INVALID_REQUEST_BODY_SIZE = 6
    SESSION_TOO_LOW = 7
    SESSION_RELEASE_MISMATCH = 8
    INVALID_CREDENTIALS = 9
    INVALID_TOKEN = 10
    USER_INACTIVE = 11
    SESSION_ERROR = 12
    STALE_CLIENT = 13
    INCOMPATIBLE_PROTOCOL = 14
    MALFORMED_LOGIN = 15


class IggyErrorCode(enum.IntEnum):
    """The Iggy error codes this project answers with or expects to see."""

    ERROR = 1
    INVALID_CONFIGURATION = 2
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    INVALID_IDENTIFIER = 6
    STALE_CLIENT = 30
    UNAUTHENTICATED = 40
    UNAUTHORIZED = 41
    INVALID_CREDENTIALS = 42
    INVALID_USERNAME = 43
    INVALID_PASSWORD = 44
    INVALID_USER_STATUS = 45
    USER_ALREADY_EXISTS = 46
    USER_INACTIVE = 47
    CANNOT_DELETE_USER = 48
    CANNOT_CHANGE_PERMISSIONS = 49
    INVALID_PERSONAL_ACCESS_TOKEN_NAME = 50
    PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS = 51
    PERSONAL_ACCESS_TOKENS_LIMIT_REACHED = 52
    INVALID_PERSONAL_ACCESS_TOKEN = 53
    PERSONAL_ACCESS_TOKEN_EXPIRED = 54
    USERS_LIMIT_REACHED = 55
    INVALID_PERSONAL_ACCESS_TOKEN_EXPIRY = 56
    TRANSIENT_NOT_COMMITTED = 57
    TRANSIENT_NOT_ACCEPTED = 58
    REQUEST_ALREADY_APPLIED = 59
    INVALID_NUMBER_ENCODING = 82
    CLIENT_NOT_FOUND = 100
    INVALID_CLIENT_ID = 101
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_NAME_ALREADY_EXISTS = 1012
    INVALID_STREAM_NAME = 1013
    INVALID_STREAM_ID = 1014
    TOO_MANY_STREAMS = 1020
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_NAME_ALREADY_EXISTS = 2013
    INVALID_TOPIC_NAME = 2014
    TOO_MANY_PARTITIONS = 2015
    INVALID_TOPIC_ID = 2016
    INVALID_PARTITIONS_COUNT = 2019
    TOO_MANY_TOPICS = 2021
    PARTITION_NOT_FOUND = 3007
    NO_PARTITIONS = 3008
    PARTITION_ID_SPACE_EXHAUSTED = 3013
    CONSUMER_OFFSET_NOT_FOUND = 3021
    SEGMENT_NOT_FOUND = 4000
    INVALID_MESSAGES_COUNT = 4009
    CANNOT_APPEND_MESSAGE = 4010
    TOO_BIG_USER_HEADERS = 4017
    INVALID_HEADER_KEY = 4018
    INVALID_HEADER_VALUE = 4019
    TOO_BIG_MESSAGE_PAYLOAD = 4022
    TOO_MANY_MESSAGES = 4023
    EMPTY_MESSAGE_PAYLOAD = 4024
    INVALID_MESSAGE_PAYLOAD_LENGTH = 4025
    INVALID_MESSAGE_CHECKSUM = 4027
    INVALID_KEY_VALUE_LENGTH = 4028
    INVALID_MESSAGE_TIMESTAMP_DELTA = 4038
    INVALID_BATCH_CHECKSUM = 4039
    INVALID_HEADER_KIND = 4040
    UNSUPPORTED_OPTION_KEY = 4041
    INVALID_OPTION_VALUE = 4042
    OPTIONS_BLOCK_TOO_LARGE = 4043
    INVALID_OFFSET = 4100
    INVALID_RESERVED_FIELD = 4101
    CONSUMER_GROUP_ID_NOT_FOUND = 5000
    INVALID_CONSUMER_GROUP_ID = 5002
    CONSUMER_GROUP_NAME_NOT_FOUND = 5003
    CONSUMER_GROUP_NAME_ALREADY_EXISTS = 5004
    INVALID_CONSUMER_GROUP_NAME = 5005
    CONSUMER_GROUP_MEMBER_NOT_FOUND = 5006
    CONSUMER_GROUP_PARTITION_NOT_OWNED = 5009
    INVALID_SESSION = 14001
    INCOMPATIBLE_PROTOCOL_VERSION = 14003


_VERSION_COMPONENT_BITS: Final = 10
_VERSION_COMPONENT_MAX: Final = (1 << _VERSION_COMPONENT_BITS) - 1


def pack_protocol_version(major: int, minor: int, patch: int) -> int:
    """Pack a semantic version as ``major << 20 | minor << 10 | patch``."""
    for component in (major, minor, patch):
        if not 0 <= component <= _VERSION_COMPONENT_MAX:
            raise ValueError(f"version component {component} outside 0..1023")
    return (major << (2 * _VERSION_COMPONENT_BITS)) | (minor << _VERSION_COMPONENT_BITS) | patch


def unpack_protocol_version(packed: int) -> tuple[int, int, int]:
    """The ``(major, minor, patch)`` of a packed protocol version."""
    return (
        (packed >> (2 * _VERSION_COMPONENT_BITS)) & _VERSION_COMPONENT_MAX,
        (packed >> _VERSION_COMPONENT_BITS) & _VERSION_COMPONENT_MAX,
        packed & _VERSION_COMPONENT_MAX,
    )


def format_protocol_version(packed: int) -> str:
    """``"major.minor.patch"`` of a packed protocol version."""
    return "{}.{}.{}".format(*unpack_protocol_version(packed))


PROTOCOL_VERSION: Final = pack_protocol_version(0, 11, 0)
"""The protocol version we speak: that of ``iggy_binary_protocol`` 0.11.0 (Iggy 0.9.0)."""

PROTOCOL_VERSION_MIN: Final = PROTOCOL_VERSION & ~_VERSION_COMPONENT_MAX
"""The oldest client version a server accepts: ours with the patch zeroed."""


def is_protocol_compatible(client_version: int, server_version: int = PROTOCOL_VERSION) -> bool:
    """Iggy's acceptance rule: ``client >= min`` and ``client.major.minor <= server's``.

    A 0.x minor bump is therefore a flag day in both directions, while any patch of
    the server's own minor passes.
    """
    version_min = server_version & ~_VERSION_COMPONENT_MAX
    return client_version >= version_min and (client_version >> _VERSION_COMPONENT_BITS) <= (
        server_version >> _VERSION_COMPONENT_BITS
    )
