"""Sessions on a real node, as a cluster-aware client uses them: one session joined by
several connections (one per node it talks to: each logs in under the same client id),
never served on a connection that did not log in, and a new session after the node ended
the old one.

These are raw-frame tests (``tests.wire_client.WireClient``) so each names exactly
what the node does; the SDK's behaviour around them is in ``test_core`` and
``test_real_exactly_once``.
"""

from __future__ import annotations

import time

import pytest

from sdk import wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.wire_client import WireClient

SESSION_END_WAIT_S = 3.0


def join(session_of: WireClient, address: str) -> WireClient:
    """A second connection that logs in under ``session_of``'s client id: a repeated
    register, which joins the live session (or opens a new one once it ended)."""
    other = WireClient(address)
    other.client_id = session_of.client_id
    other.login("iggy", ROOT_PASSWORD)
    other.request = session_of.request
    return other


def session_alive(address: str, holder: WireClient) -> bool:
    """Whether the node still holds ``holder``'s session: a login under its client id on a
    new connection joins it while it lives, and once it has ended opens another, which
    the probe logs out of before it returns."""
    with join(holder, address) as probe:
        if probe.session == holder.session:
            return True
        assert probe.call_raw(int(CommandCode.LOGOUT_USER)).reply_header().status == 0
        return False


def wait_session_ended(address: str, holder: WireClient) -> None:
    deadline = time.monotonic() + SESSION_END_WAIT_S
    while session_alive(address, holder):
        assert time.monotonic() < deadline, "the node did not end the session"
        time.sleep(0.05)


def test_closing_the_connection_that_logged_in_ends_the_session(real_node: NodeProcess) -> None:
    owner = WireClient(real_node.address)
    owner.login("iggy", ROOT_PASSWORD)
    owner.close()
    wait_session_ended(real_node.address, owner)


def test_closing_another_connection_that_joined_the_session_keeps_it(
    real_node: NodeProcess,
) -> None:
    owner = WireClient(real_node.address)
    try:
        owner.login("iggy", ROOT_PASSWORD)
        second = join(owner, real_node.address)
        assert second.session == owner.session
        assert isinstance(second.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)
        second.close()
        time.sleep(0.5)  # time for the node to end it, if it is going to
        assert isinstance(owner.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)
    finally:
        owner.close()


def test_a_session_is_not_served_on_a_connection_that_did_not_log_in(
    real_node: NodeProcess,
) -> None:
    """Knowing a live (client id, session) pair is not enough: the node answers 40, and
    the session is untouched for the connection that logged in."""
    with WireClient(real_node.address) as owner, WireClient(real_node.address) as other:
        owner.login("iggy", ROOT_PASSWORD)
        other.client_id, other.session, other.request = (
            owner.client_id,
            owner.session,
            owner.request,
        )
        for code in (CommandCode.GET_USERS, CommandCode.GET_STREAMS):
            frame = other.call_raw(int(code))
            assert frame.reply_header().status == wire.IggyErrorCode.UNAUTHENTICATED
        created = other.call_raw(
            int(CommandCode.CREATE_STREAM), wire.CreateStream("not-logged-in").encode()
        )
        assert created.reply_header().status == wire.IggyErrorCode.UNAUTHENTICATED
        assert isinstance(owner.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)


@pytest.mark.parametrize("wrote_metadata", [False, True], ids=["register-only", "after-a-write"])
def test_a_client_id_whose_session_ended_can_register_a_new_one(
    real_node: NodeProcess, wrote_metadata: bool
) -> None:
    first = WireClient(real_node.address)
    old_session = first.login("iggy", ROOT_PASSWORD)
    if wrote_metadata:
        first.call(CommandCode.CREATE_STREAM, wire.CreateStream(f"rereg-{first.client_id:x}"))
    first.close()
    wait_session_ended(real_node.address, first)
    with WireClient(real_node.address) as again:
        again.client_id = first.client_id
        new_session = again.login("iggy", ROOT_PASSWORD)
        assert new_session != old_session
        assert isinstance(again.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)
