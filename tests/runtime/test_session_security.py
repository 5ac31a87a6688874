"""Sessions that cannot be borrowed, and rights on the runtime stats, against a real node
and (for the sessions) a real 3-node cluster, the borrower on another node than the owner.

A client id registered by one user is that user's: another user's login under it is
evicted (SessionError) and opens nothing, and the owner's session is untouched. A session
is served only on a connection that logged in to it. The runtime stats (code 9000) need
``read_servers``, as GET_STATS does.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos.nodes import ChaosCluster
from sdk import wire
from sdk.wire import CommandCode, EvictionReason, IggyErrorCode
from tests.runtime.processes import CLUSTER_SECRET, ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_cluster_replies import login
from tests.wire_client import WireClient

RUNTIME_STATS_CODE = 9000
NOBODY_PASSWORD = "nobody-Pa55-0421"
USER_KNOWN_TIMEOUT_S = 10.0


@pytest.fixture(scope="module", params=["one node", "three nodes"])
def addresses(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Client addresses of a fresh node, or of a fresh 3-node cluster (where the owner
    and the borrower talk to different nodes)."""
    with tempfile.TemporaryDirectory(prefix="viewstream-borrow-") as folder:
        if request.param == "one node":
            node = start_node(Path(folder) / "data")
            try:
                yield [node.address]
            finally:
                node.kill()
        else:
            cluster = ChaosCluster(
                Path(folder), root_password=ROOT_PASSWORD, cluster_secret=CLUSTER_SECRET, tick_ms=5
            )
            try:
                cluster.start()
                yield list(cluster.client_addresses)
            finally:
                cluster.close()


def _wait_until_user_known(address: str, name: str) -> None:
    """Another node learns of a committed user with the next prepare or commit heartbeat;
    a login there before that is refused (evicted as unknown, or 58 while the node lags
    behind what it has heard of). Bounded."""
    deadline = time.monotonic() + USER_KNOWN_TIMEOUT_S
    while True:
        with WireClient(address) as client:
            try:
                client.login(name, NOBODY_PASSWORD)
                client.call_raw(int(CommandCode.LOGOUT_USER))
                return
            except wire.SessionEvicted:
                assert time.monotonic() < deadline, f"{address} does not know {name}"
            except wire.ServerRejected as refused:
                assert refused.code == IggyErrorCode.TRANSIENT_NOT_ACCEPTED, refused.code
                assert time.monotonic() < deadline, f"{address} keeps refusing {name}"
        time.sleep(0.05)


def _login_until_taken(client: WireClient, name: str) -> None:
    """Log ``client`` in as ``name``, again after a 58 (a node that lags refuses a login
    with 58 rather than evict it: the client asks again), bounded."""
    deadline = time.monotonic() + USER_KNOWN_TIMEOUT_S
    while True:
        try:
            client.login(name, NOBODY_PASSWORD)
            return
        except wire.ServerRejected as refused:
            assert refused.code == IggyErrorCode.TRANSIENT_NOT_ACCEPTED, refused.code
            assert time.monotonic() < deadline, f"the login as {name} keeps being refused"
        time.sleep(0.05)


def _nobody(root: WireClient, name: str) -> None:
    """A user without any permission."""
    created = root.call_raw(
        int(CommandCode.CREATE_USER), wire.CreateUser(name, NOBODY_PASSWORD).encode()
    )
    assert created.reply_header().status == 0


def test_a_login_under_another_users_client_id_is_evicted_and_opens_nothing(
    addresses: list[str],
) -> None:
    owner_address, thief_address = addresses[0], addresses[-1]
    root, _ = login(owner_address)
    with root:
        _nobody(root, "borrower")
        _wait_until_user_known(thief_address, "borrower")
        with WireClient(thief_address) as thief:
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
    with WireClient(thief_address) as borrower:
        _login_until_taken(borrower, "borrower")
        frame = borrower.call_raw(int(CommandCode.GET_USERS))
        assert frame.reply_header().status == IggyErrorCode.UNAUTHORIZED


def test_a_known_session_on_a_connection_that_did_not_log_in_is_refused(
    addresses: list[str],
) -> None:
    root, _ = login(addresses[0])
    with root, WireClient(addresses[-1]) as other:
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
