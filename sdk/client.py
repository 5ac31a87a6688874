"""The async client, on trio: a thin driver of the sans-IO core (``sdk._protocol``).

Purpose: run the core's steps over ``trio`` TCP streams. The driver owns one connection
per node it talks to, a lock that keeps the session lock-step, and the waits; every
decision (which node, whether to retry, what the reply means) is the core's.

Invariants:

1. At most one step runs at a time per client (a FIFO lock: ``_busy`` and the
   ``_waiting`` parking lot), so one request of this session is in flight at a time.
2. A connection that failed, timed out, produced a bad frame, or was interrupted by a
   cancellation is closed at once; the next exchange with that node dials again.
3. Every exchange ends by the core's attempt timeout: on a plain TCP connection the
   run's timekeeper (one system task per trio run) ends it at the deadline, on TLS a
   cancel scope does; every dial runs under the connect timeout, the TLS handshake
   included.
4. With ``tls`` set every connection is a trio ``SSLStream`` that verified the node's
   certificate and name (``sdk._tls``) before the first frame is sent.
"""

from __future__ import annotations

import math
import random
import socket
import ssl
import struct
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar, Unpack

import trio

from sdk._protocol import (
    ClientCore,
    ConnectFailed,
    ConnectionLost,
    Disconnect,
    Exchange,
    ExchangeTimedOut,
    Sleep,
    Step,
)
from sdk._tls import client_context, server_name
from sdk.connection_string import ClientConfig, NodeAddress, parse_connection_string
from sdk.errors import ClientClosed
from sdk.types import (
    CLOSE_TIMEOUT_S,
    RECEIVE_BYTES_MAX,
    ConsumerRef,
    ConsumerSettings,
    IdLike,
    MessageLike,
    PartitioningLike,
    PolledMessages,
    ProducerSettings,
    TopicSettings,
    string_options,
    topic_options,
)
from sdk.wire import (
    HEADER_SIZE,
    NEED_MORE_BYTES,
    Balanced,
    Buffer,
    ClientInfo,
    ClientInfoDetails,
    ClusterMetadata,
    ConsumerGroupAssignment,
    ConsumerGroupDetails,
    ConsumerGroupInfo,
    ConsumerOffsetInfo,
    Frame,
    FrameDecoder,
    LoginRegisterReply,
    OptionDescriptor,
    OptionsScope,
    PartitionInfo,
    Permissions,
    PersonalAccessTokenInfo,
    PollingStrategy,
    ProtocolError,
    SendConfirmation,
    Stats,
    StreamDetails,
    StreamInfo,
    TopicDetails,
    TopicInfo,
    UserDetails,
    UserInfo,
    UserStatus,
)
from sdk.wire.codes import Command
from sdk.wire.header import COMMAND_OFFSET, FRAME_SIZE_MAX, SIZE_OFFSET
from sdk.wire.tokens import EXPIRY_SERVER_DEFAULT

if TYPE_CHECKING:
    from sdk.consumer import AsyncConsumer
    from sdk.producer import AsyncProducer

__all__ = ["RECEIVE_BYTES_MAX", "AsyncClient", "TopicSettings"]

_T = TypeVar("_T")
_BALANCED: Final = Balanced()
_SIZE: Final = struct.Struct("<I")
assert RECEIVE_BYTES_MAX <= FRAME_SIZE_MAX  # a whole frame in one read is one of legal size
REPLY_HEAD_BYTES_MAX: Final = 16 * 1024
"""The first read for a reply: a small reply whole, the head of a larger one."""
assert HEADER_SIZE <= REPLY_HEAD_BYTES_MAX <= RECEIVE_BYTES_MAX


def _wall_clock_us() -> int:
    return time.time_ns() // 1000


def _dial_failure(error: BaseException) -> str:
    """Why a dial failed, naming a TLS failure's reason (trio wraps it)."""
    cause = error.__cause__
    if isinstance(cause, ssl.SSLError):
        return f"TLS handshake failed: {cause}"
    return str(error) or type(error).__name__


class _Timekeeper:
    """Ends the exchanges of one trio run's plain TCP connections at their deadlines.

    A cancel scope with a deadline around each exchange costs about as much trio work
    as the rest of a lock-step exchange (registering and retiring the deadline, its
    context managers): on a socketpair round trip, 59 µs of CPU with one against 31
    without. Instead, an exchange writes its deadline on its connection and this
    system task sleeps until the earliest one; when it passes, the connection is
    marked expired and ``notify_closing`` wakes the parked exchange, which reports a
    timeout and drops the connection (invariant 2). While exchanges run the task wakes
    about once per attempt timeout; while none runs it is parked.

    Invariants: a connection's ``deadline`` is finite only during an exchange; the task
    sleeps until at most the earliest finite deadline (``watch`` shortens its sleep or
    unparks it); it expires only connections that are not closed.
    """

    def __init__(self) -> None:
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._wake_at = math.inf
        """When the task wakes next (inf: parked until an exchange starts)."""
        self._sleep: trio.CancelScope | None = None
        self._idle = trio.lowlevel.ParkingLot()

    @staticmethod
    def current() -> _Timekeeper:
        """This trio run's timekeeper (started on first use)."""
        try:
            return _TIMEKEEPER.get()
        except LookupError:
            keeper = _Timekeeper()
            _TIMEKEEPER.set(keeper)
            trio.lowlevel.spawn_system_task(keeper._run, name="sdk exchange timekeeper")
            return keeper

    def watch(self, connection: _Connection, deadline: float) -> None:
        """An exchange on ``connection`` starts and must end by ``deadline``."""
        if connection.keeper is not self:
            # First exchange in this run (a client may outlive a trio run): held weakly.
            self._connections.add(connection)
            connection.keeper = self
        connection.deadline = deadline
        if deadline < self._wake_at:
            self._wake_at = deadline
            if self._sleep is not None:
                self._sleep.deadline = deadline
            else:
                self._idle.unpark_all()

    async def _run(self) -> None:
        while True:
            now = trio.current_time()
            earliest = math.inf
            for connection in list(self._connections):
                deadline = connection.deadline
                if deadline <= now:
                    connection.expire()
                elif deadline < earliest:
                    earliest = deadline
            self._wake_at = earliest
            if earliest == math.inf:
                await self._idle.park()
                continue
            with trio.CancelScope(deadline=earliest) as sleep:
                self._sleep = sleep
                try:
                    await trio.sleep_forever()
                finally:
                    self._sleep = None


_TIMEKEEPER: Final[trio.lowlevel.RunVar[_Timekeeper]] = trio.lowlevel.RunVar("sdk_timekeeper")


class _Connection:
    """One connection to one node and the decoder of what it sends.

    A plain TCP connection is a non-blocking stdlib socket that :meth:`exchange` writes
    and reads itself, parking in trio (``wait_writable``, ``wait_readable``) only when
    the socket would block: a lock-step request costs one ``send``, one wait for the
    reply and one ``recv``, without the stream layers' extra checkpoints; the run's
    :class:`_Timekeeper` keeps its deadline. A TLS connection goes through trio's
    ``SSLStream``, under a cancel scope.
    """

    __slots__ = (
        "__weakref__",
        "closed",
        "deadline",
        "decoder",
        "expired",
        "keeper",
        "sock",
        "stream",
        "transport",
        "used_at",
    )

    def __init__(self, transport: trio.SocketStream, stream: trio.abc.Stream | None = None) -> None:
        self.transport = transport
        self.stream = stream
        """The TLS stream; ``None`` on plain TCP, where ``sock`` is used instead."""
        self.sock: socket.socket | None = None
        if stream is None:
            # Take the descriptor over from trio's socket: this connection reads and
            # writes it directly (and closes it, in abort).
            self.sock = socket.socket(fileno=transport.socket.detach())
            self.sock.setblocking(False)
        self.decoder = FrameDecoder()
        self.used_at = trio.current_time()
        """When a frame last went out on it (the heartbeat pings it after a silence)."""
        self.deadline = math.inf
        """When the exchange in progress times out (inf: none in progress)."""
        self.expired = False
        """The timekeeper ended an exchange on it: it is dropped, never used again."""
        self.closed = False
        self.keeper: _Timekeeper | None = None
        """The timekeeper that watches it (the run's, once it had an exchange)."""

    async def exchange(self, frame: bytes | bytearray, address: NodeAddress) -> Frame:
        """Write ``frame`` and read one frame back.

        A cancel point and a schedule point: it parks at least once (waiting for the
        reply), or yields once when the reply was already decoded.
        """
        sock = self.sock
        if sock is None:
            assert self.stream is not None
            await self.stream.send_all(frame)
            return await self._receive_stream(address)
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = sock.send(frame)
        except BlockingIOError:
            sent = 0
        if sent < len(frame):
            await _send_rest(sock, frame, sent)
        decoder = self.decoder
        reply = decoder.next_frame()
        if reply is not NEED_MORE_BYTES:  # it came with the bytes of an earlier one
            await trio.lowlevel.cancel_shielded_checkpoint()
            return reply
        # Right after a request went out its reply is not here yet: wait before the
        # first read (a read first would only fail); later pieces are read first.
        await trio.lowlevel.wait_readable(sock)
        # The first read takes a reply's head only: a small reply whole, a large one (a
        # poll's batches) up to where its size is known, so its rest can be read into its
        # own buffer (``_receive_rest``) rather than in pieces joined afterwards.
        limit = REPLY_HEAD_BYTES_MAX
        while True:
            try:
                data = sock.recv(limit)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            if not data:
                raise ConnectionLost(address, "closed by the node")
            received = len(data)
            if (
                received >= HEADER_SIZE
                and data[COMMAND_OFFSET] == Command.REPLY
                and decoder.pending_bytes == 0
            ):
                size = _SIZE.unpack_from(data, SIZE_OFFSET)[0]
                if size == received:
                    # Exactly one whole reply between frames (a lock-step reply), of a
                    # size the decoder accepts: it is its own buffer, with no decoder
                    # state to go through.
                    return Frame(memoryview(data), Command.REPLY)
                if received < size <= FRAME_SIZE_MAX:
                    return await self._receive_rest(data, size, address)
            # Anything else takes the decoder, which judges sizes and commands.
            limit = RECEIVE_BYTES_MAX
            decoder.feed(data)
            reply = decoder.next_frame()
            if reply is not NEED_MORE_BYTES:
                return reply

    async def _receive_rest(self, head: bytes, size: int, address: NodeAddress) -> Frame:
        """The reply of ``size`` bytes that starts with ``head``: read straight into one
        buffer of its size (its bytes copied once, from the socket), to its end and no
        further (what follows stays in the socket)."""
        sock = self.sock
        assert sock is not None
        buffer = bytearray(size)
        filled = len(head)
        buffer[:filled] = head
        view = memoryview(buffer)
        while filled < size:
            try:
                taken = sock.recv_into(view[filled:])
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            if not taken:
                raise ConnectionLost(address, "closed by the node")
            filled += taken
        return Frame(view, Command.REPLY)

    async def _receive_stream(self, address: NodeAddress) -> Frame:
        assert self.stream is not None
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_MORE_BYTES:
                return frame
            data = await self.stream.receive_some(RECEIVE_BYTES_MAX)
            if not data:
                raise ConnectionLost(address, "closed by the node")
            self.decoder.feed(data)

    def expire(self) -> None:
        """The exchange in progress passed its deadline: close the connection, waking
        the exchange (its wait raises ``ClosedResourceError``, a later socket call
        ``OSError``), which reports the timeout and drops it."""
        self.deadline = math.inf
        if self.closed:
            return
        self.expired = True
        self.abort()

    def abort(self) -> None:
        # Synchronous on purpose: it also runs when the task is being cancelled.
        self.deadline = math.inf
        if self.closed:
            return
        self.closed = True
        if self.sock is not None:
            # Wake any task parked on it (with ClosedResourceError) before the
            # descriptor goes.
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()
        else:
            self.transport.socket.close()


async def _send_rest(sock: socket.socket, frame: bytes | bytearray, sent: int) -> None:
    """Write ``frame[sent:]``, waiting for room whenever the socket is full."""
    with memoryview(frame) as view:
        while sent < len(view):
            await trio.lowlevel.wait_writable(sock)
            with suppress(BlockingIOError):
                sent += sock.send(view[sent:])


class AsyncClient:
    """A trio client of a viewstream (Apache Iggy 0.9) cluster.

    Calls log in on their own when the configuration has credentials, go to the primary
    of the group they write to, and retry transient failures (timeouts, dropped
    connections, node failover, ``TransientNotAccepted``) until the retry deadline,
    re-sending a write under the same request number so the cluster applies it at most
    once. Failures raise :class:`~sdk.errors.IggyError` subclasses.

    Args:
        config: Settings (``ClientConfig()`` dials ``127.0.0.1:8090`` without credentials).
        rng: Randomness for ids and jitter (default: the OS's).

    Example::

        async with AsyncClient.from_connection_string("iggy://iggy:iggy@127.0.0.1:8090") as c:
            await c.ping()
    """

    def __init__(self, config: ClientConfig | None = None, *, rng: random.Random | None = None):
        """Raises:
        InvalidTlsCertificate: ``tls_ca_file`` is missing or unusable."""
        self._rng = rng if rng is not None else random.SystemRandom()
        config = config or ClientConfig()
        self._tls = client_context(config)
        self._core = ClientCore(
            config,
            rng=self._rng,
            clock=trio.current_time,
            wall_clock_us=_wall_clock_us,
        )
        self._connections: dict[NodeAddress, _Connection] = {}
        self._busy = False
        """Whether a step runs (invariant 1); the lock's uncontended half."""
        self._waiting = trio.lowlevel.ParkingLot()
        """Calls waiting for the running step, in arrival order (the lock's other half)."""
        self._closed = False
        self._heartbeat: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._heartbeat_scope: trio.CancelScope | None = None

    @classmethod
    def from_connection_string(cls, connection_string: str, **settings: object) -> AsyncClient:
        """A client for ``iggy://user:password@host:port[?options]``.

        Args:
            connection_string: See :func:`sdk.connection_string.parse_connection_string`.
            **settings: :class:`ClientConfig` fields to override.
        """
        config = parse_connection_string(connection_string)
        return cls(config.replace(**settings) if settings else config)

    @property
    def config(self) -> ClientConfig:
        """The client's settings."""
        return self._core.config

    @property
    def client_id(self) -> int:
        """The 128-bit client id (0 until the first request)."""
        return self._core.session.client_id

    @property
    def session(self) -> int:
        """The session number (0 when not logged in)."""
        return self._core.session.session

    def new_session(self) -> AsyncClient:
        """Another client with the same settings, credentials and known roster, and its
        own session and connections (a session is lock-step, so concurrency needs more
        than one)."""
        other = AsyncClient(self._core.config, rng=self._rng)
        other._core = self._core.fork(self._rng)
        other._tls = self._tls
        return other

    # --- the driver --------------------------------------------------------------------

    async def _run(self, step: Step[_T]) -> _T:
        # A FIFO lock in two halves: a free session is taken with a flag and no
        # checkpoint (the exchange checkpoints); a busy one is waited for in a parking
        # lot, and the release hands it straight to the first waiter. trio.Lock does the
        # same with a checkpoint on every acquire and more work on every release.
        if self._busy or self._waiting:
            try:
                await self._waiting.park()
            except BaseException:
                step.close()
                raise
        else:
            self._busy = True
        try:
            if self._closed:
                step.close()
                raise ClientClosed
            return await self._drive(step)
        finally:
            if self._waiting:
                self._waiting.unpark()  # ownership passes: _busy stays True
            else:
                self._busy = False

    async def _drive(self, step: Step[_T]) -> _T:
        reply: Frame | None = None
        failure: Exception | None = None
        try:
            while True:
                try:
                    action = step.send(reply) if failure is None else step.throw(failure)
                except StopIteration as stop:
                    result: _T = stop.value
                    return result
                reply, failure = None, None
                if isinstance(action, Exchange):
                    try:
                        reply = await self._exchange(action)
                    except (ConnectFailed, ConnectionLost, ExchangeTimedOut) as error:
                        failure = error
                elif isinstance(action, Sleep):
                    await trio.sleep(action.seconds)
                else:
                    assert isinstance(action, Disconnect)
                    self._drop(action.address)
        finally:
            step.close()

    async def _exchange(self, action: Exchange) -> Frame:
        address = action.address
        connection: _Connection | None = None
        timeout = f"no reply within {action.timeout_s:.3f}s"
        try:
            now = trio.current_time()
            deadline = now + action.timeout_s
            connection = self._connections.get(address)
            if connection is None:
                # Bounded by the connect timeout, itself at most the attempt's.
                connection = await self._dial(address, action.connect_timeout_s)
                now = trio.current_time()
            connection.used_at = now
            if connection.sock is not None:
                return await self._exchange_plain(connection, action, deadline)
            with trio.CancelScope(deadline=deadline):
                return await connection.exchange(action.frame, address)
        except ConnectFailed:
            raise
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._drop(address)
            if connection is not None and connection.expired:
                raise ExchangeTimedOut(address, timeout) from None
            raise ConnectionLost(address, str(error) or type(error).__name__) from None
        except ProtocolError as error:
            self._drop(address)
            raise ConnectionLost(address, f"undecodable bytes: {error.reason}") from None
        except ConnectionLost:
            self._drop(address)
            raise
        except BaseException:
            # Cancelled mid-exchange: the reply may still arrive on this stream.
            self._drop(address)
            raise
        # Only reached when the TLS exchange's deadline cancelled it.
        self._drop(address)
        raise ExchangeTimedOut(address, timeout)

    async def _exchange_plain(
        self, connection: _Connection, action: Exchange, deadline: float
    ) -> Frame:
        """The exchange on a plain TCP connection, its deadline kept by the timekeeper
        (an expired one raises ``ClosedResourceError`` from its wait)."""
        _Timekeeper.current().watch(connection, deadline)
        try:
            reply = await connection.exchange(action.frame, action.address)
        finally:
            connection.deadline = math.inf
        if connection.expired:
            # The reply was in before the deadline but the task ran after it: the
            # timekeeper already gave the socket up, so it goes now.
            self._drop(action.address)
        return reply

    async def _dial(self, address: NodeAddress, timeout_s: float) -> _Connection:
        socket_stream: trio.SocketStream | None = None
        try:
            with trio.fail_after(timeout_s):
                socket_stream = await trio.open_tcp_stream(address.host, address.port)
                socket_stream.setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY, int(self.config.nodelay)
                )
                stream: trio.abc.Stream = socket_stream
                if self._tls is not None:
                    tls = trio.SSLStream(
                        socket_stream,
                        self._tls,
                        server_hostname=server_name(self.config, address),
                        https_compatible=False,
                    )
                    await tls.do_handshake()
                    stream = tls
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as error:
            if socket_stream is not None:
                socket_stream.socket.close()
            raise ConnectFailed(address, _dial_failure(error)) from None
        except BaseException:
            if socket_stream is not None:
                socket_stream.socket.close()
            raise
        connection = _Connection(socket_stream, stream if self._tls is not None else None)
        self._connections[address] = connection
        return connection

    def _drop(self, address: NodeAddress) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.abort()

    # --- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        """Reach a node (ping it) and, if the settings hold credentials, log in."""
        await self._run(self._core.ping())
        if self._core.has_credentials and not self._core.session.logged_in:
            credentials = self._core.credentials
            assert credentials is not None
            await self._run(self._core.login_with(credentials))

    async def close(self) -> None:
        """Log out (best effort, bounded) and close every connection. Idempotent."""
        if self._closed:
            return
        with trio.CancelScope(shield=True):
            if self._core.session.logged_in:
                with trio.move_on_after(min(CLOSE_TIMEOUT_S, self.config.request_timeout_s)):
                    with suppress(Exception):
                        await self._run(self._core.logout())
            self._closed = True
            for address in list(self._connections):
                self._drop(address)

    async def __aenter__(self) -> AsyncClient:
        await self.connect()
        if self.config.heartbeat_interval_s > 0:
            self._heartbeat = trio.open_nursery()
            nursery = await self._heartbeat.__aenter__()
            self._heartbeat_scope = nursery.cancel_scope
            nursery.start_soon(self._heartbeats)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._heartbeat_scope is not None:
            self._heartbeat_scope.cancel()
        await self.close()
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            await heartbeat.__aexit__(exc_type, exc, traceback)

    async def _heartbeats(self) -> None:
        """Ping every node whose connection carried nothing for a heartbeat interval,
        until the client closes (the official SDKs' heartbeat). A failed ping only drops
        that connection; the next call dials again."""
        interval = self.config.heartbeat_interval_s
        while not self._closed:
            await trio.sleep(interval / 2)
            now = trio.current_time()
            for address, connection in list(self._connections.items()):
                if self._closed or now - connection.used_at < interval:
                    continue
                with suppress(Exception):
                    await self._run(self._core.heartbeat(address))

    # --- session and system ------------------------------------------------------------

    async def login_user(self, username: str, password: str) -> LoginRegisterReply:
        """Log in: register a session for this client id, then learn the roster.

        Returns:
            The server's answer (user id, session, server version).

        Raises:
            InvalidCredentials: wrong username or password.
            IncompatibleProtocol: the server does not speak protocol 0.11.
        """
        return await self._run(self._core.login(username, password))

    async def login_with_personal_access_token(self, token: str) -> LoginRegisterReply:
        """Log in with a personal access token (LOGIN_REGISTER_WITH_PAT, 45) instead of a
        username and password; the session is the token owner's, with that user's
        permissions, and the client logs in with the token again where it needs to.

        Raises:
            InvalidCredentials: the node knows no such token (deleted, expired, made up).
        """
        return await self._run(self._core.login_with_personal_access_token(token))

    async def logout_user(self) -> None:
        """Log out; the client id, request counter and credentials are forgotten."""
        await self._run(self._core.logout())

    async def ping(self) -> None:
        """Round trip to a node (works before login)."""
        await self._run(self._core.ping())

    async def get_me(self) -> ClientInfoDetails:
        """This connection's client as the node sees it."""
        return await self._run(self._core.get_me())

    async def get_clients(self) -> list[ClientInfo]:
        """The answering node's connections, as Iggy reports them (``read_servers``)."""
        return await self._run(self._core.get_clients())

    async def get_client(self, client_id: int) -> ClientInfoDetails | None:
        """One connection of the answering node, by the client id GET_ME reports, with its
        consumer groups; ``None`` when none has it."""
        return await self._run(self._core.get_client(client_id))

    async def describe_options(
        self, scope: OptionsScope = OptionsScope.TOPIC
    ) -> list[OptionDescriptor]:
        """The option keys ``scope`` accepts on create, with the kind, default and meaning
        of each (streams and users take none)."""
        return await self._run(self._core.describe_options(scope))

    async def get_cluster_metadata(self) -> ClusterMetadata:
        """The cluster's roster and metadata leader (the client adopts it)."""
        return await self._run(self._core.get_cluster_metadata())

    async def get_stats(self) -> Stats:
        """Server statistics."""
        return await self._run(self._core.get_stats())

    async def get_runtime_stats(self) -> dict[str, Any]:
        """viewstream's own counters of the node that answers (command code 9000).

        The report has a ``"node"`` section (connections, disk, syncs) and a ``"groups"``
        section with each group's consensus counters, as ``viewstream stats --json``
        prints them (meanings in ``docs/operations.md``). Any node of the roster may
        answer; to read one node's, pin a client to it (``seeds=(address,)``,
        ``cluster_discovery=False``). Needs the ``read_servers`` permission.

        Returns:
            The report, decoded from JSON.

        Raises:
            IggyError: the node refused (a server that is not viewstream answers an
                unknown code with ``InvalidCommand``), or the call failed.
        """
        return await self._run(self._core.get_runtime_stats())

    # --- users ----------------------------------------------------------------------------

    async def get_user(self, user: IdLike) -> UserDetails | None:
        """A user with its permissions, by id or username, or ``None``."""
        return await self._run(self._core.get_user(user))

    async def get_users(self) -> list[UserInfo]:
        """Every user."""
        return await self._run(self._core.get_users())

    async def create_user(
        self,
        username: str,
        password: str,
        *,
        status: UserStatus = UserStatus.ACTIVE,
        permissions: Permissions | None = None,
    ) -> UserDetails:
        """Create a user (no permissions unless given)."""
        return await self._run(self._core.create_user(username, password, status, permissions))

    async def delete_user(self, user: IdLike) -> None:
        """Delete a user; its sessions and personal access tokens end with it."""
        await self._run(self._core.delete_user(user))

    async def update_user(
        self, user: IdLike, *, username: str | None = None, status: UserStatus | None = None
    ) -> None:
        """Rename a user and/or change its status (``None``: unchanged)."""
        await self._run(self._core.update_user(user, username, status))

    async def update_permissions(self, user: IdLike, permissions: Permissions | None) -> None:
        """Replace a user's permissions (``None`` removes them all)."""
        await self._run(self._core.update_permissions(user, permissions))

    async def change_password(self, user: IdLike, current_password: str, new_password: str) -> None:
        """Change a user's password."""
        await self._run(self._core.change_password(user, current_password, new_password))

    # --- personal access tokens -------------------------------------------------------------

    async def create_personal_access_token(
        self, name: str, *, expiry_s: float | None = None
    ) -> str:
        """Create a token of the logged-in user's; the raw token is returned once and only
        its hash is kept. ``expiry_s``: seconds from now (``None``: the server's default,
        which is never, as Iggy's)."""
        expiry_us = EXPIRY_SERVER_DEFAULT if expiry_s is None else max(1, round(expiry_s * 1e6))
        return await self._run(self._core.create_personal_access_token(name, expiry_us))

    async def get_personal_access_tokens(self) -> list[PersonalAccessTokenInfo]:
        """The logged-in user's tokens: names and expiries (µs since the epoch, 0 never)."""
        return await self._run(self._core.get_personal_access_tokens())

    async def delete_personal_access_token(self, name: str) -> None:
        """Delete one of the logged-in user's tokens by name."""
        await self._run(self._core.delete_personal_access_token(name))

    # --- streams -------------------------------------------------------------------------

    async def create_stream(
        self, name: str, *, options: Mapping[str, str] | None = None
    ) -> StreamDetails:
        """Create a stream.

        Raises:
            StreamAlreadyExists: the name is taken.
        """
        return await self._run(self._core.create_stream(name, string_options(options)))

    async def get_stream(self, stream: IdLike) -> StreamDetails | None:
        """A stream with its topics, or ``None``."""
        return await self._run(self._core.get_stream(stream))

    async def get_streams(self) -> list[StreamInfo]:
        """Every stream."""
        return await self._run(self._core.get_streams())

    async def update_stream(
        self, stream: IdLike, name: str, *, options: Mapping[str, str] | None = None
    ) -> None:
        """Rename a stream and patch its options."""
        await self._run(self._core.update_stream(stream, name, string_options(options)))

    async def delete_stream(self, stream: IdLike) -> None:
        """Delete a stream and everything in it."""
        await self._run(self._core.delete_stream(stream))

    async def purge_stream(self, stream: IdLike) -> None:
        """Delete every message of a stream's topics."""
        await self._run(self._core.purge_stream(stream))

    # --- topics ----------------------------------------------------------------------------

    async def create_topic(
        self,
        stream: IdLike,
        name: str,
        partitions_count: int = 1,
        **settings: Unpack[TopicSettings],
    ) -> TopicDetails:
        """Create a topic with ``partitions_count`` partitions.

        Args:
            stream: The stream.
            name: The topic's name.
            partitions_count: Partitions to create (1..1000).
            **settings: See :class:`TopicSettings`.

        Raises:
            TopicAlreadyExists: the name is taken in this stream.
        """
        options = topic_options(create=True, **settings)
        return await self._run(self._core.create_topic(stream, name, partitions_count, options))

    async def get_topic(self, stream: IdLike, topic: IdLike) -> TopicDetails | None:
        """A topic with its partitions, or ``None``."""
        return await self._run(self._core.get_topic(stream, topic))

    async def get_topics(self, stream: IdLike) -> list[TopicInfo]:
        """Every topic of a stream."""
        return await self._run(self._core.get_topics(stream))

    async def update_topic(
        self, stream: IdLike, topic: IdLike, name: str, **settings: Unpack[TopicSettings]
    ) -> None:
        """Rename a topic and patch the settings given (see :class:`TopicSettings`)."""
        options = topic_options(create=False, **settings)
        await self._run(self._core.update_topic(stream, topic, name, options))

    async def delete_topic(self, stream: IdLike, topic: IdLike) -> None:
        """Delete a topic."""
        await self._run(self._core.delete_topic(stream, topic))

    async def purge_topic(self, stream: IdLike, topic: IdLike) -> None:
        """Delete every message of a topic."""
        await self._run(self._core.purge_topic(stream, topic))

    # --- partitions --------------------------------------------------------------------------

    async def create_partitions(self, stream: IdLike, topic: IdLike, partitions_count: int) -> None:
        """Add ``partitions_count`` partitions to a topic."""
        await self._run(self._core.create_partitions(stream, topic, partitions_count))

    async def delete_partitions(self, stream: IdLike, topic: IdLike, partitions_count: int) -> None:
        """Remove the last ``partitions_count`` partitions of a topic."""
        await self._run(self._core.delete_partitions(stream, topic, partitions_count))

    async def delete_segments(
        self, stream: IdLike, topic: IdLike, partition_id: int, segments_count: int
    ) -> None:
        """Delete the oldest sealed segments of a partition (DELETE_SEGMENTS, 503).

        The partition's polls start after them once this returns (the open segment never
        goes; fewer sealed segments than asked for are all deleted, none is no error);
        each node deletes their files once its checkpoint passes them.

        Raises:
            IggyError: the node's refusal: no such stream, topic or partition, or no
                ``manage_topic`` permission.
        """
        await self._run(self._core.delete_segments(stream, topic, partition_id, segments_count))

    async def get_partitions(self, stream: IdLike, topic: IdLike) -> list[PartitionInfo]:
        """A topic's partitions.

        Raises:
            TopicNotFound: no such topic.
        """
        return await self._run(self._core.get_partitions(stream, topic))

    async def get_partition(
        self, stream: IdLike, topic: IdLike, partition_id: int
    ) -> PartitionInfo | None:
        """One partition of a topic, or ``None``."""
        return await self._run(self._core.get_partition(stream, topic, partition_id))

    # --- messages ----------------------------------------------------------------------------

    async def send_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        messages: Iterable[MessageLike],
        partitioning: PartitioningLike = _BALANCED,
    ) -> list[SendConfirmation]:
        """Append messages to one partition, exactly once across the SDK's retries.

        Args:
            stream: The stream.
            topic: The topic.
            messages: :class:`~sdk.types.Message` values, or payloads.
            partitioning: ``Partitioning.balanced()`` (client-side round robin),
                ``Partitioning.partition_id(n)`` (or just ``n``), or
                ``Partitioning.messages_key(k)`` (``xxh32(k) % partitions``).

        Returns:
            Where the batch landed (empty if the reply was lost but the send applied).

        Raises:
            RequestTimeout: the retry deadline passed; ``outcome_unknown`` says whether
                the batch may have been applied.
        """
        return await self._run(self._core.send_messages(stream, topic, messages, partitioning))

    async def send_payloads(
        self,
        stream: IdLike,
        topic: IdLike,
        payloads: Sequence[Buffer],
        partitioning: PartitioningLike = _BALANCED,
        *,
        ids: Sequence[int] | None = None,
        origin_timestamp: int = 0,
    ) -> list[SendConfirmation]:
        """Append payloads handed over as buffers: the zero-copy send.

        No message object is made and no payload is copied before the request frame:
        each payload is read once, into the frame, during the call, and not kept after
        it. Retries re-send that frame, exactly once as :meth:`send_messages`.

        Args:
            stream: The stream.
            topic: The topic.
            payloads: ``bytes``, ``bytearray``, ``memoryview`` or any contiguous buffer;
                do not change them until the call returns.
            partitioning: As for :meth:`send_messages`.
            ids: One 128-bit id per payload (0: a random one); ``None``: all random.
            origin_timestamp: Every message's origin timestamp in µs (0: now).

        Returns:
            Where the batch landed (empty if the reply was lost but the send applied).

        Raises:
            ValueError: no payloads, ``ids`` of another length or out of range, or a
                payload above ``MAX_PAYLOAD_BYTES``.
        """
        return await self._run(
            self._core.send_payloads(
                stream, topic, payloads, partitioning, ids=ids, origin_timestamp=origin_timestamp
            )
        )

    async def poll_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        polling_strategy: PollingStrategy,
        count: int,
        auto_commit: bool = False,
        partition_id: int | None = None,
    ) -> PolledMessages:
        """Read messages.

        Args:
            stream: The stream.
            topic: The topic.
            consumer: ``ConsumerRef.single(id)`` or ``ConsumerRef.group(id)``.
            polling_strategy: ``PollingStrategy.offset(n)``, ``.timestamp(us)``,
                ``.first()``, ``.last()`` or ``.next()``.
            count: Most messages to return.
            auto_commit: Let the server store the offset of the last message returned.
            partition_id: The partition; for a group member, ``None`` polls its assigned
                partitions in turn.
        """
        return await self._run(
            self._core.poll_messages(
                stream,
                topic,
                consumer=consumer,
                strategy=polling_strategy,
                count=count,
                auto_commit=auto_commit,
                partition_id=partition_id,
            )
        )

    async def long_poll_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        polling_strategy: PollingStrategy,
        count: int,
        partition_id: int,
        max_wait_s: float,
    ) -> PolledMessages:
        """Read messages of one partition; when there are none, wait on the node up to
        ``max_wait_s`` (at most 30 s) for one (viewstream's long poll,
        ``docs/protocol.md`` 5.13a).

        Raises:
            InvalidCommand: the server does not know long polls (an Iggy server).
            FeatureUnavailable: the node holds as many waiting long polls as it may.
        """
        return await self._run(
            self._core.long_poll_messages(
                stream,
                topic,
                consumer=consumer,
                strategy=polling_strategy,
                count=count,
                partition_id=partition_id,
                max_wait_s=max_wait_s,
            )
        )

    # --- consumer offsets --------------------------------------------------------------------

    async def get_consumer_offset(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        partition_id: int | None = None,
    ) -> ConsumerOffsetInfo | None:
        """The stored offset of a consumer on a partition, or ``None``."""
        return await self._run(
            self._core.get_consumer_offset(consumer, stream, topic, partition_id)
        )

    async def store_consumer_offset(
        self,
        stream: IdLike,
        topic: IdLike,
        offset: int,
        *,
        consumer: ConsumerRef,
        partition_id: int | None = None,
    ) -> None:
        """Store a consumer's offset (the last offset it consumed) on a partition."""
        await self._run(
            self._core.store_consumer_offset(consumer, stream, topic, offset, partition_id)
        )

    async def delete_consumer_offset(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        partition_id: int | None = None,
    ) -> None:
        """Delete a consumer's stored offset on a partition."""
        await self._run(self._core.delete_consumer_offset(consumer, stream, topic, partition_id))

    # --- consumer groups ---------------------------------------------------------------------

    async def create_consumer_group(
        self, stream: IdLike, topic: IdLike, name: str
    ) -> ConsumerGroupDetails:
        """Create a consumer group on a topic.

        Raises:
            ConsumerGroupAlreadyExists: the name is taken on this topic.
        """
        return await self._run(self._core.create_consumer_group(stream, topic, name))

    async def get_consumer_group(
        self, stream: IdLike, topic: IdLike, group: IdLike
    ) -> ConsumerGroupDetails | None:
        """A consumer group with its members, or ``None``."""
        return await self._run(self._core.get_consumer_group(stream, topic, group))

    async def get_consumer_groups(self, stream: IdLike, topic: IdLike) -> list[ConsumerGroupInfo]:
        """Every consumer group of a topic."""
        return await self._run(self._core.get_consumer_groups(stream, topic))

    async def delete_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        """Delete a consumer group."""
        await self._run(self._core.delete_consumer_group(stream, topic, group))

    async def join_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        """Make this session a member of the group (membership ends at logout)."""
        await self._run(self._core.join_consumer_group(stream, topic, group))

    async def leave_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        """Stop being a member of the group."""
        await self._run(self._core.leave_consumer_group(stream, topic, group))

    async def sync_consumer_group(
        self, stream: IdLike, topic: IdLike, group: IdLike
    ) -> ConsumerGroupAssignment | None:
        """This member's partitions and the group generation (``None``: not a member)."""
        return await self._run(self._core.sync_consumer_group(stream, topic, group))

    # --- high-level ----------------------------------------------------------------------------

    def producer(
        self, stream: IdLike, topic: IdLike, **settings: Unpack[ProducerSettings]
    ) -> AbstractAsyncContextManager[AsyncProducer]:
        """A batching producer (``async with client.producer(...) as producer:``).

        See :class:`sdk.types.ProducerSettings` for the settings.
        """
        from sdk.producer import open_async_producer

        return open_async_producer(self, stream, topic, **settings)

    def consumer(
        self, stream: IdLike, topic: IdLike, **settings: Unpack[ConsumerSettings]
    ) -> AsyncConsumer:
        """A consumer (``async with client.consumer(...) as consumer: async for m in
        consumer``). See :class:`sdk.types.ConsumerSettings` for the settings."""
        from sdk.consumer import AsyncConsumer

        return AsyncConsumer(self, stream, topic, **settings)
