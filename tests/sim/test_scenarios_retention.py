"""Scenarios of retention and purge under faults, set up deterministically in the simulator.

A fault-free world of three nodes is driven tick by tick (``tests.sim.scenario``); a node
is taken down at a chosen moment while the others purge and delete the retired segments,
and what it holds and serves after its restart is checked. The swarm runs the same
faults at random; here the one case that needs state transfer is forced.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from broker.core.reads import readable
from broker.state.partition_machine import PartitionMachine
from sdk import wire
from sdk.wire.codes import CommandCode
from sim.world import World
from tests.sim.scenario import (
    METADATA_GROUP,
    call,
    login,
    poll_payload,
    primary_of,
    replica_of,
    run_until,
    send_payload,
    settled,
    three_nodes,
    workload_group,
)

CHECKPOINT_INTERVAL_OPS: Final = 8
"""Files go only up to a replica's durable checkpoint: a short interval lets them go soon."""
SENDS_BEFORE_PURGE: Final = 60
SENDS_AFTER_PURGE: Final = 40
MESSAGES_PER_SEND: Final = 5
CONSUMER_ID: Final = 7_100


def _world() -> World:
    """Three quiet nodes (the probe's requests only), one partition, checkpoints every 8
    ops, and no retention or lifecycle requests of the seed's own."""
    world = three_nodes(partitions=1, quiet=True)
    options = world.options
    replica = dataclasses.replace(options.replica, checkpoint_interval_ops=CHECKPOINT_INTERVAL_OPS)
    workload = dataclasses.replace(
        options.workload, message_expiry_ticks=None, max_topic_size_bytes=None, lifecycle_ops=0
    )
    return World(dataclasses.replace(options, replica=replica, workload=workload))


def test_a_replica_down_while_the_others_purge_catches_up_by_state_transfer() -> None:
    """retention: a node is down while the others commit many sends, purge the topic and
    delete the segments of every retired op it has not seen, so no peer can repair them.
    After its restart it installs a peer's state (the retained start, the next offset)
    and copies the records from the retained start on: it holds every retained message,
    none it never needed, and serves a poll from offset 0 from the retained start."""
    world = _world()
    group = workload_group(world, settle=True)
    probe = world.add_probe()
    primary = primary_of(world, group)
    login(world, probe, primary)
    busy = (primary_of(world, METADATA_GROUP), primary)
    victim = next(n.index for n in world.nodes if n.index not in busy)
    world.crash(victim)
    left_at = replica_of(world, primary, group).commit_min
    for _ in range(SENDS_BEFORE_PURGE):
        payload = send_payload(probe, 0, MESSAGES_PER_SEND)
        reply = call(world, probe, primary_of(world, group), CommandCode.SEND_MESSAGES, payload)
        assert reply.status == 0, reply
    stream, topic = wire.Identifier.numeric(0), wire.Identifier.numeric(0)
    purge = wire.TopicRef(stream, topic).encode()
    metadata = primary_of(world, METADATA_GROUP)
    reply = call(world, probe, metadata, CommandCode.PURGE_TOPIC, purge)
    assert reply.status == 0, reply
    # The partition's primary truncates it once the purge is committed (its own request).
    run_until(world, lambda: _purged(world, group))
    purged_at = _machine(world, primary_of(world, group), group).state.retained_start
    for _ in range(SENDS_AFTER_PURGE):
        payload = send_payload(probe, 0, MESSAGES_PER_SEND)
        reply = call(world, probe, primary_of(world, group), CommandCode.SEND_MESSAGES, payload)
        assert reply.status == 0, reply
    live = [n for n in world.nodes if n.alive]
    # The peers deleted every segment the victim would need to repair from where it left.
    run_until(world, lambda: all(n.disks[group].journal.op_min > left_at + 1 for n in live))
    assert purged_at > 0
    world.restart(victim)
    run_until(
        world,
        lambda: (
            group in world.nodes[victim].groups
            and settled(world, group)
            and replica_of(world, victim, group).log_whole
        ),
    )
    replica = replica_of(world, victim, group)
    assert replica.checkpoint_op > left_at  # a transferred snapshot, not a replay
    disk = world.nodes[victim].disks[group]
    assert disk.journal.op_min > left_at + 1  # it never fetched what the others retired
    state = _machine(world, victim, group).state
    newest = _machine(world, primary_of(world, group), group).state
    assert state.retained_start == newest.retained_start >= purged_at
    assert state.current_offset == newest.current_offset
    assert readable(replica, replica.commit_min)
    login(world, probe, victim)
    poll = call(
        world, probe, victim, CommandCode.POLL_MESSAGES, poll_payload(0, 0, 10, CONSUMER_ID)
    )
    assert poll.status == 0, poll
    offsets = [m.offset for m in wire.PollMessagesReply.decode(poll.body).messages()]
    start = state.retained_start
    assert offsets == list(range(start, start + 10)), f"node {victim} serves {offsets}"


def _machine(world: World, node: int, group: int) -> PartitionMachine:
    machine = world.nodes[node].groups[group].machine.inner
    assert isinstance(machine, PartitionMachine)
    return machine


def _purged(world: World, group: int) -> bool:
    return _machine(world, primary_of(world, group), group).state.purge_generation > 0
