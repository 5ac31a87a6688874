"""Polled messages decoded lazily: every field equals the eager reading of the batch,
payload views are slices of the reply (not copies), and a message made by hand behaves
as the NamedTuple it replaced."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.types import PolledMessages, ReceivedMessage, polled_messages
from sdk.wire import (
    OutgoingMessage,
    PollMessagesReply,
    ProtocolError,
    build_batch,
    frame_positions,
    read_batch,
    stamp_batch,
    verify_batch,
)
from tests.wire.strategies import outgoing_messages
from tests.wire.test_batch_columns import uniform_messages

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def stored(messages: list[OutgoingMessage], base_offset: int) -> bytearray:
    batch = build_batch(messages)
    stamp_batch(
        batch, verify_batch(batch), partition_id=3, base_offset=base_offset, base_timestamp=99
    )
    return batch


def reply_of(*batches: bytearray) -> bytearray:
    count = sum(len(read_batch(batch)[1]) for batch in batches)
    return bytearray(PollMessagesReply(3, 1234, count, tuple(bytes(b) for b in batches)).encode())


@SETTINGS
@given(
    first=st.one_of(uniform_messages(), outgoing_messages()),
    second=st.one_of(uniform_messages(), outgoing_messages()),
)
def test_every_lazy_field_equals_the_eager_reading_of_the_batch(
    first: list[OutgoingMessage], second: list[OutgoingMessage]
) -> None:
    batches = (stored(first, 10), stored(second, 10 + len(first)))
    reply = PollMessagesReply.decode(reply_of(*batches))
    got = polled_messages(reply)
    expected = [m for batch in batches for m in read_batch(batch)[1]]
    assert len(got) == len(expected)
    for message, eager in zip(got, expected, strict=True):
        assert message.partition_id == 3
        assert message.offset == eager.offset
        assert message.id == eager.id
        assert message.checksum == eager.checksum
        assert message.timestamp == eager.timestamp == 99
        assert message.origin_timestamp == eager.origin_timestamp
        assert message.payload == bytes(eager.payload)
        assert isinstance(message.payload, bytes)
        assert message.payload_view == eager.payload
        assert message.user_headers == bytes(eager.user_headers)
    # Decoded without the frames it found (a reply made by hand): the same messages.
    bare = PollMessagesReply(reply.partition_id, reply.current_offset, len(got), reply.records)
    assert polled_messages(bare) == got


def test_payload_views_are_read_only_slices_of_the_reply_not_copies() -> None:
    body = reply_of(stored([OutgoingMessage(1, b"abc"), OutgoingMessage(2, b"def")], 0))
    messages = polled_messages(PollMessagesReply.decode(body))
    view = messages[1].payload_view
    assert view.readonly and bytes(view) == b"def"
    with pytest.raises(TypeError):
        view[0] = 0
    body[body.rindex(b"def")] = ord("D")  # the reply's buffer is what the view shows
    assert bytes(view) == b"Def" and messages[1].payload == b"Def"


def test_a_message_made_by_hand_has_the_namedtuple_behaviour() -> None:
    made = ReceivedMessage(3, 10, 2**100 + 1, 77, 99, 98, b"payload", b"")
    assert made.partition_id == 3 and made.offset == 10 and made.id == 2**100 + 1
    assert (made.checksum, made.timestamp, made.origin_timestamp) == (77, 99, 98)
    assert made.payload == b"payload" and bytes(made.payload_view) == b"payload"
    assert made.user_headers == b"" and made.headers == {}
    partition, offset, *_ = made
    assert (partition, offset) == (3, 10)
    assert made == ReceivedMessage(3, 10, 2**100 + 1, 77, 99, 98, bytearray(b"payload"))
    assert made != made._replace(offset=11)
    assert made._replace(offset=11).offset == 11
    assert hash(made) == hash(ReceivedMessage(*made))
    assert pickle.loads(pickle.dumps(made)) == made
    assert made._asdict()["payload"] == b"payload"
    assert repr(made).startswith("ReceivedMessage(partition_id=3, offset=10, ")
    with pytest.raises(AttributeError):
        made.offset = 5  # type: ignore[misc]
    with pytest.raises(ValueError):
        ReceivedMessage(0, 0, 1 << 128, 0, 0, 0, b"")


def test_a_polled_message_equals_the_same_message_made_by_hand() -> None:
    batch = stored([OutgoingMessage(5, b"x", b"", 7)], 40)
    polled = polled_messages(PollMessagesReply.decode(reply_of(batch)))[0]
    checksum = polled.checksum
    assert polled == ReceivedMessage(3, 40, 5, checksum, 99, 7, b"x")


@SETTINGS
@given(
    messages=st.one_of(uniform_messages(), outgoing_messages()),
    data=st.data(),
)
def test_frame_positions_fail_exactly_where_read_batch_fails(
    messages: list[OutgoingMessage], data: st.DataObject
) -> None:
    batch = bytearray(stored(messages, 0))
    kind = data.draw(st.sampled_from(["flip", "cut", "none"]))
    if kind == "flip":
        index = data.draw(st.integers(256, len(batch) - 1))
        batch[index] ^= data.draw(st.integers(1, 255))
    elif kind == "cut":
        cut = data.draw(st.integers(256, len(batch)))
        del batch[cut:]
        batch[32:40] = cut.to_bytes(8, "little")  # keep the header's length honest
    try:
        _, eager = read_batch(batch)
    except ProtocolError as error:
        with pytest.raises(ProtocolError) as raised:
            frame_positions(batch)
        assert (raised.value.reason, raised.value.code) == (error.reason, error.code)
        return
    positions = list(frame_positions(batch))
    assert len(positions) == len(eager)
    for position, message in zip(positions, eager, strict=True):
        assert bytes(batch[position + 48 : position + 48 + len(message.payload)]) == bytes(
            message.payload
        )


@SETTINGS
@given(
    first=st.one_of(uniform_messages(), outgoing_messages()),
    second=st.one_of(uniform_messages(), outgoing_messages()),
)
def test_polled_messages_read_without_the_list_equal_the_list(
    first: list[OutgoingMessage], second: list[OutgoingMessage]
) -> None:
    batches = (stored(first, 10), stored(second, 10 + len(first)))
    polled = PolledMessages.of_reply(PollMessagesReply.decode(reply_of(*batches)))
    eager = [m for batch in batches for m in read_batch(batch)[1]]
    assert polled.count == len(eager)
    assert [bytes(view) for view in polled.payloads()] == [bytes(m.payload) for m in eager]
    assert all(view.readonly for view in polled.payloads())
    assert polled.size_bytes == sum(48 + len(m.payload) + len(m.user_headers) for m in eager)
    assert [polled.message(i).offset for i in range(len(eager))] == [m.offset for m in eager]
    assert polled.message(-1).offset == eager[-1].offset
    with pytest.raises(IndexError):
        polled.message(len(eager))
    with pytest.raises(IndexError):
        polled.message(-len(eager) - 1)
    listed = polled.messages
    assert listed is polled.messages  # made once, then kept
    assert listed == polled_messages(PollMessagesReply.decode(reply_of(*batches)))
    assert polled.message(0) == listed[0]
    by_hand = PolledMessages(polled.partition_id, polled.current_offset, list(listed))
    assert by_hand == polled
    assert by_hand.count == polled.count and by_hand.size_bytes == polled.size_bytes
    assert [bytes(v) for v in by_hand.payloads()] == [bytes(v) for v in polled.payloads()]


def test_polled_messages_are_read_only_and_an_empty_poll_has_nothing() -> None:
    polled = PolledMessages.of_reply(PollMessagesReply.decode(reply_of()))
    assert (polled.count, polled.size_bytes, polled.payloads(), polled.messages) == (0, 0, [], [])
    with pytest.raises(IndexError):
        polled.message(0)
    with pytest.raises(AttributeError):
        polled.partition_id = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        polled.messages = []  # type: ignore[misc]
    assert repr(polled) == "PolledMessages(partition_id=3, current_offset=1234, messages=[])"
