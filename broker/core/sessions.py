"""The session check: may this connection's request act in the session its header names?

Purpose: a session is the op number of the register that opened it, and client ids travel
in clear, so knowing a (client id, session) pair must not be enough to act in it. Every
request but PING and a login passes this check before anything else is decided; the node
(``broker.runtime.node``) carries out what it says: answer, evict, or wait until it has
applied an op and ask again.

Invariants:

1. A request is served under a session only on a connection that opened or joined it by
   a login (``ConnectionContext.bound_session``); anything else gets 40
   (``Unauthenticated``), whoever's session it names.
2. A session this node has heard of (at most its log's last op, or the newest op this
   connection was answered with) but not applied yet is waited for, once: the check is
   asked again after the wait, with ``waited`` set, and then answers.
3. A session above what this node has applied is refused with 58 (retry), never taken
   for made up, unless this node is the group's primary and the session is above every op
   it knows: only a primary in normal status holds every committed op, so only it may
   conclude that no such register was committed.
4. A session that does not exist, or that another client id opened, evicts the client
   (``NoSession``): the client must log in again.
5. A login binds its connection to the session it was answered with; the connection
   *registered* that session only if its op is above every op the node knew of when it
   submitted the register (a new register's op comes after; a repeated register of a live
   session is answered with an older one, and the connection merely joins it).
6. When a connection closes, only the session it registered is ended, and only while it
   is still live: connections that joined it leave it to the client's other connections.
   A logout unbinds its connection; a process that ends (crash, restart, shutdown) ends
   no session.
7. Pure: what the node knows is passed in; nothing here waits or reads a clock.
8. A connection may act for another session (attach) only for a live session of the
   same user and of the client id the coordinator named, and only once the node applied
   the metadata the coordinator routed with (the node waits for it, bounded, then
   refuses with 58).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from broker.core.connections import ConnectionContext
from broker.core.reconcile import METADATA_GROUP
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import SessionInfo
from sdk.wire import EvictionReason, IggyErrorCode

SYSTEM_USER_ID: Final = 0xFFFF_FFFF
"""The user id a node's system client registers as: none exists, so the register opens a
client-table entry (a session for system commands) but no user session."""


@dataclass(frozen=True, slots=True)
class MetadataView:
    """What the node knows of its metadata group when it checks a session."""

    applied_op: int
    """The last op its replica applied."""
    known_op: int
    """The last op in its log (applied or not)."""
    is_primary: bool
    """Whether its replica is the group's primary in normal status."""
    lookup: Callable[[int], SessionInfo]
    """The live session of a number, from the applied state; raises ``StateError``."""


@dataclass(frozen=True, slots=True)
class SessionOk:
    """Act in the session; the connection now speaks for the header's client id."""


@dataclass(frozen=True, slots=True)
class SessionWait:
    """Wait until the metadata group has applied ``op`` (bounded), then check again."""

    op: int


@dataclass(frozen=True, slots=True)
class SessionRefused:
    """Answer ``status``; ``refusal`` is the operator's line, if it deserves one."""

    status: int
    refusal: str = ""


@dataclass(frozen=True, slots=True)
class SessionEvicted:
    """Evict the client with ``reason``; ``why`` goes to the log."""

    reason: EvictionReason
    why: str


SessionVerdict = SessionOk | SessionWait | SessionRefused | SessionEvicted


def check_session(
    context: ConnectionContext,
    session: int,
    client_id: int,
    metadata: MetadataView,
    *,
    waited: bool = False,
) -> SessionVerdict:
    """The verdict on a request under ``session`` from ``client_id`` on ``context``'s
    connection (see the module docstring)."""
    if session == 0:
        return SessionRefused(ErrorCode.UNAUTHENTICATED, "not logged in (session 0)")
    if session != context.bound_session:
        return SessionRefused(
            ErrorCode.UNAUTHENTICATED,
            "the session was not opened or joined by a login on this connection",
        )
    seen = context.must_see(METADATA_GROUP)
    heard_of = session <= max(metadata.known_op, seen)
    if not waited and heard_of and metadata.applied_op < session:
        return SessionWait(session)
    if session > metadata.applied_op and not (metadata.is_primary and session > metadata.known_op):
        return SessionRefused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
    try:
        info = metadata.lookup(session)
    except StateError:
        return SessionEvicted(EvictionReason.NO_SESSION, "no such session")
    if info.client_id != client_id:
        return SessionEvicted(EvictionReason.NO_SESSION, "the session is another client id's")
    return SessionOk()


def logged_in(
    context: ConnectionContext, client_id: int, session: int, *, known_before: int
) -> None:
    """A login on ``context``'s connection was answered with ``session``; ``known_before``
    is the last op the node's metadata log held when it submitted the register
    (invariant 5)."""
    context.client_id = client_id
    context.bound_session = session
    if session > known_before:
        context.registered_session = session
    context.saw(METADATA_GROUP, session)


def logged_out(context: ConnectionContext) -> None:
    """A logout on ``context``'s connection committed: it acts in no session any more."""
    context.registered_session = 0
    context.bound_session = 0


def session_to_end(context: ConnectionContext, lookup: Callable[[int], SessionInfo]) -> int:
    """The session to end now that ``context``'s connection closed, or 0 (invariant 6);
    ``lookup`` as ``MetadataView.lookup``."""
    session = context.registered_session
    if not session:
        return 0
    try:
        lookup(session)
    except StateError:
        return 0
    return session


def attachment_for(
    own: SessionInfo, lookup: Callable[[int], SessionInfo], session: int, client_id: int
) -> int | None:
    """The session a connection in session ``own`` may act for by attaching to the
    session ``session`` of client ``client_id`` (``ATTACH_CONSUMER_SESSION``, named by the
    consumer group's coordinator): that session, if it lives, is that client's and
    belongs to the same user; None otherwise (refused as unauthorized). The caller has
    applied the metadata the coordinator routed with (invariant 8)."""
    try:
        parent = lookup(session)
    except StateError:
        return None
    if parent.client_id != client_id or parent.user_id != own.user_id:
        return None
    return parent.session
