"""Sessions on a real node, as a cluster-aware client uses them: one session carried by
several connections (one per node it talks to), and a new session after the node ended
the old one.

These are raw-frame tests (``broker.runtime.client.WireClient``) so each names exactly
what the node does; the SDK's behaviour around them is in ``test_core`` and
``test_real_exactly_once``.
"""

from __future__ import annotations

import time

import pytest

from broker.runtime.client import WireClient
from sdk import wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess

SESSION_END_WAIT_S = 3.0


def carry(session_of: WireClient, address: str) -> WireClient:
    """A second connection that carries ``session_of``'s client id and session."""
    other = WireClient(address)
    other.client_id = session_of.client_id
    other.session = session_of.session
    other.request = session_of.request
    return other


def session_alive(address: str, holder: WireClient) -> bool:
    """Whether the node still honours ``holder``'s session (asked on a new connection)."""
    with carry(holder, address) as probe:
        frame = probe.call_raw(int(CommandCode.GET_STREAMS))
    return frame.command is wire.Command.REPLY and frame.reply_header().status == 0


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


def test_closing_another_connection_that_carries_the_session_keeps_it(
    real_node: NodeProcess,
) -> None:
    owner = WireClient(real_node.address)
    try:
        owner.login("iggy", ROOT_PASSWORD)
        second = carry(owner, real_node.address)
        assert isinstance(second.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)
        second.close()
        time.sleep(0.5)  # time for the node to end it, if it is going to
        assert isinstance(owner.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)
    finally:
        owner.close()


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
