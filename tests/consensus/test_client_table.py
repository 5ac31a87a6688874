"""The client table: verdicts, commit-only updates, deterministic eviction, encoding."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from consensus.client_table import ClientTable, Verdict
from consensus.messages import MessageError, Prepare, make_prepare_header, root_header


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
        operation=7,
        timestamp_us=op,
        body=b"",
    )
    return Prepare(header=header, body=b"")


def test_client_table_partition_group_judges_by_session_and_request() -> None:
    table = ClientTable(4, registers_sessions=False)
    assert table.judge(1, 10, 1, register=False) is Verdict.NEW
    table.commit(_committed(1, 1, 10, 1), b"r1", register=False)
    assert table.judge(1, 10, 1, register=False) is Verdict.DUPLICATE
    assert table.judge(1, 10, 0, register=False) is Verdict.STALE
    assert table.judge(1, 10, 2, register=False) is Verdict.NEW
    assert table.judge(1, 9, 2, register=False) is Verdict.SESSION_EVICTED
    assert table.judge(1, 11, 1, register=False) is Verdict.NEW  # registered again
    assert table.judge(2, 0, 1, register=False) is Verdict.NO_SESSION


def test_client_table_metadata_group_needs_a_committed_register() -> None:
    table = ClientTable(4, registers_sessions=True)
    assert table.judge(1, 5, 1, register=False) is Verdict.NO_SESSION
    assert table.judge(1, 0, 0, register=True) is Verdict.NEW
    table.commit(_committed(5, 1, 0, 0), b"session", register=True)
    entry = table.get(1)
    assert entry is not None and entry.session == 5  # the register's commit op
    assert table.judge(1, 0, 0, register=True) is Verdict.DUPLICATE
    assert table.judge(1, 5, 1, register=False) is Verdict.NEW


def test_client_table_evicts_the_oldest_commit_and_refuses_its_session() -> None:
    table = ClientTable(2, registers_sessions=False)
    table.commit(_committed(1, 100, 10, 1), b"a", register=False)
    table.commit(_committed(2, 200, 20, 1), b"b", register=False)
    table.commit(_committed(3, 100, 10, 2), b"c", register=False)
    evicted = table.commit(_committed(4, 300, 30, 1), b"d", register=False)
    assert evicted is not None and evicted.client_id == 200
    # The evicted client's retry may already be applied: it gets an error, not a reply.
    assert table.judge(200, 20, 1, register=False) is Verdict.SESSION_EVICTED
    assert table.judge(400, 31, 1, register=False) is Verdict.NEW


def test_client_table_encoding_round_trips_and_rejects_garbage() -> None:
    table = ClientTable(3, registers_sessions=False)
    table.commit(_committed(1, 7, 1, 1), b"x" * 10, register=False)
    table.commit(_committed(2, 3, 1, 1), b"", register=False)
    copy = ClientTable(3, registers_sessions=False)
    copy.restore(table.encode())
    assert copy.encode() == table.encode()
    with pytest.raises(MessageError):
        copy.restore(table.encode()[:-1])


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
            and self.table.judge(client, 1, request, register=False) is not Verdict.NEW
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
