"""The SDK's protocol core, sans IO: sessions, requests, replies, retries and routing.

Purpose: everything a client decides, with no socket, clock or lock in sight, so the trio
driver (``sdk.client``) and the blocking driver (``sdk.blocking``) are thin loops over the
same logic and the logic is tested without a network.

Theory of operation. Each call is a *step*: a generator that yields IO actions and is sent
their results.

* ``Exchange(address, frame, timeout_s, connect_timeout_s)``: write ``frame`` to the node
  (dialing it first if needed) and read one frame back. The driver sends the reply
  :class:`~sdk.wire.Frame` into the step, or throws a :class:`TransportError` into it
  (and closes that connection: its byte stream can no longer be trusted).
* ``Sleep(seconds)``: wait. ``Disconnect(address)``: close that connection.

Steps compose with ``yield from``: ``send_messages`` resolves a partition with a GET_TOPIC
step, then runs the SEND_MESSAGES step. Time comes from the injected ``clock`` and
randomness from the injected ``random.Random``.

Invariants:

1. The client id is random and non-zero, minted at the first request, and kept across
   reconnects and failovers; logout forgets it (as the official SDK does), and so does a
   session the cluster ended or evicted. A Register from a client id whose session still
   lives in the metadata group is answered with that session, which a client table that
   evicted it refuses again; a new client id always gets a new session.
2. Request numbers follow the official 0.9.0 SDK: Register sends 0; reads send the
   counter without advancing it; Logout, metadata operations and partition operations
   (send, store/delete offset) send the counter and advance it, even when refused. The
   counter keeps counting under a new client id, so no number repeats under one client
   id across its sessions, which is what the cluster's client table judges by.
3. A retry re-sends the same body under the same client id, session and request number,
   so the server's client table answers a retried write from its cached reply: a write
   retried by the SDK is applied at most once. A write whose outcome is in doubt when its
   session ends is never re-sent under a new one (a client table recognises a retry
   under a new session only while it still holds the client's entry); it fails with
   ``outcome_unknown``.
4. A session is lock-step: one call at a time per core (the drivers hold a lock around
   each step).
5. Every call ends: attempts are bounded by ``ATTEMPTS_MAX`` and ``retry_deadline_s``;
   waits between rounds grow exponentially, so retrying never busy-loops.
6. A reply must echo our client id, the request number and the operation; anything else
   is a protocol fault, and the connection it came on is closed before retrying.
7. A node serves a session only on a connection that logged in to it. A request refused
   with Unauthenticated (40) while we hold a session is retried, under the same number,
   after a login on that node under our client id, which joins the live session there
   (``_bind``); a write in doubt is never re-sent if that login opened another session.
"""

from __future__ import annotations

import json
import random
import struct
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Final, NamedTuple, TypeAlias, TypeVar

from sdk._cluster import METADATA, Cluster, PartitionGroup, RouteKey
from sdk.connection_string import ClientConfig, NodeAddress
from sdk.errors import (
    ConnectionFailed,
    ConsumerGroupMemberNotFound,
    Disconnected,
    IggyError,
    InvalidFormat,
    PartitionNotFound,
    RequestAlreadyApplied,
    RequestTimeout,
    StorageFull,
    TopicNotFound,
    Unauthenticated,
    error_for_code,
    error_for_eviction,
)
from sdk.errors import SessionEvicted as SessionEndedError
from sdk.types import (
    ConsumerRef,
    IdLike,
    Message,
    MessageLike,
    PartitioningLike,
    PolledMessages,
    to_identifier,
    to_message,
    to_partitioning,
)
from sdk.wire import (
    COMMANDS,
    HEADER_SIZE,
    LONG_POLL_CODE,
    LONG_POLL_WAIT_MS_MAX,
    RUNTIME_STATS_CODE,
    AckLevel,
    Balanced,
    Buffer,
    ChangePassword,
    ClientInfo,
    ClientInfoDetails,
    ClientRef,
    Clients,
    ClusterMetadata,
    Command,
    CommandCode,
    ConsumerGroupAssignment,
    ConsumerGroupDetails,
    ConsumerGroupInfo,
    ConsumerGroups,
    ConsumerOffsetInfo,
    CreateConsumerGroup,
    CreatePersonalAccessToken,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerOffset,
    DeleteSegments,
    DescribeOptions,
    Empty,
    EvictionReason,
    Frame,
    GetConsumerOffset,
    GroupRef,
    Identifier,
    IggyErrorCode,
    LoginRegister,
    LoginRegisterReply,
    LoginRegisterWithPat,
    LongPollMessages,
    MessagesKey,
    Operation,
    OptionDescriptor,
    OptionEntry,
    OptionsCatalog,
    OptionsScope,
    PartitionId,
    PartitionInfo,
    PartitionsChange,
    Permissions,
    PersonalAccessTokenInfo,
    PersonalAccessTokenRef,
    PersonalAccessTokens,
    PollingStrategy,
    PollMessages,
    PollMessagesReply,
    ProtocolError,
    RawPersonalAccessToken,
    ReplyPayload,
    RequestPayload,
    SendConfirmation,
    SendMessagesReply,
    ServerRejected,
    SessionEvicted,
    Stats,
    StoreConsumerOffset,
    StreamDetails,
    StreamInfo,
    StreamRef,
    Streams,
    TopicDetails,
    TopicInfo,
    TopicRef,
    Topics,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserDetails,
    UserInfo,
    UserRef,
    Users,
    UserStatus,
    build_request_frame,
    build_send_messages_columns,
    operation_for_code,
    split_result,
)

__all__ = [
    "ATTEMPTS_MAX",
    "NO_PARTITION",
    "Action",
    "ClientCore",
    "ConnectFailed",
    "ConnectionLost",
    "Disconnect",
    "Exchange",
    "ExchangeTimedOut",
    "SessionState",
    "Sleep",
    "Step",
    "TransportError",
    "frame_view",
]

ATTEMPTS_MAX: Final = 64
"""Most attempts (frames written or dials tried) of one call, whatever the deadline."""

PROTOCOL_FAULTS_MAX: Final = 2
BINDS_PER_ADDRESS_MAX: Final = 2
"""Logins one call makes on one node to join its session there (a node serves a session
only on a connection that logged in to it; a reconnect needs another)."""
"""Malformed or mismatched replies tolerated per call before it fails."""

TOPIC_CACHE_ENTRIES_MAX: Final = 1024
"""Most topics whose partition count (for balanced and keyed sends) is remembered."""

ASSIGNMENT_CACHE_ENTRIES_MAX: Final = 256
"""Most consumer groups whose assignment to this session is remembered."""
POLL_PREFIXES_MAX: Final = 64
"""Most poll targets (consumer, stream, topic, partition) whose encoded request prefix is
remembered."""
_POLL_TAIL: Final = struct.Struct(
    "<"
    "B"  # polling kind: u8
    "Q"  # polling value: u64
    "I"  # count: u32
    "B"  # auto_commit: u8
)
"""The end of a POLL_MESSAGES body, after the partition flag (``PollMessages.encode``)."""
assert _POLL_TAIL.size == 14
ASSIGNMENT_RESYNC_S: Final = 1.0
"""How old a consumer group's cached assignment may get before a group poll syncs it
again (SYNC_CONSUMER_GROUP): a member learns of partitions a rebalance gave it within
about this long, without a refusal to tell it (the official SDK syncs on each 5 s
heartbeat)."""

NO_PARTITION: Final = 0xFFFF_FFFF
"""The partition id of a consumer-group poll reply that asks the member to re-sync."""

_T = TypeVar("_T")


# --- actions and transport errors ------------------------------------------------------


class Exchange(NamedTuple):
    """Write ``frame`` to ``address`` and read one frame back, within ``timeout_s``.

    A tuple: one is made per request, and a tuple is built in C where a frozen
    dataclass sets each field through ``object.__setattr__``."""

    address: NodeAddress
    frame: bytes | bytearray
    timeout_s: float
    connect_timeout_s: float


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the connection to ``address`` (its byte stream is no longer trusted)."""

    address: NodeAddress


Action: TypeAlias = Exchange | Sleep | Disconnect
Step: TypeAlias = Generator[Action, Frame | None, _T]
"""A call in progress: yields actions, is sent reply frames, returns the call's value."""


class TransportError(Exception):
    """Raised by a driver into a step when an exchange failed; the driver has already
    closed the connection.

    Attributes:
        address: The node.
    """

    def __init__(self, address: NodeAddress, detail: str = "") -> None:
        super().__init__(f"{address}: {detail}" if detail else str(address))
        self.address = address


class ConnectFailed(TransportError):
    """The dial failed: nothing was sent."""


class ConnectionLost(TransportError):
    """The connection broke after the frame may have been sent."""


class ExchangeTimedOut(TransportError):
    """No reply within the attempt's timeout (the frame may have been applied)."""


# --- session state ---------------------------------------------------------------------


class SessionState:
    """Client id, session and request counter of one client (see invariants 1 and 2)."""

    __slots__ = ("client_id", "next_request", "session", "user_id")

    def __init__(self) -> None:
        self.client_id = 0
        self.session = 0
        self.next_request = 1
        self.user_id: int | None = None

    @property
    def logged_in(self) -> bool:
        """Whether a Register reply gave us a session."""
        return self.session != 0

    def ensure_client_id(self, rng: random.Random) -> None:
        """Mint the client id if there is none yet."""
        while self.client_id == 0:
            self.client_id = rng.getrandbits(128)

    def number_for(self, operation: Operation) -> int:
        """The request number of a new request; advances the counter where the official
        0.9.0 SDK does (everything but Register and reads)."""
        if operation is Operation.REGISTER:
            return 0
        number = self.next_request
        if operation is not Operation.NON_REPLICATED:
            self.next_request = number + 1
        return number

    def abandon(self) -> None:
        """Drop the session and the client id (the cluster ended the session; a new
        client id registers the next one). The request counter keeps counting."""
        self.client_id = 0
        self.session = 0

    def forget(self) -> None:
        """Drop the client id, session and counter (after logout)."""
        self.client_id = 0
        self.session = 0
        self.next_request = 1
        self.user_id = None


# --- request templates -----------------------------------------------------------------


class _BodyTemplate:
    """A request whose frame is rebuilt around the same body on every attempt."""

    __slots__ = ("body", "code")

    def __init__(self, code: CommandCode | int, body: bytes) -> None:
        self.code = code
        self.body = body

    def frame(self, client: int, session: int, request: int) -> bytes | bytearray:
        return build_request_frame(
            self.code, self.body, client=client, session=session, request=request
        )


class _InPlaceTemplate:
    """A partition-plane request built with header headroom: the header is packed into
    the same buffer on every attempt, so the batch is never copied."""

    __slots__ = ("buffer", "operation")

    def __init__(self, operation: Operation, buffer: bytearray) -> None:
        assert operation.is_partition
        self.operation = operation
        self.buffer = buffer

    def frame(self, client: int, session: int, request: int) -> bytes | bytearray:
        buffer = self.buffer
        _REQUEST_STAMP.pack_into(
            buffer,
            0,
            len(buffer),
            Command.REQUEST,
            client.to_bytes(16, "little"),
            request,
            self.operation,
            session,
        )
        return buffer


_Template: TypeAlias = _BodyTemplate | _InPlaceTemplate


class _Answer(NamedTuple):
    address: NodeAddress
    payload: ReplyPayload | None
    frame: Frame


def _body(code: CommandCode, payload: RequestPayload) -> _BodyTemplate:
    return _BodyTemplate(code, payload.encode())


_REQUEST_STAMP: Final = struct.Struct(
    "<"
    "48x"  # 0    checksum, checksum_body, cluster: zero from clients
    "I"  # 48   size: u32
    "8x"  # 52   view, release: zero from clients
    "B"  # 60   command: u8, Command.REQUEST
    "67x"  # 61   replica, reserved_frame
    "16s"  # 128  client: u128
    "24x"  # 144  request_checksum (unstamped on the partition plane), timestamp
    "Q"  # 168  request: u64
    "B"  # 176  operation: u8
    "7x"  # 177  operation padding
    "Q"  # 184  session: u64
    "64x"  # 192  user_id, code (0 off the non-replicated plane), reserved
)
"""A partition-plane request header (``sdk.wire.header.REQUEST_HEADER``'s layout with its
zero fields as padding): what ``RequestHeader(...).pack_into`` writes for it, in one call."""
assert _REQUEST_STAMP.size == HEADER_SIZE

_REPLY_ECHO: Final = struct.Struct(
    "<"
    "52x"  # 0    checksum, checksum_body, cluster, size
    "I"  # 52   view: u32
    "4x"  # 56   release
    "B"  # 60   command: u8, Command.REPLY
    "B"  # 61   replica: u8, the replica that made the reply
    "98x"  # 62   reserved_frame, request_checksum, context
    "16s"  # 160  client: u128, echoed
    "24x"  # 176  op, commit, timestamp
    "Q"  # 200  request: u64, echoed
    "B"  # 208  operation: u8, echoed
    "7x"  # 209  operation padding
    "I"  # 216  status: u32
    "36x"  # 220  reserved
)
"""The reply header fields a client judges a reply by (``sdk.wire.header.REPLY_HEADER``'s
layout, the rest skipped)."""
assert _REPLY_ECHO.size == HEADER_SIZE

_BALANCED: Final = Balanced()
_RELOGIN_EVICTIONS: Final = (
    EvictionReason.NO_SESSION,
    EvictionReason.STALE_CLIENT,
    EvictionReason.SESSION_ERROR,
)


def _expect(value: object, kind: type[_T]) -> _T:
    if not isinstance(value, kind):
        raise InvalidFormat(detail=f"expected a {kind.__name__} reply, got {type(value).__name__}")
    return value


# --- credentials ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PasswordCredentials:
    """A login with a username and a password (LOGIN_REGISTER, 40)."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class TokenCredentials:
    """A login with a personal access token (LOGIN_REGISTER_WITH_PAT, 45)."""

    token: str = field(repr=False)


Credentials: TypeAlias = PasswordCredentials | TokenCredentials
"""What the core logs in (and in again) with; neither kind shows its secret in a repr."""


# --- the core --------------------------------------------------------------------------


class ClientCore:
    """Session, routing and every call of the client protocol, as steps.

    Args:
        config: The client settings.
        rng: Randomness for client ids, message ids and jitter.
        clock: Monotonic seconds.
        wall_clock_us: Microseconds since the epoch, for messages' origin timestamps.
        cluster: The cluster view to use (a fresh one from ``config.seeds`` if ``None``).
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        rng: random.Random,
        clock: Callable[[], float],
        wall_clock_us: Callable[[], int],
        cluster: Cluster | None = None,
    ) -> None:
        self.config = config
        self.session = SessionState()
        self.cluster = cluster or Cluster(
            config.seeds,
            backoff_min_s=config.backoff_min_s,
            backoff_max_s=config.backoff_max_s,
            rng=rng,
        )
        self._rng = rng
        self._clock = clock
        self._wall_clock_us = wall_clock_us
        self._credentials: Credentials | None = None
        if config.username is not None and config.password is not None:
            self._credentials = PasswordCredentials(config.username, config.password)
        elif config.token is not None:
            self._credentials = TokenCredentials(config.token)
        self._partition_counts: OrderedDict[tuple[object, object], int] = OrderedDict()
        self._balanced_next: dict[tuple[object, object], int] = {}
        self._assignments: OrderedDict[tuple[object, object, object], list[int]] = OrderedDict()
        self._assignment_next: dict[tuple[object, object, object], int] = {}
        self._assignment_synced_at: dict[tuple[object, object, object], float] = {}
        self._poll_prefixes: OrderedDict[tuple[object, ...], bytes] = OrderedDict()
        self._spare_frame: bytearray | None = None
        """The frame of the last finished send: the next send of the same shape is
        built into it (``build_batch_columns``' ``reuse``), not into fresh pages."""

    def fork(self, rng: random.Random) -> ClientCore:
        """Another core with the same settings, credentials and roster, and its own
        session (the producer runs one per batch in flight, the consumer its own)."""
        other = ClientCore(
            self.config,
            rng=rng,
            clock=self._clock,
            wall_clock_us=self._wall_clock_us,
            cluster=self.cluster.copy(rng),
        )
        other._credentials = self._credentials
        return other

    @property
    def has_credentials(self) -> bool:
        """Whether the core can log in (again) on its own."""
        return self._credentials is not None

    @property
    def credentials(self) -> Credentials | None:
        """What the core logs in with (``None`` until a login or the settings give it)."""
        return self._credentials

    # --- the engine --------------------------------------------------------------------

    def _backoff(self, rounds: int) -> float:
        config = self.config
        wait = min(config.backoff_max_s, config.backoff_min_s * (1 << min(max(0, rounds - 1), 30)))
        return wait * (0.5 + 0.5 * self._rng.random())

    def _read(
        self, code: CommandCode | int, request: int, operation: Operation, frame: Frame
    ) -> tuple[int, int, ReplyPayload | None]:
        """Check that ``frame`` answers our request; decode it (a code outside Iggy's
        registry has no payload: its caller reads the frame's body).

        Returns:
            The reply's view and replica (header fields), and its decoded payload.

        Raises:
            ProtocolError: malformed, or not an answer to this request.
            ServerRejected: a status or a rejecting result section.
            SessionEvicted: an eviction for our client.
        """
        client = self.session.client_id
        data = frame.data
        if frame.command is Command.EVICTION:
            eviction = frame.eviction_header()
            if eviction.client != client:
                raise ProtocolError("eviction for another client")
            raise SessionEvicted(
                eviction.reason,
                eviction.server_protocol_version,
                eviction.server_protocol_version_min,
            )
        # Only the fields a client judges a reply by, in one unpack (a frame is at least
        # its 256-byte header).
        view, command, replica, echoed_client, echoed_request, echoed_operation, status = (
            _REPLY_ECHO.unpack_from(data)
        )
        if command != Command.REPLY:
            raise ProtocolError(f"command {command} where a REPLY was expected")
        echoed = int.from_bytes(echoed_client, "little")
        if echoed != client or echoed_request != request or echoed_operation != operation:
            raise ProtocolError(
                f"reply (client {echoed:x}, request {echoed_request}, operation "
                f"{echoed_operation}) does not answer request {request} {operation.name}"
            )
        if operation is Operation.REGISTER and status == 0 and len(data) == HEADER_SIZE:
            # A terminal login failure ships an empty Register reply (docs/protocol.md 4).
            raise _LoginRefused
        if status != 0:
            raise ServerRejected(status)
        if not isinstance(code, CommandCode):
            return view, replica, None
        if code is CommandCode.SEND_MESSAGES:
            # Not result-framed; an empty body means no confirmations (COMMANDS' spec).
            body = data[HEADER_SIZE:]
            return view, replica, SendMessagesReply.decode(body) if len(body) else None
        # read_reply without parsing the header a second time.
        spec = COMMANDS.get(code)
        if spec is None:
            raise ValueError(f"command {code} is not supported by this codec")
        return view, replica, spec.decode_reply(split_result(operation, data[HEADER_SIZE:]))

    def _call(
        self,
        code: CommandCode | int,
        template: _Template,
        route: RouteKey | None,
        *,
        deadline: float | None = None,
        wait_s: float = 0.0,
    ) -> Step[_Answer]:
        """Run one request to completion: choose a node, exchange, retry, learn.

        Args:
            code: The command.
            template: Builds the frame for (client, session, request).
            route: Which group's primary should take it (``None``: any node).
            deadline: Monotonic time by which to give up (default: now + retry deadline
                + ``wait_s``).
            wait_s: How long the server may hold the request on purpose (a long poll),
                added to each attempt's timeout.
        """
        operation = operation_for_code(code)
        replicated = operation is not Operation.NON_REPLICATED
        needs_session = operation is not Operation.REGISTER and code is not CommandCode.PING
        if needs_session and not self.session.logged_in and self._credentials is not None:
            yield from self._register(deadline)
            if self.config.cluster_discovery and not self.cluster.roster_known:
                yield from self._refresh_roster(self._clock() + self.config.request_timeout_s)
        if replicated and operation is not Operation.REGISTER and not self.session.logged_in:
            raise Unauthenticated(detail="log in first")
        self.session.ensure_client_id(self._rng)
        request = self.session.number_for(operation)
        write_route: RouteKey | None = None
        if operation.is_partition and isinstance(route, PartitionGroup):
            write_route = route
        elif replicated and not operation.is_partition:
            write_route = METADATA
            route = METADATA
        config = self.config
        now = self._clock()
        if deadline is None:
            deadline = now + config.retry_deadline_s + wait_s
        tried: set[NodeAddress] = set()
        binds: dict[NodeAddress, int] = {}
        rounds = 0
        attempts = 0
        protocol_faults = 0
        uncertain = False
        reached = False
        relogged = False
        last: Exception | None = None
        while True:
            now = self._clock()
            if now >= deadline or attempts >= ATTEMPTS_MAX:
                raise self._give_up(last, uncertain=uncertain, reached=reached)
            if route == METADATA and self.cluster.stale and operation is not Operation.REGISTER:
                yield from self._refresh_roster(min(deadline, now + config.request_timeout_s))
                now = self._clock()
            address = self.cluster.choose(self.cluster.preferred(route), tried, now)
            if address is None:
                rounds += 1
                tried.clear()
                wait = max(self.cluster.time_until_usable(now), self._backoff(rounds))
                wait = min(wait, deadline - now)
                if wait > 0:
                    yield Sleep(wait)
                continue
            attempts += 1
            frame = template.frame(self.session.client_id, self.session.session, request)
            timeout = max(min(config.request_timeout_s + wait_s, deadline - now), 0.001)
            try:
                reply = yield Exchange(
                    address, frame, timeout, min(config.connect_timeout_s, timeout)
                )
            except ConnectFailed as error:
                self.cluster.on_transport_failure(address, self._clock())
                tried.add(address)
                last = error
                continue
            except TransportError as error:
                # The frame may have reached the node: a write's outcome is now unknown
                # until a retry (same request number) hears the client table's answer.
                uncertain = uncertain or replicated
                reached = True
                self.cluster.on_transport_failure(address, self._clock())
                tried.add(address)
                last = error
                continue
            assert reply is not None, "a driver answers an exchange with a frame"
            reached = True
            try:
                view, replica, payload = self._read(code, request, operation, reply)
            except _LoginRefused:
                self.cluster.on_answer(address)
                raise InvalidFormat(detail="login refused: empty register reply") from None
            except ProtocolError as error:
                yield Disconnect(address)
                protocol_faults += 1
                if protocol_faults > PROTOCOL_FAULTS_MAX:
                    raise InvalidFormat(detail=f"malformed reply: {error.reason}") from error
                uncertain = uncertain or replicated
                last = error
                continue
            except ServerRejected as rejection:
                self.cluster.on_answer(address)
                failure = error_for_code(rejection.code)
                view = frame_view(reply)
                if rejection.code == IggyErrorCode.TRANSIENT_NOT_ACCEPTED:
                    if route is not None:
                        self.cluster.on_not_primary(route, address, view)
                    tried.add(address)
                    last = failure
                    continue
                if rejection.code == IggyErrorCode.TRANSIENT_NOT_COMMITTED:
                    uncertain = True
                    rounds += 1
                    last = failure
                    wait = min(self._backoff(rounds), max(0.0, deadline - self._clock()))
                    if wait > 0:
                        yield Sleep(wait)
                    continue
                if (
                    rejection.code == IggyErrorCode.UNAUTHENTICATED
                    and self.session.logged_in
                    and self._credentials is not None
                    and binds.get(address, 0) < BINDS_PER_ADDRESS_MAX
                ):
                    # A node serves a session only on a connection that logged in to it:
                    # this one is new (another node, a reconnect). Log in on it under our
                    # client id, which joins our live session, then retry here.
                    previous = self.session.session
                    try:
                        session = yield from self._bind(address, deadline)
                    except TransportError as error:
                        self.cluster.on_transport_failure(address, self._clock())
                        tried.add(address)
                        last = error
                        continue
                    except ServerRejected as refused:
                        if refused.code != IggyErrorCode.TRANSIENT_NOT_ACCEPTED:
                            raise error_for_code(refused.code) from None
                        tried.add(address)  # a node behind: another may take it
                        last = error_for_code(refused.code)
                        continue
                    except SessionEvicted as evicted:
                        yield Disconnect(address)
                        self.session.session = 0
                        raise error_for_eviction(evicted.reason) from None
                    except ProtocolError as error:
                        yield Disconnect(address)
                        last = error
                        continue
                    binds[address] = binds.get(address, 0) + 1  # a login that got through
                    if session != previous and uncertain and replicated:
                        # Our session had ended: the login opened a new one, under which
                        # a write in doubt is never re-sent.
                        raise self._session_lost(None) from None
                    continue
                if (
                    rejection.code == IggyErrorCode.UNAUTHENTICATED
                    and self.session.logged_in
                    and self._credentials is not None
                    and not relogged
                ):
                    # The server forgot our session (restart, table eviction).
                    if uncertain and replicated:
                        raise self._session_lost(None) from None
                    relogged = True
                    yield from self._register_anew(deadline)
                    continue
                if isinstance(failure, RequestAlreadyApplied) and uncertain:
                    failure = RequestAlreadyApplied(
                        detail="applied by an earlier attempt; its reply aged out",
                        after_retry=True,
                    )
                if isinstance(failure, StorageFull):
                    # Refused as new work; an earlier attempt may still have been applied.
                    failure.outcome_unknown = uncertain and replicated
                raise failure from None
            except SessionEvicted as evicted:
                self.cluster.on_answer(address)
                yield Disconnect(address)  # the node closes the connection after it
                relogin = (
                    evicted.reason in _RELOGIN_EVICTIONS
                    and operation is not Operation.REGISTER
                    and self._credentials is not None
                )
                if relogin and relogged and evicted.reason is EvictionReason.NO_SESSION:
                    # This call registered a session and this node has not applied that
                    # register yet (a backup behind, a node just restarted): an eviction
                    # applies nothing, so try the request on another node.
                    tried.add(address)
                    last = error_for_eviction(evicted.reason)
                    continue
                if relogin and not relogged and self.session.logged_in:
                    if uncertain and replicated:
                        raise self._session_lost(evicted.reason) from None
                    relogged = True
                    yield from self._register_anew(deadline)
                    continue
                self.session.session = 0
                raise error_for_eviction(
                    evicted.reason,
                    evicted.server_protocol_version,
                    evicted.server_protocol_version_min,
                ) from None
            self.cluster.on_answer(address)
            if write_route is not None:
                self.cluster.on_primary(write_route, address, view, replica)
            return _Answer(address, payload, reply)

    @staticmethod
    def _give_up(last: Exception | None, *, uncertain: bool, reached: bool) -> IggyError:
        if isinstance(last, IggyError):
            return last
        if isinstance(last, ExchangeTimedOut) or last is None:
            return RequestTimeout(detail=str(last or "deadline"), outcome_unknown=uncertain)
        if not reached:
            return ConnectionFailed(detail=str(last))
        if isinstance(last, ProtocolError):
            return InvalidFormat(detail=f"malformed reply: {last.reason}")
        return Disconnected(detail=str(last), outcome_unknown=uncertain)

    def _request(
        self, code: CommandCode, payload: RequestPayload, route: RouteKey | None = None
    ) -> Step[ReplyPayload | None]:
        answer = yield from self._call(code, _body(code, payload), route)
        return answer.payload

    # --- session -----------------------------------------------------------------------

    def _register_anew(self, deadline: float) -> Step[LoginRegisterReply]:
        """Register again after the cluster ended or evicted our session, under a new
        client id.

        A Register from a client id whose session still lives in the metadata group gets
        that session back, and a client table that evicted it (a ``SESSION_ERROR``
        eviction) would refuse it again: a new client id always gets a new session. The
        request counter keeps counting, so no request number repeats.
        """
        self.session.abandon()
        return (yield from self._register(deadline))

    def _session_lost(self, reason: EvictionReason | None) -> SessionEndedError:
        """The error for a write whose outcome was unknown when its session ended.

        Re-sending it under a new session could let the cluster apply it a second time
        (a client table recognises a retry under a new session only while it still holds
        the client's entry, and the new session comes with a new client id), so it is not
        re-sent; the next call registers a new session.
        """
        self.session.abandon()
        return SessionEndedError(
            IggyErrorCode.INVALID_SESSION,
            "the session ended while the write's outcome was unknown; not re-sent",
            eviction=reason,
            outcome_unknown=True,
        )

    def _login_payload(self) -> tuple[CommandCode, LoginRegister | LoginRegisterWithPat]:
        """The register command of our credentials and its payload: a password login
        (40) or a token login (45), both carried as ``Operation.REGISTER``."""
        credentials = self._credentials
        assert credentials is not None
        config = self.config
        if isinstance(credentials, TokenCredentials):
            return CommandCode.LOGIN_REGISTER_WITH_PAT, LoginRegisterWithPat(
                credentials.token, sdk_name=config.sdk_name, sdk_version=config.sdk_version
            )
        return CommandCode.LOGIN_REGISTER, LoginRegister(
            credentials.username,
            credentials.password,
            sdk_name=config.sdk_name,
            sdk_version=config.sdk_version,
        )

    def _bind(self, address: NodeAddress, deadline: float) -> Step[int]:
        """Log in on the connection to ``address`` under our client id; the session it
        answers with (ours while it lives: a repeated register joins it).

        Raises:
            TransportError, ProtocolError, ServerRejected, SessionEvicted: as an exchange.
        """
        code, payload = self._login_payload()
        frame = _body(code, payload).frame(self.session.client_id, 0, 0)
        timeout = max(min(self.config.request_timeout_s, deadline - self._clock()), 0.001)
        reply = yield Exchange(address, frame, timeout, min(self.config.connect_timeout_s, timeout))
        assert reply is not None, "a driver answers an exchange with a frame"
        try:
            _, _, answer = self._read(code, 0, Operation.REGISTER, reply)
        except _LoginRefused:
            raise ServerRejected(IggyErrorCode.INVALID_CREDENTIALS) from None
        login = _expect(answer, LoginRegisterReply)
        self.session.session = login.session
        self.session.user_id = login.user_id
        return login.session

    def _register(self, deadline: float | None = None) -> Step[LoginRegisterReply]:
        code, payload = self._login_payload()
        self.session.ensure_client_id(self._rng)
        answer = yield from self._call(code, _body(code, payload), METADATA, deadline=deadline)
        reply = _expect(answer.payload, LoginRegisterReply)
        self.session.session = reply.session
        self.session.user_id = reply.user_id
        return reply

    def login(self, username: str, password: str) -> Step[LoginRegisterReply]:
        """Register a session (request 0) and, if discovery is on, learn the roster."""
        return (yield from self.login_with(PasswordCredentials(username, password)))

    def login_with_personal_access_token(self, token: str) -> Step[LoginRegisterReply]:
        """Register a session with a personal access token (LOGIN_REGISTER_WITH_PAT, 45);
        the session is the token owner's, with that user's permissions. A token the node
        does not know (deleted, expired, made up) ends in an eviction, as in Iggy."""
        return (yield from self.login_with(TokenCredentials(token)))

    def login_with(self, credentials: Credentials) -> Step[LoginRegisterReply]:
        """Register a session with ``credentials``, which the core keeps for the logins a
        failover or a forgotten session needs; a refused login forgets them."""
        self._credentials = credentials
        try:
            reply = yield from self._register()
        except IggyError:
            self._credentials = None
            raise
        if self.config.cluster_discovery:
            yield from self._refresh_roster(self._clock() + self.config.request_timeout_s)
        return reply

    def logout(self) -> Step[None]:
        """End the session; the client id, counter and credentials are forgotten."""
        try:
            if self.session.logged_in:
                yield from self._request(CommandCode.LOGOUT_USER, Empty(), METADATA)
        finally:
            self.session.forget()
            self._credentials = None
            self._assignments.clear()

    def _refresh_roster(self, deadline: float) -> Step[None]:
        """Ask any node for cluster metadata; failures leave the roster as it was."""
        self.cluster.stale = False
        try:
            answer = yield from self._call(
                CommandCode.GET_CLUSTER_METADATA,
                _body(CommandCode.GET_CLUSTER_METADATA, Empty()),
                None,
                deadline=deadline,
            )
        except IggyError:
            return
        if isinstance(answer.payload, ClusterMetadata):
            self.cluster.update_roster(answer.payload, answer.address)

    # --- system --------------------------------------------------------------------------

    def ping(self) -> Step[None]:
        """PING (allowed before login)."""
        yield from self._request(CommandCode.PING, Empty())

    def heartbeat(self, address: NodeAddress) -> Step[None]:
        """One PING to ``address``, not retried: the heartbeat of the connection to that
        node (a node evicts a consumer group member's connection that stays silent for
        1.2 heartbeat intervals).

        Raises:
            TransportError, ProtocolError, ServerRejected: as an exchange.
            SessionEvicted: the node evicted our session (it is dropped here).
        """
        self.session.ensure_client_id(self._rng)
        request = self.session.number_for(Operation.NON_REPLICATED)
        frame = _body(CommandCode.PING, Empty()).frame(
            self.session.client_id, self.session.session, request
        )
        timeout = self.config.request_timeout_s
        reply = yield Exchange(address, frame, timeout, min(self.config.connect_timeout_s, timeout))
        assert reply is not None, "a driver answers an exchange with a frame"
        try:
            self._read(CommandCode.PING, request, Operation.NON_REPLICATED, reply)
        except SessionEvicted:
            self.session.abandon()
            raise

    def get_stats(self) -> Step[Stats]:
        """GET_STATS."""
        return _expect((yield from self._request(CommandCode.GET_STATS, Empty())), Stats)

    def get_runtime_stats(self) -> Step[dict[str, Any]]:
        """``RUNTIME_STATS_CODE`` (viewstream's own): the answering node's counters.

        Raises:
            InvalidFormat: the body is not a JSON object.
        """
        template = _BodyTemplate(RUNTIME_STATS_CODE, b"")
        answer = yield from self._call(RUNTIME_STATS_CODE, template, None)
        try:
            report = json.loads(bytes(answer.frame.body))
        except ValueError as error:
            raise InvalidFormat(detail=f"runtime stats are not JSON: {error}") from None
        if not isinstance(report, dict):
            raise InvalidFormat(detail="runtime stats are not a JSON object")
        return report

    def get_me(self) -> Step[ClientInfoDetails]:
        """GET_ME."""
        payload = yield from self._request(CommandCode.GET_ME, Empty())
        return _expect(payload, ClientInfoDetails)

    def get_clients(self) -> Step[list[ClientInfo]]:
        """GET_CLIENTS: the answering node's connections (needs ``read_servers``)."""
        payload = yield from self._request(CommandCode.GET_CLIENTS, Empty())
        return list(_expect(payload, Clients).clients)

    def get_client(self, client_id: int) -> Step[ClientInfoDetails | None]:
        """GET_CLIENT (``None`` when no connection of the node has that client id)."""
        payload = yield from self._request(CommandCode.GET_CLIENT, ClientRef(client_id))
        return None if payload is None else _expect(payload, ClientInfoDetails)

    def describe_options(self, scope: OptionsScope) -> Step[list[OptionDescriptor]]:
        """DESCRIBE_OPTIONS: the option keys ``scope`` accepts, with kinds and defaults."""
        payload = yield from self._request(CommandCode.DESCRIBE_OPTIONS, DescribeOptions(scope))
        return list(_expect(payload, OptionsCatalog).entries)

    def get_cluster_metadata(self) -> Step[ClusterMetadata]:
        """GET_CLUSTER_METADATA; the roster is updated from it."""
        answer = yield from self._call(
            CommandCode.GET_CLUSTER_METADATA,
            _body(CommandCode.GET_CLUSTER_METADATA, Empty()),
            None,
        )
        metadata = _expect(answer.payload, ClusterMetadata)
        self.cluster.update_roster(metadata, answer.address)
        return metadata

    # --- users ---------------------------------------------------------------------------

    def get_user(self, user: IdLike) -> Step[UserDetails | None]:
        """GET_USER (``None`` when missing)."""
        payload = yield from self._request(
            CommandCode.GET_USER, UserRef(to_identifier(user)), METADATA
        )
        return None if payload is None else _expect(payload, UserDetails)

    def get_users(self) -> Step[list[UserInfo]]:
        """GET_USERS."""
        payload = yield from self._request(CommandCode.GET_USERS, Empty(), METADATA)
        return list(_expect(payload, Users).users)

    def create_user(
        self,
        username: str,
        password: str,
        status: UserStatus = UserStatus.ACTIVE,
        permissions: Permissions | None = None,
    ) -> Step[UserDetails]:
        """CREATE_USER."""
        payload = yield from self._request(
            CommandCode.CREATE_USER, CreateUser(username, password, status, permissions), METADATA
        )
        return _expect(payload, UserDetails)

    def delete_user(self, user: IdLike) -> Step[None]:
        """DELETE_USER (the user's sessions and tokens go with it)."""
        yield from self._request(CommandCode.DELETE_USER, UserRef(to_identifier(user)), METADATA)

    def update_user(
        self, user: IdLike, username: str | None = None, status: UserStatus | None = None
    ) -> Step[None]:
        """UPDATE_USER (``None`` fields are left as they are)."""
        yield from self._request(
            CommandCode.UPDATE_USER, UpdateUser(to_identifier(user), username, status), METADATA
        )

    def update_permissions(self, user: IdLike, permissions: Permissions | None) -> Step[None]:
        """UPDATE_PERMISSIONS (``None`` removes every permission)."""
        yield from self._request(
            CommandCode.UPDATE_PERMISSIONS,
            UpdatePermissions(to_identifier(user), permissions),
            METADATA,
        )

    def change_password(self, user: IdLike, current_password: str, new_password: str) -> Step[None]:
        """CHANGE_PASSWORD."""
        yield from self._request(
            CommandCode.CHANGE_PASSWORD,
            ChangePassword(to_identifier(user), current_password, new_password),
            METADATA,
        )

    # --- personal access tokens ----------------------------------------------------------

    def create_personal_access_token(self, name: str, expiry_us: int) -> Step[str]:
        """CREATE_PERSONAL_ACCESS_TOKEN: the raw token, which the node sends only once."""
        payload = yield from self._request(
            CommandCode.CREATE_PERSONAL_ACCESS_TOKEN,
            CreatePersonalAccessToken(name, expiry_us),
            METADATA,
        )
        return _expect(payload, RawPersonalAccessToken).token

    def get_personal_access_tokens(self) -> Step[list[PersonalAccessTokenInfo]]:
        """GET_PERSONAL_ACCESS_TOKENS: the caller's tokens (names and expiries only)."""
        payload = yield from self._request(
            CommandCode.GET_PERSONAL_ACCESS_TOKENS, Empty(), METADATA
        )
        return list(_expect(payload, PersonalAccessTokens).tokens)

    def delete_personal_access_token(self, name: str) -> Step[None]:
        """DELETE_PERSONAL_ACCESS_TOKEN, one of the caller's by name."""
        yield from self._request(
            CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, PersonalAccessTokenRef(name), METADATA
        )

    # --- streams -------------------------------------------------------------------------

    def create_stream(self, name: str, options: Sequence[OptionEntry] = ()) -> Step[StreamDetails]:
        """CREATE_STREAM."""
        payload = yield from self._request(
            CommandCode.CREATE_STREAM, CreateStream(name, tuple(options)), METADATA
        )
        return _expect(payload, StreamDetails)

    def get_stream(self, stream: IdLike) -> Step[StreamDetails | None]:
        """GET_STREAM (``None`` when missing)."""
        payload = yield from self._request(
            CommandCode.GET_STREAM, StreamRef(to_identifier(stream)), METADATA
        )
        return None if payload is None else _expect(payload, StreamDetails)

    def get_streams(self) -> Step[list[StreamInfo]]:
        """GET_STREAMS."""
        payload = yield from self._request(CommandCode.GET_STREAMS, Empty(), METADATA)
        return list(_expect(payload, Streams).streams)

    def update_stream(
        self, stream: IdLike, name: str, options: Sequence[OptionEntry] = ()
    ) -> Step[None]:
        """UPDATE_STREAM (options are a patch)."""
        yield from self._request(
            CommandCode.UPDATE_STREAM,
            UpdateStream(to_identifier(stream), name, tuple(options)),
            METADATA,
        )

    def delete_stream(self, stream: IdLike) -> Step[None]:
        """DELETE_STREAM."""
        self._forget_topics()
        yield from self._request(
            CommandCode.DELETE_STREAM, StreamRef(to_identifier(stream)), METADATA
        )

    def purge_stream(self, stream: IdLike) -> Step[None]:
        """PURGE_STREAM."""
        yield from self._request(
            CommandCode.PURGE_STREAM, StreamRef(to_identifier(stream)), METADATA
        )

    # --- topics --------------------------------------------------------------------------

    def create_topic(
        self,
        stream: IdLike,
        name: str,
        partitions_count: int,
        options: Sequence[OptionEntry] = (),
    ) -> Step[TopicDetails]:
        """CREATE_TOPIC."""
        payload = yield from self._request(
            CommandCode.CREATE_TOPIC,
            CreateTopic(to_identifier(stream), partitions_count, name, tuple(options)),
            METADATA,
        )
        return _expect(payload, TopicDetails)

    def get_topic(self, stream: IdLike, topic: IdLike) -> Step[TopicDetails | None]:
        """GET_TOPIC (``None`` when missing); refreshes the cached partition count."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        payload = yield from self._request(
            CommandCode.GET_TOPIC, TopicRef(stream_id, topic_id), METADATA
        )
        if payload is None:
            self._partition_counts.pop((stream_id.value, topic_id.value), None)
            return None
        details = _expect(payload, TopicDetails)
        self._remember_partitions(stream_id, topic_id, details.topic.partitions_count)
        return details

    def get_topics(self, stream: IdLike) -> Step[list[TopicInfo]]:
        """GET_TOPICS."""
        payload = yield from self._request(
            CommandCode.GET_TOPICS, StreamRef(to_identifier(stream)), METADATA
        )
        return [] if payload is None else list(_expect(payload, Topics).topics)

    def update_topic(
        self, stream: IdLike, topic: IdLike, name: str, options: Sequence[OptionEntry] = ()
    ) -> Step[None]:
        """UPDATE_TOPIC (options are a patch)."""
        yield from self._request(
            CommandCode.UPDATE_TOPIC,
            UpdateTopic(to_identifier(stream), to_identifier(topic), name, tuple(options)),
            METADATA,
        )

    def delete_topic(self, stream: IdLike, topic: IdLike) -> Step[None]:
        """DELETE_TOPIC."""
        self._forget_topics()
        yield from self._request(
            CommandCode.DELETE_TOPIC,
            TopicRef(to_identifier(stream), to_identifier(topic)),
            METADATA,
        )

    def purge_topic(self, stream: IdLike, topic: IdLike) -> Step[None]:
        """PURGE_TOPIC."""
        yield from self._request(
            CommandCode.PURGE_TOPIC,
            TopicRef(to_identifier(stream), to_identifier(topic)),
            METADATA,
        )

    # --- partitions ----------------------------------------------------------------------

    def create_partitions(self, stream: IdLike, topic: IdLike, count: int) -> Step[None]:
        """CREATE_PARTITIONS (appends ``count`` partitions)."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        self._partition_counts.pop((stream_id.value, topic_id.value), None)
        yield from self._request(
            CommandCode.CREATE_PARTITIONS, PartitionsChange(stream_id, topic_id, count), METADATA
        )

    def delete_partitions(self, stream: IdLike, topic: IdLike, count: int) -> Step[None]:
        """DELETE_PARTITIONS (removes the last ``count`` partitions)."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        self._partition_counts.pop((stream_id.value, topic_id.value), None)
        yield from self._request(
            CommandCode.DELETE_PARTITIONS, PartitionsChange(stream_id, topic_id, count), METADATA
        )

    def delete_segments(
        self, stream: IdLike, topic: IdLike, partition_id: int, segments_count: int
    ) -> Step[None]:
        """DELETE_SEGMENTS (503): retire the partition's oldest ``segments_count`` sealed
        segments (an empty reply)."""
        body = DeleteSegments(
            to_identifier(stream), to_identifier(topic), partition_id, segments_count
        )
        yield from self._request(CommandCode.DELETE_SEGMENTS, body, METADATA)

    def get_partitions(self, stream: IdLike, topic: IdLike) -> Step[list[PartitionInfo]]:
        """The topic's partitions (from GET_TOPIC)."""
        details = yield from self.get_topic(stream, topic)
        if details is None:
            raise _topic_not_found(to_identifier(topic))
        return list(details.partitions)

    def get_partition(
        self, stream: IdLike, topic: IdLike, partition_id: int
    ) -> Step[PartitionInfo | None]:
        """One partition (from GET_TOPIC), ``None`` when the topic has no such partition."""
        partitions = yield from self.get_partitions(stream, topic)
        return next((p for p in partitions if p.id == partition_id), None)

    def _remember_partitions(self, stream_id: Identifier, topic_id: Identifier, count: int) -> None:
        key = (stream_id.value, topic_id.value)
        self._partition_counts[key] = count
        self._partition_counts.move_to_end(key)
        while len(self._partition_counts) > TOPIC_CACHE_ENTRIES_MAX:
            evicted, _ = self._partition_counts.popitem(last=False)
            self._balanced_next.pop(evicted, None)

    def _forget_topics(self) -> None:
        self._partition_counts.clear()
        self._balanced_next.clear()
        self._assignments.clear()

    def partitions_count(self, stream: IdLike, topic: IdLike) -> Step[int]:
        """The topic's partition count, from the cache or a GET_TOPIC."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        count = self._partition_counts.get((stream_id.value, topic_id.value))
        if count is None:
            details = yield from self.get_topic(stream_id, topic_id)
            if details is None:
                raise _topic_not_found(topic_id)
            count = details.topic.partitions_count
        if count == 0:
            raise PartitionNotFound(IggyErrorCode.NO_PARTITIONS, "the topic has no partitions")
        return count

    def resolve_partition(
        self, stream: IdLike, topic: IdLike, partitioning: PartitioningLike
    ) -> Step[int]:
        """The partition a send goes to, resolved as the official SDK does: balanced is a
        per-topic round robin starting at 0, a messages key is ``xxh32(key) % count``."""
        chosen = to_partitioning(partitioning)
        if isinstance(chosen, PartitionId):
            return chosen.partition_id
        count = yield from self.partitions_count(stream, topic)
        if isinstance(chosen, MessagesKey):
            return chosen.partition(count)
        assert isinstance(chosen, Balanced)
        key = (to_identifier(stream).value, to_identifier(topic).value)
        partition = self._balanced_next.get(key, 0) % count
        self._balanced_next[key] = partition + 1
        return partition

    # --- messages ------------------------------------------------------------------------

    def send_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        messages: Iterable[MessageLike],
        partitioning: PartitioningLike = _BALANCED,
    ) -> Step[list[SendConfirmation]]:
        """SEND_MESSAGES to the resolved partition's primary, exactly once across retries.

        Messages without an id get a random 128-bit one and messages without an origin
        timestamp get the wall clock. If the reply of an applied send aged out of the
        server's client table (59) while the SDK retried, the send was applied once and
        the confirmations are empty.

        The batch is built from its columns (payloads, ids, timestamps, header blocks),
        read off the messages with one C-level pass each: a batch of plain ``bytes``
        payloads or of :class:`~sdk.types.Message` values costs no object per message.
        """
        values = messages if isinstance(messages, list | tuple) else list(messages)
        if not values:
            raise ValueError("send at least one message")
        kinds = set(map(type, values))
        payloads: Sequence[Buffer]
        ids: list[int] | None = None
        timestamps: list[int] | None = None
        user_headers: list[bytes] | None = None
        if kinds == {bytes}:
            payloads = values  # type: ignore[assignment]  # checked: all bytes
        else:
            if kinds != {Message}:
                values = [to_message(value) for value in values]
            batch: Sequence[Message] = values  # type: ignore[assignment]  # all Message now
            payloads = list(map(_PAYLOAD, batch))
            # The columns a batch usually leaves to the SDK (all 0) are not copied.
            if any(map(_ID, batch)):
                ids = list(map(_ID, batch))
            if any(map(_ORIGIN_TIMESTAMP, batch)):
                timestamps = list(map(_ORIGIN_TIMESTAMP, batch))
            if any(map(_HEADERS, batch)):
                user_headers = [message.encoded_headers() for message in batch]
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        partition = yield from self.resolve_partition(stream_id, topic_id, partitioning)
        now_us = self._wall_clock_us()
        spare, self._spare_frame = self._spare_frame, None
        buffer = build_send_messages_columns(
            stream_id,
            topic_id,
            PartitionId(partition),
            payloads,
            self._fill_ids(ids, len(payloads)),
            _fill_timestamps(timestamps, now_us),
            user_headers,
            headroom=HEADER_SIZE,
            reuse=spare,
        )
        return (yield from self._send_owned(stream_id, topic_id, partition, buffer))

    def send_payloads(
        self,
        stream: IdLike,
        topic: IdLike,
        payloads: Sequence[Buffer],
        partitioning: PartitioningLike = _BALANCED,
        *,
        ids: Sequence[int] | None = None,
        origin_timestamp: int = 0,
    ) -> Step[list[SendConfirmation]]:
        """SEND_MESSAGES of payloads handed over as buffers, exactly once across retries.

        The zero-copy path: each payload (``bytes``, ``bytearray``, ``memoryview`` or any
        contiguous buffer) is read once, into the request frame, and not kept; no
        message object is made. ``ids`` gives one id per payload (0: minted, as for a
        :class:`~sdk.types.Message` without one), ``None`` mints them all;
        ``origin_timestamp`` (µs, 0: the wall clock) is every message's.
        """
        count = len(payloads)
        if count == 0:
            raise ValueError("send at least one message")
        chosen_ids: list[int] | None = None
        if ids is not None:
            if len(ids) != count:
                raise ValueError(f"{len(ids)} ids for {count} payloads")
            if min(ids) < 0 or max(ids) >= 1 << 128:
                raise ValueError("message id must fit 128 bits")
            chosen_ids = list(ids)
        if origin_timestamp < 0:
            raise ValueError("origin_timestamp is µs since the epoch, not negative")
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        partition = yield from self.resolve_partition(stream_id, topic_id, partitioning)
        spare, self._spare_frame = self._spare_frame, None
        buffer = build_send_messages_columns(
            stream_id,
            topic_id,
            PartitionId(partition),
            payloads,
            self._fill_ids(chosen_ids, count),
            origin_timestamp or self._wall_clock_us(),
            headroom=HEADER_SIZE,
            reuse=spare,
        )
        return (yield from self._send_owned(stream_id, topic_id, partition, buffer))

    def _send_owned(
        self, stream_id: Identifier, topic_id: Identifier, partition: int, buffer: bytearray
    ) -> Step[list[SendConfirmation]]:
        """:meth:`send_prepared` of a frame only this core holds; once the send is over
        (every retry re-sent this same frame), it is the next send's spare."""
        try:
            return (yield from self.send_prepared(stream_id, topic_id, partition, buffer))
        finally:
            self._spare_frame = buffer

    def send_prepared(
        self, stream_id: Identifier, topic_id: Identifier, partition: int, buffer: bytearray
    ) -> Step[list[SendConfirmation]]:
        """Send a SEND_MESSAGES body built with 256 bytes of headroom (the producer builds
        its batches this way)."""
        route = PartitionGroup(stream_id.value, topic_id.value, partition)
        template = _InPlaceTemplate(Operation.SEND_MESSAGES, buffer)
        try:
            answer = yield from self._call(CommandCode.SEND_MESSAGES, template, route)
        except RequestAlreadyApplied as error:
            if error.after_retry:
                return []
            raise
        except PartitionNotFound:
            self._partition_counts.pop((stream_id.value, topic_id.value), None)
            raise
        if answer.payload is None:
            return []
        return list(_expect(answer.payload, SendMessagesReply).confirmations)

    def _fill_ids(self, ids: list[int] | None, count: int) -> list[int] | bytes:
        """``ids`` with every 0 replaced by a minted id; ``None``: ``count`` minted ids,
        packed as 16 little-endian bytes each (no int per message)."""
        missing = count if ids is None else ids.count(0)
        if missing == count:
            return self._message_id_bytes(count)
        assert ids is not None
        if missing:
            fresh = iter(self._message_ids(missing))
            ids = [message_id or next(fresh) for message_id in ids]
        return ids

    def _message_id_bytes(self, count: int) -> bytes:
        """The ids :meth:`_message_ids` would mint, packed as 16 little-endian bytes each
        (one draw; the per-id walk only when the draw holds a zero id)."""
        # randbytes: a seeded Random's is exactly getrandbits(8n).to_bytes(n, "little"),
        # the OS's (SystemRandom) is os.urandom, without an int in between.
        raw = self._rng.randbytes(16 * count)
        if _ZERO_ID in raw and any(
            raw[start : start + 16] == _ZERO_ID for start in range(0, len(raw), 16)
        ):
            return b"".join(
                message_id.to_bytes(16, "little") for message_id in self._ids_from_draw(raw)
            )
        return raw

    def _message_ids(self, count: int) -> list[int]:
        """``count`` random nonzero 128-bit message ids from one draw of the rng.

        One ``randbytes`` draw for the batch: with the default ``SystemRandom`` that is one
        ``os.urandom`` call instead of one per message. A seeded ``random.Random`` fills
        a wide draw from its 32-bit words in order, so the ids are those that one draw
        per message would give.
        """
        if count == 0:
            return []
        return self._ids_from_draw(self._rng.randbytes(16 * count))

    def _ids_from_draw(self, raw: bytes) -> list[int]:
        ids = [
            int.from_bytes(raw[start : start + 16], "little") for start in range(0, len(raw), 16)
        ]
        for index, message_id in enumerate(ids):
            while message_id == 0:  # 0 means "no id" on the wire
                message_id = self._rng.getrandbits(128)
            ids[index] = message_id
        return ids

    def poll_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        strategy: PollingStrategy,
        count: int,
        auto_commit: bool = False,
        partition_id: int | None = None,
    ) -> Step[PolledMessages]:
        """POLL_MESSAGES.

        A consumer-group poll without a partition uses this session's assignment
        (SYNC_CONSUMER_GROUP whenever it is empty or ``ASSIGNMENT_RESYNC_S`` old, as the
        official SDK syncs on each heartbeat; again when the server answers with the
        re-sync sentinel), its partitions in turn.
        """
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        if not (consumer.is_group and partition_id is None):
            return (
                yield from self._poll(
                    consumer, stream_id, topic_id, partition_id, strategy, count, auto_commit
                )
            )
        group_id = to_identifier(consumer.id)
        key = (stream_id.value, topic_id.value, group_id.value)
        partitions = self._assignments.get(key)
        synced_at = self._assignment_synced_at.get(key)
        if not partitions or synced_at is None or self._clock() - synced_at >= ASSIGNMENT_RESYNC_S:
            # Sync whenever the assignment holds nothing, and once it is a while old: a
            # rebalance can give this member partitions (a revocation completed) without
            # any poll of ours being refused, so a cached assignment would never grow.
            partitions = yield from self._sync_assignment(stream_id, topic_id, group_id)
        for _ in range(2):
            if not partitions:
                return PolledMessages(NO_PARTITION, 0, [])
            turn = self._assignment_next.get(key, 0)
            self._assignment_next[key] = turn + 1
            partition = partitions[turn % len(partitions)]
            polled = yield from self._poll(
                consumer, stream_id, topic_id, partition, strategy, count, auto_commit
            )
            if polled.partition_id != NO_PARTITION:
                return polled
            partitions = yield from self._sync_assignment(stream_id, topic_id, group_id)
        return PolledMessages(NO_PARTITION, 0, [])

    def _sync_assignment(
        self, stream_id: Identifier, topic_id: Identifier, group_id: Identifier
    ) -> Step[list[int]]:
        assignment = yield from self.sync_consumer_group(stream_id, topic_id, group_id)
        if assignment is None:
            raise ConsumerGroupMemberNotFound(detail=f"not a member of group {group_id}")
        key = (stream_id.value, topic_id.value, group_id.value)
        partitions = list(assignment.partitions)
        self._assignments[key] = partitions
        self._assignment_synced_at[key] = self._clock()
        self._assignments.move_to_end(key)
        while len(self._assignments) > ASSIGNMENT_CACHE_ENTRIES_MAX:
            evicted, _ = self._assignments.popitem(last=False)
            self._assignment_next.pop(evicted, None)
            self._assignment_synced_at.pop(evicted, None)
        return partitions

    def _poll(
        self,
        consumer: ConsumerRef,
        stream_id: Identifier,
        topic_id: Identifier,
        partition_id: int | None,
        strategy: PollingStrategy,
        count: int,
        auto_commit: bool,
    ) -> Step[PolledMessages]:
        route: RouteKey | None = None
        if partition_id is not None:
            route = PartitionGroup(stream_id.value, topic_id.value, partition_id)
        body = self._poll_body(
            consumer, stream_id, topic_id, partition_id, strategy, count, auto_commit
        )
        answer = yield from self._call(
            CommandCode.POLL_MESSAGES, _BodyTemplate(CommandCode.POLL_MESSAGES, body), route
        )
        return _polled(_expect(answer.payload, PollMessagesReply))

    def _poll_body(
        self,
        consumer: ConsumerRef,
        stream_id: Identifier,
        topic_id: Identifier,
        partition_id: int | None,
        strategy: PollingStrategy,
        count: int,
        auto_commit: bool,
    ) -> bytes:
        """``PollMessages(...).encode()``: what names the partition (consumer, stream,
        topic, partition) encoded once per target and kept (``POLL_PREFIXES_MAX`` of
        them), then the strategy, count and auto-commit packed in one call. A consumer
        polls the same partitions over and over."""
        key = (consumer, stream_id, topic_id, partition_id)
        prefix = self._poll_prefixes.get(key)
        if prefix is None:
            first = PollingStrategy.first()
            whole = PollMessages(
                consumer.wire(), stream_id, topic_id, partition_id, first, 1, False
            ).encode()
            prefix = whole[: len(whole) - _POLL_TAIL.size]
            self._poll_prefixes[key] = prefix
            while len(self._poll_prefixes) > POLL_PREFIXES_MAX:
                self._poll_prefixes.popitem(last=False)
        return prefix + _POLL_TAIL.pack(strategy.kind, strategy.value, count, int(auto_commit))

    def long_poll_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        strategy: PollingStrategy,
        count: int,
        partition_id: int,
        max_wait_s: float,
    ) -> Step[PolledMessages]:
        """viewstream's long poll (``LONG_POLL_CODE``): POLL_MESSAGES of one partition
        that, when it finds no message, waits on the node up to ``max_wait_s`` for one.

        Raises:
            InvalidCommand: the server does not know the code (an Iggy server): poll
                with ``poll_messages`` instead.
            FeatureUnavailable: the node holds as many waiting polls as it may; poll
                the ordinary way for now.
        """
        if not 0 <= max_wait_s <= LONG_POLL_WAIT_MS_MAX / 1000:
            raise ValueError(f"max_wait_s must be within 0..{LONG_POLL_WAIT_MS_MAX / 1000:g}")
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        poll = PollMessages(
            consumer.wire(), stream_id, topic_id, partition_id, strategy, count, False
        )
        body = LongPollMessages(round(max_wait_s * 1000), poll).encode()
        route = PartitionGroup(stream_id.value, topic_id.value, partition_id)
        answer = yield from self._call(
            LONG_POLL_CODE, _BodyTemplate(LONG_POLL_CODE, body), route, wait_s=max_wait_s
        )
        try:
            reply = PollMessagesReply.decode(answer.frame.body)
        except ProtocolError as error:
            raise InvalidFormat(detail=f"malformed long poll reply: {error.reason}") from None
        return _polled(reply)

    # --- consumer offsets ----------------------------------------------------------------

    def get_consumer_offset(
        self,
        consumer: ConsumerRef,
        stream: IdLike,
        topic: IdLike,
        partition_id: int | None = None,
    ) -> Step[ConsumerOffsetInfo | None]:
        """GET_CONSUMER_OFFSET (``None`` when no offset is stored)."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        payload = yield from self._request(
            CommandCode.GET_CONSUMER_OFFSET,
            GetConsumerOffset(consumer.wire(), stream_id, topic_id, partition_id),
            _partition_route(stream_id, topic_id, partition_id),
        )
        return None if payload is None else _expect(payload, ConsumerOffsetInfo)

    def store_consumer_offset(
        self,
        consumer: ConsumerRef,
        stream: IdLike,
        topic: IdLike,
        offset: int,
        partition_id: int | None = None,
        *,
        ack: AckLevel = AckLevel.QUORUM,
    ) -> Step[None]:
        """STORE_CONSUMER_OFFSET (a partition-plane write)."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        yield from self._request(
            CommandCode.STORE_CONSUMER_OFFSET,
            StoreConsumerOffset(consumer.wire(), stream_id, topic_id, partition_id, offset, ack),
            _partition_route(stream_id, topic_id, partition_id),
        )

    def delete_consumer_offset(
        self,
        consumer: ConsumerRef,
        stream: IdLike,
        topic: IdLike,
        partition_id: int | None = None,
        *,
        ack: AckLevel = AckLevel.QUORUM,
    ) -> Step[None]:
        """DELETE_CONSUMER_OFFSET (a partition-plane write)."""
        stream_id, topic_id = to_identifier(stream), to_identifier(topic)
        yield from self._request(
            CommandCode.DELETE_CONSUMER_OFFSET,
            DeleteConsumerOffset(consumer.wire(), stream_id, topic_id, partition_id, ack),
            _partition_route(stream_id, topic_id, partition_id),
        )

    # --- consumer groups -----------------------------------------------------------------

    def create_consumer_group(
        self, stream: IdLike, topic: IdLike, name: str
    ) -> Step[ConsumerGroupDetails]:
        """CREATE_CONSUMER_GROUP."""
        payload = yield from self._request(
            CommandCode.CREATE_CONSUMER_GROUP,
            CreateConsumerGroup(to_identifier(stream), to_identifier(topic), name),
            METADATA,
        )
        return _expect(payload, ConsumerGroupDetails)

    def get_consumer_group(
        self, stream: IdLike, topic: IdLike, group: IdLike
    ) -> Step[ConsumerGroupDetails | None]:
        """GET_CONSUMER_GROUP (``None`` when missing)."""
        payload = yield from self._request(
            CommandCode.GET_CONSUMER_GROUP, _group_ref(stream, topic, group), METADATA
        )
        return None if payload is None else _expect(payload, ConsumerGroupDetails)

    def get_consumer_groups(self, stream: IdLike, topic: IdLike) -> Step[list[ConsumerGroupInfo]]:
        """GET_CONSUMER_GROUPS."""
        payload = yield from self._request(
            CommandCode.GET_CONSUMER_GROUPS,
            TopicRef(to_identifier(stream), to_identifier(topic)),
            METADATA,
        )
        return list(_expect(payload, ConsumerGroups).groups)

    def delete_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> Step[None]:
        """DELETE_CONSUMER_GROUP."""
        self._forget_assignment(stream, topic, group)
        yield from self._request(
            CommandCode.DELETE_CONSUMER_GROUP, _group_ref(stream, topic, group), METADATA
        )

    def join_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> Step[None]:
        """JOIN_CONSUMER_GROUP (membership belongs to this session)."""
        self._forget_assignment(stream, topic, group)
        yield from self._request(
            CommandCode.JOIN_CONSUMER_GROUP, _group_ref(stream, topic, group), METADATA
        )

    def leave_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> Step[None]:
        """LEAVE_CONSUMER_GROUP."""
        self._forget_assignment(stream, topic, group)
        yield from self._request(
            CommandCode.LEAVE_CONSUMER_GROUP, _group_ref(stream, topic, group), METADATA
        )

    def sync_consumer_group(
        self, stream: IdLike, topic: IdLike, group: IdLike
    ) -> Step[ConsumerGroupAssignment | None]:
        """SYNC_CONSUMER_GROUP: this member's partitions and the group's generation
        (``None`` when this session is not a member)."""
        payload = yield from self._request(
            CommandCode.SYNC_CONSUMER_GROUP, _group_ref(stream, topic, group), METADATA
        )
        return None if payload is None else _expect(payload, ConsumerGroupAssignment)

    def _forget_assignment(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        key = (to_identifier(stream).value, to_identifier(topic).value, to_identifier(group).value)
        self._assignments.pop(key, None)


class _LoginRefused(Exception):
    """An empty Register reply (internal signal)."""


_PAYLOAD: Final = attrgetter("payload")
_ID: Final = attrgetter("id")
_ORIGIN_TIMESTAMP: Final = attrgetter("origin_timestamp")
_HEADERS: Final = attrgetter("headers")
_ZERO_ID: Final = bytes(16)


def _fill_timestamps(timestamps: list[int] | None, now_us: int) -> list[int] | int:
    """Origin timestamps with every 0 replaced by ``now_us`` (just ``now_us`` when all
    are 0, the common case: one value for the batch)."""
    if timestamps is None or not any(timestamps):
        return now_us
    return [timestamp or now_us for timestamp in timestamps]


def _polled(reply: PollMessagesReply) -> PolledMessages:
    """The messages of a poll reply, read lazily from its buffer."""
    return PolledMessages.of_reply(reply)


def frame_view(frame: Frame) -> int:
    """The ``view`` of a reply or eviction frame (both keep it at offset 52)."""
    view: int = int.from_bytes(frame.data[52:56], "little")
    return view


def _partition_route(
    stream_id: Identifier, topic_id: Identifier, partition_id: int | None
) -> RouteKey | None:
    if partition_id is None:
        return None
    return PartitionGroup(stream_id.value, topic_id.value, partition_id)


def _group_ref(stream: IdLike, topic: IdLike, group: IdLike) -> GroupRef:
    return GroupRef(to_identifier(stream), to_identifier(topic), to_identifier(group))


def _topic_not_found(topic_id: Identifier) -> TopicNotFound:
    code = (
        IggyErrorCode.TOPIC_ID_NOT_FOUND
        if isinstance(topic_id.value, int)
        else IggyErrorCode.TOPIC_NAME_NOT_FOUND
    )
    return TopicNotFound(code, f"topic {topic_id}")
