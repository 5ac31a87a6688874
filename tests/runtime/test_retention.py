"""Retention on a real node: expired segments go from the topic and from the disk, and
stay gone across a ``kill -9``; DELETE_SEGMENTS deletes the oldest sealed segments.

The node looks every second (``VIEWSTREAM_RETENTION_INTERVAL_S``); topics ask for 1 MiB
segments. The files go as the retention commits (its replicas checkpoint at once, and
deletion trails the checkpoint). Waits are bounded polls of what the node reports and of
the partition's directory, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

from sdk import Client
from sdk.connection_string import ClientConfig
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node

_T = TypeVar("_T")
SEGMENT_BYTES: Final = 1 << 20
BIG_PAYLOAD: Final = b"r" * 1_000
BIG_BATCHES: Final = 700  # 700 x 8 x 1 kB: about 5.6 MB, five or six sealed segments
TAIL_BATCH: Final = 10
NEWEST_BATCHES: Final = 10
WAIT_S: Final = 60.0
ENV: Final = {"VIEWSTREAM_RETENTION_INTERVAL_S": "1"}


def run(awaitable: Awaitable[_T], timeout_s: float = 3 * WAIT_S) -> _T:
    async def bounded() -> _T:
        return await asyncio.wait_for(awaitable, timeout_s)

    return asyncio.run(bounded())


async def connect(node: NodeProcess) -> Any:
    client = IggyClient(node.address)
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    return client


def partition_dir(data_dir: Path) -> Path:
    """The directory of partition 0 of topic 0 of stream 0 (the only one)."""
    (found,) = [d for d in (data_dir / "partitions").iterdir() if d.name.startswith("0-0-0-")]
    return found


def journal_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in (partition_dir(data_dir) / "journal").iterdir())


def segment_logs(data_dir: Path) -> int:
    return len(list((partition_dir(data_dir) / "journal").glob("*.log")))


async def send_big(client: Any, stream: str) -> list[bytes]:
    """``BIG_BATCHES`` batches of 8 messages of about 1 kB; their payloads, in order."""
    sent: list[bytes] = []
    for batch in range(BIG_BATCHES):
        payloads = [BIG_PAYLOAD + f"{batch}-{k}".encode() for k in range(8)]
        await client.send_messages(stream, "t", 0, [SendMessage(p) for p in payloads])
        sent.extend(payloads)
    return sent


async def send_tail(client: Any, stream: str, start: int, batches: int) -> list[bytes]:
    """``batches`` batches of ``TAIL_BATCH`` small messages; their payloads, in order."""
    sent: list[bytes] = []
    for batch in range(start, start + batches):
        payloads = [f"tail-{batch}-{k}".encode() for k in range(TAIL_BATCH)]
        await client.send_messages(stream, "t", 0, [SendMessage(p) for p in payloads])
        sent.extend(payloads)
    return sent


async def poll(client: Any, stream: str, offset: int, count: int) -> list[Any]:
    polled: list[Any] = await client.poll_messages(
        stream,
        "t",
        consumer=Consumer.Single("checker"),
        polling_strategy=PollingStrategy.Offset(offset),
        count=count,
        auto_commit=False,
        partition_id=0,
    )
    return polled


async def topic_size(client: Any, stream: str) -> int:
    topic = await client.get_topic(stream, "t")
    size: int = topic.size
    return size


async def wait_until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await check():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.2)


async def newest_present(client: Any, stream: str, sent: list[bytes], newest: int) -> int:
    """Check that a poll from offset 0 starts past 0, that what is retained is exactly the
    last messages sent (nothing lost above the retained start), the ``newest`` among
    them; the first offset polled."""
    first = await poll(client, stream, 0, 1)
    assert first and first[0].offset() > 0, "offset 0 should have been retired"
    start = first[0].offset()
    found: list[bytes] = []
    offset = start
    while True:
        batch = await poll(client, stream, offset, 1_000)
        if not batch:
            break
        found.extend(bytes(m.payload()) for m in batch)
        offset = batch[-1].offset() + 1
    assert len(found) >= newest and found == sent[-len(found) :]
    assert start == len(sent) - len(found)  # offsets are dense from 0
    return int(start)


def test_expired_segments_leave_the_topic_and_the_disk_and_stay_gone_after_kill_9(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    stream = "expiring"
    node = start_node(data_dir, env=ENV)
    try:

        async def fill() -> list[bytes]:
            client = await connect(node)
            await client.create_stream(stream)
            options = {"message_expiry": "3s", "segment_size": "1 MiB"}
            await client.create_topic(stream, "t", 1, options=options)
            # The node may retire segments while these are written (they expire 3 s after).
            sent = await send_big(client, stream)
            batches = 0

            async def shrunk() -> bool:
                # A few more batches while waiting: new messages keep coming meanwhile.
                nonlocal batches
                sent.extend(await send_tail(client, stream, batches, 20))
                batches += 20
                return (
                    await topic_size(client, stream) < 2 * SEGMENT_BYTES
                    and journal_bytes(data_dir) < 3 * SEGMENT_BYTES
                )

            await wait_until(shrunk, "the topic and its journal shrink to the newest segments")
            sent.extend(await send_tail(client, stream, batches, NEWEST_BATCHES))
            return sent

        sent = run(fill())

        async def check() -> tuple[int, int]:
            client = await connect(node)
            start = await newest_present(client, stream, sent, NEWEST_BATCHES * TAIL_BATCH)
            return start, await topic_size(client, stream)

        start, size_after = run(check())
        # More than 5 MB was written; what polls no longer reach (every message below the
        # retained start, about 1 kB each) is over three segments, gone from the disk too.
        assert start * len(BIG_PAYLOAD) > 3 * SEGMENT_BYTES
        disk_after = journal_bytes(data_dir)
        written = BIG_BATCHES * 8 * len(BIG_PAYLOAD)
        print(f"retention: {written} payload bytes written, journal {disk_after} bytes on")
        print(f"  disk, topic size {size_after} bytes, polls start at offset {start}")
        node.kill()  # kill -9

        node = start_node(data_dir, env=ENV)
        start_again, size_again = run(check())
        assert (start_again, size_again) == (start, size_after)
        assert journal_bytes(data_dir) < 3 * SEGMENT_BYTES
    finally:
        node.kill()


def test_delete_segments_deletes_the_oldest_sealed_segments(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    stream = "trimmed"
    node = start_node(data_dir, env=ENV)
    try:

        async def fill() -> int:
            client = await connect(node)
            await client.create_stream(stream)
            await client.create_topic(stream, "t", 1, options={"segment_size": "1 MiB"})
            # 700 ops: below the first interval checkpoint (op 1,024), so the files go only
            # because the deletion's own commit checkpoints.
            await send_big(client, stream)
            return await topic_size(client, stream)

        size_before = run(fill())
        logs_before = segment_logs(data_dir)
        assert logs_before >= 5
        sdk = Client(ClientConfig.one_node(node.address, timeout_s=10.0))
        try:
            sdk.login_user("iggy", ROOT_PASSWORD)
            sdk.delete_segments(stream, "t", 0, 2)
        finally:
            sdk.close()

        async def check() -> tuple[int, int]:
            client = await connect(node)
            first = await poll(client, stream, 0, 1)
            return int(first[0].offset()), await topic_size(client, stream)

        start, size_after = run(check())
        deadline = time.monotonic() + WAIT_S
        while segment_logs(data_dir) != logs_before - 2:
            assert time.monotonic() < deadline, "the two oldest segment files are still there"
            time.sleep(0.1)
        assert start > 0
        assert size_before - size_after > SEGMENT_BYTES  # two segments of about 1 MiB
        # The node counted the two files it deleted (stats and metrics show it).
        sdk = Client(ClientConfig.one_node(node.address, timeout_s=10.0))
        try:
            sdk.login_user("iggy", ROOT_PASSWORD)
            groups = sdk.get_runtime_stats()["groups"]
        finally:
            sdk.close()
        retained = {name: g["segments_deleted"] for name, g in groups.items()}
        assert sum(retained.values()) == 2 and retained["metadata"] == 0, retained
        print(f"delete_segments(2): {logs_before} -> {logs_before - 2} segment files, topic")
        print(f"  {size_before} -> {size_after} bytes, polls start at offset {start}")
    finally:
        node.kill()
