"""The metadata group's consensus state machine, its reads and its reply payloads.

Purpose: :class:`MetadataMachine` implements ``consensus.protocols.StateMachine``
(``apply(prepare) -> bytes``, ``snapshot``, ``restore``) over
:class:`broker.state.metadata.MetadataState`, and serves the metadata reads from committed
local state, never replicated: get stream(s), topic(s), consumer group(s), sync consumer
group, user(s), get me, client(s), the caller's personal access tokens. The Iggy reply
payloads of metadata records (:func:`metadata_reply` and the details builders) are built
here.

Invariants:

1. Replies are built from the prepare and the committed state alone, so every replica
   returns identical bytes: result-framed for metadata-plane ops (``[count u32]`` then
   ``{index u32, result u32}``; success is count 0 and the payload, a committed rejection
   one entry ``{0, code}`` and no payload), plain for Logout. A created token's reply
   names its hash, never the raw token, which no replica knows: the node that admitted
   the request swaps in the raw token it drew (``broker.core.commands.token_reply``).
2. Metadata prepare bodies are :mod:`broker.state.codec` commands, final when proposed:
   ``prepare`` passes them through, refusing only a register that would take over another
   user's client id (:data:`CLIENT_ID_TAKEN_STATUS`).
3. Reads return reply payload bytes; an empty body
   (:data:`broker.state.errors.NOT_FOUND`) means "not found" where Iggy says so.
4. Nothing here reads a clock, draws randomness or touches IO; connection facts
   (transport, address) and partition statistics are passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from broker.state.codec import SYSTEM_OPERATIONS, decode_command
from broker.state.errors import NOT_FOUND, ErrorCode, StateError
from broker.state.metadata import (
    ApplyContext,
    ConsumerGroupCreated,
    ConsumerGroupInfo,
    Done,
    MetadataResult,
    MetadataState,
    Register,
    Registered,
    Rejected,
    SessionInfo,
    StreamCreated,
    StreamInfo,
    TokenCreated,
    TopicCreated,
    TopicInfo,
    UserCreated,
    UserInfo,
)
from broker.state.metadata import Compression as DomainCompression
from broker.state.options import WIRE_KEY_BY_FIELD, topic_option_entries
from broker.state.permissions import Action
from broker.state.snapshot import restore_state, snapshot_state
from consensus.messages import Prepare
from consensus.protocols import Prepared, RequestBody, RequestRejected, joined_body
from sdk import wire
from sdk.wire.codes import Operation

_T = TypeVar("_T")

SERVER_VERSION: Final = "0.9.0"
"""The Iggy server version we answer logins with (the protocol we speak is Iggy 0.9's)."""

PARTITION_SEGMENTS_AT_CREATION: Final = 1
"""A new partition reports one (empty, active) segment, as Iggy does."""

CLIENT_ID_TAKEN_STATUS: Final = ErrorCode.UNAUTHORIZED
"""The status a register gets, before it enters the log, when its client id holds a live
session of another user; the node answers the client with Iggy's eviction (SessionError)."""


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
    derived = [name for name in WIRE_KEY_BY_FIELD if name not in topic.explicit_options]
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
            options=topic_option_entries(topic.options, topic.explicit_options),
            derived_options=topic_option_entries(topic.options, derived),
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


def _user_info(user: UserInfo) -> wire.UserInfo:
    return wire.UserInfo(
        user.id, user.created_at_us, wire.UserStatus(int(user.status)), user.username
    )


def user_details(user: UserInfo) -> wire.UserDetails:
    """GET_USER / CREATE_USER reply payload (never the password hash)."""
    return wire.UserDetails(_user_info(user), user.permissions)


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
        case TokenCreated(token_hash):
            return wire.result_ok(token_hash)


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
        self, op: int, operation: int, body: RequestBody, timestamp_us: int, frontier: int
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
        body = joined_body(body)  # one buffer already: metadata bodies come whole
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
        return snapshot_state(self.state)

    def restore(self, snapshot: bytes) -> None:
        self.state = restore_state(snapshot)
        self.last_result = None

    def log_op_min(self) -> int | None:
        """None: the metadata state holds everything; its log is not its data."""
        return None

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

    def get_personal_access_tokens(self, session: int) -> bytes:
        """The caller's own tokens, by name, with their expiry (0: never), as Iggy lists
        them; never another user's, whatever the caller's permissions."""
        return wire.PersonalAccessTokens(
            tuple(
                wire.PersonalAccessTokenInfo(t.name, t.expiry_at_us or 0)
                for t in self.state.personal_access_tokens(session)
            )
        ).encode()

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
