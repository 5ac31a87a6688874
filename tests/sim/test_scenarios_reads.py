"""Scenarios of reads after restarts, set up deterministically in the simulator.

The real-process tests of the same findings are in ``tests/cluster/test_findings.py``;
here a fault-free world is driven tick by tick (``tests.sim.scenario``), a node or every
node crashes and restarts at a chosen moment, and what the restarted nodes serve is
checked at every tick.
"""

from __future__ import annotations

from typing import Final

from broker.core.reads import readable
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import PartitionMachine
from consensus.replica import Status
from sdk import wire
from sdk.wire.codes import CommandCode
from sim.node import STREAM_ID, TOPIC_ID
from sim.world import World
from tests.sim.scenario import (
    METADATA_GROUP,
    call,
    login,
    poll_payload,
    primary_of,
    replica_of,
    run_for,
    run_until,
    send_payload,
    settled,
    three_nodes,
    workload_topic_everywhere,
)

REPAIR_OPS_MAX: Final = 16
"""The bound the far-behind scenario runs with (one of the swarm's choices)."""
CONSUMER_ID: Final = 7_000
"""The probe's consumer: no workload consumer has this id (they use their index)."""
STORED_LAST: Final = 8
WATCH_TICKS: Final = 600
"""How long the restarted nodes are watched after every one of them served a read."""


def _partition_machine(world: World, node: int, group: int) -> PartitionMachine:
    machine = world.nodes[node].groups[group].machine.inner
    assert isinstance(machine, PartitionMachine)
    return machine


def _offsets(machine: PartitionMachine, count: int) -> list[int]:
    """The offsets a poll of ``machine``'s state from offset 0 returns, ``count`` at most."""
    poll = wire.PollMessages.decode(poll_payload(0, 0, count, CONSUMER_ID))
    parts, _ = machine.poll(poll, ConsumerKey(ConsumerKind.CONSUMER, CONSUMER_ID))
    body = b"".join(bytes(part) for part in parts)
    return [m.offset for m in wire.PollMessagesReply.decode(body).messages()]


def test_a_replica_restarted_far_behind_serves_the_partition_from_offset_zero() -> None:
    """reads: a node that was down while more ops committed in a partition group than a
    replica repairs one by one (``repair_ops_max``) serves the partition from offset 0
    once it has caught up after its restart: its partition state holds every message from
    offset 0 on, densely, and a poll at it from offset 0 returns offset 0 first."""
    world = three_nodes(partitions=1, repair_ops_max=REPAIR_OPS_MAX)
    run_until(world, lambda: workload_topic_everywhere(world))
    group = world.nodes[0].workload_group()
    assert group is not None
    probe = world.add_probe()
    primary = primary_of(world, group)
    login(world, probe, primary)
    first = call(world, probe, primary, CommandCode.SEND_MESSAGES, send_payload(probe, 0, 1))
    assert first.status == 0, first
    # Neither the metadata primary nor the partition's: the groups keep their quorum and
    # their primaries, as in the process test.
    busy = (primary_of(world, METADATA_GROUP), primary)
    victim = next(n.index for n in world.nodes if n.index not in busy)
    run_until(world, lambda: settled(world, group))
    world.crash(victim)
    left_at = replica_of(world, victim, group).commit_min
    for _ in range(REPAIR_OPS_MAX * 3):
        primary = primary_of(world, group)
        reply = call(world, probe, primary, CommandCode.SEND_MESSAGES, send_payload(probe, 0, 1))
        assert reply.status == 0, reply
    assert replica_of(world, primary, group).commit_max - left_at > 2 * REPAIR_OPS_MAX
    world.restart(victim)
    run_until(world, lambda: group in world.nodes[victim].groups and settled(world, group))
    replica = replica_of(world, victim, group)
    assert replica.log_whole and readable(replica, 0)
    machine = _partition_machine(world, victim, group)
    newest = _partition_machine(world, primary, group).state.current_offset
    assert machine.state.current_offset == newest
    held = _offsets(machine, newest + 1)
    assert held == list(range(newest + 1)), f"node {victim} holds offsets {held[:3]}..."
    # And through the node: a poll on a connection of its new process, from offset 0.
    login(world, probe, victim)
    poll = call(world, probe, victim, CommandCode.POLL_MESSAGES, poll_payload(0, 0, 10, 1))
    assert poll.status == 0, poll
    offsets = [m.offset for m in wire.PollMessagesReply.decode(poll.body).messages()]
    assert offsets == list(range(10)), f"node {victim} answers a poll from 0 with {offsets}"


def test_a_stored_consumer_offset_never_reads_older_after_every_node_restarts() -> None:
    """reads: after every node crashed and restarted, no node serves a stored consumer
    offset older than the last one acknowledged: at every tick, each node that may serve
    a read of the partition (the read barrier, ``broker.core.reads.readable``) holds the
    last offset stored, and every node comes to serve it.

    What differs from the runtime: the simulated node has no offset-read route, so the
    scenario asks the restarted node's partition state through the same barrier the
    runtime's read passes and the same ``get_consumer_offset`` the runtime answers with.
    The runtime's barrier is also fresh (a backup asks the primary for its commit, the
    read index); here it is only the replica's own (its view's start op and what the
    connection was told), which after a restart of every node already holds every
    acknowledged op."""
    world = three_nodes(partitions=1)
    run_until(world, lambda: workload_topic_everywhere(world))
    group = world.nodes[0].workload_group()
    assert group is not None
    probe = world.add_probe()
    primary = primary_of(world, group)
    login(world, probe, primary)
    sent = call(world, probe, primary, CommandCode.SEND_MESSAGES, send_payload(probe, 0, 10))
    assert sent.status == 0, sent
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(CONSUMER_ID))
    stream, topic = wire.Identifier.numeric(STREAM_ID), wire.Identifier.numeric(TOPIC_ID)
    for offset in range(1, STORED_LAST + 1):
        store = wire.StoreConsumerOffset(consumer, stream, topic, 0, offset).encode()
        reply = call(world, probe, primary, CommandCode.STORE_CONSUMER_OFFSET, store)
        assert reply.status == 0 and reply.op, reply
    for node in world.nodes:
        world.crash(node.index)
    run_for(world, 1)
    for node in world.nodes:
        world.restart(node.index)
    key = ConsumerKey(ConsumerKind.CONSUMER, CONSUMER_ID)
    served = [0] * len(world.nodes)
    stale: list[str] = []

    def watch() -> bool:
        for node in world.nodes:
            host = node.groups.get(group)
            if host is None or not readable(host.replica, 0) or not host.replica.log_whole:
                continue
            served[node.index] += 1
            body = _partition_machine(world, node.index, group).get_consumer_offset(key)
            found = wire.ConsumerOffsetInfo.decode(body).stored_offset if body else None
            if found != STORED_LAST:
                stale.append(f"node {node.index} at tick {world.tick_now} serves {found}")
        return all(served)

    run_until(world, watch)
    for _ in range(WATCH_TICKS):
        world.advance()
        watch()
    assert not stale, f"{len(stale)} stale reads, first: {stale[:3]}"
    assert all(n.groups[group].replica.status is Status.NORMAL for n in world.nodes)
