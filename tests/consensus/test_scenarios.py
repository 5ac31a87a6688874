"""Named cluster scenarios, each run for 1, 3 and 5 replicas where it means something."""

from __future__ import annotations

import copy
from functools import partial

import pytest

from consensus.events import ClientError
from consensus.messages import Prepare, PrepareOk, RequestPrepares
from consensus.replica import Status
from consensus.testing import client_request
from tests.consensus.harness import OPERATION, REGISTER, Cluster

ALL_SIZES = [1, 3, 5]
MULTI = [3, 5]


def _commit_requests(cluster: Cluster, client_id: int, requests: range) -> None:
    for request in requests:
        cluster.request(client_id, request)

        def committed(r: int = request) -> bool:
            return cluster.committed(client_id, r)

        cluster.run_until(committed)


def _retry_until_committed(cluster: Cluster, client_id: int, request: int) -> None:
    for _ in range(60):
        if cluster.committed(client_id, request):
            return
        cluster.request(client_id, request)
        cluster.tick(20)
    assert cluster.committed(client_id, request)


@pytest.mark.parametrize("replica_count", ALL_SIZES)
def test_normal_case_commits_in_order_on_every_replica(replica_count: int) -> None:
    cluster = Cluster(replica_count)
    _commit_requests(cluster, 7, range(1, 11))
    cluster.run_until(cluster.converged)
    for node in cluster.nodes:
        assert node.replica.commit_min == 10
        assert [e.request for e in node.state_machine.applied] == list(range(1, 11))
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_view_change_primary_crashes_with_3_prepares_in_flight(replica_count: int) -> None:
    """view change: primary crashes with 3 prepares in flight."""
    cluster = Cluster(replica_count, seed=1)
    _commit_requests(cluster, 1, range(1, 4))
    primary = cluster.primary()
    assert primary is not None
    # The backups get the prepares but the primary never hears their acks.
    cluster.message_filter = lambda _s, _t, m: not isinstance(m, PrepareOk)
    for client_id in (11, 12, 13):
        cluster.request(client_id, 1, to=primary.index)
    cluster.settle()
    assert primary.replica.op == primary.replica.commit_max + 3
    cluster.crash(primary.index)
    cluster.message_filter = None
    cluster.run_until(cluster.converged)
    for client_id in (11, 12, 13):
        _retry_until_committed(cluster, client_id, 1)
    cluster.run_until(cluster.converged)
    new_primary = cluster.primary()
    assert new_primary is not None and new_primary.index != primary.index
    # The three in-flight ops survived the view change (the backups held them).
    assert new_primary.replica.commit_min == 6
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_backup_misses_a_prepare_and_repairs_it(replica_count: int) -> None:
    """normal case: backup misses a prepare and repairs it."""
    cluster = Cluster(replica_count, seed=2)
    _commit_requests(cluster, 1, range(1, 3))
    primary = cluster.primary()
    assert primary is not None
    victim = (primary.index + 1) % replica_count
    dropped: list[int] = []

    def drop_op_3_once(source: int, target: int, message: object) -> bool:
        if target == victim and isinstance(message, Prepare) and message.op == 3 and not dropped:
            dropped.append(3)
            return False
        return True

    cluster.message_filter = drop_op_3_once
    _commit_requests(cluster, 1, range(3, 6))
    cluster.run_until(lambda: cluster.nodes[victim].replica.commit_min == 5)
    assert dropped == [3]
    assert cluster.nodes[victim].log.read(3) is not None
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_partitioned_primary_is_replaced_and_rejoins_as_backup(replica_count: int) -> None:
    """view change: partitioned primary is replaced and rejoins as backup."""
    cluster = Cluster(replica_count, seed=3)
    _commit_requests(cluster, 1, range(1, 4))
    old = cluster.primary()
    assert old is not None
    cluster.isolate(old.index)
    # The stale primary still prepares a request nobody will ever acknowledge.
    cluster.request(2, 1, to=old.index)
    others = [n for n in cluster.nodes if n.index != old.index]
    cluster.run_until(
        lambda: any(n.replica.is_primary and n.replica.status is Status.NORMAL for n in others)
    )
    new = next(n for n in others if n.replica.is_primary)
    cluster.request(3, 1, to=new.index)
    cluster.run_until(lambda: cluster.committed(3, 1))
    cluster.heal()
    cluster.run_until(cluster.converged)
    assert old.replica.status is Status.NORMAL and not old.replica.is_primary
    assert old.replica.view == new.replica.view
    _retry_until_committed(cluster, 2, 1)
    cluster.run_until(cluster.converged)
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", ALL_SIZES)
def test_retried_request_after_a_view_change_is_applied_once(replica_count: int) -> None:
    """client table: retried request after a view change is applied once."""
    cluster = Cluster(replica_count, seed=4)
    _commit_requests(cluster, 5, range(1, 3))
    primary = cluster.primary()
    assert primary is not None
    cluster.request(5, 3, to=primary.index)
    cluster.settle()
    assert cluster.committed(5, 3)
    first = cluster.replies_for(5, 3)[0]
    if replica_count > 1:
        cluster.crash(primary.index)
    else:
        cluster.crash(primary.index)
        cluster.restart(primary.index)
    cluster.run_until(cluster.converged)
    cluster.replies.clear()
    _retry_until_committed(cluster, 5, 3)
    again = cluster.replies_for(5, 3)[0]
    assert again.op == first.op and again.reply == first.reply
    for node in cluster.live():
        applied = [e for e in node.state_machine.applied if e.client_id == 5]
        assert [e.request for e in applied] == [1, 2, 3]
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_uncommitted_suffix_truncated_after_a_view_change(replica_count: int) -> None:
    """view change: uncommitted suffix truncated after a view change."""
    cluster = Cluster(replica_count, seed=5)
    _commit_requests(cluster, 1, range(1, 3))
    old = cluster.primary()
    assert old is not None
    # The primary prepares two ops that no backup ever receives.
    cluster.isolate(old.index)
    cluster.request(20, 1, to=old.index)
    cluster.request(21, 1, to=old.index)
    assert old.replica.op == 4 and old.log.op_max() == 4
    others = [n for n in cluster.nodes if n.index != old.index]
    cluster.run_until(
        lambda: any(n.replica.is_primary and n.replica.status is Status.NORMAL for n in others)
    )
    new = next(n for n in others if n.replica.is_primary)
    cluster.request(30, 1, to=new.index)
    cluster.run_until(lambda: cluster.committed(30, 1))
    cluster.heal()
    cluster.run_until(cluster.converged)
    # The old primary's ops 3 and 4 were replaced by the new view's op 3.
    op3 = old.log.read(3)
    assert op3 is not None and op3.header.client_id == 30
    assert old.replica.op == 3 and old.log.op_max() == 3
    assert not cluster.committed(20, 1) and not cluster.committed(21, 1)
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
@pytest.mark.parametrize("persisted", [False, True])
def test_restarted_backup_rejoins_before_it_acks(replica_count: int, persisted: bool) -> None:
    """recovery: a restarted backup asks for the view and acks only after rejoining."""
    cluster = Cluster(replica_count, seed=6, persisted=persisted)
    _commit_requests(cluster, 1, range(1, 4))
    primary = cluster.primary()
    assert primary is not None
    backup = (primary.index + 1) % replica_count
    cluster.crash(backup, lose_unsynced=persisted)
    _commit_requests(cluster, 1, range(4, 7))
    cluster.restart(backup)
    restarted = cluster.nodes[backup].replica
    assert restarted.status is Status.RECOVERING
    assert restarted.nonce != 0
    cluster.run_until(cluster.converged)
    _commit_requests(cluster, 1, range(7, 9))
    cluster.run_until(cluster.converged)
    assert cluster.nodes[backup].replica.commit_min == 8
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", ALL_SIZES)
def test_whole_cluster_restart_resumes_from_the_durable_logs(replica_count: int) -> None:
    """recovery: every replica restarts at once and the group carries on."""
    cluster = Cluster(replica_count, seed=7, persisted=True)
    _commit_requests(cluster, 1, range(1, 5))
    for node in cluster.nodes:
        cluster.crash(node.index, lose_unsynced=True)
    for node in cluster.nodes:
        cluster.restart(node.index)
    cluster.run_until(cluster.converged)
    _commit_requests(cluster, 1, range(5, 7))
    cluster.run_until(cluster.converged)
    for node in cluster.nodes:
        assert [e.request for e in node.state_machine.applied] == list(range(1, 7))
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_far_behind_backup_catches_up_by_state_transfer(replica_count: int) -> None:
    """state transfer: a backup that missed more than the repair window installs a snapshot."""
    from dataclasses import replace

    from tests.consensus.harness import TEST_CONFIG

    config = replace(TEST_CONFIG, repair_ops_max=12, repair_chunk_max=4, checkpoint_interval_ops=10)
    cluster = Cluster(replica_count, seed=8, config=config)
    _commit_requests(cluster, 1, range(1, 3))
    primary = cluster.primary()
    assert primary is not None
    lagging = (primary.index + 1) % replica_count
    cluster.isolate(lagging)
    _commit_requests(cluster, 1, range(3, 40))
    cluster.heal()
    cluster.run_until(cluster.converged)
    node = cluster.nodes[lagging]
    assert node.replica.commit_min == 39
    assert node.checkpoint is not None  # the snapshot was installed, not the log replayed
    assert node.log.read(5) is None
    assert len(node.state_machine.applied) == 39
    _commit_requests(cluster, 1, range(40, 42))
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_corrupt_record_found_at_restart_is_repaired_from_a_peer(replica_count: int) -> None:
    """recovery: a corrupt journal record is re-fetched from a peer, never dropped."""
    cluster = Cluster(replica_count, seed=9, persisted=True)
    _commit_requests(cluster, 1, range(1, 7))
    primary = cluster.primary()
    assert primary is not None
    backup = (primary.index + 1) % replica_count
    cluster.crash(backup)
    cluster.nodes[backup].log.corrupt(3)
    cluster.restart(backup)
    assert not cluster.nodes[backup].replica.trusted
    cluster.run_until(cluster.converged)
    repaired = cluster.nodes[backup].log.read(3)
    assert repaired is not None and repaired.header.request == 3
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", ALL_SIZES)
def test_sessions_come_from_committed_registers(replica_count: int) -> None:
    """client table: the metadata group's register creates a session (its commit op)."""
    cluster = Cluster(replica_count, seed=10, register_operation=REGISTER)
    cluster.request(9, 0, session=0, operation=REGISTER)
    cluster.run_until(lambda: cluster.committed(9, 0))
    session = cluster.replies_for(9, 0)[0].op
    cluster.request(9, 1, session=session)
    cluster.run_until(lambda: cluster.committed(9, 1))
    # A request with no registered session is refused with a typed error.
    cluster.request(10, 1, session=session)
    cluster.settle()
    errors = [r.error for r in cluster.replies_for(10, 1)]
    assert errors and all(e is not None and e.value == "no_session" for e in errors)
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", ALL_SIZES)
def test_a_request_older_than_the_latest_is_refused_as_aged_out_and_not_applied(
    replica_count: int,
) -> None:
    """client table: a retry of a request whose reply aged out (the client's latest is
    newer) is answered ALREADY_APPLIED, never applied again; a late login copy stays
    silent (nobody waits for it)."""
    cluster = Cluster(replica_count, seed=13, register_operation=REGISTER)
    cluster.request(9, 2, session=0, operation=REGISTER)
    cluster.run_until(lambda: cluster.committed(9, 2))
    session = cluster.replies_for(9, 2)[0].op
    for request in (3, 4):
        cluster.request(9, request, session=session)
        cluster.run_until(partial(cluster.committed, 9, request))
    applied = [len(node.state_machine.applied) for node in cluster.nodes]
    cluster.request(9, 3, session=session)  # request 4's reply replaced request 3's
    cluster.request(9, 1, session=0, operation=REGISTER)  # an older login's late copy
    cluster.settle()
    aged = [r for r in cluster.replies_for(9, 3) if r.error is not None]
    assert aged and all(r.error is ClientError.ALREADY_APPLIED for r in aged)
    assert all(r.op == 0 and r.reply == b"" for r in aged)
    assert cluster.replies_for(9, 1) == []
    assert [len(node.state_machine.applied) for node in cluster.nodes] == applied
    cluster.check_safety()


def test_repair_requests_are_bounded_chunks() -> None:
    cluster = Cluster(3, seed=11)
    _commit_requests(cluster, 1, range(1, 2))
    primary = cluster.primary()
    assert primary is not None
    lagging = (primary.index + 1) % 3
    cluster.isolate(lagging)
    _commit_requests(cluster, 1, range(2, 60))
    seen: list[RequestPrepares] = []

    def record(_s: int, _t: int, message: object) -> bool:
        if isinstance(message, RequestPrepares):
            seen.append(message)
        return True

    cluster.heal()
    cluster.message_filter = record
    cluster.run_until(lambda: cluster.nodes[lagging].replica.commit_min == 59)
    assert seen
    assert all(m.op_max - m.op_min + 1 <= cluster.config.repair_chunk_max for m in seen)
    cluster.check_safety()


def _check_judging(cluster: Cluster, probes: list[int]) -> tuple[int, int]:
    """On every live replica, a fresh request is judged exactly when the replica says it
    judges requests and has room (``Replica.judges_requests``, ``pipeline_has_room``),
    the predicates a host holds requests on. Returns (judging, dropping) replicas seen."""
    judging = dropping = 0
    for node in cluster.nodes:
        if not node.alive:
            continue
        probes.append(probes[-1] + 1)
        probe = client_request(probes[-1], 1, 1, OPERATION, b"probe", 1_000)
        replica = node.replica
        if replica.judges_requests and replica.pipeline_has_room:
            assert copy.deepcopy(replica).step(probe), f"replica {node.index} dropped it"
            judging += 1
        else:
            assert replica.step(probe) == [], f"replica {node.index} judged it"
            dropping += 1
    return judging, dropping


@pytest.mark.parametrize("replica_count", MULTI)
def test_a_replica_judges_requests_exactly_when_it_says_so(replica_count: int) -> None:
    """Through a full pipeline and a view change, the predicates a host waits on never
    disagree with what the replica does with a request."""
    cluster = Cluster(replica_count, seed=3)
    probes = [10_000]
    seen = [0, 0]

    def check() -> None:
        judging, dropping = _check_judging(cluster, probes)
        seen[0] += judging
        seen[1] += dropping

    _commit_requests(cluster, 1, range(1, 3))
    check()
    primary = cluster.primary()
    assert primary is not None
    cluster.message_filter = lambda _s, _t, m: not isinstance(m, PrepareOk)
    for client_id in range(20, 20 + cluster.config.pipeline_prepares_max):
        cluster.request(client_id, 1, to=primary.index)
    cluster.settle()
    assert not primary.replica.pipeline_has_room
    check()
    cluster.crash(primary.index)
    cluster.message_filter = None
    for _ in range(400):
        cluster.tick()
        cluster.pump()
        check()
    assert seen[0] > 0 and seen[1] > 0
    cluster.run_until(cluster.converged)
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", ALL_SIZES)
def test_an_op_named_for_checkpoints_is_checkpointed_on_every_replica_as_it_commits(
    replica_count: int,
) -> None:
    """checkpoint: an operation that lets the host delete records checkpoints at once."""
    from dataclasses import replace

    from tests.consensus.harness import TEST_CONFIG

    deleting = OPERATION + 1
    config = replace(
        TEST_CONFIG, checkpoint_interval_ops=1000, checkpoint_after_operations=(deleting,)
    )
    cluster = Cluster(replica_count, seed=12, config=config)
    _commit_requests(cluster, 1, range(1, 4))
    cluster.run_until(cluster.converged)
    assert all(node.checkpoint is None for node in cluster.nodes)  # none due yet
    cluster.request(1, 4, operation=deleting)
    cluster.run_until(lambda: cluster.committed(1, 4))
    _commit_requests(cluster, 1, range(5, 7))
    cluster.run_until(cluster.converged)
    for node in cluster.nodes:
        assert node.replica.checkpoint_op == 4
        assert node.checkpoint is not None
    cluster.check_safety()


def _retained_cluster(replica_count: int, seed: int) -> tuple[Cluster, int]:
    """A group whose log is its data (no plain state transfer), with a backup cut off
    while the others commit ops 3..40 and then retire every record below op 30."""
    from dataclasses import replace

    from tests.consensus.harness import TEST_CONFIG

    config = replace(
        TEST_CONFIG, state_transfer=False, checkpoint_interval_ops=10, repair_chunk_max=4
    )
    cluster = Cluster(replica_count, seed=seed, config=config, persisted=True)
    _commit_requests(cluster, 1, range(1, 3))
    primary = cluster.primary()
    assert primary is not None
    lagging = (primary.index + 1) % replica_count
    cluster.isolate(lagging)
    _commit_requests(cluster, 1, range(3, 41))
    for node in cluster.nodes:
        if node.index != lagging:
            node.state_machine.retain_from(30)
            node.log.retain(30)
            assert node.log.read(29) is None
    return cluster, lagging


@pytest.mark.parametrize("replica_count", MULTI)
def test_backup_behind_retired_ops_catches_up_by_state_transfer(replica_count: int) -> None:
    """state transfer across a retained start: a backup needs ops its peers retired; it
    installs their snapshot and backfills the records from its log_op_min, never fewer."""
    cluster, lagging = _retained_cluster(replica_count, seed=21)
    node = cluster.nodes[lagging]
    cluster.heal()
    cluster.run_until(lambda: cluster.converged() and node.replica.log_whole)
    assert node.replica.commit_min == 40
    assert node.replica.log_whole
    assert node.checkpoint is not None  # the snapshot was installed
    assert node.log.read(29) is None  # retired everywhere: never fetched
    for op in range(30, 41):
        record = node.log.read(op)
        assert record is not None and record.header.request == op
    assert node.state_machine.log_op_min() == 30
    _commit_requests(cluster, 1, range(41, 43))
    cluster.run_until(cluster.converged)
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_backfill_after_state_transfer_resumes_after_a_crash(replica_count: int) -> None:
    """state transfer across a retained start: a crash in the middle of the backfill
    restarts it from the checkpoint's log_op_min, not from op 1 (which nobody holds)."""
    cluster, lagging = _retained_cluster(replica_count, seed=22)
    node = cluster.nodes[lagging]
    cluster.heal()
    cluster.run_until(lambda: not node.replica.log_whole and node.log.op_max() >= 32)
    assert node.replica.commit_min == 40  # installed, backfill under way
    cluster.crash(lagging)
    cluster.restart(lagging)
    assert not node.replica.log_whole
    cluster.run_until(lambda: cluster.converged() and node.replica.log_whole)
    for op in range(30, 41):
        assert node.log.read(op) is not None
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_backup_whose_ops_peers_still_hold_repairs_them(replica_count: int) -> None:
    """state transfer across a retained start: a transfer the backup starts while the
    peers still hold what it needs is not installed; it repairs every op instead."""
    from dataclasses import replace

    from tests.consensus.harness import TEST_CONFIG

    config = replace(TEST_CONFIG, state_transfer=False, checkpoint_interval_ops=10)
    cluster = Cluster(replica_count, seed=23, config=config, persisted=True)
    _commit_requests(cluster, 1, range(1, 3))
    primary = cluster.primary()
    assert primary is not None
    lagging = (primary.index + 1) % replica_count
    cluster.isolate(lagging)
    _commit_requests(cluster, 1, range(3, 30))
    for node in cluster.nodes:
        if node.index != lagging:
            node.state_machine.retain_from(2)  # nothing the backup needs is retired
    cluster.heal()
    cluster.run_until(cluster.converged)
    node = cluster.nodes[lagging]
    assert node.checkpoint is None or node.log.read(3) is not None
    for op in range(3, 30):
        assert node.log.read(op) is not None
    cluster.check_safety()


@pytest.mark.parametrize("replica_count", MULTI)
def test_journal_cut_below_a_checkpoint_that_needs_no_record_restarts_after_it(
    replica_count: int,
) -> None:
    """state transfer across a retained start: recovery cut committed records below a
    checkpoint whose state needs no record (its log_op_min is the op after it, as after a
    partition's purge), so nothing is backfilled; the journal must still restart after
    the checkpoint, or the next append would not follow its head."""
    from dataclasses import replace

    from tests.consensus.harness import TEST_CONFIG

    deleting = OPERATION + 1
    config = replace(
        TEST_CONFIG,
        state_transfer=False,
        checkpoint_interval_ops=1000,
        checkpoint_after_operations=(deleting,),
    )
    cluster = Cluster(replica_count, seed=64, config=config, persisted=True)
    _commit_requests(cluster, 1, range(1, 4))
    cluster.request(1, 4, operation=deleting)
    cluster.run_until(lambda: cluster.committed(1, 4))
    cluster.run_until(cluster.converged)
    primary = cluster.primary()
    assert primary is not None
    backup = cluster.nodes[(primary.index + 1) % replica_count]
    assert backup.replica.checkpoint_op == 4
    assert backup.state_machine.log_op_min() is None  # the checkpoint needs no record
    cluster.crash(backup.index)
    backup.log.lose_head(3)  # committed records 3 and 4 damaged at rest, cut at recovery
    assert backup.log.op_max() == 2
    cluster.restart(backup.index)
    assert backup.replica.log_whole  # nothing below the checkpoint to backfill
    assert backup.log.op_max() == 4 and not backup.log.prepares  # restarted empty after 4
    _commit_requests(cluster, 1, range(5, 8))
    cluster.run_until(cluster.converged)
    for op in range(5, 8):
        record = backup.log.read(op)
        assert record is not None and record.header.request == op
    cluster.check_safety()
