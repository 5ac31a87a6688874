"""A node over its disk budget refuses new messages with 4010, keeps serving everything
else, loses nothing, and takes messages again once there is room.

Room comes back two ways here: retention deletes expired segments (the topic's expiry is
shortened once the node is full, so filling it does not race the expiry), or a file that
filled the budget goes: a sparse ballast in the node's data directory, as the chaos
harness fills it (usage counts each file's size, so it costs no real disk). Nodes are real
processes on 127.0.0.1, stopped in teardown.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from apache_iggy import IggyClient

from broker.runtime.disk import (
    DISK_SCAN_INTERVAL_S,
    WALK_DUTY_MAX,
    next_walk_at,
    scan_disk,
    used_bytes,
)
from sdk import Client, ClientConfig, wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.wire_client import WireClient

BUDGET_BYTES = 64 * 1024 * 1024
WAIT_S = 10.0
STREAM = "budget"


def test_a_scan_counts_every_file_by_size_and_reads_the_file_system(tmp_path: Path) -> None:
    (tmp_path / "group").mkdir()
    (tmp_path / "group" / "journal").write_bytes(b"x" * 1000)
    with (tmp_path / "sparse").open("wb") as sparse:
        sparse.truncate(5000)
    reading = scan_disk(tmp_path)
    assert reading.used_bytes == 6000
    assert 0 < reading.free_bytes <= reading.total_bytes


def test_a_slow_walk_waits_longer_so_it_takes_a_bounded_share_of_the_time() -> None:
    assert next_walk_at(100.0, 0.001) == 100.0 + DISK_SCAN_INTERVAL_S
    slow = 0.05
    assert next_walk_at(100.0, slow) == 100.0 + slow / WALK_DUTY_MAX
    assert slow / (next_walk_at(100.0, slow) - 100.0) <= WALK_DUTY_MAX


def _send(client: WireClient, first_id: int, count: int, size: int = 1000) -> int:
    body = wire.build_send_messages(
        wire.Identifier(STREAM),
        wire.Identifier("t"),
        wire.PartitionId(0),
        [wire.OutgoingMessage(first_id + k, b"m" * size) for k in range(count)],
    )
    return client.call_raw(int(CommandCode.SEND_MESSAGES), body).reply_header().status


def _poll_page(client: WireClient, offset: int) -> list[tuple[int, int]]:
    """(offset, id) of the messages from ``offset`` on, one reply's worth."""
    poll = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
        wire.Identifier(STREAM),
        wire.Identifier("t"),
        0,
        wire.PollingStrategy(wire.PollingKind.OFFSET, offset),
        10_000,
        False,
    )
    reply = client.call(CommandCode.POLL_MESSAGES, poll)
    assert isinstance(reply, wire.PollMessagesReply), reply
    return [
        (message.offset, message.id)
        for record in reply.records
        for message in wire.read_batch(record)[1]
    ]


def _poll_all(client: WireClient) -> list[tuple[int, int]]:
    """(offset, id) of every message the partition serves, from the first retained."""
    found: list[tuple[int, int]] = []
    while page := _poll_page(client, found[-1][0] + 1 if found else 0):
        found.extend(page)
    return found


def _poll_ids(client: WireClient) -> list[int]:
    return [message_id for _, message_id in _poll_all(client)]


def _wait_status(client: WireClient, wanted: int, first_id: int, other: int) -> int:
    """Send one message at a time until the node answers ``wanted`` (anything but it and
    ``other`` fails); returns how many were accepted on the way (each with a new id)."""
    deadline = time.monotonic() + WAIT_S
    accepted = 0
    while True:
        status = _send(client, first_id + accepted, 1)
        if status == wanted:
            return accepted
        assert status == other, status
        accepted += status == 0
        assert time.monotonic() < deadline, f"the node never answered {wanted}"
        time.sleep(0.1)


def test_a_node_over_its_budget_refuses_messages_and_serves_the_rest(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"VIEWSTREAM_LIMITS__DISK_BUDGET_BYTES": str(BUDGET_BYTES)}
    node = start_node(data_dir, env=env)
    try:
        with WireClient(node.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            client.call(CommandCode.CREATE_STREAM, wire.CreateStream(STREAM))
            client.call(
                CommandCode.CREATE_TOPIC,
                wire.CreateTopic(wire.Identifier(STREAM), 1, "t", ()),
            )
            assert _send(client, 1, 10) == 0
            ballast = data_dir / "ballast"
            with ballast.open("wb") as file:
                file.truncate(BUDGET_BYTES)
            full = IggyErrorCode.CANNOT_APPEND_MESSAGE
            more = _wait_status(client, full, 11, 0)
            acknowledged = list(range(1, 11 + more))
            # Full: reads, metadata writes and stats go on; nothing acknowledged is lost.
            assert _poll_ids(client) == acknowledged
            created = client.call(CommandCode.CREATE_STREAM, wire.CreateStream("still-works"))
            assert isinstance(created, wire.StreamDetails)
            assert _send(client, 1000, 5) == full
            os.unlink(ballast)
            _wait_status(client, 0, 2000, full)
            ids = _poll_ids(client)
            assert ids[: len(acknowledged)] == acknowledged
            assert ids[len(acknowledged)] == 2000
            assert 1000 not in ids, "a refused message was appended"
        assert any("disk full" in line for line in node.output), node.output
    finally:
        node.stop()
        node.kill()  # reaps it and closes its output pipe


SEGMENT_BYTES = 1 << 20
BATCH_MESSAGES = 100  # of 1 kB: ten batches a segment
FILL_BATCHES_MAX = 200  # 20 MB, far past the budget


def _fill(client: WireClient) -> list[int]:
    """Send batches until the node refuses one with 4010; the ids acknowledged."""
    acknowledged: list[int] = []
    for batch in range(FILL_BATCHES_MAX):
        first = 1 + batch * BATCH_MESSAGES
        status = _send(client, first, BATCH_MESSAGES)
        if status == IggyErrorCode.CANNOT_APPEND_MESSAGE:
            return acknowledged
        assert status == 0, status
        acknowledged.extend(range(first, first + BATCH_MESSAGES))
    raise AssertionError(f"{FILL_BATCHES_MAX} batches and the node never refused")


def _start_with_budget(data_dir: Path, env: dict[str, str]) -> tuple[NodeProcess, int]:
    """A node whose budget is what it holds with an empty topic of 1 MiB segments, and
    five segments more; the node and its budget."""
    node = start_node(data_dir, env=env)
    try:

        async def create() -> None:
            client = IggyClient(node.address)
            await client.connect()
            await client.login_user("iggy", ROOT_PASSWORD)
            await client.create_stream(STREAM)
            await client.create_topic(STREAM, "t", 1, options={"segment_size": "1 MiB"})

        asyncio.run(asyncio.wait_for(create(), WAIT_S))
    finally:
        node.stop()
        node.kill()
    budget = used_bytes(data_dir) + 5 * SEGMENT_BYTES
    budget_env = {"VIEWSTREAM_LIMITS__DISK_BUDGET_BYTES": str(budget)}
    return start_node(data_dir, env=env | budget_env), budget


def test_a_full_node_takes_messages_again_once_a_purge_deletes_the_topic_s_segments(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    node, budget = _start_with_budget(data_dir, {})
    try:
        with WireClient(node.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            acknowledged = _fill(client)
            assert _poll_ids(client) == acknowledged

            async def purge() -> None:
                sdk = IggyClient(node.address)
                await sdk.connect()
                await sdk.login_user("iggy", ROOT_PASSWORD)
                await sdk.purge_topic(STREAM, "t")

            asyncio.run(asyncio.wait_for(purge(), WAIT_S))
            # Answered once the partition applied it; its files go as that op commits (a
            # sync, then the deletion), and with them the node takes messages again.
            _wait_status(client, 0, 1_000_000, IggyErrorCode.CANNOT_APPEND_MESSAGE)
            assert _poll_all(client) == [(len(acknowledged), 1_000_000)]  # offsets go on
            deadline = time.monotonic() + WAIT_S
            while used_bytes(data_dir) > budget - 4 * SEGMENT_BYTES:
                assert time.monotonic() < deadline, "the purged segments' files stayed"
                time.sleep(0.1)
    finally:
        node.stop()
        node.kill()


def test_a_full_node_takes_messages_again_once_retention_deletes_expired_segments(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    node, budget = _start_with_budget(data_dir, {"VIEWSTREAM_RETENTION_INTERVAL_S": "1"})
    try:
        with WireClient(node.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            # Fill: the topic keeps everything (no expiry yet), so the node must refuse.
            full = IggyErrorCode.CANNOT_APPEND_MESSAGE
            acknowledged = _fill(client)
            assert len(acknowledged) * 1000 > 4 * SEGMENT_BYTES
            assert used_bytes(data_dir) > budget - SEGMENT_BYTES
            # Full: polls go on, and serve every acknowledged message.
            assert _poll_ids(client) == acknowledged
            refused = 900_000
            assert _send(client, refused, 1) == full

            async def shorten_expiry() -> None:
                sdk = IggyClient(node.address)
                await sdk.connect()
                await sdk.login_user("iggy", ROOT_PASSWORD)
                await sdk.update_topic(STREAM, "t", "t", options={"message_expiry": "1s"})

            asyncio.run(asyncio.wait_for(shorten_expiry(), WAIT_S))
            # Retention retires the expired sealed segments and deletes their files: the
            # node takes messages again (bounded by WAIT_S, whatever the machine's speed).
            _wait_status(client, 0, 1_000_000, full)
            acknowledged.append(1_000_000)
            messages = _poll_all(client)
            start = messages[0][0]
            assert start > 0, "retention deleted nothing"
            # Nothing acknowledged is lost: the retained messages are exactly the
            # acknowledged ones from the retained start on, offsets dense, none refused.
            assert [offset for offset, _ in messages] == list(range(start, len(acknowledged)))
            assert [message_id for _, message_id in messages] == acknowledged[start:]
            assert used_bytes(data_dir) <= budget
        # The stats show what retention deleted, and the budget. The first deletion may
        # take only the segments a second old when it looked (enough to take messages
        # again); the four sealed ones all expire, so the next rounds take the rest.
        config = ClientConfig.one_node(node.address, username="iggy", password=ROOT_PASSWORD)
        deadline = time.monotonic() + WAIT_S
        with Client(config) as sdk:
            while (report := sdk.get_runtime_stats()["node"])["segments_deleted"] < 4:
                assert time.monotonic() < deadline, report
                time.sleep(0.1)
        assert report["bytes_deleted"] > 4 * 10**6
        assert report["disk_budget_bytes"] == budget and report["disk_full"] is False
        assert any("disk full" in line for line in node.output), node.output
    finally:
        node.stop()
        node.kill()
