"""The metadata state's snapshot: canonical CBOR bytes and back.

A replica that falls too far behind is sent the metadata group's snapshot instead of the
prepares it missed, and a node restarting from disk reads the one it wrote. Both may have
been written by an older version of this broker, so the layout below is a format, not an
implementation detail: a change to it needs a new ``SNAPSHOT_VERSION``.

Invariants:

1. Equal states give equal bytes: every table is written in id order (the order
   :meth:`MetadataState.contents` gives), maps in canonical CBOR key order, and nothing
   derived (indexes, totals, the earliest token expiry) is written at all.
2. ``restore_state(snapshot_state(s))`` is a state equal to ``s``: it snapshots to the same
   bytes and answers every command and query the same way.
3. Bytes from elsewhere are a remote party's input: anything that is not a snapshot this
   version reads (corrupt CBOR, a wrong shape, a negative id, a duplicate, an unknown
   version, a state breaking :meth:`MetadataState.check_invariants`) is a
   :class:`SnapshotError`, never an assertion.

Theory of operation: :func:`snapshot_state` takes the state's non-derived contents
(:class:`MetadataContents`) and lays each entity out as a CBOR array, fields in a fixed
order; topic options are a map keyed by option name, permissions and password hashes are
their own modules' encodings. :func:`restore_state` reverses it: the arrays become
entities, checked field by field, :meth:`MetadataState.from_contents` derives the indexes
(refusing duplicates), and the result must pass the state's own invariant check.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import cbor2

from broker.state.credentials import TOKEN_HASH_SIZE_BYTES, PasswordHash
from broker.state.metadata import (
    TOPIC_OPTION_FIELDS,
    GroupEntity,
    MemberEntity,
    MetadataContents,
    MetadataState,
    PartitionEntity,
    RevocationEntity,
    SessionEntity,
    StreamEntity,
    TokenEntity,
    TopicEntity,
    TopicOptions,
    UserEntity,
    UserStatus,
)
from broker.state.permissions import permissions_from_plain, permissions_to_plain

SNAPSHOT_VERSION = 3
"""Version 2 added personal access tokens; a version 1 snapshot is read as holding none.
Version 3 stores consumer group assignments (each member's partitions, the revoking
ones); an older snapshot's groups are read with the assignment it implied, partition
``p`` to member ``p mod m``, and nothing revoking."""
SNAPSHOT_VERSIONS_READABLE = (1, 2, 3)


class SnapshotError(Exception):
    """A snapshot could not be read: corrupt bytes or an unknown format version."""


def snapshot_state(state: MetadataState) -> bytes:
    """The whole state as canonical CBOR: equal states give equal bytes."""
    return cbor2.dumps(_to_plain(state.contents()), canonical=True)


def restore_state(data: bytes) -> MetadataState:
    """Rebuild a state from :func:`snapshot_state` bytes.

    Raises:
        SnapshotError: the bytes are not a snapshot this version can read.
    """
    try:
        plain = cbor2.loads(data)
        state = MetadataState.from_contents(_contents_from_plain(plain))
    except (cbor2.CBORDecodeError, KeyError, TypeError, ValueError, IndexError) as error:
        raise SnapshotError(f"unreadable metadata snapshot: {error}") from error
    problems = state.check_invariants()
    if problems:
        raise SnapshotError("inconsistent metadata snapshot: " + "; ".join(problems))
    return state


# ---------------------------------------------------------------------------------------
# The whole state.


def _to_plain(contents: MetadataContents) -> dict[str, Any]:
    return {
        "version": SNAPSHOT_VERSION,
        "next_stream_id": contents.next_stream_id,
        "next_user_id": contents.next_user_id,
        "next_session_number": contents.next_session_number,
        "root_user_id": contents.root_user_id,
        "streams": [_stream_to_plain(stream) for stream in contents.streams],
        "users": [_user_to_plain(user) for user in contents.users],
        "sessions": [
            [s.session, s.client_id, s.user_id, s.number, s.created_at_us]
            for s in contents.sessions
        ],
        "tokens": [
            [user_id, token.name, token.token_hash, token.expiry_at_us]
            for user_id, token in contents.tokens
        ],
    }


def _contents_from_plain(plain: dict[str, Any]) -> MetadataContents:
    if plain["version"] not in SNAPSHOT_VERSIONS_READABLE:
        raise ValueError(f"snapshot version {plain['version']}")
    root = plain["root_user_id"]
    tokens = plain["tokens"] if plain["version"] >= 2 else []  # version 1 had none
    return MetadataContents(
        next_stream_id=_int(plain["next_stream_id"]),
        next_user_id=_int(plain["next_user_id"]),
        next_session_number=_int(plain["next_session_number"]),
        root_user_id=None if root is None else _int(root),
        streams=tuple(_stream_from_plain(item, plain["version"]) for item in plain["streams"]),
        users=tuple(_user_from_plain(item) for item in plain["users"]),
        sessions=tuple(_session_from_plain(item) for item in plain["sessions"]),
        tokens=tuple(_token_from_plain(item) for item in tokens),
    )


# ---------------------------------------------------------------------------------------
# Fields, checked as they are read: the bytes may come from a faulty or older replica.


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _hash(value: Any) -> bytes:
    if not isinstance(value, bytes) or len(value) != TOKEN_HASH_SIZE_BYTES:
        raise ValueError(f"expected a {TOKEN_HASH_SIZE_BYTES}-byte token hash")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _require_new(key: int, table: dict[int, Any], name: Any, index: dict[Any, int]) -> None:
    # Inside one entity (topics of a stream, groups of a topic); the state's own tables
    # are checked by ``MetadataState.from_contents``.
    if key in table or name in index:
        raise ValueError(f"duplicate entry {key} / {name!r} in snapshot")


# ---------------------------------------------------------------------------------------
# Entities, each an array with its fields in a fixed order.


def _options_to_plain(options: TopicOptions) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    for name in TOPIC_OPTION_FIELDS:
        value = getattr(options, name)
        plain[name] = value.value if isinstance(value, Enum) else value
    return plain


def _options_from_plain(plain: dict[str, Any]) -> TopicOptions:
    if sorted(plain) != sorted(TOPIC_OPTION_FIELDS):
        raise ValueError("topic option names")
    defaults = TopicOptions()
    values: dict[str, Any] = {}
    for name in TOPIC_OPTION_FIELDS:
        default = getattr(defaults, name)
        raw = plain[name]
        if isinstance(default, Enum):
            values[name] = type(default)(raw)
        elif isinstance(default, bool):
            if not isinstance(raw, bool):
                raise TypeError(f"option {name}")
            values[name] = raw
        else:
            values[name] = _int(raw)
    return TopicOptions(**values)


def _stream_to_plain(stream: StreamEntity) -> list[Any]:
    return [
        stream.id,
        stream.name,
        stream.created_at_us,
        stream.next_topic_id,
        [_topic_to_plain(stream.topics[i]) for i in sorted(stream.topics)],
    ]


def _stream_from_plain(item: list[Any], version: int) -> StreamEntity:
    stream_id, name, created_at_us, next_topic_id, topics = item
    stream = StreamEntity(_int(stream_id), _str(name), _int(created_at_us))
    stream.next_topic_id = _int(next_topic_id)
    for topic_item in topics:
        topic = _topic_from_plain(topic_item, version)
        _require_new(topic.id, stream.topics, topic.name, stream.topic_ids_by_name)
        stream.topics[topic.id] = topic
        stream.topic_ids_by_name[topic.name] = topic.id
    return stream


def _topic_to_plain(topic: TopicEntity) -> list[Any]:
    return [
        topic.id,
        topic.name,
        topic.created_at_us,
        _options_to_plain(topic.options),
        list(topic.explicit_options),
        [[p.id, p.created_at_us, p.created_op, p.purge_generation] for p in topic.partitions],
        topic.next_group_id,
        [
            [
                group.id,
                group.name,
                group.generation,
                [[m.session, m.member_id, m.joined_op, m.partitions] for m in group.members],
                [
                    [p, r.source, r.target, r.created_at_us, r.drained]
                    for p, r in ((p, group.revoking[p]) for p in sorted(group.revoking))
                ],
            ]
            for group in (topic.groups[i] for i in sorted(topic.groups))
        ],
    ]


def _topic_from_plain(item: list[Any], version: int) -> TopicEntity:
    topic_id, name, created_at_us, options, explicit, partitions, next_group_id, groups = item
    if not all(key in TOPIC_OPTION_FIELDS for key in explicit) or list(explicit) != sorted(
        explicit, key=TOPIC_OPTION_FIELDS.index
    ):
        raise ValueError("explicit option names")
    topic = TopicEntity(
        _int(topic_id),
        _str(name),
        _int(created_at_us),
        _options_from_plain(options),
        tuple(explicit),
    )
    topic.partitions = [
        PartitionEntity(_int(pid), _int(created), _int(created_op), _int(purge))
        for pid, created, created_op, purge in partitions
    ]
    topic.next_group_id = _int(next_group_id)
    for group_item in groups:
        group = _group_from_plain(group_item, version, len(topic.partitions))
        _require_new(group.id, topic.groups, group.name, topic.group_ids_by_name)
        topic.groups[group.id] = group
        topic.group_ids_by_name[group.name] = group.id
    return topic


def _group_from_plain(item: list[Any], version: int, partitions_count: int) -> GroupEntity:
    if version < 3:
        group_id, name, generation, members = item
        group = GroupEntity(_int(group_id), _str(name), _int(generation))
        group.members = [
            MemberEntity(_int(session), _int(member_id), _int(joined_op))
            for session, member_id, joined_op in members
        ]
        for partition_id in range(partitions_count if group.members else 0):
            group.members[partition_id % len(group.members)].partitions.append(partition_id)
        return group
    group_id, name, generation, members, revoking = item
    group = GroupEntity(_int(group_id), _str(name), _int(generation))
    group.members = [
        MemberEntity(_int(session), _int(member_id), _int(joined_op), _ints(partitions))
        for session, member_id, joined_op, partitions in members
    ]
    for partition_id, source, target, created_at_us, drained in revoking:
        if _int(partition_id) in group.revoking:
            raise ValueError(f"partition {partition_id} revoking twice")
        group.revoking[partition_id] = RevocationEntity(
            _int(source), _int(target), _int(created_at_us), _ints(drained)
        )
    return group


def _ints(value: Any) -> list[int]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r}")
    return [_int(item) for item in value]


def _user_to_plain(user: UserEntity) -> list[Any]:
    return [
        user.id,
        user.username,
        user.created_at_us,
        int(user.status),
        None if user.permissions is None else permissions_to_plain(user.permissions),
        user.password.to_plain(),
    ]


def _user_from_plain(item: list[Any]) -> UserEntity:
    user_id, username, created_at_us, status, permissions, password = item
    return UserEntity(
        _int(user_id),
        _str(username),
        _int(created_at_us),
        UserStatus(status),
        None if permissions is None else permissions_from_plain(permissions),
        PasswordHash.from_plain(password),
    )


def _session_from_plain(item: list[Any]) -> SessionEntity:
    session_no, client_id, user_id, number, created_at_us = item
    return SessionEntity(
        _int(session_no), _int(client_id), _int(user_id), _int(number), _int(created_at_us)
    )


def _token_from_plain(item: list[Any]) -> tuple[int, TokenEntity]:
    user_id, name, token_hash, expiry = item
    token = TokenEntity(_str(name), _hash(token_hash), None if expiry is None else _int(expiry))
    return _int(user_id), token
