"""Which way each client command goes through a node, and the decisions of the writes.

Purpose: a node answers some commands itself (PING, reads of committed metadata, facts of
its own), proposes others to the metadata group or to one partition group, and gives a
few their own path (a login checks a password off the event loop or looks a token's hash
up, a new password is hashed before it is proposed, a new access token is drawn by the
node and only its hash proposed, an attach waits for metadata). :data:`ROUTES` says, as a
table, which route each command takes; the functions below decide, against the node's
committed metadata, what a write proposes and to which group, so the runtime and the
simulator admit a request exactly alike.

Invariants:

1. Every command the codec decodes (``sdk.wire.COMMANDS``) has exactly one route; a code
   without one is refused with ``INVALID_COMMAND`` by the driver, never handled by a
   fallback branch.
2. A write is judged before it is proposed: the session's permissions (``authorize`` or
   the route functions of ``broker.state.routing``) and the node's partition capacity
   (``broker.core.capacity``). A refused write is never proposed.
3. What a write proposes is a function of the request, the session it acts for and the
   committed metadata at admission (plus, for a balanced send, the node's own round-robin
   counter, local as in Iggy), so every driver proposes the same op for the same request.
4. Before anything of a request is decoded, :func:`judge_code` gives Iggy's answer to the
   codes it answers whatever the body: the legacy logins are evicted, logged in or not;
   before login every non-replicated code but PING gets 40, known here or not; a code of
   Iggy's this node does not serve as a command gets the answer Iggy's server gives it
   (:data:`UNSERVED_CODES`).
5. Pure: no clock, IO, randomness or task; the driver catches the ``StateError`` a decision
   raises and answers it with the error's code. A new access token is drawn by the driver
   and passed in (:func:`admit_create_token`); the raw token is handed to the client only
   by :func:`token_reply`, never proposed, logged or cached.

Theory of operation: the driver asks :func:`judge_code` about the header, decodes the
frame, checks the session
(``broker.core.sessions``) and looks the command's route up in :data:`ROUTES`; its handler
for that route (a table of the driver's too) calls :func:`admit_metadata_write`,
:func:`admit_send`, :func:`admit_offset_write`, :func:`admit_delete_segments` or
:func:`admit_poll` and carries out what it returns: it submits a :class:`MetadataWrite`
or :class:`PartitionWrite` to the group's host (``broker.core.groups``), answers a
:class:`Denied` with its status, and serves an admitted poll from the partition's state
once the read barrier allows it. Reads of committed metadata are :data:`METADATA_READS`,
one function per command.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from broker.core.capacity import beyond_capacity
from broker.core.connections import ConnectionContext
from broker.state.admission import create_token_command, metadata_command
from broker.state.codec import OPERATION_BY_COMMAND, encode_command
from broker.state.credentials import token_hash
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import MetadataCommand, MetadataState, PurgeStream, PurgeTopic
from broker.state.metadata_machine import MetadataMachine, StatsSource
from broker.state.partition_machine import resolved_offset_request
from broker.state.permissions import Action
from broker.state.routing import PartitionRoute, route_offset, route_poll, route_send
from consensus.client_table import CachedReply, ClientTable, Verdict
from sdk import wire
from sdk.wire import CommandCode, EvictionReason, IggyErrorCode, Operation
from sdk.wire.codes import operation_for_code

POLL_RESYNC_PARTITION: Final = 0xFFFF_FFFF
"""A poll reply for this partition id tells a consumer-group member to sync and poll
again: the group's assignment changed under it."""


class Route(enum.Enum):
    """The ways a command goes through a node."""

    PING = "ping"
    """Answered at once, before any session check."""
    LOGIN = "login"
    """A password check off the event loop, or a token's hash looked up in committed
    metadata, then the same register proposed to the metadata group."""
    METADATA_WRITE = "metadata write"
    """A metadata command, judged (:func:`admit_metadata_write`) and proposed."""
    LOGOUT = "logout"
    """A metadata write that also unbinds the connection's session once committed."""
    CREATE_USER = "create user"
    """A metadata write whose password is hashed (off the event loop) before it is proposed."""
    CHANGE_PASSWORD = "change password"
    """A metadata write that verifies the current password and hashes the new one first."""
    CREATE_TOKEN = "create token"
    """A metadata write of a token the node draws; only its hash is proposed, and the
    committed reply gets the raw token (:func:`admit_create_token`, :func:`token_reply`)."""
    SEND = "send"
    """Messages, proposed to the partition group the send routes to (:func:`admit_send`)."""
    DELETE_SEGMENTS = "delete segments"
    """The oldest sealed segments of a partition retired: the offset after them read from
    the partition's segments here, then proposed to its group as a retention
    (:func:`admit_delete_segments`)."""
    OFFSET_WRITE = "offset write"
    """A consumer offset stored or deleted in its partition group (:func:`admit_offset_write`)."""
    ATTACH = "attach"
    """The connection acts for a session of the same user, once the node has applied the
    metadata op the route was given at."""
    ROUTING = "routing"
    """Where a poll or an offset write of a cluster client must go: the group's primary."""
    POLL = "poll"
    """Messages read from a partition's state behind the read barrier (:func:`admit_poll`)."""
    OFFSET_READ = "offset read"
    """A stored consumer offset, read behind a fresh read barrier."""
    METADATA_READ = "metadata read"
    """Read from committed metadata (:data:`METADATA_READS`)."""
    NODE_READ = "node read"
    """Facts of this node: its clients, the cluster, its stats and option defaults."""


ROUTES: Final[Mapping[CommandCode, Route]] = MappingProxyType(
    {
        CommandCode.PING: Route.PING,
        CommandCode.LOGIN_REGISTER: Route.LOGIN,
        CommandCode.LOGIN_REGISTER_WITH_PAT: Route.LOGIN,
        CommandCode.LOGOUT_USER: Route.LOGOUT,
        CommandCode.CREATE_USER: Route.CREATE_USER,
        CommandCode.CHANGE_PASSWORD: Route.CHANGE_PASSWORD,
        CommandCode.DELETE_USER: Route.METADATA_WRITE,
        CommandCode.UPDATE_USER: Route.METADATA_WRITE,
        CommandCode.UPDATE_PERMISSIONS: Route.METADATA_WRITE,
        CommandCode.CREATE_PERSONAL_ACCESS_TOKEN: Route.CREATE_TOKEN,
        CommandCode.DELETE_PERSONAL_ACCESS_TOKEN: Route.METADATA_WRITE,
        CommandCode.CREATE_STREAM: Route.METADATA_WRITE,
        CommandCode.DELETE_STREAM: Route.METADATA_WRITE,
        CommandCode.UPDATE_STREAM: Route.METADATA_WRITE,
        CommandCode.PURGE_STREAM: Route.METADATA_WRITE,
        CommandCode.CREATE_TOPIC: Route.METADATA_WRITE,
        CommandCode.DELETE_TOPIC: Route.METADATA_WRITE,
        CommandCode.UPDATE_TOPIC: Route.METADATA_WRITE,
        CommandCode.PURGE_TOPIC: Route.METADATA_WRITE,
        CommandCode.CREATE_PARTITIONS: Route.METADATA_WRITE,
        CommandCode.DELETE_PARTITIONS: Route.METADATA_WRITE,
        CommandCode.DELETE_SEGMENTS: Route.DELETE_SEGMENTS,
        CommandCode.CREATE_CONSUMER_GROUP: Route.METADATA_WRITE,
        CommandCode.DELETE_CONSUMER_GROUP: Route.METADATA_WRITE,
        CommandCode.JOIN_CONSUMER_GROUP: Route.METADATA_WRITE,
        CommandCode.LEAVE_CONSUMER_GROUP: Route.METADATA_WRITE,
        CommandCode.SEND_MESSAGES: Route.SEND,
        CommandCode.STORE_CONSUMER_OFFSET: Route.OFFSET_WRITE,
        CommandCode.DELETE_CONSUMER_OFFSET: Route.OFFSET_WRITE,
        CommandCode.ATTACH_CONSUMER_SESSION: Route.ATTACH,
        CommandCode.POLL_ROUTING: Route.ROUTING,
        CommandCode.CONSUMER_OFFSET_ROUTING: Route.ROUTING,
        CommandCode.POLL_MESSAGES: Route.POLL,
        CommandCode.POLL_PRIMARY: Route.POLL,
        CommandCode.GET_CONSUMER_OFFSET: Route.OFFSET_READ,
        CommandCode.GET_STREAM: Route.METADATA_READ,
        CommandCode.GET_STREAMS: Route.METADATA_READ,
        CommandCode.GET_TOPIC: Route.METADATA_READ,
        CommandCode.GET_TOPICS: Route.METADATA_READ,
        CommandCode.GET_CONSUMER_GROUP: Route.METADATA_READ,
        CommandCode.GET_CONSUMER_GROUPS: Route.METADATA_READ,
        CommandCode.SYNC_CONSUMER_GROUP: Route.METADATA_READ,
        CommandCode.GET_USER: Route.METADATA_READ,
        CommandCode.GET_USERS: Route.METADATA_READ,
        CommandCode.GET_PERSONAL_ACCESS_TOKENS: Route.METADATA_READ,
        CommandCode.GET_ME: Route.NODE_READ,
        CommandCode.GET_CLIENT: Route.NODE_READ,
        CommandCode.GET_CLIENTS: Route.NODE_READ,
        CommandCode.GET_CLUSTER_METADATA: Route.NODE_READ,
        CommandCode.DESCRIBE_OPTIONS: Route.NODE_READ,
        CommandCode.GET_STATS: Route.NODE_READ,
        CommandCode.GET_SNAPSHOT_FILE: Route.NODE_READ,
    }
)
"""The route of every command this node serves (invariant 1)."""


# -- codes answered before their body is looked at -------------------------------------


@dataclass(frozen=True, slots=True)
class CodeAnswered:
    """Answer ``status`` and keep the connection; the request goes no further."""

    status: int
    refusal: str = ""
    """What the refusal log line says, where the status alone does not (or "")."""


@dataclass(frozen=True, slots=True)
class CodeEvicted:
    """Evict the client with ``reason`` (the connection closes); ``why`` goes to the log."""

    reason: EvictionReason
    why: str


CodeVerdict = CodeAnswered | CodeEvicted

EVICTED_CODES: Final[Mapping[int, CodeEvicted]] = MappingProxyType(
    {
        # Iggy's logins from before the register handshake: its server refuses them whole
        # with MalformedLogin, logged in or not, so a client of the old protocol fails at
        # once instead of waiting for an answer it will never get.
        CommandCode.LOGIN_USER: CodeEvicted(EvictionReason.MALFORMED_LOGIN, "a legacy login"),
        CommandCode.LOGIN_WITH_PERSONAL_ACCESS_TOKEN: CodeEvicted(
            EvictionReason.MALFORMED_LOGIN, "a legacy token login"
        ),
    }
)
"""Non-replicated codes evicted before any other check (invariant 4)."""

UNSERVED_CODES: Final[Mapping[int, CodeAnswered]] = MappingProxyType(
    {
        # Iggy's server has no on-demand flush either and answers so: an empty OK would
        # vouch for a sync nobody asked the disk for. Ours writes messages as they commit.
        CommandCode.FLUSH_UNSAVED_BUFFER: CodeAnswered(IggyErrorCode.FEATURE_UNAVAILABLE),
    }
)
"""Non-replicated codes of Iggy's that are not commands here, with Iggy's answer to a
logged-in client (invariant 4)."""

CODES_BEFORE_LOGIN: Final = frozenset({int(CommandCode.PING)})
"""The only non-replicated code served to a connection that has not logged in (the
register handshake travels as its own operation)."""


def judge_code(operation: Operation, code: int, *, logged_in: bool) -> CodeVerdict | None:
    """Iggy's answer to a request of ``operation`` and header ``code`` whatever its body,
    on a connection that has (``logged_in``) or has not logged in; None: go on and
    decode it (invariant 4)."""
    if operation is not Operation.NON_REPLICATED:
        return None
    evicted = EVICTED_CODES.get(code)
    if evicted is not None:
        return evicted
    if not logged_in and code not in CODES_BEFORE_LOGIN:
        return CodeAnswered(IggyErrorCode.UNAUTHENTICATED, "not logged in")
    return UNSERVED_CODES.get(code)


# -- writes -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Denied:
    """A write refused at admission with an Iggy status; nothing was proposed."""

    status: int
    refusal: str = ""
    """What the refusal log line says, where the status alone does not (or "")."""
    operation: int = 0
    """The operation the write would have proposed (0: unknown), so a retry of one the
    group already committed is still answered from its client table
    (:func:`committed_retry`)."""


@dataclass(frozen=True, slots=True)
class MetadataWrite:
    """Propose ``operation`` with ``body`` to the metadata group."""

    command: MetadataCommand
    operation: int
    body: bytes


@dataclass(frozen=True, slots=True)
class PartitionWrite:
    """Propose ``operation`` with ``body`` to the group of ``route``'s partition."""

    route: PartitionRoute
    operation: int
    body: bytes


def admit_metadata_write(
    state: MetadataState,
    code: CommandCode,
    payload: wire.RequestPayload,
    session: int,
    partitions_max: int | None,
) -> MetadataWrite | Denied:
    """The metadata command of a request on :attr:`Route.METADATA_WRITE` or
    :attr:`Route.LOGOUT`, judged for ``session`` and for a node that hosts at most
    ``partitions_max`` partitions (None: no bound).

    Raises:
        StateError: an option or value the server does not support.
    """
    command = metadata_command(code, payload)
    return admit_command(state, command, session, partitions_max)


def admit_command(
    state: MetadataState,
    command: MetadataCommand,
    session: int,
    partitions_max: int | None = None,
) -> MetadataWrite | Denied:
    """``command`` judged for ``session`` (permissions, then capacity) and encoded."""
    denied = state.authorize(command, session)
    if denied is not None:
        return Denied(int(denied), operation=int(OPERATION_BY_COMMAND[type(command)]))
    beyond = beyond_capacity(command, state.partitions_total, partitions_max)
    if beyond:
        operation = int(OPERATION_BY_COMMAND[type(command)])
        return Denied(int(ErrorCode.PARTITIONS_LIMIT_REACHED), beyond, operation)
    operation, body = encode_command(command)
    return MetadataWrite(command, int(operation), body)


def purged_partitions(
    state: MetadataState, command: MetadataCommand
) -> list[tuple[PartitionRoute, int]]:
    """The partitions a committed purge ``command`` truncates, each with the purge
    generation its group must apply, read from ``state`` once it applied the purge; empty
    for any other command, or a stream or topic gone since."""
    if isinstance(command, PurgeTopic):
        try:
            stream_id, topic_id = state.resolve_ids(command.stream, command.topic)
        except StateError:
            return []
        wanted = {(stream_id, topic_id)}
    elif isinstance(command, PurgeStream):
        try:
            stream_id, _ = state.resolve_ids(command.stream)
        except StateError:
            return []
        wanted = {(stream_id, topic.id) for topic in state.topics(command.stream)}
    else:
        return []
    return [
        (PartitionRoute(ref.stream_id, ref.topic_id, ref.partition_id), ref.purge_generation)
        for ref in state.partition_refs()
        if (ref.stream_id, ref.topic_id) in wanted
    ]


def committed_retry(
    table: ClientTable,
    client_id: int,
    session: int,
    request: int,
    denied: Denied,
    checksum: bytes,
) -> CachedReply | None:
    """The committed reply of a request admission just refused, when it is a retry of one
    the group committed (same client, session, number, operation and identity digest).

    Admission judges a request against the state as it is now, and a committed request
    may have changed exactly what it checks: a retried DELETE_TOPIC whose first attempt
    committed (its reply lost) finds no topic. The client table answers such a retry with
    the reply the first attempt committed, as it answers any duplicate; the table holds
    committed requests only, so the answer is what the group did.
    """
    if not denied.operation:
        return None
    verdict = table.judge(
        client_id,
        session,
        request,
        register=False,
        operation=denied.operation,
        request_checksum=checksum,
    )
    if verdict is not Verdict.DUPLICATE:
        return None
    return table.cached_reply(
        client_id, register=False, operation=denied.operation, request_checksum=checksum
    )


@dataclass(frozen=True, slots=True)
class TokenWrite:
    """Propose ``write``; its committed reply is the client's once :func:`token_reply`
    swapped in the raw token whose hash is ``token_hash``."""

    write: MetadataWrite
    token_hash: bytes


def admit_create_token(
    state: MetadataState,
    request: wire.CreatePersonalAccessToken,
    token: str,
    session: int,
) -> TokenWrite | Denied:
    """A CREATE_PERSONAL_ACCESS_TOKEN for ``session``'s own user, with ``token`` (drawn by
    the driver from the OS) as the new token: the command carries its hash only, so the
    raw token never enters the log, a snapshot or a client table."""
    hashed = token_hash(token)
    write = admit_command(state, create_token_command(request, hashed), session)
    if isinstance(write, Denied):
        return write
    return TokenWrite(write, hashed)


def token_reply(body: bytes, hashed: bytes, token: str) -> bytes:
    """The client's reply to a token creation whose committed reply is ``body``.

    A committed creation names the hash it stored (``metadata_reply``). When that is the
    hash of ``token``, this request created it: the client gets the raw token, once. A
    success that names another hash is the cached reply of an earlier creation under the
    same request number (a retry): its raw token was shown once and is gone, and ``token``
    was never stored, so the retry is refused as Iggy refuses it, with
    ``PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS``: the name is taken by that creation. A
    rejection passes through.
    """
    if body[: len(wire.RESULT_OK)] != wire.RESULT_OK:
        return body
    if body[len(wire.RESULT_OK) :] == hashed:
        return wire.result_ok(wire.RawPersonalAccessToken(token).encode())
    return wire.result_rejected(int(ErrorCode.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS))


class Balancer:
    """The node's round-robin counter per topic for balanced sends (local, as in Iggy: two
    nodes spread a topic's balanced sends independently)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: dict[tuple[int, int], int] = {}

    def admit_send(
        self, state: MetadataState, send: wire.SendMessages, session: int
    ) -> PartitionRoute:
        """The partition a send goes to; a balanced send moves the topic's counter on
        only once it is admitted.

        Raises:
            StateError: unknown stream, topic or partition, no partitions, no permission.
        """
        stream_id, topic_id = state.resolve_ids(send.stream_id.value, send.topic_id.value)
        assert topic_id is not None
        key = (stream_id, topic_id)
        counter = self._next.get(key, 0)
        route = route_send(state, send, session, counter)
        if isinstance(send.partitioning, wire.Balanced):
            self._next[key] = counter + 1
        return route


def admit_offset_write(
    state: MetadataState,
    code: CommandCode,
    payload: wire.StoreConsumerOffset | wire.DeleteConsumerOffset,
    acting: int,
) -> PartitionWrite:
    """A consumer offset stored or deleted for session ``acting`` (the attached session,
    or the connection's own: :func:`acting_session`), with its consumer group resolved
    and its partition explicit, charged to the acting session's user.

    Raises:
        StateError: unknown objects, or no permission.
    """
    route = route_offset(state, payload, acting)
    body = resolved_offset_request(payload, route, state.session(acting).user_id)
    return PartitionWrite(route, int(operation_for_code(code)), body)


def admit_delete_segments(
    state: MetadataState, request: wire.DeleteSegments, session: int
) -> PartitionRoute:
    """The partition a DELETE_SEGMENTS retires segments of, judged as Iggy 0.9 judges it:
    the topic's ``manage_topic`` permission (what updating the topic needs), and a
    partition that exists.

    Raises:
        StateError: unknown stream, topic or partition, or no permission.
    """
    topic = state.topic(request.stream_id.value, request.topic_id.value)
    denied = state.permits(session, Action.MANAGE_TOPIC, topic.stream_id, topic.id)
    if denied is not None:
        raise StateError(denied)
    if request.partition_id >= topic.partitions_count:
        raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(request.partition_id))
    return PartitionRoute(topic.stream_id, topic.id, request.partition_id)


def acting_session(context: ConnectionContext, state: MetadataState, session: int) -> int | None:
    """The session a connection's partition requests act for: the one it attached
    (``ATTACH_CONSUMER_SESSION``), or ``session``, its own. None when the attached session
    has ended (the attachment is dropped): the driver refuses with TransientNotAccepted,
    on which the official SDK routes and attaches again."""
    attached = context.attached_session
    if not attached:
        return session
    try:
        state.session(attached)
    except StateError:
        context.attached_session = 0
        return None
    return attached


# -- polls ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PollAdmitted:
    """A poll the node may serve from ``route``'s partition, once its read barrier
    allows; an auto-commit it makes is charged to ``user_id``."""

    route: PartitionRoute
    user_id: int


@dataclass(frozen=True, slots=True)
class Resync:
    """The member's assignment changed: answer with a reply for
    :data:`POLL_RESYNC_PARTITION`, on which it syncs and polls again."""


def admit_poll(
    state: MetadataState, poll: wire.PollMessages, session: int
) -> PollAdmitted | Resync:
    """Where a poll by ``session`` reads, judged against the group assignment.

    Raises:
        StateError: unknown objects, or no permission.
    """
    try:
        route = route_poll(state, poll, session)
    except StateError as error:
        if poll.consumer.kind == wire.ConsumerKind.CONSUMER_GROUP and error.code in (
            ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED,
            ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND,
        ):
            return Resync()
        raise
    return PollAdmitted(route, state.session(session).user_id)


def resync_reply() -> list[wire.Buffer]:
    """The parts of the poll reply that tells a member to sync (:class:`Resync`)."""
    return wire.poll_reply_parts(POLL_RESYNC_PARTITION, 0, ())


# -- reads of committed metadata --------------------------------------------------------

MetadataRead = Callable[[MetadataMachine, wire.RequestPayload, int, StatsSource], bytes]
"""A read of committed metadata: (machine, request payload, session, partition stats) to
the reply body."""


def _get_stream(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.StreamRef)
    return m.get_stream(p, s, st)


def _get_streams(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    return m.get_streams(s, st)


def _get_topic(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.TopicRef)
    return m.get_topic(p, s, st)


def _get_topics(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.StreamRef)
    return m.get_topics(p, s, st)


def _get_group(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.GroupRef)
    return m.get_consumer_group(p, s)


def _get_groups(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.TopicRef)
    return m.get_consumer_groups(p, s)


def _sync_group(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.GroupRef)
    return m.sync_consumer_group(p, s)


def _get_user(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    assert isinstance(p, wire.UserRef)
    return m.get_user(p, s)


def _get_users(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    return m.get_users(s)


def _get_tokens(m: MetadataMachine, p: wire.RequestPayload, s: int, st: StatsSource) -> bytes:
    return m.get_personal_access_tokens(s)


METADATA_READS: Final[Mapping[CommandCode, MetadataRead]] = MappingProxyType(
    {
        CommandCode.GET_STREAM: _get_stream,
        CommandCode.GET_STREAMS: _get_streams,
        CommandCode.GET_TOPIC: _get_topic,
        CommandCode.GET_TOPICS: _get_topics,
        CommandCode.GET_CONSUMER_GROUP: _get_group,
        CommandCode.GET_CONSUMER_GROUPS: _get_groups,
        CommandCode.SYNC_CONSUMER_GROUP: _sync_group,
        CommandCode.GET_USER: _get_user,
        CommandCode.GET_USERS: _get_users,
        CommandCode.GET_PERSONAL_ACCESS_TOKENS: _get_tokens,
    }
)
"""The read of every command on :attr:`Route.METADATA_READ`."""
