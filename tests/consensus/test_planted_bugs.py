"""Each of the four decisions a simulator may break on purpose, broken here: the scenario
tests and the randomized schedule must catch every one, or they prove nothing."""

from __future__ import annotations

import random

import pytest

from consensus.messages import DoViewChange, Prepare
from consensus.replica import Replica
from tests.consensus.harness import Cluster


class PicksLongestLog(Replica):
    def _canonical_do_view_change(self, dvcs: list[DoViewChange]) -> DoViewChange:
        return max(dvcs, key=lambda d: (d.op, d.log_view, -d.replica))


class AcksBeforeWritten(Replica):
    def _ackable_op(self) -> int:
        return self.journal_op


class TableAtPrepare(Replica):
    def _learn(self, prepare: Prepare) -> None:
        super()._learn(prepare)
        header = prepare.header
        entry = self.client_table.get(header.client_id)
        if header.client_id and (entry is None or entry.request < header.request):
            self.client_table.commit(prepare, b"", register=False)

    def _commit_client_reply(self, prepare: Prepare, reply: bytes) -> None:
        entry = self.client_table.get(prepare.header.client_id)
        if entry is None or entry.op < prepare.op:
            super()._commit_client_reply(prepare, reply)


class AppliesPastCommit(Replica):
    def _apply_op_max(self) -> int:
        return self.journal_verified_op


def _randomized_run(replica_class: type[Replica], seed: int) -> None:
    """A short randomized run with crashes, drops and retries (as the simulator does)."""
    rng = random.Random(seed)
    # Power loss (losing unsynced writes) is only within the fault model of persisted
    # groups; replicated groups ack written-not-synced prepares by definition.
    persisted = seed % 2 == 0
    cluster = Cluster(3, seed=seed, persisted=persisted, replica_class=replica_class)
    next_request = dict.fromkeys((1, 2, 3), 1)
    for _ in range(400):
        cluster.reorder = rng.random() < 0.5
        cluster.drop_probability = rng.choice([0.0, 0.1, 0.3])
        roll = rng.random()
        if roll < 0.35:
            client = rng.randrange(1, 4)
            if cluster.committed(client, next_request[client]):
                next_request[client] += 1
            cluster.request(client, next_request[client], body=bytes([client]))
        elif roll < 0.40:
            alive = [n.index for n in cluster.nodes if n.alive]
            if len(alive) == 3:
                cluster.crash(rng.choice(alive), lose_unsynced=persisted and rng.random() < 0.5)
        elif roll < 0.47:
            for node in cluster.nodes:
                if not node.alive:
                    cluster.restart(node.index)
        elif roll < 0.50:
            cluster.isolate(rng.randrange(3))
        elif roll < 0.55:
            cluster.blocked.clear()
        cluster.tick()
        cluster.check_safety()
    cluster.heal()
    for node in cluster.nodes:
        if not node.alive:
            cluster.restart(node.index)
    for _ in range(40):
        for client in (1, 2, 3):
            if not cluster.committed(client, next_request[client]):
                cluster.request(client, next_request[client], body=bytes([client]))
        cluster.tick(25)
    assert all(cluster.committed(c, next_request[c]) for c in (1, 2, 3)), "liveness"
    cluster.check_safety()


@pytest.mark.parametrize("seed", range(4))
def test_correct_replica_survives_the_randomized_runs(seed: int) -> None:
    _randomized_run(Replica, seed)


def test_planted_longest_log_bug_is_caught_by_the_do_view_change_test() -> None:
    from tests.consensus.test_replica_handlers import check_new_primary_takes_highest_log_view

    check_new_primary_takes_highest_log_view(Replica)
    with pytest.raises(AssertionError):
        check_new_primary_takes_highest_log_view(PicksLongestLog)


def check_ack_only_after_durable(replica_class: type[Replica]) -> None:
    """A backup that acks before its sync, then loses power, must not let an op commit."""
    cluster = Cluster(3, seed=1, persisted=True, replica_class=replica_class)
    cluster.request(1, 1)
    cluster.run_until(lambda: cluster.committed(1, 1))
    cluster.run_until(cluster.converged)
    primary = cluster.primary()
    assert primary is not None
    acker, outsider = (primary.index + 1) % 3, (primary.index + 2) % 3
    cluster.isolate(outsider)
    cluster.request(9, 1, to=primary.index)
    cluster.pump()  # the acker appends op 2; its sync has not completed
    cluster.crash(acker, lose_unsynced=True)
    cluster.pump()
    cluster.crash(primary.index)
    cluster.heal()
    cluster.restart(acker)
    cluster.run_until(lambda: cluster.primary() is not None)
    cluster.request(7, 1)
    cluster.run_until(lambda: cluster.committed(7, 1))
    cluster.check_safety()


def test_planted_ack_before_written_bug_is_caught() -> None:
    check_ack_only_after_durable(Replica)
    with pytest.raises(AssertionError):
        check_ack_only_after_durable(AcksBeforeWritten)


@pytest.mark.parametrize("buggy", [TableAtPrepare, AppliesPastCommit])
def test_planted_bug_is_caught_by_a_randomized_run(buggy: type[Replica]) -> None:
    caught = 0
    # 120 seeds: TableAtPrepare is first caught at seed 83 since the primary vouches for
    # its repair answers (RepairPrepare changed the message flow; it was seed 51 before).
    # Seeds 10 and 15 once failed for a liveness bug, not for the planted one.
    for seed in range(120):
        try:
            _randomized_run(buggy, seed)
        except AssertionError:
            caught += 1
            break
    assert caught, f"{buggy.__name__} was never caught"
