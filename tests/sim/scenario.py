"""What the scenario tests share: a fault-free world, bounded runs, and a probe's requests.

A scenario builds a world of three nodes without faults, drives it tick by tick
(``World.advance``) until a chosen situation holds, acts on it (a crash, a restart, a cut
link, a request of a probe client, ``World.add_probe``) and asserts what must follow. Every
loop is bounded in ticks; nothing reads a clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import pytest

from broker.core.reconcile import partition_group_id
from consensus.messages import Commit, decode_message
from consensus.replica import Replica, Status
from sdk import wire
from sdk.wire.codes import CommandCode, IggyErrorCode
from sim.client import ROOT_PASSWORD, ROOT_USERNAME, Client
from sim.network import ClientReply, ClientRequest, Payload, ReplicaFrame
from sim.node import STREAM_ID, TOPIC_ID
from sim.options import Options
from sim.world import World

TICKS_MAX: Final = 3_000
"""The longest a scenario waits for one situation (a request times out after 1 000)."""
ATTEMPTS_MAX: Final = 40
"""How often a probe asks again after a 58 before the scenario fails."""
BACKOFF_TICKS: Final = 10
TRANSIENT: Final = int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
METADATA_GROUP: Final = 0


def three_nodes(
    *,
    partitions: int | None = None,
    repair_ops_max: int | None = None,
    pipeline_prepares_max: int | None = None,
    heartbeat_interval_ticks: int | None = None,
    quiet: bool = False,
    replica_class: type[Replica] = Replica,
) -> World:
    """Three nodes, no faults, and no connection closes or logouts of the clients' own:
    the scenario makes them. ``partitions``, ``repair_ops_max`` and
    ``pipeline_prepares_max`` override the seed's; the nodes' heartbeat is off unless
    ``heartbeat_interval_ticks`` sets it;
    ``quiet``: the operator only, which sets up the workload's stream, topic and group and
    then stops, so the groups are idle but for the scenario's own requests (a backup then
    learns a commit only from the primary's next commit heartbeat); ``replica_class``: the
    replica every group runs (a planted bug's, to show the scenario catches it)."""
    return nodes_world(
        3,
        partitions=partitions,
        repair_ops_max=repair_ops_max,
        pipeline_prepares_max=pipeline_prepares_max,
        heartbeat_interval_ticks=heartbeat_interval_ticks,
        quiet=quiet,
        replica_class=replica_class,
    )


def nodes_world(
    nodes: int,
    *,
    partitions: int | None = None,
    repair_ops_max: int | None = None,
    pipeline_prepares_max: int | None = None,
    heartbeat_interval_ticks: int | None = None,
    quiet: bool = False,
    replica_class: type[Replica] = Replica,
) -> World:
    """``three_nodes`` with ``nodes`` nodes (the first fault-free seed of that size)."""
    seed = next(s for s in range(100) if Options.from_seed(s, faults=False).node_count == nodes)
    options = Options.from_seed(seed, faults=False)
    workload = dataclasses.replace(options.workload, connection_closes=0.0, logouts=0.0)
    if quiet:
        workload = dataclasses.replace(
            workload, producers=0, consumers=0, topic_churns=0, streams_per_client_max=0
        )
    options = dataclasses.replace(
        options, workload=workload, heartbeat_interval_ticks=heartbeat_interval_ticks
    )
    if partitions is not None:
        options = dataclasses.replace(options, partition_count=partitions)
    if repair_ops_max is not None:
        replica = dataclasses.replace(options.replica, repair_ops_max=repair_ops_max)
        options = dataclasses.replace(options, replica=replica)
    if pipeline_prepares_max is not None:
        replica = dataclasses.replace(options.replica, pipeline_prepares_max=pipeline_prepares_max)
        options = dataclasses.replace(options, replica=replica)
    return World(options, replica_class)


def run_until(world: World, done: Callable[[], bool], ticks_max: int = TICKS_MAX) -> int:
    """Advance ``world`` until ``done()`` holds, at most ``ticks_max`` ticks; the tick."""
    for _ in range(ticks_max):
        world.advance()
        if done():
            return world.tick_now
    pytest.fail(f"not reached in {ticks_max} ticks (tick {world.tick_now})")


def run_for(world: World, ticks: int) -> None:
    for _ in range(ticks):
        world.advance()


@contextmanager
def commits_lost(world: World, group: int, node: int) -> Iterator[None]:
    """Drop every Commit of ``group`` sent to ``node`` while the block runs, as a network
    that loses them would: the node learns the group's commits only from its next prepare,
    or from a read index once the block ends (its answer comes with a Commit)."""
    network = world.network
    send = network.send

    def send_unless_commit(tick: int, source: int, target: int, payload: Payload) -> None:
        if (
            target == node
            and isinstance(payload, ReplicaFrame)
            and payload.group == group
            and isinstance(decode_message(payload.frame), Commit)
        ):
            return
        send(tick, source, target, payload)

    network.send = send_unless_commit  # type: ignore[method-assign]
    try:
        yield
    finally:
        network.send = send  # type: ignore[method-assign]


def primary_of(world: World, group: int) -> int:
    """The node whose replica of ``group`` is primary in normal status in the highest view."""
    best: tuple[int, int] | None = None
    for node in world.nodes:
        host = node.groups.get(group) if node.alive else None
        replica = None if host is None else host.replica
        if replica is None or replica.status is not Status.NORMAL or not replica.is_primary:
            continue
        if best is None or replica.view > best[1]:
            best = (node.index, replica.view)
    assert best is not None, f"group {group} has no primary"
    return best[0]


def replica_of(world: World, node: int, group: int) -> Replica:
    return world.nodes[node].groups[group].replica


def partition_group(world: World, stream_id: int, topic_id: int, partition: int) -> int:
    """The group id of a partition, from the committed metadata of a live node."""
    node = next(n for n in world.nodes if n.alive)
    for ref in node.metadata_state().partition_refs():
        if (ref.stream_id, ref.topic_id, ref.partition_id) == (stream_id, topic_id, partition):
            return partition_group_id(stream_id, topic_id, partition, ref.created_op)
    raise AssertionError(f"no partition {stream_id}/{topic_id}/{partition} at node {node.index}")


def answered_by(probe: Client, reply: ClientReply) -> int:
    """The node that sent ``reply`` to ``probe``."""
    return next(node for node, got in probe.replies if got is reply)


def workload_topic_everywhere(world: World) -> bool:
    """Every node hosts the workload topic's first partition (the root user exists then)."""
    return all(node.alive and node.workload_group() is not None for node in world.nodes)


def workload_group(world: World, *, settle: bool = False) -> int:
    """The group of the workload topic's first partition, once every node hosts it (and,
    with ``settle``, once every replica of it is at the primary's commit)."""
    run_until(world, lambda: workload_topic_everywhere(world))
    group = world.nodes[0].workload_group()
    assert group is not None
    if settle:
        run_until(world, lambda: settled(world, group))
    return group


def settled(world: World, group: int) -> bool:
    """Every replica of ``group`` is normal in one view, at the primary's commit."""
    replicas = [n.groups[group].replica for n in world.nodes if n.alive and group in n.groups]
    if len(replicas) != len(world.nodes):
        return False
    if any(r.status is not Status.NORMAL for r in replicas) or len({r.view for r in replicas}) > 1:
        return False
    commit = max(r.commit_max for r in replicas)
    return all(r.commit_min == commit for r in replicas)


def answer(world: World, probe: Client, request: ClientRequest, already: int = 0) -> ClientReply:
    """The first reply to ``request`` after the ``already`` it had got, waiting (bounded)."""
    run_until(world, lambda: len(probe.answers(request)) > already)
    return probe.answers(request)[already][1]


def call(world: World, probe: Client, node: int, code: CommandCode, payload: bytes) -> ClientReply:
    """``probe``'s new request to ``node``, until taken (``_until_taken``)."""
    return _until_taken(world, probe, node, probe.ask(node, code, payload))


def call_again(world: World, probe: Client, node: int, request: ClientRequest) -> ClientReply:
    """``request``, sent before, to ``node`` again, until taken (``_until_taken``)."""
    probe.outbox.append((node, request))
    return _until_taken(world, probe, node, request)


def _until_taken(world: World, probe: Client, node: int, request: ClientRequest) -> ClientReply:
    """The first reply to ``request`` (sent to ``node`` at the next step) that is not a
    58, sending it again under the same number after each 58 (a request refused with 58
    was not taken), at most ``ATTEMPTS_MAX`` times. Every reply is in ``probe.answers``."""
    for attempt in range(ATTEMPTS_MAX):
        if attempt:
            probe.outbox.append((node, request))
        reply = answer(world, probe, request, already=len(probe.answers(request)))
        if reply.status != TRANSIENT or reply.error:
            return reply
        run_for(world, BACKOFF_TICKS)
    pytest.fail(f"node {node} refused request {request.request} {ATTEMPTS_MAX} times")


def login(world: World, probe: Client, node: int) -> ClientReply:
    """Log ``probe`` in at ``node``; the committed reply, whose op is the session. The
    probe's first login is repeated, as a workload client repeats it (``Client.login``):
    the same register under the same number joins its session while it lives."""
    if probe.login is None:
        payload = wire.LoginRegister(ROOT_USERNAME, ROOT_PASSWORD).encode()
        probe.login = probe.ask(node, CommandCode.LOGIN_REGISTER, payload)
        reply = _until_taken(world, probe, node, probe.login)
    else:
        reply = call_again(world, probe, node, probe.login)
    assert reply.status == 0 and not reply.error and reply.op, reply
    probe.session = reply.op
    return reply


def send_payload(
    probe: Client, partition: int, count: int, *, stream: int | str = STREAM_ID
) -> bytes:
    """A send of ``count`` messages to ``partition`` of topic ``TOPIC_ID`` (or topic "t"
    of a stream named ``stream``), with message ids no other client uses (the checkers
    hold every message id to one offset)."""
    stream_id, topic_id = _ids(stream)
    messages = []
    for _ in range(count):
        probe.message_seq += 1
        message_id = (probe.index << 32) | probe.message_seq
        messages.append(wire.OutgoingMessage(message_id, b"scenario"))
    body = wire.build_send_messages(stream_id, topic_id, wire.PartitionId(partition), messages)
    return bytes(body)


def poll_payload(partition: int, offset: int, count: int, consumer: int) -> bytes:
    """A poll of ``partition`` of the workload topic from ``offset``, as consumer ``consumer``."""
    poll = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(consumer)),
        wire.Identifier.numeric(STREAM_ID),
        wire.Identifier.numeric(TOPIC_ID),
        partition,
        wire.PollingStrategy.offset(offset),
        count,
        False,
    )
    return poll.encode()


def _ids(stream: int | str) -> tuple[wire.Identifier, wire.Identifier]:
    if isinstance(stream, int):
        return wire.Identifier.numeric(stream), wire.Identifier.numeric(TOPIC_ID)
    return wire.Identifier(stream), wire.Identifier("t")
