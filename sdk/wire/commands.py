"""The command registry, reply body framing, and whole-frame request/reply reading.

Purpose: tie command codes to their payload types (:data:`COMMANDS`), add and strip
the result section of metadata-plane replies, and read a request or reply frame into
typed values in one call.

Invariants:

1. :data:`COMMANDS` has one entry per supported command; its request and reply types
   are the payload classes of ``system``, ``metadata`` and ``messages``.
2. A reply body of a result-framed operation is ``[count u32]`` then ``count``
   entries ``{index u32, result u32}`` then the payload. Success is count 0 and the
   payload; a committed business rejection is one entry ``{0, code}`` and no payload.
   Every metadata-plane mutation and the partition plane's store/delete consumer
   offset are result-framed, and so is a non-empty Register reply (a terminal login
   failure ships an empty body). Reads, ping, logout and send replies are not.
3. Replies to reads answer "not found" with an empty body where the command is
   marked ``reply_optional``; an empty SEND_MESSAGES reply likewise means "no
   confirmations".
4. :func:`read_reply` turns an eviction into :class:`SessionEvicted`, a non-zero status
   or a rejecting result section into :class:`ServerRejected`, and anything malformed
   into :class:`ProtocolError`.
5. Requests are decoded as Iggy's server decodes them, replies strictly.
   :meth:`CommandSpec.decode_request` (and :func:`read_request`) read every field of a
   request, validated as strictly as the payload's ``decode`` does, then ignore any
   bytes after the last one; a no-payload command ignores its whole body. A request
   whose last field runs to the end of the body has nothing left to ignore: bytes
   appended to an options block (CREATE/UPDATE of a user, stream or topic) are parsed
   as options and refused with ``INVALID_COMMAND`` unless well-formed, and a send's
   batch must fill the body (``INVALID_FORMAT``). Replies, and the payload types'
   own ``decode``, refuse trailing bytes: the SDK's reading of a server stays strict.

Theory of operation, trailing bytes: each request type has ``read(reader)``, the one
parser of its fields, which stops after its last field; its strict ``decode`` is
``read`` plus :meth:`Reader.finish`. The server's entry point is ``read`` alone, so the
two can never disagree about a field, and what the server accepts is always a canonical
encoding followed by bytes nobody looked at. Two entry points rather than a ``strict``
flag: the question "may this body carry more?" is answered by who is reading (a server
reading a request, or a client reading a reply), never per call.

Sources: apache/iggy ``core/binary_protocol/src/consensus/reply_result.rs``,
``consensus/operation.rs`` (``is_result_framed``), ``core/sdk/src/vsr.rs`` (client
decode order) and ``core/metadata/src/stm/result.rs`` (server encode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from sdk.wire._buffer import Buffer, Reader, Writer, as_byte_view
from sdk.wire._payload import Empty
from sdk.wire.codes import (
    Command,
    CommandCode,
    IggyErrorCode,
    Operation,
    code_for_operation,
    operation_for_code,
)
from sdk.wire.errors import ProtocolError, ServerRejected, SessionEvicted
from sdk.wire.framing import Frame
from sdk.wire.header import RequestHeader
from sdk.wire.messages import (
    ConsumerOffsetInfo,
    DeleteConsumerOffset,
    GetConsumerOffset,
    PollMessages,
    PollMessagesReply,
    SendMessages,
    SendMessagesReply,
    StoreConsumerOffset,
)
from sdk.wire.metadata import (
    ConsumerGroupAssignment,
    ConsumerGroupDetails,
    ConsumerGroups,
    CreateConsumerGroup,
    CreateStream,
    CreateTopic,
    DeleteSegments,
    GroupRef,
    PartitionsChange,
    StreamDetails,
    StreamRef,
    Streams,
    TopicDetails,
    TopicRef,
    Topics,
    UpdateStream,
    UpdateTopic,
)
from sdk.wire.system import (
    ClientInfoDetails,
    ClientRef,
    Clients,
    ClusterMetadata,
    ConsumerSessionAttachment,
    DescribeOptions,
    GetSnapshot,
    LoginRegister,
    LoginRegisterReply,
    OptionsCatalog,
    PollRoute,
    SnapshotArchive,
    Stats,
)
from sdk.wire.tokens import (
    CreatePersonalAccessToken,
    LoginRegisterWithPat,
    PersonalAccessTokenRef,
    PersonalAccessTokens,
    RawPersonalAccessToken,
)
from sdk.wire.users import (
    ChangePassword,
    CreateUser,
    UpdatePermissions,
    UpdateUser,
    UserDetails,
    UserRef,
    Users,
)

__all__ = [
    "COMMANDS",
    "CommandSpec",
    "RESULT_OK",
    "ReplyPayload",
    "RequestPayload",
    "encode_reply_body",
    "is_result_framed",
    "read_reply",
    "read_request",
    "register_command_code",
    "request_command_code",
    "result_ok",
    "result_rejected",
    "split_result",
]


# --- result section ----------------------------------------------------------------

RESULT_OK: Final = bytes(4)
"""The result section of a success: a zero count."""


def is_result_framed(operation: Operation, body: Buffer) -> bool:
    """Whether a reply body to ``operation`` opens with a result section.

    Register replies are framed only when non-empty: a terminal login failure ships
    an empty body.
    """
    return operation.is_result_framed or (operation is Operation.REGISTER and len(body) > 0)


def result_ok(payload: Buffer = b"") -> bytes:
    """A success reply body for a result-framed operation."""
    return RESULT_OK + bytes(payload)


def result_rejected(code: int) -> bytes:
    """A committed rejection: one ``{index 0, result code}`` entry and no payload."""
    assert code != 0, "a rejection needs a non-zero code"
    writer = Writer()
    writer.u32(1)
    writer.u32(0)
    writer.u32(code)
    return writer.getvalue()


def split_result(operation: Operation, body: Buffer) -> memoryview:
    """The payload of a reply body, its result section (if any) stripped.

    Raises:
        ServerRejected: the result section reports a rejection (first entry's code).
        ProtocolError: the result section is malformed.
    """
    view = as_byte_view(body)
    if not is_result_framed(operation, view):
        return view
    reader = Reader(view)
    count = reader.u32()
    if count == 0:
        return reader.rest()
    reader.u32()  # the index of the first entry; single-event replies carry one
    code = reader.u32()
    if code == 0:
        raise ProtocolError("result entry reports success with a non-zero count")
    raise ServerRejected(code)


# --- the registry ------------------------------------------------------------------

RequestPayload: TypeAlias = (
    Empty
    | LoginRegister
    | StreamRef
    | TopicRef
    | GroupRef
    | CreateStream
    | UpdateStream
    | CreateTopic
    | UpdateTopic
    | PartitionsChange
    | DeleteSegments
    | SendMessages
    | PollMessages
    | GetConsumerOffset
    | StoreConsumerOffset
    | DeleteConsumerOffset
    | CreateConsumerGroup
    | ConsumerSessionAttachment
    | ClientRef
    | DescribeOptions
    | GetSnapshot
    | UserRef
    | CreateUser
    | UpdateUser
    | UpdatePermissions
    | ChangePassword
    | CreatePersonalAccessToken
    | PersonalAccessTokenRef
    | LoginRegisterWithPat
)

ReplyPayload: TypeAlias = (
    Empty
    | LoginRegisterReply
    | ClientInfoDetails
    | Clients
    | OptionsCatalog
    | SnapshotArchive
    | ClusterMetadata
    | Stats
    | StreamDetails
    | Streams
    | TopicDetails
    | Topics
    | SendMessagesReply
    | PollMessagesReply
    | ConsumerOffsetInfo
    | ConsumerGroupDetails
    | ConsumerGroups
    | ConsumerGroupAssignment
    | PollRoute
    | UserDetails
    | Users
    | RawPersonalAccessToken
    | PersonalAccessTokens
)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """How one command's bodies are shaped.

    Attributes:
        code: The command code.
        request: The request payload type (``decode`` parses a body).
        reply: The reply payload type, result section excluded.
        reply_optional: An empty reply body means "nothing" (not found, not a member)
            rather than a payload.
    """

    code: CommandCode
    request: type[RequestPayload]
    reply: type[ReplyPayload]
    reply_optional: bool = False

    def decode_request(self, body: Buffer) -> RequestPayload:
        """A request body decoded as a server decodes it: trailing bytes ignored.

        Every field is read and validated exactly as ``self.request.decode`` does;
        only then are the bytes after the last field ignored, as Iggy's server ignores
        them (its Node SDK appends a ``partitions_count`` u32 to DELETE_TOPIC). A
        command with no payload ignores its whole body. Where the last field runs to
        the end of the body (an options block, a send's batch) there is nothing left
        to ignore, so bytes appended there are refused as that field's malformation.
        ``self.request.decode`` stays the strict, canonical decoder.

        Raises:
            ProtocolError: a field is malformed or missing.
        """
        request = self.request
        if issubclass(request, Empty):
            return Empty()  # never read, as Iggy's server never reads these bodies
        return request.read(Reader(body))

    def decode_reply(self, body: Buffer) -> ReplyPayload | None:
        """The reply payload of a body whose result section is already stripped;
        ``None`` for an empty body of an optional reply."""
        if self.reply_optional and len(body) == 0:
            return None
        return self.reply.decode(body)


def _spec(
    code: CommandCode,
    request: type[RequestPayload],
    reply: type[ReplyPayload] = Empty,
    *,
    optional: bool = False,
) -> tuple[CommandCode, CommandSpec]:
    return code, CommandSpec(code, request, reply, optional)


COMMANDS: Final[dict[CommandCode, CommandSpec]] = dict(
    [
        _spec(CommandCode.PING, Empty),
        _spec(CommandCode.GET_STATS, Empty, Stats),
        _spec(CommandCode.GET_SNAPSHOT_FILE, GetSnapshot, SnapshotArchive),
        _spec(CommandCode.GET_CLUSTER_METADATA, Empty, ClusterMetadata),
        _spec(CommandCode.DESCRIBE_OPTIONS, DescribeOptions, OptionsCatalog),
        _spec(CommandCode.GET_ME, Empty, ClientInfoDetails),
        _spec(CommandCode.GET_CLIENT, ClientRef, ClientInfoDetails, optional=True),
        _spec(CommandCode.GET_CLIENTS, Empty, Clients),
        _spec(CommandCode.ATTACH_CONSUMER_SESSION, ConsumerSessionAttachment),
        _spec(CommandCode.GET_USER, UserRef, UserDetails, optional=True),
        _spec(CommandCode.GET_USERS, Empty, Users),
        _spec(CommandCode.CREATE_USER, CreateUser, UserDetails),
        _spec(CommandCode.DELETE_USER, UserRef),
        _spec(CommandCode.UPDATE_USER, UpdateUser),
        _spec(CommandCode.UPDATE_PERMISSIONS, UpdatePermissions),
        _spec(CommandCode.CHANGE_PASSWORD, ChangePassword),
        _spec(CommandCode.LOGOUT_USER, Empty),
        _spec(CommandCode.LOGIN_REGISTER, LoginRegister, LoginRegisterReply),
        _spec(CommandCode.LOGIN_REGISTER_WITH_PAT, LoginRegisterWithPat, LoginRegisterReply),
        _spec(CommandCode.GET_PERSONAL_ACCESS_TOKENS, Empty, PersonalAccessTokens),
        _spec(
            CommandCode.CREATE_PERSONAL_ACCESS_TOKEN,
            CreatePersonalAccessToken,
            RawPersonalAccessToken,
        ),
        _spec(CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, PersonalAccessTokenRef),
        _spec(CommandCode.POLL_MESSAGES, PollMessages, PollMessagesReply),
        # In a cluster the official SDK asks its node where an auto-commit poll must go
        # (103), attaches its session on that partition primary (14) and polls there (104).
        _spec(CommandCode.POLL_ROUTING, PollMessages, PollRoute),
        _spec(CommandCode.POLL_PRIMARY, PollMessages, PollMessagesReply),
        # An empty send reply reads as "no confirmations", as the official SDK reads it.
        _spec(CommandCode.SEND_MESSAGES, SendMessages, SendMessagesReply, optional=True),
        _spec(
            CommandCode.GET_CONSUMER_OFFSET, GetConsumerOffset, ConsumerOffsetInfo, optional=True
        ),
        _spec(CommandCode.STORE_CONSUMER_OFFSET, StoreConsumerOffset),
        _spec(CommandCode.DELETE_CONSUMER_OFFSET, DeleteConsumerOffset),
        _spec(CommandCode.CONSUMER_OFFSET_ROUTING, GetConsumerOffset, PollRoute),
        _spec(CommandCode.GET_STREAM, StreamRef, StreamDetails, optional=True),
        _spec(CommandCode.GET_STREAMS, Empty, Streams),
        _spec(CommandCode.CREATE_STREAM, CreateStream, StreamDetails),
        _spec(CommandCode.DELETE_STREAM, StreamRef),
        _spec(CommandCode.UPDATE_STREAM, UpdateStream),
        _spec(CommandCode.PURGE_STREAM, StreamRef),
        _spec(CommandCode.GET_TOPIC, TopicRef, TopicDetails, optional=True),
        _spec(CommandCode.GET_TOPICS, StreamRef, Topics, optional=True),
        _spec(CommandCode.CREATE_TOPIC, CreateTopic, TopicDetails),
        _spec(CommandCode.DELETE_TOPIC, TopicRef),
        _spec(CommandCode.UPDATE_TOPIC, UpdateTopic),
        _spec(CommandCode.PURGE_TOPIC, TopicRef),
        _spec(CommandCode.CREATE_PARTITIONS, PartitionsChange),
        _spec(CommandCode.DELETE_PARTITIONS, PartitionsChange),
        _spec(CommandCode.DELETE_SEGMENTS, DeleteSegments),
        _spec(CommandCode.GET_CONSUMER_GROUP, GroupRef, ConsumerGroupDetails, optional=True),
        _spec(CommandCode.GET_CONSUMER_GROUPS, TopicRef, ConsumerGroups),
        _spec(CommandCode.CREATE_CONSUMER_GROUP, CreateConsumerGroup, ConsumerGroupDetails),
        _spec(CommandCode.DELETE_CONSUMER_GROUP, GroupRef),
        _spec(CommandCode.JOIN_CONSUMER_GROUP, GroupRef),
        _spec(CommandCode.LEAVE_CONSUMER_GROUP, GroupRef),
        _spec(CommandCode.SYNC_CONSUMER_GROUP, GroupRef, ConsumerGroupAssignment, optional=True),
    ]
)
"""Every command this codec supports, keyed by code."""


# --- whole frames ------------------------------------------------------------------


def request_command_code(header: RequestHeader) -> CommandCode:
    """The command a request header stands for.

    Raises:
        ProtocolError: a non-replicated code or an operation this codec does not
            support (the server answers ``INVALID_COMMAND``).
    """
    operation = header.operation
    if operation is Operation.NON_REPLICATED:
        raw = header.code
    elif operation is Operation.REGISTER:
        # The body tells password and token logins apart (``register_command_code``);
        # the header alone names the password login.
        raw = CommandCode.LOGIN_REGISTER
    else:
        known = code_for_operation(operation)
        raw = known if known is not None else -1
    try:
        code = CommandCode(raw)
    except ValueError:
        code = None
    if code is None or code not in COMMANDS or operation_for_code(code) is not operation:
        raise ProtocolError(
            f"unsupported command {raw} for operation {operation.name}",
            IggyErrorCode.INVALID_COMMAND,
        )
    return code


def register_command_code(body: Buffer) -> CommandCode:
    """Which login a register body is: ``LOGIN_REGISTER`` (40) when it reads as a password
    login, else ``LOGIN_REGISTER_WITH_PAT`` (45) when it reads as a token login, else
    ``LOGIN_REGISTER``, whose decoding then refuses it. Both travel as
    ``Operation.REGISTER``; Iggy's server tells them apart the same way, the password
    shape first."""
    for code in (CommandCode.LOGIN_REGISTER, CommandCode.LOGIN_REGISTER_WITH_PAT):
        try:
            COMMANDS[code].decode_request(body)
        except ProtocolError:
            continue
        return code
    return CommandCode.LOGIN_REGISTER


def read_request(frame: Frame) -> tuple[RequestHeader, CommandCode, RequestPayload]:
    """Parse a request frame as a server does: its header, command and typed payload
    (trailing bytes ignored, see :meth:`CommandSpec.decode_request`).

    Server admission rules are separate (``header.validate_request_header``), and so
    is the batch check of a send (:func:`verify_send_messages`).
    """
    header = frame.request_header()
    code = request_command_code(header)
    if header.operation is Operation.REGISTER:
        code = register_command_code(frame.body)
    return header, code, COMMANDS[code].decode_request(frame.body)


def encode_reply_body(operation: Operation, payload: ReplyPayload) -> bytes:
    """A success reply body for ``operation``: the payload, behind a zero result
    section where the operation is result-framed (Register included)."""
    body = payload.encode()
    if operation.is_result_framed or operation is Operation.REGISTER:
        return result_ok(body)
    return body


def read_reply(code: CommandCode, frame: Frame) -> ReplyPayload | None:
    """The typed reply payload of ``frame``, answering a request for ``code``.

    Returns:
        The payload, or ``None`` when an optional reply is empty (not found).

    Raises:
        SessionEvicted: the frame is an eviction.
        ServerRejected: a non-zero status or a rejecting result section.
        ProtocolError: anything malformed.
    """
    if frame.command is Command.EVICTION:
        eviction = frame.eviction_header()
        raise SessionEvicted(
            eviction.reason,
            eviction.server_protocol_version,
            eviction.server_protocol_version_min,
        )
    header = frame.reply_header()
    if header.status != 0:
        raise ServerRejected(header.status)
    spec = COMMANDS.get(code)
    if spec is None:
        raise ValueError(f"command {code} is not supported by this codec")
    return spec.decode_reply(split_result(header.operation, frame.body))
