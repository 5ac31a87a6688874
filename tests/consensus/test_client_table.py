"""The client table: verdicts, commit-only updates, deterministic eviction, encoding, and
sessions that end and start again under the same client id."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from consensus.client_table import SAME_NUMBER_REQUESTS_MAX, ClientTable, Verdict
from consensus.messages import MessageError, Prepare, make_prepare_header, root_header

REGISTER_REQUEST = 0  # the Iggy wire sends request 0 on every Register
OPERATION = 7  # the operation of every request committed here
CHECKSUM = bytes(16)  # the identity digest of every request committed here


def _judge(
    table: ClientTable,
    client_id: int,
    session: int,
    request: int,
    *,
    register: bool,
    operation: int = OPERATION,
    request_checksum: bytes = CHECKSUM,
) -> Verdict:
    """Judge a request whose identity is, unless told, that of the committed ones."""
    return table.judge(
        client_id,
        session,
        request,
        register=register,
        operation=operation,
        request_checksum=request_checksum,
    )


def _committed(op: int, client_id: int, session: int, request: int) -> Prepare:
    header = make_prepare_header(
        group=0,
        view=0,
        op=op,
        commit=0,
        parent=root_header(0).checksum,
        client_id=client_id,
        session=session,
        request=request,
        operation=OPERATION,
        timestamp_us=op,
        body=b"",
    )
    return Prepare(header=header, body=b"")


def _register(table: ClientTable, op: int, client_id: int, request: int = 0) -> None:
    """Commit a register at ``op`` (the replica prepares registers with session 0)."""
    table.commit(_committed(op, client_id, 0, request), b"registered at %d" % op, register=True)


class Sessions:
    """The metadata state's answer to ``session_live``: which session each client holds."""

    def __init__(self) -> None:
        self.held: dict[int, int] = {}

    def __call__(self, client_id: int, session: int) -> bool:
        return self.held.get(client_id) == session


def _metadata_table(clients_max: int = 4) -> tuple[ClientTable, Sessions]:
    sessions = Sessions()
    return ClientTable(clients_max, registers_sessions=True, session_live=sessions), sessions


# --- partition groups ------------------------------------------------------------------------


def test_client_table_partition_group_judges_by_session_and_request() -> None:
    table = ClientTable(4, registers_sessions=False)
    assert _judge(table, 1, 10, 1, register=False) is Verdict.NEW
    table.commit(_committed(1, 1, 10, 1), b"r1", register=False)
    assert _judge(table, 1, 10, 1, register=False) is Verdict.DUPLICATE
    assert _judge(table, 1, 10, 0, register=False) is Verdict.STALE
    assert _judge(table, 1, 10, 2, register=False) is Verdict.NEW
    assert _judge(table, 1, 9, 2, register=False) is Verdict.SESSION_EVICTED
    assert _judge(table, 2, 0, 1, register=False) is Verdict.NO_SESSION
    assert _judge(table, 2, 3, 1, register=False) is Verdict.NEW


def test_partition_group_answers_a_retry_under_a_newer_session_from_the_table() -> None:
    """The client registered again (session 20) and retries request 5, which its old
    session (10) got applied: the cached reply, not a second application."""
    table = ClientTable(4, registers_sessions=False)
    table.commit(_committed(1, 1, 10, 5), b"applied once", register=False)
    assert _judge(table, 1, 20, 5, register=False) is Verdict.DUPLICATE
    cached = table.cached_reply(1, register=False, operation=OPERATION)
    assert (cached.request, cached.op, cached.reply) == (5, 1, b"applied once")
    assert _judge(table, 1, 20, 4, register=False) is Verdict.STALE
    assert _judge(table, 1, 20, 6, register=False) is Verdict.NEW


def test_partition_group_takes_the_newer_session_once_a_request_under_it_commits() -> None:
    table = ClientTable(4, registers_sessions=False)
    table.commit(_committed(1, 1, 10, 5), b"a", register=False)
    table.commit(_committed(2, 1, 20, 6), b"b", register=False)
    entry = table.get(1)
    assert entry is not None and (entry.session, entry.request) == (20, 6)
    # A late frame of the old session is never applied, whatever its number.
    assert _judge(table, 1, 10, 7, register=False) is Verdict.SESSION_EVICTED


# --- the metadata group: registers -----------------------------------------------------------


def test_client_table_metadata_group_needs_a_committed_register() -> None:
    table = ClientTable(4, registers_sessions=True)
    assert _judge(table, 1, 5, 1, register=False) is Verdict.NO_SESSION
    assert _judge(table, 1, 0, 0, register=True) is Verdict.NEW
    _register(table, 5, 1)
    entry = table.get(1)
    assert entry is not None and entry.session == 5  # the register's commit op
    assert _judge(table, 1, 0, 0, register=True) is Verdict.DUPLICATE
    assert _judge(table, 1, 5, 1, register=False) is Verdict.NEW
    assert _judge(table, 1, 6, 1, register=False) is Verdict.NO_SESSION  # not one we made


def test_a_retried_register_gets_its_live_session_back() -> None:
    table, sessions = _metadata_table()
    _register(table, 5, 1)
    sessions.held[1] = 5
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.DUPLICATE
    cached = table.cached_reply(1, register=True)
    assert (cached.session, cached.request, cached.op) == (5, 0, 5)
    assert cached.reply == b"registered at 5"


def test_a_client_id_whose_session_ended_registers_a_new_one() -> None:
    """Register only, then the session ends (logout, connection closed, eviction)."""
    table, sessions = _metadata_table()
    _register(table, 5, 1)
    sessions.held[1] = 5
    del sessions.held[1]  # the node ended it
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.NEW
    _register(table, 9, 1)
    sessions.held[1] = 9
    entry = table.get(1)
    assert entry is not None and entry.session == 9
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.DUPLICATE
    assert table.cached_reply(1, register=True).session == 9
    assert _judge(table, 1, 5, 1, register=False) is Verdict.SESSION_EVICTED  # the old one
    assert _judge(table, 1, 9, 1, register=False) is Verdict.NEW


def test_a_client_id_whose_session_ended_after_writes_registers_a_new_one() -> None:
    """A metadata write moved the client's request number above the register's 0: the
    register is still judged as the register it repeats, not as a stale request."""
    table, sessions = _metadata_table()
    _register(table, 5, 1)
    sessions.held[1] = 5
    table.commit(_committed(6, 1, 5, 1), b"stream created", register=False)
    table.commit(_committed(7, 1, 5, 2), b"topic created", register=False)
    # While the session lives, a register from the client id gets it back (a second
    # connection of the same client, or a late copy of the login): the register's reply,
    # not the latest write's.
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.DUPLICATE
    cached = table.cached_reply(1, register=True)
    assert (cached.session, cached.request, cached.op) == (5, 0, 5)
    assert cached.reply == b"registered at 5"
    del sessions.held[1]
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.NEW
    _register(table, 8, 1)
    sessions.held[1] = 8
    # The numbers go on across the new session: a fresh one is new, a retry of the last
    # write is answered from the table, an older one is dropped.
    assert _judge(table, 1, 8, 3, register=False) is Verdict.NEW
    assert _judge(table, 1, 8, 2, register=False) is Verdict.DUPLICATE
    cached = table.cached_reply(1, register=False, operation=OPERATION)
    assert (cached.request, cached.op, cached.reply) == (2, 7, b"topic created")
    assert _judge(table, 1, 8, 1, register=False) is Verdict.STALE


def test_a_register_that_opened_no_session_runs_again() -> None:
    """A register the state machine rejected (an inactive user) left nothing to protect."""
    table, _ = _metadata_table()
    _register(table, 5, 1)
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.NEW


def test_without_session_liveness_a_session_lives_until_superseded() -> None:
    table = ClientTable(4, registers_sessions=True)
    _register(table, 5, 1)
    table.commit(_committed(6, 1, 5, 1), b"w", register=False)
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.DUPLICATE
    assert table.cached_reply(1, register=True).session == 5


def test_registers_that_carry_growing_request_numbers_are_judged_by_number() -> None:
    """A client that numbers its registers like any request (the simulator's) opens a new
    session with each new number and gets its session back on a retry."""
    table = ClientTable(4, registers_sessions=True)
    _register(table, 5, 1, request=3)
    assert _judge(table, 1, 0, 3, register=True) is Verdict.DUPLICATE
    assert _judge(table, 1, 0, 2, register=True) is Verdict.STALE
    assert _judge(table, 1, 0, 0, register=True) is Verdict.STALE  # its first login's copy
    assert _judge(table, 1, 0, 4, register=True) is Verdict.NEW
    table.commit(_committed(6, 1, 5, 4), b"w", register=False)
    # Now the write's number: no login the entry holds, and not a late copy of one either
    # (it is above the register's 3), so the client is told to log in again.
    assert _judge(table, 1, 0, 4, register=True) is Verdict.SESSION_EVICTED
    assert _judge(table, 1, 0, 5, register=True) is Verdict.NEW
    _register(table, 7, 1, request=5)
    assert _judge(table, 1, 0, 3, register=True) is Verdict.STALE
    assert _judge(table, 1, 0, 4, register=True) is Verdict.STALE
    # A write whose number only a register used is no retry of anything: never a
    # register's reply for a write.
    assert _judge(table, 1, 7, 5, register=False) is Verdict.STALE
    assert _judge(table, 1, 7, 6, register=False) is Verdict.NEW


def test_a_late_copy_of_a_first_login_does_not_end_a_later_login_session() -> None:
    """A client that numbers its registers logged in under 0, wrote, and logged in again
    under 4: a copy of its first login that arrives now is stale, whether the session it
    would supersede lives or not (invariant 7), and a repeat of the later login still gets
    its session back."""
    table, sessions = _metadata_table()
    _register(table, 5, 1)
    sessions.held[1] = 5
    for op, request in ((6, 1), (7, 2), (8, 3)):
        table.commit(_committed(op, 1, 5, request), b"w%d" % request, register=False)
    _register(table, 9, 1, request=4)
    sessions.held[1] = 9
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.STALE
    del sessions.held[1]
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.STALE
    sessions.held[1] = 9
    assert _judge(table, 1, 0, 4, register=True) is Verdict.DUPLICATE
    assert table.cached_reply(1, register=True).session == 9


def test_a_login_whose_session_the_entry_does_not_hold_is_told_to_log_in_again() -> None:
    """Never dropped (invariant 8): the client repeats the login to join its session on
    another connection and waits for the answer."""
    # A register committed out of the client's order ended the session of its login 4.
    table, _ = _metadata_table()
    _register(table, 5, 1)
    table.commit(_committed(6, 1, 5, 3), b"w3", register=False)
    _register(table, 9, 1, request=4)
    table.commit(_committed(10, 1, 9, 5), b"w5", register=False)
    _register(table, 11, 1)
    assert _judge(table, 1, 0, 4, register=True) is Verdict.SESSION_EVICTED
    assert _judge(table, 1, 9, 6, register=False) is Verdict.SESSION_EVICTED
    assert _judge(table, 1, 0, 6, register=True) is Verdict.NEW  # its next login
    # An entry made anew by a write (evicted while the write was in flight) holds no
    # register: the login that opened the write's session is not there to repeat.
    table, _ = _metadata_table()
    table.commit(_committed(6, 1, 5, 7), b"w7", register=False)
    assert _judge(table, 1, 0, 4, register=True) is Verdict.SESSION_EVICTED
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.NEW  # the wire's
    assert _judge(table, 1, 0, 8, register=True) is Verdict.NEW


def test_a_register_keeps_the_client_request_numbers() -> None:
    table, sessions = _metadata_table()
    _register(table, 5, 1)
    table.commit(_committed(6, 1, 5, 7), b"w", register=False)
    _register(table, 8, 1)
    entry = table.get(1)
    assert entry is not None
    assert (entry.session, entry.request_number, entry.request_op, entry.request_max) == (
        8,
        7,
        6,
        7,
    )
    assert entry.op == 8
    del sessions  # unused: the table needs no liveness to commit


def test_an_entry_shows_the_latest_commit_of_either_kind() -> None:
    table, _ = _metadata_table()
    _register(table, 5, 1)
    entry = table.get(1)
    assert entry is not None
    assert (entry.request, entry.op, entry.reply) == (0, 5, b"registered at 5")
    table.commit(_committed(6, 1, 5, 1), b"w", register=False)
    assert (entry.request, entry.op, entry.reply) == (1, 6, b"w")
    _register(table, 8, 1)
    assert (entry.request, entry.op, entry.reply) == (0, 8, b"registered at 8")
    entry.reply = b"replaced"
    assert (entry.register_reply, entry.request_reply) == (b"replaced", b"w")


def test_a_metadata_entry_made_by_a_write_has_no_register_to_repeat() -> None:
    """A write whose client was evicted while it was in the pipeline commits into a fresh
    entry; the client's next register is new, not a duplicate of nothing."""
    table, _ = _metadata_table()
    table.commit(_committed(6, 1, 5, 3), b"w", register=False)
    assert _judge(table, 1, 0, REGISTER_REQUEST, register=True) is Verdict.NEW


# --- eviction ----------------------------------------------------------------------------------


def test_client_table_evicts_the_oldest_commit_and_refuses_its_session() -> None:
    table = ClientTable(2, registers_sessions=False)
    table.commit(_committed(1, 100, 10, 1), b"a", register=False)
    table.commit(_committed(2, 200, 20, 1), b"b", register=False)
    table.commit(_committed(3, 100, 10, 2), b"c", register=False)
    evicted = table.commit(_committed(4, 300, 30, 1), b"d", register=False)
    assert evicted is not None and evicted.client_id == 200
    # The evicted client's retry may already be applied: it gets an error, not a reply.
    assert _judge(table, 200, 20, 1, register=False) is Verdict.SESSION_EVICTED
    assert _judge(table, 400, 31, 1, register=False) is Verdict.NEW


def test_eviction_orders_by_the_latest_commit_register_or_request() -> None:
    table, _ = _metadata_table(clients_max=2)
    _register(table, 1, 100)
    _register(table, 2, 200)
    table.commit(_committed(3, 100, 1, 1), b"w", register=False)
    _register(table, 4, 200)  # client 200 registered again: its latest commit is op 4
    _register(table, 5, 100)
    evicted = table.commit(_committed(6, 300, 0, 0), b"r", register=True)
    assert evicted is not None and evicted.client_id == 200
    assert table.session_evicted_max == 4
    # Its next register is new, whatever happened to its session.
    assert _judge(table, 200, 0, REGISTER_REQUEST, register=True) is Verdict.NEW


# --- encoding ----------------------------------------------------------------------------------


def _sample_metadata_table() -> ClientTable:
    table = ClientTable(3, registers_sessions=True)
    _register(table, 1, 7)
    table.commit(_committed(2, 7, 1, 1), b"x" * 10, register=False)
    _register(table, 3, 3, request=4)
    table.commit(_committed(4, 9, 1, 2), b"", register=False)
    _register(table, 5, 7)
    return table


def test_client_table_encoding_round_trips_and_rejects_garbage() -> None:
    table = ClientTable(3, registers_sessions=False)
    table.commit(_committed(1, 7, 1, 1), b"x" * 10, register=False)
    table.commit(_committed(2, 3, 1, 1), b"", register=False)
    copy = ClientTable(3, registers_sessions=False)
    copy.restore(table.encode())
    assert copy.encode() == table.encode()
    with pytest.raises(MessageError):
        copy.restore(table.encode()[:-1])


def test_metadata_table_encoding_round_trips_registers_and_requests() -> None:
    table = _sample_metadata_table()
    copy = ClientTable(3, registers_sessions=True)
    copy.restore(table.encode())
    assert copy.encode() == table.encode()
    assert copy.entries == table.entries
    for client_id in (3, 7, 9):
        for register in (False, True):
            for request in (0, 1, 2, 4, 5):
                assert _judge(copy, client_id, 1, request, register=register) is _judge(
                    table, client_id, 1, request, register=register
                )


def test_restore_rejects_every_truncation() -> None:
    encoded = _sample_metadata_table().encode()
    for size in range(len(encoded)):
        with pytest.raises(MessageError):
            ClientTable(3, registers_sessions=True).restore(encoded[:size])


def _entry_offset(index: int) -> int:
    """The byte offset of entry ``index`` when no entry before it holds reply bytes."""
    return 16 + 93 * index


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda b: b"VCT2" + b[4:], "the encoding before request identities"),
        (lambda b: b[:100] + b"\x02" + b[101:], "unknown flag"),
        (lambda b: b[:100] + b"\x00" + b[101:], "a register number without a register"),
        (lambda b: b[:56] + b"\x01" + b[57:], "a request operation without a request"),
        (lambda b: b[:60] + b"\x01" + b[61:], "a request digest without a request"),
        (lambda b: b[:16] + b"\x00" * 16 + b[32:], "client id 0"),
        (lambda b: b[:16] + b[109:125] + b[32:], "entries out of client id order"),
        (lambda b: b + b"\x00", "trailing byte"),
    ],
)
def test_restore_rejects_inconsistent_entries(mutate: Callable[[bytes], bytes], why: str) -> None:
    table = ClientTable(3, registers_sessions=True)
    table.commit(_committed(1, 5, 0, 3), b"", register=True)
    table.commit(_committed(2, 6, 0, 0), b"", register=True)
    encoded = table.encode()
    assert encoded[_entry_offset(0) + 84] == 1  # the flags byte of entry 0
    assert mutate(encoded) != encoded, why
    with pytest.raises(MessageError):
        ClientTable(3, registers_sessions=True).restore(mutate(encoded))


def test_a_partition_table_refuses_an_encoded_register() -> None:
    encoded = _sample_metadata_table().encode()
    with pytest.raises(MessageError):
        ClientTable(3, registers_sessions=False).restore(encoded)


@settings(max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.binary(max_size=200).map(lambda b: b"VCT3\x01\x00\x00\x00" + b),
    )
)
def test_restore_of_random_bytes_fails_cleanly_or_round_trips(data: bytes) -> None:
    table = ClientTable(3, registers_sessions=True)
    try:
        table.restore(data)
    except MessageError:
        return
    assert table.encode() == data


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.integers(1, 5), st.booleans(), st.integers(0, 9), st.binary(max_size=8)),
        max_size=12,
    )
)
def test_encoding_round_trips_any_committed_history(
    commits: list[tuple[int, bool, int, bytes]],
) -> None:
    table = ClientTable(3, registers_sessions=True)
    for op, (client_id, register, request, reply) in enumerate(commits, start=1):
        entry = table.get(client_id)
        session = 0 if register or entry is None else entry.session
        table.commit(_committed(op, client_id, session, request), reply, register=register)
    copy = ClientTable(3, registers_sessions=True)
    copy.restore(table.encode())
    assert copy.entries == table.entries
    assert copy.session_evicted_max == table.session_evicted_max


# --- model-based: sessions that end, retries, evictions ---------------------------------------


class ClientTableMachine(RuleBasedStateMachine):
    """Against a model: the table keeps the newest committed request per client, bounded."""

    def __init__(self) -> None:
        super().__init__()
        self.table = ClientTable(3, registers_sessions=False)
        self.model: dict[int, tuple[int, int]] = {}  # client -> (op, request)
        self.op = 0

    @rule(client=st.integers(1, 6))
    def commit(self, client: int) -> None:
        self.op += 1
        request = self.model.get(client, (0, 0))[1] + 1
        if (
            self.table.get(client) is None
            and _judge(self.table, client, 1, request, register=False) is not Verdict.NEW
        ):
            return
        self.table.commit(_committed(self.op, client, 1, request), b"r", register=False)
        self.model[client] = (self.op, request)
        while len(self.model) > 3:
            oldest = min(self.model, key=lambda c: (self.model[c][0], c))
            del self.model[oldest]

    @invariant()
    def matches_model(self) -> None:
        assert sorted(self.table.entries) == sorted(self.model)
        for client, (op, request) in self.model.items():
            entry = self.table.get(client)
            assert entry is not None and (entry.op, entry.request) == (op, request)


TestClientTableMachine = ClientTableMachine.TestCase

METADATA, PARTITION = 0, 1
CLIENTS = (1, 2, 3, 4)
NUMBERING_CLIENTS = (3, 4)
"""Clients that number their registers like any request, from 0 (the simulator's); the
others send request 0 on every register, as the Iggy wire does."""


class _Client:
    def __init__(self, *, numbers_registers: bool) -> None:
        self.session = 0  # the session the client holds, as far as it knows
        # Grows across all the client's sessions (its registers' too, if it numbers them).
        self.request_next = 0 if numbers_registers else 1
        self.numbers_registers = numbers_registers
        self.logins: list[int] = []  # the numbers of its registers, if it numbers them
        self.in_doubt: tuple[int, int] | None = None  # (group, request) without a reply
        self.register_in_doubt = False


class SessionsMachine(RuleBasedStateMachine):
    """Clients of one metadata group and one partition group, with tables smaller than the
    client count: they register (request 0, as on the wire), write, lose replies and retry,
    under a new session too; the application ends sessions behind their backs. Some
    clients number their registers like any request instead, repeat their login to join
    their session, and meet late copies of their older logins.

    What must hold: nothing is applied twice unless the client's entry in that group was
    evicted in between (the documented bound); a retried register gets its session back
    while it lives, and any register from a client id whose session ended opens a new one;
    a register is never dropped unless it is a late copy of an older login, and such a
    copy is dropped (it never ends the session) while the entry holds the client's latest
    login; a fresh request of a registered client is never refused while its entry is
    held."""

    def __init__(self) -> None:
        super().__init__()
        self.sessions = Sessions()
        self.tables = {
            METADATA: ClientTable(3, registers_sessions=True, session_live=self.sessions),
            PARTITION: ClientTable(3, registers_sessions=False),
        }
        self.ops = {METADATA: 0, PARTITION: 0}
        self.clients = {c: _Client(numbers_registers=c in NUMBERING_CLIENTS) for c in CLIENTS}
        self.evictions: dict[tuple[int, int], int] = {}  # (group, client) -> count
        # (group, client, request) -> eviction count of that entry when it was applied
        self.applied: dict[tuple[int, int, int], int] = {}
        # client -> the session a late copy of its login opened (the documented bound)
        self.copy_sessions: dict[int, int] = {}

    def _commit(
        self, group: int, client_id: int, session: int, request: int, *, register: bool
    ) -> int:
        self.ops[group] += 1
        op = self.ops[group]
        reply = b"%d:%d:%d" % (group, client_id, request)
        prepare = _committed(op, client_id, 0 if register else session, request)
        evicted = self.tables[group].commit(prepare, reply, register=register)
        if evicted is not None:
            key = (group, evicted.client_id)
            self.evictions[key] = self.evictions.get(key, 0) + 1
        return op

    @rule(client_id=st.sampled_from(CLIENTS), lose_reply=st.booleans())
    def register(self, client_id: int, lose_reply: bool) -> None:
        client = self.clients[client_id]
        table = self.tables[METADATA]
        entry = table.get(client_id)
        held = self.sessions.held.get(client_id)
        request = REGISTER_REQUEST
        if client.numbers_registers:
            if client.register_in_doubt:
                request = client.logins[-1]  # the retry
            else:
                request = client.request_next
                client.request_next += 1
                client.logins.append(request)
        verdict = _judge(table, client_id, 0, request, register=True)
        if verdict is Verdict.DUPLICATE:
            assert entry is not None and held == entry.session, "an ended session came back"
            session = table.cached_reply(client_id, register=True).session
            assert session == held
        else:
            assert verdict is Verdict.NEW, f"a register was judged {verdict}"
            copied = held is not None and held == self.copy_sessions.get(client_id)
            if client.register_in_doubt and held is not None and entry is not None and not copied:
                raise AssertionError("a retried register opened a second live session")
            session = self._commit(METADATA, client_id, 0, request, register=True)
            self.sessions.held[client_id] = session  # registering again ends the old one
        client.register_in_doubt = lose_reply
        client.session = 0 if lose_reply else session

    @rule(client_id=st.sampled_from(NUMBERING_CLIENTS))
    def join(self, client_id: int) -> None:
        """The client repeats the login that opened its session, as on a connection that
        has not joined it: it waits for the answer, so it is never dropped."""
        client = self.clients[client_id]
        if client.session == 0:
            return
        table = self.tables[METADATA]
        verdict = _judge(table, client_id, 0, client.logins[-1], register=True)
        assert verdict is not Verdict.STALE, "a client's login to join its session dropped"
        if verdict is Verdict.DUPLICATE:
            assert table.cached_reply(client_id, register=True).session == client.session
            return
        if verdict is Verdict.NEW:
            # The session had ended: the login opens another, which the client takes for
            # the loss of its own (what it had in flight may or may not be applied).
            self.sessions.held[client_id] = self._commit(
                METADATA, client_id, 0, client.logins[-1], register=True
            )
        else:
            assert verdict is Verdict.SESSION_EVICTED, verdict
        client.session = 0

    @rule(client_id=st.sampled_from(NUMBERING_CLIENTS), which=st.integers(0, 7))
    def late_login_copy(self, client_id: int, which: int) -> None:
        """A copy of one of the client's older logins, late in the network."""
        client = self.clients[client_id]
        if len(client.logins) < 2:
            return
        request = client.logins[which % (len(client.logins) - 1)]
        table = self.tables[METADATA]
        entry = table.get(client_id)
        verdict = _judge(table, client_id, 0, request, register=True)
        # While the entry holds the client's latest login, an older one is a late copy.
        if (
            entry is not None
            and entry.register_reply is not None
            and entry.register_request == client.logins[-1]
        ):
            assert verdict is Verdict.STALE, f"a late login copy was judged {verdict}"
        if verdict is Verdict.NEW:
            # Into an entry that forgot the client's numbers (evicted): the documented
            # bound. The copy opens a session, which ends the client's.
            session = self._commit(METADATA, client_id, 0, request, register=True)
            self.sessions.held[client_id] = session
            self.copy_sessions[client_id] = session

    @rule(client_id=st.sampled_from(CLIENTS))
    def end_session(self, client_id: int) -> None:
        self.sessions.held.pop(client_id, None)

    @precondition(lambda self: any(c.session for c in self.clients.values()))
    @rule(
        client_id=st.sampled_from(CLIENTS),
        group=st.sampled_from((METADATA, PARTITION)),
        retry=st.booleans(),
        lose_reply=st.booleans(),
    )
    def write(self, client_id: int, group: int, retry: bool, lose_reply: bool) -> None:
        client = self.clients[client_id]
        if client.session == 0 or self.sessions.held.get(client_id) != client.session:
            return  # admission refuses a session the metadata state does not hold
        if retry and client.in_doubt is not None:
            group, request = client.in_doubt  # possibly under a newer session: face (b)
        else:
            request = client.request_next
            client.request_next += 1
        table = self.tables[group]
        entry = table.get(client_id)
        verdict = _judge(table, client_id, client.session, request, register=False)
        key = (group, client_id, request)
        evictions = self.evictions.get((group, client_id), 0)
        if verdict is Verdict.NEW:
            if key in self.applied:
                assert self.applied[key] != evictions, f"request {key} applied twice"
            self._commit(group, client_id, client.session, request, register=False)
            self.applied[key] = evictions
        elif verdict is Verdict.DUPLICATE:
            cached = table.cached_reply(client_id, register=False, operation=OPERATION)
            assert cached.request == request and key in self.applied
            assert cached.reply == b"%d:%d:%d" % key
        elif verdict is Verdict.STALE:
            assert key in self.applied, f"request {key} dropped but never applied"
        else:
            # Refused: the client's entry is gone, or its session is older than the one
            # the entry holds; the client must register again. Never for a client whose
            # entry holds its current session.
            assert entry is None or entry.session > client.session, verdict
            client.session = 0
            return
        fresh = not (retry and client.in_doubt is not None)
        if fresh and entry is not None and entry.session == client.session:
            assert verdict is Verdict.NEW, "a registered client was locked out"
        client.in_doubt = (group, request) if lose_reply else None

    @invariant()
    def bounded_and_encodable(self) -> None:
        for group, table in self.tables.items():
            assert len(table) <= 3
            copy = ClientTable(3, registers_sessions=group == METADATA)
            copy.restore(table.encode())
            assert copy.entries == table.entries


TestSessionsMachine = SessionsMachine.TestCase
TestSessionsMachine.settings = settings(max_examples=200, stateful_step_count=60)


# --- request identity: a duplicate is the same request, not only the same number ----------


def _committed_as(
    op: int, client_id: int, session: int, request: int, operation: int, digest: bytes
) -> Prepare:
    header = make_prepare_header(
        group=0,
        view=0,
        op=op,
        commit=0,
        parent=root_header(0).checksum,
        client_id=client_id,
        session=session,
        request=request,
        operation=operation,
        timestamp_us=op,
        body=b"",
        request_checksum=digest,
    )
    return Prepare(header=header, body=b"")


DIGEST_A = b"A" * 16
DIGEST_B = b"B" * 16


def test_partition_group_applies_another_request_under_a_reused_number() -> None:
    """A client that numbers every partition request alike (at-least-once, as Iggy):
    another body or another operation under the cached number is new work, never the
    cached reply; the same request again is still a duplicate."""
    table = ClientTable(4, registers_sessions=False)
    table.commit(_committed_as(1, 1, 10, 5, 160, DIGEST_A), b"batch A", register=False)
    assert (
        _judge(table, 1, 10, 5, register=False, operation=160, request_checksum=DIGEST_A)
        is Verdict.DUPLICATE
    )
    assert (
        _judge(table, 1, 10, 5, register=False, operation=160, request_checksum=DIGEST_B)
        is Verdict.NEW
    )
    assert (
        _judge(table, 1, 10, 5, register=False, operation=162, request_checksum=DIGEST_A)
        is Verdict.NEW
    )
    table.commit(_committed_as(2, 1, 10, 5, 160, DIGEST_B), b"batch B", register=False)
    # Now B is the latest cached request: a retry of B is a duplicate.
    assert (
        _judge(table, 1, 10, 5, register=False, operation=160, request_checksum=DIGEST_B)
        is Verdict.DUPLICATE
    )
    assert (
        table.cached_reply(1, register=False, operation=160, request_checksum=DIGEST_B).reply
        == b"batch B"
    )
    # A retry of A, applied before B under the same number, is still A's duplicate.
    assert (
        _judge(table, 1, 10, 5, register=False, operation=160, request_checksum=DIGEST_A)
        is Verdict.DUPLICATE
    )
    cached = table.cached_reply(1, register=False, operation=160, request_checksum=DIGEST_A)
    assert (cached.op, cached.reply) == (1, b"batch A")
    # An older number stays stale whatever its identity.
    assert (
        _judge(table, 1, 10, 4, register=False, operation=160, request_checksum=DIGEST_B)
        is Verdict.STALE
    )


def test_metadata_group_refuses_another_request_under_the_cached_number() -> None:
    table, sessions = _metadata_table()
    _register(table, 5, 1)
    sessions.held[1] = 5
    table.commit(_committed_as(6, 1, 5, 1, 128, DIGEST_A), b"stream created", register=False)
    assert (
        _judge(table, 1, 5, 1, register=False, operation=128, request_checksum=DIGEST_A)
        is Verdict.DUPLICATE
    )
    assert (
        _judge(table, 1, 5, 1, register=False, operation=128, request_checksum=DIGEST_B)
        is Verdict.REQUEST_MISMATCH
    )
    assert (
        _judge(table, 1, 5, 1, register=False, operation=130, request_checksum=DIGEST_A)
        is Verdict.REQUEST_MISMATCH
    )


def test_a_register_with_another_digest_is_not_its_duplicate() -> None:
    """A login as another user under a client id that holds a live session: not a retry
    of that session's register, so it never gets that session back."""
    table, sessions = _metadata_table()
    table.commit(_committed_as(5, 1, 0, 0, 1, DIGEST_A), b"root's session", register=True)
    sessions.held[1] = 5
    assert _judge(table, 1, 0, 0, register=True, request_checksum=DIGEST_A) is Verdict.DUPLICATE
    assert _judge(table, 1, 0, 0, register=True, request_checksum=DIGEST_B) is Verdict.NEW


def test_identities_survive_encoding() -> None:
    table = ClientTable(4, registers_sessions=True)
    table.commit(_committed_as(5, 1, 0, 0, 1, DIGEST_A), b"registered", register=True)
    table.commit(_committed_as(6, 1, 5, 3, 141, DIGEST_B), b"user created", register=False)
    copy = ClientTable(4, registers_sessions=True)
    copy.restore(table.encode())
    entry = copy.get(1)
    assert entry is not None
    assert (entry.request_operation, entry.request_checksum) == (141, DIGEST_B)
    assert entry.register_checksum == DIGEST_A
    assert (
        _judge(copy, 1, 5, 3, register=False, operation=141, request_checksum=DIGEST_A)
        is Verdict.REQUEST_MISMATCH
    )


def test_an_entry_keeps_a_bounded_window_of_requests_under_one_number() -> None:
    table = ClientTable(4, registers_sessions=False)
    digests = [bytes([i]) * 16 for i in range(1, SAME_NUMBER_REQUESTS_MAX + 2)]
    for op, digest in enumerate(digests, start=1):
        table.commit(_committed_as(op, 1, 10, 5, 160, digest), b"r%d" % op, register=False)
    entry = table.get(1)
    assert entry is not None and len(entry.earlier) == SAME_NUMBER_REQUESTS_MAX - 1
    # The oldest fell out of the window: it is new again (at-least-once, never a wrong
    # reply); every later one is answered with its own reply.
    first = _judge(table, 1, 10, 5, register=False, operation=160, request_checksum=digests[0])
    assert first is Verdict.NEW
    for op, digest in enumerate(digests[1:], start=2):
        cached = table.cached_reply(1, register=False, operation=160, request_checksum=digest)
        assert (cached.op, cached.reply) == (op, b"r%d" % op)
    copy = ClientTable(4, registers_sessions=False)
    copy.restore(table.encode())
    assert copy.entries == table.entries
    # A higher number starts a new window.
    table.commit(_committed_as(20, 1, 10, 6, 160, digests[0]), b"r20", register=False)
    entry = table.get(1)
    assert entry is not None and entry.earlier == []
