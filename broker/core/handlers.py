"""The handling of one client request, from its frame to its answer, as pure code.

Purpose: everything a node decides about a client request, written once and run by both
drivers: the runtime (``broker.runtime.node``, over real connections) and the simulator
(``sim.node``, from a seed). :func:`handle` decodes a frame, judges its code before and
after login, checks the session, waits for what the connection already saw, and runs
the flow of the command's route (``broker.core.commands.ROUTES``), by table: admitting
writes against committed metadata and submitting them to their group, serving polls and
offset reads behind the read barrier, logins, attachments and routes.

Invariants:

1. A flow is a generator: it yields an effect when it must wait for something only its
   driver can give (a group's outcome for a submitted request, a group having applied
   an op, a read barrier, a password check, a new password's hash) and is sent the
   result; it returns the :class:`Response`. It reads a clock, randomness and this
   node's own facts only through its :class:`Node`, so the simulator replays it.
2. Every request gets exactly one response, and a response answers exactly its request
   (``broker.core.answers``). A flow never submits a request twice: a retry is the
   client's, under the same request number.
3. Requests are admitted against this node's committed metadata only; a ``StateError``
   anywhere in a flow is the client's status answer, never a dropped request.
4. A read waits for its barrier and answers from applied state, or refuses with 58
   (``broker.core.reads``); it never answers from state that lacks what its connection
   was told (read your writes) or, for a fresh read, what the group acknowledged.

Theory of operation: a driver calls ``handle(node, context, frame)`` and steps the
generator: ``effect = flow.send(result)`` until ``StopIteration`` carries the response.
The runtime awaits each effect (trio); the simulator parks the flow until its event
arrives or its deadline passes, then resumes it. The effects name groups by id, so a
flow holds no reference to a driver's objects across a wait.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final, Protocol

from broker.core.answers import (
    evict,
    outcome_answer,
    primary_of,
    protocol_failure,
    reply,
    reply_parts,
    status,
)
from broker.core.answers import refused as refused_answer
from broker.core.commands import (
    METADATA_READS,
    ROUTES,
    Balancer,
    CodeAnswered,
    CodeEvicted,
    Denied,
    Resync,
    Route,
    acting_session,
    admit_command,
    admit_create_token,
    admit_delete_segments,
    admit_metadata_write,
    admit_offset_write,
    admit_poll,
    committed_retry,
    judge_code,
    purged_partitions,
    resync_reply,
    token_reply,
)
from broker.core.connections import ConnectionContext, Response
from broker.core.groups import Outcome, Refused, Replied, SessionLost
from broker.core.identity import register_checksum, request_checksum, stamped_checksum_valid
from broker.core.long_polls import Refusal, WakeReason, Woken
from broker.core.reconcile import METADATA_GROUP
from broker.core.retention import delete_segments_offset, sealed_segments
from broker.core.sessions import (
    MetadataView,
    SessionEvicted,
    SessionOk,
    SessionRefused,
    SessionVerdict,
    SessionWait,
    attachment_for,
    check_session,
    logged_in,
    logged_out,
)
from broker.state.admission import (
    authenticate_token,
    change_password_command,
    check_password,
    check_username,
    create_user_command,
)
from broker.state.codec import encode_command
from broker.state.credentials import PasswordHash
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    MetadataState,
    PurgeStream,
    PurgeTopic,
    Register,
    UserInfo,
    UserStatus,
)
from broker.state.metadata_machine import CLIENT_ID_TAKEN_STATUS, MetadataMachine, PartitionStats
from broker.state.partition_machine import PartitionMachine, retain_body, send_body
from broker.state.permissions import Action
from broker.state.routing import PartitionRoute, route_offset, route_poll_target
from consensus import Replica
from consensus.protocols import RequestBody
from journal import SegmentInfo
from sdk import wire
from sdk.wire import (
    COMMANDS,
    LONG_POLL_CODE,
    CommandCode,
    EvictionReason,
    Frame,
    IggyErrorCode,
    Operation,
    ProtocolError,
    RequestHeader,
    build_eviction_frame,
    build_reply_frame,
    build_reply_frame_parts,
    register_command_code,
    request_command_code,
    validate_request_header,
)
from sdk.wire.codes import PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, is_protocol_compatible

RUNTIME_STATS_CODE: Final = 9000
"""A non-replicated command code of ours: the per-group counters as JSON (Iggy lets a
server decide about codes it does not define; the official SDK sends such codes through
``send_binary_request``)."""
_OPTIONS_COMMANDS: Final = frozenset(
    {
        CommandCode.CREATE_USER,
        CommandCode.UPDATE_USER,
        CommandCode.CREATE_STREAM,
        CommandCode.UPDATE_STREAM,
        CommandCode.CREATE_TOPIC,
        CommandCode.UPDATE_TOPIC,
    }
)
"""Commands whose body ends in an options block that must fill it (``docs/protocol.md``)."""
_ANSWERED_BAD_BODIES: Final = _OPTIONS_COMMANDS | {CommandCode.GET_SNAPSHOT_FILE}
"""Commands whose undecodable body Iggy answers with INVALID_COMMAND, keeping the
connection: a malformed options block, and a snapshot request's bad codes."""
TRANSIENT: Final = int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)


# -- effects: what a flow waits for ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submit:
    """Submit a request to group ``group_id`` under the client's identity; the result is
    its ``Outcome`` (a driver's deadline makes it a ``Refused``)."""

    group_id: int
    client_id: int
    session: int
    request: int
    operation: int
    body: RequestBody
    checksum: bytes


@dataclass(frozen=True, slots=True)
class CatchUp:
    """Wait, bounded, until group ``group_id`` applied ``op`` here (a backup asks the
    primary's commit first); the result is None, whether or not it got there."""

    group_id: int
    op: int


@dataclass(frozen=True, slots=True)
class ReadBarrier:
    """Wait, bounded, until group ``group_id`` may answer a read that must see ``op``
    (``broker.core.reads``); ``fresh``: and everything the group acknowledged (a confirmed
    read index); ``journal``: and its journal can be read (a poll reads message bytes).
    The result is whether it may."""

    group_id: int
    op: int
    fresh: bool
    journal: bool = False


@dataclass(frozen=True, slots=True)
class PurgeApplied:
    """Wait, bounded, until partition group ``group_id`` applied purge ``generation``
    here (its primary's node proposes the truncation once the purge committed in the
    metadata); the result is None, whether or not it got there."""

    group_id: int
    generation: int


@dataclass(frozen=True, slots=True)
class AwaitMessages:
    """Wait until partition group ``group_id`` applies the message at ``offset`` here, for
    at most ``wait_us`` (or, waiting again, until ``deadline_us``), within the node's
    bounds of waiting long polls (``broker.core.long_polls``). The result is a ``Woken``,
    or a ``Refusal`` at once when a bound is reached."""

    context: ConnectionContext
    group_id: int
    offset: int
    wait_us: int
    deadline_us: int | None = None


@dataclass(frozen=True, slots=True)
class PasswordLogin:
    """Check ``password`` for ``username`` within the login bounds of clients at ``host``
    (their turn, their failure delay; a failure counts against them). The result is the
    user, None for bad credentials, or ``LOGINS_BUSY``."""

    host: str
    username: str
    password: str


@dataclass(frozen=True, slots=True)
class VerifyPassword:
    """Check ``password`` against ``stored`` (scrypt, off the driver's loop); the result
    is whether it matches."""

    stored: PasswordHash
    password: str


@dataclass(frozen=True, slots=True)
class HashPassword:
    """Hash a new password with a fresh salt; the result is its ``PasswordHash``."""

    password: str


Effect = (
    Submit
    | CatchUp
    | ReadBarrier
    | PurgeApplied
    | AwaitMessages
    | PasswordLogin
    | VerifyPassword
    | HashPassword
)
Flow = Generator[Effect, Any, Response]


class LoginsBusy:
    """The result of a ``PasswordLogin`` that could not wait its turn: too many logins
    from its host wait for their password check already."""


LOGINS_BUSY: Final = LoginsBusy()


# -- what a flow reads of its node ----------------------------------------------------------


class Group(Protocol):
    """One group hosted by the node, as a flow sees it."""

    @property
    def group_id(self) -> int: ...

    @property
    def replica(self) -> Replica | None: ...

    @property
    def is_primary(self) -> bool: ...

    @property
    def primary_index(self) -> int | None: ...

    @property
    def applied_op(self) -> int: ...

    @property
    def partition_machine(self) -> PartitionMachine | None: ...


class Node(Protocol):
    """The node a flow runs on: its facts, its clock and randomness, and the few things
    it does at once (no waiting) for a flow."""

    @property
    def replica_index(self) -> int: ...

    @property
    def replica_count(self) -> int: ...

    @property
    def balancer(self) -> Balancer: ...

    @property
    def partitions_max(self) -> int | None: ...

    @property
    def metadata(self) -> Group: ...

    def metadata_machine(self) -> MetadataMachine | None: ...

    def metadata_view(self) -> MetadataView: ...

    def partition(self, route: PartitionRoute) -> Group:
        """The hosted group of ``route``'s partition; raises ``StateError``
        (PARTITION_NOT_FOUND) while it is still opening here."""
        ...

    def cluster_nodes(self) -> Sequence[wire.ClusterNode]: ...

    def now_us(self) -> int: ...

    def draw_token(self) -> str:
        """A new personal access token from the node's randomness."""
        ...

    def served_group_poll(self, route: PartitionRoute, session: int, last_offset: int) -> None:
        """A consumer group member (``session``) was served ``route``'s partition up to
        ``last_offset`` (``broker.core.liveness.ServedPolls``)."""
        ...

    def auto_commit(self, group: Group, route: PartitionRoute, offset: int, user_id: int) -> None:
        """Store ``offset`` for the consumer of ``route`` as the node's own request."""
        ...

    def login_failed(self, host: str) -> None: ...

    def login_succeeded(self, host: str) -> None: ...

    def session_admitted(self, context: ConnectionContext, header: RequestHeader) -> None:
        """A request passed the session check (the simulator's observers see it)."""
        ...

    def node_read(
        self, context: ConnectionContext, code: CommandCode, session: int, payload: Any
    ) -> bytes:
        """The body of a read of this node's own facts (``Route.NODE_READ``)."""
        ...

    def runtime_stats(self) -> bytes: ...

    def partition_stats(
        self, stream_id: int, topic_id: int, partition_id: int
    ) -> PartitionStats: ...

    def partition_segments(self, group: Group) -> Sequence[SegmentInfo] | None:
        """The journal segments of partition ``group`` here, oldest first; None while its
        journal cannot be read (a journal action runs, or it is still opening). Raises
        ``StateError`` where a driver keeps no segments."""
        ...


class Rules:
    """Two decisions of the handling that a simulated node may get wrong on purpose
    (``sim.planted``), as ``consensus.Replica`` isolates its own: whether a request's
    session may act, and what a read on a connection must find applied."""

    def session(
        self,
        context: ConnectionContext,
        header: RequestHeader,
        view: MetadataView,
        *,
        waited: bool,
    ) -> SessionVerdict:
        """The verdict of ``broker.core.sessions.check_session``."""
        return check_session(context, header.session, header.client, view, waited=waited)

    def must_see(self, context: ConnectionContext, group_id: int) -> int:
        """The op of the group a read on the connection must find applied: what the
        connection was told (read your writes)."""
        return context.must_see(group_id)


RULES: Final = Rules()
"""The rules every real node runs."""


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request on its connection, and the rules it is judged by."""

    context: ConnectionContext
    header: RequestHeader
    code: CommandCode
    payload: wire.RequestPayload
    body: memoryview
    rules: Rules


RouteFlow = Callable[[Node, Request], Flow]


# -- the entry ------------------------------------------------------------------------------


def handle(node: Node, context: ConnectionContext, frame: Frame, rules: Rules = RULES) -> Flow:
    """The flow answering one request frame (module docstring)."""
    try:
        header = frame.request_header()
    except ProtocolError:
        client = int.from_bytes(bytes(frame.data[128:144]), "little")
        return evict(client, EvictionReason.INVALID_REQUEST_OPERATION, "bad request header")
    try:
        validate_request_header(header)
    except ProtocolError as error:
        return protocol_failure(header, error)
    verdict = judge_code(header.operation, header.code, logged_in=context.bound_session != 0)
    if isinstance(verdict, CodeEvicted):
        return evict(header.client, verdict.reason, verdict.why)
    if isinstance(verdict, CodeAnswered):
        return status(header, verdict.status, refusal=verdict.refusal)
    try:
        if header.operation is Operation.NON_REPLICATED and header.code == RUNTIME_STATS_CODE:
            return (yield from _runtime_stats(node, context, header, rules))
        if header.operation is Operation.NON_REPLICATED and header.code == LONG_POLL_CODE:
            return (yield from _long_poll(node, context, header, frame, rules))
        decoded = _decode(context, header, frame, rules)
        if isinstance(decoded, Response):
            return decoded
        if decoded.code in _LOGINS:
            return (yield from _login(node, decoded, frame))
        failure = yield from _check_session(node, context, header, rules)
        if failure is not None:
            return failure
        # Read your writes: a backup answers (and checks a write against) local state only
        # once it has applied the metadata ops this connection saw committed.
        seen = rules.must_see(context, METADATA_GROUP)
        if node.metadata.applied_op < seen:
            yield CatchUp(METADATA_GROUP, seen)
        return (yield from ROUTE_FLOWS[ROUTES[decoded.code]](node, decoded))
    except StateError as error:
        return status(header, int(error.code))


_LOGINS: Final = frozenset({CommandCode.LOGIN_REGISTER, CommandCode.LOGIN_REGISTER_WITH_PAT})


def _decode(
    context: ConnectionContext, header: RequestHeader, frame: Frame, rules: Rules
) -> Request | Response:
    """The request a frame carries, or the answer it gets without being run."""
    try:
        code = request_command_code(header)
    except ProtocolError as error:
        return status(header, int(error.code))
    route = ROUTES.get(code)
    if route is None:
        return status(header, IggyErrorCode.INVALID_COMMAND)
    if route is Route.PING:
        return reply(header)
    if route is Route.LOGIN:
        code = register_command_code(frame.body)  # a password or a token login
    try:
        payload = COMMANDS[code].decode_request(frame.body)
    except ProtocolError as error:
        if route is Route.LOGIN:
            return evict(header.client, EvictionReason.MALFORMED_LOGIN)
        if error.code is IggyErrorCode.INVALID_COMMAND and code in _ANSWERED_BAD_BODIES:
            # A malformed options block (trailing bytes read as options), or a short
            # snapshot request: Iggy answers it as a business error and keeps the
            # connection.
            return status(header, int(error.code), refusal=f"bad body: {error.reason}")
        return protocol_failure(header, error)
    if not stamped_checksum_valid(header.request_checksum, frame.body):
        return status(
            header,
            IggyErrorCode.INVALID_FORMAT,
            refusal="the stamped request_checksum does not match the body",
        )
    return Request(context, header, code, payload, frame.body, rules)


def _check_session(
    node: Node, context: ConnectionContext, header: RequestHeader, rules: Rules
) -> Generator[Effect, Any, Response | None]:
    """Carry out ``broker.core.sessions.check_session``: None to go on, or the answer."""
    verdict = rules.session(context, header, node.metadata_view(), waited=False)
    if isinstance(verdict, SessionWait):
        yield CatchUp(METADATA_GROUP, verdict.op)
        verdict = rules.session(context, header, node.metadata_view(), waited=True)
    if isinstance(verdict, SessionRefused):
        if verdict.status == TRANSIENT:
            return _refused(node, header, verdict.status)
        return status(header, verdict.status, refusal=verdict.refusal)
    if isinstance(verdict, SessionEvicted):
        return evict(header.client, verdict.reason, verdict.why)
    assert isinstance(verdict, SessionOk)
    context.client_id = header.client
    node.session_admitted(context, header)
    return None


# -- small pieces shared by the flows -------------------------------------------------------


def _refused(node: Node, header: RequestHeader, code: int, group: Group | None = None) -> Response:
    """A refusal naming ``group``'s view and primary (the metadata group's by default)."""
    group = node.metadata if group is None else group
    return refused_answer(header, code, group.group_id, group.replica, node.replica_count)


def _submitted(
    node: Node,
    request: Request,
    group: Group,
    checksum: bytes,
    operation: int,
    body: RequestBody,
) -> Generator[Effect, Any, Outcome]:
    """Submit to ``group`` under the client's identity (a register carries no session)."""
    header = request.header
    session = header.session if header.operation is not Operation.REGISTER else 0
    outcome = yield Submit(
        group.group_id, header.client, session, header.request, operation, body, checksum
    )
    assert isinstance(outcome, Replied | Refused | SessionLost), outcome
    return outcome


def _answer(
    node: Node, request: Request, group: Group, outcome: Outcome, checksum: bytes
) -> Response:
    return outcome_answer(
        request.context,
        request.header,
        outcome,
        group.group_id,
        group.replica,
        node.replica_count,
        checksum,
    )


def _state(node: Node) -> MetadataState:
    machine = node.metadata_machine()
    assert machine is not None  # a node answers requests once its metadata group opened
    return machine.state


def _replied_here(node: Node, request: Request, body: bytes = b"") -> Response:
    return reply(request.header, body, replica=node.replica_index)


# -- logins ---------------------------------------------------------------------------------


def _login(node: Node, request: Request, frame: Frame) -> Flow:
    """A password or token login: the user's register, proposed to the metadata group."""
    header, login = request.header, request.payload
    assert isinstance(login, wire.LoginRegister | wire.LoginRegisterWithPat)
    if not is_protocol_compatible(login.protocol_version):
        eviction = build_eviction_frame(
            header.client,
            EvictionReason.INCOMPATIBLE_PROTOCOL,
            server_protocol_version=PROTOCOL_VERSION,
            server_protocol_version_min=PROTOCOL_VERSION_MIN,
        )
        return Response([eviction], close=True)
    # Credentials are judged on metadata that holds every change acknowledged before the
    # login arrived, wherever it was made (a deleted token, a new password, a removed
    # user): a confirmed read index, as for any fresh read (``broker.core.reads``).
    seen = request.rules.must_see(request.context, METADATA_GROUP)
    if not (yield ReadBarrier(METADATA_GROUP, seen, True)):
        return _refused(node, header, TRANSIENT)
    machine = node.metadata_machine()
    if machine is None or not machine.state.users():
        # A new cluster whose root user is not committed yet: try again shortly.
        return _refused(node, header, TRANSIENT)
    host = request.context.address.rpartition(":")[0]
    if isinstance(login, wire.LoginRegisterWithPat):
        user: UserInfo | Response = _token_check(node, header, login.token, host)
    else:
        checked = yield PasswordLogin(host, login.username, login.password)
        if checked is LOGINS_BUSY:
            refusal = "too many logins from this address wait for their password check"
            return replace(_refused(node, header, TRANSIENT), refusal=refusal)
        if checked is None:
            user = evict(header.client, EvictionReason.INVALID_CREDENTIALS)
            # As Iggy's server: a body that also reads as a token login (a token body
            # with bytes appended) is tried as one once its password shape failed.
            try:
                token_login = COMMANDS[CommandCode.LOGIN_REGISTER_WITH_PAT].decode_request(
                    frame.body
                )
            except ProtocolError:
                return user
            assert isinstance(token_login, wire.LoginRegisterWithPat)
            user = _token_check(node, header, token_login.token, host)
        else:
            assert isinstance(checked, UserInfo)
            user = checked
    if isinstance(user, Response):
        return user
    node.login_succeeded(host)
    return (yield from _register(node, request, user))


def _register(node: Node, request: Request, user: UserInfo) -> Flow:
    header, context = request.header, request.context
    if user.status != UserStatus.ACTIVE:
        return evict(header.client, EvictionReason.USER_INACTIVE)
    state = _state(node)
    held = state.session_of_client(header.client)
    if held is not None and held.user_id != user.id:
        # A client id is its user's: another user's login never takes it over.
        return evict(header.client, EvictionReason.SESSION_ERROR, "the client id is another user's")
    known_before = node.metadata_view().known_op
    checksum = register_checksum(user.id)
    operation, body = encode_command(Register(header.client, user.id))
    metadata = node.metadata
    outcome = yield from _submitted(node, request, metadata, checksum, int(operation), bytes(body))
    if isinstance(outcome, Replied):
        try:
            wire.split_result(Operation.REGISTER, outcome.body)
        except wire.ServerRejected as rejected:
            reason = (
                EvictionReason.USER_INACTIVE
                if rejected.code == ErrorCode.USER_INACTIVE
                else EvictionReason.INVALID_CREDENTIALS
            )
            return evict(header.client, reason)
        # A login that repeated the register of a live session joins it, and the
        # connection that opened it ends it when it closes, not this one.
        logged_in(context, header.client, outcome.op, known_before=known_before)
    elif isinstance(outcome, Refused) and outcome.status == CLIENT_ID_TAKEN_STATUS:
        return evict(header.client, EvictionReason.SESSION_ERROR, "the client id is another user's")
    return _answer(node, request, metadata, outcome, checksum)


def _token_check(node: Node, header: RequestHeader, token: str, host: str) -> UserInfo | Response:
    """A token login judged on committed metadata at the node's clock: the token's user,
    or Iggy's eviction (InvalidToken for an unknown or expired token). A hash lookup, no
    scrypt: a 256-bit token is not guessed, so no turn is taken, but a failure still
    counts against the host as a failed password does."""
    state = _state(node)
    try:
        register = authenticate_token(state, header.client, token, node.now_us())
    except StateError as error:
        if error.code is ErrorCode.USER_INACTIVE:
            return evict(header.client, EvictionReason.USER_INACTIVE)
        node.login_failed(host)
        return evict(header.client, EvictionReason.INVALID_TOKEN)
    return state.user(register.user_id)


def login_user(state: MetadataState, username: str) -> UserInfo | None:
    """The user a password login names, or None: the same answer for an unknown user as
    for a bad password, so a refusal tells nothing of which."""
    try:
        return state.user(username)
    except StateError:
        return None


# -- writes ---------------------------------------------------------------------------------


def _metadata_write(node: Node, request: Request) -> Flow:
    header, code, payload = request.header, request.code, request.payload
    state = _state(node)
    write = admit_metadata_write(state, code, payload, header.session, node.partitions_max)
    checksum = request_checksum(code, payload, request.body)
    metadata = node.metadata
    if isinstance(write, Denied):
        # A retry of a committed request gets its committed reply, not the refusal the
        # state it changed now earns (``committed_retry``).
        replica = metadata.replica
        cached = None
        if replica is not None:
            cached = committed_retry(
                replica.client_table, header.client, header.session, header.request, write, checksum
            )
        if cached is None or replica is None:
            return status(header, write.status, refusal=write.refusal)
        replied = Replied(cached.op, replica.commit_max, replica.view, cached.reply)
        return _answer(node, request, metadata, replied, checksum)
    outcome = yield from _submitted(node, request, metadata, checksum, write.operation, write.body)
    if code is CommandCode.LOGOUT_USER and isinstance(outcome, Replied):
        logged_out(request.context)
    if isinstance(outcome, Replied) and isinstance(write.command, PurgeStream | PurgeTopic):
        yield from _purges_applied(node, write.command, outcome.op)
    return _answer(node, request, metadata, outcome, checksum)


def _purges_applied(
    node: Node, command: PurgeStream | PurgeTopic, op: int
) -> Generator[Effect, Any, None]:
    """Hold a committed purge's answer until this node's replicas of its partitions have
    applied it (bounded), so that, as in Iggy, ``get_topic`` and polls that follow the
    answer find the topic empty: the metadata op only decides the purge, and each
    partition group carries it out in its own op."""
    yield CatchUp(METADATA_GROUP, op)
    for route, generation in purged_partitions(_state(node), command):
        try:
            group = node.partition(route)
        except StateError:
            continue  # deleted since
        yield PurgeApplied(group.group_id, generation)


def _send(node: Node, request: Request) -> Flow:
    payload = request.payload
    assert isinstance(payload, wire.SendMessages)
    route = node.balancer.admit_send(_state(node), payload, request.header.session)
    group = node.partition(route)
    # Decoded and verified here, once: the group's primary stamps what this hands it.
    body = send_body(payload)
    checksum = request_checksum(request.code, payload, request.body)
    operation = int(Operation.SEND_MESSAGES)
    outcome = yield from _submitted(node, request, group, checksum, operation, body)
    return _answer(node, request, group, outcome, checksum)


def _offset_write(node: Node, request: Request) -> Flow:
    payload = request.payload
    assert isinstance(payload, wire.StoreConsumerOffset | wire.DeleteConsumerOffset)
    state = _state(node)
    acting = acting_session(request.context, state, request.header.session)
    if acting is None:
        return _refused(node, request.header, TRANSIENT)
    write = admit_offset_write(state, request.code, payload, acting)
    group = node.partition(write.route)
    checksum = request_checksum(request.code, payload, request.body)
    outcome = yield from _submitted(node, request, group, checksum, write.operation, write.body)
    return _answer(node, request, group, outcome, checksum)


def _delete_segments(node: Node, request: Request) -> Flow:
    """DELETE_SEGMENTS, as Iggy 0.9 serves it: the count becomes the offset after the
    partition's oldest ``segments_count`` sealed segments, read from its segments here
    behind the read barrier, and that offset is proposed to the partition group as a
    retention (the same op the primary proposes when segments expire), under the
    client's identity so a retry is answered from the client table. Nothing sealed to
    delete is a success, as in Iggy."""
    header, payload = request.header, request.payload
    assert isinstance(payload, wire.DeleteSegments)
    route = admit_delete_segments(_state(node), payload, header.session)
    group = node.partition(route)
    group_id = group.group_id
    checksum = request_checksum(request.code, payload, request.body)
    seen = request.rules.must_see(request.context, group_id)
    if not (yield ReadBarrier(group_id, seen, False, journal=True)):
        return _refused(node, header, TRANSIENT)
    group = node.partition(route)
    if group.group_id != group_id:
        raise StateError(ErrorCode.PARTITION_NOT_FOUND, "the partition went while read")
    machine = group.partition_machine
    segments = node.partition_segments(group)
    if machine is None or segments is None:
        return _refused(node, header, TRANSIENT)
    state = machine.state
    offset = delete_segments_offset(
        sealed_segments(segments, state),
        retained_start=state.retained_start,
        count=payload.segments_count,
    )
    if offset is None:
        return _replied_here(node, request)
    operation = int(Operation.TRUNCATE_PARTITION)
    outcome = yield from _submitted(node, request, group, checksum, operation, retain_body(offset))
    return _metadata_routed_answer(node, request, group, outcome, checksum)


def _metadata_routed_answer(
    node: Node, request: Request, group: Group, outcome: Outcome, checksum: bytes
) -> Response:
    """The answer to a write decided by partition ``group`` that clients route as a
    metadata write (DELETE_SEGMENTS: Iggy replicates it in its metadata group): it names
    the metadata group's view and primary, as a client learns its metadata primary from
    the answer, while the connection records the partition op it saw."""
    metadata = node.metadata
    replica = metadata.replica
    view = 0 if replica is None else replica.view
    primary = primary_of(METADATA_GROUP, view, node.replica_count)
    if isinstance(outcome, Replied):
        request.context.saw(group.group_id, outcome.op)
        frame = build_reply_frame(
            request.header, outcome.body, view=view & 0xFFFF_FFFF, replica=primary
        )
        return Response([frame], group=group.group_id, checksum=checksum)
    if isinstance(outcome, Refused):
        return _refused(node, request.header, outcome.status)
    return _answer(node, request, group, outcome, checksum)


def _create_user(node: Node, request: Request) -> Flow:
    """Hash the new password here (the node that proposes) with a fresh salt; only the
    hash enters the command, the log and every replica."""
    header, payload = request.header, request.payload
    assert isinstance(payload, wire.CreateUser)
    checksum = request_checksum(request.code, payload, request.body)
    state = _state(node)
    denied = state.permits(header.session, Action.MANAGE_USERS)
    if denied is not None:
        return status(header, int(denied))
    check_username(payload.username)  # before the hash: refusals cost no scrypt
    check_password(payload.password)
    digest = yield HashPassword(payload.password)
    assert isinstance(digest, PasswordHash)
    write = admit_command(_state(node), create_user_command(payload, digest), header.session)
    if isinstance(write, Denied):
        return status(header, write.status, refusal=write.refusal)
    metadata = node.metadata
    outcome = yield from _submitted(node, request, metadata, checksum, write.operation, write.body)
    return _answer(node, request, metadata, outcome, checksum)


def _change_password(node: Node, request: Request) -> Flow:
    """One's own password, or anyone's with ``manage_users``; the current password is
    verified against the committed hash, the new one hashed with a fresh salt."""
    header, payload = request.header, request.payload
    assert isinstance(payload, wire.ChangePassword)
    checksum = request_checksum(request.code, payload, request.body)
    state = _state(node)
    target = state.user(payload.user_id.value)
    actor = state.session(header.session)
    if target.id != actor.user_id:
        denied = state.permits(header.session, Action.MANAGE_USERS)
        if denied is not None:
            return status(header, int(denied))
    if not (yield VerifyPassword(target.password, payload.current_password)):
        return status(header, IggyErrorCode.INVALID_CREDENTIALS)
    check_password(payload.new_password)
    digest = yield HashPassword(payload.new_password)
    assert isinstance(digest, PasswordHash)
    write = admit_command(_state(node), change_password_command(payload, digest), header.session)
    if isinstance(write, Denied):
        return status(header, write.status, refusal=write.refusal)
    metadata = node.metadata
    outcome = yield from _submitted(node, request, metadata, checksum, write.operation, write.body)
    return _answer(node, request, metadata, outcome, checksum)


def _create_token(node: Node, request: Request) -> Flow:
    """Draw a token here, propose its hash, and give the client the raw token in the
    committed reply (``broker.core.commands.token_reply``)."""
    header, payload = request.header, request.payload
    assert isinstance(payload, wire.CreatePersonalAccessToken)
    checksum = request_checksum(request.code, payload, request.body)
    token = node.draw_token()
    admitted = admit_create_token(_state(node), payload, token, header.session)
    if isinstance(admitted, Denied):
        return status(header, admitted.status, refusal=admitted.refusal)
    write = admitted.write
    metadata = node.metadata
    outcome = yield from _submitted(node, request, metadata, checksum, write.operation, write.body)
    if isinstance(outcome, Replied):
        body = token_reply(outcome.body, admitted.token_hash, token)
        outcome = Replied(outcome.op, outcome.commit, outcome.view, body)
    return _answer(node, request, metadata, outcome, checksum)


# -- routes and attachments (clusters) ------------------------------------------------------


def _route(node: Node, request: Request) -> Response:
    """Where an auto-commit poll (103) or an offset write (123) must go: the partition
    group's primary, and the attachment the client presents there."""
    header, payload = request.header, request.payload
    assert isinstance(payload, wire.PollMessages | wire.GetConsumerOffset)
    state = _state(node)
    if isinstance(payload, wire.PollMessages):
        route = route_poll_target(state, payload, header.session)
    else:
        route = route_offset(state, payload, header.session)
    group = node.partition(route)
    primary = group.primary_index
    nodes = node.cluster_nodes()
    if primary is None or primary >= len(nodes):
        return _refused(node, header, TRANSIENT, group)
    attachment = wire.ConsumerSessionAttachment(
        header.client, header.session, node.metadata.applied_op
    )
    return _replied_here(node, request, wire.PollRoute(attachment, nodes[primary]).encode())


def _attach(node: Node, request: Request) -> Flow:
    """Let this connection act for a session of the same user (its coordinator's), once
    this node has applied the metadata the coordinator routed with."""
    header, attachment = request.header, request.payload
    assert isinstance(attachment, wire.ConsumerSessionAttachment)
    if node.metadata.applied_op < attachment.metadata_op:
        yield CatchUp(METADATA_GROUP, attachment.metadata_op)
    if node.metadata.applied_op < attachment.metadata_op:
        return _refused(node, header, TRANSIENT)
    state = _state(node)
    attached = attachment_for(
        state.session(header.session), state.session, attachment.session, attachment.client_id
    )
    if attached is None:
        return status(header, IggyErrorCode.UNAUTHORIZED)
    request.context.attached_session = attached
    return _replied_here(node, request)


# -- reads ----------------------------------------------------------------------------------


def _poll(node: Node, request: Request) -> Flow:
    """Messages from the partition's committed state, behind the read barrier; a poll
    routed here (POLL_PRIMARY) acts for the attached session and needs the primary."""
    payload = request.payload
    assert isinstance(payload, wire.PollMessages)
    fresh = payload.strategy.kind is wire.PollingKind.NEXT
    answer = yield from _poll_answer(node, request, payload, fresh=fresh, may_wait=False)
    assert isinstance(answer, Response)
    return answer


@dataclass(frozen=True, slots=True)
class _NothingYet:
    """A poll that found no message and may wait: for group ``group_id`` to apply the
    message at ``offset``."""

    group_id: int
    offset: int


def _poll_answer(
    node: Node, request: Request, payload: wire.PollMessages, *, fresh: bool, may_wait: bool
) -> Generator[Effect, Any, Response | _NothingYet]:
    """The answer to ``payload`` from the partition's committed state, behind the read
    barrier (``fresh``: a confirmed read index); when ``may_wait`` and the poll would find
    no message, what to wait for instead."""
    header, code = request.header, request.code
    state = _state(node)
    session = header.session
    if code is CommandCode.POLL_PRIMARY:
        acting = acting_session(request.context, state, session)
        if acting is None:
            return _refused(node, header, TRANSIENT)
        session = acting
    admitted = admit_poll(state, payload, session)
    checksum = request_checksum(code, payload, request.body)
    if isinstance(admitted, Resync):
        return replace(reply_parts(header, resync_reply()), checksum=checksum)
    route = admitted.route
    group = node.partition(route)
    if code is CommandCode.POLL_PRIMARY and not group.is_primary:
        # Routed here by a stale route: the client asks for the route again.
        return _refused(node, header, TRANSIENT, group)
    group_id = group.group_id
    seen = request.rules.must_see(request.context, group_id)
    if not (yield ReadBarrier(group_id, seen, fresh, journal=True)):
        # Restarted or in a view change: its state may lack acknowledged ops.
        return _refused(node, header, TRANSIENT, group)
    group = node.partition(route)  # the same group, unless it went while the read waited
    if group.group_id != group_id:
        raise StateError(ErrorCode.PARTITION_NOT_FOUND, "the partition went while read")
    if payload.consumer.kind == wire.ConsumerKind.CONSUMER_GROUP:
        # The assignment may have moved while the read waited (a revocation started or
        # completed): a member is served only what the metadata applied now lets it poll.
        again = admit_poll(_state(node), payload, session)
        if isinstance(again, Resync) or again.route != route:
            return replace(reply_parts(header, resync_reply()), checksum=checksum)
    replica = group.replica
    if replica is not None and not replica.log_whole:
        # Committed messages are missing here until repaired from a peer (after a
        # restart found them damaged): the client reads from the primary instead.
        return _refused(node, header, TRANSIENT, group)
    machine = group.partition_machine
    assert machine is not None and route.consumer is not None
    if may_wait:
        offset = machine.poll_wait_offset(payload, route.consumer)
        if offset is not None:
            return _NothingYet(group_id, offset)
    parts, store, last = machine.poll_served(payload, route.consumer)
    if store is not None:
        node.auto_commit(group, route, store, admitted.user_id)
    if last is not None and payload.consumer.kind == wire.ConsumerKind.CONSUMER_GROUP:
        node.served_group_poll(route, session, last)
    return Response(
        build_reply_frame_parts(header, parts, replica=node.replica_index),
        group=group_id,
        read_op=group.applied_op,
        first_offset=machine.state.first_offset,
        checksum=checksum,
    )


def _long_poll(
    node: Node, context: ConnectionContext, header: RequestHeader, frame: Frame, rules: Rules
) -> Flow:
    """viewstream's long poll (``LONG_POLL_CODE``): POLL_MESSAGES, but a poll that finds
    no message waits here until the partition applies one, or until ``max_wait_ms``
    passes (``broker.core.long_polls``); then it answers as POLL_MESSAGES does.

    The first read is fresh for a NEXT poll, as POLL_MESSAGES; a read after a wait need
    not be (the state only grew since). Woken by a metadata change, the poll checks its
    session and route again and may wait again until the same deadline; woken for any
    other reason it answers with what is there, perhaps nothing."""
    try:
        long_poll = wire.LongPollMessages.decode(frame.body)
    except ProtocolError as error:
        return protocol_failure(header, error)
    if not stamped_checksum_valid(header.request_checksum, frame.body):
        return status(
            header,
            IggyErrorCode.INVALID_FORMAT,
            refusal="the stamped request_checksum does not match the body",
        )
    failure = yield from _check_session(node, context, header, rules)
    if failure is not None:
        return failure
    seen = rules.must_see(context, METADATA_GROUP)
    if node.metadata.applied_op < seen:
        yield CatchUp(METADATA_GROUP, seen)
    payload = long_poll.poll
    request = Request(context, header, CommandCode.POLL_MESSAGES, payload, frame.body, rules)
    fresh = payload.strategy.kind is wire.PollingKind.NEXT
    wait_us = min(long_poll.max_wait_ms, wire.LONG_POLL_WAIT_MS_MAX) * 1000
    deadline_us: int | None = None
    while True:
        may_wait = wait_us > 0
        answer = yield from _poll_answer(node, request, payload, fresh=fresh, may_wait=may_wait)
        if isinstance(answer, Response):
            return answer
        fresh = False
        woken = yield AwaitMessages(context, answer.group_id, answer.offset, wait_us, deadline_us)
        if isinstance(woken, Refusal):
            return status(header, IggyErrorCode.FEATURE_UNAVAILABLE, refusal=woken.why)
        assert isinstance(woken, Woken)
        deadline_us = woken.deadline_us
        if woken.reason is WakeReason.METADATA:
            failure = yield from _check_session(node, context, header, rules)
            if failure is not None:
                return failure
            continue  # the route may have changed: admit the poll again
        if woken.reason is not WakeReason.MESSAGES:
            break
    answer = yield from _poll_answer(node, request, payload, fresh=False, may_wait=False)
    assert isinstance(answer, Response)
    return answer


def _offset_read(node: Node, request: Request) -> Flow:
    """A stored consumer offset, behind a fresh read barrier (it may have been stored
    through another node)."""
    header, payload = request.header, request.payload
    assert isinstance(payload, wire.GetConsumerOffset)
    route = route_offset(_state(node), payload, header.session)
    group = node.partition(route)
    group_id = group.group_id
    checksum = request_checksum(request.code, payload, request.body)
    seen = request.rules.must_see(request.context, group_id)
    if not (yield ReadBarrier(group_id, seen, True)):
        return _refused(node, header, TRANSIENT, group)
    group = node.partition(route)
    if group.group_id != group_id:
        raise StateError(ErrorCode.PARTITION_NOT_FOUND, "the partition went while read")
    machine = group.partition_machine
    assert machine is not None and route.consumer is not None
    body = machine.get_consumer_offset(route.consumer)
    answer = _replied_here(node, request, body)
    return replace(answer, group=group_id, read_op=group.applied_op, checksum=checksum)


def _metadata_read(node: Node, request: Request) -> Response:
    machine = node.metadata_machine()
    assert machine is not None
    read = METADATA_READS[request.code]
    body = read(machine, request.payload, request.header.session, node.partition_stats)
    return _replied_here(node, request, body)


def _node_read(node: Node, request: Request) -> Response:
    """A read of this node's own facts (its connections, settings, diagnostics)."""
    header = request.header
    body = node.node_read(request.context, request.code, header.session, request.payload)
    return _replied_here(node, request, body)


def _at_once(answer: Callable[[Node, Request], Response]) -> RouteFlow:
    """The flow of a route answered without waiting for anything."""

    def flow(node: Node, request: Request) -> Flow:
        yield from ()
        return answer(node, request)

    return flow


def _runtime_stats(
    node: Node, context: ConnectionContext, header: RequestHeader, rules: Rules
) -> Flow:
    failure = yield from _check_session(node, context, header, rules)
    if failure is not None:
        return failure
    denied = _state(node).permits(header.session, Action.READ_SERVERS)
    if denied is not None:
        return status(header, int(denied))
    return reply(header, node.runtime_stats(), replica=node.replica_index)


ROUTE_FLOWS: Final[Mapping[Route, RouteFlow]] = MappingProxyType(
    {
        Route.METADATA_WRITE: _metadata_write,
        Route.LOGOUT: _metadata_write,
        Route.CREATE_USER: _create_user,
        Route.CHANGE_PASSWORD: _change_password,
        Route.CREATE_TOKEN: _create_token,
        Route.SEND: _send,
        Route.OFFSET_WRITE: _offset_write,
        Route.DELETE_SEGMENTS: _delete_segments,
        Route.ATTACH: _attach,
        Route.ROUTING: _at_once(_route),
        Route.POLL: _poll,
        Route.OFFSET_READ: _offset_read,
        Route.METADATA_READ: _at_once(_metadata_read),
        Route.NODE_READ: _at_once(_node_read),
    }
)
"""The flow of every route of ``broker.core.commands.ROUTES`` but PING and the login,
which :func:`handle` answers before the session check."""
