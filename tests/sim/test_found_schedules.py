"""Schedules the simulator found failing, kept as scenarios.

Each is the whole options of a run, written out, so it stays the same run whatever the
seeds draw later. A scenario whose bug is not fixed yet is marked ``xfail(strict=True)``:
it fails the suite the day it starts passing, so the mark comes off with the fix.
"""

from __future__ import annotations

import dataclasses

from sim.options import Options
from sim.world import World


def _agreement_after_outages_and_a_corrupted_record() -> Options:
    """Seed 718's options while number reusers were drawn before the last three options:
    3 nodes, 3 persisted partitions, correlated power outages of every node, restarts,
    partitions, and one corrupted record in group 1 on node 0 (at tick 1754). Found by the
    planted-bug search for ``ack-before-write``, failing with the correct replica too.

    The corruption hit op 5, the last record of node 0's journal, which recovery cut as a
    torn tail. Node 0, trusted as intact and at the newest log_view, became the primary of
    view 5 with a DoViewChange quorum of itself and node 2 (an older log_view): its log
    without op 5 was canonical, and committed op 5 was replaced. Recovery now reports such
    a tail as possibly durable (``RecoveryReport.tail_debris``), so node 0 does not vote."""
    options = Options.from_seed(718)
    assert (options.node_count, options.partition_count, options.persisted) == (3, 3, True)
    return dataclasses.replace(
        options,
        ticks_fault=3416,
        workload=dataclasses.replace(options.workload, number_reusers=0),
    )


def test_agreement_holds_after_power_outages_and_a_corrupted_record() -> None:
    result = World(_agreement_after_outages_and_a_corrupted_record()).run()
    assert result.ok, result.message


def _agreement_after_a_corrupted_record_under_frequent_partitions() -> Options:
    """Seed 60's options under the partition-heavy profile the planted ``longest-log``
    search used then (a partition starts about every 100 ticks, at most 200 long), found failing
    with the correct replica: 3 nodes, 1 persisted partition, a whole-cluster power
    outage, then node 1 loses power at tick 897, one record of its group 1 journal is
    corrupted while it is down (905), it restarts (918) into an isolate-primary partition
    of node 2 (911), and loses power again (1000). Node 1 is the only damaged node (the
    fault budget f = 1 holds).

    In view 4 (primary node 2) nodes 1 and 2 committed ops up to 18 while node 0 was cut
    off with ops up to 15. The corruption hit op 12 of node 1. At 918 recovery reported
    it, so node 1 did not vote, and it cut its journal after op 11. The cut erased the
    damage: at the restart of 1021 its journal looked whole, it voted for view 5 with
    log_view 4 and op 11, and node 0 (log_view 4, op 15) took its own log as canonical
    with node 1's DoViewChange for a quorum, dropping committed ops 16 to 18. At 1060
    node 0 applied another prepare at op 16 (``agreement``). The damage is now durable
    (``DurableState.log_damaged``) until the replica has installed a view's log, so node
    1 waits for a live primary and view 5 forms with node 2, which holds ops 16 to 21."""
    options = Options.from_seed(60)
    assert (options.node_count, options.partition_count, options.persisted) == (3, 1, True)
    faults = dataclasses.replace(
        options.faults,
        partition=0.01,
        partition_ticks_max=min(options.faults.partition_ticks_max, 200),
    )
    # Found before producers read back their batches and the operator churned topics:
    # without them the run meets the same faults at the same ticks.
    workload = dataclasses.replace(options.workload, read_back_share=0.0, topic_churns=0)
    return dataclasses.replace(options, faults=faults, workload=workload)


def test_agreement_holds_after_a_corrupted_record_under_frequent_partitions() -> None:
    result = World(_agreement_after_a_corrupted_record_under_frequent_partitions()).run()
    assert result.ok, result.message


def _lone_node_restarting_over_a_hole() -> Options:
    """Seed 327's options, written out: 1 node, 1 persisted partition, two power outages
    (ticks 662 and 973) with slow disks between. At the second, the partition group's
    journal held ops 40 and 41 unsynced; op 41 reached the disk and op 40 did not, so at
    the restart of tick 1359 recovery reported op 40 damaged. The lone replica refused
    itself a vote like a replica that may have acknowledged what it lost, and then, with
    nobody to ask, started a view change anyway: its own assertion stopped the node
    (``crash``). A group of one now takes its log up to the damage (it acknowledged only
    synced prepares) and leads again."""
    options = Options.from_seed(327)
    # The draws that matter, pinned: the run stays this one if the seeds draw otherwise.
    return dataclasses.replace(
        options,
        node_count=1,
        partition_count=1,
        persisted=True,
        ticks_fault=2490,
        faults=dataclasses.replace(
            options.faults,
            crash=0.0005,
            power_loss_ratio=0.0,
            down_ticks_min=40,
            restart=0.02,
            correlated=False,
            outage=0.001,
            partition=0.01,
            partition_ticks_max=51,
            corruption=0.0,
            slow_disk=0.005,
        ),
        disk=dataclasses.replace(
            options.disk, write_ticks_max=0, sync_ticks_max=6, slow_factor=13, slow_ticks_max=110
        ),
    )


def test_lone_node_restarts_over_a_hole_a_power_loss_left() -> None:
    result = World(_lone_node_restarting_over_a_hole()).run()
    assert result.ok, result.message


def _checkpoint_due_in_ops_a_backfill_appends() -> Options:
    """Seed 8's options, written out: 5 nodes, 2 replicated partitions, crashes, power
    losses and corrupted records, message expiry of 300 ticks and retention every 224.
    Node 1 restarted (tick 2471) with damaged committed records of a partition and
    backfilled them from the primary while holding the ops above in memory. A retention
    at op 47 had retained from the partition's head (offset 45: every message expired), and
    op 48 stored message 45. The step whose repair ended the backfill appended ops 44 to 48
    and applied them; the checkpoint due at op 48 asked the partition for its
    ``log_op_min``, which looks message 45 up in the journal's index, before the host had
    appended op 48: "a retained message is in the log" stopped the node (``crash``). A
    checkpoint now waits until the log holds every op the state applied."""
    options = Options.from_seed(8)
    # The draws that matter, pinned: the run stays this one if the seeds draw otherwise.
    return dataclasses.replace(
        options,
        node_count=5,
        partition_count=2,
        persisted=False,
        ticks_fault=4293,
        workload=dataclasses.replace(
            options.workload, retention_interval_ticks=224, message_expiry_ticks=300
        ),
        replica=dataclasses.replace(options.replica, checkpoint_interval_ops=16),
    )


def test_a_checkpoint_due_in_ops_a_backfill_appends_waits_for_the_log() -> None:
    result = World(_checkpoint_due_in_ops_a_backfill_appends()).run()
    assert result.ok, result.message


def _restart_over_a_cut_below_a_purge_checkpoint() -> Options:
    """Seed 64's options, written out: 5 nodes, 2 persisted partitions, purges and segment
    retention, power losses and corrupted records. A partition replica on node 1 wrote
    a checkpoint at op 7 right after a purge retired every message (its log_op_min was 8,
    no record below it needed), lost power (tick 1195), and a corrupted record at the
    head of its journal was cut at recovery (restart at 1638), leaving the journal at op
    6. With nothing to backfill the replica left the journal as it was, and its append of
    op 8 met a journal whose head was op 6 (``crash``). The restart now restarts the
    journal empty after the checkpoint whenever it ends below the first op the state
    needs, backfill or not."""
    options = Options.from_seed(64)
    # The draws that matter, pinned: the run stays this one if the seeds draw otherwise.
    return dataclasses.replace(
        options,
        node_count=5,
        partition_count=2,
        persisted=True,
        ticks_fault=2597,
        faults=dataclasses.replace(
            options.faults,
            crash=0.001,
            power_loss_ratio=1.0,
            down_ticks_min=93,
            restart=0.005,
            correlated=False,
            outage=0.0,
            partition=0.001,
            partition_ticks_max=102,
            corruption=0.01,
            slow_disk=0.0,
        ),
        workload=dataclasses.replace(
            options.workload,
            topic_churns=3,
            retention_interval_ticks=120,
            message_expiry_ticks=1000,
            max_topic_size_bytes=None,
            lifecycle_ops=3,
        ),
        replica=dataclasses.replace(options.replica, checkpoint_interval_ops=8),
    )


def test_partition_replica_restarts_over_a_cut_below_a_purge_checkpoint() -> None:
    result = World(_restart_over_a_cut_below_a_purge_checkpoint()).run()
    assert result.ok, result.message
