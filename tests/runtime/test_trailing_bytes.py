"""Trailing bytes after a request's fields, against a real node: ignored where Iggy's
server ignores them (Iggy's Node SDK appends ``partitions_count`` to DELETE_TOPIC), and
refused with Iggy's code where the last field runs to the end of the body.
"""

from __future__ import annotations

import struct

from sdk import wire
from sdk.wire import Command, CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.wire_client import WireClient


def _client(node: NodeProcess) -> WireClient:
    client = WireClient(node.address)
    client.login("iggy", ROOT_PASSWORD)
    return client


def _stream_exists(node: NodeProcess, stream: str) -> bool:
    with _client(node) as client:
        found = client.call(CommandCode.GET_STREAM, wire.StreamRef(wire.Identifier(stream)))
        return found is not None


def test_delete_topic_with_the_node_sdks_partitions_count_deletes_the_topic(
    node: NodeProcess,
) -> None:
    stream = "trailing-delete-topic"
    with _client(node) as client:
        client.call(CommandCode.CREATE_STREAM, wire.CreateStream(stream))
        client.call(CommandCode.CREATE_TOPIC, wire.CreateTopic(wire.Identifier(stream), 3, "t"))
        topic = wire.TopicRef(wire.Identifier(stream), wire.Identifier("t"))
        assert client.call(CommandCode.GET_TOPIC, topic) is not None
        body = topic.encode() + struct.pack("<I", 3)  # the Node SDK's partitionsCount u32
        deleted = client.call_raw(int(CommandCode.DELETE_TOPIC), body)
        assert deleted.command is Command.REPLY
        assert deleted.reply_header().status == 0
        assert isinstance(wire.read_reply(CommandCode.DELETE_TOPIC, deleted), wire.Empty)
        # The same connection goes on, and the topic is gone.
        assert client.call(CommandCode.GET_TOPIC, topic) is None


def test_create_stream_with_garbage_after_its_name_is_refused_with_invalid_command(
    node: NodeProcess,
) -> None:
    # The bytes after the name are the options block: kind 0 is not a TLV entry.
    stream = "trailing-create-stream"
    with _client(node) as client:
        body = wire.CreateStream(stream).encode() + b"\x00\x01\x02\x03"
        refused = client.call_raw(int(CommandCode.CREATE_STREAM), body)
        assert refused.command is Command.REPLY
        assert refused.reply_header().status == IggyErrorCode.INVALID_COMMAND
        # A business answer, as Iggy gives it: the connection goes on.
        assert isinstance(client.call(CommandCode.GET_STREAMS, wire.Empty()), wire.Streams)
    assert not _stream_exists(node, stream)


def test_send_with_bytes_after_its_batch_is_refused_with_invalid_format(
    node: NodeProcess,
) -> None:
    stream = "trailing-send"
    with _client(node) as client:
        client.call(CommandCode.CREATE_STREAM, wire.CreateStream(stream))
        client.call(CommandCode.CREATE_TOPIC, wire.CreateTopic(wire.Identifier(stream), 1, "t"))
    body = wire.build_send_messages(
        wire.Identifier(stream),
        wire.Identifier("t"),
        wire.PartitionId(0),
        [wire.OutgoingMessage(1, b"payload")],
    )
    with _client(node) as client:
        refused = client.call_raw(int(CommandCode.SEND_MESSAGES), bytes(body) + bytes(4))
        assert refused.command is Command.REPLY
        assert refused.reply_header().status == IggyErrorCode.INVALID_FORMAT
    with _client(node) as client:
        poll = wire.PollMessages(
            wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
            wire.Identifier(stream),
            wire.Identifier("t"),
            0,
            wire.PollingStrategy.first(),
            10,
            False,
        )
        polled = client.call(CommandCode.POLL_MESSAGES, poll)
        assert isinstance(polled, wire.PollMessagesReply)
        assert polled.messages() == []
