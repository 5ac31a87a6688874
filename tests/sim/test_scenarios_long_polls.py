"""Scenarios of long polls in the simulator: the same flow as the runtime's
(``broker.core.handlers``), released by the same decisions (``broker.core.long_polls``),
in simulated time, so the ticks are exact.

The real-process tests are in ``tests/runtime/test_long_polls.py``.
"""

from __future__ import annotations

from typing import Final

from sdk import wire
from sdk.wire.codes import CommandCode
from sim.client import Client
from sim.network import ClientReply
from sim.world import World
from tests.sim.scenario import (
    answer,
    call,
    login,
    poll_payload,
    primary_of,
    replica_of,
    run_for,
    run_until,
    send_payload,
    three_nodes,
    workload_group,
)

CONSUMER_ID: Final = 7_100
WAIT_MS: Final = 2_000
"""200 ticks: far beyond what a send takes to apply in a fault-free world."""
TICK_MS: Final = 10


def _long_poll(offset: int, wait_ms: int) -> bytes:
    return wait_ms.to_bytes(4, "little") + poll_payload(0, offset, 10, CONSUMER_ID)


def _messages(reply: ClientReply) -> list[wire.BatchMessage]:
    assert reply.status == 0 and not reply.error, reply
    return wire.PollMessagesReply.decode(reply.body).messages()


def _sent(world: World, probe: Client, node: int) -> int:
    """One message sent through ``node``; the world's tick when it was acknowledged."""
    reply = call(world, probe, node, CommandCode.SEND_MESSAGES, send_payload(probe, 0, 1))
    assert reply.status == 0, reply
    return world.tick_now


def test_long_poll_on_the_primary_answers_as_the_message_is_applied() -> None:
    """long poll: a poll waiting on the partition's primary for the next offset answers
    with the message sent meanwhile by another client, as the send is acknowledged, long
    before its deadline."""
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    primary = primary_of(world, group)
    waiter, sender = world.add_probe(), world.add_probe()
    login(world, waiter, primary)
    login(world, sender, primary)
    poll = waiter.ask(primary, wire.LONG_POLL_CODE, _long_poll(0, WAIT_MS))  # type: ignore[arg-type]
    run_for(world, 20)
    assert waiter.answers(poll) == []  # it waits: the partition is empty
    asked_at = world.tick_now - 20
    acked_at = _sent(world, sender, primary)
    answered_at = run_until(world, lambda: bool(waiter.answers(poll)))
    messages = _messages(waiter.answers(poll)[0][1])
    assert [m.offset for m in messages] == [0]
    # Within a network delay of the send's acknowledgement, not at its deadline.
    assert answered_at - acked_at < 20 < asked_at + WAIT_MS // TICK_MS - answered_at


def test_long_poll_with_nothing_to_wait_for_answers_empty_at_its_deadline() -> None:
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    primary = primary_of(world, group)
    probe = world.add_probe()
    login(world, probe, primary)
    wait_ms = 300
    poll = probe.ask(primary, wire.LONG_POLL_CODE, _long_poll(0, wait_ms))  # type: ignore[arg-type]
    asked_at = world.tick_now
    run_for(world, wait_ms // TICK_MS - 5)
    assert probe.answers(poll) == []  # not before its deadline
    reply = answer(world, probe, poll)
    assert _messages(reply) == []
    assert world.tick_now >= asked_at + wait_ms // TICK_MS


def test_long_poll_on_a_backup_answers_once_the_backup_applied_the_message() -> None:
    """long poll: on a backup, the wait ends when that replica applies the message, which
    in an idle group it learns from the primary's next commit heartbeat; the answer holds
    the message, and the backup had applied it when it answered."""
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    primary = primary_of(world, group)
    backup = next(node for node in range(3) if node != primary)
    waiter, sender = world.add_probe(), world.add_probe()
    login(world, waiter, backup)
    login(world, sender, primary)
    poll = waiter.ask(backup, wire.LONG_POLL_CODE, _long_poll(0, WAIT_MS))  # type: ignore[arg-type]
    run_for(world, 20)
    assert waiter.answers(poll) == []
    _sent(world, sender, primary)
    run_until(world, lambda: bool(waiter.answers(poll)))
    reply = waiter.answers(poll)[0][1]
    assert [m.offset for m in _messages(reply)] == [0]
    assert replica_of(world, backup, group).commit_min >= reply.read_op > 0


def test_request_behind_a_waiting_long_poll_releases_it() -> None:
    """long poll: a connection answers in order, so the next request on it makes the
    waiting poll answer at once, with what is there (nothing)."""
    world = three_nodes(partitions=1, quiet=True)
    group = workload_group(world, settle=True)
    primary = primary_of(world, group)
    probe = world.add_probe()
    login(world, probe, primary)
    poll = probe.ask(primary, wire.LONG_POLL_CODE, _long_poll(0, WAIT_MS))  # type: ignore[arg-type]
    asked_at = world.tick_now
    run_for(world, 20)
    assert probe.answers(poll) == []
    ping = probe.ask(primary, CommandCode.PING, b"")
    run_until(world, lambda: bool(probe.answers(poll)) and bool(probe.answers(ping)))
    assert _messages(probe.answers(poll)[0][1]) == []
    assert world.tick_now - asked_at < 20 + WAIT_MS // TICK_MS
