"""The blocking client, on plain sockets: the same core and API shape as ``sdk.client``.

Purpose: for code without an event loop. Each call runs the core's step on the calling
thread; a lock keeps the session lock-step when several threads share a client.

Invariants (as for the trio driver):

1. At most one step runs at a time per client (``threading.Lock``).
2. A connection that failed, timed out or produced a bad frame is closed at once.
3. Every socket operation has a timeout derived from the attempt's deadline; a dial's,
   the TLS handshake included, is the connect timeout.
4. With ``tls`` set every socket is an ``ssl.SSLSocket`` that verified the node's
   certificate and name (``sdk._tls``) before the first frame is sent.
5. Used as ``with``, a client with ``heartbeat_interval_s`` keeps a daemon thread that
   pings every connection that carried nothing for that interval, under the same lock as
   the calls (so never beside one), and stops at ``close``.
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar, Unpack

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
from sdk.wire.tokens import EXPIRY_SERVER_DEFAULT

if TYPE_CHECKING:
    from sdk.consumer import Consumer
    from sdk.producer import Producer

__all__ = ["Client"]

_T = TypeVar("_T")
_BALANCED: Final = Balanced()


def _wall_clock_us() -> int:
    return time.time_ns() // 1000


class _Connection:
    """One socket to one node and the decoder of what it sends."""

    __slots__ = ("decoder", "sock", "used_at")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.decoder = FrameDecoder()
        self.used_at = time.monotonic()
        """When a frame last went out on it (the heartbeat pings it after a silence)."""

    def exchange(self, address: NodeAddress, frame: bytes | bytearray, deadline: float) -> Frame:
        self.used_at = time.monotonic()
        self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        self.sock.sendall(frame)
        while True:
            reply = self.decoder.next_frame()
            if reply is not NEED_MORE_BYTES:
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            data = self.sock.recv(RECEIVE_BYTES_MAX)
            if not data:
                raise ConnectionLost(address, "closed by the node")
            self.decoder.feed(data)


class Client:
    """A blocking client of a viewstream (Apache Iggy 0.9) cluster.

    The same calls, arguments and behaviour as :class:`sdk.client.AsyncClient`, without
    ``await``: logging in on demand, routing writes to their group's primary, retrying
    transient failures under the same request number until the retry deadline.

    Args:
        config: Settings.
        rng: Randomness for ids and jitter (default: the OS's).

    Raises:
        InvalidTlsCertificate: ``tls_ca_file`` is missing or unusable.
    """

    def __init__(self, config: ClientConfig | None = None, *, rng: random.Random | None = None):
        self._rng = rng if rng is not None else random.SystemRandom()
        config = config or ClientConfig()
        self._tls = client_context(config)
        self._core = ClientCore(
            config,
            rng=self._rng,
            clock=time.monotonic,
            wall_clock_us=_wall_clock_us,
        )
        self._connections: dict[NodeAddress, _Connection] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()

    @classmethod
    def from_connection_string(cls, connection_string: str, **settings: object) -> Client:
        """A client for ``iggy://user:password@host:port[?options]``; ``settings``
        override :class:`ClientConfig` fields."""
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

    def new_session(self) -> Client:
        """Another client with the same settings, credentials and roster, and its own
        session and connections."""
        other = Client(self._core.config, rng=self._rng)
        other._core = self._core.fork(self._rng)
        other._tls = self._tls
        return other

    # --- the driver ----------------------------------------------------------------------

    def _run(self, step: Step[_T], *, deadline_s: float | None = None) -> _T:
        with self._lock:
            if self._closed:
                step.close()
                raise ClientClosed
            return self._drive(step, deadline_s)

    def _drive(self, step: Step[_T], deadline_s: float | None) -> _T:
        give_up_at = None if deadline_s is None else time.monotonic() + deadline_s
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
                if give_up_at is not None and time.monotonic() >= give_up_at:
                    raise TimeoutError("step deadline")
                if isinstance(action, Exchange):
                    try:
                        reply = self._exchange(action)
                    except (ConnectFailed, ConnectionLost, ExchangeTimedOut) as error:
                        failure = error
                elif isinstance(action, Sleep):
                    time.sleep(action.seconds)
                else:
                    assert isinstance(action, Disconnect)
                    self._drop(action.address)
        finally:
            step.close()

    def _exchange(self, action: Exchange) -> Frame:
        address = action.address
        deadline = time.monotonic() + action.timeout_s
        connection = self._connections.get(address)
        if connection is None:
            connection = self._dial(address, action.connect_timeout_s)
        try:
            return connection.exchange(address, action.frame, deadline)
        except TimeoutError:
            self._drop(address)
            raise ExchangeTimedOut(address, f"no reply within {action.timeout_s:.3f}s") from None
        except OSError as error:
            self._drop(address)
            raise ConnectionLost(address, str(error) or type(error).__name__) from None
        except ProtocolError as error:
            self._drop(address)
            raise ConnectionLost(address, f"undecodable bytes: {error.reason}") from None
        except BaseException:
            self._drop(address)
            raise

    def _dial(self, address: NodeAddress, timeout_s: float) -> _Connection:
        try:
            sock = socket.create_connection((address.host, address.port), timeout=timeout_s)
        except OSError as error:
            raise ConnectFailed(address, str(error) or type(error).__name__) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(self.config.nodelay))
            if self._tls is not None:
                # The handshake runs here, under the dial's timeout.
                sock = self._tls.wrap_socket(
                    sock, server_hostname=server_name(self.config, address)
                )
        except ssl.SSLError as error:
            sock.close()
            raise ConnectFailed(address, f"TLS handshake failed: {error}") from None
        except OSError as error:
            sock.close()
            raise ConnectFailed(address, str(error) or type(error).__name__) from None
        connection = _Connection(sock)
        self._connections[address] = connection
        return connection

    def _drop(self, address: NodeAddress) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.sock.close()

    # --- lifecycle -----------------------------------------------------------------------

    def connect(self) -> None:
        """Reach a node (ping it) and, if the settings hold credentials, log in."""
        self._run(self._core.ping())
        if self._core.has_credentials and not self._core.session.logged_in:
            credentials = self._core.credentials
            assert credentials is not None
            self._run(self._core.login_with(credentials))

    def _heartbeats(self) -> None:
        """Ping every node whose connection carried nothing for a heartbeat interval,
        until the client closes (as the async client's heartbeat task). A failed ping
        only drops that connection; the next call dials again."""
        interval = self.config.heartbeat_interval_s
        while not self._heartbeat_stop.wait(interval / 2):
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                for address, connection in list(self._connections.items()):
                    if now - connection.used_at < interval:
                        continue
                    with contextlib.suppress(Exception):
                        self._drive(self._core.heartbeat(address), None)

    def close(self) -> None:
        """Log out (best effort, bounded) and close every connection. Idempotent."""
        self._heartbeat_stop.set()
        if self._closed:
            return
        if self._core.session.logged_in:
            with contextlib.suppress(Exception):
                self._run(
                    self._core.logout(),
                    deadline_s=min(CLOSE_TIMEOUT_S, self.config.request_timeout_s),
                )
        with self._lock:
            self._closed = True
            for address in list(self._connections):
                self._drop(address)
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None and heartbeat is not threading.current_thread():
            heartbeat.join(timeout=self.config.request_timeout_s + CLOSE_TIMEOUT_S)

    def __enter__(self) -> Client:
        self.connect()
        if self.config.heartbeat_interval_s > 0 and self._heartbeat is None:
            self._heartbeat = threading.Thread(
                target=self._heartbeats, name="viewstream-heartbeat", daemon=True
            )
            self._heartbeat.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- session and system ----------------------------------------------------------------

    def login_user(self, username: str, password: str) -> LoginRegisterReply:
        """Log in (see :meth:`sdk.client.AsyncClient.login_user`)."""
        return self._run(self._core.login(username, password))

    def login_with_personal_access_token(self, token: str) -> LoginRegisterReply:
        """Log in with a personal access token (LOGIN_REGISTER_WITH_PAT, 45) instead of a
        username and password; the session is the token owner's, with that user's
        permissions, and the client logs in with the token again where it needs to.

        Raises:
            InvalidCredentials: the node knows no such token (deleted, expired, made up).
        """
        return self._run(self._core.login_with_personal_access_token(token))

    def logout_user(self) -> None:
        """Log out; the client id, request counter and credentials are forgotten."""
        self._run(self._core.logout())

    def ping(self) -> None:
        """Round trip to a node (works before login)."""
        self._run(self._core.ping())

    def get_me(self) -> ClientInfoDetails:
        """This connection's client as the node sees it."""
        return self._run(self._core.get_me())

    def get_clients(self) -> list[ClientInfo]:
        """The answering node's connections, as Iggy reports them (``read_servers``)."""
        return self._run(self._core.get_clients())

    def get_client(self, client_id: int) -> ClientInfoDetails | None:
        """One connection of the answering node, by the client id GET_ME reports, with its
        consumer groups; ``None`` when none has it."""
        return self._run(self._core.get_client(client_id))

    def describe_options(self, scope: OptionsScope = OptionsScope.TOPIC) -> list[OptionDescriptor]:
        """The option keys ``scope`` accepts on create, with the kind, default and meaning
        of each (streams and users take none)."""
        return self._run(self._core.describe_options(scope))

    def get_cluster_metadata(self) -> ClusterMetadata:
        """The cluster's roster and metadata leader (the client adopts it)."""
        return self._run(self._core.get_cluster_metadata())

    def get_stats(self) -> Stats:
        """Server statistics."""
        return self._run(self._core.get_stats())

    def get_runtime_stats(self) -> dict[str, Any]:
        """viewstream's own counters of the node that answers (see
        :meth:`sdk.client.AsyncClient.get_runtime_stats`)."""
        return self._run(self._core.get_runtime_stats())

    # --- users ----------------------------------------------------------------------------

    def get_user(self, user: IdLike) -> UserDetails | None:
        """A user with its permissions, by id or username, or ``None``."""
        return self._run(self._core.get_user(user))

    def get_users(self) -> list[UserInfo]:
        """Every user."""
        return self._run(self._core.get_users())

    def create_user(
        self,
        username: str,
        password: str,
        *,
        status: UserStatus = UserStatus.ACTIVE,
        permissions: Permissions | None = None,
    ) -> UserDetails:
        """Create a user (no permissions unless given)."""
        return self._run(self._core.create_user(username, password, status, permissions))

    def delete_user(self, user: IdLike) -> None:
        """Delete a user; its sessions and personal access tokens end with it."""
        self._run(self._core.delete_user(user))

    def update_user(
        self, user: IdLike, *, username: str | None = None, status: UserStatus | None = None
    ) -> None:
        """Rename a user and/or change its status (``None``: unchanged)."""
        self._run(self._core.update_user(user, username, status))

    def update_permissions(self, user: IdLike, permissions: Permissions | None) -> None:
        """Replace a user's permissions (``None`` removes them all)."""
        self._run(self._core.update_permissions(user, permissions))

    def change_password(self, user: IdLike, current_password: str, new_password: str) -> None:
        """Change a user's password."""
        self._run(self._core.change_password(user, current_password, new_password))

    # --- personal access tokens -------------------------------------------------------------

    def create_personal_access_token(self, name: str, *, expiry_s: float | None = None) -> str:
        """Create a token of the logged-in user's; the raw token is returned once and only
        its hash is kept. ``expiry_s``: seconds from now (``None``: the server's default,
        which is never, as Iggy's)."""
        expiry_us = EXPIRY_SERVER_DEFAULT if expiry_s is None else max(1, round(expiry_s * 1e6))
        return self._run(self._core.create_personal_access_token(name, expiry_us))

    def get_personal_access_tokens(self) -> list[PersonalAccessTokenInfo]:
        """The logged-in user's tokens: names and expiries (µs since the epoch, 0 never)."""
        return self._run(self._core.get_personal_access_tokens())

    def delete_personal_access_token(self, name: str) -> None:
        """Delete one of the logged-in user's tokens by name."""
        self._run(self._core.delete_personal_access_token(name))

    # --- streams -----------------------------------------------------------------------------

    def create_stream(
        self, name: str, *, options: Mapping[str, str] | None = None
    ) -> StreamDetails:
        """Create a stream."""
        return self._run(self._core.create_stream(name, string_options(options)))

    def get_stream(self, stream: IdLike) -> StreamDetails | None:
        """A stream with its topics, or ``None``."""
        return self._run(self._core.get_stream(stream))

    def get_streams(self) -> list[StreamInfo]:
        """Every stream."""
        return self._run(self._core.get_streams())

    def update_stream(
        self, stream: IdLike, name: str, *, options: Mapping[str, str] | None = None
    ) -> None:
        """Rename a stream and patch its options."""
        self._run(self._core.update_stream(stream, name, string_options(options)))

    def delete_stream(self, stream: IdLike) -> None:
        """Delete a stream and everything in it."""
        self._run(self._core.delete_stream(stream))

    def purge_stream(self, stream: IdLike) -> None:
        """Delete every message of a stream's topics."""
        self._run(self._core.purge_stream(stream))

    # --- topics --------------------------------------------------------------------------------

    def create_topic(
        self,
        stream: IdLike,
        name: str,
        partitions_count: int = 1,
        **settings: Unpack[TopicSettings],
    ) -> TopicDetails:
        """Create a topic (settings: :class:`sdk.types.TopicSettings`)."""
        options = topic_options(create=True, **settings)
        return self._run(self._core.create_topic(stream, name, partitions_count, options))

    def get_topic(self, stream: IdLike, topic: IdLike) -> TopicDetails | None:
        """A topic with its partitions, or ``None``."""
        return self._run(self._core.get_topic(stream, topic))

    def get_topics(self, stream: IdLike) -> list[TopicInfo]:
        """Every topic of a stream."""
        return self._run(self._core.get_topics(stream))

    def update_topic(
        self, stream: IdLike, topic: IdLike, name: str, **settings: Unpack[TopicSettings]
    ) -> None:
        """Rename a topic and patch the settings given."""
        options = topic_options(create=False, **settings)
        self._run(self._core.update_topic(stream, topic, name, options))

    def delete_topic(self, stream: IdLike, topic: IdLike) -> None:
        """Delete a topic."""
        self._run(self._core.delete_topic(stream, topic))

    def purge_topic(self, stream: IdLike, topic: IdLike) -> None:
        """Delete every message of a topic."""
        self._run(self._core.purge_topic(stream, topic))

    # --- partitions ----------------------------------------------------------------------------

    def create_partitions(self, stream: IdLike, topic: IdLike, partitions_count: int) -> None:
        """Add partitions to a topic."""
        self._run(self._core.create_partitions(stream, topic, partitions_count))

    def delete_partitions(self, stream: IdLike, topic: IdLike, partitions_count: int) -> None:
        """Remove the last partitions of a topic."""
        self._run(self._core.delete_partitions(stream, topic, partitions_count))

    def delete_segments(
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
        self._run(self._core.delete_segments(stream, topic, partition_id, segments_count))

    def get_partitions(self, stream: IdLike, topic: IdLike) -> list[PartitionInfo]:
        """A topic's partitions."""
        return self._run(self._core.get_partitions(stream, topic))

    def get_partition(
        self, stream: IdLike, topic: IdLike, partition_id: int
    ) -> PartitionInfo | None:
        """One partition of a topic, or ``None``."""
        return self._run(self._core.get_partition(stream, topic, partition_id))

    # --- messages ------------------------------------------------------------------------------

    def send_messages(
        self,
        stream: IdLike,
        topic: IdLike,
        messages: Iterable[MessageLike],
        partitioning: PartitioningLike = _BALANCED,
    ) -> list[SendConfirmation]:
        """Append messages to one partition, exactly once across the SDK's retries."""
        return self._run(self._core.send_messages(stream, topic, messages, partitioning))

    def send_payloads(
        self,
        stream: IdLike,
        topic: IdLike,
        payloads: Sequence[Buffer],
        partitioning: PartitioningLike = _BALANCED,
        *,
        ids: Sequence[int] | None = None,
        origin_timestamp: int = 0,
    ) -> list[SendConfirmation]:
        """Append payloads handed over as buffers, the zero-copy send (see
        :meth:`sdk.client.AsyncClient.send_payloads`)."""
        return self._run(
            self._core.send_payloads(
                stream, topic, payloads, partitioning, ids=ids, origin_timestamp=origin_timestamp
            )
        )

    def poll_messages(
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
        """Read messages (see :meth:`sdk.client.AsyncClient.poll_messages`)."""
        return self._run(
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

    def long_poll_messages(
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
        """Read messages, waiting on the node for one (see
        :meth:`sdk.client.AsyncClient.long_poll_messages`)."""
        return self._run(
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

    # --- consumer offsets ----------------------------------------------------------------------

    def get_consumer_offset(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        partition_id: int | None = None,
    ) -> ConsumerOffsetInfo | None:
        """The stored offset of a consumer on a partition, or ``None``."""
        return self._run(self._core.get_consumer_offset(consumer, stream, topic, partition_id))

    def store_consumer_offset(
        self,
        stream: IdLike,
        topic: IdLike,
        offset: int,
        *,
        consumer: ConsumerRef,
        partition_id: int | None = None,
    ) -> None:
        """Store a consumer's offset (the last offset it consumed) on a partition."""
        self._run(self._core.store_consumer_offset(consumer, stream, topic, offset, partition_id))

    def delete_consumer_offset(
        self,
        stream: IdLike,
        topic: IdLike,
        *,
        consumer: ConsumerRef,
        partition_id: int | None = None,
    ) -> None:
        """Delete a consumer's stored offset on a partition."""
        self._run(self._core.delete_consumer_offset(consumer, stream, topic, partition_id))

    # --- consumer groups -----------------------------------------------------------------------

    def create_consumer_group(
        self, stream: IdLike, topic: IdLike, name: str
    ) -> ConsumerGroupDetails:
        """Create a consumer group on a topic."""
        return self._run(self._core.create_consumer_group(stream, topic, name))

    def get_consumer_group(
        self, stream: IdLike, topic: IdLike, group: IdLike
    ) -> ConsumerGroupDetails | None:
        """A consumer group with its members, or ``None``."""
        return self._run(self._core.get_consumer_group(stream, topic, group))

    def get_consumer_groups(self, stream: IdLike, topic: IdLike) -> list[ConsumerGroupInfo]:
        """Every consumer group of a topic."""
        return self._run(self._core.get_consumer_groups(stream, topic))

    def delete_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        """Delete a consumer group."""
        self._run(self._core.delete_consumer_group(stream, topic, group))

    def join_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        """Make this session a member of the group."""
        self._run(self._core.join_consumer_group(stream, topic, group))

    def leave_consumer_group(self, stream: IdLike, topic: IdLike, group: IdLike) -> None:
        """Stop being a member of the group."""
        self._run(self._core.leave_consumer_group(stream, topic, group))

    def sync_consumer_group(
        self, stream: IdLike, topic: IdLike, group: IdLike
    ) -> ConsumerGroupAssignment | None:
        """This member's partitions and the group generation (``None``: not a member)."""
        return self._run(self._core.sync_consumer_group(stream, topic, group))

    # --- high-level ----------------------------------------------------------------------------

    def producer(
        self, stream: IdLike, topic: IdLike, **settings: Unpack[ProducerSettings]
    ) -> Producer:
        """A batching producer running on background threads (``with`` closes it)."""
        from sdk.producer import Producer

        return Producer(self, stream, topic, **settings)

    def consumer(
        self, stream: IdLike, topic: IdLike, **settings: Unpack[ConsumerSettings]
    ) -> Consumer:
        """A consumer (``with client.consumer(...) as consumer: for m in consumer``)."""
        from sdk.consumer import Consumer

        return Consumer(self, stream, topic, **settings)
