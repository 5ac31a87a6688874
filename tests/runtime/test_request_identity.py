"""A request is never answered with another request's reply, against a real node.

Some Iggy clients (those built from Iggy's current sources) give every partition-plane
request the client's current request number without advancing it. A duplicate is the same
request (number, operation and body digest), so such a client loses nothing: every request
under the reused number is applied (at-least-once, as Iggy's partition plane), while a true
retry (the same bytes) is still answered from the client table and applied once.
"""

from __future__ import annotations

import time
from pathlib import Path

from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.wire_client import WireClient

LOG_WAIT_S = 5.0
CONSUMER = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(7))


def _setup(node: NodeProcess, stream: str) -> WireClient:
    client = WireClient(node.address)
    client.login("iggy", ROOT_PASSWORD)
    created = client.call(CommandCode.CREATE_STREAM, wire.CreateStream(stream))
    assert isinstance(created, wire.StreamDetails)
    topic = client.call(
        CommandCode.CREATE_TOPIC, wire.CreateTopic(wire.Identifier(stream), 2, "t", ())
    )
    assert isinstance(topic, wire.TopicDetails)
    return client


def _send_body(stream: str, partition: int, payloads: list[bytes]) -> bytes:
    return bytes(
        wire.build_send_messages(
            wire.Identifier(stream),
            wire.Identifier("t"),
            wire.PartitionId(partition),
            [wire.OutgoingMessage(0, payload) for payload in payloads],
        )
    )


def call_as(client: WireClient, request: int, code: CommandCode, body: bytes) -> wire.Frame:
    """One request under ``request``, whatever the client's counter says."""
    client.request = request
    frame = client.call_raw(int(code), body)
    client.request = request
    return frame


def _base_offset(frame: wire.Frame) -> int:
    reply = wire.read_reply(CommandCode.SEND_MESSAGES, frame)
    assert isinstance(reply, wire.SendMessagesReply)
    (confirmation,) = reply.confirmations
    return confirmation.base_offset


def _poll_all(client: WireClient, stream: str, partition: int) -> list[bytes]:
    poll = wire.PollMessages(
        CONSUMER,
        wire.Identifier(stream),
        wire.Identifier("t"),
        partition,
        wire.PollingStrategy(wire.PollingKind.FIRST, 0),
        1000,
        False,
    )
    reply = client.call(CommandCode.POLL_MESSAGES, poll)
    assert isinstance(reply, wire.PollMessagesReply)
    return [bytes(message.payload) for message in reply.messages()]


def _stored_offset(client: WireClient, stream: str, partition: int) -> int | None:
    ask = wire.GetConsumerOffset(CONSUMER, wire.Identifier(stream), wire.Identifier("t"), partition)
    frame = client.call_raw(int(CommandCode.GET_CONSUMER_OFFSET), ask.encode())
    assert frame.reply_header().status == 0
    if frame.reply_header().size == wire.HEADER_SIZE:
        return None  # no offset stored: an empty body
    reply = wire.read_reply(CommandCode.GET_CONSUMER_OFFSET, frame)
    assert isinstance(reply, wire.ConsumerOffsetInfo)
    return reply.stored_offset


def exercise_reused_number(
    client: WireClient, stream: str, partition: int = 0, other: int = 1
) -> None:
    """Batches A and B, a DELETE and a STORE of a consumer offset, all under one request
    number, to ``partition`` of a new topic "t": each takes effect and gets its own reply;
    true retries are applied once; a send to ``other`` under the number is applied there."""
    target = (CONSUMER, wire.Identifier(stream), wire.Identifier("t"), partition)
    # A message and an offset first (their own numbers), so the DELETE has something to do.
    first = client.call_raw(int(CommandCode.SEND_MESSAGES), _send_body(stream, partition, [b"w"]))
    assert _base_offset(first) == 0
    stored = client.call_raw(
        int(CommandCode.STORE_CONSUMER_OFFSET), wire.StoreConsumerOffset(*target, 0).encode()
    )
    assert stored.reply_header().status == 0
    number = client.request
    batch_a = _send_body(stream, partition, [b"a1", b"a2"])
    batch_b = _send_body(stream, partition, [b"b1", b"b2", b"b3"])
    reply_a = call_as(client, number, CommandCode.SEND_MESSAGES, batch_a)
    reply_b = call_as(client, number, CommandCode.SEND_MESSAGES, batch_b)
    assert (_base_offset(reply_a), _base_offset(reply_b)) == (1, 3)
    assert reply_a.reply_header().op != reply_b.reply_header().op
    # A true retry of B (the same bytes, the same number): B's own reply, not stored again.
    retry_b = call_as(client, number, CommandCode.SEND_MESSAGES, batch_b)
    assert bytes(retry_b.data[wire.HEADER_SIZE :]) == bytes(reply_b.data[wire.HEADER_SIZE :])
    assert retry_b.reply_header().op == reply_b.reply_header().op
    assert _poll_all(client, stream, partition) == [b"w", b"a1", b"a2", b"b1", b"b2", b"b3"]

    deleted = call_as(
        client,
        number,
        CommandCode.DELETE_CONSUMER_OFFSET,
        wire.DeleteConsumerOffset(*target).encode(),
    )
    assert deleted.reply_header().status == 0
    assert isinstance(wire.read_reply(CommandCode.DELETE_CONSUMER_OFFSET, deleted), wire.Empty)
    assert deleted.reply_header().op not in (reply_a.reply_header().op, reply_b.reply_header().op)
    assert _stored_offset(client, stream, partition) is None

    store = wire.StoreConsumerOffset(*target, 3).encode()
    stored_again = call_as(client, number, CommandCode.STORE_CONSUMER_OFFSET, store)
    assert stored_again.reply_header().status == 0
    assert _stored_offset(client, stream, partition) == 3

    # A retry of B after all of them is still B's duplicate (its reply, its op), and a
    # send to another partition under the same number is applied there.
    late_retry = call_as(client, number, CommandCode.SEND_MESSAGES, batch_b)
    assert late_retry.reply_header().op == reply_b.reply_header().op
    assert _base_offset(late_retry) == 3
    elsewhere = _send_body(stream, other, [b"c"])
    assert _base_offset(call_as(client, number, CommandCode.SEND_MESSAGES, elsewhere)) == 0
    assert _poll_all(client, stream, partition) == [b"w", b"a1", b"a2", b"b1", b"b2", b"b3"]
    assert _poll_all(client, stream, other) == [b"c"]


def test_requests_under_one_number_are_each_applied_and_answered(node: NodeProcess) -> None:
    with _setup(node, "reused-number") as client:
        exercise_reused_number(client, "reused-number")


def test_five_sends_under_one_number_store_every_message(node: NodeProcess) -> None:
    """The finding: five sends of 200 messages to partitions 0,1,0,1,0 under one number."""
    with _setup(node, "five-sends") as client:
        number = client.request
        offsets = []
        for index, partition in enumerate((0, 1, 0, 1, 0)):
            payloads = [b"%d-%d" % (index, i) for i in range(200)]
            frame = call_as(
                client,
                number,
                CommandCode.SEND_MESSAGES,
                _send_body("five-sends", partition, payloads),
            )
            offsets.append(_base_offset(frame))
        assert offsets == [0, 0, 200, 200, 400]
        stored = len(_poll_all(client, "five-sends", 0)) + len(_poll_all(client, "five-sends", 1))
        assert stored == 1000


def test_a_metadata_request_under_a_used_number_is_refused_and_not_applied(
    node: NodeProcess,
) -> None:
    """The metadata plane keeps exactly-once: another request under a committed number is
    refused with 59 (RequestAlreadyApplied), never answered with the other's reply."""
    with WireClient(node.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        number = client.request
        first = wire.CreateStream("identity-first").encode()
        created = call_as(client, number, CommandCode.CREATE_STREAM, first)
        assert created.reply_header().status == 0
        second = call_as(
            client, number, CommandCode.CREATE_STREAM, wire.CreateStream("identity-second").encode()
        )
        assert second.reply_header().status == IggyErrorCode.REQUEST_ALREADY_APPLIED
        retried = call_as(client, number, CommandCode.CREATE_STREAM, first)
        assert bytes(retried.data[wire.HEADER_SIZE :]) == bytes(created.data[wire.HEADER_SIZE :])
        client.request = number + 1
        found = client.call_raw(
            int(CommandCode.GET_STREAM), wire.StreamRef(wire.Identifier("identity-second")).encode()
        )
        assert found.reply_header().size == wire.HEADER_SIZE  # not found: nothing applied


def test_a_stamped_checksum_that_disagrees_with_the_body_is_refused(node: NodeProcess) -> None:
    with WireClient(node.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        body = wire.CreateStream("identity-stamped").encode()
        frame = client.frame_for(int(CommandCode.CREATE_STREAM), body)
        frame[144:160] = (12345).to_bytes(16, "little")  # request_checksum, not the body's
        client.send_frame(frame)
        reply = client.read_frame()
        assert reply is not None and reply.reply_header().status == IggyErrorCode.INVALID_FORMAT


def test_refusals_are_logged_with_the_client_and_the_reason(tmp_path: Path) -> None:
    from tests.runtime.processes import start_node

    process = start_node(tmp_path / "data", env={"VIEWSTREAM_LOG_LEVEL": "info"})
    try:
        with WireClient(process.address) as client:
            client.login("iggy", ROOT_PASSWORD)
            number = client.request
            call_as(client, number, CommandCode.CREATE_STREAM, wire.CreateStream("x").encode())
            call_as(client, number, CommandCode.CREATE_STREAM, wire.CreateStream("y").encode())
            client_id = client.client_id
        with WireClient(process.address) as stranger:
            stranger.call_raw(int(CommandCode.GET_STREAMS))  # no session
        expected = (
            f"client {client_id:032x} CREATE_STREAM: status 59",
            "GET_STREAMS: status 40, not logged in",
        )
        deadline = time.monotonic() + LOG_WAIT_S
        while not all(line in "".join(process.output) for line in expected):
            assert time.monotonic() < deadline, "".join(process.output)
            time.sleep(0.05)
    finally:
        process.kill()
    assert ROOT_PASSWORD not in "".join(process.output)
