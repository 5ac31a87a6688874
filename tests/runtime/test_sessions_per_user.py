"""A user who logs in without end never ends another user's session, on a real node and a
real 3-node cluster.

A user without a single permission logs in 8,200 times (past the 8,192-session table and
its own 1,024-session quota), each login under a new client id on connections it keeps
open; root, logged in before, is still served under its session. The nodes hash passwords
at the lowest scrypt cost the setting allows (``password_hash_cost_log2`` 10, about 4 ms a
check instead of tens) so that 8,200 real password checks fit in a test. Every process
binds 127.0.0.1 and is killed in teardown.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos.nodes import ChaosCluster
from broker.state.metadata import SESSIONS_MAX, SESSIONS_PER_USER_MAX
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import CLUSTER_SECRET, ROOT_PASSWORD, start_node
from tests.runtime.test_cluster_replies import login
from tests.wire_client import WireClient

LOGINS = SESSIONS_MAX + 8  # 8,200
FLOODERS = 4  # connections logging in at once (they share one address, so one check at a time)
CHEAP_HASHES = {"VIEWSTREAM_PASSWORD_HASH_COST_LOG2": "10"}
FLOODER_PASSWORD = "flooder-password"
USER_KNOWN_TIMEOUT_S = 10.0

assert SESSIONS_PER_USER_MAX < LOGINS


@pytest.fixture(scope="module", params=["one node", "three nodes"])
def addresses(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Client addresses of a fresh node, or of a fresh 3-node cluster."""
    with tempfile.TemporaryDirectory(prefix="viewstream-sessions-") as folder:
        if request.param == "one node":
            data_dir = Path(folder) / "data"
            node = start_node(data_dir, env=CHEAP_HASHES)
            try:
                yield [node.address]
            finally:
                node.kill()
        else:
            cluster = ChaosCluster(
                Path(folder),
                root_password=ROOT_PASSWORD,
                cluster_secret=CLUSTER_SECRET,
                tick_ms=5,
                env=CHEAP_HASHES,
            )
            try:
                cluster.start()
                yield list(cluster.client_addresses)
            finally:
                cluster.close()


def _wait_until_user_known(address: str) -> None:
    """Another node learns of the committed user when it hears the commit (the next
    prepare or the primary's commit heartbeat); a login there before that is refused
    (evicted as unknown, or 58 while the node lags behind what it has heard of). Bounded."""
    deadline = time.monotonic() + USER_KNOWN_TIMEOUT_S
    while True:
        with WireClient(address, timeout_s=30) as client:
            try:
                client.login("flooder", FLOODER_PASSWORD)
                return
            except wire.SessionEvicted:
                assert time.monotonic() < deadline, f"{address} does not know the user"
            except wire.ServerRejected as refused:
                assert refused.code == IggyErrorCode.TRANSIENT_NOT_ACCEPTED, refused.code
                assert time.monotonic() < deadline, f"{address} keeps refusing the user"
        time.sleep(0.05)


def _flood(address: str, first_client_id: int, count: int, sessions: list[int]) -> None:
    """``count`` logins of the flooder on one connection, each under a new client id: each
    opens a session (the earlier ones stay alive, nobody closes them)."""
    with WireClient(address, timeout_s=30) as client:
        for index in range(count):
            client.client_id = first_client_id + index
            sessions.append(client.login("flooder", FLOODER_PASSWORD))


def test_a_user_logging_in_8200_times_leaves_roots_session_alive(addresses: list[str]) -> None:
    root, _ = login(addresses[0])
    with root:
        created = root.call(
            CommandCode.CREATE_USER, wire.CreateUser("flooder", FLOODER_PASSWORD, permissions=None)
        )
        assert isinstance(created, wire.UserDetails)
        # In a cluster the flood goes to another node than root's: its logins are forwarded
        # to the metadata primary like anyone's.
        target = addresses[-1]
        _wait_until_user_known(target)
        sessions: list[list[int]] = [[] for _ in range(FLOODERS)]
        share = LOGINS // FLOODERS
        threads = [
            threading.Thread(target=_flood, args=(target, 0x5_0000 + k * share, share, sessions[k]))
            for k in range(FLOODERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert not any(thread.is_alive() for thread in threads)
        opened = sorted(session for share_sessions in sessions for session in share_sessions)
        assert len(opened) == LOGINS and len(set(opened)) == LOGINS  # each opened its own
        # Root is served under its session, a command that needs root's rights.
        users = root.call(CommandCode.GET_USERS, wire.Empty())
        assert isinstance(users, wire.Users)
        assert sorted(user.username for user in users.users) == ["flooder", "iggy"]
        # The flooder holds its quota, no more: its first sessions were ended by its own
        # later logins, root's and the node's system session by nobody.
        stats = root.call(CommandCode.GET_STATS, wire.Empty())
        assert isinstance(stats, wire.Stats)
        assert stats.clients_count <= SESSIONS_PER_USER_MAX + 2
    with WireClient(target, timeout_s=30) as latest:
        latest.login("flooder", FLOODER_PASSWORD)
        me = latest.call(CommandCode.GET_ME, wire.Empty())
        assert isinstance(me, wire.ClientInfoDetails) and me.user_id == created.user.id
