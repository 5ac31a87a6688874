"""A node over its disk budget refuses new messages with 4010, keeps serving everything
else, loses nothing, and takes messages again once there is room.

The budget is filled the way the chaos harness fills it: a sparse ballast file in the
node's data directory (usage counts each file's size, so it costs no real disk). The node
is a real process on 127.0.0.1, stopped in teardown.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from broker.runtime.disk import (
    DISK_SCAN_INTERVAL_S,
    WALK_DUTY_MAX,
    DiskGuard,
    DiskScan,
    next_walk_at,
    scan_disk,
)
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, start_node
from tests.wire_client import WireClient

BUDGET_BYTES = 64 * 1024 * 1024
WAIT_S = 10.0
STREAM = "budget"


def test_usage_counts_every_file_by_size_and_appends_between_scans(tmp_path: Path) -> None:
    (tmp_path / "group").mkdir()
    (tmp_path / "group" / "journal").write_bytes(b"x" * 1000)
    with (tmp_path / "sparse").open("wb") as sparse:
        sparse.truncate(5000)
    scan = scan_disk(tmp_path)
    assert scan.used_bytes == 6000
    guard = DiskGuard(tmp_path, budget_bytes=10_000, free_min_bytes=100)
    guard.update(DiskScan(used_bytes=6000, free_bytes=1_000_000))
    assert not guard.full
    guard.note_appended(4000)
    assert not guard.full  # exactly at the budget
    guard.note_appended(1)
    assert guard.full_reason is not None and "over its budget" in guard.full_reason
    guard.update(DiskScan(used_bytes=6000, free_bytes=1_000_000))
    assert not guard.full  # a new scan replaces the estimate
    guard.update(DiskScan(used_bytes=0, free_bytes=99))
    assert guard.full_reason is not None and "kept free" in guard.full_reason


def test_free_space_readings_between_walks_keep_the_appends_since_the_walk(
    tmp_path: Path,
) -> None:
    guard = DiskGuard(tmp_path, budget_bytes=10_000, free_min_bytes=100)
    guard.update(DiskScan(used_bytes=6000, free_bytes=1_000_000))
    guard.note_appended(3000)
    guard.update_free(999_000)  # the file system saw the appends; the usage has not
    assert (guard.used_bytes, guard.free_bytes) == (9000, 999_000)
    guard.note_appended(1001)
    assert guard.full_reason is not None and "over its budget" in guard.full_reason
    assert guard.free_bytes == 999_000 - 1001
    guard.update(DiskScan(used_bytes=10_001, free_bytes=998_000))
    assert (guard.used_bytes, guard.free_bytes) == (10_001, 998_000)


def test_a_slow_walk_waits_longer_so_it_takes_a_bounded_share_of_the_time() -> None:
    assert next_walk_at(100.0, 0.001) == 100.0 + DISK_SCAN_INTERVAL_S
    slow = 0.05
    assert next_walk_at(100.0, slow) == 100.0 + slow / WALK_DUTY_MAX
    assert slow / (next_walk_at(100.0, slow) - 100.0) <= WALK_DUTY_MAX


def _send(client: WireClient, first_id: int, count: int) -> int:
    body = wire.build_send_messages(
        wire.Identifier(STREAM),
        wire.Identifier("t"),
        wire.PartitionId(0),
        [wire.OutgoingMessage(first_id + k, b"m" * 1000) for k in range(count)],
    )
    return client.call_raw(int(CommandCode.SEND_MESSAGES), body).reply_header().status


def _poll_ids(client: WireClient) -> list[int]:
    poll = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
        wire.Identifier(STREAM),
        wire.Identifier("t"),
        0,
        wire.PollingStrategy(wire.PollingKind.OFFSET, 0),
        10_000,
        False,
    )
    reply = client.call(CommandCode.POLL_MESSAGES, poll)
    assert isinstance(reply, wire.PollMessagesReply), reply
    return [message.id for record in reply.records for message in wire.read_batch(record)[1]]


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
