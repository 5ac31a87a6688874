"""A topic's own segment size is honoured by a real node: its partitions roll segments at
that size, while a topic without one rolls at the node's ``segment_size_bytes``."""

from __future__ import annotations

import time
from pathlib import Path

from sdk import Client, ConsumerRef, PollingStrategy, wire
from sdk.connection_string import ClientConfig
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, start_node
from tests.wire_client import WireClient

SEGMENT = 1 << 20  # the smallest a topic may ask for
PAYLOAD = b"s" * 16_000
BATCHES = 40  # 40 x 10 x 16 kB: about 6 MiB per partition
WAIT_S = 60.0


def _segments(data_dir: Path, topic_id: int) -> int:
    """Segment logs of partition 0 of topic ``topic_id`` of stream 0 (the only stream)."""
    found = [
        folder
        for folder in (data_dir / "partitions").iterdir()
        if folder.name.startswith(f"0-{topic_id}-0-")
    ]
    assert len(found) == 1, found
    return len(list(found[0].rglob("*.log")))


def _fill(client: WireClient, topic: str) -> None:
    for batch in range(BATCHES):
        body = wire.build_send_messages(
            wire.Identifier("seg"),
            wire.Identifier(topic),
            wire.PartitionId(0),
            [wire.OutgoingMessage(batch * 10 + k + 1, PAYLOAD) for k in range(10)],
        )
        assert client.call_raw(int(CommandCode.SEND_MESSAGES), body).reply_header().status == 0


def test_a_topics_segment_size_is_the_one_its_partitions_roll_at(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(data_dir, env={"VIEWSTREAM_SEGMENT_SIZE_BYTES": str(64 << 20)})
    try:
        with WireClient(node.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            client.call(CommandCode.CREATE_STREAM, wire.CreateStream("seg"))
            small = wire.OptionEntry.of("segment_size", SEGMENT, wire.HeaderKind.UINT64)
            stream = wire.Identifier("seg")
            mine = client.call(
                CommandCode.CREATE_TOPIC, wire.CreateTopic(stream, 1, "own", (small,))
            )
            node_default = client.call(
                CommandCode.CREATE_TOPIC, wire.CreateTopic(stream, 1, "default", ())
            )
            assert isinstance(mine, wire.TopicDetails)
            assert isinstance(node_default, wire.TopicDetails)
            _fill(client, "own")
            _fill(client, "default")
        # About 6 MiB each: at 1 MiB a segment that is at least 5 files; at the node's
        # 64 MiB, one.
        assert _segments(data_dir, mine.topic.id) >= 5
        assert _segments(data_dir, node_default.topic.id) == 1
    finally:
        node.kill()


SEALED_OVERSHOOT_BYTES_MAX = 128 + 136 + 256 + 10 * (64 + len(PAYLOAD))
"""How far past its roll size a sealed segment may grow: the one record that crossed it
(journal and prepare headers, batch header, ten messages)."""


def _journal_dir(data_dir: Path, topic_id: int) -> Path:
    (found,) = [
        folder
        for folder in (data_dir / "partitions").iterdir()
        if folder.name.startswith(f"0-{topic_id}-0-") and folder.is_dir()
    ]
    return found / "journal"


def _polls(client: Client, topic: str, offsets: list[int]) -> list[list[tuple[int, bytes]]]:
    """``(offset, payload)`` of what polls return: by offset (each of ``offsets``), by
    timestamp (0 and the first message's), first, last and next."""
    consumer = ConsumerRef.single("checker")

    def poll(strategy: PollingStrategy, count: int = 25) -> list[tuple[int, bytes]]:
        polled = client.poll_messages(
            "seg",
            topic,
            consumer=consumer,
            polling_strategy=strategy,
            count=count,
            partition_id=0,
        )
        return [(m.offset, bytes(m.payload)) for m in polled.messages]

    found = [poll(PollingStrategy.offset(offset)) for offset in offsets]
    first = client.poll_messages(
        "seg",
        topic,
        consumer=consumer,
        polling_strategy=PollingStrategy.first(),
        count=1,
        partition_id=0,
    ).messages
    stamps = [0, first[0].timestamp] if first else [0]
    found += [poll(PollingStrategy.timestamp(stamp)) for stamp in stamps]
    found += [
        poll(PollingStrategy.first()),
        poll(PollingStrategy.last()),
        poll(PollingStrategy.next()),
    ]
    return found


def test_a_partition_polls_its_journal_index_after_restart_retention_and_purge(
    tmp_path: Path,
) -> None:
    """The segment files are named by message offsets and roll at the topic's size; the
    same polls answer alike after ``kill -9``, after the oldest segments are retired
    (DELETE_SEGMENTS) and after a purge, each time from the journal's recovered index."""
    data_dir = tmp_path / "data"
    node = start_node(data_dir, env={"VIEWSTREAM_SEGMENT_SIZE_BYTES": str(64 << 20)})
    try:
        with WireClient(node.address) as wire_client:
            wire_client.login("iggy", ROOT_PASSWORD)
            wire_client.call(CommandCode.CREATE_STREAM, wire.CreateStream("seg"))
            small = wire.OptionEntry.of("segment_size", SEGMENT, wire.HeaderKind.UINT64)
            created = wire_client.call(
                CommandCode.CREATE_TOPIC,
                wire.CreateTopic(wire.Identifier("seg"), 1, "own", (small,)),
            )
            assert isinstance(created, wire.TopicDetails)
            _fill(wire_client, "own")
        journal = _journal_dir(data_dir, created.topic.id)
        logs = sorted(journal.glob("*.log"))
        assert len(logs) >= 5
        # Named by the offset of their first message: 10 messages a batch, and a segment
        # holds whole batches.
        bases = [int(log.stem) for log in logs]
        assert bases[0] == 0 and all(base % 10 == 0 for base in bases)
        for log in logs[:-1]:  # sealed at the topic's size, past it by one record at most
            assert SEGMENT <= log.stat().st_size < SEGMENT + SEALED_OVERSHOOT_BYTES_MAX
        probes = [0, 1, *bases[1:], bases[-1] + 5, BATCHES * 10 - 1, BATCHES * 10]

        def check(expected: list[list[tuple[int, bytes]]] | None) -> list[list[tuple[int, bytes]]]:
            client = Client(ClientConfig.one_node(node.address, timeout_s=30.0))
            try:
                client.login_user("iggy", ROOT_PASSWORD)
                found = _polls(client, "own", probes)
            finally:
                client.close()
            if expected is not None:
                assert found == expected
            return found

        before = check(None)
        # Each segment's first offset polls its own first message.
        for base, polled in zip(bases[1:], before[2:], strict=False):
            assert polled[0] == (base, PAYLOAD)
        node.kill()  # kill -9
        node = start_node(data_dir)
        check(before)

        # Retention: the two oldest segments are retired; polls start at the third.
        client = Client(ClientConfig.one_node(node.address, timeout_s=30.0))
        try:
            client.login_user("iggy", ROOT_PASSWORD)
            client.delete_segments("seg", "own", 0, 2)
        finally:
            client.close()
        retained = check(None)
        assert retained[0][0][0] == bases[2]  # a poll from offset 0 starts there
        node.kill()
        node = start_node(data_dir)
        check(retained)

        # Purge: nothing is polled, now and after a restart.
        client = Client(ClientConfig.one_node(node.address, timeout_s=30.0))
        try:
            client.login_user("iggy", ROOT_PASSWORD)
            client.purge_topic("seg", "own")
            # The metadata group orders the purge; the partition's own log carries it out.
            deadline = time.monotonic() + WAIT_S
            while True:
                details = client.get_topic("seg", "own")
                assert details is not None
                if (details.topic.messages_count, details.topic.size_bytes) == (0, 0):
                    break
                assert time.monotonic() < deadline, "the purge did not reach the partition"
                time.sleep(0.1)
        finally:
            client.close()
        purged = check(None)
        assert all(polled == [] for polled in purged)
        node.kill()
        node = start_node(data_dir)
        check(purged)
    finally:
        node.kill()
