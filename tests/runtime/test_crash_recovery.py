"""Crash recovery: kill -9 a node mid-load, restart it, find every acknowledged message.

The official SDK produces batches in a loop and records which were acknowledged; the node
is killed with SIGKILL while sends are in flight, restarted on the same data directory,
and a poll of the whole partition must hold every acknowledged message exactly once, in
acknowledgement order. An unacknowledged batch (the one in flight at the kill) may or
may not be there; if it is, it is whole.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from apache_iggy import Consumer, Durability, IggyClient, PollingStrategy, SendMessage

from sdk import wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_interop_node import connect, run
from tests.wire_client import WireClient

BATCH_MESSAGES = 20
LOAD_S = 1.5


async def _produce_until_killed(
    node: NodeProcess, durability: Any
) -> tuple[list[bytes], list[bytes]]:
    client = await connect(node)
    await client.create_stream("crash")
    await client.create_topic("crash", "t", 1, durability=durability)
    acked: list[bytes] = []
    attempted: list[bytes] = []
    loop = asyncio.get_running_loop()
    loop.call_later(LOAD_S, node.kill)
    batch = 0
    while True:
        messages = [f"b{batch:06d}-m{i:02d}".encode() for i in range(BATCH_MESSAGES)]
        attempted.extend(messages)
        try:
            await asyncio.wait_for(
                client.send_messages("crash", "t", 0, [SendMessage(m) for m in messages]), 3.0
            )
        except (TimeoutError, RuntimeError):
            return acked, attempted
        acked.extend(messages)
        batch += 1


async def _read_all(node: NodeProcess) -> list[bytes]:
    client = IggyClient(node.address)
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    found: list[bytes] = []
    offset = 0
    while True:
        polled = await client.poll_messages(
            "crash",
            "t",
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.Offset(offset),
            count=1000,
            auto_commit=False,
            partition_id=0,
        )
        if not polled:
            return found
        found.extend(bytes(m.payload()) for m in polled)
        offset = polled[-1].offset() + 1


@pytest.mark.parametrize("durability", [Durability.PERSISTED, Durability.REPLICATED])
def test_kill_9_mid_load_then_restart_keeps_every_acknowledged_message(
    tmp_path: Path, durability: Any
) -> None:
    data_dir = tmp_path / "data"
    first = start_node(data_dir)
    try:
        acked, attempted = run(_produce_until_killed(first, durability), timeout_s=60)
    finally:
        first.kill()
    assert len(acked) >= 5 * BATCH_MESSAGES, "the load did not get going before the kill"
    second = start_node(data_dir)
    try:
        found = run(_read_all(second), timeout_s=60)
    finally:
        second.kill()
    assert found[: len(acked)] == acked, "an acknowledged message is missing or out of order"
    extra = found[len(acked) :]
    # At most the batch in flight at the kill, whole or not at all.
    assert extra in ([], attempted[len(acked) : len(acked) + BATCH_MESSAGES])


def test_sigterm_shuts_down_gracefully_and_restart_serves_the_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_node(data_dir)
    try:

        async def produce() -> None:
            client = await connect(first)
            await client.create_stream("crash")
            await client.create_topic("crash", "t", 1)
            for i in range(10):
                await client.send_messages("crash", "t", 0, [SendMessage(f"m{i}".encode())])

        run(produce())
        assert first.stop() == 0
    finally:
        first.kill()
    second = start_node(data_dir)
    try:
        found = run(_read_all(second))
    finally:
        second.kill()
    assert found == [f"m{i}".encode() for i in range(10)]


def _produce_concurrently(address: str, producers: int, sends: int) -> list[bytes]:
    """Each producer sends ``sends`` one-message batches; returns every acked payload."""
    acked: list[bytes] = []
    lock = threading.Lock()

    def producer(index: int) -> None:
        with WireClient(address) as client:
            client.login("iggy", ROOT_PASSWORD)
            for i in range(sends):
                payload = f"p{index}-{i:05d}".encode()
                body = wire.build_send_messages(
                    wire.Identifier("busy"),
                    wire.Identifier("t"),
                    wire.PartitionId(0),
                    [wire.OutgoingMessage(i + 1, payload)],
                )
                client.call(CommandCode.SEND_MESSAGES, wire.SendMessages.decode(body))
                with lock:
                    acked.append(payload)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return acked


def test_restart_after_a_checkpoint_taken_with_prepares_in_flight(tmp_path: Path) -> None:
    """More ops than a checkpoint interval from concurrent producers, so the partition's
    primary checkpoints with its pipeline busy; a kill -9 and a restart then recover from
    the checkpoint plus the journal above it."""
    data_dir = tmp_path / "data"
    first = start_node(data_dir)
    try:
        with WireClient(first.address) as setup:
            setup.login("iggy", ROOT_PASSWORD)
            setup.call(CommandCode.CREATE_STREAM, wire.CreateStream("busy"))
            # Persisted: prepares wait for their fsync, so several are in the pipeline.
            durability = wire.OptionEntry.of("durability", "persisted", wire.HeaderKind.STRING)
            setup.call(
                CommandCode.CREATE_TOPIC,
                wire.CreateTopic(wire.Identifier("busy"), 1, "t", (durability,)),
            )
        acked = _produce_concurrently(first.address, producers=4, sends=300)
    finally:
        first.kill()
    assert len(acked) == 1200
    assert any(name.startswith("checkpoint-") for name in _group_files(data_dir))
    second = start_node(data_dir)
    try:
        with WireClient(second.address) as reader:
            reader.login("iggy", ROOT_PASSWORD)
            found: list[bytes] = []
            while True:
                reply = reader.call(
                    CommandCode.POLL_MESSAGES,
                    wire.PollMessages(
                        wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
                        wire.Identifier("busy"),
                        wire.Identifier("t"),
                        0,
                        wire.PollingStrategy(wire.PollingKind.OFFSET, len(found)),
                        1000,
                        False,
                    ),
                )
                assert isinstance(reply, wire.PollMessagesReply)
                if not reply.records:
                    break
                for record in reply.records:
                    found.extend(bytes(m.payload) for m in wire.read_batch(record)[1])
    finally:
        second.kill()
    assert sorted(found) == sorted(acked)
    assert len(found) == len(set(found))


def _group_files(data_dir: Path) -> list[str]:
    return [path.name for path in (data_dir / "partitions").glob("*/*")]
