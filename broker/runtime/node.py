"""The node: every group of one replica, the ticker, the listener, and request handling.

Purpose: one process of a viewstream cluster. It hosts a replica of the metadata group
and of every partition group (created and removed as committed metadata changes), feeds
them ticks, peer messages and client requests, and answers clients in the Iggy 0.9
protocol. What it decides about a request is ``broker.core.handlers``, which the
simulator runs too; this node steps each request's flow and carries out what it waits
for (a group's outcome, a catch-up, a read barrier, scrypt in a worker thread, the login
throttle).

Invariants:

1. Requests are admitted against this node's *committed* metadata: sessions, routing,
   permissions (``broker.state.admission``, ``broker.state.routing``). A request that
   changes state goes to its group's replica as ``ClientRequested``; reads (polls,
   metadata reads) are answered from committed local state and never replicated.
2. Every request but PING and the login needs a live session whose client id matches the
   header's. A connection waits (bounded) for its own earlier writes and its session to
   be applied locally before it is judged, so a read on a backup sees the writes it was
   acknowledged ("read your writes" per connection). A session above what this node
   applied is not yet known here, not unknown: it is refused as transient (58), not
   evicted, unless this node is the metadata primary and knows of no such op.
3. Passwords are verified against scrypt hashes in a worker thread and never logged or
   stored in clear; every new password (the root's, CREATE_USER's, CHANGE_PASSWORD's) is
   hashed here with a fresh salt before it is proposed, so only the hash is replicated.
   A new personal access token is drawn here from the OS and only its hash proposed; the
   raw token goes to the client that asked, in the reply, and nowhere else. A token login
   looks the token's hash up in committed metadata and proposes the same register as a
   password login.
4. The node's own requests (the root user, auto-commit offsets, purges, removing expired
   access tokens, ending the session of a closed connection that logged in) go through a
   system client with its own client id and session, one request at a time per group, so
   the client tables stay exact. A connection that only carried a session (a client keeps
   one per node, all with the same session) leaves it alone when it closes.
5. Shutdown order: stop accepting, let connections finish the request in hand, stop the
   groups, sync and close every journal.
6. A connection acts for another session only after ATTACH_CONSUMER_SESSION named a live
   session of the same user and client id, once this node applied the metadata op the
   route was given at; it then uses that session for partition requests (group
   membership), and its own rights, which are the same user's.
7. A reply the client routes writes by names the group's primary: a committed write's
   header carries the view it committed in and that view's primary (not this node's
   index: a backup forwards writes to the primary's node), and a refusal (58) carries the
   group's current view and its primary here, the metadata group's for a request that
   names no partition. Replies made here from local state (reads, routes) name this node.

Theory of operation: ``run`` opens the metadata group first (recovering and replaying
it), which reconciles the partition groups after every applied op; then it starts the
ticker (a fixed-rate schedule on trio's clock, so it never drifts), the replica bus (in a
cluster) and the client listeners, TCP and WebSocket (TLS when configured). ``handle`` is
called by a connection task for each frame, in order, and returns the reply frame(s). In a
cluster an auto-commit poll or an offset write from the official SDK is routed
(POLL_ROUTING, CONSUMER_OFFSET_ROUTING) to the partition group's primary, where the client
attaches its session and polls (POLL_PRIMARY); a primary that lost its role answers
TransientNotAccepted and the client routes again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import platform
import random
import resource
import secrets
import shutil
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from broker import __version__
from broker.core.commands import (
    Balancer,
)
from broker.core.connections import ConnectionContext, Response
from broker.core.diagnostics import TEST_SECTION_TEXT, plan_snapshot, snapshot_archive
from broker.core.groups import (
    REQUEST_TIMEOUT_US,
    Outcome,
    Refused,
    Replied,
    Submission,
    timed_out,
)
from broker.core.handlers import (
    LOGINS_BUSY,
    AwaitMessages,
    CatchUp,
    HashPassword,
    LoginsBusy,
    PasswordLogin,
    PurgeApplied,
    ReadBarrier,
    Submit,
    VerifyPassword,
    handle,
    login_user,
)
from broker.core.handlers import Group as CoreGroup
from broker.core.liveness import Heartbeats, Revocations, ServedPolls, stale_members
from broker.core.logins import LoginThrottle
from broker.core.long_polls import LongPolls, Refusal, Woken
from broker.core.maintenance import (
    AutoCommits,
    PurgesDue,
    PurgeView,
    RetentionsDue,
    RetentionView,
    root_user_due,
    tokens_expiry_due,
)
from broker.core.reads import READ_WAIT_US, readable
from broker.core.reconcile import METADATA_GROUP, partition_group_id, reconcile
from broker.core.refusals import refusal_line
from broker.core.retention import retention_due, topic_limits
from broker.core.sessions import (
    MetadataView,
    session_to_end,
)
from broker.core.system import NO_SESSION, SystemCall, SystemClient
from broker.runtime.config import Config, parse_address
from broker.runtime.disk import DiskGuard
from broker.runtime.flush import Flusher
from broker.runtime.group import (
    PARTITION_DESCRIPTORS,
    GroupHost,
    GroupKind,
    GroupTicker,
    PartitionIds,
    ReplyWaiter,
)
from broker.runtime.stats import (
    UNKNOWN_COMMAND,
    NodeCounters,
    RequestCounters,
    StatsReport,
    group_report,
)
from broker.runtime.store import remove_group_dir, tombstoned_names, write_tombstone
from broker.runtime.throttle import (
    HOST_LOGINS_WAITING_MAX,
    PASSWORD_CHECKS_CONCURRENT,
    HostTurns,
    TurnsBusy,
)
from broker.state.codec import encode_command
from broker.state.credentials import PasswordHash, hash_password, verify_password
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    SESSIONS_MAX,
    CreateRootUser,
    Durability,
    EndSession,
    ExpireRevocations,
    ExpireTokens,
    MetadataCommand,
    MetadataState,
    PartitionRef,
    RevocationDrained,
    RevocationInfo,
    UserInfo,
)
from broker.state.metadata_machine import (
    ClientConnection,
    MetadataMachine,
    PartitionStats,
)
from broker.state.options import options_catalog
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import (
    CHECKPOINT_AFTER_OPERATIONS,
    purge_body,
    retain_body,
    store_offset_body,
)
from broker.state.permissions import Action
from broker.state.routing import PartitionRoute
from consensus import Message, ReplicaConfig
from consensus.protocols import RequestBody
from journal import SegmentInfo
from sdk import wire
from sdk.wire import (
    CommandCode,
    EvictionReason,
    Frame,
    IggyErrorCode,
    Operation,
    ProtocolError,
    RequestHeader,
    SnapshotSection,
    request_command_code,
)

if TYPE_CHECKING:
    from broker.runtime.connection import Connection

log = logging.getLogger("viewstream.node")

REQUEST_TIMEOUT_S: Final = REQUEST_TIMEOUT_US / 1_000_000
"""A request not answered by its group within this long gets a transient error."""
CATCH_UP_TIMEOUT_S: Final = READ_WAIT_US / 1_000_000
"""How long a request waits for this node to apply what its connection already saw, or
for a read barrier (``broker.core.reads``)."""
SHUTDOWN_CONNECTIONS_TIMEOUT_S: Final = 5.0
"""Graceful shutdown waits this long for connections to finish their request in hand."""
MAINTENANCE_INTERVAL_S: Final = 0.1
"""Period of the node's housekeeping pass (root user, purges, token expiry; retention
looks once every ``retention_interval_s`` within it)."""
METADATA_CLIENTS_MAX: Final = SESSIONS_MAX
"""Client table entries of the metadata group: one per possible session."""
PARTITION_CLIENTS_MAX: Final = 1024
"""Client table entries of a partition group (producers deduplicated per partition)."""
SALT_SIZE_BYTES: Final = 16
"""Bytes of OS randomness drawn for each new password hash (on the node that proposes it)."""
TOKEN_SIZE_BYTES: Final = 32
"""Bytes of OS randomness in a new personal access token (256 bits; 43 URL-safe base64
characters on the wire, within a name's 255 bytes)."""
TRANSPORT_TCP: Final = 1
_NodeRead = Callable[[ConnectionContext, int, wire.RequestPayload], bytes]
"""A read of the node's own facts: (connection, session, request payload) to the body."""


@dataclasses.dataclass(slots=True)
class _LongPollSlot:
    """How a waiting long poll's flow is resumed: its event, and why it woke."""

    event: trio.Event
    woken: Woken | None = None


def now_us() -> int:
    return time.time_ns() // 1000


class Node:
    """One viewstream node; see the module docstring."""

    def __init__(self, config: Config, *, announce: Callable[[str], None] = print) -> None:
        self.config: Config = config
        self.announce = announce
        self.counters = NodeCounters()
        self.requests = RequestCounters()
        """Answered requests by command (latency histograms) and refusals by code."""
        self.started_at_us = now_us()
        self.started_at: float = time.monotonic()
        self.data_dir = Path(config.data_dir)
        self.replica_index = config.replica
        self.replica_count = config.replica_count
        self.groups: dict[int, GroupHost] = {}
        self.ticker = GroupTicker()
        """Every group's ticks; the ticker task advances it and it wakes the due groups."""
        self.partitions: dict[tuple[int, int, int], GroupHost] = {}
        self._refs: dict[int, PartitionRef] = {}
        #: The partition groups this node removed (their tombstones on disk, and the ones
        #: being written): never hosted here again (``broker.core.reconcile``).
        self._removed: set[int] = {
            group
            for name in tombstoned_names(self.data_dir / "partitions")
            if (group := _group_of_dir(name)) is not None
        }
        self._scopes: dict[int, trio.CancelScope] = {}
        self._balancer = Balancer()
        self._effects = self._effect_table()
        self._node_reads = self._node_read_table()
        self._nursery: trio.Nursery | None = None
        self.login_throttle = LoginThrottle()
        self._password_checks = trio.CapacityLimiter(PASSWORD_CHECKS_CONCURRENT)
        """Bounds the scrypt work of logins and password changes (``throttle`` docs)."""
        self._password_turns = HostTurns()
        """One login's password check at a time per client host (``throttle`` docs)."""
        limits = config.limits
        self.disk: DiskGuard = DiskGuard(
            self.data_dir,
            budget_bytes=limits.disk_budget_bytes,
            free_min_bytes=limits.disk_free_min_bytes,
        )
        self.flusher: Flusher = Flusher(self.data_dir, scope=config.sync_scope)
        self.metadata: GroupHost = self._make_group(
            METADATA_GROUP, GroupKind.METADATA, self.data_dir / "metadata", persisted=True
        )
        self.system = SystemRunner(self)
        self._autocommits: AutoCommits[tuple[PartitionRoute, int, int]] = AutoCommits()
        self._purges = PurgesDue()
        self._retentions = RetentionsDue(max(1, round(config.retention_interval_s * 1e6)))
        self._bootstrapping = False
        self._expiring_tokens = False
        self.long_polls = LongPolls(limits.long_polls_waiting_max)
        """The long polls waiting here (``broker.core.long_polls``), each resumed through
        its slot in ``_long_poll_slots``."""
        self._long_poll_slots: dict[int, _LongPollSlot] = {}
        self.waiting = WaitingRequests()
        """The client requests waiting for a group's answer, with their deadlines."""
        self._long_poll_timer_changed = trio.Event()
        self._served = ServedPolls()
        """What this node served consumer group members (``broker.core.liveness``)."""
        self._revocations = Revocations(
            self.replica_index,
            self.replica_count,
            max(1, round(config.consumer_group.rebalancing_timeout_s * 1e6)),
        )
        self._heartbeats: Heartbeats[Connection] = Heartbeats(
            max(1, round(config.heartbeat.interval_s * 1e6))
        )
        self.stopping = False
        self.connections: int = 0
        self.open_connections: set[Connection] = set()
        self._connections_idle = trio.Event()
        self._connections_idle.set()
        self._shutdown = trio.Event()
        self.stopped = trio.Event()
        self.bus: Any = None
        """The replica bus (``broker.runtime.bus.ReplicaBus``) in a cluster."""
        self.address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        """Where the HTTP API listens, once it does (None: off or not yet)."""
        self._http_scope = trio.CancelScope()
        """Accepting HTTP connections and ending expired tokens' sessions."""
        self.http_connections: set[Any] = set()
        """Open HTTP connections (``broker.runtime.http.HttpConnection``)."""
        self.ws_address: tuple[str, int] | None = None
        """Where the WebSocket listener is bound, or None (off, or not yet listening)."""

    # -- groups -----------------------------------------------------------------------------

    def _make_group(
        self,
        group_id: int,
        kind: GroupKind,
        path: Path,
        *,
        persisted: bool,
        partition: PartitionIds | None = None,
        segment_size_bytes: int | None = None,
    ) -> GroupHost:
        clients_max = METADATA_CLIENTS_MAX if kind is GroupKind.METADATA else PARTITION_CLIENTS_MAX
        host = GroupHost(
            group_id=group_id,
            kind=kind,
            path=path,
            replica_index=self.replica_index,
            replica_count=self.replica_count,
            persisted=persisted,
            no_sync=self.config.no_sync,
            segment_size_bytes=segment_size_bytes or self.config.segment_size_bytes,
            # A partition's log is its messages: a replica far behind repairs every op
            # rather than jump over them to a snapshot of offsets (ReplicaConfig docs).
            # Its replicas checkpoint as a purge or retention commits, so the segments it
            # retired are deleted at once (``CHECKPOINT_AFTER_OPERATIONS``).
            replica_config=ReplicaConfig(
                clients_max=clients_max,
                state_transfer=kind is GroupKind.METADATA,
                checkpoint_after_operations=(
                    CHECKPOINT_AFTER_OPERATIONS if kind is GroupKind.PARTITION else ()
                ),
            ),
            send=self._send_to_replica,
            on_applied=self._on_applied,
            prng=random.Random(int.from_bytes(os.urandom(8), "little")),
            partition=partition,
            disk=self.disk,
            # The metadata group syncs its own files: a login must not wait for a flush
            # of the partitions' unsynced appends (``broker.runtime.flush``, invariant 3).
            flusher=self.flusher if kind is GroupKind.PARTITION else None,
            ticker=self.ticker,
        )
        self.groups[group_id] = host
        return host

    async def wait_group(self, group_id: int, timeout_s: float) -> GroupHost | None:
        """The host of ``group_id`` once committed metadata creates it here (bounded)."""
        with trio.move_on_after(timeout_s):
            while group_id not in self.groups:
                await self.metadata.wait_applied(self.metadata.applied_op + 1)
        return self.groups.get(group_id)

    def _send_to_replica(self, group_id: int, replica: int, message: Message) -> None:
        bus = self.bus
        if bus is None:
            return
        sent = bus.send(replica, message)
        host = self.groups.get(group_id)
        if host is not None:
            host.counters.bytes_to_replicas += sent

    def _on_applied(self, host: GroupHost) -> None:
        if host.kind is GroupKind.METADATA:
            self._reconcile_partitions()
            if len(self.long_polls):
                self._wake_long_polls(self.long_polls.metadata_changed())
            return
        machine = host.partition_machine
        if len(self.long_polls) and machine is not None:
            next_offset = machine.state.frontier.next_offset
            self._wake_long_polls(self.long_polls.applied(host.group_id, next_offset))

    def _reconcile_partitions(self) -> None:
        machine = self.metadata.metadata
        if machine is None or self._nursery is None:
            return
        change = reconcile(self._refs, machine.state.partition_refs(), self._removed)
        for group_id in change.remove:
            self._remove_partition(group_id)
        for group_id, ref in change.add:
            self._add_partition(group_id, ref)
        for group_id in change.purge_due:
            self._purges.watch(group_id)
        self._refs.update(change.refs)

    def _add_partition(self, group_id: int, ref: PartitionRef) -> None:
        assert self._nursery is not None
        name = _dir_of(ref)
        host = self._make_group(
            group_id,
            GroupKind.PARTITION,
            self.data_dir / "partitions" / name,
            persisted=ref.durability is Durability.PERSISTED,
            partition=PartitionIds(ref.stream_id, ref.topic_id, ref.partition_id, ref.created_op),
            segment_size_bytes=ref.segment_size_bytes,
        )
        if self.bus is not None:
            host.forward = self.bus.forward
        self._refs[group_id] = ref
        self.partitions[(ref.stream_id, ref.topic_id, ref.partition_id)] = host
        self._nursery.start_soon(self._run_group, host)

    def _remove_partition(self, group_id: int) -> None:
        self._removed.add(group_id)
        ref = self._refs.pop(group_id)
        host = self.groups.pop(group_id)
        key = (ref.stream_id, ref.topic_id, ref.partition_id)
        if self.partitions.get(key) is host:
            del self.partitions[key]
        scope = self._scopes.get(group_id)
        if scope is not None:
            scope.cancel()
        self._wake_long_polls(self.long_polls.group_gone(group_id))
        assert self._nursery is not None
        self._nursery.start_soon(self._dispose_group, host)

    async def _dispose_group(self, host: GroupHost) -> None:
        await host.closed.wait()
        with trio.CancelScope(shield=True):
            await host.close()
            try:
                await trio.to_thread.run_sync(write_tombstone, host.path)
            except OSError as error:
                # Without a durable tombstone a restart could reopen the group empty: keep
                # its data, which a later start cannot mistake for a new group's.
                log.warning(
                    "kept removed group %s: cannot write its tombstone: %s", host.path, error
                )
                return
            await trio.to_thread.run_sync(remove_group_dir, host.path)

    async def _run_group(
        self, host: GroupHost, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.CancelScope() as scope:
            self._scopes[host.group_id] = scope
            try:
                await host.run(task_status=task_status)
            finally:
                self._scopes.pop(host.group_id, None)

    # -- the node task ----------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``request_shutdown``; ``task_status`` gets the bound address."""
        try:
            await self._run(task_status)
        finally:
            self.stopped.set()

    async def _run(self, task_status: Any) -> None:
        host, port = parse_address(self.config.address)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._expire_requests)
            if self.config.replica_count > 1:
                from broker.runtime.bus import ReplicaBus

                self.bus = ReplicaBus(self)
                self.metadata.forward = self.bus.forward
                await nursery.start(self.bus.run)
            await nursery.start(self.flusher.run)
            await nursery.start(self._run_group, self.metadata)
            nursery.start_soon(self.disk.run)
            self._reconcile_partitions()
            if self.replica_count == 1:
                # A lone node creates its root user before it takes clients, so the
                # first login after "listening" cannot race the bootstrap.
                await self._bootstrap_alone()
            nursery.start_soon(self._ticker)
            nursery.start_soon(self._maintenance)
            nursery.start_soon(self._long_poll_timer)
            tls = self._tls_context()
            sockets = await trio.open_tcp_listeners(port, host=host)
            bound = sockets[0].socket.getsockname()
            self.address = (bound[0], bound[1])
            listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(sockets)
            if tls is not None:
                listeners = [
                    trio.SSLListener(listener, tls, https_compatible=False) for listener in sockets
                ]
            listen_scopes = [trio.CancelScope()]
            nursery.start_soon(self._serve, listeners, listen_scopes[0])
            log.info("serving clients on %s:%d%s", bound[0], bound[1], " (TLS)" if tls else "")
            ws = self.config.ws_host_port
            if ws is not None:
                ws_sockets = await trio.open_tcp_listeners(ws[1], host=ws[0])
                ws_bound = ws_sockets[0].socket.getsockname()
                self.ws_address = (ws_bound[0], ws_bound[1])
                ws_listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(ws_sockets)
                if tls is not None:
                    ws_listeners = [
                        trio.SSLListener(listener, tls, https_compatible=False)
                        for listener in ws_sockets
                    ]
                listen_scopes.append(trio.CancelScope())
                nursery.start_soon(
                    functools.partial(self._serve, websocket=True), ws_listeners, listen_scopes[1]
                )
                log.info(
                    "serving WebSocket clients on %s:%d%s",
                    ws_bound[0],
                    ws_bound[1],
                    " (TLS)" if tls else "",
                )
            if self.config.http_address:
                await self._start_http(nursery, tls)
            task_status.started(self.address)
            await self._shutdown.wait()
            await self._stop(listen_scopes)
            nursery.cancel_scope.cancel()

    def request_shutdown(self) -> None:
        self._shutdown.set()

    async def _stop(self, listen_scopes: list[trio.CancelScope]) -> None:
        with trio.CancelScope(shield=True):
            self.stopping = True
            for scope in listen_scopes:
                scope.cancel()
            self._http_scope.cancel()
            # Waiting long polls answer now with what they have, so their connections
            # close after them rather than at their deadline.
            self._wake_long_polls(self.long_polls.stop())
            for connection in list(self.open_connections):
                connection.shutdown()
            for http_connection in list(self.http_connections):
                http_connection.shutdown()
            with trio.move_on_after(SHUTDOWN_CONNECTIONS_TIMEOUT_S):
                while self.connections:
                    await self._connections_idle.wait()
            for scope in list(self._scopes.values()):
                scope.cancel()
            for host in list(self.groups.values()):
                await host.closed.wait()
            for host in list(self.groups.values()):
                await host.close()
            if self.bus is not None:
                await self.bus.close()
            log.info("stopped; every journal synced and closed")

    def _tls_context(self) -> ssl.SSLContext | None:
        """The client listener's TLS context, or None when TLS is off.

        An unreadable certificate or key is an environment failure with no in-process
        answer: the node exits naming the settings.
        """
        config = self.config
        if config.tls_cert_file is None or config.tls_key_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        except (OSError, ssl.SSLError) as error:
            raise SystemExit(f"tls_cert_file / tls_key_file: cannot load them: {error}") from None
        return context

    async def _start_http(self, nursery: trio.Nursery, tls: ssl.SSLContext | None) -> None:
        """Open the HTTP API listener (``broker.runtime.http``), TLS when the client
        listener has it. At shutdown it stops accepting (``_http_scope``) and each
        connection closes once its request in hand is answered."""
        from broker.runtime.connection import connection_guard
        from broker.runtime.http import serve_http_connection
        from broker.runtime.http_api import HttpApi
        from broker.runtime.http_tokens import TokenIssuer, token_key
        from broker.runtime.metrics import render_metrics

        config = self.config
        host, port = parse_address(config.http_address)
        try:
            sockets = await trio.open_tcp_listeners(port, host=host)
        except OSError as error:
            # The default port is a fixed one another program may hold: say which setting.
            raise SystemExit(
                f"http_address {config.http_address}: cannot listen: {error.strerror}; set "
                "--http-address (VIEWSTREAM_HTTP_ADDRESS) to another HOST:PORT, or to '' "
                "to turn the HTTP API off"
            ) from None
        bound = sockets[0].socket.getsockname()
        self.http_address = (bound[0], bound[1])
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(sockets)
        if tls is not None:
            listeners = [trio.SSLListener(s, tls, https_compatible=True) for s in sockets]

        async def end_session(session: int) -> Outcome:
            return await self.system.run(self.metadata, EndSession(session))

        tokens = TokenIssuer(token_key(config), config.http_token_expiry_s)
        api = HttpApi(self, tokens, end_session, metrics=functools.partial(render_metrics, self))
        guard = connection_guard(self)

        async def accept(stream: trio.abc.Stream) -> None:
            if not self.connection_opened():
                await trio.aclose_forcefully(stream)
                return
            try:
                await serve_http_connection(self, api, stream, guard, self.http_connections)
            finally:
                self.connection_closed(ConnectionContext("http"))

        async def serve() -> None:
            # Connections live in ``nursery`` (the node's), so that stopping to accept
            # (``_http_scope``) leaves the requests in hand to finish, as on TCP.
            with self._http_scope:
                nursery.start_soon(api.expire_sessions)
                await trio.serve_listeners(accept, listeners, handler_nursery=nursery)

        nursery.start_soon(serve)
        scheme = "https" if tls else "http"
        log.info("serving the HTTP API on %s://%s:%d", scheme, bound[0], bound[1])

    async def _serve(
        self,
        listeners: list[trio.abc.Listener[trio.abc.Stream]],
        scope: trio.CancelScope,
        *,
        websocket: bool = False,
    ) -> None:
        from broker.runtime.connection import serve_connection

        async def accept(stream: trio.abc.Stream) -> None:
            await serve_connection(self, stream, websocket=websocket)

        # Connections run in the node's nursery, not under ``scope``: cancelling it stops
        # accepting, and each open connection answers the request in hand (a waiting long
        # poll included) before it closes (``_stop``).
        with scope:
            await trio.serve_listeners(accept, listeners, handler_nursery=self._nursery)

    def connection_opened(self) -> bool:
        """Count a new connection; False if the node is full (close it at once)."""
        if self.stopping or self.connections >= self.config.limits.connections_max:
            self.counters.connections_refused += 1
            return False
        self.connections += 1
        self.counters.connections_accepted += 1
        self._connections_idle = trio.Event()
        return True

    def connection_closed(self, context: ConnectionContext) -> None:
        self.connections -= 1
        if self.connections == 0:
            self._connections_idle.set()
        machine = self.metadata.metadata
        if machine is None or self.stopping:
            return
        # The connection that logged in is gone: end its session so its consumer groups
        # rebalance. A connection that only carried the session ends none: the client
        # may still use it on its other connections.
        session = session_to_end(context, machine.state.session)
        if session and self._nursery is not None:
            self._nursery.start_soon(self.system.run, self.metadata, EndSession(session))

    # -- long polls (``broker.core.long_polls``) -------------------------------------------

    def _long_poll_now_us(self) -> int:
        """The clock of long-poll deadlines: trio's (monotonic), in whole microseconds,
        rounded up so a timer that fires at a deadline finds it passed."""
        return math.ceil(trio.current_time() * 1_000_000)

    def _wake_long_polls(self, released: list[tuple[int, Woken]]) -> None:
        for token, woken in released:
            slot = self._long_poll_slots.pop(token)
            slot.woken = woken
            slot.event.set()

    def connection_busy(self, context: ConnectionContext) -> None:
        """The connection has another request to answer, or went: a poll waiting for it
        answers now (a connection answers in order; nothing waits behind a long poll)."""
        self._wake_long_polls(self.long_polls.connection_busy(id(context)))

    async def _long_poll_timer(self) -> None:
        """Release the long polls whose deadline passed, at the earliest deadline."""
        while True:
            changed = self._long_poll_timer_changed = trio.Event()
            deadline_us = self.long_polls.next_deadline_us()
            if deadline_us is None:
                await changed.wait()
                continue
            with trio.move_on_at(deadline_us / 1_000_000):
                await changed.wait()
            self._wake_long_polls(self.long_polls.expired(self._long_poll_now_us()))

    async def _do_await_messages(self, effect: AwaitMessages) -> Woken | Refusal:
        token = self.long_polls.register(
            id(effect.context),
            effect.group_id,
            effect.offset,
            now_us=self._long_poll_now_us(),
            wait_us=effect.wait_us,
            deadline_us=effect.deadline_us,
        )
        if isinstance(token, Refusal):
            return token
        slot = self._long_poll_slots[token] = _LongPollSlot(trio.Event())
        self._long_poll_timer_changed.set()
        try:
            await slot.event.wait()
        finally:
            if slot.woken is None:  # cancelled: the connection or the node went
                self._wake_long_polls(self.long_polls.cancel(token))
        assert slot.woken is not None
        return slot.woken

    async def _expire_requests(self) -> None:
        await expire_requests(self.waiting)

    async def _ticker(self) -> None:
        # Only the groups due on a tick are woken (``GroupTicker``): an idle one costs none,
        # and a tick no group is due on does not wake the loop.
        await run_ticker(self.config.tick_ms / 1000, self.ticker)

    async def _maintenance(self) -> None:
        while True:
            await trio.sleep(MAINTENANCE_INTERVAL_S)
            self._maybe_bootstrap()
            self._maybe_purge()
            self._maybe_expire_tokens()
            self._maybe_retain()
            self._maybe_move_revoked()
            self._maybe_evict_stale()

    async def _bootstrap_alone(self) -> None:
        while True:
            machine = self.metadata.metadata
            assert machine is not None
            if machine.state.users():
                return
            if self.metadata.is_primary and not self._bootstrapping:
                self._bootstrapping = True
                await self._bootstrap_root()
            else:
                await trio.sleep(MAINTENANCE_INTERVAL_S)

    def _maybe_bootstrap(self) -> None:
        machine = self.metadata.metadata
        if machine is None or not root_user_due(
            machine.state, is_primary=self.metadata.is_primary, bootstrapping=self._bootstrapping
        ):
            return
        self._bootstrapping = True
        assert self._nursery is not None
        self._nursery.start_soon(self._bootstrap_root)

    async def _bootstrap_root(self) -> None:
        try:
            secret = self.config.root_password
            generated = secret is None
            password = secrets.token_urlsafe(18) if secret is None else secret.get_secret_value()
            salt = os.urandom(16)
            digest = await trio.to_thread.run_sync(
                functools.partial(hash_password, n=self._scrypt_n), password, salt
            )
            outcome = await self.system.run(
                self.metadata, CreateRootUser(self.config.root_username, digest)
            )
            if isinstance(outcome, Replied) and outcome.body[:4] == wire.RESULT_OK:
                log.info("created the root user %r", self.config.root_username)
                if generated:
                    self.announce(
                        f"root user {self.config.root_username!r} created; its generated "
                        f"password (shown once, stored only hashed): {password}"
                    )
        finally:
            self._bootstrapping = False

    def _maybe_expire_tokens(self) -> None:
        """Remove, as metadata primary, the tokens expired by now
        (``broker.core.maintenance.tokens_expiry_due``)."""
        machine = self.metadata.metadata
        if machine is None or not tokens_expiry_due(
            machine.state,
            now_us(),
            is_primary=self.metadata.is_primary,
            expiring=self._expiring_tokens,
        ):
            return
        self._expiring_tokens = True
        assert self._nursery is not None
        self._nursery.start_soon(self._expire_tokens)

    async def _expire_tokens(self) -> None:
        try:
            await self.system.run(self.metadata, ExpireTokens())
        finally:
            self._expiring_tokens = False

    def _maybe_move_revoked(self) -> None:
        """Report revoking partitions drained here, and as metadata primary expire the
        ones past the rebalancing timeout (``broker.core.liveness.Revocations``)."""
        machine = self.metadata.metadata
        if machine is None:
            return
        revocations = machine.state.revocations()
        if not revocations:
            return
        assert self._nursery is not None
        due = self._revocations.due(
            revocations,
            self._served,
            self._stored_group_offset,
            now_us(),
            is_primary=self.metadata.is_primary,
        )
        for command in due:
            self._nursery.start_soon(self._propose_revocation, command)

    def _stored_group_offset(self, revocation: RevocationInfo) -> tuple[bool, int | None]:
        host = self.partitions.get(
            (revocation.stream_id, revocation.topic_id, revocation.partition_id)
        )
        machine = None if host is None else host.partition_machine
        if machine is None:
            return False, None
        key = ConsumerKey(ConsumerKind.CONSUMER_GROUP, revocation.group_id)
        return True, machine.state.consumer_offset(key)

    async def _propose_revocation(self, command: RevocationDrained | ExpireRevocations) -> None:
        try:
            outcome = await self.system.run(self.metadata, command)
            if isinstance(command, RevocationDrained) and isinstance(outcome, Replied):
                key = (command.stream, command.topic, command.group, command.partition_id)
                self._served.forget(key, command.session)
        finally:
            self._revocations.finished(command)

    def served_group_poll(self, route: PartitionRoute, session: int, last_offset: int) -> None:
        assert route.consumer is not None
        key = (route.stream_id, route.topic_id, int(route.consumer.id), route.partition_id)
        self._served.served(key, session, last_offset)

    def heard(self, connection: Connection) -> None:
        if self.config.heartbeat.enabled:
            self._heartbeats.heard(connection, now_us())

    def connection_left(self, connection: Connection) -> None:
        self._heartbeats.closed(connection)

    def _maybe_evict_stale(self) -> None:
        """Evict the group members' connections that stopped talking, with Iggy's
        StaleClient, and end their sessions (``broker.core.liveness.Heartbeats``)."""
        machine = self.metadata.metadata
        if machine is None or not self.config.heartbeat.enabled:
            return
        assert self._nursery is not None
        stale = stale_members(self._heartbeats, now_us(), _context_of, machine.state.memberships)
        for connection, session in stale:
            log.warning(
                "evicting stale client %s (session %d): nothing heard for %.1f heartbeat intervals",
                connection.context.address,
                session,
                6 / 5,
            )
            connection.evict(EvictionReason.STALE_CLIENT)
            self._nursery.start_soon(self.system.run, self.metadata, EndSession(session))

    def _maybe_purge(self) -> None:
        """Truncate, as primary, each partition whose committed purge its state has not
        applied (``broker.core.maintenance.PurgesDue``)."""
        assert self._nursery is not None
        for group_id, generation in self._purges.due(self._refs, self._purge_view):
            self._nursery.start_soon(self._purge, self.groups[group_id], generation)

    def _purge_view(self, group_id: int) -> PurgeView | None:
        host = self.groups.get(group_id)
        if host is None:
            return None
        machine = host.partition_machine
        applied = None if machine is None else machine.state.purge_generation
        return PurgeView(applied, host.is_primary)

    async def _purge(self, host: GroupHost, generation: int) -> None:
        try:
            await self.system.run_partition(
                host, Operation.TRUNCATE_PARTITION, purge_body(generation)
            )
        finally:
            self._purges.finished(host.group_id)

    def _maybe_retain(self) -> None:
        """Propose, as primary, the retention of each partition whose oldest sealed
        segments expired or overflow its topic's share of size, once an interval
        (``broker.core.maintenance.RetentionsDue``, ``broker.core.retention``)."""
        machine = self.metadata.metadata
        if machine is None:
            return
        assert self._nursery is not None
        now = now_us()
        for group_id in self._retentions.due(now, self._hosted_partitions, self._retention_view):
            host = self.groups[group_id]
            offset = self._retention_offset(host, machine.state, now)
            if offset is not None:
                self._retentions.proposing(group_id)
                self._nursery.start_soon(self._propose_retention, host, offset)

    def _hosted_partitions(self) -> list[int]:
        return [group_id for group_id, ref in self._refs.items() if group_id in self.groups]

    def _retention_view(self, group_id: int) -> RetentionView | None:
        host = self.groups.get(group_id)
        if host is None or host.kind is not GroupKind.PARTITION:
            return None
        opened = host.partition_machine is not None and host.store is not None
        return RetentionView(host.is_primary, opened and not host.journal_busy)

    def _retention_offset(self, host: GroupHost, state: MetadataState, now: int) -> int | None:
        """The offset ``host``'s partition should retain from now, read from its journal
        (not busy: ``_retention_view``) and its topic's committed options."""
        ref = self._refs.get(host.group_id)
        machine = host.partition_machine
        if ref is None or machine is None or host.store is None:
            return None
        try:
            topic = state.topic(ref.stream_id, ref.topic_id)
        except StateError:
            return None  # deleted since: its group goes with the next reconcile
        defaults = self.config.topic
        expiry_us, size_bytes = topic_limits(
            topic,
            message_expiry_us=defaults.message_expiry_us,
            max_topic_size_bytes=defaults.max_topic_size_bytes,
        )
        return retention_due(
            machine.state,
            host.store.segments(),
            message_expiry_us=expiry_us,
            max_topic_size_bytes=size_bytes,
            partition_count=topic.partitions_count,
            segment_size_bytes=ref.segment_size_bytes or self.config.segment_size_bytes,
            now_us=now,
        )

    async def _propose_retention(self, host: GroupHost, offset: int) -> None:
        try:
            log.info("%s: retaining messages from offset %d", host.path.name, offset)
            await self.system.run_partition(host, Operation.TRUNCATE_PARTITION, retain_body(offset))
        finally:
            self._retentions.finished(host.group_id)

    def auto_commit(
        self, group: CoreGroup, route: PartitionRoute, offset: int, user_id: int
    ) -> None:
        """Store ``offset`` for the consumer of ``route`` on behalf of ``user_id`` (the
        polling user, charged for a new stored offset as for a store it made itself)."""
        host = self.groups.get(group.group_id)
        if host is None:
            return  # the partition went: its offsets went with it
        start = self._autocommits.add(host.group_id, route.consumer, (route, offset, user_id))
        if start:
            if self._nursery is None:
                self._autocommits.stopped(host.group_id)
                return
            self._nursery.start_soon(self._run_auto_commit, host)

    async def _run_auto_commit(self, host: GroupHost) -> None:
        """Store the group's auto-commits one request at a time, the newest offset per
        consumer winning (``broker.core.maintenance.AutoCommits``)."""
        commits = self._autocommits
        try:
            while (item := commits.next(host.group_id)) is not None:
                route, offset, user_id = item
                body = store_offset_body(route, offset, user_id)
                await self.system.run_partition(host, Operation.STORE_CONSUMER_OFFSET, body)
        finally:
            commits.stopped(host.group_id)

    # -- statistics -------------------------------------------------------------------------

    def partition_stats(self, stream_id: int, topic_id: int, partition_id: int) -> PartitionStats:
        host = self.partitions.get((stream_id, topic_id, partition_id))
        if host is None or host.partition_machine is None or host.store is None:
            return PartitionStats()
        state = host.partition_machine.state
        if host.journal_busy:
            # A worker thread is rewriting the journal and its index: report what they said
            # last (the offset is committed state, read as it is now).
            seen = host.stats_seen
            return dataclasses.replace(seen, current_offset=state.current_offset)
        # Sizes and counts of what a poll can still return, as Iggy reports them: a purge
        # or retention leaves only the retained messages counted, before the segment files
        # of the retired ones are deleted. Read from the journal's index.
        stats = PartitionStats(
            segments_count=max(1, host.store.segments_count()),
            current_offset=state.current_offset,
            size_bytes=state.retained_bytes,
            messages_count=max(0, state.retained_messages),
        )
        host.stats_seen = stats
        return stats

    def partition_segments(self, group: CoreGroup) -> list[SegmentInfo] | None:
        """The journal segments of a partition group here, or None while its journal is
        busy in a worker thread or not open (``broker.core.handlers.Node``)."""
        host = self.groups.get(group.group_id)
        if host is None or host.store is None or host.journal_busy:
            return None
        return host.store.segments()

    def runtime_report(self) -> StatsReport:
        uptime = time.monotonic() - self.started_at
        report = StatsReport(node=_plain(self.counters))
        report.node["uptime_s"] = uptime
        report.node["replica"] = self.replica_index
        report.node["replicas"] = self.replica_count
        usage = self.disk.usage
        report.node["disk_used_bytes"] = usage.used_bytes
        report.node["disk_free_bytes"] = usage.free_bytes
        report.node["disk_budget_bytes"] = usage.budget_bytes
        report.node["disk_full"] = usage.full
        report.node["bytes_retained"] = sum(
            host.store.size_bytes()
            for host in self.groups.values()
            if host.partition is not None and host.store is not None and not host.journal_busy
        )
        report.node["bytes_deleted"] = self.disk.bytes_deleted
        report.node["segments_deleted"] = self.disk.segments_deleted
        report.node["long_polls_waiting"] = len(self.long_polls)
        report.node["long_polls_started"] = self.long_polls.started
        report.node["long_polls_refused"] = self.long_polls.refused
        report.node["sync_scope"] = self.flusher.scope
        report.node["flushes"] = self.flusher.counters.rounds
        report.node["groups_flushed"] = self.flusher.counters.groups_flushed
        for group_id, host in sorted(self.groups.items()):
            if host.partition is not None:
                p = host.partition
                name = f"partition {p.stream_id}/{p.topic_id}/{p.partition_id}"
            else:
                name = "metadata"
            entry = group_report(host.counters, uptime)
            entry["group"] = group_id
            entry["primary"] = host.is_primary
            entry["persisted"] = host.persisted
            replica = host.replica
            if replica is not None:
                entry.update(view=replica.view, op=replica.op, commit=replica.commit_max)
                entry["status"] = replica.status.value
            report.groups[name] = entry
        return report

    def _stats_payload(self) -> wire.Stats:
        machine = self.metadata.metadata
        assert machine is not None
        state = machine.state
        streams = state.streams()
        topics = [t for s in streams for t in s.topics]
        partitions = [
            self.partition_stats(t.stream_id, t.id, p.id) for t in topics for p in t.partitions
        ]
        groups = sum(len(state.consumer_groups(t.stream_id, t.id)) for t in topics)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        uptime = time.monotonic() - self.started_at
        page = os.sysconf("SC_PAGE_SIZE")
        total_memory = page * os.sysconf("SC_PHYS_PAGES")
        available = page * os.sysconf("SC_AVPHYS_PAGES")
        disk = shutil.disk_usage(self.data_dir)
        return wire.Stats(
            process_id=os.getpid(),
            cpu_usage=float(100 * (usage.ru_utime + usage.ru_stime) / max(uptime, 1e-9)),
            total_cpu_usage=0.0,
            memory_usage=usage.ru_maxrss * 1024,
            total_memory=total_memory,
            available_memory=available,
            run_time=int(uptime * 1_000_000),
            start_time=self.started_at_us,
            read_bytes=self.counters.bytes_received,
            written_bytes=self.counters.bytes_sent,
            messages_size_bytes=sum(p.size_bytes for p in partitions),
            streams_count=len(streams),
            topics_count=len(topics),
            partitions_count=len(partitions),
            segments_count=sum(p.segments_count for p in partitions),
            messages_count=sum(p.messages_count for p in partitions),
            clients_count=len(state.sessions()),
            consumer_groups_count=groups,
            hostname=socket.gethostname(),
            os_name=platform.system(),
            os_version=platform.release(),
            kernel_version=platform.version(),
            iggy_server_version=f"viewstream {__version__}",
            iggy_server_semver=None,
            cache_metrics=(),
            threads_count=threading.active_count(),
            free_disk_space=disk.free,
            total_disk_space=disk.total,
        )

    def cluster_metadata(self) -> wire.ClusterMetadata:
        names = self.config.cluster_node_names
        # Without client_addresses the node knows only its own client address: it
        # reports itself alone, under its own name and index.
        roster = (
            list(enumerate(zip(self.config.client_addresses, names, strict=True)))
            if self.config.client_addresses
            else [(self.replica_index, (self.config.address, names[self.replica_index]))]
        )
        primary = self.metadata.primary_index
        nodes = []
        for index, (address, name) in roster:
            host, port = parse_address(address)
            if index == self.replica_index and self.address is not None:
                port = self.address[1]
            http_port = self._http_port(index)
            ws_port = self._ws_port(index)
            nodes.append(
                wire.ClusterNode(
                    name=name,
                    ip=host,
                    tcp_port=port,
                    quic_port=0,
                    http_port=http_port,
                    websocket_port=ws_port,
                    role=(
                        wire.ClusterNodeRole.LEADER
                        if index == primary
                        else wire.ClusterNodeRole.FOLLOWER
                    ),
                    status=wire.ClusterNodeStatus.HEALTHY,
                )
            )
        return wire.ClusterMetadata(name=self.config.cluster_name, nodes=tuple(nodes))

    def _http_port(self, index: int) -> int:
        """Node ``index``'s HTTP port as cluster metadata reports it (0: none known)."""
        if index == self.replica_index:
            if self.http_address is not None:
                return self.http_address[1]
            if not self.config.http_address:
                return 0
        if self.config.http_addresses:
            return parse_address(self.config.http_addresses[index])[1]
        if index == self.replica_index:
            return parse_address(self.config.http_address)[1]
        return 0

    def _ws_port(self, index: int) -> int:
        """Node ``index``'s WebSocket port as cluster metadata reports it: this node's
        bound listener, another's from ``ws_addresses``; 0 for none or unknown."""
        if index == self.replica_index:
            return 0 if self.ws_address is None else self.ws_address[1]
        addresses = self.config.ws_addresses
        if index < len(addresses) and addresses[index]:
            return parse_address(addresses[index])[1]
        return 0

    # -- requests ---------------------------------------------------------------------------

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response:
        """Answer one request frame (called in order, one at a time per connection)."""
        self.counters.requests += 1
        started = trio.current_time()
        response = await self._handle(context, frame)
        self.requests.observe(_command_label(frame), trio.current_time() - started, response.parts)
        if response.refusal:
            self.log_refusal(context, _command_name(frame), response.refusal, frame=frame)
        return response

    def log_refusal(
        self,
        context: ConnectionContext,
        command: str,
        reason: str,
        *,
        frame: Frame | None = None,
    ) -> None:
        """One INFO line for a refusal, within the connection's budget (no payloads)."""
        logged, left_out = context.refusals.admit(trio.current_time())
        if not logged:
            return
        client = context.client_id
        if frame is not None and len(frame.data) >= 144:
            client = int.from_bytes(bytes(frame.data[128:144]), "little")
        log.info(refusal_line(context.address, client, command, reason, left_out=left_out))

    async def _handle(self, context: ConnectionContext, frame: Frame) -> Response:
        """Step the request's flow (``broker.core.handlers``), carrying out each effect
        it waits on."""
        flow = handle(self, context, frame)
        result: Any = None
        try:
            while True:
                effect = flow.send(result)
                result = await self._effects[type(effect)](effect)
        except StopIteration as stop:
            response: Response = stop.value
            return response

    def _effect_table(self) -> dict[type, Callable[[Any], Awaitable[Any]]]:
        """How this node carries out every effect a flow yields."""
        return {
            Submit: self._do_submit,
            CatchUp: self._do_catch_up,
            ReadBarrier: self._do_read_barrier,
            PurgeApplied: self._do_purge_applied,
            AwaitMessages: self._do_await_messages,
            PasswordLogin: self._do_password_login,
            VerifyPassword: self._do_verify_password,
            HashPassword: self._do_hash_password,
        }

    async def _do_submit(self, effect: Submit) -> Outcome:
        host = self.groups.get(effect.group_id)
        if host is None:
            return Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)  # it went since admitted
        return await submit_and_wait(
            self.waiting,
            host,
            effect.client_id,
            effect.session,
            effect.request,
            effect.operation,
            effect.body,
            effect.checksum,
        )

    async def _do_catch_up(self, effect: CatchUp) -> None:
        host = self.groups.get(effect.group_id)
        if host is not None:
            await self._catch_up(host, effect.op)

    async def _do_purge_applied(self, effect: PurgeApplied) -> None:
        host = self.groups.get(effect.group_id)
        if host is not None:
            with trio.move_on_after(CATCH_UP_TIMEOUT_S):
                await host.wait_purged(effect.generation)

    async def _do_read_barrier(self, effect: ReadBarrier) -> bool:
        host = self.groups.get(effect.group_id)
        if host is None:
            return False
        if (
            host.opened.is_set()
            and readable(host.replica, effect.op)
            and not (effect.fresh and self.bus is not None)
            and not (effect.journal and host.journal_busy)
        ):
            # What the waits below find at once, without a checkpoint and a cancel scope
            # per read: a warm consumer's poll on an up-to-date replica.
            return True
        await host.opened.wait()
        if not await self._read_barrier(host, effect.op, fresh=effect.fresh):
            return False
        if effect.journal:
            await host.wait_journal_readable()
        return True

    async def _do_password_login(self, effect: PasswordLogin) -> UserInfo | LoginsBusy | None:
        """Within the host's turn: wait out its failure delay, then check the password
        (scrypt, tens of milliseconds, off the event loop)."""
        throttle = self.login_throttle
        host = effect.host
        failing = throttle.delay_s(host, trio.current_time()) > 0
        waiting_max = HOST_LOGINS_WAITING_MAX if failing else None
        try:
            async with self._password_turns.turn(host, waiting_max=waiting_max):
                delay = throttle.delay_s(host, trio.current_time())
                if delay > 0:
                    await trio.sleep(delay)  # this host failed to log in several times lately
                user = login_user(self._state(), effect.username)
                if user is None or not await self._check_password(user.password, effect.password):
                    throttle.failed(host, trio.current_time())
                    return None
                return user
        except TurnsBusy:
            return LOGINS_BUSY

    async def _do_verify_password(self, effect: VerifyPassword) -> bool:
        return await self._check_password(effect.stored, effect.password)

    async def _do_hash_password(self, effect: HashPassword) -> PasswordHash:
        return await self._hash_new_password(effect.password)

    # -- what the flows read of this node (``broker.core.handlers.Node``) ------------------

    @property
    def balancer(self) -> Balancer:
        return self._balancer

    @property
    def partitions_max(self) -> int | None:
        return PARTITION_DESCRIPTORS.partitions_max

    def metadata_machine(self) -> MetadataMachine | None:
        return self.metadata.metadata

    def metadata_view(self) -> MetadataView:
        metadata = self.metadata
        machine = metadata.metadata
        assert machine is not None
        return MetadataView(
            metadata.applied_op, metadata.known_op, metadata.is_primary, machine.state.session
        )

    def partition(self, route: PartitionRoute) -> GroupHost:
        host = self.partitions.get((route.stream_id, route.topic_id, route.partition_id))
        if host is None:
            # Committed metadata names it but its group is still opening here.
            raise StateError(ErrorCode.PARTITION_NOT_FOUND, "partition group not open yet")
        return host

    def cluster_nodes(self) -> tuple[wire.ClusterNode, ...]:
        return self.cluster_metadata().nodes

    def now_us(self) -> int:
        return now_us()

    def draw_token(self) -> str:
        return secrets.token_urlsafe(TOKEN_SIZE_BYTES)

    def login_failed(self, host: str) -> None:
        self.login_throttle.failed(host, trio.current_time())

    def login_succeeded(self, host: str) -> None:
        self.login_throttle.succeeded(host)

    def session_admitted(self, context: ConnectionContext, header: RequestHeader) -> None:
        del context, header  # only the simulator's observers look

    def node_read(
        self, context: ConnectionContext, code: CommandCode, session: int, payload: Any
    ) -> bytes:
        """A read of this node's own facts (``_node_reads``)."""
        return self._node_reads[code](context, session, payload)

    def runtime_stats(self) -> bytes:
        report = self.runtime_report()
        return json.dumps({"node": report.node, "groups": report.groups}).encode()

    async def _catch_up(self, host: GroupHost, op: int) -> None:
        """Wait (bounded) until ``host`` has applied ``op``. A backup that has not asks the
        primary's node for its commit first (``ReplicaBus.read_index``): it would learn
        it from the next prepare or heartbeat, up to half a second later."""
        if host.applied_op >= op:
            return  # the common case: no timer to arm (a cancel scope per request)
        with trio.move_on_after(CATCH_UP_TIMEOUT_S):
            if host.applied_op < op and self.bus is not None and not host.is_primary:
                await self.bus.read_index(host)
            await host.wait_applied(op)

    async def _read_barrier(self, host: GroupHost, op: int, *, fresh: bool = False) -> bool:
        """Wait (bounded) until ``host`` may answer a read of committed state that must
        see ``op`` (``GroupHost.wait_readable``); False when it still may not.

        ``fresh``: the read must also see everything the group has acknowledged to any
        client (a stored consumer offset the client may have stored through another node).
        A replica asked for a fresh read asks for a confirmed read index
        (``ReplicaBus.read_index``: a backup the primary's commit, a primary its backups'
        word that it still leads) and waits until it has applied that far; a backup behind
        ``op`` asks the primary's commit so as not to wait for the next heartbeat.
        """
        with trio.move_on_after(CATCH_UP_TIMEOUT_S):
            await host.wait_readable(0)  # normal status, the view's start op applied
            behind = host.applied_op < op and not host.is_primary
            if (fresh or behind) and self.bus is not None:
                commit = await self.bus.read_index(host, confirmed=fresh)
                if commit is None and fresh:
                    return False
                op = max(op, commit or 0)
            await host.wait_readable(op)
            return True
        return False

    async def _check_password(self, stored: PasswordHash, password: str) -> bool:
        """scrypt verification in a worker thread, within the node's password-check bound."""
        try:
            return await trio.to_thread.run_sync(
                verify_password, stored, password, limiter=self._password_checks
            )
        finally:
            self.counters.password_checks += 1

    async def _hash_new_password(self, password: str) -> PasswordHash:
        """scrypt with a salt drawn here, in a worker thread within the same bound."""
        salt = os.urandom(SALT_SIZE_BYTES)
        try:
            return await trio.to_thread.run_sync(
                functools.partial(hash_password, n=self._scrypt_n),
                password,
                salt,
                limiter=self._password_checks,
            )
        finally:
            self.counters.password_checks += 1

    @property
    def _scrypt_n(self) -> int:
        return 1 << self.config.password_hash_cost_log2

    def _client_connections(self) -> list[ClientConnection]:
        """This node's open client connections (Iggy's answer is node-local too), in
        address order."""
        contexts = sorted(
            (connection.context for connection in self.open_connections),
            key=lambda context: context.address,
        )
        return [
            ClientConnection(context.bound_session, TRANSPORT_TCP, context.address)
            for context in contexts
        ]

    def _machine(self) -> MetadataMachine:
        machine = self.metadata.metadata
        assert machine is not None
        return machine

    def _state(self) -> MetadataState:
        return self._machine().state

    def _node_read_table(self) -> dict[CommandCode, _NodeRead]:
        """The read of every command on ``Route.NODE_READ``."""
        return {
            CommandCode.GET_ME: self._get_me,
            CommandCode.GET_CLIENTS: self._get_clients,
            CommandCode.GET_CLIENT: self._get_client,
            CommandCode.GET_CLUSTER_METADATA: self._get_cluster_metadata,
            CommandCode.DESCRIBE_OPTIONS: self._describe_options,
            CommandCode.GET_STATS: self._get_stats,
            CommandCode.GET_SNAPSHOT_FILE: self._get_snapshot,
        }

    def _get_me(self, context: ConnectionContext, session: int, _: wire.RequestPayload) -> bytes:
        return self._machine().get_me(session, TRANSPORT_TCP, context.address)

    def _get_clients(self, _: ConnectionContext, session: int, __: wire.RequestPayload) -> bytes:
        return self._machine().get_clients(session, self._client_connections())

    def _get_client(
        self, _: ConnectionContext, session: int, payload: wire.RequestPayload
    ) -> bytes:
        assert isinstance(payload, wire.ClientRef)
        return self._machine().get_client(payload, session, self._client_connections())

    def _get_cluster_metadata(
        self, _: ConnectionContext, __: int, ___: wire.RequestPayload
    ) -> bytes:
        return self.cluster_metadata().encode()

    def _describe_options(
        self, _: ConnectionContext, __: int, payload: wire.RequestPayload
    ) -> bytes:
        """Any logged-in user, as Iggy: a static catalog and this node's defaults."""
        assert isinstance(payload, wire.DescribeOptions)
        return options_catalog(payload.scope, self.config.segment_size_bytes).encode()

    def _get_stats(self, _: ConnectionContext, session: int, __: wire.RequestPayload) -> bytes:
        denied = self._state().permits(session, Action.READ_SERVERS)
        if denied is not None:
            raise StateError(denied)
        return self._stats_payload().encode()

    def _get_snapshot(
        self, _: ConnectionContext, session: int, payload: wire.RequestPayload
    ) -> bytes:
        """A zip of this node's diagnostics (``broker.core.diagnostics``), with
        ``read_servers`` or ``manage_servers``, as Iggy's snapshot rule says."""
        assert isinstance(payload, wire.GetSnapshot)
        denied = self._state().permits(session, Action.READ_SERVERS)
        if denied is not None:
            raise StateError(denied)
        plan = plan_snapshot(payload)
        sources = self._snapshot_sources()
        texts = {section: sources[section]() for section in plan.sections}
        return snapshot_archive(plan, texts, now_us())

    def _snapshot_sources(self) -> dict[SnapshotSection, Callable[[], str]]:
        """The text of every section ``broker.core.diagnostics.SECTIONS_SERVED`` names."""
        return {
            SnapshotSection.FILESYSTEM_OVERVIEW: self._filesystem_overview,
            SnapshotSection.RESOURCE_USAGE: self._resource_usage,
            SnapshotSection.TEST: lambda: TEST_SECTION_TEXT,
            SnapshotSection.SERVER_CONFIG: self._server_config,
        }

    def _filesystem_overview(self) -> str:
        stats = self._stats_payload()
        return (
            f"data_dir: {self.config.data_dir}\n"
            f"data_dir_used_bytes: {self.disk.usage.used_bytes}\n"
            f"free_disk_space_bytes: {stats.free_disk_space}\n"
            f"total_disk_space_bytes: {stats.total_disk_space}\n"
        )

    def _resource_usage(self) -> str:
        """GET_STATS's figures and the per-group counters (``viewstream stats``), as JSON."""
        report = self.runtime_report()
        body = {
            "stats": dataclasses.asdict(self._stats_payload()),
            "node": report.node,
            "groups": report.groups,
        }
        return json.dumps(body, indent=2, sort_keys=True, default=str) + "\n"

    def _server_config(self) -> str:
        """The node's effective settings as JSON; secrets are masked by pydantic."""
        return self.config.model_dump_json(indent=2) + "\n"


# -- the ticker -------------------------------------------------------------------------------


async def run_ticker(period_s: float, ticker: GroupTicker) -> None:
    """Keep ``ticker``'s ticks on trio's clock, one per ``period_s``, forever, without
    drift: wake the loop only on the ticks a group is due on (``GroupTicker``).

    Ticks are counted from the start on trio's clock, not from when the previous wake
    ran, so a slow pass does not push every later tick back; a loop that stalled past a
    due tick delivers at most ``TICKS_CATCH_UP_MAX`` ticks past it.
    """
    ticker.start(trio.current_time, period_s)
    while True:
        changed = trio.Event()
        deadline = ticker.sleep_target(changed.set)
        with trio.move_on_at(math.inf if deadline is None else deadline):
            await changed.wait()
        ticker.catch_up()


# -- the system client ------------------------------------------------------------------------


class SystemRunner:
    """Runs the node's own client's requests (``broker.core.system``): root user creation,
    auto-commits, purges, token expiry, session ends.

    One request at a time per group (a client may have one request in flight), several
    groups at once; one register at a time, shared by them all.
    """

    def __init__(self, node: Node) -> None:
        self._node = node
        self._client = SystemClient(int.from_bytes(os.urandom(16), "little") | 1)
        self._locks: dict[int, trio.Lock] = {}
        self._register_lock = trio.Lock()

    def _lock(self, group_id: int) -> trio.Lock:
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = trio.Lock()
        return lock

    async def _ensure_session(self) -> bool:
        async with self._register_lock:
            if self._client.session:
                return True
            node = self._node
            outcome = await _submit_call(node.waiting, node.metadata, self._client.register())
            return self._client.registered(outcome)

    async def run(self, host: GroupHost, command: MetadataCommand) -> Outcome:
        operation, body = encode_command(command)
        return await self._run(host, operation, body)

    async def run_partition(self, host: GroupHost, operation: int, body: bytes) -> Outcome:
        return await self._run(host, operation, body)

    async def _run(self, host: GroupHost, operation: int, body: bytes) -> Outcome:
        async with self._lock(host.group_id):
            attempt = 0
            while True:
                attempt += 1
                if not await self._ensure_session():
                    return NO_SESSION
                call = self._client.call(operation, body, now_us())
                outcome = await _submit_call(self._node.waiting, host, call)
                if self._client.answered(outcome, attempt):
                    return outcome


async def _submit_call(waiting: WaitingRequests, host: GroupHost, call: SystemCall) -> Outcome:
    return await submit_and_wait(
        waiting,
        host,
        call.client_id,
        call.session,
        call.request,
        call.operation,
        call.body,
        call.checksum,
    )


class WaitingRequests:
    """The client requests a node waits on its groups for, oldest first, each until its
    deadline ``REQUEST_TIMEOUT_S`` after it was submitted; one task per node
    (``Node._expire_requests``) answers the late ones with a transient error, instead of a
    cancel scope and a timer per request.

    Every request waits as long, so deadlines fall in the order requests were added: the
    first entry (insertion-ordered dict) is the earliest, and an answered request leaves
    in O(1). Bounded by the requests in flight on the node's connections.
    """

    __slots__ = ("_entries", "_timeout_s")

    def __init__(self, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._entries: dict[Submission, tuple[float, Abandons, ReplyWaiter]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, host: Abandons, submission: Submission, waiter: ReplyWaiter, now: float) -> None:
        self._entries[submission] = (now + self._timeout_s, host, waiter)

    def discard(self, submission: Submission) -> None:
        self._entries.pop(submission, None)

    def next_check(self, now: float) -> float:
        """When to look again: the earliest deadline, or, with none waiting, one timeout
        from ``now`` (nothing added after ``now`` falls due before that)."""
        for deadline, _, _ in self._entries.values():
            return deadline
        return now + self._timeout_s

    def expire(self, now: float) -> None:
        """Answer every request whose deadline passed and that has no outcome yet: its
        group forgets it, and its submitter gets 58 or 59 (``timed_out``)."""
        entries = self._entries
        while entries:
            submission = next(iter(entries))
            deadline, host, waiter = entries[submission]
            if deadline > now:
                return
            del entries[submission]
            if waiter.outcome is None:
                host.abandon(submission)
                waiter.deliver(timed_out(submission))


async def expire_requests(waiting: WaitingRequests) -> None:
    """Answer the requests no group answered in time, for ever: this wakes at the
    earliest deadline, and at least once per timeout (never for each request)."""
    while True:
        await trio.sleep_until(waiting.next_check(trio.current_time()))
        waiting.expire(trio.current_time())


class Abandons(Protocol):
    """What expiring a request needs of its group's host."""

    def abandon(self, submission: Submission) -> None: ...


async def submit_and_wait(
    waiting: WaitingRequests,
    host: GroupHost,
    client_id: int,
    session: int,
    request: int,
    operation: int,
    body: RequestBody,
    checksum: bytes,
) -> Outcome:
    """Submit a request to ``host`` and wait (bounded by ``waiting``'s deadline) for its
    outcome; ``checksum`` is its identity digest (``broker.core.identity``)."""
    waiter = ReplyWaiter()
    submission = Submission(
        client_id, session, request, operation, body, now_us(), waiter.deliver, checksum
    )
    host.submit(submission)
    if waiter.outcome is None:  # not refused at once
        waiting.add(host, submission, waiter, trio.current_time())
        try:
            await waiter.event.wait()
        finally:
            waiting.discard(submission)
    else:
        await trio.lowlevel.checkpoint()  # as waiting would: a refusal loop still yields
    assert waiter.outcome is not None
    return waiter.outcome


def _command_name(frame: Frame) -> str:
    """The command a frame carries, for a log line (its code if it does not parse)."""
    try:
        header = frame.request_header()
    except ProtocolError:
        return f"command byte {frame.data[60] if len(frame.data) > 60 else '?'}"
    try:
        return request_command_code(header).name
    except ProtocolError:
        return f"{header.operation.name} (code {header.code})"


_LABEL_FIELDS: Final = struct.Struct(
    "<"
    "176x"  # the request header up to its operation
    "B"  # 176  operation
    "19x"  # padding, session, user id
    "I"  # 196  code (read when the operation is NON_REPLICATED)
)
_LABELS: dict[tuple[int, int], str] = {}
"""Metrics labels by (operation, code) already named: at most one per command code."""


def _command_label(frame: Frame) -> str:
    """The command a frame carries, as a metrics label: a ``CommandCode`` name, or
    ``UNKNOWN_COMMAND`` (the label set stays bounded whatever clients send). The name
    depends on the operation (and its code) alone: once known, it is looked up, not
    parsed from the whole header again."""
    data = frame.data
    if len(data) < _LABEL_FIELDS.size:
        return UNKNOWN_COMMAND
    operation, code = _LABEL_FIELDS.unpack_from(data)
    key = (operation, code if operation == Operation.NON_REPLICATED else 0)
    label = _LABELS.get(key)
    if label is not None:
        return label
    try:
        label = request_command_code(frame.request_header()).name
    except ProtocolError:
        return UNKNOWN_COMMAND
    _LABELS[key] = label
    return label


def _plain(counters: NodeCounters) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(counters)


def _context_of(connection: Connection) -> ConnectionContext:
    return connection.context


def _dir_of(ref: PartitionRef) -> str:
    """The directory name of a partition group under ``partitions/``."""
    return f"{ref.stream_id}-{ref.topic_id}-{ref.partition_id}-{ref.created_op}"


def _group_of_dir(name: str) -> int | None:
    """The group id of a partition directory name (:func:`_dir_of`), or None."""
    parts = name.split("-")
    if len(parts) != 4 or not all(part.isdigit() for part in parts):
        return None
    stream_id, topic_id, partition_id, created_op = (int(part) for part in parts)
    return partition_group_id(stream_id, topic_id, partition_id, created_op)
