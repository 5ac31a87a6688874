"""Retention and purge on a real 3-node cluster, through the official SDK: every replica's
data directory shrinks, and stays so across a ``kill -9`` and a restart.

The cluster is started by ``broker.cli.cluster.start_cluster`` with a 5 ms tick and
retention looking every second (``VIEWSTREAM_RETENTION_INTERVAL_S``, which every node
reads from the environment). The topics' durability is the default, ``replicated``: the
backups do not sync as they append, and delete only what they synced, so this also shows
that they sync for the deletion. Waits are bounded polls of what the nodes report and of
their directories, never fixed sleeps. Every process is killed in teardown.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import ClusterLayout, start_cluster
from tests.runtime.processes import ROOT_PASSWORD
from tests.runtime.test_interop_cluster import start_cluster_node
from tests.runtime.test_retention import run

TICK_MS: Final = 5
NODES: Final = 3
SEGMENT_BYTES: Final = 1 << 20
PAYLOAD: Final = b"c" * 1_000
BATCH: Final = 50  # messages of about 1 kB a batch
BIG_BATCHES: Final = 200  # about 10 MB
NEWEST_BATCHES: Final = 10
WAIT_S: Final = 90.0
TRANSIENT_WORDS: Final = ("58", "59", "not accepted", "not committed", "Transient")


@dataclass
class Cluster:
    layout: ClusterLayout
    processes: list[subprocess.Popen[bytes]]

    def address(self, index: int) -> str:
        return self.layout.client_addresses[index]

    def data_dir(self, index: int) -> Path:
        return self.layout.folder / f"node-{index}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder: Path = tmp_path_factory.mktemp("retention-cluster")
    layout = cluster_layout(folder, NODES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VIEWSTREAM_RETENTION_INTERVAL_S", "1")
        processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
        try:
            yield Cluster(layout, processes)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=20)


def topic_journals(data_dir: Path, stream_id: int) -> list[Path]:
    """The journal directories of every partition of topic 0 of stream ``stream_id``."""
    partitions = data_dir / "partitions"
    prefix = f"{stream_id}-0-"
    return sorted(d / "journal" for d in partitions.iterdir() if d.name.startswith(prefix))


def segment_logs(data_dir: Path, stream_id: int) -> list[Path]:
    return [log for journal in topic_journals(data_dir, stream_id) for log in journal.glob("*.log")]


def journal_bytes(data_dir: Path, stream_id: int) -> int:
    return sum(
        f.stat().st_size
        for journal in topic_journals(data_dir, stream_id)
        for f in journal.iterdir()
    )


async def connect(cluster: Cluster, index: int) -> Any:
    """An official SDK client logged in to node ``index``, retrying while it is not ready
    (a node just restarted answers 58 until it rejoined)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        client = IggyClient(cluster.address(index))
        try:
            await client.connect()
            await client.login_user("iggy", ROOT_PASSWORD)
            return client
        except RuntimeError as error:
            if time.monotonic() > deadline or not _transient(error):
                raise
            await _pause()


def _transient(error: Exception) -> bool:
    return any(word in str(error) for word in TRANSIENT_WORDS)


async def _pause() -> None:
    await asyncio.sleep(0.2)


async def retrying(what: str, call: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``call(*args)``, again while the cluster answers transient errors (a view change)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return await call(*args)
        except RuntimeError as error:
            if time.monotonic() > deadline or not _transient(error):
                raise AssertionError(f"{what}: {error}") from error
            await _pause()


async def send_batches(client: Any, stream: str, tag: str, start: int, count: int) -> list[bytes]:
    """``count`` batches of ``BATCH`` messages to partition 0; their payloads, in order.
    A batch is sent once: a transient error fails the test, as the cluster is healthy."""
    sent: list[bytes] = []
    for batch in range(start, start + count):
        payloads = [PAYLOAD + f"{tag}-{batch}-{k}".encode() for k in range(BATCH)]
        await client.send_messages(stream, "t", 0, [SendMessage(p) for p in payloads])
        sent.extend(payloads)
    return sent


async def send_small(client: Any, stream: str, tag: str, start: int, count: int) -> list[bytes]:
    """``count`` batches of ``BATCH`` small messages (tens of bytes), which all stay in the
    open segment, which retention never deletes."""
    sent: list[bytes] = []
    for batch in range(start, start + count):
        payloads = [f"{tag}-{batch}-{k}".encode() for k in range(BATCH)]
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


async def retained(client: Any, stream: str) -> tuple[int, list[bytes]]:
    """The first offset a poll from 0 returns, and every payload from there on."""
    first = await retrying("poll", poll, client, stream, 0, 1)
    assert first, "the partition serves nothing"
    start = int(first[0].offset())
    found: list[bytes] = []
    offset = start
    while batch := await retrying("poll", poll, client, stream, offset, 1_000):
        found.extend(bytes(m.payload()) for m in batch)
        offset = int(batch[-1].offset()) + 1
    return start, found


def check_retained(start: int, found: list[bytes], sent: list[bytes], newest: int) -> None:
    """A poll from 0 starts past 0; what is served is exactly the last messages sent
    (nothing lost above the retained start), the newest ``newest`` among them."""
    assert start > 0, "offset 0 should have been retired"
    assert len(found) >= newest and found == sent[-len(found) :]
    assert start == len(sent) - len(found)  # offsets are dense from 0


def every_replica_shrunk(cluster: Cluster, stream_id: int, indexes: range) -> bool:
    return all(journal_bytes(cluster.data_dir(i), stream_id) < 3 * SEGMENT_BYTES for i in indexes)


def test_cluster_expired_segments_leave_every_replica_and_stay_gone_after_kill_9(
    cluster: Cluster,
) -> None:
    stream = "expiring"
    stream_id = 0  # the first stream of the cluster's metadata
    peak: dict[int, int] = {}

    async def fill() -> list[bytes]:
        client = await connect(cluster, 0)
        await client.create_stream(stream)
        assert (await client.get_stream(stream)).id == stream_id
        options = {"message_expiry": "3s", "segment_size": "1 MiB"}
        await client.create_topic(stream, "t", 1, options=options)
        sent = await send_batches(client, stream, "big", 0, BIG_BATCHES)
        for index in range(NODES):
            peak[index] = journal_bytes(cluster.data_dir(index), stream_id)
        batches = 0
        deadline = time.monotonic() + WAIT_S

        # A short wait with a few more (small) batches: the expired segments leave the
        # topic and every replica's directory.
        while True:
            sent.extend(await send_small(client, stream, "tail", batches, 2))
            batches += 2
            size = (await client.get_topic(stream, "t")).size
            if size < 2 * SEGMENT_BYTES and every_replica_shrunk(cluster, stream_id, range(NODES)):
                break
            assert time.monotonic() < deadline, (
                f"not within {WAIT_S} s: topic {size} bytes, journals "
                f"{[journal_bytes(cluster.data_dir(i), stream_id) for i in range(NODES)]}"
            )
            await _pause()
        sent.extend(await send_small(client, stream, "newest", 0, NEWEST_BATCHES))
        # Retention would go on retiring what expires; a long expiry freezes the topic, so
        # that the nodes can be compared exactly, before and after the kill.
        await client.update_topic(stream, "t", "t", options={"message_expiry": "1h"})
        return sent

    sent = run(fill(), timeout_s=3 * WAIT_S)
    newest = NEWEST_BATCHES * BATCH

    async def check(index: int) -> tuple[int, int]:
        client = await connect(cluster, index)
        start, found = await retained(client, stream)
        check_retained(start, found, sent, newest)
        topic = await retrying("get_topic", client.get_topic, stream, "t")
        return start, int(topic.size)

    def settled() -> tuple[int, int]:
        """What every node serves, once they agree (a retention proposed before the
        expiry changed may still commit)."""
        deadline = time.monotonic() + WAIT_S
        while len(set(seen := [run(check(i)) for i in range(NODES)])) != 1:
            assert time.monotonic() < deadline, f"the nodes serve different data: {seen}"
            time.sleep(0.5)
        return seen[0]

    start, size = settled()
    # The ~10 MB written reached every replica's disk, and most of it left again.
    assert start * len(PAYLOAD) > 6 * SEGMENT_BYTES
    after = {i: journal_bytes(cluster.data_dir(i), stream_id) for i in range(NODES)}
    print(f"cluster retention: journals after the fill {peak}, now {after} bytes;")
    print(f"  topic size {size} bytes, polls start at offset {start}")

    victim = 2
    cluster.processes[victim].kill()  # kill -9
    cluster.processes[victim].wait(timeout=20)
    cluster.processes[victim] = start_cluster_node(cluster.layout, victim)
    assert [run(check(i)) for i in range(NODES)] == [(start, size)] * NODES
    assert every_replica_shrunk(cluster, stream_id, range(NODES))


def test_cluster_purge_empties_the_topic_and_deletes_its_files_on_every_node(
    cluster: Cluster,
) -> None:
    stream = "purged"

    async def fill() -> int:
        client = await connect(cluster, 1)
        await client.create_stream(stream)
        stream_id = int((await client.get_stream(stream)).id)
        await client.create_topic(stream, "t", 1, options={"segment_size": "1 MiB"})
        await send_batches(client, stream, "p", 0, 60)  # ~3 MB
        deadline = time.monotonic() + WAIT_S
        # get_topic is answered from the node's own state, which may trail the commit.
        while (topic := await client.get_topic(stream, "t")).messages_count != 60 * BATCH:
            assert time.monotonic() < deadline, topic.messages_count
            await _pause()
        assert topic.size > 2 * SEGMENT_BYTES
        return stream_id

    stream_id = run(fill())
    deadline = time.monotonic() + WAIT_S
    while not all(len(segment_logs(cluster.data_dir(i), stream_id)) >= 3 for i in range(NODES)):
        assert time.monotonic() < deadline, "the messages did not reach every replica's disk"
        time.sleep(0.1)
    before = {i: set(segment_logs(cluster.data_dir(i), stream_id)) for i in range(NODES)}

    async def purge() -> tuple[int, int, list[Any]]:
        client = await connect(cluster, 0)
        await client.purge_topic(stream, "t")
        # Answered once this node's replica of the partition applied the purge, as Iggy
        # answers once it emptied the topic.
        topic = await client.get_topic(stream, "t")
        return topic.messages_count, topic.size, await poll(client, stream, 0, 10)

    assert run(purge()) == (0, 0, [])

    async def empty_everywhere() -> None:
        # The other nodes' replicas apply the purge as the commit reaches them.
        deadline = time.monotonic() + WAIT_S
        for index in range(NODES):
            client = await connect(cluster, index)
            while True:
                topic = await retrying("get_topic", client.get_topic, stream, "t")
                if (topic.messages_count, topic.size) == (0, 0):
                    break
                assert time.monotonic() < deadline, (topic.messages_count, topic.size)
                await _pause()
            assert await retrying("poll", poll, client, stream, 0, 10) == []

    run(empty_everywhere())
    deadline = time.monotonic() + WAIT_S
    while True:
        left = {i: before[i] & set(segment_logs(cluster.data_dir(i), stream_id)) for i in before}
        if not any(left.values()):
            break
        assert time.monotonic() < deadline, f"segment files still there after the purge: {left}"
        time.sleep(0.1)
    for index in range(NODES):
        assert journal_bytes(cluster.data_dir(index), stream_id) < 64 * 1024
