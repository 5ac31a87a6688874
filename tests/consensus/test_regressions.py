"""Regressions found by the simulator and by hypothesis, each pinned by the smallest case.

1. Backups that trade repair answers kept resetting their normal timeout, so a primary
   that crashed and came back recovering (it neither leads nor answers repairs) was never
   replaced: the hypothesis schedule of ``test_message_orders`` (3 replicas, replicated,
   the primary crashes with requests in flight) stayed stuck forever.
2. A new primary kept an op that no DoViewChange of its quorum named, so nobody could ever
   repair it and every later view change stalled on it (same schedule, after fix 1).
3. A backup dropped prepares more than ``repair_ops_max`` above its commit, even when they
   were exactly the ops its repair asked for: after a whole-cluster power outage the
   commit hint is stale and the new view's log runs far above it (simulator seed 73).
4. A replica whose recovery cut its last records (rot at the head of the journal, which
   looks like a torn write) was trusted as intact: from the newest log_view, its shorter
   log became the new view's over an older log_view's that held a committed op, and the op
   was lost (simulator seed 718, ``tests/sim/test_found_schedules.py``).
5. A replica whose recovery found a corrupt record truncated its journal there and, rightly,
   did not vote; but the truncation erased the damage, so after a second restart before it
   had rejoined its journal looked whole and it voted: from the same log_view as the
   third replica, its log without the ops it had acknowledged was part of a view-change
   quorum that dropped them, and a committed op was replaced (simulator seed 60 under the
   partition-heavy profile, ``tests/sim/test_found_schedules.py``). The damage is now
   durable (``DurableState.log_damaged``) until the replica has installed a view's log.
6. A group of one whose power loss left a hole (a later unsynced prepare reached the disk,
   an earlier one did not) refused itself a vote, as a damaged replica of a larger group
   must, and then, with nobody to ask, started a view change regardless and tripped its
   own assertion (simulator seed 327, ``tests/sim/test_found_schedules.py``).
7. A copy of a client's first login (request 0), late in the network, was judged a new
   login after the client had logged in again under a higher number, and superseded its
   live session; the client's repeated login, to join its session on another connection,
   was then judged stale and dropped every time, and the client was never told to log in
   again (simulator seed 418 of an earlier workload).
"""

from __future__ import annotations

import dataclasses
import random

from consensus.events import Action, MessageReceived, PrepareWritten, SendToReplica, Ticked
from consensus.messages import DoViewChange, Prepare, PrepareOk, StartViewChange
from consensus.replica import Replica, Status
from consensus.testing import LedgerStateMachine, MemoryLog
from tests.consensus.harness import REGISTER, TEST_CONFIG, Cluster, Node
from tests.consensus.test_replica_handlers import _prepares

CLIENTS = (1, 2, 3)

# The shrunk hypothesis example, as (choice, argument) steps of test_message_orders.
_SCHEDULE: list[tuple[str, int]] = [
    ("request", 1), ("deliver", 0), ("deliver", 1), ("tick", 0), ("request", 1),
    ("deliver", 1), ("tick", 0), ("drop", 0), ("deliver", 0), ("deliver", 0), ("tick", 0),
    ("tick", 0), ("request", 1), ("tick", 0), ("deliver", 2), ("deliver", 2), ("drop", 0),
    ("drop", 0), ("request", 2), ("deliver", 0), ("deliver", 0), ("deliver", 0),
    ("deliver", 0), ("deliver", 0), ("deliver", 0), ("crash", 0),
]  # fmt: skip


def _replica(index: int, config: object = TEST_CONFIG) -> Replica:
    assert isinstance(config, type(TEST_CONFIG))
    return Replica(
        0, index, 3, MemoryLog(), LedgerStateMachine(), random.Random(index), config=config
    )


def _write(replica: Replica, prepare: Prepare) -> list[Action]:
    actions = replica.step(MessageReceived(prepare))
    return actions + replica.step(PrepareWritten(prepare.op, prepare.checksum))


def test_recovering_primary_after_a_crash_with_requests_in_flight_is_replaced() -> None:
    """view change: the primary crashes with requests in flight and restarts recovering;
    the backups replace it and every request completes."""
    cluster = Cluster(3, persisted=False, seed=3)
    next_request = dict.fromkeys(CLIENTS, 1)
    for choice, argument in _SCHEDULE:
        if choice in ("deliver", "drop") and cluster.network:
            envelope = cluster.network.pop(argument)
            if choice == "deliver":
                cluster.deliver(envelope)
        elif choice == "tick":
            for node in cluster.live():
                cluster.tick_node(node.index)
        elif choice == "request":
            if cluster.committed(argument, next_request[argument]):
                next_request[argument] += 1
            cluster.request(argument, next_request[argument], body=bytes([argument]))
        elif choice == "crash":
            cluster.crash(argument)
        cluster.complete_io()
        cluster.check_safety()
    cluster.restart(0)
    for _ in range(60):
        pending = [c for c in CLIENTS if not cluster.committed(c, next_request[c])]
        if not pending and cluster.converged():
            break
        for client in pending:
            cluster.request(client, next_request[client], body=bytes([client]))
        cluster.tick(25)
    assert all(cluster.committed(c, next_request[c]) for c in CLIENTS)
    cluster.check_safety()


def test_on_prepare_repair_answer_does_not_keep_the_primary_in_office() -> None:
    backup = _replica(1)
    prepares = _prepares(2)
    for prepare in prepares:
        _write(backup, prepare)
    # A peer answers our repair requests with a prepare we already know, again and again.
    for tick in range(TEST_CONFIG.normal_timeout_ticks * 2):
        if tick % 5 == 0:
            backup.step(MessageReceived(prepares[-1]))
        backup.step(Ticked())
        if backup.status is Status.VIEW_CHANGE:
            break
    assert backup.status is Status.VIEW_CHANGE and backup.view == 1


def test_on_do_view_change_truncates_an_op_that_no_do_view_change_names() -> None:
    new_primary = _replica(1)  # the primary of view 1 in group 0
    prepares = _prepares(4)
    for prepare in prepares[:2]:
        _write(new_primary, prepare)
    # Op 4 arrived out of order; op 3 was never seen by anyone but the old primary.
    new_primary.step(MessageReceived(prepares[3]))
    new_primary.step(MessageReceived(StartViewChange(0, 2, 1)))
    assert new_primary.status is Status.VIEW_CHANGE
    peer = DoViewChange(
        group=0,
        replica=2,
        view=1,
        log_view=0,
        op=2,
        commit=2,
        headers_op_min=2,
        headers=(prepares[1].header,),
        present=(True,),
    )
    new_primary.step(MessageReceived(peer))
    # Op 3 is named by nobody and nacked by both: truncated with everything above it.
    assert new_primary.op == 2
    assert (new_primary.status, new_primary.view) == (Status.NORMAL, 1)


def test_on_prepare_holds_repaired_ops_far_above_a_stale_commit() -> None:
    config = dataclasses.replace(TEST_CONFIG, repair_ops_max=16, pipeline_prepares_max=8)
    backup = _replica(1, config)
    prepares = _prepares(40)  # all carry commit 0, as after a whole-cluster restart
    acked = 0
    for prepare in prepares:
        for action in _write(backup, prepare):
            if isinstance(action, SendToReplica) and isinstance(action.message, PrepareOk):
                acked = max(acked, action.message.op)
    assert backup.commit_min == 0
    assert backup.journal_op == 40 and acked == 40


def test_restart_with_a_damaged_head_does_not_vote_away_a_committed_op() -> None:
    """recovery: the replica of the newest log_view restarts with its last, committed op
    cut by recovery (a damaged head looks like a torn write); the new primary must not
    take that shorter log over an older log_view's and lose the op."""
    cluster = Cluster(3, persisted=True, seed=11)
    client = 1
    for request in (1, 2, 3):
        cluster.request(client, request)
        cluster.run_until(lambda r=request: cluster.committed(client, r))  # type: ignore[misc]
    # View 1 (primary 1) forms without replica 2, which keeps log_view 0.
    cluster.isolate(2)
    cluster.crash(0)
    cluster.restart(0)
    cluster.run_until(
        lambda: (
            all(cluster.nodes[i].replica.status is Status.NORMAL for i in (0, 1))
            and cluster.nodes[1].replica.view == 1
            and cluster.nodes[0].replica.durable.log_view == 1
        )
    )
    # Op 4 commits in view 1 on replicas 0 and 1 only.
    for _ in range(50):
        if cluster.committed(client, 4):
            break
        cluster.request(client, 4, to=1)
        cluster.tick(10)
    assert cluster.committed(client, 4)
    assert cluster.nodes[0].log.op_max() == 4 and cluster.nodes[2].log.op_max() == 3
    # Power outage; at rest, replica 0's last record rots and recovery cuts it.
    for node in cluster.nodes:
        cluster.crash(node.index, lose_unsynced=True)
    cluster.heal()
    cluster.nodes[0].log.lose_head(4)
    for index in (0, 1, 2):
        cluster.restart(index)
    assert cluster.nodes[0].replica.op == 3 and not cluster.nodes[0].replica.trusted
    assert cluster.nodes[0].replica.durable.log_view == 1
    assert cluster.nodes[2].replica.durable.log_view == 0
    # Replica 1, the only intact holder of op 4, cannot reach replica 2 for a while, so
    # replicas 0 and 2 alone could form a view-change quorum (they may not: 0 is untrusted).
    cluster.blocked.add((1, 2))
    cluster.tick(TEST_CONFIG.view_change_timeout_ticks * 3)
    cluster.blocked.clear()
    cluster.run_until(cluster.converged)
    for node in cluster.nodes:
        assert [e.request for e in node.state_machine.applied][:4] == [1, 2, 3, 4]
    cluster.request(client, 5)
    cluster.run_until(lambda: cluster.committed(client, 5))
    cluster.check_safety()


def _log_damaged(node: Node) -> bool:
    """Whether ``node``'s superblock marks its journal damaged (durable across restarts)."""
    assert node.superblock is not None
    return node.superblock.log_damaged


def test_restart_after_a_corrupt_record_was_cut_still_does_not_vote() -> None:
    """recovery: a backup restarts with a corrupt record among ops it acknowledged, cuts
    its journal there, and restarts again before rejoining: its journal now looks whole,
    but it must still not vote, or it and the replica that missed those ops form a view
    that loses them."""
    cluster = Cluster(3, persisted=True, seed=12)
    client = 1
    for request in (1, 2, 3):
        cluster.request(client, request)
        cluster.run_until(lambda r=request: cluster.committed(client, r))  # type: ignore[misc]
    # Ops 4 and 5 commit in view 0 on replicas 0 (the primary) and 1 only.
    cluster.isolate(2)
    for request in (4, 5):
        cluster.request(client, request, to=0)
        cluster.run_until(lambda r=request: cluster.committed(client, r))  # type: ignore[misc]
    cluster.complete_io()
    assert cluster.nodes[1].log.op_max() == 5 and cluster.nodes[2].log.op_max() == 3
    # Replica 1 loses power; at rest its record of op 4 rots. Recovery finds it, so the
    # replica does not vote; it cuts its journal after op 3, and the damage is gone.
    cluster.crash(1, lose_unsynced=True)
    cluster.nodes[1].log.corrupt(4)
    cluster.restart(1)
    damaged = cluster.nodes[1]
    assert not damaged.replica.trusted
    assert damaged.log.op_max() == 3 and not damaged.log.faulty_ops()
    assert _log_damaged(damaged)
    # It loses power again before it has rejoined: the journal it meets now is whole.
    cluster.crash(1, lose_unsynced=True)
    cluster.restart(1)
    assert not damaged.replica.trusted
    assert damaged.replica.durable.log_view == cluster.nodes[2].replica.durable.log_view == 0
    # Replica 0, the only intact holder of ops 4 and 5, is cut off; replicas 1 and 2 could
    # form a view-change quorum from log_view 0 and op 3 (they may not: 1 is untrusted).
    cluster.heal()
    cluster.isolate(0)
    for _ in range(3):
        for index in (1, 2):
            cluster.request(client, 6, to=index)
        cluster.tick(TEST_CONFIG.view_change_timeout_ticks)
    cluster.check_safety()  # with 1 voting, request 6 would commit at op 4 in view 1
    assert not cluster.committed(client, 6)
    cluster.heal()
    cluster.run_until(cluster.converged)
    for node in cluster.nodes:
        assert [e.request for e in node.state_machine.applied][:5] == [1, 2, 3, 4, 5]
    # Rejoined, with the view's log durable: the damage is behind it.
    assert not _log_damaged(damaged)
    cluster.request(client, 6)
    cluster.run_until(lambda: cluster.committed(client, 6))
    cluster.check_safety()


def test_lone_replica_restarts_over_a_hole_its_power_loss_left() -> None:
    """recovery: a group of one loses power with two unsynced prepares; the later one
    reached the disk, the earlier did not. Nobody else holds them, so the lone replica
    takes its log up to the hole and leads again (it used to refuse itself a vote and
    trip its own assertion)."""
    cluster = Cluster(1, persisted=True, seed=13)
    for request in (1, 2, 3):
        cluster.request(1, request)
        cluster.run_until(lambda r=request: cluster.committed(1, r))  # type: ignore[misc]
    # Two prepares written, neither synced, so neither acknowledged.
    cluster.request(1, 4)
    cluster.request(2, 1)
    lone = cluster.nodes[0]
    assert lone.log.op_max() == 5 and lone.log.synced_op == 3
    assert not cluster.replies_for(1, 4) and not cluster.replies_for(2, 1)
    cluster.crash(0)
    lone.log.corrupt(4)  # the hole: op 5 landed, op 4 did not
    cluster.restart(0)
    assert lone.replica.op == 3 and lone.log.op_max() == 3
    cluster.run_until(lambda: lone.replica.status is Status.NORMAL)
    cluster.request(1, 4)
    cluster.request(2, 1)
    cluster.run_until(lambda: cluster.committed(1, 4) and cluster.committed(2, 1))
    assert [e.request for e in lone.state_machine.applied][:3] == [1, 2, 3]
    cluster.check_safety()


_LOGIN = b"login as the same user"  # a register's digest names its user: every login alike


def _register(cluster: Cluster, client: int, request: int) -> int:
    """Commit a login of ``client`` numbered ``request``; its session (the register's op)."""
    cluster.request(client, request, _LOGIN, session=0, operation=REGISTER)
    cluster.run_until(lambda: cluster.committed(client, request))
    return cluster.replies_for(client, request)[-1].op


def test_a_late_copy_of_a_first_login_neither_ends_a_newer_session_nor_locks_out() -> None:
    """client table: a client that numbers its registers like any request logs in (request
    0), writes, logs in again (request 4) and writes under that session; then a copy of
    its first login, held up in the network, reaches the primary. It used to be judged a
    new login and commit, superseding the client's live session; the client's repeated
    login (request 4, joining its session on another connection) was then judged stale
    and dropped, every time: the client never heard of its session again."""
    cluster = Cluster(3, seed=14, register_operation=REGISTER)
    client = 9
    first = _register(cluster, client, 0)
    for request in (1, 2, 3):
        cluster.request(client, request, session=first)
        cluster.run_until(lambda r=request: cluster.committed(client, r))  # type: ignore[misc]
    session = _register(cluster, client, 4)
    cluster.request(client, 5, session=session)
    cluster.run_until(lambda: cluster.committed(client, 5))
    applied = len(cluster.nodes[0].state_machine.applied)
    # The late copy of request 0: not a login, as the client's numbers say (it logged in
    # at 4 since), so it is dropped and applies nothing.
    replies = len(cluster.replies)
    cluster.request(client, 0, _LOGIN, session=0, operation=REGISTER)
    cluster.settle()
    cluster.tick(TEST_CONFIG.commit_interval_ticks)
    assert cluster.replies[replies:] == []
    assert len(cluster.nodes[0].state_machine.applied) == applied
    # The client's repeated login gets its session back, and its session works.
    cluster.request(client, 4, _LOGIN, session=0, operation=REGISTER)
    cluster.settle()
    joined = [r for r in cluster.replies[replies:] if r.request == 4]
    assert joined and all(r.error is None and r.op == session for r in joined)
    cluster.request(client, 6, session=session)
    cluster.run_until(lambda: cluster.committed(client, 6))
    assert all(r.error is None for r in cluster.replies_for(client, 6))
    cluster.check_safety()


class _LogReadingLedger(LedgerStateMachine):
    """A ledger whose ``log_op_min`` reads its log, as a partition's reads the journal's
    index: it can answer only once the log holds every op it applied."""

    def __init__(self, log: MemoryLog) -> None:
        super().__init__()
        self.log = log
        self.asked = 0

    def log_op_min(self) -> int | None:
        applied = self.applied[-1].op if self.applied else 0
        assert self.log.op_max() >= applied, "log_op_min asked before the log holds it"
        self.asked += 1
        return super().log_op_min()


def test_a_checkpoint_due_in_ops_a_step_appends_waits_for_the_log() -> None:
    """A backup catching up appends and applies committed ops in one step, and the host
    appends them only after the step: a checkpoint falling due among them must not ask
    the state for its ``log_op_min`` before the log holds them (a partition looks its
    first retained message up in the journal's index). It is taken in a later step."""
    config = dataclasses.replace(TEST_CONFIG, checkpoint_interval_ops=10)
    ledgers: list[_LogReadingLedger] = []

    def ledger(log: MemoryLog) -> LedgerStateMachine:
        ledgers.append(_LogReadingLedger(log))
        return ledgers[-1]

    cluster = Cluster(3, seed=31, config=config, ledger=ledger)
    cluster.request(1, 1, operation=REGISTER)
    cluster.run_until(lambda: cluster.committed(1, 1))
    primary = cluster.primary()
    assert primary is not None
    lagging = (primary.index + 1) % 3
    node = cluster.nodes[lagging]
    cluster.isolate(lagging)
    for request in range(2, 15):
        cluster.request(1, request)

        def committed(r: int = request) -> bool:
            return cluster.committed(1, r)

        cluster.run_until(committed)
    assert node.replica.commit_min < 10
    cluster.heal()
    cluster.run_until(lambda: cluster.converged() and node.replica.checkpoint_op >= 10)
    assert ledgers[lagging].asked > 0
    assert node.checkpoint is not None
    cluster.check_safety()


_PURGE = 9
"""An operation after which the ledger below needs no record up to it (a purge)."""


class _PurgingLedger(LedgerStateMachine):
    """A ledger that, like a purged partition, needs no record up to a ``_PURGE`` op."""

    def apply(self, prepare: Prepare) -> bytes:
        reply = super().apply(prepare)
        if prepare.header.operation == _PURGE:
            self.retained_from = prepare.op + 1
        return reply


def test_a_journal_cut_below_a_checkpoint_needing_none_of_it_goes_on_after_it() -> None:
    """Where the log is the data, a restart whose journal recovery cut below the
    checkpoint, when the checkpoint's state needs none of the records up to it
    (``log_op_min`` is the op after it), restarts the journal right after the checkpoint:
    the next op appended continues it, and nothing is backfilled."""
    config = dataclasses.replace(
        TEST_CONFIG,
        state_transfer=False,
        checkpoint_interval_ops=1000,
        checkpoint_after_operations=(_PURGE,),
    )

    def ledger(log: MemoryLog) -> LedgerStateMachine:
        del log
        return _PurgingLedger()

    cluster = Cluster(3, seed=32, config=config, persisted=True, ledger=ledger)
    cluster.request(1, 1, operation=REGISTER)
    cluster.run_until(lambda: cluster.committed(1, 1))
    for request in range(2, 5):
        cluster.request(1, request)

        def committed(r: int = request) -> bool:
            return cluster.committed(1, r)

        cluster.run_until(committed)
    cluster.request(1, 5, operation=_PURGE)
    cluster.run_until(lambda: cluster.committed(1, 5) and cluster.converged())
    primary = cluster.primary()
    assert primary is not None
    backup = cluster.nodes[(primary.index + 1) % 3]
    assert backup.replica.checkpoint_op == 5
    assert backup.state_machine.log_op_min() == 6
    cluster.crash(backup.index)
    backup.log.lose_head(5)  # the checkpoint's own record, cut by recovery
    cluster.restart(backup.index)
    assert backup.replica.log_whole  # the state needs nothing below: no backfill
    for request in range(6, 9):
        cluster.request(1, request)

        def committed_after(r: int = request) -> bool:
            return cluster.committed(1, r)

        cluster.run_until(committed_after)
    cluster.run_until(cluster.converged)
    assert backup.replica.commit_min == 8
    for op in range(6, 9):
        assert backup.log.read(op) is not None
    cluster.check_safety()
