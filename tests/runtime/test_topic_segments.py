"""A topic's own segment size is honoured by a real node: its partitions roll segments at
that size, while a topic without one rolls at the node's ``segment_size_bytes``."""

from __future__ import annotations

from pathlib import Path

from sdk import wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, start_node
from tests.wire_client import WireClient

SEGMENT = 1 << 20  # the smallest a topic may ask for
PAYLOAD = b"s" * 16_000
BATCHES = 40  # 40 x 10 x 16 kB: about 6 MiB per partition


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
