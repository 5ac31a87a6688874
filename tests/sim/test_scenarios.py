"""Scenarios of sessions and connections, set up deterministically in the simulator.

Each builds a fault-free world, drives it tick by tick until a chosen situation holds,
acts on one node or one client, and asserts what must follow: findings the real-process
tests in ``tests/runtime/test_cluster_replies.py`` and ``tests/cluster/test_findings.py``
check over sockets, here step by step and without
sleeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from broker.state.errors import StateError
from broker.state.metadata import MetadataState
from sim.client import Client, Role
from sim.options import Options
from sim.world import World

TICKS_MAX = 3_000


def _world() -> World:
    """Three nodes, no faults, and no connection closes or logouts of the clients' own:
    the scenario makes them."""
    seed = next(s for s in range(100) if Options.from_seed(s, faults=False).node_count == 3)
    options = Options.from_seed(seed, faults=False)
    workload = dataclasses.replace(options.workload, connection_closes=0.0, logouts=0.0)
    return World(dataclasses.replace(options, workload=workload))


def _run_until(world: World, done: Callable[[], bool]) -> int:
    for _ in range(TICKS_MAX):
        world.tick_now += 1
        world._step(world.tick_now)
        if done():
            return world.tick_now
    pytest.fail(f"not reached in {TICKS_MAX} ticks")


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
    world = _world()
    client = _producer(world)
    _run_until(world, lambda: _joined_twice(world, client))
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
    for _ in range(300):
        world.tick_now += 1
        world._step(world.tick_now)
    assert _live_everywhere(world, session), "a joined connection's close ended the session"
    assert not joined.system.queue and joined.system.session == 0  # it proposed nothing
    owner.connection_closed(world.tick_now, client.client_id)
    world._flush_node(world.tick_now, owner)
    _run_until(world, lambda: _ended_everywhere(world, session))
    assert world.checkers.metadata_model.sessions_closed >= 1
