"""User permissions as in Apache Iggy, and the one function that decides them.

A user holds global flags, optional per-stream flags, and optional per-topic flags inside a
stream. Flags only ever grant: a stronger flag implies the weaker ones below it (``manage``
implies ``read``, ``read`` implies ``poll``), and a grant at a wider scope covers every
narrower one (a global ``manage_streams`` covers every stream and topic).

Invariants:

1. The type is the wire codec's (``sdk.wire.Permissions``): one permission type from the
   request that sets it to the state that keeps it and the reply that reports it. Values
   are immutable, and the state keeps per-stream and per-topic entries sorted by id
   (:func:`canonical`), so two equal permission sets are equal objects with equal
   encodings (snapshots, replies).
2. :func:`permits` is a pure function of its arguments: the same permissions, action and
   ids always give the same answer on every replica.

Theory of operation: each :class:`Action` has a row in ``_GRANTS`` naming the global, stream
and topic flags that grant it. :func:`permits` looks the three scopes up and answers whether
any granting flag is set. Keeping the rules in one table (rather than in ``if`` chains per
command) makes the implication order reviewable at a glance.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any

from sdk.wire import GlobalPermissions, Permissions, StreamPermissions, TopicPermissions

__all__ = [
    "Action",
    "GlobalPermissions",
    "Permissions",
    "StreamPermissions",
    "TopicPermissions",
    "canonical",
    "permissions_from_plain",
    "permissions_to_plain",
    "permits",
    "root_permissions",
    "stream_permissions",
    "topic_permissions",
]


def canonical(permissions: Permissions) -> Permissions:
    """``permissions`` with its per-stream and per-topic entries sorted by id, as the state
    keeps them (invariant 1); the wire codec has refused duplicate ids already.

    Raises:
        ValueError: two entries of one scope name the same id.
    """
    streams = []
    for stream in sorted(permissions.streams, key=lambda s: s.stream_id):
        topics = tuple(sorted(stream.topics, key=lambda t: t.topic_id))
        _check_unique([topic.topic_id for topic in topics], "topic")
        streams.append(replace(stream, topics=topics))
    _check_unique([stream.stream_id for stream in streams], "stream")
    return Permissions(permissions.global_, tuple(streams))


def root_permissions() -> Permissions:
    """Every global flag set: what the root user holds."""
    return Permissions(GlobalPermissions(**{f.name: True for f in fields(GlobalPermissions)}))


def stream_permissions(permissions: Permissions, stream_id: int) -> StreamPermissions | None:
    """The entry of ``stream_id``, if the user has one."""
    for stream in permissions.streams:
        if stream.stream_id == stream_id:
            return stream
    return None


def topic_permissions(stream: StreamPermissions, topic_id: int) -> TopicPermissions | None:
    """The entry of ``topic_id`` inside ``stream``, if the user has one."""
    for topic in stream.topics:
        if topic.topic_id == topic_id:
            return topic
    return None


def _check_unique(ids: list[int], what: str) -> None:
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate {what} id in permissions")


class Action(Enum):
    """What a command asks to do; each maps to the flags that grant it."""

    READ_SERVERS = "read_servers"
    MANAGE_SERVERS = "manage_servers"
    READ_USERS = "read_users"
    MANAGE_USERS = "manage_users"
    READ_STREAMS = "read_streams"
    CREATE_STREAM = "create_stream"
    READ_STREAM = "read_stream"
    MANAGE_STREAM = "manage_stream"
    CREATE_TOPIC = "create_topic"
    READ_TOPIC = "read_topic"
    MANAGE_TOPIC = "manage_topic"
    POLL_MESSAGES = "poll_messages"
    SEND_MESSAGES = "send_messages"


@dataclass(frozen=True, slots=True)
class _Grant:
    global_flags: tuple[str, ...]
    stream_flags: tuple[str, ...] = ()
    topic_flags: tuple[str, ...] = ()


# The "read topic" family also covers consumer groups (create, join, leave, delete, get),
# as in Iggy, because consuming with a group needs nothing stronger than reading the topic.
_READ_TOPIC = _Grant(
    ("manage_streams", "read_streams", "manage_topics", "read_topics"),
    ("manage_stream", "read_stream", "manage_topics", "read_topics"),
    ("manage_topic", "read_topic"),
)
_GRANTS: dict[Action, _Grant] = {
    Action.READ_SERVERS: _Grant(("manage_servers", "read_servers")),
    Action.MANAGE_SERVERS: _Grant(("manage_servers",)),
    Action.READ_USERS: _Grant(("manage_users", "read_users")),
    Action.MANAGE_USERS: _Grant(("manage_users",)),
    Action.READ_STREAMS: _Grant(("manage_streams", "read_streams")),
    Action.CREATE_STREAM: _Grant(("manage_streams",)),
    Action.READ_STREAM: _Grant(
        ("manage_streams", "read_streams"),
        ("manage_stream", "read_stream"),
    ),
    Action.MANAGE_STREAM: _Grant(("manage_streams",), ("manage_stream",)),
    Action.CREATE_TOPIC: _Grant(
        ("manage_streams", "manage_topics"),
        ("manage_stream", "manage_topics"),
    ),
    Action.READ_TOPIC: _READ_TOPIC,
    Action.MANAGE_TOPIC: _Grant(
        ("manage_streams", "manage_topics"),
        ("manage_stream", "manage_topics"),
        ("manage_topic",),
    ),
    Action.POLL_MESSAGES: _Grant(
        (*_READ_TOPIC.global_flags, "poll_messages"),
        (*_READ_TOPIC.stream_flags, "poll_messages"),
        (*_READ_TOPIC.topic_flags, "poll_messages"),
    ),
    Action.SEND_MESSAGES: _Grant(
        ("manage_streams", "manage_topics", "send_messages"),
        ("manage_stream", "manage_topics", "send_messages"),
        ("manage_topic", "send_messages"),
    ),
}
assert set(_GRANTS) == set(Action), "every action needs a grant row"


def permits(
    permissions: Permissions | None,
    action: Action,
    stream_id: int | None = None,
    topic_id: int | None = None,
) -> bool:
    """Whether ``permissions`` allow ``action`` on the given stream and topic.

    Args:
        permissions: the user's permissions; ``None`` grants nothing.
        action: what is asked.
        stream_id: the stream the action touches, if any.
        topic_id: the topic inside ``stream_id`` the action touches, if any.

    Returns:
        True when a granting flag is set at the global, stream or topic scope.
    """
    if permissions is None:
        return False
    grant = _GRANTS[action]
    if any(getattr(permissions.global_, flag) for flag in grant.global_flags):
        return True
    if stream_id is None:
        return False
    stream = stream_permissions(permissions, stream_id)
    if stream is None:
        return False
    if any(getattr(stream, flag) for flag in grant.stream_flags):
        return True
    if topic_id is None:
        return False
    topic = topic_permissions(stream, topic_id)
    return topic is not None and any(getattr(topic, flag) for flag in grant.topic_flags)


# -- plain encoding (CBOR-ready lists, used by snapshots and command bodies) --------------

_GLOBAL_FLAGS = tuple(f.name for f in fields(GlobalPermissions))
_STREAM_FLAGS = tuple(
    f.name for f in fields(StreamPermissions) if f.name not in ("stream_id", "topics")
)
_TOPIC_FLAGS = tuple(f.name for f in fields(TopicPermissions) if f.name != "topic_id")


def permissions_to_plain(permissions: Permissions) -> list[Any]:
    """Lists of flags in field order, per-stream and per-topic entries in id order."""
    return [
        _flags_to_plain(permissions.global_, _GLOBAL_FLAGS),
        [
            [
                stream.stream_id,
                _flags_to_plain(stream, _STREAM_FLAGS),
                [[topic.topic_id, _flags_to_plain(topic, _TOPIC_FLAGS)] for topic in stream.topics],
            ]
            for stream in permissions.streams
        ],
    ]


def permissions_from_plain(item: Any) -> Permissions:
    """The inverse of :func:`permissions_to_plain`.

    Raises:
        ValueError: the value is not an encoding :func:`permissions_to_plain` produces.
    """
    try:
        global_flags, streams = item
        return Permissions(
            GlobalPermissions(**_flags_from_plain(global_flags, _GLOBAL_FLAGS)),
            tuple(
                StreamPermissions(
                    _id(stream_id),
                    **_flags_from_plain(stream_flags, _STREAM_FLAGS),
                    topics=tuple(
                        TopicPermissions(_id(topic_id), **_flags_from_plain(f, _TOPIC_FLAGS))
                        for topic_id, f in _sorted_unique_plain(topics)
                    ),
                )
                for stream_id, stream_flags, topics in _sorted_unique_plain(streams)
            ),
        )
    except (TypeError, AssertionError) as error:
        raise ValueError(f"malformed permissions: {error}") from error


def _flags_to_plain(value: object, names: tuple[str, ...]) -> list[bool]:
    return [bool(getattr(value, name)) for name in names]


def _flags_from_plain(flags: Any, names: tuple[str, ...]) -> dict[str, bool]:
    if (
        not isinstance(flags, list)
        or len(flags) != len(names)
        or not all(isinstance(flag, bool) for flag in flags)
    ):
        raise ValueError("permission flags")
    return dict(zip(names, flags, strict=True))


def _id(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 32:
        raise ValueError(f"permission id {value!r}")
    return value


def _sorted_unique_plain(pairs: Any) -> list[Any]:
    if not isinstance(pairs, list):
        raise TypeError("permission entries")
    ids = [_id(pair[0]) for pair in pairs]
    if ids != sorted(set(ids)):
        raise ValueError("permission ids must be sorted and unique")
    return pairs
