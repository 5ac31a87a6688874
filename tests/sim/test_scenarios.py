"""Scenarios of sessions, connections and forwarding, set up deterministically in the
simulator.

Each builds a fault-free world, drives it tick by tick until a chosen situation holds,
acts on one node, one link or one client, and asserts what must follow: findings the
real-process tests in ``tests/runtime/test_cluster_replies.py`` and
``tests/cluster/test_findings.py`` check over sockets, here step by step and without
sleeps (``tests.sim.scenario``). The reads after restarts are in
``test_scenarios_reads.py``.
"""

from __future__ import annotations

import itertools

from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import MetadataState
from sdk import wire
from sdk.wire.codes import CommandCode, IggyErrorCode
from sim.client import Client, Role
from sim.disk import SEGMENT_SIZE_BYTES
from sim.node import STREAM_ID, TICK_US, TOPIC_ID
from sim.world import World
from tests.sim.scenario import (
    METADATA_GROUP,
    TRANSIENT,
    answer,
    answered_by,
    call,
    call_again,
    commits_lost,
    login,
    partition_group,
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

PARTITIONS = 3
RETRYABLE = (int(IggyErrorCode.TRANSIENT_NOT_COMMITTED), int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))


def _live(state: MetadataState, session: int) -> bool:
    try:
        state.session(session)
    except StateError:
        return False
    return True


def _live_everywhere(world: World, session: int) -> bool:
    return all(_live(node.metadata_state(), session) for node in world.nodes)


def _ended_everywhere(world: World, session: int) -> bool:
    return not any(_live(node.metadata_state(), session) for node in world.nodes)


def _producer(world: World) -> Client:
    return next(c for c in world.clients if c.role is Role.PRODUCER)


def _joined_twice(world: World, client: Client) -> bool:
    """The client's session is bound on two nodes: one registered it, one joined it."""
    session = client.session
    if not session or not _live_everywhere(world, session):
        return False
    contexts = [n.connections.get(client.client_id) for n in world.nodes]
    bound = [c for c in contexts if c is not None and c.bound_session == session]
    registered = [c for c in bound if c.registered_session == session]
    return len(bound) >= 2 and len(registered) == 1


def test_closing_a_joined_connection_leaves_the_session_the_registering_one_ends_it() -> None:
    """sessions: a client's session survives the close of a connection that only joined
    it, and ends (on every node, through the metadata group) when the connection that
    logged in closes."""
    world = three_nodes()
    client = _producer(world)
    run_until(world, lambda: _joined_twice(world, client))
    session = client.session
    owner = next(
        n
        for n in world.nodes
        if (c := n.connections.get(client.client_id)) is not None
        and c.registered_session == session
    )
    joined = next(
        n
        for n in world.nodes
        if n is not owner
        and (c := n.connections.get(client.client_id)) is not None
        and c.bound_session == session
    )
    joined.connection_closed(world.tick_now, client.client_id)
    world._flush_node(world.tick_now, joined)
    run_for(world, 300)
    assert _live_everywhere(world, session), "a joined connection's close ended the session"
    assert not joined.system.queue and joined.system.session == 0  # it proposed nothing
    owner.connection_closed(world.tick_now, client.client_id)
    world._flush_node(world.tick_now, owner)
    run_until(world, lambda: _ended_everywhere(world, session))
    assert world.checkers.metadata_model.sessions_closed >= 1


def test_a_backup_answers_a_forwarded_write_in_the_name_of_the_primary() -> None:
    """forwarding: a write sent to a backup is forwarded to its group's primary, and the
    backup's reply names that primary, the node the client should write to next, not
    itself: for a login (a metadata write) and for a send to every partition whose
    primary is not the backup."""
    world = three_nodes(partitions=PARTITIONS)
    run_until(world, lambda: workload_topic_everywhere(world))
    metadata_primary = primary_of(world, METADATA_GROUP)
    backup = (metadata_primary + 1) % len(world.nodes)
    probe = world.add_probe()
    forwarded = world.nodes[backup].forwarded_writes
    logged_in = login(world, probe, backup)
    assert answered_by(probe, logged_in) == backup
    assert logged_in.primary == metadata_primary == primary_of(world, METADATA_GROUP)
    assert world.nodes[backup].forwarded_writes > forwarded
    checked = 0
    for partition in range(PARTITIONS):
        group = partition_group(world, STREAM_ID, TOPIC_ID, partition)
        primary = primary_of(world, group)
        if primary == backup:
            continue
        payload = send_payload(probe, partition, 1)
        sent = call(world, probe, backup, CommandCode.SEND_MESSAGES, payload)
        assert sent.status == 0 and sent.op, sent
        assert answered_by(probe, sent) == backup
        assert (sent.group, sent.primary) == (group, primary), partition
        checked += 1
    assert checked >= 1, "the backup is every partition's primary"


def test_a_login_at_a_lagging_backup_is_refused_there_not_evicted() -> None:
    """sessions: a node cut off from the others cannot commit a login (its register goes
    to the metadata primary): a login there, under a client id whose session the others
    committed meanwhile, is refused with a retryable status, never answered by an
    eviction, and binds nothing; once its links are back, the same client id joins that
    session there and is served.

    What differs from the runtime: the simulated network has no connections that drop and
    redial, so the node forwards the register at once, the cut link loses it, and the
    node's submitter stops waiting after ``REQUEST_TIMEOUT_TICKS`` with 57 (handed on, its
    fate unknown); the runtime holds a forward while its link is down and so refuses with
    58 (not taken). Both are retryable refusals, neither binds the connection."""
    world = three_nodes()
    run_until(world, lambda: workload_topic_everywhere(world))
    primary = primary_of(world, METADATA_GROUP)
    lagging = (primary + 1) % len(world.nodes)
    for peer in range(len(world.nodes)):
        if peer != lagging:
            world.cut(lagging, peer)
    probe = world.add_probe()
    session = login(world, probe, primary).op  # committed by the primary and the third node
    assert not _live(world.nodes[lagging].metadata_state(), session)
    # The same register again, on a connection to the lagging node (``login``).
    assert probe.login is not None
    already = len(probe.answers(probe.login))
    probe.outbox.append((lagging, probe.login))
    refused = answer(world, probe, probe.login, already)
    assert not refused.error, f"evicted by a node that lags: {refused.error}"
    assert refused.status in RETRYABLE and refused.op == 0, refused
    assert refused.primary == replica_of(world, lagging, METADATA_GROUP).primary
    context = world.nodes[lagging].connections.get(probe.client_id)
    assert context is None or context.bound_session == 0
    for peer in range(len(world.nodes)):
        if peer != lagging:
            world.mend(lagging, peer)
    assert login(world, probe, lagging).op == session
    polled = call(world, probe, lagging, CommandCode.POLL_MESSAGES, poll_payload(0, 0, 1, 1))
    assert polled.status == 0 and not polled.error, polled


OWN_WRITE_ROUNDS = 4


def test_a_client_of_a_backup_reads_its_own_metadata_writes_at_once() -> None:
    """forwarding: a stream created through a backup (forwarded to the metadata primary)
    is known to that backup before it judges the next request on the connection: a topic
    created in it at once, before the backup has learned the stream's commit, and a send
    to that topic after, are never refused as naming a stream or topic that does not
    exist; so on each backup.

    The groups are idle but for the scenario, and the Commit the primary sends as the
    stream's op commits is lost on the way to the backup, so the backup learns that
    commit only from the primary's next heartbeat (or by asking), and the topic's
    creation is handed to the backup in the tick the stream's reply reached the client (a
    client without network delay).

    What differs from the runtime: where the runtime's backup waits until it has applied
    what the connection was told, the simulated one refuses with 58 and the client asks
    again (``sim.node``, admission); the scenario allows those refusals, nothing else."""
    world = three_nodes(quiet=True)
    run_until(world, lambda: workload_topic_everywhere(world))
    primary = primary_of(world, METADATA_GROUP)
    behind = 0
    backups = [node.index for node in world.nodes if node.index != primary]
    # Whether a backup has learned a commit when the next request arrives depends on
    # where the primary's heartbeat falls (the prompt Commit is lost): a few rounds on
    # each backup meet both cases.
    for backup, attempt in itertools.product(backups, range(OWN_WRITE_ROUNDS)):
        probe = world.add_probe()
        login(world, probe, backup)
        name = f"own-writes-{backup}-{attempt}"
        with commits_lost(world, METADATA_GROUP, backup):
            created = call(world, probe, backup, CommandCode.CREATE_STREAM, create_stream(name))
        assert created.status == 0 and created.op, created
        # At once, on the same connection: the backup may not have applied it yet.
        behind += replica_of(world, backup, METADATA_GROUP).commit_min < created.op
        request = probe.make(CommandCode.CREATE_TOPIC, create_topic(name))
        world.nodes[backup].on_client_request(world.tick_now, probe.endpoint, request)
        topic = answer(world, probe, request)
        if topic.status == TRANSIENT:
            topic = call_again(world, probe, backup, request)
        assert topic.status == 0 and topic.op, f"backup {backup}: {_status(topic.status)}"
        payload = send_payload(probe, 0, 3, stream=name)
        sent = call(world, probe, backup, CommandCode.SEND_MESSAGES, payload)
        assert sent.status == 0 and sent.op, f"backup {backup}: {_status(sent.status)}"
    assert behind, "every backup had applied its stream before its next request"


def create_stream(name: str) -> bytes:
    return wire.CreateStream(name).encode()


def create_topic(stream: str) -> bytes:
    """A topic "t" of one partition in the stream named ``stream``."""
    return wire.CreateTopic(wire.Identifier(stream), 1, "t", ()).encode()


def _status(status: int) -> str:
    try:
        return ErrorCode(status).name
    except ValueError:
        return str(status)


def test_a_topics_own_segment_size_is_the_one_its_partitions_roll_at() -> None:
    """segments: a topic created with its own ``segment_size`` has every replica's journal
    roll at that size, and the workload's topic (none set) at the simulator's node-wide
    size: about 36 kB sent stay in one 1 MiB segment, where 16 KiB ones would be three."""
    world = three_nodes(quiet=True)
    run_until(world, lambda: workload_topic_everywhere(world))
    primary = primary_of(world, METADATA_GROUP)
    probe = world.add_probe()
    login(world, probe, primary)
    created = call(world, probe, primary, CommandCode.CREATE_STREAM, create_stream("seg"))
    assert created.status == 0, created
    size = wire.OptionEntry.of("segment_size", 1 << 20, wire.HeaderKind.UINT64)
    topic = wire.CreateTopic(wire.Identifier("seg"), 1, "t", (size,)).encode()
    created = call(world, probe, primary, CommandCode.CREATE_TOPIC, topic)
    assert created.status == 0, created
    for _ in range(6):
        sent = call(
            world,
            probe,
            primary,
            CommandCode.SEND_MESSAGES,
            send_payload(probe, 0, 100, stream="seg"),
        )
        assert sent.status == 0, sent
    node = world.nodes[primary]
    state = node.metadata_state()
    stream_id, topic_id = state.resolve_ids(wire.Identifier("seg").value, "t")
    assert topic_id is not None
    group = partition_group(world, stream_id, topic_id, 0)
    workload = node.workload_group()
    assert workload is not None
    run_until(world, lambda: settled(world, group))
    for each in world.nodes:
        journal = each.disks[group].journal
        assert journal.config.segment_size_bytes_max == 1 << 20
        assert sum(info.size_bytes for info in journal.segments()) > 2 * SEGMENT_SIZE_BYTES
        assert len(journal.segments()) == 1
        workload_journal = each.disks[workload].journal
        assert workload_journal.config.segment_size_bytes_max == SEGMENT_SIZE_BYTES


HEARTBEAT_TICKS = 200
"""The nodes' heartbeat interval in the eviction scenario: stale after 240 silent ticks."""


def test_a_group_members_silent_connection_is_evicted_and_its_session_ended() -> None:
    """heartbeats: a consumer-group member that keeps talking to one node but is silent
    on its connection to another is evicted there once 6/5 of the heartbeat interval
    passed, and its session ends everywhere (its groups rebalance off it); a client in
    no group, silent everywhere, keeps its session; the node it talks to evicts no one."""
    world = three_nodes(partitions=1, quiet=True, heartbeat_interval_ticks=HEARTBEAT_TICKS)
    run_until(world, lambda: workload_topic_everywhere(world))
    talked_to = primary_of(world, METADATA_GROUP)
    member, bystander = world.add_probe(), world.add_probe()
    for probe in (member, bystander):
        for node in range(len(world.nodes)):
            login(world, probe, node)
    group_ref = wire.GroupRef(
        wire.Identifier.numeric(STREAM_ID),
        wire.Identifier.numeric(TOPIC_ID),
        wire.Identifier.numeric(0),
    ).encode()
    joined = call(world, member, talked_to, CommandCode.JOIN_CONSUMER_GROUP, group_ref)
    assert joined.status == 0 and not joined.error, joined
    session = member.session
    run_until(world, lambda: _live_everywhere(world, session))
    assert world.nodes[0].metadata_state().memberships(session)
    silent = [n.index for n in world.nodes if n.index != talked_to]
    heard = [world.nodes[n].heard_us(member.client_id) for n in silent]
    assert all(us is not None for us in heard), heard
    first_silent_tick = min(us for us in heard if us is not None) // TICK_US
    evictions = [node.stale_evictions for node in world.nodes]

    def ended_and_pinging() -> bool:
        # The member pings the node it talks to now and then, well inside the interval.
        if world.tick_now % (HEARTBEAT_TICKS // 4) == 0:
            member.ask(talked_to, CommandCode.PING, b"")
        return _ended_everywhere(world, session)

    run_until(world, ended_and_pinging, ticks_max=4 * HEARTBEAT_TICKS)
    # Not before the window passed since the member last spoke to a silent node.
    assert world.tick_now > first_silent_tick + HEARTBEAT_TICKS * 6 // 5
    evicted = [
        node.stale_evictions - before for node, before in zip(world.nodes, evictions, strict=True)
    ]
    assert evicted[talked_to] == 0
    assert sum(evicted) >= 1
    assert _live_everywhere(world, bystander.session)
