"""The session check (broker.core.sessions): what a request under a session gets."""

from __future__ import annotations

from collections.abc import Callable

from broker.core.connections import ConnectionContext
from broker.core.reconcile import METADATA_GROUP
from broker.core.sessions import (
    MetadataView,
    SessionEvicted,
    SessionOk,
    SessionRefused,
    SessionWait,
    attachment_for,
    check_session,
)
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import SessionInfo
from sdk.wire import EvictionReason, IggyErrorCode

CLIENT = 0xC11E47
SESSION = 40


def view(
    applied: int, known: int | None = None, *, primary: bool = False, sessions: int = SESSION
) -> MetadataView:
    """A metadata group that applied up to ``applied`` and holds session ``sessions`` of
    CLIENT once it applied it."""

    def lookup(number: int) -> SessionInfo:
        if number != sessions or number > applied:
            raise StateError(ErrorCode.UNAUTHENTICATED, "no such session")
        return SessionInfo(number, CLIENT, 1, 1, 0)

    return MetadataView(applied, applied if known is None else known, primary, lookup)


def bound(session: int = SESSION, seen: int = 0) -> ConnectionContext:
    context = ConnectionContext("127.0.0.1:1", bound_session=session)
    context.seen[METADATA_GROUP] = seen
    return context


def test_the_session_of_the_connections_login_is_served() -> None:
    assert check_session(bound(), SESSION, CLIENT, view(50)) == SessionOk()


def test_no_session_or_a_session_this_connection_did_not_log_in_to_gets_40() -> None:
    for session, context in ((0, bound()), (SESSION, bound(session=41))):
        verdict = check_session(context, session, CLIENT, view(50))
        assert isinstance(verdict, SessionRefused)
        assert verdict.status == ErrorCode.UNAUTHENTICATED and verdict.refusal


def test_a_session_the_node_has_heard_of_but_not_applied_is_waited_for_once() -> None:
    lagging = view(30, known=45)
    assert check_session(bound(), SESSION, CLIENT, lagging) == SessionWait(SESSION)
    # Seen committed by this connection elsewhere counts as heard of.
    assert check_session(bound(seen=SESSION), SESSION, CLIENT, view(30)) == SessionWait(SESSION)
    # After the wait: applied, served; still lagging, told to retry (never waited again).
    assert check_session(bound(), SESSION, CLIENT, view(50), waited=True) == SessionOk()
    still = check_session(bound(), SESSION, CLIENT, lagging, waited=True)
    assert still == SessionRefused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)


def test_above_everything_known_only_a_primary_may_take_a_session_for_made_up() -> None:
    backup = check_session(bound(), SESSION, CLIENT, view(30, known=35))
    assert backup == SessionRefused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
    primary = check_session(bound(), SESSION, CLIENT, view(30, known=35, primary=True))
    assert primary == SessionEvicted(EvictionReason.NO_SESSION, "no such session")


def test_another_client_ids_session_evicts() -> None:
    verdict = check_session(bound(), SESSION, CLIENT + 1, view(50))
    assert isinstance(verdict, SessionEvicted) and verdict.reason is EvictionReason.NO_SESSION
    assert "another client id" in verdict.why


def _sessions(*infos: SessionInfo) -> Callable[[int], SessionInfo]:
    by_number = {info.session: info for info in infos}

    def lookup(number: int) -> SessionInfo:
        if number not in by_number:
            raise StateError(ErrorCode.UNAUTHENTICATED, "no such session")
        return by_number[number]

    return lookup


def test_a_connection_attaches_to_a_live_session_of_its_user_and_the_named_client() -> None:
    own = SessionInfo(50, 0xA, 1, 2, 0)
    coordinator = SessionInfo(40, CLIENT, 1, 1, 0)
    lookup = _sessions(own, coordinator)
    assert attachment_for(own, lookup, 40, CLIENT) == 40


def test_an_attachment_to_another_users_or_clients_or_an_ended_session_is_refused() -> None:
    own = SessionInfo(50, 0xA, 1, 2, 0)
    others = SessionInfo(40, CLIENT, 2, 1, 0)  # user 2's
    lookup = _sessions(own, others)
    assert attachment_for(own, lookup, 40, CLIENT) is None  # not the same user
    mine = SessionInfo(41, CLIENT, 1, 3, 0)
    lookup = _sessions(own, mine)
    assert attachment_for(own, lookup, 41, 0xB) is None  # another client id named
    assert attachment_for(own, lookup, 42, CLIENT) is None  # no such session (ended)
