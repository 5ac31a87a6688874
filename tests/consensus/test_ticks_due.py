"""When a replica is next due, and a batch of ticks equals as many single ticks.

A host steps a replica only when ``ticks_until_due()`` ticks are owed (or another event
arrives) and passes them in one ``Ticked(count)``. Both halves are checked here against
a twin replica stepped one tick at a time: the due tick is the first on which stepping
does anything, and the batch leaves the replica exactly where the single ticks do (the
same actions, countdowns and PRNG state, so later jitter draws stay the same).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from consensus.config import TICKS_IDLE, Timeout
from consensus.events import Action, Ticked
from consensus.protocols import DurableState
from consensus.replica import Replica, Status
from consensus.testing import LedgerStateMachine, MemoryLog
from tests.consensus.harness import TEST_CONFIG

RESTARTED = DurableState(view=0, log_view=0, commit=0, checkpoint=0)


def _replica(
    index: int, count: int, seed: int, durable: DurableState | None = None
) -> tuple[Replica, random.Random]:
    prng = random.Random(seed)
    replica = Replica(
        1,
        index,
        count,
        MemoryLog(),
        LedgerStateMachine(),
        prng,
        durable=durable,
        config=TEST_CONFIG,
    )
    return replica, prng


def _fingerprint(replica: Replica, prng: random.Random) -> tuple[object, ...]:
    countdowns = tuple(timeout.ticks_left for timeout in replica._timeouts())
    return (replica.status, replica.view, countdowns, prng.getstate())


def _lone_primary(seed: int) -> tuple[Replica, random.Random]:
    return _replica(0, 1, seed)


def _primary(seed: int) -> tuple[Replica, random.Random]:
    return _replica(1, 3, seed)  # group 1, view 0: replica 1 is the primary


def _backup(seed: int) -> tuple[Replica, random.Random]:
    return _replica(2, 3, seed)


def _backup_in_view_change(seed: int) -> tuple[Replica, random.Random]:
    replica, prng = _backup(seed)
    while replica.status is Status.NORMAL:
        replica.step(Ticked())
    return replica, prng


def _recovering(seed: int) -> tuple[Replica, random.Random]:
    replica, prng = _replica(2, 3, seed, durable=RESTARTED)
    replica.step(Ticked())  # the restart's own actions
    assert replica.status is Status.RECOVERING
    return replica, prng


SITUATIONS: dict[str, Callable[[int], tuple[Replica, random.Random]]] = {
    "lone primary": _lone_primary,
    "primary of three": _primary,
    "backup of three": _backup,
    "backup in a view change": _backup_in_view_change,
    "restarted replica, recovering": _recovering,
}


@pytest.mark.parametrize("situation", SITUATIONS)
@pytest.mark.parametrize("seed", range(4))
def test_due_tick_is_the_first_tick_that_acts_and_a_batch_matches_single_ticks(
    situation: str, seed: int
) -> None:
    eager, eager_prng = SITUATIONS[situation](seed)
    lazy, lazy_prng = SITUATIONS[situation](seed)
    for _ in range(5):  # five due timeouts in a row, each rearmed by the last
        due = lazy.ticks_until_due()
        assert due >= 1
        if due == TICKS_IDLE:
            break
        actions: list[Action] = []
        for tick in range(1, due + 1):
            actions = eager.step(Ticked())
            if tick < due:
                assert actions == [], f"{situation}: acted on tick {tick}, due on {due}"
        assert actions, f"{situation}: nothing happened on the due tick {due}"
        assert lazy.step(Ticked(due)) == actions
        assert _fingerprint(lazy, lazy_prng) == _fingerprint(eager, eager_prng)
    else:
        return
    assert situation == "lone primary"  # nobody to heartbeat, repair or ask


@pytest.mark.parametrize("count", [1, 2, 49, 50, 51, 999, 20_000])
def test_an_idle_lone_replica_takes_any_batch_as_that_many_single_ticks(count: int) -> None:
    eager, eager_prng = _lone_primary(7)
    lazy, lazy_prng = _lone_primary(7)
    assert lazy.ticks_until_due() == TICKS_IDLE
    for _ in range(count):
        assert eager.step(Ticked()) == []
    assert lazy.step(Ticked(count)) == []
    assert _fingerprint(lazy, lazy_prng) == _fingerprint(eager, eager_prng)


def test_a_batch_past_the_due_tick_is_a_bug() -> None:
    replica, _ = _primary(0)
    due = replica.ticks_until_due()
    with pytest.raises(AssertionError):
        replica.step(Ticked(due + 1))


@pytest.mark.parametrize("jitter", [False, True])
@pytest.mark.parametrize("ticks_left", [1, 3, 10])
def test_timeout_elapse_is_as_many_ticks(jitter: bool, ticks_left: int) -> None:
    for ticks in range(40 if not jitter else ticks_left + 1):
        single, single_prng = Timeout("t", 10, jitter=jitter), random.Random(3)
        batch, batch_prng = Timeout("t", 10, jitter=jitter), random.Random(3)
        single.ticks_left = batch.ticks_left = ticks_left
        for _ in range(ticks):
            single.tick(single_prng)
        batch.elapse(ticks, batch_prng)
        assert batch.ticks_left == single.ticks_left, ticks
        assert batch_prng.getstate() == single_prng.getstate()


class StepsEveryTickInFull(Replica):
    """A replica without the idle-tick shortcut: every tick runs the whole step."""

    def ticks_idle(self, count: int) -> bool:
        return False


def _traffic_of_randomized_run(replica_class: type[Replica], seed: int) -> list[object]:
    """Everything a 3-replica group shows the outside in a run with requests, drops,
    crashes and checkpoints, tick by tick: frames sent, replies, superblocks, checkpoints."""
    from tests.consensus.harness import Cluster

    config = replace(TEST_CONFIG, checkpoint_interval_ops=4)
    cluster = Cluster(3, seed=seed, config=config, replica_class=replica_class)
    rng = random.Random(seed)
    seen: list[object] = []
    request = 1
    for _ in range(300):
        cluster.drop_probability = rng.choice([0.0, 0.2])
        roll = rng.random()
        if roll < 0.4:
            if cluster.committed(1, request):
                request += 1
            cluster.request(1, request, body=bytes([request % 256]))
        elif roll < 0.43 and all(node.alive for node in cluster.nodes):
            cluster.crash(rng.randrange(3))
        elif roll < 0.50:
            for node in cluster.nodes:
                if not node.alive:
                    cluster.restart(node.index)
        seen.append([(e.source, e.target, e.frame) for e in cluster.network])
        cluster.tick()
        seen.append(
            [
                (n.index, n.alive, n.superblock, n.checkpoint, n.replica.commit_min)
                for n in cluster.nodes
            ]
        )
    seen.append(list(cluster.replies))
    assert request > 5, "the run committed too little to mean anything"
    return seen


@pytest.mark.parametrize("seed", range(3))
def test_idle_tick_shortcut_changes_nothing_a_full_step_would_show(seed: int) -> None:
    assert _traffic_of_randomized_run(Replica, seed) == _traffic_of_randomized_run(
        StepsEveryTickInFull, seed
    )
