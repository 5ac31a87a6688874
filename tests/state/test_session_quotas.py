"""No user can end another user's session, through the real metadata machine and replica.

A user who logs in without end (each login under a new client id opens a session) ends
only its own oldest sessions (``SESSIONS_PER_USER_MAX``), and the metadata group's client
table, as full as the session table, pushes out entries of ended sessions before the entry
of anyone's live one; a login under another user's client id never enters the log.
(A real node checks every password with scrypt, tens of milliseconds each: thousands of
logins are driven here, through the same machine and replica the node runs.)
"""

from __future__ import annotations

import random

from broker.state.codec import encode_command
from broker.state.credentials import hash_password
from broker.state.metadata import (
    SESSIONS_MAX,
    SESSIONS_PER_USER_MAX,
    ApplyContext,
    CreateRootUser,
    CreateStream,
    CreateUser,
    Register,
)
from broker.state.metadata_machine import CLIENT_ID_TAKEN_STATUS, MetadataMachine
from consensus import ReplicaConfig
from consensus.events import AppendToJournal, Event, PrepareWritten, ReplyToClient
from consensus.replica import Replica
from consensus.testing import MemoryLog, client_request
from sdk import wire
from sdk.wire.codes import Operation
from tests.state.helpers import driver_with_root

ROOT_CLIENT = 0xC0FFEE
LOGINS = SESSIONS_MAX + 8  # 8,200: past every bound at once


class _Node:
    """One replica of the metadata group (a cluster of one), stepped synchronously."""

    def __init__(self) -> None:
        self.log = MemoryLog()
        self.machine = MetadataMachine()
        self.replica = Replica(
            0,
            0,
            1,
            self.log,
            self.machine,
            random.Random(0),
            config=ReplicaConfig(clients_max=SESSIONS_MAX),
            register_operation=Operation.REGISTER,
            session_live=self.machine.session_live,
        )
        self.timestamp_us = 0

    def request(self, client_id: int, session: int, request: int, command: object) -> ReplyToClient:
        operation, body = encode_command(command)  # type: ignore[arg-type]
        self.timestamp_us += 1
        event = client_request(client_id, session, request, operation, body, self.timestamp_us)
        replies: list[ReplyToClient] = []
        pending: list[Event] = [event]
        while pending:
            for action in self.replica.step(pending.pop()):
                if isinstance(action, AppendToJournal):
                    self.log.append(action.prepare)
                    pending.append(PrepareWritten(action.prepare.op, action.prepare.checksum))
                elif isinstance(action, ReplyToClient):
                    replies.append(action)
        (reply,) = replies
        return reply


def _bootstrap() -> tuple[_Node, int, int]:
    """A node with the root user logged in and a user "nobody" without permissions:
    ``(node, root's session, nobody's user id)``."""
    node = _Node()
    system = node.request(0xB007, 0, 0, Register(0xB007, 0))
    root_hash = hash_password("secret", b"salt", n=16, r=1, p=1)
    node.request(0xB007, system.op, 1, CreateRootUser("iggy", root_hash))
    login = node.request(ROOT_CLIENT, 0, 0, Register(ROOT_CLIENT, 0))
    root_session = login.op
    created = node.request(
        ROOT_CLIENT,
        root_session,
        1,
        CreateUser("nobody", hash_password("pw", b"salt", n=16, r=1, p=1)),
    )
    nobody = wire.UserDetails.decode(wire.split_result(Operation.CREATE_USER, created.reply))
    return node, root_session, nobody.user.id


def test_a_user_logging_in_8200_times_leaves_roots_session_alive() -> None:
    node, root_session, nobody = _bootstrap()
    for index in range(LOGINS):
        client = 0x1_0000 + index
        reply = node.request(client, 0, 0, Register(client, nobody))
        assert wire.split_result(Operation.REGISTER, reply.reply)  # each opens a session
    state = node.machine.state
    assert state.session(root_session).user_id == 0
    held = [s for s in state.sessions() if s.user_id == nobody]
    assert len(held) == SESSIONS_PER_USER_MAX
    assert state.check_invariants() == []
    # Root is still served under its session: its client-table entry was not pushed out.
    stream = node.request(ROOT_CLIENT, root_session, 2, CreateStream("still-here"))
    assert stream.error is None and stream.op != 0
    wire.StreamDetails.decode(wire.split_result(Operation.CREATE_STREAM, stream.reply))


def test_a_login_under_another_users_client_id_never_enters_the_log() -> None:
    node, root_session, nobody = _bootstrap()
    op_before = node.replica.op
    taken = node.request(ROOT_CLIENT, 0, 0, Register(ROOT_CLIENT, nobody))
    assert (taken.op, taken.status) == (0, int(CLIENT_ID_TAKEN_STATUS))
    assert node.replica.op == op_before  # nothing prepared: the client table is untouched
    assert node.machine.state.session(root_session).user_id == 0
    stream = node.request(ROOT_CLIENT, root_session, 2, CreateStream("owner-untouched"))
    assert stream.error is None and stream.op != 0


def test_a_full_session_table_ends_a_session_of_the_user_holding_most() -> None:
    """Many users each under their own cap fill the table: the next login ends the oldest
    session of the user holding the most, never one of a user holding few."""
    driver = driver_with_root()
    heavy_count = SESSIONS_MAX // SESSIONS_PER_USER_MAX
    users = [driver.add_user(f"user{index}", None) for index in range(heavy_count + 1)]
    state, op, client = driver.state, driver.op, 1
    for user in users[:heavy_count]:
        for _ in range(SESSIONS_PER_USER_MAX - (1 if user == users[0] else 0)):
            op, client = op + 1, client + 1
            state.apply(Register(client, user), ApplyContext(op, op))
    # Root's session and the others fill every slot.
    assert len(state.sessions()) == SESSIONS_MAX
    light = users[heavy_count]
    op, client = op + 1, client + 1
    state.apply(Register(client, light), ApplyContext(op, op))
    counts = {u: sum(1 for s in state.sessions() if s.user_id == u) for u in [0, *users]}
    assert counts[light] == 1 and counts[0] == 1
    assert counts[users[1]] == SESSIONS_PER_USER_MAX - 1  # the heaviest, lowest id, paid
    assert counts[users[0]] == SESSIONS_PER_USER_MAX - 1
    assert state.check_invariants() == []
