"""Scenarios of view changes: which log a new primary takes.

A primary cut off from its backups keeps preparing what its clients send it, so its log
grows past what the backups hold while they form a newer view and commit a different op
at the same number. When the links change again, a view change can meet both logs: the
old primary's, longer but from an older view, and a backup's, shorter but from the newer
view that committed. The new primary must take the log of the highest log_view (and only
then the highest op): taking the longest log replaces a committed op.

The swarm finds that bug only on a few seeds (``test_planted_bugs.py``); here the
situation is built step by step, so the planted replica is caught every time, and the
correct one is shown to keep the committed op.
"""

from __future__ import annotations

from typing import Final

import pytest

from consensus.replica import Replica, Status
from sdk.wire.codes import CommandCode
from sim.checkers import CheckFailed
from sim.client import Client
from sim.network import ClientRequest
from sim.planted import PicksLongestLog
from sim.world import World
from tests.sim.scenario import (
    TICKS_MAX,
    answer,
    login,
    primary_of,
    replica_of,
    run_until,
    send_payload,
    settled,
    three_nodes,
    workload_group,
)

STRANDED: Final = 3
"""Sends the cut-off primary prepares (one per probe: a client has one request in flight)."""
PIPELINE: Final = 4
"""Prepares a primary may have uncommitted: room for the stranded ones. With one (the
pipeline the scenarios' seed draws), a cut-off primary prepares one op past the commit
and the newer view commits at least that one, so the logs tie on op and log_view decides
either way."""


def _stranded_log_meets_a_newer_view(replica_class: type[Replica]) -> tuple[World, int, int]:
    """Build the situation and run the view change that meets both logs.

    Returns the world, the group and the op the newer view committed (the first op the
    old primary prepared alone has the same number)."""
    world = three_nodes(
        partitions=1, quiet=True, pipeline_prepares_max=PIPELINE, replica_class=replica_class
    )
    group = workload_group(world, settle=True)
    old_primary = primary_of(world, group)
    backups = [n.index for n in world.nodes if n.index != old_primary]
    old_view = replica_of(world, old_primary, group).view
    probes = [world.add_probe() for _ in range(STRANDED + 1)]
    for probe in probes:
        for node in range(len(world.nodes)):
            login(world, probe, node)
    run_until(world, lambda: settled(world, group))
    head = replica_of(world, old_primary, group).op

    # The old primary, cut off, prepares the stranded sends: its log grows to head + 3.
    for backup in backups:
        world.cut(old_primary, backup)
    stranded = [_ask_send(probe, old_primary, partition=0) for probe in probes[:STRANDED]]
    run_until(world, lambda: replica_of(world, old_primary, group).op == head + STRANDED)

    # The backups form a newer view, which commits one send at head + 1.
    def newer_view() -> bool:
        replicas = [replica_of(world, n, group) for n in backups]
        return all(r.status is Status.NORMAL and r.view > old_view for r in replicas)

    run_until(world, newer_view)
    new_primary = primary_of(world, group)
    other = next(n for n in backups if n != new_primary)
    committed = answer(world, probes[-1], _ask_send(probes[-1], new_primary, partition=0))
    assert committed.status == 0 and committed.op == head + 1, committed
    run_until(world, lambda: replica_of(world, other, group).commit_min >= committed.op)
    old = replica_of(world, old_primary, group)
    assert (old.view, old.log_view, old.op) == (old_view, old_view, head + STRANDED)

    # The newer view's primary is cut off and the old primary's links mended: the next
    # view change hears the old primary's longer log and the backup's newer one.
    world.mend(old_primary, other)
    world.cut(new_primary, old_primary)
    world.cut(new_primary, other)

    def next_view() -> bool:
        replicas = [replica_of(world, n, group) for n in (old_primary, other)]
        views = {r.view for r in replicas}
        return len(views) == 1 and all(
            r.status is Status.NORMAL and r.view > replica_of(world, new_primary, group).view
            for r in replicas
        )

    run_until(world, next_view, ticks_max=TICKS_MAX)
    for probe, request in zip(probes, stranded, strict=False):
        assert not [r for _, r in probe.answers(request) if r.status == 0 and not r.error]
    return world, group, committed.op


def _ask_send(probe: Client, node: int, *, partition: int) -> ClientRequest:
    return probe.ask(node, CommandCode.SEND_MESSAGES, send_payload(probe, partition, 1))


def test_a_new_primary_takes_the_newer_views_log_over_an_older_longer_one() -> None:
    """view change: the old primary's three stranded prepares (log_view of the old view)
    lose to the backup's one committed op (log_view of the newer view). Every replica
    ends with the newer view's op at that number, and the stranded sends were never
    acknowledged."""
    world, group, op = _stranded_log_meets_a_newer_view(Replica)
    for node in range(len(world.nodes)):
        for other in range(node + 1, len(world.nodes)):
            world.mend(node, other)
    run_until(world, lambda: settled(world, group))
    assert all(replica_of(world, n.index, group).commit_min >= op for n in world.nodes)
    # Every replica applied one prepare at ``op`` (the agreement checker saw each apply):
    # the newer view's send, from the probe that sent it there.
    assert world.checkers.committed[group][op].client_id == world.clients[-1].client_id


def test_a_new_primary_taking_the_longest_log_is_caught() -> None:
    """The planted ``longest-log`` replica in the same situation replaces the committed op
    with a stranded one: the agreement checker (or a replica's own invariant) fails."""
    with pytest.raises(CheckFailed) as failure:
        _stranded_log_meets_a_newer_view(PicksLongestLog)
    assert failure.value.checker in ("agreement", "model"), failure.value
