"""A deleted topic's partition data leaves the disk behind a durable tombstone, and a
restarted node keeps it removed while its other topics serve as before."""

from __future__ import annotations

import time
from pathlib import Path

from broker.runtime.store import TOMBSTONE_SUFFIX
from sdk import wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, start_node
from tests.wire_client import WireClient

WAIT_S = 10.0


def _dirs(data_dir: Path, topic_id: int) -> list[str]:
    """Names under ``partitions/`` of partition 0 of topic ``topic_id`` of stream 0."""
    return sorted(
        entry.name
        for entry in (data_dir / "partitions").iterdir()
        if entry.name.startswith(f"0-{topic_id}-0-")
    )


def _send(client: WireClient, topic: str, first_id: int) -> int:
    body = wire.build_send_messages(
        wire.Identifier("rm"),
        wire.Identifier(topic),
        wire.PartitionId(0),
        [wire.OutgoingMessage(first_id + k, b"m" * 100) for k in range(5)],
    )
    return client.call_raw(int(CommandCode.SEND_MESSAGES), body).reply_header().status


def _poll_count(client: WireClient, topic: str) -> int:
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(1))
    reply = client.call(
        CommandCode.POLL_MESSAGES,
        wire.PollMessages(
            consumer,
            wire.Identifier("rm"),
            wire.Identifier(topic),
            0,
            wire.PollingStrategy.offset(0),
            100,
            False,
        ),
    )
    assert isinstance(reply, wire.PollMessagesReply)
    return len(reply.messages())


def test_a_deleted_topics_data_goes_and_stays_gone_across_a_crash(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(data_dir)
    try:
        with WireClient(node.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            client.call(CommandCode.CREATE_STREAM, wire.CreateStream("rm"))
            stream = wire.Identifier("rm")
            for name in ("gone", "kept"):
                created = client.call(
                    CommandCode.CREATE_TOPIC, wire.CreateTopic(stream, 1, name, ())
                )
                assert isinstance(created, wire.TopicDetails)
            assert _send(client, "gone", 1) == 0
            assert _send(client, "kept", 100) == 0
            (gone_dir,) = _dirs(data_dir, 0)
            client.call(CommandCode.DELETE_TOPIC, wire.TopicRef(stream, wire.Identifier("gone")))
            deadline = time.monotonic() + WAIT_S
            while _dirs(data_dir, 0) != [gone_dir + TOMBSTONE_SUFFIX]:
                assert time.monotonic() < deadline, _dirs(data_dir, 0)
                time.sleep(0.05)
        node.kill()
        node = start_node(data_dir)
        with WireClient(node.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            assert _poll_count(client, "kept") == 5
            assert _send(client, "kept", 200) == 0
            assert _poll_count(client, "kept") == 10
            gone = client.call_raw(
                int(CommandCode.POLL_MESSAGES),
                wire.PollMessages(
                    wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(1)),
                    stream,
                    wire.Identifier("gone"),
                    0,
                    wire.PollingStrategy.offset(0),
                    100,
                    False,
                ).encode(),
            )
            assert gone.reply_header().status != 0
        assert _dirs(data_dir, 0) == [gone_dir + TOMBSTONE_SUFFIX]
    finally:
        node.kill()
