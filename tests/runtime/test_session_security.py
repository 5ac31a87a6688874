"""Sessions that cannot be borrowed, and rights on the runtime stats, against a real node.

A client id registered by one user is that user's: another user's login under it is
evicted (SessionError) and opens nothing, and the owner's session is untouched. A session
is served only on a connection that logged in to it. The runtime stats (code 9000) need
``read_servers``, as GET_STATS does.
"""

from __future__ import annotations

from sdk import wire
from sdk.wire import CommandCode, EvictionReason, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.wire_client import WireClient

RUNTIME_STATS_CODE = 9000
NOBODY_PASSWORD = "nobody-Pa55-0421"


def _nobody(root: WireClient, name: str) -> None:
    """A user without any permission."""
    created = root.call_raw(
        int(CommandCode.CREATE_USER), wire.CreateUser(name, NOBODY_PASSWORD).encode()
    )
    assert created.reply_header().status == 0


def test_a_login_under_another_users_client_id_is_evicted_and_opens_nothing(
    node: NodeProcess,
) -> None:
    with WireClient(node.address) as root, WireClient(node.address) as thief:
        root.login("iggy", ROOT_PASSWORD)
        _nobody(root, "borrower")
        thief.client_id = root.client_id
        frame = thief.call_raw(
            int(CommandCode.LOGIN_REGISTER),
            wire.LoginRegister("borrower", NOBODY_PASSWORD).encode(),
        )
        assert frame.command is wire.Command.EVICTION
        assert frame.eviction_header().reason is EvictionReason.SESSION_ERROR
        # Root's session is untouched and still root's.
        users = root.call(CommandCode.GET_USERS, wire.Empty())
        assert isinstance(users, wire.Users)
        created = root.call_raw(
            int(CommandCode.CREATE_STREAM), wire.CreateStream("owner-kept").encode()
        )
        assert created.reply_header().status == 0
    # The borrower under a client id of its own is served as itself, without root's rights.
    with WireClient(node.address) as borrower:
        borrower.login("borrower", NOBODY_PASSWORD)
        frame = borrower.call_raw(int(CommandCode.GET_USERS))
        assert frame.reply_header().status == IggyErrorCode.UNAUTHORIZED


def test_a_known_session_on_a_connection_that_did_not_log_in_is_refused(
    node: NodeProcess,
) -> None:
    with WireClient(node.address) as root, WireClient(node.address) as other:
        root.login("iggy", ROOT_PASSWORD)
        other.client_id, other.session, other.request = root.client_id, root.session, 1
        frame = other.call_raw(int(CommandCode.GET_USERS))
        assert frame.reply_header().status == IggyErrorCode.UNAUTHENTICATED
        assert isinstance(root.call(CommandCode.GET_USERS, wire.Empty()), wire.Users)


def test_runtime_stats_need_read_servers(node: NodeProcess) -> None:
    with WireClient(node.address) as root:
        root.login("iggy", ROOT_PASSWORD)
        _nobody(root, "statless")
        served = root.call_raw(RUNTIME_STATS_CODE)
        assert served.reply_header().status == 0 and b'"groups"' in bytes(served.body)
    with WireClient(node.address) as nobody:
        nobody.login("statless", NOBODY_PASSWORD)
        refused = nobody.call_raw(RUNTIME_STATS_CODE)
        assert refused.reply_header().status == IggyErrorCode.UNAUTHORIZED
        assert len(refused.body) == 0
