"""The replica bus: one authenticated TCP connection per pair of nodes, carrying every group.

Purpose: move consensus messages between the nodes of a cluster, and forward client
requests that reached a node whose replica of the group is not the primary.

Invariants:

1. One connection per peer pair: the lower replica index dials, the higher accepts; a new
   accepted connection from a peer replaces the old one. Every group shares it.
2. Nothing is read from a peer before it proved it knows the cluster secret: the acceptor
   sends a random challenge, the dialer answers with an HMAC-SHA256 over both nonces and
   both indexes, and the acceptor proves itself back the same way (mutual, replay-proof
   because both sides contribute a fresh nonce). A stranger is disconnected after the
   handshake timeout or the first bad byte.
3. Bounded: a bus frame is at most ``BUS_FRAME_SIZE_MAX``; a peer's outgoing queue holds
   at most ``OUTGOING_BYTES_MAX`` (more is dropped: VSR retransmits, and a forwarded
   request times out into a transient error); reconnects back off up to
   ``RECONNECT_BACKOFF_MAX_S``.
4. Sends are gathered and in order: a frame queued while the peer's writer task holds no
   unsent bytes is written at once, without waiting, in one gathered write of everything
   queued (the kernel usually takes a whole prepare); what the kernel does not take yet
   is left queued for the writer task, which hands everything queued since its last
   write to the kernel in one gathered ``sendmsg``. A frame is never written past bytes
   queued before it.
5. A forwarded request is answered exactly once: by the primary's outcome, or, if the
   connection to the primary drops first, with ``TransientNotCommitted`` (its fate is
   unknown).
6. A read index is the primary's commit number, asked for by a backup that must serve a
   read no older than anything the group acknowledged (a stored consumer offset: then
   confirmed, ``broker.core.reads``, by enough replicas in the asker's view that no newer
   view can have committed anything), or that lacks ops the primary committed (a
   connection's own writes, the op creating a group it was just sent traffic for). The
   primary answers its commit only in normal status in the asker's view, and sends a
   ``Commit`` to the asker on the same link just before its answer, so the backup knows
   the commit (and repairs what it lacks) by the time it reads the answer; another
   replica answers whether it is in that view. A link that drops answers every pending
   ask of it as "not in the view".
7. A consensus message for a group this node has not created yet is held (at most
   ``HELD_MESSAGES_MAX`` at once, each at most ``GROUP_WAIT_S``) until the group opens,
   then delivered; otherwise dropped and counted, like a lost message.
8. Descriptors are bounded: at most ``BUS_HANDSHAKES_MAX`` accepted connections are in
   the handshake at once (one more makes the oldest give way: a stranger holding idle
   sockets cannot lock the peers out, it must out-pace their one round trip), and at
   most ``BUS_CONNECTIONS_PER_PEER_MAX`` authenticated ones per roster peer (more are
   closed at once). Every such refusal is logged, rate-limited. The bus holds at most
   ``bus_descriptors_max(replica_count)`` descriptors.
9. A request for a group whose primary's link is down waits for the link (at most
   ``FORWARDS_WAITING_MAX`` at once, each at most ``LINK_WAIT_S``), then goes back to its
   group, which routes it again; a request still waiting then is refused with
   ``TransientNotAccepted`` (nothing of it was sent).

10. With ``bus_tls_*`` set, every bus connection is mutual TLS (1.2 or 1.3): each side
   presents its certificate and refuses a peer whose certificate does not chain to the
   cluster's CA (``bus_tls_ca_file``), or that presents none, before a byte of the
   secret handshake is read. Names in certificates are not checked: the CA vouches for
   membership of the cluster, and the secret handshake (invariant 2), which runs inside
   TLS, for which replica a peer is. The TLS handshake counts against the same slot and
   timeout as the secret handshake (invariant 8).

Wire format: after the handshake (inside TLS when it is on), frames of
``[size u32][kind u8][3 zero bytes]`` and ``size`` payload bytes. Kind 1 carries one
consensus frame (``consensus.messages``, with its own checksum), kind 2 a forwarded
request, kind 3 its outcome, kind 4 a read-index ask, kind 5 its answer.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import os
import random
import ssl
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import trio

from broker.core.forwarding import Forwards, forward_target
from broker.core.groups import Outcome, Refused, Replied, SessionLost, Submission
from broker.core.reads import ReadIndexRound, read_index_answer
from broker.core.refusals import RefusalLimiter
from broker.runtime.config import Config, parse_address
from broker.runtime.group import GroupHost
from broker.runtime.stats import NodeCounters
from consensus import ClientError, Message, MessageError, Prepare, decode_message
from consensus.messages import MESSAGE_SIZE_MAX, Commit, encode_message_parts
from sdk.wire import IggyErrorCode

log = logging.getLogger("viewstream.bus")

NONCE_SIZE: Final = 32
MAC_SIZE: Final = 32
HANDSHAKE_TIMEOUT_S: Final = 5.0
"""An accepted connection that has not authenticated within this long is closed."""
BUS_HANDSHAKES_MAX: Final = 8
"""Accepted connections in the handshake at once; one more closes the oldest of them."""
BUS_CONNECTIONS_PER_PEER_MAX: Final = 2
"""Authenticated connections accepted from one peer at once: its link and the redial that
replaces it; one more is closed at once."""
BUS_LISTENERS_MAX: Final = 2
"""Listening sockets of the bus (an IPv4 and an IPv6 one at most)."""
BUS_FRAME_SIZE_MAX: Final = MESSAGE_SIZE_MAX + 1024
OUTGOING_BYTES_MAX: Final = 256 * 1024 * 1024
RECONNECT_BACKOFF_MIN_S: Final = 0.05
RECONNECT_BACKOFF_MAX_S: Final = 2.0
RECEIVE_BYTES_MAX: Final = 1 << 20
SOCKET_BUFFER_BYTES: Final = 4 * 1024 * 1024
"""A link's kernel send and receive buffers, each (the kernel caps them at its
``wmem_max``/``rmem_max``)."""
LARGE_BUFFER_KEPT_BYTES_MAX: Final = 8 * 1024 * 1024
"""A link keeps its buffer for large frames between frames up to this size; a larger
one, needed for a rare huge prepare, is given back after it."""
FRAMES_PER_TURN_MAX: Final = 64
"""Frames a link's reader dispatches before it lets other tasks run (it reads without
waiting while bytes are there, so a busy link must give way now and then)."""
READ_AHEAD_BYTES: Final = 64 * 1024
"""A link's read-ahead buffer: control messages are read many per call into it; a larger
frame goes to its own buffer."""
GROUP_WAIT_S: Final = 3.0
"""How long a forwarded request or a peer message for a group this node does not host
yet waits for it."""
HELD_MESSAGES_MAX: Final = 1024
"""Peer messages held at once for groups not created here yet; more are dropped."""
LINK_WAIT_S: Final = 3.0
"""How long a request for a group's primary waits for that primary's link to come back
(longer than the longest redial backoff, ``RECONNECT_BACKOFF_MAX_S``)."""
FORWARDS_WAITING_MAX: Final = 1024
"""Requests waiting at once for a primary's link; more are refused with 58 at once."""
IOVECS_MAX: Final = 512
# 2: forwards carry the request's identity digest; 3: a prepare frame's checksum covers
# its headers (its body has its own), and a forwarded send carries its verified batch.
_MAGIC: Final = b"VSBUS\x00\x03\x00"

_FRAME: Final = struct.Struct("<IB3x")  # payload size, kind
_HELLO_DIAL: Final = struct.Struct(f"<B{NONCE_SIZE}s{MAC_SIZE}s")  # replica, nonce, mac
# token, group, client id (u128), session, request, operation, timestamp, request checksum
_FORWARD: Final = struct.Struct("<QQ16sQQIQ16s")
# token, kind, op, commit, view, status (or the session error)
_FORWARD_REPLY: Final = struct.Struct("<QBQQQI")
# token, group, view of the asker
_READ_INDEX: Final = struct.Struct("<QQQ")
# token, answer (0: not in the asker's view, 1: its primary, with its commit, 2: a replica
# in the view that is not its primary), commit
_READ_INDEX_REPLY: Final = struct.Struct("<QBQ")
_ANSWER_PRIMARY: Final = 1
_ANSWER_IN_VIEW: Final = 2


class FrameKind(enum.IntEnum):
    MESSAGE = 1
    FORWARD = 2
    FORWARD_REPLY = 3
    READ_INDEX = 4
    READ_INDEX_REPLY = 5


class _ReplyKind(enum.IntEnum):
    REPLIED = 1
    REFUSED = 2
    SESSION_LOST = 3


_SESSION_ERRORS: Final = {ClientError.NO_SESSION: 1, ClientError.SESSION_EVICTED: 2}
_SESSION_ERRORS_BY_CODE: Final = {code: error for error, code in _SESSION_ERRORS.items()}


def bus_descriptors_max(replica_count: int) -> int:
    """The most descriptors the bus of one node of ``replica_count`` holds (invariant 8):
    its listeners, the connections in the handshake, and per peer the connections it
    accepted or dialed (a pair of nodes uses one side only)."""
    assert replica_count >= 1
    peers = replica_count - 1
    return BUS_LISTENERS_MAX + BUS_HANDSHAKES_MAX + peers * BUS_CONNECTIONS_PER_PEER_MAX


BusStream = trio.SocketStream | trio.SSLStream[trio.SocketStream]
"""A bus connection: plain TCP, or mutual TLS over it (invariant 10)."""


class BusError(Exception):
    """A peer broke the bus protocol or failed authentication."""


@dataclass(frozen=True)
class BusTls:
    """The two TLS contexts of a node's bus: the side that accepts and the side that
    dials. Both present this node's certificate and require the peer's, signed by the
    cluster's CA (invariant 10)."""

    accept: ssl.SSLContext
    dial: ssl.SSLContext


def bus_tls(config: Config) -> BusTls | None:
    """The bus's TLS contexts from the ``bus_tls_*`` settings, or None when they are unset.

    A certificate, key or CA file that cannot be loaded is an environment failure with
    no in-process answer: the node exits naming the settings.
    """
    cert, key, ca = config.bus_tls_cert_file, config.bus_tls_key_file, config.bus_tls_ca_file
    if cert is None or key is None or ca is None:
        return None
    contexts = []
    for protocol in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT):
        context = ssl.SSLContext(protocol)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # Membership is the CA's to vouch for, identity the secret handshake's.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_cert_chain(cert, key)
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as error:
            raise SystemExit(
                f"bus_tls_cert_file / bus_tls_key_file / bus_tls_ca_file: cannot load them: {error}"
            ) from None
        contexts.append(context)
    return BusTls(accept=contexts[0], dial=contexts[1])


def _tls_failure(error: BaseException) -> str:
    """Why a TLS handshake failed, naming the SSL reason that trio wraps."""
    cause = error.__cause__
    if isinstance(cause, ssl.SSLError):
        return f"TLS handshake failed: {cause}"
    return f"TLS handshake failed: {error or type(error).__name__}"


_LINK_ERRORS: Final = (BusError, trio.BrokenResourceError, trio.ClosedResourceError, OSError)
"""What ends one peer link (and only it): the node redials or waits for a redial."""


def _mac(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, label + b"".join(parts), hashlib.sha256).digest()


@dataclass(eq=False)
class ReadIndexAsk:
    """One read index waiting for its answers (``broker.core.reads.ReadIndexRound``)."""

    round: ReadIndexRound
    done: trio.Event = field(default_factory=trio.Event)

    def answer(self, replica: int, in_view: bool, commit: int | None) -> None:
        self.round.answered(replica, in_view, commit)
        if self.round.commit is not None or self.round.failed:
            self.done.set()


@dataclass(eq=False)
class Peer:
    """One other node: its connection (if up), outgoing queue and read-index asks."""

    index: int
    address: str
    stream: BusStream | None = None
    outgoing: deque[bytes | bytearray | memoryview] = field(default_factory=deque)
    outgoing_bytes: int = 0
    wake: trio.Event = field(default_factory=trio.Event)
    #: The writer task holds bytes taken from ``outgoing`` and not all sent yet: nothing
    #: may be written past them (invariant 4).
    writing: bool = False
    read_indexes: dict[int, ReadIndexAsk] = field(default_factory=dict)
    connected: trio.Event = field(default_factory=trio.Event)
    bytes_sent: int = 0
    frames_dropped: int = 0
    #: Authenticated connections accepted from this peer and not yet closed.
    accepted: int = 0


@dataclass(eq=False)
class _Handshake:
    """One accepted connection in the handshake: its deadline, and whether it was closed
    to make room for a newer one."""

    address: str
    scope: trio.CancelScope
    evicted: bool = False


class BusHost(Protocol):
    """What the bus needs from its node: the groups it delivers to and the counters it
    keeps (a test may stand in for it)."""

    config: Config
    counters: NodeCounters
    groups: dict[int, GroupHost]
    metadata: GroupHost

    async def wait_group(self, group_id: int, timeout_s: float) -> GroupHost | None:
        """The host of ``group_id`` once committed metadata creates it here (bounded)."""
        ...


class ReplicaBus:
    """The bus of one node; see the module docstring."""

    def __init__(self, node: BusHost) -> None:
        config = node.config
        assert config.cluster_secret is not None
        self._node = node
        self._secret = config.cluster_secret.get_secret_value().encode()
        self._tls = bus_tls(config)
        self.index = config.replica
        self.peers = {
            index: Peer(index, address)
            for index, address in enumerate(config.replicas)
            if index != self.index
        }
        self._token = 0
        """The last read-index ask's token."""
        self._forwards = Forwards()
        """The requests forwarded to another node's primary, until their outcome comes."""
        self._nursery: trio.Nursery | None = None
        self._held = 0
        self._forwards_waiting = 0
        self._learning = False
        # A primary sends the same prepare to every backup: encode (and checksum) it once.
        self._last_message: Message | None = None
        self._last_frame: tuple[bytes | memoryview, ...] = ()
        # Accepted connections in the handshake, oldest first (at most BUS_HANDSHAKES_MAX).
        self._handshakes: list[_Handshake] = []
        self._refusals = RefusalLimiter()

    # -- outbound (any task) ----------------------------------------------------------------

    def send(self, replica: int, message: Message) -> int:
        """Queue a consensus message for ``replica``; returns its size in bytes."""
        if message is self._last_message:
            parts = self._last_frame
        else:
            # A prepare's body is queued as it is, not copied into a frame: the socket
            # write gathers it with its headers.
            parts = encode_message_parts(message, sender=self.index)
            self._last_message, self._last_frame = message, parts
        self._enqueue(self.peers[replica], FrameKind.MESSAGE, *parts)
        return sum(len(part) for part in parts)

    def forward(self, host: GroupHost, submission: Submission) -> bool:
        """Hand a request to the node whose replica is the group's primary."""
        primary = forward_target(host.replica, submission)
        if primary is None:
            return False
        peer = self.peers[primary]
        if peer.stream is None:
            return self._forward_when_linked(host, peer, submission)
        token = self._forwards.next_token()
        header = _FORWARD.pack(
            token,
            host.group_id,
            submission.client_id.to_bytes(16, "little"),
            submission.session,
            submission.request,
            submission.operation,
            submission.timestamp_us,
            submission.request_checksum,
        )
        body = submission.body
        parts = body if isinstance(body, tuple) else (body,)  # gathered by the write
        if not self._enqueue(peer, FrameKind.FORWARD, header, *parts):
            return False
        self._forwards.sent(token, primary, submission)
        self._node.counters.forwarded += 1
        return True

    def _forward_when_linked(self, host: GroupHost, peer: Peer, submission: Submission) -> bool:
        """Hold a request for a primary whose link is down (invariant 9): the link redials
        within ``RECONNECT_BACKOFF_MAX_S``, so a link that drops for a moment costs its
        clients a wait, not a refusal."""
        if self._nursery is None or self._forwards_waiting >= FORWARDS_WAITING_MAX:
            return False
        self._forwards_waiting += 1
        self._node.counters.forwards_held += 1
        self._nursery.start_soon(self._resubmit_when_linked, host, peer, submission)
        return True

    async def _resubmit_when_linked(
        self, host: GroupHost, peer: Peer, submission: Submission
    ) -> None:
        linked = False
        try:
            with trio.move_on_after(LINK_WAIT_S):
                await peer.connected.wait()
                linked = True
        finally:
            self._forwards_waiting -= 1
            if not linked:
                submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
        if not submission.done:
            # The group decides again: the primary may have changed while the link was down.
            host.submit(submission)

    async def read_index(self, host: GroupHost, *, confirmed: bool = False) -> int | None:
        """The commit number of the group's primary, asked of its node (invariant 6);
        ``confirmed``: with enough replicas in this view that no newer one can have
        committed anything (``broker.core.reads``), as a fresh read needs, the primary's
        own included (it asks its backups).

        None when this replica is not in normal status, the round cannot be
        decided (the primary is in another view or not primary any more, too many replicas
        are in other views or not linked), or the links drop first. Unbounded otherwise:
        the caller bounds the wait.
        """
        replica = host.replica
        if host.primary_index is None or replica is None:
            return None
        ask = ReadIndexAsk(ReadIndexRound(replica, confirmed=confirmed))
        if ask.round.commit is not None:
            return ask.round.commit  # a primary that needs no one's confirmation
        self._token += 1
        token = self._token
        ask_frame = _READ_INDEX.pack(token, host.group_id, replica.view)
        asked: list[Peer] = []
        for index in ask.round.peers():
            peer = self.peers[index]
            if self._enqueue(peer, FrameKind.READ_INDEX, ask_frame):
                peer.read_indexes[token] = ask
                asked.append(peer)
            else:
                ask.answer(index, False, None)  # not linked: it cannot confirm
        try:
            if not ask.done.is_set():
                await ask.done.wait()
        finally:
            for peer in asked:
                peer.read_indexes.pop(token, None)
        return ask.round.commit

    def _enqueue(self, peer: Peer, kind: FrameKind, *parts: bytes | memoryview) -> bool:
        """Queue one frame whose payload is ``parts`` joined (they are not joined here)."""
        if peer.stream is None:
            peer.frames_dropped += 1
            return False
        size = sum(len(part) for part in parts)
        if peer.outgoing_bytes + size > OUTGOING_BYTES_MAX:
            peer.frames_dropped += 1
            return False
        peer.outgoing.append(_FRAME.pack(size, kind))
        peer.outgoing.extend(parts)
        peer.outgoing_bytes += _FRAME.size + size
        stream = peer.stream
        if peer.writing or not isinstance(stream, trio.SocketStream) or _write_nowait(peer, stream):
            peer.wake.set()
        return True

    # -- tasks ------------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        host, port = parse_address(self._node.config.replicas[self.index])
        listeners = await trio.open_tcp_listeners(port, host=host)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(trio.serve_listeners, self._accept, listeners)
            for peer in self.peers.values():
                if peer.index > self.index:
                    nursery.start_soon(self._dial_forever, peer)
            log.info(
                "replica bus of replica %d on %s:%d%s",
                self.index,
                host,
                port,
                " (mutual TLS)" if self._tls is not None else "",
            )
            task_status.started()

    async def close(self) -> None:
        for peer in self.peers.values():
            if peer.stream is not None:
                await trio.aclose_forcefully(peer.stream)

    async def _dial_forever(self, peer: Peer) -> None:
        backoff = RECONNECT_BACKOFF_MIN_S
        host, port = parse_address(peer.address)
        while True:
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError:
                await trio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX_S)
                continue
            try:
                with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                    link = await self._secure(stream, server_side=False)
                    await self._handshake_dial(link, peer)
                backoff = RECONNECT_BACKOFF_MIN_S
                await self._serve_peer(peer, link)
            except (BusError, OSError, trio.BrokenResourceError, trio.TooSlowError) as error:
                log.info("bus link to replica %d: %s", peer.index, error)
            finally:
                await trio.aclose_forcefully(stream)
            await trio.sleep(backoff * (1 + random.random()))
            backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX_S)

    async def _accept(self, stream: trio.SocketStream) -> None:
        """Serve one accepted connection: authenticate it, then carry its peer's link."""
        try:
            authenticated = await self._authenticate(stream)
            if authenticated is None:
                return
            peer, link = authenticated
            if peer.accepted >= BUS_CONNECTIONS_PER_PEER_MAX:
                most = BUS_CONNECTIONS_PER_PEER_MAX
                self._refused(f"replica {peer.index}: more than {most} connections at once")
                return
            peer.accepted += 1
            try:
                if peer.stream is not None:
                    # The peer redialed: the old link is dead to it, so it is dead to us.
                    await trio.aclose_forcefully(peer.stream)
                await self._serve_peer(peer, link)
            finally:
                peer.accepted -= 1
        except (BusError, OSError, trio.BrokenResourceError) as error:
            log.info("bus connection ended: %s", error)
        finally:
            await trio.aclose_forcefully(stream)

    async def _secure(self, stream: trio.SocketStream, *, server_side: bool) -> BusStream:
        """The connection as the bus speaks on it: ``stream`` itself, or, with TLS on,
        ``stream`` after a mutual TLS handshake (invariant 10).

        Raises:
            BusError: the TLS handshake failed (no certificate, one the CA did not sign,
                not TLS at all).
        """
        if self._tls is None:
            return stream
        context = self._tls.accept if server_side else self._tls.dial
        link = trio.SSLStream(stream, context, server_side=server_side, https_compatible=False)
        try:
            await link.do_handshake()
        except trio.BrokenResourceError as error:
            raise BusError(_tls_failure(error)) from None
        return link

    async def _authenticate(self, stream: trio.SocketStream) -> tuple[Peer, BusStream] | None:
        """The peer an accepted connection proved to be and the connection to speak to it
        on, within the handshake timeout and a slot among ``BUS_HANDSHAKES_MAX``
        (invariant 8); None if it did not."""
        slot = _Handshake(
            _address_of(stream),
            trio.CancelScope(deadline=trio.current_time() + HANDSHAKE_TIMEOUT_S),
        )
        if len(self._handshakes) >= BUS_HANDSHAKES_MAX:
            oldest = self._handshakes.pop(0)
            oldest.evicted = True
            oldest.scope.cancel()
        self._handshakes.append(slot)
        peer: Peer | None = None
        link: BusStream = stream
        try:
            with slot.scope:
                link = await self._secure(stream, server_side=True)
                peer = await self._handshake_accept(link)
        except (BusError, OSError, trio.BrokenResourceError) as error:
            self._refused(f"{slot.address}: {error}")
        finally:
            if slot in self._handshakes:
                self._handshakes.remove(slot)
        if peer is not None:
            return peer, link
        if slot.evicted:
            self._refused(
                f"{slot.address}: closed in its handshake to make room, "
                f"more than {BUS_HANDSHAKES_MAX} at once"
            )
        elif slot.scope.cancelled_caught:
            self._refused(f"{slot.address}: no handshake within {HANDSHAKE_TIMEOUT_S} s")
        return None

    def _refused(self, reason: str) -> None:
        """One line per refused bus connection, at most ``REFUSAL_LINES_PER_WINDOW_MAX``
        per window: a flood of strangers must not fill the log."""
        admitted, left_out = self._refusals.admit(trio.current_time())
        if not admitted:
            return
        more = f" ({left_out} more refusals not logged)" if left_out else ""
        log.info("bus connection refused: %s%s", reason, more)

    async def _handshake_accept(self, stream: BusStream) -> Peer:
        nonce = os.urandom(NONCE_SIZE)
        await stream.send_all(_MAGIC + nonce)
        hello = await _receive_exactly(stream, _HELLO_DIAL.size)
        replica, their_nonce, mac = _HELLO_DIAL.unpack(hello)
        if replica not in self.peers or replica >= self.index:
            raise BusError(f"a dialer claims to be replica {replica}")
        expected = _mac(self._secret, b"dial", nonce, their_nonce, bytes([replica, self.index]))
        if not hmac.compare_digest(mac, expected):
            raise BusError("a dialer failed authentication")
        await stream.send_all(
            _mac(self._secret, b"accept", their_nonce, nonce, bytes([self.index, replica]))
        )
        return self.peers[replica]

    async def _handshake_dial(self, stream: BusStream, peer: Peer) -> None:
        challenge = await _receive_exactly(stream, len(_MAGIC) + NONCE_SIZE)
        if challenge[: len(_MAGIC)] != _MAGIC:
            raise BusError(f"replica {peer.index} does not speak the bus protocol")
        their_nonce = challenge[len(_MAGIC) :]
        nonce = os.urandom(NONCE_SIZE)
        mac = _mac(self._secret, b"dial", their_nonce, nonce, bytes([self.index, peer.index]))
        await stream.send_all(_HELLO_DIAL.pack(self.index, nonce, mac))
        answer = await _receive_exactly(stream, MAC_SIZE)
        expected = _mac(
            self._secret, b"accept", nonce, their_nonce, bytes([peer.index, self.index])
        )
        if not hmac.compare_digest(answer, expected):
            raise BusError(f"replica {peer.index} failed authentication")

    async def _serve_peer(self, peer: Peer, stream: BusStream) -> None:
        _size_buffers(stream)
        peer.stream = stream
        peer.outgoing.clear()
        peer.outgoing_bytes = 0
        peer.writing = False  # a writer of an older link holds none of this one's bytes
        peer.connected.set()
        log.info("bus link to replica %d is up", peer.index)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_until_broken, peer, stream, nursery.cancel_scope)
                try:
                    await self._read(peer, stream)
                except _LINK_ERRORS as error:
                    log.info("bus link to replica %d broke: %s", peer.index, error)
                nursery.cancel_scope.cancel()
        finally:
            if peer.stream is stream:
                peer.stream = None
                peer.connected = trio.Event()
                peer.outgoing.clear()
                peer.outgoing_bytes = 0
                self._forwards.peer_lost(peer.index)
                for ask in peer.read_indexes.values():
                    ask.answer(peer.index, False, None)
                peer.read_indexes.clear()

    async def _write_until_broken(
        self, peer: Peer, stream: BusStream, scope: trio.CancelScope
    ) -> None:
        try:
            await self._write(peer, stream)
        except _LINK_ERRORS as error:
            log.info("bus link to replica %d broke: %s", peer.index, error)
            scope.cancel()

    async def _write(self, peer: Peer, stream: BusStream) -> None:
        if isinstance(stream, trio.SSLStream):
            await self._write_tls(peer, stream)
            return
        sock = stream.socket
        while True:
            await peer.wake.wait()
            peer.wake = trio.Event()
            pending = [memoryview(chunk) for chunk in peer.outgoing]
            peer.outgoing.clear()
            peer.outgoing_bytes = 0
            peer.writing = True
            try:
                while pending:
                    sent = await sock.sendmsg(pending[:IOVECS_MAX])
                    peer.bytes_sent += sent
                    while pending and sent >= pending[0].nbytes:
                        sent -= pending[0].nbytes
                        pending.pop(0)
                    if sent:
                        pending[0] = pending[0][sent:]
            finally:
                if peer.stream is stream:
                    peer.writing = False

    async def _write_tls(self, peer: Peer, stream: trio.SSLStream[trio.SocketStream]) -> None:
        """As ``_write``, through TLS: everything queued goes in one ``send_all`` (TLS
        encrypts a copy anyway, so joining the chunks costs one more)."""
        while True:
            await peer.wake.wait()
            peer.wake = trio.Event()
            pending = b"".join(peer.outgoing)
            peer.outgoing.clear()
            peer.outgoing_bytes = 0
            if pending:
                await stream.send_all(pending)
                peer.bytes_sent += len(pending)

    async def _read(self, peer: Peer, stream: BusStream) -> None:
        """Read frames into one reused read-ahead buffer; a frame larger than it (a
        prepare) is read into a second reused buffer, the kernel writing straight into
        it. A frame is dispatched from where it was read: decoding copies out what it
        keeps (a prepare's body once), so both buffers are free again once it returns."""
        ahead = bytearray(READ_AHEAD_BYTES)
        view = memoryview(ahead)
        large = bytearray()  # reused for frames larger than the read-ahead
        start = end = 0
        turn = 0  # frames dispatched since this task last gave way on purpose
        while True:
            if end - start >= _FRAME.size:
                size, kind = _FRAME.unpack_from(ahead, start)
                if size > BUS_FRAME_SIZE_MAX:
                    raise BusError(f"replica {peer.index} sent a {size}-byte frame")
                body = start + _FRAME.size
                if body + size <= end:
                    payload = view[body : body + size]
                    start = body + size
                    self._dispatch(peer, kind, payload)
                    turn += 1
                    if turn >= FRAMES_PER_TURN_MAX:
                        turn = 0
                        await trio.lowlevel.checkpoint()
                    continue
                if _FRAME.size + size > READ_AHEAD_BYTES:
                    if len(large) < size:
                        large = bytearray(size)
                    payload = memoryview(large)[:size]
                    have = end - body
                    payload[:have] = view[body:end]
                    start = end = 0
                    if not await _receive_into(stream, payload[have:]):
                        return
                    self._dispatch(peer, kind, payload)
                    if len(large) > LARGE_BUFFER_KEPT_BYTES_MAX:
                        large = bytearray()
                    turn += 1
                    if turn >= FRAMES_PER_TURN_MAX:
                        turn = 0
                        await trio.lowlevel.checkpoint()
                    continue
            # Not a whole frame (or header) in hand: keep the partial one at the front and
            # read more after it.
            if start:
                view[: end - start] = view[start:end]
                end -= start
                start = 0
            count = await _receive_some_into(stream, view[end:])
            if not count:
                return
            end += count

    # -- inbound ----------------------------------------------------------------------------

    def _dispatch(self, peer: Peer, kind: int, payload: memoryview) -> None:
        if kind == FrameKind.MESSAGE:
            try:
                message = decode_message(payload)
            except MessageError as error:
                raise BusError(f"replica {peer.index} sent a bad message: {error}") from None
            group = message.header.group if isinstance(message, Prepare) else message.group
            host = self._node.groups.get(group)
            if host is not None:
                host.receive(message)
            elif self._nursery is not None and self._held < HELD_MESSAGES_MAX:
                # A group this node has not created yet (the metadata op that creates it
                # is committed but not applied here yet): hold the message until it is,
                # so a new partition's first prepare is not dropped and resent later.
                self._held += 1
                self._node.counters.messages_held += 1
                self._nursery.start_soon(self._deliver_when_hosted, group, message)
            else:
                self._node.counters.messages_unhosted += 1
        elif kind == FrameKind.FORWARD:
            self._on_forward(peer, payload)
        elif kind == FrameKind.FORWARD_REPLY:
            self._on_forward_reply(peer, payload)
        elif kind == FrameKind.READ_INDEX:
            self._on_read_index(peer, payload)
        elif kind == FrameKind.READ_INDEX_REPLY:
            self._on_read_index_reply(peer, payload)
        else:
            raise BusError(f"replica {peer.index} sent frame kind {kind}")

    def _on_forward(self, peer: Peer, payload: memoryview) -> None:
        if len(payload) < _FORWARD.size:
            raise BusError(f"replica {peer.index} sent a short forward")
        fields = _FORWARD.unpack_from(payload, 0)
        token, group, client, session, request, operation, timestamp, request_checksum = fields
        body = bytes(payload[_FORWARD.size :])

        def deliver(outcome: Outcome) -> None:
            self._reply_forward(peer, token, outcome)

        submission = Submission(
            int.from_bytes(client, "little"),
            session,
            request,
            operation,
            body,
            timestamp,
            deliver,
            request_checksum,
            forwarded=True,
        )
        host = self._node.groups.get(group)
        if host is not None:
            host.submit(submission)
        elif self._nursery is not None:
            # The group is new and this node has not applied the metadata op that
            # created it yet (backups learn commits a little later): wait for it.
            self._nursery.start_soon(self._submit_when_hosted, group, submission)
        else:
            submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))

    def _learn_metadata_commit(self) -> None:
        """Ask the metadata primary for its commit (a read index), once at a time: a group
        this node does not host yet is usually created by a metadata op the primary has
        committed but this node has not heard of (backups learn commits from the next
        prepare or the next heartbeat, up to ``COMMIT_INTERVAL_TICKS`` later). The
        primary's answer comes with a ``Commit``, so this node applies the op at once."""
        if self._learning or self._nursery is None:
            return
        self._learning = True
        self._nursery.start_soon(self._ask_metadata_commit)

    async def _ask_metadata_commit(self) -> None:
        try:
            with trio.move_on_after(GROUP_WAIT_S):
                await self.read_index(self._node.metadata)
        finally:
            self._learning = False

    async def _deliver_when_hosted(self, group: int, message: Message) -> None:
        self._learn_metadata_commit()
        try:
            with trio.move_on_after(GROUP_WAIT_S):
                host = await self._node.wait_group(group, GROUP_WAIT_S)
                if host is not None:
                    await host.opened.wait()
                    host.receive(message)
                    return
            self._node.counters.messages_unhosted += 1
        finally:
            self._held -= 1

    async def _submit_when_hosted(self, group: int, submission: Submission) -> None:
        self._learn_metadata_commit()
        host = await self._node.wait_group(group, GROUP_WAIT_S)
        if host is None:
            submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
        else:
            host.submit(submission)

    def _reply_forward(self, peer: Peer, token: int, outcome: Outcome) -> None:
        body = b""
        if isinstance(outcome, Replied):
            head = _FORWARD_REPLY.pack(
                token, _ReplyKind.REPLIED, outcome.op, outcome.commit, outcome.view, 0
            )
            body = outcome.body
        elif isinstance(outcome, Refused):
            head = _FORWARD_REPLY.pack(token, _ReplyKind.REFUSED, 0, 0, 0, outcome.status)
        else:
            code = _SESSION_ERRORS[outcome.error]
            head = _FORWARD_REPLY.pack(token, _ReplyKind.SESSION_LOST, 0, 0, 0, code)
        self._enqueue(peer, FrameKind.FORWARD_REPLY, head + body)

    def _on_forward_reply(self, peer: Peer, payload: memoryview) -> None:
        if len(payload) < _FORWARD_REPLY.size:
            raise BusError(f"replica {peer.index} sent a short forward reply")
        token, kind, op, commit, view, status = _FORWARD_REPLY.unpack_from(payload, 0)
        outcome: Outcome
        if kind == _ReplyKind.REPLIED:
            outcome = Replied(op, commit, view, bytes(payload[_FORWARD_REPLY.size :]))
        elif kind == _ReplyKind.REFUSED:
            outcome = Refused(status)
        else:
            error = _SESSION_ERRORS_BY_CODE.get(status, ClientError.NO_SESSION)
            outcome = SessionLost(error)
        self._forwards.answered(peer.index, token, outcome)

    def _on_read_index(self, peer: Peer, payload: memoryview) -> None:
        if len(payload) != _READ_INDEX.size:
            raise BusError(f"replica {peer.index} sent a bad read-index ask")
        token, group, view = _READ_INDEX.unpack(payload)
        host = self._node.groups.get(group)
        in_view, commit = read_index_answer(None if host is None else host.replica, view)
        if commit is not None:
            # Ahead of the answer on the same link: the asker's replica takes the commit
            # before its reader sees the answer (the primary's own heartbeat, sent early).
            self.send(peer.index, Commit(group, self.index, view, commit))
            answer = _READ_INDEX_REPLY.pack(token, _ANSWER_PRIMARY, commit)
        else:
            answer = _READ_INDEX_REPLY.pack(token, _ANSWER_IN_VIEW if in_view else 0, 0)
        self._enqueue(peer, FrameKind.READ_INDEX_REPLY, answer)

    def _on_read_index_reply(self, peer: Peer, payload: memoryview) -> None:
        if len(payload) != _READ_INDEX_REPLY.size:
            raise BusError(f"replica {peer.index} sent a bad read-index answer")
        token, answer, commit = _READ_INDEX_REPLY.unpack(payload)
        ask = peer.read_indexes.pop(token, None)
        if ask is not None:
            primary = answer == _ANSWER_PRIMARY
            ask.answer(peer.index, answer != 0, commit if primary else None)


def _size_buffers(stream: BusStream) -> None:
    """Give a link kernel buffers that hold a whole prepare or more (``SOCKET_BUFFER_BYTES``,
    capped by the system's maximum): with the defaults a large prepare goes in pieces, each
    a wait for the peer to read and a wakeup of the writer task."""
    transport = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    for option in (trio.socket.SO_SNDBUF, trio.socket.SO_RCVBUF):
        try:
            transport.setsockopt(trio.socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        except OSError as error:
            log.debug("bus link buffer size not set: %s", error)


def _write_nowait(peer: Peer, stream: trio.SocketStream) -> bool:
    """Write what the kernel takes now of ``peer``'s queue, from its head, without waiting
    (invariant 4); returns whether anything is left for the writer task (also when the
    write failed: the writer task meets the error and ends the link)."""
    outgoing = peer.outgoing
    fd = stream.socket.fileno()  # -1 once closed: the write fails
    while outgoing:
        parts = [outgoing[i] for i in range(min(len(outgoing), IOVECS_MAX))]
        try:
            sent = os.writev(fd, parts)
        except OSError:
            return True
        if not sent:
            return True
        peer.bytes_sent += sent
        peer.outgoing_bytes -= sent
        while outgoing and sent >= len(outgoing[0]):
            sent -= len(outgoing.popleft())
        if sent:
            outgoing[0] = memoryview(outgoing[0])[sent:]
            return True
    return False


def _address_of(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "a closed connection"
    return f"{host}:{port}"


async def _read_socket(stream: trio.SocketStream, view: memoryview) -> int:
    """Read what has arrived into ``view``, waiting only if nothing has: unlike the
    socket's ``recv_into``, a read that finds bytes does not give way to other tasks (a
    link's reader gives way every ``FRAMES_PER_TURN_MAX`` frames and whenever it waits)."""
    while True:
        fd = stream.socket.fileno()  # -1 once closed: the read fails
        try:
            return os.readv(fd, [view])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)


async def _receive_some_into(stream: BusStream, view: memoryview) -> int:
    """Read what has arrived (at least a byte, at most ``len(view)``) into ``view``; 0 if
    the peer closed."""
    if isinstance(stream, trio.SocketStream):
        return await _read_socket(stream, view)
    data = await stream.receive_some(len(view))
    view[: len(data)] = data
    return len(data)


async def _receive_into(stream: BusStream, view: memoryview) -> bool:
    """Fill ``view`` from ``stream``; False if the peer closed first."""
    if isinstance(stream, trio.SocketStream):
        while view:
            count = await _read_socket(stream, view)
            if not count:
                return False
            view = view[count:]
        return True
    while view:
        data = await stream.receive_some(min(RECEIVE_BYTES_MAX, len(view)))
        if not data:
            return False
        view[: len(data)] = data
        view = view[len(data) :]
    return True


async def _receive_exactly(stream: BusStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise BusError("the peer closed the connection during the handshake")
        data += chunk
    return bytes(data)
