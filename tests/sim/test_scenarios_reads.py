"""Scenarios of reads: after restarts, and of stored offsets at backups (the read index).

The real-process tests of the same findings are in ``tests/cluster/test_findings.py`` and
``tests/runtime/test_cluster_replies.py``; here a fault-free world is driven tick by tick
(``tests.sim.scenario``), a node or every node crashes and restarts, or links are cut, at
a chosen moment, and what the nodes serve is checked.
"""

from __future__ import annotations

from typing import Final

from broker.core.reads import readable
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import PartitionMachine
from consensus.replica import Status
from sdk import wire
from sdk.wire.codes import CommandCode
from sim.client import Client
from sim.network import ClientReply
from sim.node import STREAM_ID, TOPIC_ID
from sim.world import World
from tests.sim.scenario import (
    METADATA_GROUP,
    TRANSIENT,
    answer,
    answered_by,
    call,
    login,
    nodes_world,
    poll_payload,
    primary_of,
    replica_of,
    run_for,
    run_until,
    send_payload,
    settled,
    three_nodes,
    workload_group,
)

REPAIR_OPS_MAX: Final = 16
"""The bound the far-behind scenario runs with (one of the swarm's choices)."""
CONSUMER_ID: Final = 7_000
"""The probe's consumer: no workload consumer has this id (they use their index)."""
STORED_LAST: Final = 8
STORES: Final = 20
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
    group = workload_group(world)
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

    The scenario asks each restarted node's partition state at every tick, through the
    replica's own barrier (its view's start op applied) and the same
    ``get_consumer_offset`` the node answers with, so it sees every tick, not only those a
    read happens to arrive at; the read index a backup adds for the offset-read route is
    exercised by the scenarios below."""
    world = three_nodes(partitions=1)
    group = workload_group(world)
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


def _store(probe_consumer: int, offset: int) -> bytes:
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(probe_consumer))
    stream, topic = wire.Identifier.numeric(STREAM_ID), wire.Identifier.numeric(TOPIC_ID)
    return wire.StoreConsumerOffset(consumer, stream, topic, 0, offset).encode()


def _offset_read(probe_consumer: int) -> bytes:
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(probe_consumer))
    stream, topic = wire.Identifier.numeric(STREAM_ID), wire.Identifier.numeric(TOPIC_ID)
    return wire.GetConsumerOffset(consumer, stream, topic, 0).encode()


def _stored(reply: ClientReply) -> int | None:
    assert reply.status == 0, reply
    return wire.ConsumerOffsetInfo.decode(reply.body).stored_offset if reply.body else None


def _messages(world: World, probe: Client, primary: int) -> None:
    """Messages to store offsets into (an offset past the partition's end is refused)."""
    sent = call(
        world, probe, primary, CommandCode.SEND_MESSAGES, send_payload(probe, 0, STORES + 5)
    )
    assert sent.status == 0, sent


def _sent_offset_read(world: World, probe: Client, node: int) -> ClientReply:
    """One offset read of the probe's consumer at ``node``, sent now; its first answer."""
    request = probe.ask(node, CommandCode.GET_CONSUMER_OFFSET, _offset_read(CONSUMER_ID))
    return answer(world, probe, request)


def test_a_backup_reads_the_stored_offset_the_primary_just_acknowledged() -> None:
    """reads: a stored offset the primary acknowledged is what a backup answers at once,
    though it has not heard the commit yet: the backup asks its view's primary for a read
    index and serves only once it applied that far (twenty stores, each read back at a
    backup in the tick its acknowledgement arrived)."""
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    probe = world.add_probe()
    primary = primary_of(world, group)
    backups = [n.index for n in world.nodes if n.index != primary]
    for node in (primary, *backups):
        login(world, probe, node)
    _messages(world, probe, primary)
    behind = 0
    for offset in range(1, STORES + 1):
        stored = call(
            world, probe, primary, CommandCode.STORE_CONSUMER_OFFSET, _store(CONSUMER_ID, offset)
        )
        assert stored.status == 0 and stored.op, stored
        backup = backups[offset % len(backups)]
        behind += replica_of(world, backup, group).commit_min < stored.op
        reply = _sent_offset_read(world, probe, backup)
        assert _stored(reply) == offset, f"backup {backup} answered {_stored(reply)} after {offset}"
        assert answered_by(probe, reply) == backup
    assert behind, "no read met a backup that had not applied the store: nothing was asked"
    assert sum(world.nodes[b].fresh_reads for b in backups) == STORES


def test_a_backup_cut_off_from_the_primary_refuses_the_stored_offset_read() -> None:
    """reads: a backup that cannot reach its view's primary answers a stored-offset read
    with 58 (its read index is never decided), never with the offset it holds, which is
    older than the one the primary and the other backup acknowledged meanwhile."""
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    probe = world.add_probe()
    primary = primary_of(world, group)
    cut_off = next(n.index for n in world.nodes if n.index != primary)
    for node in (primary, cut_off):
        login(world, probe, node)
    _messages(world, probe, primary)
    first = call(world, probe, primary, CommandCode.STORE_CONSUMER_OFFSET, _store(CONSUMER_ID, 1))
    assert first.status == 0, first
    run_until(world, lambda: replica_of(world, cut_off, group).commit_min >= first.op)
    world.cut(primary, cut_off)
    second = call(world, probe, primary, CommandCode.STORE_CONSUMER_OFFSET, _store(CONSUMER_ID, 2))
    assert second.status == 0, second
    assert replica_of(world, cut_off, group).commit_min < second.op  # it holds offset 1
    reply = _sent_offset_read(world, probe, cut_off)
    assert reply.status == TRANSIENT, f"the cut-off backup answered {reply}"
    world.mend(primary, cut_off)
    again = call(world, probe, cut_off, CommandCode.GET_CONSUMER_OFFSET, _offset_read(CONSUMER_ID))
    assert _stored(again) == 2


def _newer_view_acknowledges_a_store(
    world: World, probe: Client, group: int, old_side: list[int], new_side: list[int]
) -> None:
    """Offset 1 stored and settled everywhere; then the links between ``old_side`` (the
    view's primary first) and ``new_side`` cut, ``new_side`` forming a newer view that
    acknowledges offset 2, while ``old_side`` still holds the old view."""
    old_primary = old_side[0]
    assert primary_of(world, group) == old_primary
    old_view = replica_of(world, old_primary, group).view
    for node in (*old_side, *new_side):
        login(world, probe, node)
    _messages(world, probe, old_primary)
    first = call(
        world, probe, old_primary, CommandCode.STORE_CONSUMER_OFFSET, _store(CONSUMER_ID, 1)
    )
    assert first.status == 0, first
    run_until(world, lambda: settled(world, group))
    for cut in old_side:
        for other in new_side:
            world.cut(cut, other)

    def newer_view() -> bool:
        replicas = [replica_of(world, n, group) for n in new_side]
        return all(r.status is Status.NORMAL and r.view > old_view for r in replicas)

    run_until(world, newer_view)
    new_primary = primary_of(world, group)
    assert new_primary in new_side
    second = call(
        world, probe, new_primary, CommandCode.STORE_CONSUMER_OFFSET, _store(CONSUMER_ID, 2)
    )
    assert second.status == 0, second
    # The old side has not heard of the newer view.
    assert all(replica_of(world, n, group).view == old_view for n in old_side)
    assert replica_of(world, old_primary, group).is_primary


def test_five_nodes_a_primary_and_a_backup_cut_off_from_a_newer_view_serve_no_old_offset() -> None:
    """reads: with five nodes, the primary of a view and one backup are cut off from the
    other three, which form a newer view and acknowledge a store there. The cut-off
    backup, asked for the offset, hears its old primary confirm the old view and commit,
    but no third replica of that view: it answers 58, never the older offset (a read
    index from the primary alone would have served it; ``broker.core.reads``)."""
    world = nodes_world(5, partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    probe = world.add_probe()
    old_primary = primary_of(world, group)
    backup = next(n.index for n in world.nodes if n.index != old_primary)
    others = [n.index for n in world.nodes if n.index not in (old_primary, backup)]
    _newer_view_acknowledges_a_store(world, probe, group, [old_primary, backup], others)
    reply = _sent_offset_read(world, probe, backup)
    assert reply.status == TRANSIENT, f"the cut-off backup answered {_stored(reply)}"


def test_a_primary_cut_off_from_its_backups_refuses_the_stored_offset_read() -> None:
    """reads: a primary cut off from both backups, which form a newer view and
    acknowledge a store there, still thinks it leads; asked for the offset, it asks its
    backups whether it still does, hears nobody, and answers 58, never its older offset
    (serving its own commit unasked would have)."""
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    probe = world.add_probe()
    old_primary = primary_of(world, group)
    backups = [n.index for n in world.nodes if n.index != old_primary]
    _newer_view_acknowledges_a_store(world, probe, group, [old_primary], backups)
    reply = _sent_offset_read(world, probe, old_primary)
    assert reply.status == TRANSIENT, f"the cut-off primary answered {_stored(reply)}"
