"""Glue between the pure state machines, the Iggy wire payloads and consensus.

Three jobs, each a thin translation with no decisions of its own:

1. **Admission** (primary, before proposing): decode an Iggy request payload into a domain
   command (:func:`metadata_command`, :func:`authenticate`), route partition requests to
   their partition (:func:`route_send`, :func:`route_poll`, :func:`route_offset`).
   Failures raise :class:`StateError`; the runtime answers with its code in the reply
   header's status, before anything is replicated.
2. **Consensus state machines**: :class:`MetadataMachine` and :class:`PartitionMachine`
   implement ``consensus.protocols.StateMachine`` (``apply(prepare) -> bytes``,
   ``snapshot``, ``restore``). Their replies are Iggy reply payloads built from the
   prepare and the committed state alone, so every replica returns identical bytes:
   result-framed for metadata-plane ops and for store/delete consumer offset
   (``[count u32]`` then ``{index u32, result u32}``; success is count 0 and the payload,
   a committed rejection one entry ``{0, code}`` and no payload), plain for SendMessages
   (confirmations) and Logout.
3. **Reads** served from committed local state, never replicated: get stream(s), topic(s),
   consumer group(s), sync consumer group, get me, poll, get consumer offset. They return
   reply payload bytes (an empty body means "not found" where Iggy says so).

Invariants:

1. Nothing here reads a clock, draws randomness or touches IO; the balanced-partitioning
   counter and connection facts (transport, address) are passed in.
2. Metadata prepare bodies are :mod:`broker.state.codec` commands, never wire bodies, so
   a clear password never enters the log.
3. A partition prepare body is built only by :meth:`PartitionMachine.prepare`; the body a
   client sent (its wire payload) is never journaled as is.
4. A store of a consumer offset names the user it is charged to in the request body the
   admitting node builds (:func:`resolved_offset_request`, :func:`store_offset_body`), from
   the session it checked: a backup forwards that body unchanged, and the primary's
   partition machine never looks a session up in metadata it may not have applied yet.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import cbor2

from broker.state.codec import SYSTEM_OPERATIONS, decode_command
from broker.state.credentials import PasswordHash, verify_password
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    EXPIRY_NEVER,
    MESSAGES_REQUIRED_TO_SAVE_MAX,
    SEGMENT_SIZE_ALIGNMENT_BYTES,
    SEGMENT_SIZE_BYTES_MAX,
    SEGMENT_SIZE_BYTES_MIN,
    SIZE_REQUIRED_TO_SAVE_BYTES_MAX,
    SIZE_UNLIMITED,
    U32_MAX,
    USERNAME_LENGTH_MAX,
    USERNAME_LENGTH_MIN,
    ApplyContext,
    ChangePassword,
    ConsumerGroupCreated,
    ConsumerGroupInfo,
    CreateConsumerGroup,
    CreatePartitions,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerGroup,
    DeletePartitions,
    DeleteStream,
    DeleteTopic,
    DeleteUser,
    Done,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    MetadataCommand,
    MetadataResult,
    MetadataState,
    PurgeStream,
    PurgeTopic,
    Register,
    Registered,
    Rejected,
    SessionInfo,
    StreamCreated,
    StreamInfo,
    TopicCreated,
    TopicInfo,
    TopicOptions,
    TopicOptionsPatch,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserCreated,
    UserInfo,
    UserStatus,
)
from broker.state.metadata import Compression as DomainCompression
from broker.state.metadata import Durability as DomainDurability
from broker.state.option_values import parse_duration_us, parse_size_bytes
from broker.state.partition import (
    Appended,
    Applied,
    Buffer,
    ConsumerKey,
    ConsumerKind,
    DeleteConsumerOffset,
    PartitionRequest,
    PartitionState,
    PollingKind,
    PurgePartition,
    Refused,
    SendMessages,
    StoreConsumerOffset,
)
from broker.state.permissions import (
    Action,
    GlobalPermissions,
    Permissions,
    StreamPermissions,
    TopicPermissions,
)
from consensus.messages import Prepare
from consensus.protocols import Log, Prepared, RequestRejected
from sdk import wire
from sdk.wire.batch import BATCH_HEADER, BATCH_HEADER_SIZE
from sdk.wire.codes import CommandCode, Operation
from sdk.wire.primitives import HeaderValue

_T = TypeVar("_T")

SERVER_VERSION: Final = "0.9.0"
"""The Iggy server version we answer logins with (the protocol we speak is Iggy 0.9's)."""

PARTITION_SEGMENTS_AT_CREATION: Final = 1
"""A new partition reports one (empty, active) segment, as Iggy does."""

NOT_FOUND: Final = b""
CLIENT_ID_TAKEN_STATUS: Final = ErrorCode.UNAUTHORIZED
"""The status a register gets, before it enters the log, when its client id holds a live
session of another user; the node answers the client with Iggy's eviction (SessionError)."""
"""The reply body of a read whose object does not exist."""


# =======================================================================================
# Admission: wire requests to domain commands.


def metadata_command(code: CommandCode, payload: wire.RequestPayload) -> MetadataCommand:
    """The domain command for a metadata-plane request (everything but logins and users).

    Raises:
        StateError: the request carries an option this server does not support, or a
            value it cannot hold; or ``code`` is not a metadata command handled here.
    """
    match code, payload:
        case CommandCode.CREATE_STREAM, wire.CreateStream(name, options):
            _no_stream_options(options)
            return CreateStream(name)
        case CommandCode.UPDATE_STREAM, wire.UpdateStream(stream_id, name, options):
            _no_stream_options(options)
            return UpdateStream(stream_id.value, name)
        case CommandCode.DELETE_STREAM, wire.StreamRef(stream_id):
            return DeleteStream(stream_id.value)
        case CommandCode.PURGE_STREAM, wire.StreamRef(stream_id):
            return PurgeStream(stream_id.value)
        case CommandCode.CREATE_TOPIC, wire.CreateTopic(stream_id, partitions_count, name, opts):
            return CreateTopic(stream_id.value, name, partitions_count, topic_options(opts))
        case CommandCode.UPDATE_TOPIC, wire.UpdateTopic(stream_id, topic_id, name, options):
            return UpdateTopic(stream_id.value, topic_id.value, name, topic_options(options))
        case CommandCode.DELETE_TOPIC, wire.TopicRef(stream_id, topic_id):
            return DeleteTopic(stream_id.value, topic_id.value)
        case CommandCode.PURGE_TOPIC, wire.TopicRef(stream_id, topic_id):
            return PurgeTopic(stream_id.value, topic_id.value)
        case CommandCode.CREATE_PARTITIONS, wire.PartitionsChange(stream_id, topic_id, count):
            return CreatePartitions(stream_id.value, topic_id.value, count)
        case CommandCode.DELETE_PARTITIONS, wire.PartitionsChange(stream_id, topic_id, count):
            return DeletePartitions(stream_id.value, topic_id.value, count)
        case CommandCode.CREATE_CONSUMER_GROUP, wire.CreateConsumerGroup(stream_id, topic_id, n):
            return CreateConsumerGroup(stream_id.value, topic_id.value, n)
        case CommandCode.DELETE_CONSUMER_GROUP, wire.GroupRef(stream_id, topic_id, group_id):
            return DeleteConsumerGroup(stream_id.value, topic_id.value, group_id.value)
        case CommandCode.JOIN_CONSUMER_GROUP, wire.GroupRef(stream_id, topic_id, group_id):
            return JoinConsumerGroup(stream_id.value, topic_id.value, group_id.value)
        case CommandCode.LEAVE_CONSUMER_GROUP, wire.GroupRef(stream_id, topic_id, group_id):
            return LeaveConsumerGroup(stream_id.value, topic_id.value, group_id.value)
        case CommandCode.LOGOUT_USER, _:
            return Logout()
        case CommandCode.DELETE_USER, wire.UserRef(user_id):
            return DeleteUser(user_id.value)
        case CommandCode.UPDATE_USER, wire.UpdateUser(user_id, username, status, options):
            _no_user_options(options)
            if username is not None:
                check_username(username)
            return UpdateUser(
                user_id.value, username, None if status is None else UserStatus(int(status))
            )
        case CommandCode.UPDATE_PERMISSIONS, wire.UpdatePermissions(user_id, permissions):
            return UpdatePermissions(user_id.value, domain_permissions(permissions))
    raise StateError(ErrorCode.INVALID_COMMAND, f"{code!r} is not a metadata command here")


# Iggy's bounds on a clear password (``MIN_PASSWORD_LENGTH``/``MAX_PASSWORD_LENGTH``).
PASSWORD_LENGTH_MIN: Final = 3
PASSWORD_LENGTH_MAX: Final = 100


def check_password(password: str) -> None:
    """Refuse a new password outside Iggy's length bounds, in UTF-8 bytes as Iggy counts
    them, before anything is hashed.

    Raises:
        StateError: ``INVALID_PASSWORD``.
    """
    if not PASSWORD_LENGTH_MIN <= len(password.encode("utf-8")) <= PASSWORD_LENGTH_MAX:
        raise StateError(ErrorCode.INVALID_PASSWORD)


def check_username(username: str) -> None:
    """Refuse a new username outside Iggy's bounds (3..50), in UTF-8 bytes as Iggy counts
    them: 17 three-byte characters are 51 bytes, too long for Iggy's clients and server.

    Checked where a request becomes a command, before it is proposed, and not in the
    state machine: the state machine's own rule (in characters) must stay what it was
    when older ops were committed, or replaying them would give another state.

    Raises:
        StateError: ``INVALID_USERNAME``.
    """
    if not USERNAME_LENGTH_MIN <= len(username.encode("utf-8")) <= USERNAME_LENGTH_MAX:
        raise StateError(ErrorCode.INVALID_USERNAME, "a username is 3 to 50 bytes of UTF-8")


def create_user_command(request: wire.CreateUser, password: PasswordHash) -> CreateUser:
    """The ``CreateUser`` to propose once the primary hashed the request's password with a
    salt it drew: the clear password stays out of the command and so out of the log."""
    _no_user_options(request.options)
    check_username(request.username)
    return CreateUser(
        request.username,
        password,
        UserStatus(int(request.status)),
        domain_permissions(request.permissions),
    )


def change_password_command(request: wire.ChangePassword, password: PasswordHash) -> ChangePassword:
    """The ``ChangePassword`` to propose once the current password was verified and the new
    one hashed with a fresh salt."""
    return ChangePassword(request.user_id.value, password)


def _no_user_options(options: Sequence[wire.OptionEntry]) -> None:
    # No user option exists in Iggy 0.9's catalog; a key is refused, as Iggy does.
    if options:
        raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, options[0].key)


def domain_permissions(permissions: wire.Permissions | None) -> Permissions | None:
    """Wire permissions as the state machine keeps them: entries sorted by id (the wire
    codec has already refused duplicate ids)."""
    if permissions is None:
        return None
    g = permissions.global_
    streams = tuple(
        (
            s.stream_id,
            StreamPermissions(
                manage_stream=s.manage_stream,
                read_stream=s.read_stream,
                manage_topics=s.manage_topics,
                read_topics=s.read_topics,
                poll_messages=s.poll_messages,
                send_messages=s.send_messages,
                topics=tuple(
                    (
                        t.topic_id,
                        TopicPermissions(
                            t.manage_topic, t.read_topic, t.poll_messages, t.send_messages
                        ),
                    )
                    for t in sorted(s.topics, key=lambda t: t.topic_id)
                ),
            ),
        )
        for s in sorted(permissions.streams, key=lambda s: s.stream_id)
    )
    return Permissions(
        GlobalPermissions(
            g.manage_servers,
            g.read_servers,
            g.manage_users,
            g.read_users,
            g.manage_streams,
            g.read_streams,
            g.manage_topics,
            g.read_topics,
            g.poll_messages,
            g.send_messages,
        ),
        streams,
    )


def wire_permissions(permissions: Permissions | None) -> wire.Permissions | None:
    """The inverse of :func:`domain_permissions`."""
    if permissions is None:
        return None
    g = permissions.global_
    return wire.Permissions(
        wire.GlobalPermissions(
            g.manage_servers,
            g.read_servers,
            g.manage_users,
            g.read_users,
            g.manage_streams,
            g.read_streams,
            g.manage_topics,
            g.read_topics,
            g.poll_messages,
            g.send_messages,
        ),
        tuple(
            wire.StreamPermissions(
                stream_id,
                s.manage_stream,
                s.read_stream,
                s.manage_topics,
                s.read_topics,
                s.poll_messages,
                s.send_messages,
                tuple(
                    wire.TopicPermissions(
                        topic_id, t.manage_topic, t.read_topic, t.poll_messages, t.send_messages
                    )
                    for topic_id, t in s.topics
                ),
            )
            for stream_id, s in permissions.streams
        ),
    )


def _user_info(user: UserInfo) -> wire.UserInfo:
    return wire.UserInfo(
        user.id, user.created_at_us, wire.UserStatus(int(user.status)), user.username
    )


def user_details(user: UserInfo) -> wire.UserDetails:
    """GET_USER / CREATE_USER reply payload (never the password hash)."""
    return wire.UserDetails(_user_info(user), wire_permissions(user.permissions))


def authenticate(state: MetadataState, client_id: int, username: str, password: str) -> Register:
    """Check a login against committed state; the ``Register`` command to propose.

    This runs on the replica the client is connected to, so credentials never cross a
    replica link; apply re-checks that the user still exists and is active.

    Raises:
        StateError: ``INVALID_CREDENTIALS`` or ``USER_INACTIVE``.
    """
    try:
        user = state.user(username)
    except StateError:
        raise StateError(ErrorCode.INVALID_CREDENTIALS) from None
    if not verify_password(user.password, password):
        raise StateError(ErrorCode.INVALID_CREDENTIALS)
    if user.status != UserStatus.ACTIVE:
        raise StateError(ErrorCode.USER_INACTIVE)
    return Register(client_id, user.id)


def _no_stream_options(options: Sequence[wire.OptionEntry]) -> None:
    # Iggy refuses option keys it does not know, and no stream option is supported here.
    if options:
        raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, options[0].key)


# Topic option keys on the wire (captured from the official SDK) and their domain fields.
_TOPIC_OPTION_KEYS: Final[dict[str, str]] = {
    "message_expiry": "message_expiry_us",
    "max_topic_size": "max_topic_size_bytes",
    "compression_algorithm": "compression",
    "segment_size": "segment_size_bytes",
    "durability": "durability",
    "consumer_offset_durability": "consumer_offset_durability",
    "messages_required_to_save": "messages_required_to_save",
    "size_of_messages_required_to_save": "size_of_messages_required_to_save_bytes",
    "preallocate_segments": "preallocate_segments",
}
_WIRE_KEY_BY_FIELD: Final = {field: key for key, field in _TOPIC_OPTION_KEYS.items()}
_UNSIGNED_KINDS: Final = (
    wire.HeaderKind.UINT8,
    wire.HeaderKind.UINT16,
    wire.HeaderKind.UINT32,
    wire.HeaderKind.UINT64,
)


def options_catalog(scope: int, segment_size_default: int) -> wire.OptionsCatalog:
    """DESCRIBE_OPTIONS: every option key a ``scope`` accepts, with the kind it is stored
    as, its default and what it does here (Iggy's layout; our keys, described as this
    broker honours them). Streams and users take no options: their catalogs are empty.

    Args:
        scope: ``wire.OptionsScope``.
        segment_size_default: The node's ``segment_size_bytes``, the default of a topic
            created without one.

    Raises:
        StateError: ``INVALID_COMMAND`` for an unknown scope, as Iggy answers it.
    """
    if scope in (wire.OptionsScope.STREAM, wire.OptionsScope.USER):
        return wire.OptionsCatalog(())
    if scope != wire.OptionsScope.TOPIC:
        raise StateError(ErrorCode.INVALID_COMMAND, f"unknown options scope {scope}")
    defaults = TopicOptions()
    kind = wire.HeaderKind

    def entry(
        key: str, value_kind: wire.HeaderKind, value: HeaderValue, text: str
    ) -> wire.OptionDescriptor:
        encoded = wire.encode_header_value(value_kind, value)
        return wire.OptionDescriptor(key, int(value_kind), encoded, text)

    return wire.OptionsCatalog(
        (
            entry(
                "compression_algorithm",
                kind.STRING,
                defaults.compression.value,
                "none or gzip: recorded and reported, messages are stored as sent",
            ),
            entry(
                "message_expiry",
                kind.UINT64,
                defaults.message_expiry_us,
                "Message expiry in microseconds, or a humantime string (e.g. 7 days); "
                "u64::MAX or never_expire: never; 0: the server default",
            ),
            entry(
                "max_topic_size",
                kind.UINT64,
                defaults.max_topic_size_bytes,
                "Topic size cap in bytes, or a byte-size string (e.g. 1 GiB); u64::MAX or "
                "unlimited: no cap; at least the segment size",
            ),
            entry(
                "segment_size",
                kind.UINT64,
                segment_size_default,
                f"Segment size in bytes, or a byte-size string (e.g. 128 MiB): a "
                f"{SEGMENT_SIZE_ALIGNMENT_BYTES}-byte multiple "
                f"within {SEGMENT_SIZE_BYTES_MIN}..={SEGMENT_SIZE_BYTES_MAX}; fixed at create",
            ),
            entry(
                "durability",
                kind.STRING,
                defaults.durability.value,
                "When a send is acknowledged: replicated (a quorum holds it) or persisted "
                "(a quorum synced it); fixed at create",
            ),
            entry(
                ENFORCE_FSYNC_KEY,
                kind.BOOL,
                defaults.durability is DomainDurability.PERSISTED,
                "true: durability persisted (acknowledged once a quorum synced the write), "
                "whatever durability says; false: durability decides; reported as durability",
            ),
            entry(
                "consumer_offset_durability",
                kind.STRING,
                defaults.consumer_offset_durability.value,
                "The same for stored consumer offsets; fixed at create",
            ),
            entry(
                "messages_required_to_save",
                kind.UINT32,
                defaults.messages_required_to_save,
                f"1..={MESSAGES_REQUIRED_TO_SAVE_MAX}: recorded and reported; the journal "
                "syncs by durability level and group commit instead",
            ),
            entry(
                "size_of_messages_required_to_save",
                kind.UINT64,
                defaults.size_of_messages_required_to_save_bytes,
                f"Bytes, at most {SIZE_REQUIRED_TO_SAVE_BYTES_MAX}: recorded and reported "
                "only, as messages_required_to_save",
            ),
            entry(
                "preallocate_segments",
                kind.BOOL,
                defaults.preallocate_segments,
                "Recorded and reported; segments are not preallocated",
            ),
        )
    )


def topic_options(options: Sequence[wire.OptionEntry]) -> TopicOptionsPatch:
    """The options patch an options block asks for.

    A numeric 0 means "server default", as in Iggy, and is the same as leaving the key
    out. Unknown keys are refused, as Iggy refuses them.

    Raises:
        StateError: ``UNSUPPORTED_OPTION_KEY`` or ``INVALID_OPTION_VALUE``.
    """
    values: dict[str, Any] = {}
    enforced = False
    for option in options:
        field = _TOPIC_OPTION_KEYS.get(option.key)
        if field is None and option.key != ENFORCE_FSYNC_KEY:
            raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, option.key)
        try:
            value = wire.decode_header_value(option.kind, option.value)
        except wire.ProtocolError:
            raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key) from None
        if field is None:
            # Iggy's key for syncing writes: true asks for at least `persisted`.
            enforced = enforced or _bool_option(option, value)
        elif field in ("durability", "consumer_offset_durability"):
            values[field] = _enum_option(DomainDurability, option, value)
        elif field == "compression":
            values[field] = _enum_option(DomainCompression, option, value)
        elif field == "preallocate_segments":
            values[field] = _bool_option(option, value)
        else:
            number = _number_option(field, option, value)
            if number != 0:
                values[field] = number
    if enforced:
        # Stronger than any durability it meets: the official SDK always sends one.
        values["durability"] = DomainDurability.PERSISTED
    return TopicOptionsPatch(**values)


ENFORCE_FSYNC_KEY: Final = "enforce_fsync"
"""Iggy's topic option for syncing each write. true makes the topic's durability
``persisted`` (a send is acknowledged once a quorum synced it), whatever ``durability``
says, since the official SDK sends ``durability`` on every create; false leaves
``durability`` to decide. Reported as ``durability``."""


_EXPIRY_NEVER_WORDS: Final = frozenset({"unlimited", "none", "None", "Unlimited", "never_expire"})
_SERVER_DEFAULT_WORDS: Final = frozenset({"default", "server_default", "Default", "Server_default"})
_SIZE_ZERO_WORDS: Final = frozenset({"0", "unlimited", "Unlimited", "none", "None"})
_SIZE_FIELDS: Final = frozenset(
    {"max_topic_size_bytes", "segment_size_bytes", "size_of_messages_required_to_save_bytes"}
)
_DURATION_SECONDS_MAX: Final = (1 << 32) - 1
"""Iggy's bound on an expiry given as text: u32::MAX seconds."""


def _bool_option(option: wire.OptionEntry, value: object) -> bool:
    """A Bool, or the text ``true`` / ``false`` (exactly, as Rust parses a bool)."""
    if option.kind == wire.HeaderKind.BOOL and isinstance(value, bool):
        return value
    if option.kind == wire.HeaderKind.STRING and value in ("true", "false"):
        return value == "true"
    raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)


def _number_option(field: str, option: wire.OptionEntry, value: object) -> int:
    """An unsigned integer option, given typed or as text the way Iggy reads it: a
    duration for the expiry, a byte size for sizes, digits for a count. 0 means the server
    default."""
    if option.kind in _UNSIGNED_KINDS and isinstance(value, int):
        return value
    if option.kind != wire.HeaderKind.STRING or not isinstance(value, str):
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)
    parsed = _number_from_text(field, value)
    if parsed is None:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)
    return parsed


def _number_from_text(field: str, text: str) -> int | None:
    if field == "message_expiry_us":
        if text in _EXPIRY_NEVER_WORDS:
            return EXPIRY_NEVER
        if text in _SERVER_DEFAULT_WORDS:
            return 0
        micros = parse_duration_us(text)
        if micros is None or micros // 1_000_000 > _DURATION_SECONDS_MAX:
            return None
        return micros
    if field == "max_topic_size_bytes":
        if text == "unlimited":
            return SIZE_UNLIMITED
        if text == "server_default":
            return 0
    if field in _SIZE_FIELDS:
        return 0 if text in _SIZE_ZERO_WORDS else parse_size_bytes(text)
    # A count: digits, as Rust parses a u32 (a leading + allowed).
    digits = text[1:] if text.startswith("+") else text
    if not digits.isascii() or not digits.isdigit() or int(digits) > U32_MAX:
        return None
    return int(digits)


def _enum_option(
    kind: type[DomainDurability] | type[DomainCompression],
    option: wire.OptionEntry,
    value: object,
) -> DomainDurability | DomainCompression:
    if option.kind != wire.HeaderKind.STRING or not isinstance(value, str):
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)
    try:
        return kind(value.lower())
    except ValueError:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key) from None


def _topic_option_entries(
    options: TopicOptions, names: Sequence[str]
) -> tuple[wire.OptionEntry, ...]:
    """Option entries for ``names``, in the wire's (sorted) key order, kinds as the SDK
    sends them."""
    entries: list[wire.OptionEntry] = []
    for name in sorted(names, key=lambda field: _WIRE_KEY_BY_FIELD[field]):
        key = _WIRE_KEY_BY_FIELD[name]
        value = getattr(options, name)
        if isinstance(value, DomainDurability | DomainCompression):
            entries.append(wire.OptionEntry.of(key, value.value, wire.HeaderKind.STRING))
        elif isinstance(value, bool):
            entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.BOOL))
        elif name == "messages_required_to_save":
            entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.UINT32))
        else:
            entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.UINT64))
    return tuple(entries)


# =======================================================================================
# Reply payloads for metadata records.


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """What the host knows about a partition's stored data (not replicated state)."""

    segments_count: int = PARTITION_SEGMENTS_AT_CREATION
    current_offset: int = 0
    size_bytes: int = 0
    messages_count: int = 0


StatsSource = Callable[[int, int, int], PartitionStats]
"""``(stream_id, topic_id, partition_id) -> PartitionStats`` supplied by the runtime."""


def _fresh(stream_id: int, topic_id: int, partition_id: int) -> PartitionStats:
    del stream_id, topic_id, partition_id
    return PartitionStats()


_COMPRESSION_CODE: Final = {DomainCompression.NONE: 1, DomainCompression.GZIP: 2}


def _topic_details(topic: TopicInfo, stats: StatsSource) -> wire.TopicDetails:
    partitions = tuple((p, stats(topic.stream_id, topic.id, p.id)) for p in topic.partitions)
    derived = [name for name in _WIRE_KEY_BY_FIELD if name not in topic.explicit_options]
    return wire.TopicDetails(
        wire.TopicInfo(
            id=topic.id,
            created_at=topic.created_at_us,
            partitions_count=topic.partitions_count,
            message_expiry=topic.options.message_expiry_us,
            compression_algorithm=_COMPRESSION_CODE[topic.options.compression],
            max_topic_size=topic.options.max_topic_size_bytes,
            size_bytes=sum(s.size_bytes for _, s in partitions),
            messages_count=sum(s.messages_count for _, s in partitions),
            name=topic.name,
            options=_topic_option_entries(topic.options, topic.explicit_options),
            derived_options=_topic_option_entries(topic.options, derived),
        ),
        tuple(
            wire.PartitionInfo(
                id=p.id,
                created_at=p.created_at_us,
                segments_count=s.segments_count,
                current_offset=s.current_offset,
                size_bytes=s.size_bytes,
                messages_count=s.messages_count,
            )
            for p, s in partitions
        ),
    )


def _stream_details(stream: StreamInfo, stats: StatsSource) -> wire.StreamDetails:
    topics = tuple(_topic_details(topic, stats) for topic in stream.topics)
    return wire.StreamDetails(
        wire.StreamInfo(
            id=stream.id,
            created_at=stream.created_at_us,
            topics_count=len(topics),
            size_bytes=sum(t.topic.size_bytes for t in topics),
            messages_count=sum(t.topic.messages_count for t in topics),
            name=stream.name,
        ),
        tuple(t.topic for t in topics),
    )


def _group_details(group: ConsumerGroupInfo) -> wire.ConsumerGroupDetails:
    return wire.ConsumerGroupDetails(
        wire.ConsumerGroupInfo(group.id, group.partitions_count, len(group.members), group.name),
        tuple(wire.ConsumerGroupMember(m.member_id, m.partitions) for m in group.members),
    )


def metadata_reply(operation: int, result: MetadataResult) -> bytes:
    """The reply body of a committed metadata op (deterministic in its arguments)."""
    if operation == Operation.LOGOUT:
        return b""  # Logout replies are not result-framed and carry nothing
    match result:
        case Rejected(code):
            return wire.result_rejected(int(code))
        case Done():
            return wire.result_ok()
        case StreamCreated(stream):
            return wire.result_ok(_stream_details(stream, _fresh).encode())
        case TopicCreated(topic):
            return wire.result_ok(_topic_details(topic, _fresh).encode())
        case ConsumerGroupCreated(group):
            return wire.result_ok(_group_details(group).encode())
        case Registered(user_id, session):
            reply = wire.LoginRegisterReply(user_id, session, wire.PROTOCOL_VERSION, SERVER_VERSION)
            return wire.result_ok(reply.encode())
        case UserCreated(user):
            return wire.result_ok(user_details(user).encode())


# =======================================================================================
# The metadata group's state machine.


class MetadataMachine:
    """The metadata group's ``StateMachine``: committed prepares in, reply bodies out."""

    def __init__(self, state: MetadataState | None = None) -> None:
        self.state = state if state is not None else MetadataState()
        self.last_result: MetadataResult | None = None
        """The typed result of the last applied op, for the runtime's bookkeeping
        (reconciling partition groups, logging); never part of replicated state."""

    def prepare(
        self, op: int, operation: int, body: bytes, timestamp_us: int, frontier: int
    ) -> Prepared:
        """Metadata bodies are final when proposed: the runtime has already decoded the
        request, checked it and drawn any salt, so the body passes through unchanged.

        One check is made here, on the primary against committed state, so that it never
        enters the log: a register of a client id that holds a live session of another
        user is refused (``CLIENT_ID_TAKEN_STATUS``). Committed, even as a rejection, it
        would move the client table's entry of that client id to a new session and so
        evict the owner.

        Raises:
            RequestRejected: the register would take over another user's client id.
        """
        del op, timestamp_us
        if operation == Operation.REGISTER:
            command = decode_command(operation, body)
            assert isinstance(command, Register)
            held = self.state.session_of_client(command.client_id)
            if held is not None and held.user_id != command.user_id:
                raise RequestRejected(
                    int(CLIENT_ID_TAKEN_STATUS), "the client id holds another user's session"
                )
        return Prepared(body=body, frontier=frontier)

    def apply(self, prepare: Prepare) -> bytes:
        header = prepare.header
        command = decode_command(header.operation, prepare.body)
        system = header.operation in SYSTEM_OPERATIONS or header.operation == Operation.REGISTER
        session = None if system else header.session
        result = self.state.apply(command, _context(header.op, header.timestamp_us, session))
        self.last_result = result
        return metadata_reply(header.operation, result)

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, snapshot: bytes) -> None:
        self.state = MetadataState.restore(snapshot)
        self.last_result = None

    def session_live(self, client_id: int, session: int) -> bool:
        """Whether ``client_id`` still holds ``session`` (the client table's question
        about a repeated register: answered from the table while the session lives, run
        again once it ended or if the register opened none)."""
        held = self.state.session_of_client(client_id)
        return held is not None and held.session == session

    # -- reads -----------------------------------------------------------------------------

    def get_stream(
        self, request: wire.StreamRef, session: int, stats: StatsSource = _fresh
    ) -> bytes:
        found = self._maybe(lambda: self.state.stream(request.stream_id.value))
        if found is None:
            return NOT_FOUND
        self._require(session, Action.READ_STREAM, found.id)
        return _stream_details(found, stats).encode()

    def get_streams(self, session: int, stats: StatsSource = _fresh) -> bytes:
        self._require(session, None)
        visible = tuple(
            _stream_details(s, stats).stream
            for s in self.state.streams()
            if self.state.permits(session, Action.READ_STREAM, s.id) is None
        )
        return wire.Streams(visible).encode()

    def get_topic(self, request: wire.TopicRef, session: int, stats: StatsSource = _fresh) -> bytes:
        found = self._maybe(
            lambda: self.state.topic(request.stream_id.value, request.topic_id.value)
        )
        if found is None:
            return NOT_FOUND
        self._require(session, Action.READ_TOPIC, found.stream_id, found.id)
        return _topic_details(found, stats).encode()

    def get_topics(
        self, request: wire.StreamRef, session: int, stats: StatsSource = _fresh
    ) -> bytes:
        found = self._maybe(lambda: self.state.topics(request.stream_id.value))
        if found is None:
            return NOT_FOUND
        self._require(session, None)
        visible = tuple(
            _topic_details(t, stats).topic
            for t in found
            if self.state.permits(session, Action.READ_TOPIC, t.stream_id, t.id) is None
        )
        return wire.Topics(visible).encode()

    def get_consumer_group(self, request: wire.GroupRef, session: int) -> bytes:
        found = self._maybe(
            lambda: self.state.consumer_group(
                request.stream_id.value, request.topic_id.value, request.group_id.value
            )
        )
        if found is None:
            return NOT_FOUND
        self._require(session, Action.READ_TOPIC, found.stream_id, found.topic_id)
        return _group_details(found).encode()

    def get_consumer_groups(self, request: wire.TopicRef, session: int) -> bytes:
        stream_id, topic_id = self.state.resolve_ids(
            request.stream_id.value, request.topic_id.value
        )
        assert topic_id is not None
        self._require(session, Action.READ_TOPIC, stream_id, topic_id)
        groups = self.state.consumer_groups(stream_id, topic_id)
        return wire.ConsumerGroups(
            tuple(
                wire.ConsumerGroupInfo(g.id, g.partitions_count, len(g.members), g.name)
                for g in groups
            )
        ).encode()

    def sync_consumer_group(self, request: wire.GroupRef, session: int) -> bytes:
        """The caller's assignment and generation; empty when it is not a member."""
        group = self.state.consumer_group(
            request.stream_id.value, request.topic_id.value, request.group_id.value
        )
        self._require(session, Action.READ_TOPIC, group.stream_id, group.topic_id)
        for member in group.members:
            if member.session == session:
                return wire.ConsumerGroupAssignment(group.generation, member.partitions).encode()
        return NOT_FOUND

    def get_user(self, request: wire.UserRef, session: int) -> bytes:
        """A user's details: one's own always, anyone else's with ``read_users``."""
        found = self._maybe(lambda: self.state.user(request.user_id.value))
        actor = self.state.session(session)
        if found is None or found.id != actor.user_id:
            self._require(session, Action.READ_USERS)
        if found is None:
            return NOT_FOUND
        return user_details(found).encode()

    def get_users(self, session: int) -> bytes:
        self._require(session, Action.READ_USERS)
        return wire.Users(tuple(_user_info(u) for u in self.state.users())).encode()

    def get_me(self, session: int, transport: int, address: str) -> bytes:
        info = self.state.session(session)
        return wire.ClientInfoDetails(
            client_id=info.number,
            user_id=info.user_id,
            transport=transport,
            address=address,
            consumer_groups=tuple(
                wire.ClientConsumerGroup(s, t, g) for s, t, g in self.state.memberships(session)
            ),
        ).encode()

    def get_clients(self, session: int, clients: Sequence[ClientConnection]) -> bytes:
        """GET_CLIENTS: every connection of this node, with ``read_servers`` (as Iggy)."""
        self._require(session, Action.READ_SERVERS)
        memberships = self.state.memberships_by_session()
        infos = []
        for client in clients:
            info = self._client_session(client.session)
            groups = [] if info is None else memberships.get(info.session, [])
            infos.append(_client_info(info, client, len(groups)))
        return wire.Clients(tuple(infos)).encode()

    def get_client(
        self, request: wire.ClientRef, session: int, clients: Sequence[ClientConnection]
    ) -> bytes:
        """GET_CLIENT: the first connection whose client number is the one asked for, with
        its consumer groups; empty when none is (0, a connection not logged in, is never
        found)."""
        self._require(session, Action.READ_SERVERS)
        for client in clients:
            info = self._client_session(client.session)
            if info is None or info.number != request.client_id:
                continue
            return wire.ClientInfoDetails(
                client_id=info.number,
                user_id=info.user_id,
                transport=client.transport,
                address=client.address,
                consumer_groups=tuple(
                    wire.ClientConsumerGroup(s, t, g)
                    for s, t, g in self.state.memberships(info.session)
                ),
            ).encode()
        return NOT_FOUND

    def _client_session(self, session: int) -> SessionInfo | None:
        """The live session a connection acts in; None before a login or once it ended."""
        if session == 0:
            return None
        try:
            return self.state.session(session)
        except StateError:
            return None

    def _require(
        self,
        session: int,
        action: Action | None,
        stream_id: int | None = None,
        topic_id: int | None = None,
    ) -> None:
        if action is None:
            self.state.session(session)  # any live session may list what it can see
            return
        code = self.state.permits(session, action, stream_id, topic_id)
        if code is not None:
            raise StateError(code)

    @staticmethod
    def _maybe(read: Callable[[], _T]) -> _T | None:
        try:
            return read()
        except StateError as error:
            if error.code in _NOT_FOUND_CODES:
                return None
            raise


_NOT_FOUND_CODES: Final = (
    ErrorCode.RESOURCE_NOT_FOUND,
    ErrorCode.STREAM_ID_NOT_FOUND,
    ErrorCode.TOPIC_ID_NOT_FOUND,
    ErrorCode.CONSUMER_GROUP_ID_NOT_FOUND,
)


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """One connection of a node, as GET_CLIENT(S) report it."""

    session: int
    """The session it acts in (0 before a login)."""
    transport: int
    address: str


def _client_info(
    info: SessionInfo | None, client: ClientConnection, groups: int
) -> wire.ClientInfo:
    if info is None:
        return wire.ClientInfo(0, wire.CLIENT_NO_USER, client.transport, client.address, 0)
    return wire.ClientInfo(info.number, info.user_id, client.transport, client.address, groups)


def _context(op: int, timestamp_us: int, session: int | None) -> ApplyContext:
    return ApplyContext(op=op, timestamp_us=timestamp_us, session=session)


# =======================================================================================
# Routing partition requests (admission and reads, against committed metadata).


@dataclass(frozen=True, slots=True)
class PartitionRoute:
    """Where a partition request goes, and whose offset it reads or writes."""

    stream_id: int
    topic_id: int
    partition_id: int
    consumer: ConsumerKey | None = None


def route_send(
    state: MetadataState, request: wire.SendMessages, session: int, balanced_counter: int
) -> PartitionRoute:
    """The partition a send goes to; ``balanced_counter`` is the runtime's per-topic
    round-robin counter (local, as in Iggy), consulted only for balanced sends.

    Raises:
        StateError: unknown stream, topic or partition, no partitions, or no permission.
    """
    topic = state.topic(request.stream_id.value, request.topic_id.value)
    _require(state, session, Action.SEND_MESSAGES, topic.stream_id, topic.id)
    count = topic.partitions_count
    if count == 0:
        raise StateError(ErrorCode.NO_PARTITIONS)
    match request.partitioning:
        case wire.PartitionId(partition_id):
            if partition_id >= count:
                raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(partition_id))
        case wire.MessagesKey() as by_key:
            partition_id = by_key.partition(count)
        case wire.Balanced():
            partition_id = balanced_counter % count
    return PartitionRoute(topic.stream_id, topic.id, partition_id)


def route_poll(state: MetadataState, request: wire.PollMessages, session: int) -> PartitionRoute:
    """The partition and offset owner of a poll.

    A consumer without a partition reads partition 0. A consumer group member must be a
    member; without a partition it reads the first partition assigned to it, and with
    one it must own that partition in the current generation.

    Raises:
        StateError: unknown objects, no permission, not a member, or a partition the
            member does not own.
    """
    return _route_owned(
        state,
        request.consumer,
        request.stream_id,
        request.topic_id,
        request.partition_id,
        session,
        owned_only=True,
    )


def route_poll_target(
    state: MetadataState, request: wire.PollMessages, session: int
) -> PartitionRoute:
    """The partition a poll reads, without judging the group assignment: where an
    auto-commit poll is routed to, the node that serves it judges the assignment.

    Raises:
        StateError: unknown objects, no permission, or a group member without a
            partition that owns none.
    """
    return _route_owned(
        state,
        request.consumer,
        request.stream_id,
        request.topic_id,
        request.partition_id,
        session,
        owned_only=False,
    )


def route_offset(
    state: MetadataState,
    request: wire.GetConsumerOffset | wire.StoreConsumerOffset | wire.DeleteConsumerOffset,
    session: int,
) -> PartitionRoute:
    """The partition and offset owner of a get/store/delete consumer offset request.

    Unlike a poll, a group's offset of an explicit partition may be read or written by a
    session that does not own it (an old owner committing after a rebalance, a tool);
    without a partition, the session's first assigned partition is meant.
    """
    return _route_owned(
        state,
        request.consumer,
        request.stream_id,
        request.topic_id,
        request.partition_id,
        session,
        owned_only=False,
    )


def _route_owned(
    state: MetadataState,
    consumer: wire.Consumer,
    stream: wire.Identifier,
    topic_ident: wire.Identifier,
    partition_id: int | None,
    session: int,
    *,
    owned_only: bool,
) -> PartitionRoute:
    topic = state.topic(stream.value, topic_ident.value)
    _require(state, session, Action.POLL_MESSAGES, topic.stream_id, topic.id)
    if consumer.kind == wire.ConsumerKind.CONSUMER_GROUP:
        group = state.consumer_group(topic.stream_id, topic.id, consumer.id.value)
        key = ConsumerKey(ConsumerKind.CONSUMER_GROUP, group.id)
        if owned_only or partition_id is None:
            _, owned = state.assignment(topic.stream_id, topic.id, group.id, session)
            if partition_id is None:
                if not owned:
                    raise StateError(ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED)
                partition_id = owned[0]
            elif partition_id not in owned:
                raise StateError(ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED, str(partition_id))
    else:
        key = ConsumerKey(ConsumerKind.CONSUMER, consumer.id.value)
        partition_id = 0 if partition_id is None else partition_id
    if partition_id >= topic.partitions_count:
        raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(partition_id))
    return PartitionRoute(topic.stream_id, topic.id, partition_id, key)


def _require(
    state: MetadataState, session: int, action: Action, stream_id: int, topic_id: int
) -> None:
    code = state.permits(session, action, stream_id, topic_id)
    if code is not None:
        raise StateError(code)


# =======================================================================================
# A partition group's state machine.


class _LogView:
    """Adapts the consensus log (prepares) to :class:`broker.state.partition.PartitionLog`."""

    def __init__(self, log: Log) -> None:
        self._log = log

    def read(self, op: int) -> tuple[int, Buffer]:
        prepare = self._log.read(op)
        assert prepare is not None, f"op {op} is not in the log"
        return prepare.header.operation, prepare.body


class PartitionMachine:
    """One partition group's ``StateMachine``, plus the primary-side ``prepare`` hook.

    Client request bodies (what ``prepare`` receives) are Iggy wire payloads of
    SEND_MESSAGES and DELETE_CONSUMER_OFFSET, routed here by the runtime, and of
    STORE_CONSUMER_OFFSET behind the user id it is charged to (:data:`STORE_USER`);
    consumer groups in them must already name the group by numeric id (see
    :func:`resolved_offset_request`). ``TRUNCATE_PARTITION`` carries :func:`purge_body`.
    """

    def __init__(self, stream_id: int, topic_id: int, partition_id: int, log: Log) -> None:
        self._log = _LogView(log)
        self._consensus_log = log
        self.state = PartitionState(stream_id, topic_id, partition_id, self._log)

    # -- primary ---------------------------------------------------------------------------

    def prepare(
        self, op: int, operation: int, body: bytes, timestamp_us: int, frontier: int
    ) -> Prepared:
        """The prepare body for a client request that will be op ``op``.

        Raises:
            RequestRejected: the request is invalid (its code goes in the reply status).
        """
        try:
            prepared = self.state.prepare(op, partition_request(operation, body), timestamp_us)
        except StateError as error:
            raise RequestRejected(int(error.code), str(error)) from error
        return Prepared(body=prepared, frontier=frontier)

    # -- every replica ---------------------------------------------------------------------

    def check_prepared(self, prepare: Prepare) -> ErrorCode | None:
        """A backup's check that a prepare continues its log (None when it does)."""
        header = prepare.header
        return self.state.check_prepared(header.op, header.operation, prepare.body)

    def apply(self, prepare: Prepare) -> bytes:
        header = prepare.header
        result = self.state.apply(header.op, header.operation, prepare.body)
        match result:
            case Appended(base_offset, _):
                confirmation = wire.SendConfirmation(
                    self.state.stream_id, self.state.topic_id, self.state.partition_id, base_offset
                )
                return wire.SendMessagesReply((confirmation,)).encode()
            case Refused(code):
                return wire.result_rejected(int(code))
            case Applied():
                if header.operation == Operation.TRUNCATE_PARTITION:
                    return b""
                return wire.result_ok()

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def restore(self, snapshot: bytes) -> None:
        state = PartitionState.restore(snapshot, self._log)
        assert (state.stream_id, state.topic_id, state.partition_id) == (
            self.state.stream_id,
            self.state.topic_id,
            self.state.partition_id,
        ), "a snapshot of another partition"
        self.state = state
        self.rebuild_index()

    def rebuild_index(self) -> None:
        """Index the committed batches the log holds below what is indexed, down to the
        first record it cannot read: after a restore, and after damaged committed records
        below the checkpoint were repaired from a peer (the ops above the hole are indexed
        already; some may be applied but not yet on disk)."""
        indexed = self.state.indexed_op_min()
        op = self.state.commit_op if indexed is None else indexed - 1
        ops: list[int] = []
        while op >= 1 and self._consensus_log.read(op) is not None:
            ops.append(op)
            op -= 1
        self.state.index_older([(op, *self._log.read(op)) for op in reversed(ops)])

    # -- reads -----------------------------------------------------------------------------

    def poll(
        self, request: wire.PollMessages, consumer: ConsumerKey
    ) -> tuple[list[Buffer], int | None]:
        """The reply body (as parts to send in order) and, with auto-commit, the offset
        the runtime should store for ``consumer`` with a ``StoreConsumerOffset``.

        Raises:
            StateError: an invalid count or strategy.
        """
        result = self.state.poll(
            consumer,
            PollingKind(int(request.strategy.kind)),
            request.strategy.value,
            request.count,
            auto_commit=request.auto_commit,
        )
        parts = wire.poll_reply_parts(self.state.partition_id, result.current_offset, result.slices)
        return parts, result.store_offset

    def get_consumer_offset(self, consumer: ConsumerKey) -> bytes:
        """GET_CONSUMER_OFFSET reply; empty when the consumer has stored no offset."""
        stored = self.state.consumer_offset(consumer)
        if stored is None:
            return NOT_FOUND
        return wire.ConsumerOffsetInfo(
            self.state.partition_id, self.state.current_offset, stored
        ).encode()


def partition_request(operation: int, body: bytes) -> PartitionRequest:
    """The domain request a partition-plane client body carries.

    Raises:
        StateError: a malformed body, or an operation the partition plane does not take.
    """
    try:
        if operation == Operation.SEND_MESSAGES:
            send = wire.SendMessages.decode(body)
            if send.messages_count != _message_count(send.batch):
                raise StateError(ErrorCode.INVALID_MESSAGES_COUNT)
            return SendMessages(send.batch)
        if operation == Operation.STORE_CONSUMER_OFFSET:
            # Built by a node (ours, or a peer's over the authenticated bus), never a
            # client's bytes: a body without its user is a bug.
            assert len(body) >= STORE_USER.size, "a store request names its user"
            (user_id,) = STORE_USER.unpack_from(body, 0)
            store = wire.StoreConsumerOffset.decode(body[STORE_USER.size :])
            return StoreConsumerOffset(_consumer_key(store.consumer), store.offset, user_id)
        if operation == Operation.DELETE_CONSUMER_OFFSET:
            delete = wire.DeleteConsumerOffset.decode(body)
            return DeleteConsumerOffset(_consumer_key(delete.consumer))
        if operation == Operation.TRUNCATE_PARTITION:
            generation = cbor2.loads(body)
            assert isinstance(generation, int) and generation >= 0, "purge body is ours"
            return PurgePartition(generation)
    except wire.ProtocolError as error:
        raise StateError(_code(int(error.code)), error.reason) from error
    raise StateError(ErrorCode.INVALID_COMMAND, f"operation {operation} is not a partition op")


def purge_body(generation: int) -> bytes:
    """The body of a ``TRUNCATE_PARTITION`` request ordering a purge of ``generation``."""
    return cbor2.dumps(generation)


STORE_USER: Final = struct.Struct(
    "<I"  # the user id a new stored offset is charged to
)
"""What a STORE_CONSUMER_OFFSET request body for :class:`PartitionMachine` starts with;
the Iggy wire payload follows."""
assert STORE_USER.size == 4


def resolved_offset_request(
    request: wire.StoreConsumerOffset | wire.DeleteConsumerOffset,
    route: PartitionRoute,
    user_id: int,
) -> bytes:
    """The request body with its consumer group named by numeric id and its partition
    explicit, as :class:`PartitionMachine` takes it; a store is charged to ``user_id``
    (the user of the session it acts for), a delete frees whoever's charge it was."""
    assert route.consumer is not None
    consumer = wire.Consumer(
        wire.ConsumerKind(int(route.consumer.kind)), wire.Identifier(route.consumer.id)
    )
    if isinstance(request, wire.StoreConsumerOffset):
        return (
            STORE_USER.pack(user_id)
            + wire.StoreConsumerOffset(
                consumer,
                wire.Identifier(route.stream_id),
                wire.Identifier(route.topic_id),
                route.partition_id,
                request.offset,
                request.ack,
            ).encode()
        )
    return wire.DeleteConsumerOffset(
        consumer,
        wire.Identifier(route.stream_id),
        wire.Identifier(route.topic_id),
        route.partition_id,
        request.ack,
    ).encode()


def store_offset_body(route: PartitionRoute, offset: int, user_id: int) -> bytes:
    """A STORE_CONSUMER_OFFSET body for a poll's auto-commit, charged to ``user_id`` (the
    polling user: the node's own client only carries it)."""
    assert route.consumer is not None
    consumer = wire.Consumer(
        wire.ConsumerKind(int(route.consumer.kind)), wire.Identifier(route.consumer.id)
    )
    return (
        STORE_USER.pack(user_id)
        + wire.StoreConsumerOffset(
            consumer,
            wire.Identifier(route.stream_id),
            wire.Identifier(route.topic_id),
            route.partition_id,
            offset,
            wire.AckLevel.NO_ACK,
        ).encode()
    )


def _consumer_key(consumer: wire.Consumer) -> ConsumerKey:
    return ConsumerKey(ConsumerKind(int(consumer.kind)), consumer.id.value)


def _message_count(batch: Buffer) -> int:
    if len(batch) < BATCH_HEADER_SIZE:
        return -1
    count: int = BATCH_HEADER.unpack_from(batch, 0)[6]
    return count


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.INVALID_FORMAT


__all__ = [
    "NOT_FOUND",
    "SERVER_VERSION",
    "STORE_USER",
    "MetadataMachine",
    "PartitionMachine",
    "PartitionRoute",
    "PartitionStats",
    "StatsSource",
    "authenticate",
    "metadata_command",
    "metadata_reply",
    "partition_request",
    "purge_body",
    "resolved_offset_request",
    "route_offset",
    "route_poll",
    "route_send",
    "store_offset_body",
    "topic_options",
]
