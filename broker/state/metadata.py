"""The metadata state machine: streams, topics, partitions, users, sessions, consumer groups.

This is the state the metadata group replicates. It is a pure domain model: typed commands
go in through :meth:`MetadataState.apply`, typed results come out, and nothing here knows
the Iggy wire format (``admission.py`` and ``metadata_machine.py`` translate). Every
replica applies the same committed commands in the same order and therefore holds the
same state, byte for byte in its snapshot.

Invariants:

1. Determinism: :meth:`MetadataState.apply` is a function of (state, command, context).
   Time is ``ApplyContext.timestamp_us`` (the prepare's timestamp, chosen by the primary);
   the session number is ``ApplyContext.op``; salts and hashes arrive inside the command.
   Nothing iterates a set; every listing is ordered by id.
2. Atomicity: a command either applies completely or is rejected with no effect. Handlers
   resolve and validate everything before the first mutation.
3. Ids are server-assigned, 0-based and never reused: streams, topics (per stream), users
   and consumer groups (per topic) each take the next value of a counter that only grows.
   A recreated name therefore never inherits an old id's partition logs, consumer offsets
   or permissions. Partition ids are the exception, as in Iggy: a topic's partitions are
   always ``0..count-1`` (create appends, delete removes the last N); ``created_op`` tells
   a recreated partition from its predecessor.
4. Names are unique: stream names in the server, topic names in their stream, consumer
   group names in their topic, usernames in the server. The name indexes always agree
   with the entities (checked by :meth:`MetadataState.check_invariants`).
5. A session is the op number of the ``Register`` that created it. A client id holds at
   most one session; registering again ends the previous one. Ending a session (logout,
   re-register, user deletion, eviction) removes it from every consumer group.
   A personal access token is held as a hash only (the node that admitted its creation
   drew the raw token and shows it to its client once); it belongs to one user, is unique
   by name for that user and by hash for the server, and dies with its user. An expired
   token opens no session and is removed by the system command ``ExpireTokens``.
6. Consumer group assignment is stored and moves cooperatively, as Iggy's: every partition
   of the topic has exactly one owner while the group has members. A partition nobody
   owns (new, or its owner left) goes at once to the least loaded member; a partition
   that must move from a live member to balance the group is first *revoking*: its owner
   keeps it (may store offsets for it, may not poll it) until every node reported that
   nothing it served the owner is uncommitted (``RevocationDrained``), or the primary's
   ``ExpireRevocations`` finds it older than the rebalancing timeout; only then does the
   target own it. So no two members ever own one partition. Each change to the members,
   to the topic's partition count or to an assignment bumps the group's generation.
7. Bounds: every table has a named maximum, checked before anything is added.

Theory of operation: the runtime decodes a client request into a command
(``admission.py``), the primary fills in what must be chosen once (password hashes, the
root user), consensus commits it, and every replica calls ``apply(command, ctx)`` in op
order. The same resolution and permission helpers back the read-side queries
(``stream()``, ``topics()``, ``consumer_group()``...) that the runtime serves from
committed local state, and :meth:`authorize` lets the runtime refuse a request before
proposing it. Apply checks permissions again on committed state, because permissions may
change between admission and commit; both checks read the same committed state, so every
replica agrees.

The snapshot codec lives beside this module (``snapshot.py``) and imports it, never the
other way round: it reads the state through :meth:`MetadataState.contents` (the counters
and the entity tables, nothing derived) and rebuilds one through
:meth:`MetadataState.from_contents`, which derives every index again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from enum import Enum, IntEnum
from typing import Any, TypeAlias

from broker.state.credentials import TOKEN_HASH_SIZE_BYTES, PasswordHash
from broker.state.errors import ErrorCode, StateError
from broker.state.permissions import (
    Action,
    Permissions,
    permits,
    root_permissions,
)

Ident: TypeAlias = int | str
"""An Iggy identifier: a numeric id or a name."""

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1

# Bounds. Streams and users are cheap; partitions are not (each is a consensus group on
# every node), so they have both a per-topic and a server-wide limit.
STREAMS_MAX = 65_536
TOPICS_PER_STREAM_MAX = 4_096
PARTITIONS_PER_REQUEST_MAX = 1_000
PARTITIONS_PER_TOPIC_MAX = 100_000
PARTITIONS_TOTAL_MAX = 100_000
USERS_MAX = 10_000
SESSIONS_MAX = 8_192
#: Sessions one user holds at most: a login beyond it ends that user's oldest session,
#: never another user's. A fixed bound, not a setting: every replica must agree on it.
SESSIONS_PER_USER_MAX = 1_024
CONSUMER_GROUPS_PER_TOPIC_MAX = 4_096
NAME_SIZE_BYTES_MAX = 255
USERNAME_LENGTH_MIN = 3
USERNAME_LENGTH_MAX = 50
#: Iggy's bounds on personal access tokens: ``max_tokens_per_user`` (its default; fixed
#: here, every replica must agree) and the name length in UTF-8 bytes.
TOKENS_PER_USER_MAX = 100
TOKEN_NAME_SIZE_BYTES_MIN = 3
TOKEN_NAME_SIZE_BYTES_MAX = 30

# Topic option values and defaults (Iggy's option catalog, ``reference/iggy.md`` §3.6).
EXPIRY_NEVER = U64_MAX
SIZE_UNLIMITED = U64_MAX
SEGMENT_SIZE_BYTES_MIN = 1 << 20
SEGMENT_SIZE_BYTES_MAX = 1 << 30
SEGMENT_SIZE_ALIGNMENT_BYTES = 512

MESSAGES_REQUIRED_TO_SAVE_DEFAULT = 1024
MESSAGES_REQUIRED_TO_SAVE_MAX = 16 * 1024 * 1024
SIZE_REQUIRED_TO_SAVE_BYTES_DEFAULT = 1 << 20
SIZE_REQUIRED_TO_SAVE_BYTES_MAX = 1 << 30


class Durability(Enum):
    """When a write is acknowledged: after a quorum holds it, or after a quorum synced it."""

    REPLICATED = "replicated"
    PERSISTED = "persisted"


class Compression(Enum):
    """A placeholder option, as in Iggy: recorded and reported, never applied."""

    NONE = "none"
    GZIP = "gzip"


class UserStatus(IntEnum):
    """Iggy's user status codes."""

    ACTIVE = 1
    INACTIVE = 2


@dataclass(frozen=True, slots=True)
class TopicOptions:
    """A topic's resolved options (Iggy's topic option catalog).

    ``EXPIRY_NEVER`` and ``SIZE_UNLIMITED`` mean "none". The flush thresholds and
    ``preallocate_segments`` are recorded and reported for compatibility; this broker's
    journal syncs by durability level and group commit instead.
    """

    message_expiry_us: int = EXPIRY_NEVER
    max_topic_size_bytes: int = SIZE_UNLIMITED
    compression: Compression = Compression.NONE
    segment_size_bytes: int = SEGMENT_SIZE_BYTES_MAX
    durability: Durability = Durability.REPLICATED
    consumer_offset_durability: Durability = Durability.REPLICATED
    messages_required_to_save: int = MESSAGES_REQUIRED_TO_SAVE_DEFAULT
    size_of_messages_required_to_save_bytes: int = SIZE_REQUIRED_TO_SAVE_BYTES_DEFAULT
    preallocate_segments: bool = False


TOPIC_OPTION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(TopicOptions))
"""Option field names in a fixed order (snapshots and explicit-key lists use it)."""
UPDATABLE_TOPIC_OPTIONS = ("message_expiry_us", "max_topic_size_bytes", "compression")
"""The options an update may change; the others are fixed at creation."""


@dataclass(frozen=True, slots=True)
class TopicOptionsPatch:
    """Options given in a request; ``None`` means "not given" (a default on create, or
    unchanged on update)."""

    message_expiry_us: int | None = None
    max_topic_size_bytes: int | None = None
    compression: Compression | None = None
    segment_size_bytes: int | None = None
    durability: Durability | None = None
    consumer_offset_durability: Durability | None = None
    messages_required_to_save: int | None = None
    size_of_messages_required_to_save_bytes: int | None = None
    preallocate_segments: bool | None = None

    def given(self) -> tuple[str, ...]:
        """Names of the options this patch sets, in ``TOPIC_OPTION_FIELDS`` order."""
        return tuple(name for name in TOPIC_OPTION_FIELDS if getattr(self, name) is not None)

    def apply_to(self, options: TopicOptions) -> TopicOptions:
        """``options`` with every given field replaced."""
        return replace(options, **{name: getattr(self, name) for name in self.given()})


assert tuple(f.name for f in fields(TopicOptionsPatch)) == TOPIC_OPTION_FIELDS


# ---------------------------------------------------------------------------------------
# Commands. Client commands act as the session in ``ApplyContext``; system commands are
# issued by the runtime itself (``ApplyContext.session is None``).


@dataclass(frozen=True, slots=True)
class CreateStream:
    name: str


@dataclass(frozen=True, slots=True)
class UpdateStream:
    stream: Ident
    name: str


@dataclass(frozen=True, slots=True)
class DeleteStream:
    stream: Ident


@dataclass(frozen=True, slots=True)
class PurgeStream:
    stream: Ident


@dataclass(frozen=True, slots=True)
class CreateTopic:
    stream: Ident
    name: str
    partitions_count: int
    options: TopicOptionsPatch = TopicOptionsPatch()


@dataclass(frozen=True, slots=True)
class UpdateTopic:
    stream: Ident
    topic: Ident
    name: str
    options: TopicOptionsPatch = TopicOptionsPatch()


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    stream: Ident
    topic: Ident


@dataclass(frozen=True, slots=True)
class PurgeTopic:
    stream: Ident
    topic: Ident


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    stream: Ident
    topic: Ident
    count: int


@dataclass(frozen=True, slots=True)
class DeletePartitions:
    stream: Ident
    topic: Ident
    count: int


@dataclass(frozen=True, slots=True)
class CreateUser:
    username: str
    password: PasswordHash
    status: UserStatus = UserStatus.ACTIVE
    permissions: Permissions | None = None


@dataclass(frozen=True, slots=True)
class UpdateUser:
    user: Ident
    username: str | None = None
    status: UserStatus | None = None


@dataclass(frozen=True, slots=True)
class DeleteUser:
    user: Ident


@dataclass(frozen=True, slots=True)
class UpdatePermissions:
    user: Ident
    permissions: Permissions | None


@dataclass(frozen=True, slots=True)
class ChangePassword:
    """Replace a password hash. The runtime checks the current password before proposing."""

    user: Ident
    password: PasswordHash


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup:
    stream: Ident
    topic: Ident
    name: str


@dataclass(frozen=True, slots=True)
class DeleteConsumerGroup:
    stream: Ident
    topic: Ident
    group: Ident


@dataclass(frozen=True, slots=True)
class JoinConsumerGroup:
    stream: Ident
    topic: Ident
    group: Ident


@dataclass(frozen=True, slots=True)
class LeaveConsumerGroup:
    stream: Ident
    topic: Ident
    group: Ident


@dataclass(frozen=True, slots=True)
class Register:
    """Open a session for ``client_id`` as ``user_id``.

    The runtime verifies the password against committed state and names the user; apply
    re-checks that the user still exists and is active, since it may have changed since.
    """

    client_id: int
    user_id: int


@dataclass(frozen=True, slots=True)
class Logout:
    """End the acting session."""


@dataclass(frozen=True, slots=True)
class CreatePersonalAccessToken:
    """A token for the acting session's user, expiring ``expiry_us`` after the op's
    timestamp (0 or ``EXPIRY_NEVER``: never). The admitting node drew the raw token;
    only its hash travels (``credentials.token_hash``)."""

    name: str
    expiry_us: int
    token_hash: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class DeletePersonalAccessToken:
    """Delete one of the acting session's user's tokens, by name."""

    name: str


@dataclass(frozen=True, slots=True)
class CreateRootUser:
    """System: create the first user with every permission (first start only)."""

    username: str
    password: PasswordHash


@dataclass(frozen=True, slots=True)
class EndSession:
    """System: end a session the runtime evicted (for example a client that went stale)."""

    session: int


@dataclass(frozen=True, slots=True)
class ExpireTokens:
    """System: remove every personal access token expired at the op's timestamp."""


@dataclass(frozen=True, slots=True)
class RevocationDrained:
    """System: node ``node`` (of ``nodes``) served ``session`` nothing of the partition
    that the group's stored offset does not cover. A revoking partition whose owner is
    ``session`` moves to its target once every node said so."""

    stream: int
    topic: int
    group: int
    partition_id: int
    session: int
    node: int
    nodes: int


@dataclass(frozen=True, slots=True)
class ExpireRevocations:
    """System: move every revoking partition that has waited ``timeout_us`` or more at
    the op's timestamp (Iggy's ``rebalancing_timeout``) to its target."""

    timeout_us: int


MetadataCommand: TypeAlias = (
    CreateStream
    | UpdateStream
    | DeleteStream
    | PurgeStream
    | CreateTopic
    | UpdateTopic
    | DeleteTopic
    | PurgeTopic
    | CreatePartitions
    | DeletePartitions
    | CreateUser
    | UpdateUser
    | DeleteUser
    | UpdatePermissions
    | ChangePassword
    | CreateConsumerGroup
    | DeleteConsumerGroup
    | JoinConsumerGroup
    | LeaveConsumerGroup
    | Register
    | Logout
    | CreateRootUser
    | EndSession
    | CreatePersonalAccessToken
    | DeletePersonalAccessToken
    | ExpireTokens
    | RevocationDrained
    | ExpireRevocations
)


@dataclass(frozen=True, slots=True)
class ApplyContext:
    """What consensus knows about the committed op: its number, the primary's timestamp,
    and the session of the client that sent it (``None`` for system commands)."""

    op: int
    timestamp_us: int
    session: int | None = None


# ---------------------------------------------------------------------------------------
# Read views: immutable copies handed to callers, so no caller can alias internal state.


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    id: int
    created_at_us: int
    created_op: int
    purge_generation: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    id: int
    stream_id: int
    name: str
    created_at_us: int
    options: TopicOptions
    partitions: tuple[PartitionInfo, ...]
    explicit_options: tuple[str, ...] = ()
    """Option names a client set (on create or update), as opposed to defaults."""

    @property
    def partitions_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class StreamInfo:
    id: int
    name: str
    created_at_us: int
    topics: tuple[TopicInfo, ...]


@dataclass(frozen=True, slots=True)
class MemberInfo:
    member_id: int
    session: int
    partitions: tuple[int, ...]
    """The partitions it owns, revoking ones included (Iggy's member partitions)."""
    revoking: tuple[int, ...] = ()
    """Those of its partitions that are moving to another member: it may store offsets
    for them but not poll them."""

    @property
    def pollable(self) -> tuple[int, ...]:
        return tuple(p for p in self.partitions if p not in self.revoking)


@dataclass(frozen=True, slots=True)
class RevocationInfo:
    """A revoking partition of a consumer group, for the nodes' maintenance."""

    stream_id: int
    topic_id: int
    group_id: int
    partition_id: int
    source: int
    """The owner's session."""
    target: int
    """The session it moves to."""
    created_at_us: int
    drained: tuple[int, ...]
    """The nodes that reported nothing uncommitted served to the owner."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    id: int
    stream_id: int
    topic_id: int
    name: str
    generation: int
    partitions_count: int
    members: tuple[MemberInfo, ...]


@dataclass(frozen=True, slots=True)
class UserInfo:
    id: int
    username: str
    created_at_us: int
    status: UserStatus
    permissions: Permissions | None
    password: PasswordHash


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A personal access token as its owner lists it (never its hash)."""

    name: str
    expiry_at_us: int | None
    """When it expires; None: never."""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    session: int
    client_id: int
    user_id: int
    number: int
    """A small per-server number for the session, reported as the Iggy ``client_id`` u32
    and as the consumer group member id."""
    created_at_us: int


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """One partition group the runtime should host; see :meth:`MetadataState.partition_refs`."""

    stream_id: int
    topic_id: int
    partition_id: int
    created_op: int
    purge_generation: int
    durability: Durability
    consumer_offset_durability: Durability
    segment_size_bytes: int | None = None
    """The topic's segment roll size when a client set one; None: the node's default."""


# ---------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True, slots=True)
class Rejected:
    """A committed business rejection; the reply carries ``code`` in its result section."""

    code: ErrorCode


@dataclass(frozen=True, slots=True)
class Done:
    """Success with an empty reply payload."""


@dataclass(frozen=True, slots=True)
class StreamCreated:
    stream: StreamInfo


@dataclass(frozen=True, slots=True)
class TopicCreated:
    topic: TopicInfo


@dataclass(frozen=True, slots=True)
class UserCreated:
    user: UserInfo


@dataclass(frozen=True, slots=True)
class ConsumerGroupCreated:
    group: ConsumerGroupInfo


@dataclass(frozen=True, slots=True)
class Registered:
    user_id: int
    session: int


@dataclass(frozen=True, slots=True)
class TokenCreated:
    """The token was stored; the reply names its hash, so the admitting node can tell its
    own creation from a replayed one before it hands out the raw token."""

    token_hash: bytes = field(repr=False)


MetadataResult: TypeAlias = (
    Rejected
    | Done
    | StreamCreated
    | TopicCreated
    | UserCreated
    | ConsumerGroupCreated
    | Registered
    | TokenCreated
)


# ---------------------------------------------------------------------------------------
# Entities: mutable, owned by one MetadataState. Public only so that the snapshot codec
# (``snapshot.py``) can read them through ``MetadataState.contents`` and build them for
# ``MetadataState.from_contents``; every other reader gets the frozen ``*Info`` views.


@dataclass(slots=True)
class PartitionEntity:
    id: int
    created_at_us: int
    created_op: int
    purge_generation: int = 0


@dataclass(slots=True)
class MemberEntity:
    session: int
    member_id: int
    joined_op: int
    partitions: list[int] = field(default_factory=list)  # owned, ascending


@dataclass(slots=True)
class RevocationEntity:
    source: int
    target: int
    created_at_us: int
    drained: list[int] = field(default_factory=list)  # node indexes, ascending


@dataclass(slots=True)
class GroupEntity:
    id: int
    name: str
    generation: int = 1
    members: list[MemberEntity] = field(default_factory=list)  # in join order
    revoking: dict[int, RevocationEntity] = field(default_factory=dict)  # by partition


@dataclass(slots=True)
class TopicEntity:
    id: int
    name: str
    created_at_us: int
    options: TopicOptions
    explicit_options: tuple[str, ...] = ()
    partitions: list[PartitionEntity] = field(default_factory=list)
    groups: dict[int, GroupEntity] = field(default_factory=dict)
    group_ids_by_name: dict[str, int] = field(default_factory=dict)
    next_group_id: int = 0


@dataclass(slots=True)
class StreamEntity:
    id: int
    name: str
    created_at_us: int
    topics: dict[int, TopicEntity] = field(default_factory=dict)
    topic_ids_by_name: dict[str, int] = field(default_factory=dict)
    next_topic_id: int = 0


@dataclass(slots=True)
class UserEntity:
    id: int
    username: str
    created_at_us: int
    status: UserStatus
    permissions: Permissions | None
    password: PasswordHash


@dataclass(slots=True)
class TokenEntity:
    name: str
    token_hash: bytes
    expiry_at_us: int | None


@dataclass(slots=True)
class SessionEntity:
    session: int
    client_id: int
    user_id: int
    number: int
    created_at_us: int


@dataclass(frozen=True, slots=True)
class MetadataContents:
    """What a :class:`MetadataState` holds that is not derived: its counters and its
    tables, each in id order (tokens by owner, then name). The state's own indexes (names,
    clients, sessions per user, token hashes), the partition total and the earliest token
    expiry are derived from it by :meth:`MetadataState.from_contents`; an entity's own
    (a stream's topics by name, a topic's groups by name) travel inside the entity."""

    next_stream_id: int
    next_user_id: int
    next_session_number: int
    root_user_id: int | None
    streams: tuple[StreamEntity, ...]
    users: tuple[UserEntity, ...]
    sessions: tuple[SessionEntity, ...]
    tokens: tuple[tuple[int, TokenEntity], ...]  # (owner's user id, token)


class MetadataState:
    """The replicated metadata of one server cluster. See the module docstring."""

    def __init__(self) -> None:
        self._streams: dict[int, StreamEntity] = {}
        self._stream_ids_by_name: dict[str, int] = {}
        self._next_stream_id = 0
        self._users: dict[int, UserEntity] = {}
        self._user_ids_by_name: dict[str, int] = {}
        self._next_user_id = 0
        self._root_user_id: int | None = None
        self._sessions: dict[int, SessionEntity] = {}
        self._session_by_client: dict[int, int] = {}
        # user id -> that user's sessions, oldest first (an index over ``_sessions``).
        self._user_sessions: dict[int, dict[int, None]] = {}
        self._next_session_number = 0
        self._partitions_total = 0
        # user id -> token name -> token; and the index of every token by its hash.
        self._tokens: dict[int, dict[str, TokenEntity]] = {}
        self._token_owners: dict[bytes, tuple[int, str]] = {}
        self._token_expiry_min_us: int | None = None
        self._handlers: dict[type, Callable[[Any, ApplyContext], MetadataResult]] = {
            CreateStream: self._create_stream,
            UpdateStream: self._update_stream,
            DeleteStream: self._delete_stream,
            PurgeStream: self._purge_stream,
            CreateTopic: self._create_topic,
            UpdateTopic: self._update_topic,
            DeleteTopic: self._delete_topic,
            PurgeTopic: self._purge_topic,
            CreatePartitions: self._create_partitions,
            DeletePartitions: self._delete_partitions,
            CreateUser: self._create_user,
            UpdateUser: self._update_user,
            DeleteUser: self._delete_user,
            UpdatePermissions: self._update_permissions,
            ChangePassword: self._change_password,
            CreateConsumerGroup: self._create_consumer_group,
            DeleteConsumerGroup: self._delete_consumer_group,
            JoinConsumerGroup: self._join_consumer_group,
            LeaveConsumerGroup: self._leave_consumer_group,
            Register: self._register,
            Logout: self._logout,
            CreateRootUser: self._create_root_user,
            EndSession: self._end_session,
            CreatePersonalAccessToken: self._create_token,
            DeletePersonalAccessToken: self._delete_token,
            ExpireTokens: self._expire_tokens,
            RevocationDrained: self._revocation_drained,
            ExpireRevocations: self._expire_revocations,
        }
        self._revocations: tuple[RevocationInfo, ...] | None = None

    # -- the replicated entry point ------------------------------------------------------

    def apply(self, command: MetadataCommand, ctx: ApplyContext) -> MetadataResult:
        """Apply one committed command; the result is what the client is told.

        Business rejections come back as :class:`Rejected` and leave the state unchanged.
        """
        assert ctx.op >= 1, "op 0 is the root of the log, never a command"
        assert 0 <= ctx.timestamp_us <= U64_MAX
        handler = self._handlers[type(command)]
        self._revocations = None
        try:
            return handler(command, ctx)
        except StateError as error:
            return Rejected(error.code)

    def authorize(self, command: MetadataCommand, session: int | None) -> ErrorCode | None:
        """The admission check the runtime runs before proposing ``command``.

        Returns the error code to answer with, or ``None`` when the acting session may try
        the command. Business checks (names taken, ids missing) are left to apply, except
        where a missing stream or topic makes the permission question unanswerable.
        """
        try:
            self._authorize(command, session)
        except StateError as error:
            return error.code
        return None

    # -- read-side queries (committed local state) ---------------------------------------

    def stream(self, stream: Ident) -> StreamInfo:
        return self._stream_info(self._find_stream(stream))

    def streams(self) -> tuple[StreamInfo, ...]:
        return tuple(self._stream_info(self._streams[i]) for i in sorted(self._streams))

    def topic(self, stream: Ident, topic: Ident) -> TopicInfo:
        found = self._find_stream(stream)
        return self._topic_info(found, self._find_topic(found, topic))

    def topics(self, stream: Ident) -> tuple[TopicInfo, ...]:
        found = self._find_stream(stream)
        return tuple(self._topic_info(found, found.topics[i]) for i in sorted(found.topics))

    def consumer_group(self, stream: Ident, topic: Ident, group: Ident) -> ConsumerGroupInfo:
        found_stream = self._find_stream(stream)
        found_topic = self._find_topic(found_stream, topic)
        return self._group_info(found_stream, found_topic, self._find_group(found_topic, group))

    def consumer_groups(self, stream: Ident, topic: Ident) -> tuple[ConsumerGroupInfo, ...]:
        found_stream = self._find_stream(stream)
        found_topic = self._find_topic(found_stream, topic)
        return tuple(
            self._group_info(found_stream, found_topic, found_topic.groups[i])
            for i in sorted(found_topic.groups)
        )

    def user(self, user: Ident) -> UserInfo:
        return self._user_info(self._find_user(user))

    @property
    def partitions_total(self) -> int:
        """Partitions of every topic of every stream: the partition groups each node hosts."""
        return self._partitions_total

    def users(self) -> tuple[UserInfo, ...]:
        return tuple(self._user_info(self._users[i]) for i in sorted(self._users))

    def personal_access_tokens(self, session: int) -> tuple[TokenInfo, ...]:
        """The tokens of ``session``'s user, by name; ``UNAUTHENTICATED`` without one."""
        own = self._tokens.get(self._find_session(session).user_id, {})
        return tuple(TokenInfo(name, own[name].expiry_at_us) for name in sorted(own))

    def token_user(self, token_hash: bytes, now_us: int) -> int | None:
        """The user whose token has ``token_hash`` and has not expired at ``now_us``."""
        owner = self._token_owners.get(token_hash)
        if owner is None:
            return None
        user_id, name = owner
        expiry = self._tokens[user_id][name].expiry_at_us
        return user_id if expiry is None or now_us < expiry else None

    @property
    def token_expiry_min_us(self) -> int | None:
        """When the next token expires; None when none ever does."""
        return self._token_expiry_min_us

    def session(self, session: int) -> SessionInfo:
        """The live session ``session``; ``UNAUTHENTICATED`` when there is none."""
        return self._session_info(self._find_session(session))

    def session_of_client(self, client_id: int) -> SessionInfo | None:
        session = self._session_by_client.get(client_id)
        return None if session is None else self._session_info(self._sessions[session])

    def sessions(self) -> tuple[SessionInfo, ...]:
        return tuple(self._session_info(self._sessions[s]) for s in sorted(self._sessions))

    def memberships_by_session(self) -> dict[int, list[tuple[int, int, int]]]:
        """``memberships`` of every session with at least one, in one pass."""
        found: dict[int, list[tuple[int, int, int]]] = {}
        for stream_id in sorted(self._streams):
            stream = self._streams[stream_id]
            for topic_id in sorted(stream.topics):
                topic = stream.topics[topic_id]
                for group_id in sorted(topic.groups):
                    for member in topic.groups[group_id].members:
                        found.setdefault(member.session, []).append((stream_id, topic_id, group_id))
        return found

    def memberships(self, session: int) -> tuple[tuple[int, int, int], ...]:
        """``(stream_id, topic_id, group_id)`` of every group ``session`` is a member of."""
        found: list[tuple[int, int, int]] = []
        for stream_id in sorted(self._streams):
            stream = self._streams[stream_id]
            for topic_id in sorted(stream.topics):
                topic = stream.topics[topic_id]
                for group_id in sorted(topic.groups):
                    group = topic.groups[group_id]
                    if any(m.session == session for m in group.members):
                        found.append((stream_id, topic_id, group_id))
        return tuple(found)

    def assignment(
        self, stream: Ident, topic: Ident, group: Ident, session: int, *, revoking: bool = False
    ) -> tuple[int, tuple[int, ...]]:
        """``(generation, partition ids)`` ``session`` may poll in the group; with
        ``revoking``, every partition it owns (it may store their offsets).

        Raises ``CONSUMER_GROUP_MEMBER_NOT_FOUND`` when the session is not a member.
        """
        info = self.consumer_group(stream, topic, group)
        for member in info.members:
            if member.session == session:
                return info.generation, member.partitions if revoking else member.pollable
        raise StateError(ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND)

    def revocations(self) -> tuple[RevocationInfo, ...]:
        """Every revoking partition of every consumer group, by stream, topic, group and
        partition. Computed once per applied op (a maintenance pass asks often)."""
        if self._revocations is None:
            found: list[RevocationInfo] = []
            for stream_id in sorted(self._streams):
                stream = self._streams[stream_id]
                for topic_id in sorted(stream.topics):
                    topic = stream.topics[topic_id]
                    for group_id in sorted(topic.groups):
                        revoking = topic.groups[group_id].revoking
                        found.extend(
                            RevocationInfo(
                                stream_id,
                                topic_id,
                                group_id,
                                p,
                                revoking[p].source,
                                revoking[p].target,
                                revoking[p].created_at_us,
                                tuple(revoking[p].drained),
                            )
                            for p in sorted(revoking)
                        )
            self._revocations = tuple(found)
        return self._revocations

    def permits(
        self,
        session: int,
        action: Action,
        stream_id: int | None = None,
        topic_id: int | None = None,
    ) -> ErrorCode | None:
        """Whether the session may do ``action``; ``None`` if so, else the error code."""
        try:
            self._require(session, action, stream_id, topic_id)
        except StateError as error:
            return error.code
        return None

    def partition_refs(self) -> tuple[PartitionRef, ...]:
        """Every partition that exists, ordered by (stream, topic, partition).

        The runtime reconciles its partition groups against this list after each applied
        metadata op (and after a restore): a new ``(ids, created_op)`` means a new group, a
        missing one a group to remove, a higher ``purge_generation`` a purge to propose.
        """
        refs: list[PartitionRef] = []
        for stream_id in sorted(self._streams):
            stream = self._streams[stream_id]
            for topic_id in sorted(stream.topics):
                topic = stream.topics[topic_id]
                segment_size = (
                    topic.options.segment_size_bytes
                    if "segment_size_bytes" in topic.explicit_options
                    else None
                )
                refs.extend(
                    PartitionRef(
                        stream_id,
                        topic_id,
                        partition.id,
                        partition.created_op,
                        partition.purge_generation,
                        topic.options.durability,
                        topic.options.consumer_offset_durability,
                        segment_size,
                    )
                    for partition in topic.partitions
                )
        return tuple(refs)

    def resolve_ids(self, stream: Ident, topic: Ident | None = None) -> tuple[int, int | None]:
        """Numeric ids for a stream (and topic) identifier."""
        found = self._find_stream(stream)
        if topic is None:
            return found.id, None
        return found.id, self._find_topic(found, topic).id

    @property
    def root_user_id(self) -> int | None:
        return self._root_user_id

    # -- streams --------------------------------------------------------------------------

    def _create_stream(self, cmd: CreateStream, ctx: ApplyContext) -> MetadataResult:
        self._require(ctx.session, Action.CREATE_STREAM)
        _check_name(cmd.name, ErrorCode.INVALID_STREAM_NAME)
        if cmd.name in self._stream_ids_by_name:
            raise StateError(ErrorCode.STREAM_NAME_ALREADY_EXISTS, cmd.name)
        if len(self._streams) >= STREAMS_MAX or self._next_stream_id > U32_MAX:
            raise StateError(ErrorCode.TOO_MANY_STREAMS)
        stream = StreamEntity(self._next_stream_id, cmd.name, ctx.timestamp_us)
        self._next_stream_id += 1
        self._streams[stream.id] = stream
        self._stream_ids_by_name[stream.name] = stream.id
        return StreamCreated(self._stream_info(stream))

    def _update_stream(self, cmd: UpdateStream, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        self._require(ctx.session, Action.MANAGE_STREAM, stream.id)
        _check_name(cmd.name, ErrorCode.INVALID_STREAM_NAME)
        holder = self._stream_ids_by_name.get(cmd.name)
        if holder is not None and holder != stream.id:
            raise StateError(ErrorCode.STREAM_NAME_ALREADY_EXISTS, cmd.name)
        del self._stream_ids_by_name[stream.name]
        stream.name = cmd.name
        self._stream_ids_by_name[stream.name] = stream.id
        return Done()

    def _delete_stream(self, cmd: DeleteStream, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        self._require(ctx.session, Action.MANAGE_STREAM, stream.id)
        for topic_id in sorted(stream.topics):
            self._partitions_total -= len(stream.topics[topic_id].partitions)
        del self._streams[stream.id]
        del self._stream_ids_by_name[stream.name]
        return Done()

    def _purge_stream(self, cmd: PurgeStream, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        self._require(ctx.session, Action.MANAGE_STREAM, stream.id)
        for topic_id in sorted(stream.topics):
            _purge(stream.topics[topic_id])
        return Done()

    # -- topics ---------------------------------------------------------------------------

    def _create_topic(self, cmd: CreateTopic, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        self._require(ctx.session, Action.CREATE_TOPIC, stream.id)
        _check_name(cmd.name, ErrorCode.INVALID_TOPIC_NAME)
        if cmd.name in stream.topic_ids_by_name:
            raise StateError(ErrorCode.TOPIC_NAME_ALREADY_EXISTS, cmd.name)
        if len(stream.topics) >= TOPICS_PER_STREAM_MAX or stream.next_topic_id > U32_MAX:
            raise StateError(ErrorCode.TOO_MANY_TOPICS)
        self._check_partitions_to_add(0, cmd.partitions_count, allow_zero=True)
        options = cmd.options.apply_to(TopicOptions())
        _check_options(options)
        topic = TopicEntity(
            stream.next_topic_id, cmd.name, ctx.timestamp_us, options, cmd.options.given()
        )
        topic.partitions = [
            PartitionEntity(i, ctx.timestamp_us, ctx.op) for i in range(cmd.partitions_count)
        ]
        stream.next_topic_id += 1
        stream.topics[topic.id] = topic
        stream.topic_ids_by_name[topic.name] = topic.id
        self._partitions_total += cmd.partitions_count
        return TopicCreated(self._topic_info(stream, topic))

    def _update_topic(self, cmd: UpdateTopic, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.MANAGE_TOPIC, stream.id, topic.id)
        _check_name(cmd.name, ErrorCode.INVALID_TOPIC_NAME)
        holder = stream.topic_ids_by_name.get(cmd.name)
        if holder is not None and holder != topic.id:
            raise StateError(ErrorCode.TOPIC_NAME_ALREADY_EXISTS, cmd.name)
        given = cmd.options.given()
        if any(name not in UPDATABLE_TOPIC_OPTIONS for name in given):
            raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, "option is create-only")
        options = cmd.options.apply_to(topic.options)
        _check_options(options)
        del stream.topic_ids_by_name[topic.name]
        topic.name = cmd.name
        topic.options = options
        topic.explicit_options = tuple(
            name for name in TOPIC_OPTION_FIELDS if name in given or name in topic.explicit_options
        )
        stream.topic_ids_by_name[topic.name] = topic.id
        return Done()

    def _delete_topic(self, cmd: DeleteTopic, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.MANAGE_TOPIC, stream.id, topic.id)
        self._partitions_total -= len(topic.partitions)
        del stream.topics[topic.id]
        del stream.topic_ids_by_name[topic.name]
        return Done()

    def _purge_topic(self, cmd: PurgeTopic, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.MANAGE_TOPIC, stream.id, topic.id)
        _purge(topic)
        return Done()

    # -- partitions -----------------------------------------------------------------------

    def _create_partitions(self, cmd: CreatePartitions, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.MANAGE_TOPIC, stream.id, topic.id)
        self._check_partitions_to_add(len(topic.partitions), cmd.count, allow_zero=False)
        first = len(topic.partitions)
        topic.partitions.extend(
            PartitionEntity(i, ctx.timestamp_us, ctx.op) for i in range(first, first + cmd.count)
        )
        self._partitions_total += cmd.count
        _rebalance_topic(topic, ctx.timestamp_us)
        return Done()

    def _delete_partitions(self, cmd: DeletePartitions, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.MANAGE_TOPIC, stream.id, topic.id)
        if not 1 <= cmd.count <= PARTITIONS_PER_REQUEST_MAX:
            raise StateError(ErrorCode.INVALID_PARTITIONS_COUNT)
        if cmd.count > len(topic.partitions):
            raise StateError(ErrorCode.INVALID_PARTITIONS_COUNT, "more than the topic has")
        del topic.partitions[len(topic.partitions) - cmd.count :]
        self._partitions_total -= cmd.count
        _rebalance_topic(topic, ctx.timestamp_us)
        return Done()

    def _check_partitions_to_add(self, existing: int, count: int, *, allow_zero: bool) -> None:
        if count < 0 or (count == 0 and not allow_zero):
            raise StateError(ErrorCode.INVALID_PARTITIONS_COUNT)
        if count > PARTITIONS_PER_REQUEST_MAX or existing + count > PARTITIONS_PER_TOPIC_MAX:
            raise StateError(ErrorCode.TOO_MANY_PARTITIONS)
        if self._partitions_total + count > PARTITIONS_TOTAL_MAX:
            raise StateError(ErrorCode.PARTITIONS_LIMIT_REACHED)

    # -- users ----------------------------------------------------------------------------

    def _create_user(self, cmd: CreateUser, ctx: ApplyContext) -> MetadataResult:
        self._require(ctx.session, Action.MANAGE_USERS)
        return UserCreated(
            self._add_user(cmd.username, cmd.password, cmd.status, cmd.permissions, ctx)
        )

    def _create_root_user(self, cmd: CreateRootUser, ctx: ApplyContext) -> MetadataResult:
        _require_system(ctx)
        if self._users or self._root_user_id is not None:
            raise StateError(ErrorCode.USER_ALREADY_EXISTS, "the root user exists")
        info = self._add_user(
            cmd.username, cmd.password, UserStatus.ACTIVE, root_permissions(), ctx
        )
        self._root_user_id = info.id
        return UserCreated(info)

    def _add_user(
        self,
        username: str,
        password: PasswordHash,
        status: UserStatus,
        permissions: Permissions | None,
        ctx: ApplyContext,
    ) -> UserInfo:
        _check_username(username)
        if not password.is_well_formed():
            raise StateError(ErrorCode.INVALID_PASSWORD)
        if username in self._user_ids_by_name:
            raise StateError(ErrorCode.USER_ALREADY_EXISTS, username)
        if len(self._users) >= USERS_MAX or self._next_user_id > U32_MAX:
            raise StateError(ErrorCode.USERS_LIMIT_REACHED)
        user = UserEntity(
            self._next_user_id, username, ctx.timestamp_us, status, permissions, password
        )
        self._next_user_id += 1
        self._users[user.id] = user
        self._user_ids_by_name[username] = user.id
        return self._user_info(user)

    def _update_user(self, cmd: UpdateUser, ctx: ApplyContext) -> MetadataResult:
        self._require(ctx.session, Action.MANAGE_USERS)
        user = self._find_user(cmd.user)
        if cmd.username is not None:
            _check_username(cmd.username)
            holder = self._user_ids_by_name.get(cmd.username)
            if holder is not None and holder != user.id:
                raise StateError(ErrorCode.USER_ALREADY_EXISTS, cmd.username)
        root = user.id == self._root_user_id
        if root and cmd.status is not None and cmd.status != UserStatus.ACTIVE:
            raise StateError(ErrorCode.INVALID_USER_STATUS, "the root user stays active")
        if cmd.username is not None:
            del self._user_ids_by_name[user.username]
            user.username = cmd.username
            self._user_ids_by_name[user.username] = user.id
        if cmd.status is not None:
            user.status = cmd.status
        return Done()

    def _delete_user(self, cmd: DeleteUser, ctx: ApplyContext) -> MetadataResult:
        self._require(ctx.session, Action.MANAGE_USERS)
        user = self._find_user(cmd.user)
        if user.id == self._root_user_id:
            raise StateError(ErrorCode.CANNOT_DELETE_USER)
        for session in sorted(self._sessions):
            if self._sessions[session].user_id == user.id:
                self._drop_session(session, ctx.timestamp_us)
        for token in self._tokens.pop(user.id, {}).values():
            del self._token_owners[token.token_hash]
        self._recompute_token_expiry()
        del self._users[user.id]
        del self._user_ids_by_name[user.username]
        return Done()

    def _update_permissions(self, cmd: UpdatePermissions, ctx: ApplyContext) -> MetadataResult:
        self._require(ctx.session, Action.MANAGE_USERS)
        user = self._find_user(cmd.user)
        if user.id == self._root_user_id:
            raise StateError(ErrorCode.CANNOT_CHANGE_PERMISSIONS)
        user.permissions = cmd.permissions
        return Done()

    def _change_password(self, cmd: ChangePassword, ctx: ApplyContext) -> MetadataResult:
        actor = self._find_session(ctx.session)
        if self._users[actor.user_id].status != UserStatus.ACTIVE:
            raise StateError(ErrorCode.USER_INACTIVE)
        user = self._find_user(cmd.user)
        # Users may change their own password; anyone else's needs manage_users.
        if user.id != actor.user_id:
            self._require(ctx.session, Action.MANAGE_USERS)
        if not cmd.password.is_well_formed():
            raise StateError(ErrorCode.INVALID_PASSWORD)
        user.password = cmd.password
        return Done()

    # -- personal access tokens -------------------------------------------------------------

    def _token_actor(self, session: int | None) -> UserEntity:
        """The user a token command acts for: the session's, active (tokens are one's own,
        no permission governs them, as in Iggy)."""
        user = self._users[self._find_session(session).user_id]
        if user.status != UserStatus.ACTIVE:
            raise StateError(ErrorCode.USER_INACTIVE)
        return user

    def _create_token(self, cmd: CreatePersonalAccessToken, ctx: ApplyContext) -> MetadataResult:
        user = self._token_actor(ctx.session)
        _check_token_name(cmd.name)
        own = self._tokens.get(user.id, {})
        # Iggy checks the limit before the name: an at-limit duplicate reports the limit.
        if len(own) >= TOKENS_PER_USER_MAX:
            raise StateError(ErrorCode.PERSONAL_ACCESS_TOKENS_LIMIT_REACHED)
        if cmd.name in own or cmd.token_hash in self._token_owners:
            raise StateError(ErrorCode.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS, cmd.name)
        if len(cmd.token_hash) != TOKEN_HASH_SIZE_BYTES:
            raise StateError(ErrorCode.INVALID_COMMAND, "a token hash is 32 bytes")
        expiry_at: int | None = None
        if cmd.expiry_us not in (0, U64_MAX):
            expiry_at = ctx.timestamp_us + cmd.expiry_us
            if expiry_at > U64_MAX:
                raise StateError(ErrorCode.INVALID_PERSONAL_ACCESS_TOKEN_EXPIRY)
        self._tokens.setdefault(user.id, {})[cmd.name] = TokenEntity(
            cmd.name, cmd.token_hash, expiry_at
        )
        self._token_owners[cmd.token_hash] = (user.id, cmd.name)
        if expiry_at is not None and (
            self._token_expiry_min_us is None or expiry_at < self._token_expiry_min_us
        ):
            self._token_expiry_min_us = expiry_at
        return TokenCreated(cmd.token_hash)

    def _delete_token(self, cmd: DeletePersonalAccessToken, ctx: ApplyContext) -> MetadataResult:
        user = self._token_actor(ctx.session)
        own = self._tokens.get(user.id, {})
        token = own.get(cmd.name)
        if token is None:
            raise StateError(ErrorCode.RESOURCE_NOT_FOUND, f"token {cmd.name!r}")
        self._remove_token(user.id, token)
        self._recompute_token_expiry()
        return Done()

    def _expire_tokens(self, cmd: ExpireTokens, ctx: ApplyContext) -> MetadataResult:
        del cmd
        _require_system(ctx)
        for user_id in sorted(self._tokens):
            own = self._tokens[user_id]
            for name in sorted(own):
                expiry = own[name].expiry_at_us
                if expiry is not None and expiry <= ctx.timestamp_us:
                    self._remove_token(user_id, own[name])
        self._recompute_token_expiry()
        return Done()

    def _remove_token(self, user_id: int, token: TokenEntity) -> None:
        own = self._tokens[user_id]
        del own[token.name]
        if not own:
            del self._tokens[user_id]
        del self._token_owners[token.token_hash]

    def _recompute_token_expiry(self) -> None:
        expiries = [
            token.expiry_at_us
            for own in self._tokens.values()
            for token in own.values()
            if token.expiry_at_us is not None
        ]
        self._token_expiry_min_us = min(expiries) if expiries else None

    # -- sessions -------------------------------------------------------------------------

    def _register(self, cmd: Register, ctx: ApplyContext) -> MetadataResult:
        if not 1 <= cmd.client_id < (1 << 128):
            raise StateError(ErrorCode.INVALID_COMMAND, "client id 0 is reserved")
        user = self._users.get(cmd.user_id)
        if user is None:
            raise StateError(ErrorCode.INVALID_CREDENTIALS)
        if user.status != UserStatus.ACTIVE:
            raise StateError(ErrorCode.USER_INACTIVE)
        assert ctx.op not in self._sessions, "an op opens at most one session"
        previous = self._session_by_client.get(cmd.client_id)
        if previous is not None:
            if self._sessions[previous].user_id != user.id:
                # The primary refuses this before it enters the log; a log written by a
                # build that did not is refused here, so the owner keeps its session.
                raise StateError(ErrorCode.UNAUTHORIZED, "the client id is another user's")
            self._drop_session(previous, ctx.timestamp_us)
        self._make_room_for_session(user.id, ctx.timestamp_us)
        session = SessionEntity(
            ctx.op, cmd.client_id, user.id, self._next_session_number, ctx.timestamp_us
        )
        self._next_session_number = (self._next_session_number + 1) & U32_MAX
        self._sessions[session.session] = session
        self._session_by_client[session.client_id] = session.session
        self._user_sessions.setdefault(user.id, {})[session.session] = None
        return Registered(user_id=user.id, session=session.session)

    def _make_room_for_session(self, user_id: int, now_us: int) -> None:
        """End a session if a new one of ``user_id`` would exceed a bound: the user's own
        oldest beyond ``SESSIONS_PER_USER_MAX``; with every slot taken, the oldest session
        of the user holding the most (ties: the lowest user id), so a user that logs in
        without end only ever ends its own sessions, or those of a user holding more.
        The same deterministic choice on every replica."""
        held = self._user_sessions
        own = held.get(user_id, {})
        if len(own) >= SESSIONS_PER_USER_MAX:
            self._drop_session(next(iter(own)), now_us)
        elif len(self._sessions) >= SESSIONS_MAX:
            heaviest = max(sorted(held), key=lambda u: (len(held[u]), -u))
            self._drop_session(next(iter(held[heaviest])), now_us)

    def _logout(self, cmd: Logout, ctx: ApplyContext) -> MetadataResult:
        del cmd
        session = self._find_session(ctx.session)
        self._drop_session(session.session, ctx.timestamp_us)
        return Done()

    def _end_session(self, cmd: EndSession, ctx: ApplyContext) -> MetadataResult:
        _require_system(ctx)
        if cmd.session not in self._sessions:
            raise StateError(ErrorCode.CLIENT_NOT_FOUND)
        self._drop_session(cmd.session, ctx.timestamp_us)
        return Done()

    def _drop_session(self, session: int, now_us: int) -> None:
        """End ``session``: forget it and remove it from every consumer group."""
        found = self._sessions.pop(session)
        del self._session_by_client[found.client_id]
        own = self._user_sessions[found.user_id]
        del own[session]
        if not own:
            del self._user_sessions[found.user_id]
        for stream_id in sorted(self._streams):
            stream = self._streams[stream_id]
            for topic_id in sorted(stream.topics):
                topic = stream.topics[topic_id]
                for group_id in sorted(topic.groups):
                    group = topic.groups[group_id]
                    kept = [m for m in group.members if m.session != session]
                    if len(kept) != len(group.members):
                        group.members = kept
                        _rebalance(topic, group, now_us)

    # -- consumer groups ------------------------------------------------------------------

    def _create_consumer_group(self, cmd: CreateConsumerGroup, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.READ_TOPIC, stream.id, topic.id)
        _check_name(cmd.name, ErrorCode.INVALID_CONSUMER_GROUP_NAME)
        if cmd.name in topic.group_ids_by_name:
            raise StateError(ErrorCode.CONSUMER_GROUP_NAME_ALREADY_EXISTS, cmd.name)
        if len(topic.groups) >= CONSUMER_GROUPS_PER_TOPIC_MAX or topic.next_group_id > U32_MAX:
            raise StateError(ErrorCode.INVALID_CONSUMER_GROUP_NAME, "too many groups")
        group = GroupEntity(topic.next_group_id, cmd.name)
        topic.next_group_id += 1
        topic.groups[group.id] = group
        topic.group_ids_by_name[group.name] = group.id
        return ConsumerGroupCreated(self._group_info(stream, topic, group))

    def _delete_consumer_group(self, cmd: DeleteConsumerGroup, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.READ_TOPIC, stream.id, topic.id)
        group = self._find_group(topic, cmd.group)
        del topic.groups[group.id]
        del topic.group_ids_by_name[group.name]
        return Done()

    def _join_consumer_group(self, cmd: JoinConsumerGroup, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.READ_TOPIC, stream.id, topic.id)
        group = self._find_group(topic, cmd.group)
        session = self._find_session(ctx.session)
        if any(m.session == session.session for m in group.members):
            return Done()  # joining twice is a no-op, as a retry after a lost reply would be
        group.members.append(MemberEntity(session.session, session.number, ctx.op))
        _rebalance(topic, group, ctx.timestamp_us)
        return Done()

    def _leave_consumer_group(self, cmd: LeaveConsumerGroup, ctx: ApplyContext) -> MetadataResult:
        stream = self._find_stream(cmd.stream)
        topic = self._find_topic(stream, cmd.topic)
        self._require(ctx.session, Action.READ_TOPIC, stream.id, topic.id)
        group = self._find_group(topic, cmd.group)
        session = self._find_session(ctx.session)
        kept = [m for m in group.members if m.session != session.session]
        if len(kept) == len(group.members):
            raise StateError(ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND)
        group.members = kept
        _rebalance(topic, group, ctx.timestamp_us)
        return Done()

    def _revocation_drained(self, cmd: RevocationDrained, ctx: ApplyContext) -> MetadataResult:
        _require_system(ctx)
        if not 0 <= cmd.node < cmd.nodes:
            raise StateError(ErrorCode.INVALID_COMMAND, "node index out of range")
        group = self._revoking_group(cmd.stream, cmd.topic, cmd.group)
        revocation = None if group is None else group.revoking.get(cmd.partition_id)
        if group is None or revocation is None or revocation.source != cmd.session:
            return Done()  # completed, cancelled or replaced since the node looked
        if cmd.node not in revocation.drained:
            revocation.drained = sorted([*revocation.drained, cmd.node])
        if len(revocation.drained) >= cmd.nodes:
            _complete_revocation(group, cmd.partition_id)
        return Done()

    def _expire_revocations(self, cmd: ExpireRevocations, ctx: ApplyContext) -> MetadataResult:
        _require_system(ctx)
        for stream_id in sorted(self._streams):
            stream = self._streams[stream_id]
            for topic_id in sorted(stream.topics):
                topic = stream.topics[topic_id]
                for group_id in sorted(topic.groups):
                    group = topic.groups[group_id]
                    for partition_id in sorted(group.revoking):
                        created = group.revoking[partition_id].created_at_us
                        if created + cmd.timeout_us <= ctx.timestamp_us:
                            _complete_revocation(group, partition_id)
        return Done()

    def _revoking_group(self, stream_id: int, topic_id: int, group_id: int) -> GroupEntity | None:
        stream = self._streams.get(stream_id)
        topic = None if stream is None else stream.topics.get(topic_id)
        return None if topic is None else topic.groups.get(group_id)

    # -- authorization --------------------------------------------------------------------

    def _authorize(self, command: MetadataCommand, session: int | None) -> None:
        match command:
            case CreateRootUser() | EndSession() | ExpireTokens():
                if session is not None:
                    raise StateError(ErrorCode.UNAUTHORIZED, "system command")
            case Register():
                pass
            case Logout():
                self._find_session(session)
            case CreateStream():
                self._require(session, Action.CREATE_STREAM)
            case UpdateStream() | DeleteStream() | PurgeStream():
                stream_id, _ = self.resolve_ids(command.stream)
                self._require(session, Action.MANAGE_STREAM, stream_id)
            case CreateTopic():
                stream_id, _ = self.resolve_ids(command.stream)
                self._require(session, Action.CREATE_TOPIC, stream_id)
            case (
                UpdateTopic()
                | DeleteTopic()
                | PurgeTopic()
                | CreatePartitions()
                | DeletePartitions()
            ):
                stream_id, topic_id = self.resolve_ids(command.stream, command.topic)
                self._require(session, Action.MANAGE_TOPIC, stream_id, topic_id)
            case (
                CreateConsumerGroup()
                | DeleteConsumerGroup()
                | JoinConsumerGroup()
                | LeaveConsumerGroup()
            ):
                stream_id, topic_id = self.resolve_ids(command.stream, command.topic)
                self._require(session, Action.READ_TOPIC, stream_id, topic_id)
            case CreateUser() | UpdateUser() | DeleteUser() | UpdatePermissions():
                self._require(session, Action.MANAGE_USERS)
            case CreatePersonalAccessToken() | DeletePersonalAccessToken():
                self._token_actor(session)
            case ChangePassword():
                actor = self._find_session(session)
                if self._find_user(command.user).id != actor.user_id:
                    self._require(session, Action.MANAGE_USERS)

    def _require(
        self,
        session: int | None,
        action: Action,
        stream_id: int | None = None,
        topic_id: int | None = None,
    ) -> None:
        actor = self._find_session(session)
        user = self._users.get(actor.user_id)
        assert user is not None, "a session outlives its user"
        if user.status != UserStatus.ACTIVE:
            raise StateError(ErrorCode.USER_INACTIVE)
        if not permits(user.permissions, action, stream_id, topic_id):
            raise StateError(ErrorCode.UNAUTHORIZED, action.value)

    # -- lookups --------------------------------------------------------------------------

    def _find_stream(self, stream: Ident) -> StreamEntity:
        stream_id = self._stream_ids_by_name.get(stream) if isinstance(stream, str) else stream
        found = None if stream_id is None else self._streams.get(stream_id)
        if found is None:
            raise StateError(ErrorCode.STREAM_ID_NOT_FOUND, repr(stream))
        return found

    def _find_topic(self, stream: StreamEntity, topic: Ident) -> TopicEntity:
        topic_id = stream.topic_ids_by_name.get(topic) if isinstance(topic, str) else topic
        found = None if topic_id is None else stream.topics.get(topic_id)
        if found is None:
            raise StateError(ErrorCode.TOPIC_ID_NOT_FOUND, repr(topic))
        return found

    def _find_group(self, topic: TopicEntity, group: Ident) -> GroupEntity:
        group_id = topic.group_ids_by_name.get(group) if isinstance(group, str) else group
        found = None if group_id is None else topic.groups.get(group_id)
        if found is None:
            raise StateError(ErrorCode.CONSUMER_GROUP_ID_NOT_FOUND, repr(group))
        return found

    def _find_user(self, user: Ident) -> UserEntity:
        user_id = self._user_ids_by_name.get(user) if isinstance(user, str) else user
        found = None if user_id is None else self._users.get(user_id)
        if found is None:
            raise StateError(ErrorCode.RESOURCE_NOT_FOUND, f"user {user!r}")
        return found

    def _find_session(self, session: int | None) -> SessionEntity:
        found = None if session is None else self._sessions.get(session)
        if found is None:
            raise StateError(ErrorCode.UNAUTHENTICATED)
        return found

    # -- views ----------------------------------------------------------------------------

    def _stream_info(self, stream: StreamEntity) -> StreamInfo:
        return StreamInfo(
            stream.id,
            stream.name,
            stream.created_at_us,
            tuple(self._topic_info(stream, stream.topics[i]) for i in sorted(stream.topics)),
        )

    @staticmethod
    def _topic_info(stream: StreamEntity, topic: TopicEntity) -> TopicInfo:
        return TopicInfo(
            topic.id,
            stream.id,
            topic.name,
            topic.created_at_us,
            topic.options,
            tuple(
                PartitionInfo(p.id, p.created_at_us, p.created_op, p.purge_generation)
                for p in topic.partitions
            ),
            topic.explicit_options,
        )

    @staticmethod
    def _group_info(
        stream: StreamEntity, topic: TopicEntity, group: GroupEntity
    ) -> ConsumerGroupInfo:
        return ConsumerGroupInfo(
            group.id,
            stream.id,
            topic.id,
            group.name,
            group.generation,
            len(topic.partitions),
            tuple(
                MemberInfo(
                    member.member_id,
                    member.session,
                    tuple(member.partitions),
                    tuple(p for p in member.partitions if p in group.revoking),
                )
                for member in group.members
            ),
        )

    @staticmethod
    def _user_info(user: UserEntity) -> UserInfo:
        return UserInfo(
            user.id,
            user.username,
            user.created_at_us,
            user.status,
            user.permissions,
            user.password,
        )

    @staticmethod
    def _session_info(session: SessionEntity) -> SessionInfo:
        return SessionInfo(
            session.session,
            session.client_id,
            session.user_id,
            session.number,
            session.created_at_us,
        )

    # -- whole-state hooks (the snapshot codec's, ``snapshot.py``) ----------------------

    def contents(self) -> MetadataContents:
        """What the state holds that is not derived, every table in id order.

        The entities are the state's own objects, not copies (a snapshot would otherwise
        copy the whole state only to encode it): a reader encodes them and lets go, never
        mutates them.
        """
        return MetadataContents(
            next_stream_id=self._next_stream_id,
            next_user_id=self._next_user_id,
            next_session_number=self._next_session_number,
            root_user_id=self._root_user_id,
            streams=tuple(self._streams[i] for i in sorted(self._streams)),
            users=tuple(self._users[i] for i in sorted(self._users)),
            sessions=tuple(self._sessions[i] for i in sorted(self._sessions)),
            tokens=tuple(
                (user_id, own[name])
                for user_id, own in ((u, self._tokens[u]) for u in sorted(self._tokens))
                for name in sorted(own)
            ),
        )

    @classmethod
    def from_contents(cls, contents: MetadataContents) -> MetadataState:
        """The state holding ``contents``, with every index derived from it.

        The inverse of :meth:`contents`; the state takes ownership of the entities. Only
        what the indexes need is checked here: the caller (restore) runs
        :meth:`check_invariants` on the result.

        Raises:
            ValueError: two entities of one table share an id or a name kept unique.
        """
        state = cls()
        state._next_stream_id = contents.next_stream_id
        state._next_user_id = contents.next_user_id
        state._next_session_number = contents.next_session_number
        state._root_user_id = contents.root_user_id
        for stream in contents.streams:
            _require_new(stream.id, state._streams, stream.name, state._stream_ids_by_name)
            state._streams[stream.id] = stream
            state._stream_ids_by_name[stream.name] = stream.id
            for topic_id in sorted(stream.topics):
                state._partitions_total += len(stream.topics[topic_id].partitions)
        for user in contents.users:
            _require_new(user.id, state._users, user.username, state._user_ids_by_name)
            state._users[user.id] = user
            state._user_ids_by_name[user.username] = user.id
        for session in contents.sessions:
            _require_new(
                session.session, state._sessions, session.client_id, state._session_by_client
            )
            state._sessions[session.session] = session
            state._session_by_client[session.client_id] = session.session
        for number in sorted(state._sessions):
            user_id = state._sessions[number].user_id
            state._user_sessions.setdefault(user_id, {})[number] = None
        for owner, token in contents.tokens:
            own = state._tokens.setdefault(owner, {})
            if token.name in own or token.token_hash in state._token_owners:
                raise ValueError(f"duplicate token {token.name!r} of user {owner}")
            own[token.name] = token
            state._token_owners[token.token_hash] = (owner, token.name)
        state._recompute_token_expiry()
        return state

    # -- invariants -----------------------------------------------------------------------

    def check_invariants(self) -> list[str]:
        """Every broken invariant, described; an empty list means the state is sound."""
        problems: list[str] = []
        if sorted(self._stream_ids_by_name.values()) != sorted(self._streams):
            problems.append("stream name index disagrees with streams")
        partitions_total = 0
        for stream_id in sorted(self._streams):
            stream = self._streams[stream_id]
            if stream_id != stream.id or stream.id >= self._next_stream_id:
                problems.append(f"stream {stream_id} id out of order")
            if self._stream_ids_by_name.get(stream.name) != stream.id:
                problems.append(f"stream {stream_id} missing from the name index")
            if sorted(stream.topic_ids_by_name.values()) != sorted(stream.topics):
                problems.append(f"stream {stream_id} topic name index disagrees")
            for topic_id in sorted(stream.topics):
                topic = stream.topics[topic_id]
                partitions_total += len(topic.partitions)
                problems.extend(_topic_problems(stream, topic, self._sessions))
        if partitions_total != self._partitions_total:
            problems.append("partition total disagrees with the topics")
        if sorted(self._user_ids_by_name.values()) != sorted(self._users):
            problems.append("username index disagrees with users")
        for user_id in sorted(self._users):
            user = self._users[user_id]
            if user.id != user_id or user.id >= self._next_user_id:
                problems.append(f"user {user_id} id out of order")
        if self._root_user_id is not None and self._root_user_id not in self._users:
            problems.append("the root user is missing")
        if len(self._sessions) > SESSIONS_MAX:
            problems.append("too many sessions")
        if sorted(self._session_by_client.values()) != sorted(self._sessions):
            problems.append("client index disagrees with sessions")
        by_user = sorted(s for own in self._user_sessions.values() for s in own)
        if by_user != sorted(self._sessions):
            problems.append("user index disagrees with sessions")
        for user_id in sorted(self._user_sessions):
            own = list(self._user_sessions[user_id])
            if not own or own != sorted(own) or len(own) > SESSIONS_PER_USER_MAX:
                problems.append(f"user {user_id}'s sessions are out of order or too many")
            elif any(self._sessions[s].user_id != user_id for s in own):
                problems.append(f"user {user_id}'s index names another user's session")
        for session_no in sorted(self._sessions):
            session = self._sessions[session_no]
            if self._session_by_client.get(session.client_id) != session_no:
                problems.append(f"session {session_no} missing from the client index")
            if session.user_id not in self._users:
                problems.append(f"session {session_no} outlived its user")
        problems.extend(self._token_problems())
        return problems

    def _token_problems(self) -> list[str]:
        problems: list[str] = []
        indexed = 0
        for user_id in sorted(self._tokens):
            own = self._tokens[user_id]
            if user_id not in self._users:
                problems.append(f"user {user_id}'s tokens outlived it")
            if not own or len(own) > TOKENS_PER_USER_MAX:
                problems.append(f"user {user_id} holds no tokens or too many")
            for name in sorted(own):
                token = own[name]
                indexed += 1
                if token.name != name or self._token_owners.get(token.token_hash) != (
                    user_id,
                    name,
                ):
                    problems.append(f"user {user_id}'s token {name!r} missing from the index")
                if not TOKEN_NAME_SIZE_BYTES_MIN <= len(name.encode()) <= TOKEN_NAME_SIZE_BYTES_MAX:
                    problems.append(f"user {user_id}'s token {name!r} has a bad name")
        if indexed != len(self._token_owners):
            problems.append("token hash index disagrees with the tokens")
        expiries = [t.expiry_at_us for own in self._tokens.values() for t in own.values()]
        known = [e for e in expiries if e is not None]
        if self._token_expiry_min_us != (min(known) if known else None):
            problems.append("the earliest token expiry is stale")
        return problems


# ---------------------------------------------------------------------------------------
# Helpers.


def _require_system(ctx: ApplyContext) -> None:
    if ctx.session is not None:
        raise StateError(ErrorCode.UNAUTHORIZED, "system command")


def _check_name(name: str, code: ErrorCode) -> None:
    if not 1 <= len(name.encode("utf-8")) <= NAME_SIZE_BYTES_MAX:
        raise StateError(code, "names are 1..255 bytes of UTF-8")


def _check_username(username: str) -> None:
    if not USERNAME_LENGTH_MIN <= len(username) <= USERNAME_LENGTH_MAX:
        raise StateError(ErrorCode.INVALID_USERNAME)
    _check_name(username, ErrorCode.INVALID_USERNAME)


def _check_token_name(name: str) -> None:
    if not TOKEN_NAME_SIZE_BYTES_MIN <= len(name.encode("utf-8")) <= TOKEN_NAME_SIZE_BYTES_MAX:
        raise StateError(
            ErrorCode.INVALID_PERSONAL_ACCESS_TOKEN_NAME, "a token name is 3 to 30 bytes"
        )


def _check_options(options: TopicOptions) -> None:
    if not 1 <= options.message_expiry_us <= U64_MAX:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, "message_expiry")
    segment = options.segment_size_bytes
    if (
        not SEGMENT_SIZE_BYTES_MIN <= segment <= SEGMENT_SIZE_BYTES_MAX
        or segment % SEGMENT_SIZE_ALIGNMENT_BYTES
    ):
        raise StateError(ErrorCode.INVALID_SEGMENT_SIZE)
    size = options.max_topic_size_bytes
    if not 1 <= size <= U64_MAX:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, "max_topic_size")
    if size != SIZE_UNLIMITED and size < segment:
        raise StateError(ErrorCode.INVALID_TOPIC_SIZE)
    if not 1 <= options.messages_required_to_save <= MESSAGES_REQUIRED_TO_SAVE_MAX:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, "messages_required_to_save")
    saved = options.size_of_messages_required_to_save_bytes
    if not 1 <= saved <= SIZE_REQUIRED_TO_SAVE_BYTES_MAX:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, "size_of_messages_required_to_save")


def _purge(topic: TopicEntity) -> None:
    for partition in topic.partitions:
        partition.purge_generation += 1


def _rebalance_topic(topic: TopicEntity, now_us: int) -> None:
    for group_id in sorted(topic.groups):
        _rebalance(topic, topic.groups[group_id], now_us)


def _rebalance(topic: TopicEntity, group: GroupEntity, now_us: int) -> None:
    """Bring the group's assignment in line with its members and the topic's partitions
    (invariant 6), and bump its generation. Deterministic: members in join order, ties
    to the earliest joined, partitions ascending.

    1. Partitions that no longer exist are forgotten; a revocation whose owner or target
       is gone is cancelled (the partition stays with its owner, or has none).
    2. Each partition without an owner goes at once to the least loaded member: nobody
       can be processing it.
    3. While one member's load (what it will own once revocations complete) exceeds
       another's by more than one, one of its partitions starts revoking toward the least
       loaded (the highest it does not already give away), or, if everything it is to
       hold is still coming to it, one incoming revocation is re-aimed there.
    """
    group.generation += 1
    count = len(topic.partitions)
    members = group.members
    sessions = {m.session: index for index, m in enumerate(members)}
    for member in members:
        member.partitions = [p for p in member.partitions if p < count]
    for partition_id in sorted(group.revoking):
        revocation = group.revoking[partition_id]
        source = sessions.get(revocation.source)
        if (
            source is None
            or revocation.target not in sessions
            or partition_id not in members[source].partitions
        ):
            del group.revoking[partition_id]
    if not members:
        return
    owned = {p for member in members for p in member.partitions}
    load = [len(member.partitions) for member in members]
    for revocation in group.revoking.values():
        load[sessions[revocation.source]] -= 1
        load[sessions[revocation.target]] += 1
    for partition_id in range(count):
        if partition_id not in owned:
            least = min(range(len(members)), key=lambda i: (load[i], i))
            members[least].partitions.append(partition_id)
            load[least] += 1
    for member in members:
        member.partitions.sort()
    for _ in range(count + len(members) + 1):
        most = max(range(len(members)), key=lambda i: (load[i], -i))
        least = min(range(len(members)), key=lambda i: (load[i], i))
        if load[most] - load[least] <= 1:
            break
        giving = [p for p in members[most].partitions if p not in group.revoking]
        if giving:
            partition_id = giving[-1]
            group.revoking[partition_id] = RevocationEntity(
                members[most].session, members[least].session, now_us
            )
        else:
            coming = [
                p
                for p in sorted(group.revoking)
                if group.revoking[p].target == members[most].session
            ]
            assert coming, "a member's load is what it owns or what comes to it"
            group.revoking[coming[-1]].target = members[least].session
        load[most] -= 1
        load[least] += 1
    else:
        raise AssertionError("the rebalance did not settle")
    group.revoking = {p: group.revoking[p] for p in sorted(group.revoking)}


def _complete_revocation(group: GroupEntity, partition_id: int) -> None:
    """Move a revoking partition to its target (both are members: a rebalance cancels a
    revocation whose owner or target left)."""
    revocation = group.revoking.pop(partition_id)
    source = next(m for m in group.members if m.session == revocation.source)
    target = next(m for m in group.members if m.session == revocation.target)
    source.partitions.remove(partition_id)
    target.partitions.append(partition_id)
    target.partitions.sort()
    group.generation += 1


def _topic_problems(
    stream: StreamEntity, topic: TopicEntity, sessions: dict[int, SessionEntity]
) -> list[str]:
    problems: list[str] = []
    where = f"topic {stream.id}/{topic.id}"
    if stream.topic_ids_by_name.get(topic.name) != topic.id or topic.id >= stream.next_topic_id:
        problems.append(f"{where} name index or id out of order")
    if [p.id for p in topic.partitions] != list(range(len(topic.partitions))):
        problems.append(f"{where} partition ids are not 0..count-1")
    if sorted(topic.group_ids_by_name.values()) != sorted(topic.groups):
        problems.append(f"{where} group name index disagrees")
    for group_id in sorted(topic.groups):
        group = topic.groups[group_id]
        joined = [m.joined_op for m in group.members]
        if joined != sorted(joined) or len({m.session for m in group.members}) != len(joined):
            problems.append(f"{where} group {group_id} members out of join order")
        if any(m.session not in sessions for m in group.members):
            problems.append(f"{where} group {group_id} has a member without a session")
        if group.id >= topic.next_group_id:
            problems.append(f"{where} group {group_id} id out of order")
        problems.extend(_assignment_problems(f"{where} group {group_id}", topic, group))
    return problems


def _assignment_problems(where: str, topic: TopicEntity, group: GroupEntity) -> list[str]:
    """Invariant 6: one owner per partition, every partition owned while there are
    members, revocations between two members from the owner."""
    owned = [p for member in group.members for p in member.partitions]
    expected = list(range(len(topic.partitions))) if group.members else []
    problems: list[str] = []
    if sorted(owned) != expected:
        problems.append(f"{where} does not own each partition exactly once")
    if any(m.partitions != sorted(m.partitions) for m in group.members):
        problems.append(f"{where} partitions out of order")
    sessions = {m.session: m for m in group.members}
    for partition_id in sorted(group.revoking):
        revocation = group.revoking[partition_id]
        source = sessions.get(revocation.source)
        if (
            source is None
            or partition_id not in source.partitions
            or revocation.target not in sessions
            or revocation.target == revocation.source
            or revocation.drained != sorted(set(revocation.drained))
        ):
            problems.append(f"{where} revocation of partition {partition_id} is unsound")
    return problems


def _require_new(key: int, table: dict[int, Any], name: Any, index: dict[Any, int]) -> None:
    if key in table or name in index:
        raise ValueError(f"duplicate entry {key} / {name!r} in snapshot")
