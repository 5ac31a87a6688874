"""Payloads of user management: users, their permissions and their passwords.

Purpose: typed request and reply payloads of GET_USER (31), GET_USERS (32),
CREATE_USER (33), DELETE_USER (34), UPDATE_USER (35), UPDATE_PERMISSIONS (36) and
CHANGE_PASSWORD (37), and the permissions block they share.

Invariants (as for every payload module):

1. ``X.decode(x.encode()) == x``, and a successful ``X.decode(body)`` re-encodes to
   ``body`` exactly: booleans are exactly 0 or 1, presence flags exactly 0 or 1, the
   permissions length prefix equals the block it announces, and per-stream and per-topic
   entries are unique by id (in the order the sender chose).
2. Decoders raise :class:`ProtocolError` only; encoders raise ``ValueError``.
3. A request type's ``read(reader)`` reads and validates every field from the front of
   a reader and leaves what follows unread; ``decode`` is ``read`` plus a refusal of
   trailing bytes. The server reads requests with ``read`` alone (Iggy's server ignores
   trailing bytes), but a permissions block must still fill its length prefix, and
   CREATE_USER and UPDATE_USER end with an options block that runs to the end of the
   body: bytes appended to them are read as options (``INVALID_COMMAND`` unless
   well-formed).
4. A password never appears in a ``repr``: password fields are excluded from it, so a
   payload that reaches a log line or an assertion message does not leak one.

Theory of operation: a permissions block is ten global flags, then a linked list of
streams (``[has_next u8]`` before the first and after each), each with six flags and its
own linked list of topics (four flags each). Requests carry it behind
``[has_permissions u8][len u32]``; the GET_USER reply carries ``[1 u8][len u32][block]``
or, for none, four zero bytes.

Sources: apache/iggy ``core/binary_protocol/src/primitives/permissions.rs``,
``requests/users/*.rs`` and ``responses/users/*.rs``. Every layout here was confirmed
against the official 0.9.0 SDK (golden frames under ``tests/golden``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Final, Self

from sdk.wire._buffer import Buffer, Reader, Writer, read_whole
from sdk.wire._payload import bool_flag, closed_enum
from sdk.wire.codes import IggyErrorCode
from sdk.wire.errors import ProtocolError
from sdk.wire.primitives import (
    Identifier,
    OptionEntry,
    decode_identifier,
    decode_name,
    decode_options_prefixed,
    encode_identifier,
    encode_name,
    encode_options,
    encode_options_prefixed,
    read_request_options,
)

__all__ = [
    "ChangePassword",
    "CreateUser",
    "GlobalPermissions",
    "Permissions",
    "StreamPermissions",
    "TopicPermissions",
    "UpdatePermissions",
    "UpdateUser",
    "UserDetails",
    "UserInfo",
    "UserRef",
    "UserStatus",
    "Users",
    "decode_permissions",
    "encode_permissions",
]

PASSWORD_BYTES_MAX: Final = 255
"""A password travels behind a u8 length."""


class UserStatus(enum.IntEnum):
    """Iggy's user status byte."""

    ACTIVE = 1
    INACTIVE = 2


# --- permissions -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlobalPermissions:
    """The ten server-wide flags, in wire order."""

    manage_servers: bool = False
    read_servers: bool = False
    manage_users: bool = False
    read_users: bool = False
    manage_streams: bool = False
    read_streams: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class TopicPermissions:
    """``[topic_id u32]`` and four flags."""

    topic_id: int
    manage_topic: bool = False
    read_topic: bool = False
    poll_messages: bool = False
    send_messages: bool = False


@dataclass(frozen=True, slots=True)
class StreamPermissions:
    """``[stream_id u32]``, six flags, then the stream's topic entries."""

    stream_id: int
    manage_stream: bool = False
    read_stream: bool = False
    manage_topics: bool = False
    read_topics: bool = False
    poll_messages: bool = False
    send_messages: bool = False
    topics: tuple[TopicPermissions, ...] = ()


@dataclass(frozen=True, slots=True)
class Permissions:
    """A user's whole permission set: global flags and per-stream entries."""

    global_: GlobalPermissions = field(default_factory=GlobalPermissions)
    streams: tuple[StreamPermissions, ...] = ()


_GLOBAL_FLAGS: Final = tuple(f.name for f in fields(GlobalPermissions))
_STREAM_FLAGS: Final = tuple(
    f.name for f in fields(StreamPermissions) if f.name not in ("stream_id", "topics")
)
_TOPIC_FLAGS: Final = tuple(f.name for f in fields(TopicPermissions) if f.name != "topic_id")
assert len(_GLOBAL_FLAGS) == 10 and len(_STREAM_FLAGS) == 6 and len(_TOPIC_FLAGS) == 4


def _write_flags(writer: Writer, value: object, names: tuple[str, ...]) -> None:
    for name in names:
        writer.u8(1 if getattr(value, name) else 0)


def _read_flags(reader: Reader, names: tuple[str, ...]) -> dict[str, bool]:
    return {name: bool_flag(reader.u8(), name) for name in names}


def _write_list_flag(writer: Writer, more: bool) -> None:
    writer.u8(1 if more else 0)


def _check_unique(ids: list[int], what: str) -> None:
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate {what} id in permissions")


def encode_permissions(writer: Writer, permissions: Permissions) -> None:
    """Append a permissions block (without its length prefix)."""
    _check_unique([s.stream_id for s in permissions.streams], "stream")
    _write_flags(writer, permissions.global_, _GLOBAL_FLAGS)
    _write_list_flag(writer, bool(permissions.streams))
    for index, stream in enumerate(permissions.streams):
        _check_unique([t.topic_id for t in stream.topics], "topic")
        writer.u32(stream.stream_id)
        _write_flags(writer, stream, _STREAM_FLAGS)
        _write_list_flag(writer, bool(stream.topics))
        for topic_index, topic in enumerate(stream.topics):
            writer.u32(topic.topic_id)
            _write_flags(writer, topic, _TOPIC_FLAGS)
            _write_list_flag(writer, topic_index + 1 < len(stream.topics))
        _write_list_flag(writer, index + 1 < len(permissions.streams))


def decode_permissions(reader: Reader) -> Permissions:
    """Read a permissions block (without its length prefix).

    The linked lists end at a zero flag; each element consumes bytes, so the loops are
    bounded by the input.
    """
    global_ = GlobalPermissions(**_read_flags(reader, _GLOBAL_FLAGS))
    streams: list[StreamPermissions] = []
    more = bool_flag(reader.u8(), "has_streams")
    while more:
        stream_id = reader.u32()
        flags = _read_flags(reader, _STREAM_FLAGS)
        topics: list[TopicPermissions] = []
        more_topics = bool_flag(reader.u8(), "has_topics")
        while more_topics:
            topic_id = reader.u32()
            topic_flags = _read_flags(reader, _TOPIC_FLAGS)
            if any(t.topic_id == topic_id for t in topics):
                raise ProtocolError(f"duplicate topic {topic_id} in permissions")
            topics.append(TopicPermissions(topic_id, **topic_flags))
            more_topics = bool_flag(reader.u8(), "has_next_topic")
        if any(s.stream_id == stream_id for s in streams):
            raise ProtocolError(f"duplicate stream {stream_id} in permissions")
        streams.append(StreamPermissions(stream_id, **flags, topics=tuple(topics)))
        more = bool_flag(reader.u8(), "has_next_stream")
    return Permissions(global_, tuple(streams))


def _write_optional_permissions(writer: Writer, permissions: Permissions | None) -> None:
    """Requests: ``[0 u8]``, or ``[1 u8][len u32][block]``."""
    if permissions is None:
        writer.u8(0)
        return
    block = Writer()
    encode_permissions(block, permissions)
    raw = block.getvalue()
    writer.u8(1)
    writer.u32(len(raw))
    writer.raw(raw)


def _read_optional_permissions(reader: Reader) -> Permissions | None:
    if not bool_flag(reader.u8(), "has_permissions"):
        return None
    length = reader.u32()
    inner = Reader(reader.take(length))
    permissions = decode_permissions(inner)
    inner.finish("permissions")
    return permissions


def _write_password(writer: Writer, password: str) -> None:
    raw = password.encode("utf-8")
    if len(raw) > PASSWORD_BYTES_MAX:
        raise ValueError(f"password longer than {PASSWORD_BYTES_MAX} bytes")
    writer.u8(len(raw))
    writer.raw(raw)


def _read_password(reader: Reader) -> str:
    return reader.utf8(reader.u8())


# --- requests ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserRef:
    """``[user Identifier]``: GET_USER (31) and DELETE_USER (34)."""

    user_id: Identifier

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.user_id)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the identifier; what follows is left unread."""
        return cls(decode_identifier(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "user reference")


@dataclass(frozen=True, slots=True)
class CreateUser:
    """CREATE_USER (33) request: ``[username name][password_len u8][password]
    [status u8][has_permissions u8]([len u32][permissions])?[options]`` (options run to
    the end)."""

    username: str
    password: str = field(repr=False)
    status: UserStatus = UserStatus.ACTIVE
    permissions: Permissions | None = None
    options: tuple[OptionEntry, ...] = ()

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_name(writer, self.username)
        _write_password(writer, self.password)
        writer.u8(self.status)
        _write_optional_permissions(writer, self.permissions)
        encode_options(writer, self.options)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the options block consumes the rest of the reader."""
        username = decode_name(reader)
        password = _read_password(reader)
        status = closed_enum(UserStatus, reader.u8(), "user status")
        permissions = _read_optional_permissions(reader)
        return cls(username, password, status, permissions, read_request_options(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "create user")


@dataclass(frozen=True, slots=True)
class UpdateUser:
    """UPDATE_USER (35) request: ``[user][has_username u8][username name]?
    [has_status u8][status u8]?[options]`` (options run to the end)."""

    user_id: Identifier
    username: str | None = None
    status: UserStatus | None = None
    options: tuple[OptionEntry, ...] = ()

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.user_id)
        if self.username is None:
            writer.u8(0)
        else:
            writer.u8(1)
            encode_name(writer, self.username)
        if self.status is None:
            writer.u8(0)
        else:
            writer.u8(1)
            writer.u8(self.status)
        encode_options(writer, self.options)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; the options block consumes the rest of the reader."""
        user_id = decode_identifier(reader)
        username = decode_name(reader) if bool_flag(reader.u8(), "has_username") else None
        status = (
            closed_enum(UserStatus, reader.u8(), "user status")
            if bool_flag(reader.u8(), "has_status")
            else None
        )
        return cls(user_id, username, status, read_request_options(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "update user")


@dataclass(frozen=True, slots=True)
class UpdatePermissions:
    """UPDATE_PERMISSIONS (36) request: ``[user][has_permissions u8]
    ([len u32][permissions])?``; ``None`` removes every permission."""

    user_id: Identifier
    permissions: Permissions | None = None

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.user_id)
        _write_optional_permissions(writer, self.permissions)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the permissions block is left unread (the block
        itself must fill its length prefix)."""
        return cls(decode_identifier(reader), _read_optional_permissions(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "update permissions")


@dataclass(frozen=True, slots=True)
class ChangePassword:
    """CHANGE_PASSWORD (37) request: ``[user][current_len u8][current][new_len u8][new]``."""

    user_id: Identifier
    current_password: str = field(repr=False)
    new_password: str = field(repr=False)

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_identifier(writer, self.user_id)
        _write_password(writer, self.current_password)
        _write_password(writer, self.new_password)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request; what follows the new password is left unread."""
        return cls(decode_identifier(reader), _read_password(reader), _read_password(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "change password")


# --- replies -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserInfo:
    """A user in replies: ``[id u32][created_at u64][status u8][username name]
    [options_len u32][options]``."""

    id: int
    created_at: int
    status: UserStatus
    username: str
    options: tuple[OptionEntry, ...] = ()

    def write(self, writer: Writer) -> None:
        """Append this user."""
        writer.u32(self.id)
        writer.u64(self.created_at)
        writer.u8(self.status)
        encode_name(writer, self.username)
        encode_options_prefixed(writer, self.options)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read one user."""
        return cls(
            reader.u32(),
            reader.u64(),
            closed_enum(UserStatus, reader.u8(), "user status"),
            decode_name(reader),
            decode_options_prefixed(reader),
        )


_NO_PERMISSIONS: Final = bytes(4)


@dataclass(frozen=True, slots=True)
class UserDetails:
    """GET_USER (31) and CREATE_USER (33) reply: the user, then ``[1 u8][len u32]
    [permissions]`` or four zero bytes for none."""

    user: UserInfo
    permissions: Permissions | None = None

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        self.user.write(writer)
        if self.permissions is None:
            writer.raw(_NO_PERMISSIONS)
        else:
            _write_optional_permissions(writer, self.permissions)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        user = UserInfo.read(reader)
        flag = reader.u8()
        permissions: Permissions | None
        if flag == 0:
            if bytes(reader.take(3)) != _NO_PERMISSIONS[1:]:
                raise ProtocolError("no-permissions marker is not four zero bytes")
            permissions = None
        elif flag == 1:
            inner = Reader(reader.take(reader.u32()))
            permissions = decode_permissions(inner)
            inner.finish("permissions")
        else:
            raise ProtocolError(f"permissions flag {flag}", IggyErrorCode.INVALID_FORMAT)
        reader.finish("user details")
        return cls(user, permissions)


@dataclass(frozen=True, slots=True)
class Users:
    """GET_USERS (32) reply: users back to back until the body ends, no count."""

    users: tuple[UserInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        for user in self.users:
            user.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        users = []
        while reader.remaining:
            users.append(UserInfo.read(reader))
        return cls(tuple(users))
