"""One replica at a time: each handler fed a message directly, its actions inspected."""

from __future__ import annotations

import random
from dataclasses import replace

from consensus.events import (
    Action,
    AppendToJournal,
    ClientError,
    MessageReceived,
    PrepareSynced,
    PrepareWritten,
    ReplyToClient,
    SendToReplica,
    SyncJournal,
    Ticked,
    TruncateJournal,
    WriteSuperblock,
)
from consensus.messages import (
    Commit,
    DoViewChange,
    Message,
    Prepare,
    PrepareOk,
    RepairPrepare,
    RequestPrepares,
    RequestSnapshot,
    RequestStartView,
    StartView,
    StartViewChange,
    checksum,
    make_prepare_header,
    root_header,
)
from consensus.protocols import DurableState
from consensus.replica import Replica, Status
from consensus.testing import (
    REJECTED_BODY,
    REJECTED_STATUS,
    LedgerStateMachine,
    MemoryLog,
    client_request,
)
from tests.consensus.harness import TEST_CONFIG


def _replica(index: int, *, count: int = 3, persisted: bool = False) -> Replica:
    return Replica(
        0,
        index,
        count,
        MemoryLog(),
        LedgerStateMachine(),
        random.Random(index),
        persisted=persisted,
        config=TEST_CONFIG,
    )


def _prepares(count: int, *, view: int = 0, first_parent: bytes | None = None) -> list[Prepare]:
    parent = first_parent if first_parent is not None else root_header(0).checksum
    out = []
    for op in range(1, count + 1):
        header = make_prepare_header(
            group=0,
            view=view,
            op=op,
            commit=0,
            parent=parent,
            client_id=100 + op,
            session=1,
            request=1,
            operation=7,
            timestamp_us=op,
            body=b"b%d" % op,
        )
        out.append(Prepare(header=header, body=b"b%d" % op))
        parent = header.checksum
    return out


def _sent(actions: list[Action], kind: type[Message]) -> list[tuple[int, Message]]:
    return [
        (a.replica, a.message)
        for a in actions
        if isinstance(a, SendToReplica) and isinstance(a.message, kind)
    ]


def _receive(replica: Replica, message: Message) -> list[Action]:
    return replica.step(MessageReceived(message))


def test_on_client_requested_primary_appends_and_sends_to_every_backup() -> None:
    primary = _replica(0)
    actions = primary.step(client_request(5, 1, 1, 7, b"hello", 42))
    appends = [a for a in actions if isinstance(a, AppendToJournal)]
    assert len(appends) == 1 and appends[0].prepare.op == 1
    assert sorted(r for r, _ in _sent(actions, Prepare)) == [1, 2]
    assert primary.op == 1 and primary.commit_max == 0


def test_on_client_requested_rejected_by_state_machine_answers_status_and_logs_nothing() -> None:
    primary = _replica(0)
    actions = primary.step(client_request(5, 1, 1, 7, REJECTED_BODY, 42))
    assert actions == [
        ReplyToClient(5, 1, 1, 7, checksum(REJECTED_BODY), 0, b"", status=REJECTED_STATUS)
    ]
    assert primary.op == 0
    # Nothing entered the client table: the next request is judged afresh and prepared.
    actions = primary.step(client_request(5, 1, 2, 7, b"fine", 43))
    appends = [a for a in actions if isinstance(a, AppendToJournal)]
    assert [a.prepare.op for a in appends] == [1]
    assert appends[0].prepare.header.frontier == 1


def test_on_client_requested_backup_drops_the_request() -> None:
    assert _replica(1).step(client_request(5, 1, 1, 7, b"x", 1)) == []


def test_on_client_requested_retry_in_flight_is_absorbed_by_the_pipeline() -> None:
    primary = _replica(0)
    primary.step(client_request(5, 1, 1, 7, b"x", 1))
    assert primary.step(client_request(5, 1, 1, 7, b"x", 1)) == []
    assert primary.op == 1


def test_would_prepare_is_true_only_for_new_work() -> None:
    """What a host that has no room asks before it refuses a request (a full disk): a
    retry in the pipeline, or one the client table answers, is not new work."""
    primary = _replica(0)
    assert primary.would_prepare(5, 1, 1, 7, checksum(b"x"))
    actions = primary.step(client_request(5, 1, 1, 7, b"x", 1))
    prepare = next(a.prepare for a in actions if isinstance(a, AppendToJournal))
    assert not primary.would_prepare(5, 1, 1, 7, checksum(b"x"))  # in the pipeline
    primary.step(PrepareWritten(1, prepare.checksum))
    _receive(primary, PrepareOk(0, 2, 0, 1, prepare.checksum))
    assert primary.commit_max == 1
    # Committed: the table repeats its reply, to this request only.
    assert not primary.would_prepare(5, 1, 1, 7, checksum(b"x"))
    assert primary.would_prepare(5, 1, 2, 7, checksum(b"x"))
    assert primary.would_prepare(6, 1, 1, 7, checksum(b"x"))


def test_on_client_requested_full_pipeline_drops_new_requests() -> None:
    primary = _replica(0)
    for client in range(1, TEST_CONFIG.pipeline_prepares_max + 2):
        primary.step(client_request(client, 1, 1, 7, b"x", 1))
    assert primary.op == TEST_CONFIG.pipeline_prepares_max


def test_on_prepare_backup_acks_only_after_the_write_is_reported() -> None:
    backup = _replica(1)
    (prepare,) = _prepares(1)
    actions = _receive(backup, prepare)
    assert [a for a in actions if isinstance(a, AppendToJournal)]
    assert _sent(actions, PrepareOk) == []
    actions = backup.step(PrepareWritten(1, prepare.checksum))
    ((target, ok),) = _sent(actions, PrepareOk)
    assert target == 0 and isinstance(ok, PrepareOk) and ok.op == 1


def test_on_prepare_persisted_backup_acks_only_after_sync() -> None:
    backup = _replica(1, persisted=True)
    (prepare,) = _prepares(1)
    actions = _receive(backup, prepare)
    assert [a for a in actions if isinstance(a, SyncJournal)]
    assert _sent(backup.step(PrepareWritten(1, prepare.checksum)), PrepareOk) == []
    assert _sent(backup.step(PrepareSynced(1, prepare.checksum)), PrepareOk)


def test_on_prepare_out_of_order_waits_for_the_gap_and_requests_repair() -> None:
    backup = _replica(1)
    first, second = _prepares(2)
    actions = _receive(backup, second)
    assert not [a for a in actions if isinstance(a, AppendToJournal)]
    assert backup.op == 2 and backup.journal_op == 0
    repair = _sent(backup.step(Ticked()), RequestPrepares) + _sent(
        [a for _ in range(TEST_CONFIG.repair_timeout_ticks) for a in backup.step(Ticked())],
        RequestPrepares,
    )
    assert repair and all(isinstance(m, RequestPrepares) and m.op_min == 1 for _, m in repair)
    actions = _receive(backup, first)
    assert [a.prepare.op for a in actions if isinstance(a, AppendToJournal)] == [1, 2]


def test_on_prepare_ok_commits_on_a_majority_and_replies() -> None:
    primary = _replica(0)
    actions = primary.step(client_request(5, 1, 1, 7, b"x", 1))
    prepare = next(a.prepare for a in actions if isinstance(a, AppendToJournal))
    primary.step(PrepareWritten(1, prepare.checksum))
    assert primary.commit_max == 0  # its own ack alone is not a majority of 3
    actions = _receive(primary, PrepareOk(0, 2, 0, 1, prepare.checksum))
    assert primary.commit_max == 1 and primary.commit_min == 1
    replies = [a for a in actions if isinstance(a, ReplyToClient)]
    assert len(replies) == 1 and replies[0].op == 1 and replies[0].error is None


def _prepared(primary: Replica, clients: range) -> list[Prepare]:
    """One request of each client prepared by ``primary``, each written locally."""
    prepares = []
    for client in clients:
        actions = primary.step(client_request(client, 1, 1, 7, b"x", client))
        prepare = next(a.prepare for a in actions if isinstance(a, AppendToJournal))
        primary.step(PrepareWritten(prepare.op, prepare.checksum))
        prepares.append(prepare)
    return prepares


def test_on_prepare_ok_that_drains_the_pipeline_sends_one_commit_ahead_of_the_replies() -> None:
    """A backup learns the commit as it happens, not at the next heartbeat: the ack that
    commits the last op in flight sends each backup one Commit, before the replies, and
    a later copy of that ack (no commit advance) sends nothing."""
    primary = _replica(0)
    (prepare,) = _prepared(primary, range(5, 6))
    actions = _receive(primary, PrepareOk(0, 2, 0, 1, prepare.checksum))
    assert primary.commit_max == 1
    assert _sent(actions, Commit) == [(1, Commit(0, 0, 0, 1)), (2, Commit(0, 0, 0, 1))]
    first_reply = next(i for i, a in enumerate(actions) if isinstance(a, ReplyToClient))
    last_commit = max(i for i, a in enumerate(actions) if isinstance(a, SendToReplica))
    assert last_commit < first_reply
    assert _sent(_receive(primary, PrepareOk(0, 2, 0, 1, prepare.checksum)), Commit) == []
    assert _sent(_receive(primary, PrepareOk(0, 1, 0, 1, prepare.checksum)), Commit) == []


def test_on_prepare_ok_with_prepares_still_in_flight_sends_no_commit() -> None:
    """While the pipeline holds ops, the next prepare carries the commit: only the ack
    that commits the last of them sends a Commit, with the commit it reached."""
    primary = _replica(0)
    first, second, third = _prepared(primary, range(5, 8))
    assert _sent(_receive(primary, PrepareOk(0, 2, 0, 1, first.checksum)), Commit) == []
    assert _sent(_receive(primary, PrepareOk(0, 2, 0, 2, second.checksum)), Commit) == []
    assert primary.commit_max == 2
    actions = _receive(primary, PrepareOk(0, 1, 0, 3, third.checksum))
    assert primary.commit_max == 3
    assert _sent(actions, Commit) == [(1, Commit(0, 0, 0, 3)), (2, Commit(0, 0, 0, 3))]


def test_a_prompt_commit_restarts_the_heartbeat() -> None:
    """The heartbeat beats only after commit_interval_ticks of silence: a primary that just
    sent Commit as its pipeline drained sends the next one a whole interval later."""
    primary = _replica(0)
    (prepare,) = _prepared(primary, range(5, 6))
    for _ in range(TEST_CONFIG.commit_interval_ticks - 1):
        primary.step(Ticked())
    _receive(primary, PrepareOk(0, 2, 0, 1, prepare.checksum))
    beats = [
        tick
        for tick in range(1, TEST_CONFIG.commit_interval_ticks + 1)
        if _sent(primary.step(Ticked()), Commit)
    ]
    assert beats == [TEST_CONFIG.commit_interval_ticks]


def test_on_prepare_ok_with_a_wrong_checksum_is_ignored() -> None:
    primary = _replica(0)
    primary.step(client_request(5, 1, 1, 7, b"x", 1))
    _receive(primary, PrepareOk(0, 2, 0, 1, bytes(16)))
    _receive(primary, PrepareOk(0, 1, 0, 1, bytes(16)))
    assert primary.commit_max == 0


def test_on_commit_backup_applies_up_to_the_commit_only() -> None:
    backup = _replica(1)
    prepares = _prepares(3)
    for prepare in prepares:
        _receive(backup, prepare)
    _receive(backup, Commit(0, 0, 0, 1))
    assert backup.commit_min == 1
    _receive(backup, Commit(0, 0, 0, 2))
    assert backup.commit_min == 2


def test_on_normal_timeout_backup_starts_a_view_change_after_writing_the_view() -> None:
    backup = _replica(1)
    actions: list[Action] = []
    for _ in range(TEST_CONFIG.normal_timeout_ticks * 2):
        actions += backup.step(Ticked())
        if backup.status is Status.VIEW_CHANGE:
            break
    assert backup.view == 1
    kinds = [type(a) for a in actions]
    superblock = kinds.index(WriteSuperblock)
    first_svc = next(
        i
        for i, a in enumerate(actions)
        if isinstance(a, SendToReplica) and isinstance(a.message, StartViewChange)
    )
    assert superblock < first_svc


def test_on_start_view_change_quorum_sends_do_view_change_to_the_new_primary() -> None:
    replica = _replica(2)
    actions = _receive(replica, StartViewChange(0, 0, 1))
    assert replica.view == 1 and replica.status is Status.VIEW_CHANGE
    dvcs = _sent(actions, DoViewChange)
    assert [target for target, _ in dvcs] == [1]  # primary of view 1 in group 0


def test_on_do_view_change_new_primary_takes_the_highest_log_view_not_the_longest_log() -> None:
    """view change: the log of the highest log_view wins over a longer, older log."""
    check_new_primary_takes_highest_log_view(Replica)


def check_new_primary_takes_highest_log_view(replica_class: type[Replica]) -> None:
    new_primary = replica_class(
        0, 2, 5, MemoryLog(), LedgerStateMachine(), random.Random(2), config=TEST_CONFIG
    )
    old = _prepares(4, view=0)
    newer_header_2 = make_prepare_header(
        group=0,
        view=1,
        op=2,
        commit=1,
        parent=old[0].checksum,
        client_id=999,
        session=1,
        request=1,
        operation=7,
        timestamp_us=9,
        body=b"v1",
    )
    newer = [old[0], Prepare(newer_header_2, b"v1")]
    for prepare in old[:1]:
        _receive(new_primary, prepare)
        new_primary.step(PrepareWritten(prepare.op, prepare.checksum))
    long_stale = DoViewChange(
        0, 0, 2, 0, 4, 1, 1, tuple(p.header for p in old), (True, True, True, True)
    )
    short_new = DoViewChange(0, 1, 2, 1, 2, 1, 1, tuple(p.header for p in newer), (True, True))
    _receive(new_primary, StartViewChange(0, 0, 2))
    _receive(new_primary, StartViewChange(0, 1, 2))
    _receive(new_primary, long_stale)
    _receive(new_primary, short_new)
    assert new_primary.op == 2
    appended: list[Prepare] = []
    for prepare in newer[1:]:
        actions = _receive(new_primary, prepare)
        appended += [a.prepare for a in actions if isinstance(a, AppendToJournal)]
        new_primary.step(PrepareWritten(prepare.op, prepare.checksum))
    assert new_primary.status is Status.NORMAL and new_primary.view == 2
    assert [p.header.client_id for p in appended] == [999]


def test_on_start_view_backup_truncates_what_the_new_log_replaced() -> None:
    backup = _replica(2)
    stale = _prepares(3, view=0)
    for prepare in stale:
        _receive(backup, prepare)
        backup.step(PrepareWritten(prepare.op, prepare.checksum))
    replacement = make_prepare_header(
        group=0,
        view=1,
        op=2,
        commit=1,
        parent=stale[0].checksum,
        client_id=55,
        session=1,
        request=1,
        operation=7,
        timestamp_us=9,
        body=b"new",
    )
    start_view = StartView(0, 1, 1, 2, 1, 0, (stale[0].header, replacement))
    actions = _receive(backup, start_view)
    assert TruncateJournal(after_op=1) in actions
    assert backup.status is Status.NORMAL and backup.view == 1 and backup.op == 2
    actions = _receive(backup, Prepare(replacement, b"new"))
    assert [a.prepare.op for a in actions if isinstance(a, AppendToJournal)] == [2]


def test_on_request_start_view_primary_answers_with_the_nonce() -> None:
    primary = _replica(0)
    actions = _receive(primary, RequestStartView(0, 2, 0, 4242))
    ((target, message),) = _sent(actions, StartView)
    assert target == 2 and isinstance(message, StartView) and message.nonce == 4242


def test_restarted_replica_ignores_a_start_view_without_its_nonce() -> None:
    log = MemoryLog()
    replica = Replica(
        0,
        1,
        3,
        log,
        LedgerStateMachine(),
        random.Random(1),
        durable=DurableState(0, 0, 0, 0),
        config=TEST_CONFIG,
    )
    actions = replica.step(Ticked())
    assert replica.status is Status.RECOVERING
    assert len(_sent(actions, RequestStartView)) == 2
    _receive(replica, StartView(0, 0, 0, 0, 0, 0, (root_header(0),)))
    assert replica.status is Status.RECOVERING
    _receive(replica, StartView(0, 0, 0, 0, 0, replica.nonce, (root_header(0),)))
    status: Status = replica.status
    assert status is Status.NORMAL


def test_recovering_replica_does_not_vote_or_ack() -> None:
    replica = Replica(
        0,
        1,
        3,
        MemoryLog(),
        LedgerStateMachine(),
        random.Random(1),
        durable=DurableState(0, 0, 0, 0),
        config=TEST_CONFIG,
    )
    replica.step(Ticked())
    (prepare,) = _prepares(1)
    actions = _receive(replica, prepare) + _receive(replica, StartViewChange(0, 2, 1))
    assert _sent(actions, PrepareOk) == [] and _sent(actions, DoViewChange) == []


def test_on_request_prepares_answers_each_op_it_holds() -> None:
    backup = _replica(1)
    for prepare in _prepares(3):
        _receive(backup, prepare)
    actions = _receive(backup, RequestPrepares(0, 2, 0, 2, 5))
    # In normal status and with ops of its verified log, it vouches for each answer.
    answers = [m for _, m in _sent(actions, RepairPrepare) if isinstance(m, RepairPrepare)]
    assert [(m.view, m.prepare.op) for m in answers] == [(0, 2), (0, 3)]
    assert _sent(actions, Prepare) == []


def _far_behind_backup(*, state_transfer: bool) -> tuple[Replica, list[Action]]:
    """Backup 1 of view 0 that learns the commit is at op 600 while it holds nothing."""
    backup = Replica(
        0,
        1,
        3,
        MemoryLog(),
        LedgerStateMachine(),
        random.Random(1),
        config=replace(TEST_CONFIG, state_transfer=state_transfer),
    )
    actions = _receive(backup, Commit(0, 0, 0, 600))
    for _ in range(TEST_CONFIG.repair_timeout_ticks):
        actions += backup.step(Ticked())
    return backup, actions


def test_far_behind_replica_of_a_log_group_repairs_instead_of_jumping() -> None:
    backup, actions = _far_behind_backup(state_transfer=False)
    assert _sent(actions, RequestSnapshot) == []
    asks = [m for _, m in _sent(actions, RequestPrepares) if isinstance(m, RequestPrepares)]
    chunk = TEST_CONFIG.repair_chunk_max
    assert [(m.op_min, m.op_max) for m in asks] == [(1, chunk)]
    # Vouched answers are taken without a header to check them against, and the last one
    # of the chunk asks for the next chunk at once, not at the next repair timeout.
    prepares = _prepares(2 * chunk)
    actions = []
    for prepare in prepares[:chunk]:
        actions += _receive(backup, RepairPrepare(0, 0, 0, prepare))
    appended = [a.prepare.op for a in actions if isinstance(a, AppendToJournal)]
    assert appended == list(range(1, chunk + 1))
    asks = [m for _, m in _sent(actions, RequestPrepares) if isinstance(m, RequestPrepares)]
    assert [(m.op_min, m.op_max) for m in asks] == [(chunk + 1, 2 * chunk)]


def test_far_behind_replica_of_a_state_group_fetches_a_snapshot() -> None:
    _, actions = _far_behind_backup(state_transfer=True)
    assert [m for _, m in _sent(actions, RequestSnapshot)] != []
    assert _sent(actions, RequestPrepares) == []


def test_evicted_session_gets_a_typed_error_reply() -> None:
    primary = Replica(
        0,
        0,
        1,
        MemoryLog(),
        LedgerStateMachine(),
        random.Random(0),
        config=replace(TEST_CONFIG, clients_max=2),
    )
    for client in (1, 2, 3):
        actions = primary.step(client_request(client, 10 * client, 1, 7, b"x", 1))
        prepare = next(a.prepare for a in actions if isinstance(a, AppendToJournal))
        primary.step(PrepareWritten(prepare.op, prepare.checksum))
    actions = primary.step(client_request(1, 10, 1, 7, b"x", 1))
    (reply,) = [a for a in actions if isinstance(a, ReplyToClient)]
    assert reply.error is ClientError.SESSION_EVICTED and reply.reply == b""
