"""Our client against the official SDK, frame for frame.

The golden vectors hold every frame the official apache-iggy 0.9.0 SDK sent during one
scripted session, with the reply it got. Here our sans-IO core makes the same calls, in
the same order, on one session: each request frame it writes must equal the captured one
byte for byte (request numbers, sessions, operations, checksums, bodies), and it is
answered with the captured reply. Only the random fields are taken from the capture: the
client id (set on our session), and message ids and origin timestamps (passed in
explicitly, as a caller can).

Where the two SDKs deliberately differ, the test says so: the official SDK asks for cluster
metadata twice after login (we ask once), moves to a new leader by registering again with a
new client id (we keep the session and route by role), and accepts junk echoes, a trailing
byte and an unframed store reply (we drop the connection and retry the same request).
"""

from __future__ import annotations

import json
from collections import deque
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sdk._protocol import ClientCore, Step
from sdk.errors import (
    ConsumerGroupMemberNotFound,
    IncompatibleProtocol,
    InvalidCredentials,
    InvalidFormat,
    SessionEvicted,
    StreamAlreadyExists,
    Unauthorized,
)
from sdk.types import ConsumerRef, Message, topic_options
from sdk.wire import Balanced as BalancedPartitioning
from sdk.wire import Empty as EmptyPayload
from sdk.wire import (
    EvictionReason,
    MessagesKey,
    PartitionId,
    PollingStrategy,
    RequestHeader,
    SendConfirmation,
    SendMessagesReply,
    build_reply_frame,
    encode_reply_body,
)
from tests.sdk.script import NODE_A, Sent, Trace, drive, make_core, poll_partition

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
_T = TypeVar("_T")


@cache
def frames() -> list[dict[str, Any]]:
    manifest: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text())
    entries: list[dict[str, Any]] = manifest["frames"]
    return entries


def request_bytes(index: int) -> bytes:
    return (GOLDEN / str(frames()[index]["request"]["file"])).read_bytes()


def reply_bytes(index: int) -> bytes:
    return (GOLDEN / str(frames()[index]["reply"]["file"])).read_bytes()


def client_of(index: int) -> int:
    return int(frames()[index]["request"]["header"]["client_hex"], 16)


def captured_messages(index: int, **headers_by_id: dict[str, Any]) -> list[Message]:
    """The messages of a captured send: ids and origin timestamps as captured."""
    batch = frames()[index]["request"]["body"]["batch"]
    return [
        Message(
            bytes.fromhex(m["payload_hex"]),
            id=m["id"],
            headers=headers_by_id.get(str(m["id"])),
            origin_timestamp=batch["origin_timestamp"] + m["timestamp_delta"],
        )
        for m in batch["messages"]
    ]


class Replay:
    """Answers each exchange with a captured reply after checking the request bytes."""

    def __init__(self) -> None:
        self.expected: deque[tuple[int, bytes | None]] = deque()
        self.trace = Trace()

    def expect(self, *frames_: int | tuple[int, bytes]) -> None:
        for item in frames_:
            self.expected.append(item if isinstance(item, tuple) else (item, None))

    def __call__(self, sent: Sent) -> bytes:
        assert self.expected, (
            f"unexpected extra frame: {sent.code.name} request {sent.header.request}"
        )
        index, override = self.expected.popleft()
        captured = request_bytes(index)
        assert sent.frame[:256] == captured[:256], f"frame {index} header differs"
        assert sent.frame == captured, f"frame {index} ({frames()[index]['step']}) body differs"
        return override if override is not None else reply_bytes(index)


def run(core: ClientCore, replay: Replay, step: Step[_T], *frames_: int | tuple[int, bytes]) -> _T:
    replay.expect(*frames_)
    result = drive(core, step, replay, trace=replay.trace)
    assert not replay.expected, f"frames not sent: {list(replay.expected)}"
    return result


def fail(core: ClientCore, replay: Replay, step: Step[object], *frames_: int) -> BaseException:
    replay.expect(*frames_)
    with pytest.raises(Exception) as raised:
        drive(core, step, replay, trace=replay.trace)
    assert not replay.expected, f"frames not sent: {list(replay.expected)}"
    return raised.value


def official_core() -> ClientCore:
    """A core that introduces itself as the official SDK does and logs in explicitly."""
    core, _ = make_core(credentials=False, sdk_name="rust-sdk", sdk_version="0.11.0")
    return core


def good_reply(index: int, payload: object) -> bytes:
    header = RequestHeader.unpack_from(request_bytes(index))
    body = encode_reply_body(header.operation, payload)  # type: ignore[arg-type]
    return bytes(build_reply_frame(header, body))


def test_golden_session_every_request_frame_is_byte_identical_to_the_official_sdk() -> None:
    core = official_core()
    core.session.client_id = client_of(0)
    replay = Replay()
    c = core

    run(c, replay, c.ping(), 0)
    login = run(c, replay, c.login("iggy", "secret"), 1, 2)  # the official SDK asks twice (3)
    assert login.session == 42
    run(c, replay, c.ping(), 4)
    # Junk echoes: we drop the connection and ask again with the same request.
    run(c, replay, c.ping(), 5, (5, good_reply(5, EmptyPayload())))
    assert replay.trace.disconnects
    run(c, replay, c.get_stats(), 6)
    run(c, replay, c.get_me(), 7)
    run(c, replay, c.get_cluster_metadata(), 8)

    created = run(c, replay, c.create_stream("orders"), 9)
    assert created.stream.name == "orders"
    assert isinstance(fail(c, replay, c.create_stream("orders"), 10), StreamAlreadyExists)
    assert run(c, replay, c.get_stream("orders"), 11) is not None
    assert run(c, replay, c.get_stream(3), 12) is not None
    assert run(c, replay, c.get_stream("missing"), 13) is None
    assert run(c, replay, c.get_streams(), 14)
    assert isinstance(fail(c, replay, c.get_streams(), 15), Unauthorized)
    run(c, replay, c.update_stream(3, "orders-v2"), 16)
    from sdk.types import string_options

    run(c, replay, c.update_stream("orders-v2", "orders", string_options({"retention": "7d"})), 17)
    run(c, replay, c.purge_stream("orders"), 18)

    run(c, replay, c.create_topic(3, "events", 3, topic_options(create=True)), 19)
    options = topic_options(
        create=True,
        compression_algorithm="gzip",
        message_expiry=timedelta(hours=1),
        max_topic_size=1_000_000_000,
        segment_size=16_777_216,
        durability="persisted",
        consumer_offset_durability="replicated",
        messages_required_to_save=1000,
        size_of_messages_required_to_save=65536,
        preallocate_segments=True,
        options={"x-custom": "1"},
    )
    run(c, replay, c.create_topic("orders", "audit", 1, options), 20)
    options = topic_options(create=True, message_expiry="never", max_topic_size="unlimited")
    run(c, replay, c.create_topic(3, "metrics", 2, options), 21)
    assert run(c, replay, c.get_topic(3, 0), 22) is not None
    assert run(c, replay, c.get_topic("orders", "audit"), 23) is not None
    assert run(c, replay, c.get_topic("orders", "missing"), 24) is None
    assert run(c, replay, c.get_topics(3), 25)
    options = topic_options(
        create=False,
        compression_algorithm="none",
        message_expiry=timedelta(minutes=5),
        max_topic_size=2_000_000_000,
    )
    run(c, replay, c.update_topic(3, 0, "events-v2", options), 26)
    run(c, replay, c.update_topic("orders", "events-v2", "events"), 27)
    run(c, replay, c.purge_topic(3, "events"), 28)
    run(c, replay, c.create_partitions(3, 0, 2), 29)
    run(c, replay, c.delete_partitions("orders", "events", 1), 30)

    headers_31 = {"trace": "abc", "attempt": 3, "urgent": True, "raw": b"\x00\x01"}
    run(
        c,
        replay,
        c.send_messages(3, 0, captured_messages(31, **{"1002": headers_31}), PartitionId(1)),
        31,
    )
    kinds = {
        "u8": 3, "u16": 300, "u32": 70000, "u64": 5000000000, "u128": 1180591620717411303424,
        "i8": -1, "i16": -300, "i64": -1099511627776, "f32": 1.5, "f64": 0.1, "zero": 0,
    }  # fmt: skip
    run(c, replay, c.send_messages(3, 0, captured_messages(32, **{"1003": kinds}), 1), 32)
    run(c, replay, c.send_messages("orders", "events", captured_messages(33), 2), 33)
    # Balanced: the partition count comes from GET_TOPIC, then round robin from 0.
    balanced = BalancedPartitioning()
    run(c, replay, c.send_messages(3, 0, captured_messages(35), balanced), 34, 35)
    run(c, replay, c.send_messages(3, 0, captured_messages(36), balanced), 36)
    run(c, replay, c.send_messages(3, 0, captured_messages(37), MessagesKey(b"user-42")), 37)
    run(c, replay, c.send_messages(3, 0, captured_messages(38), MessagesKey(b"tenant-7")), 38)
    # A reply with a trailing byte: refused, and the same request asked again.
    confirmation = SendMessagesReply((SendConfirmation(3, 0, 0, 600),))
    assert run(
        c,
        replay,
        c.send_messages(3, 0, captured_messages(39), 0),
        39,
        (39, good_reply(39, confirmation)),
    )
    assert run(c, replay, c.send_messages(3, 0, captured_messages(40), 0), 40) == []

    single_1 = ConsumerRef.single(1)
    poll = c.poll_messages
    run(
        c,
        replay,
        poll(
            3, 0, consumer=single_1, strategy=PollingStrategy.offset(40), count=10, partition_id=1
        ),
        41,
    )
    run(
        c,
        replay,
        poll(
            "orders",
            "events",
            consumer=ConsumerRef.single("alice"),
            strategy=PollingStrategy.timestamp(1_700_000_000_000_000),
            count=5,
            auto_commit=True,
            partition_id=1,
        ),
        42,
    )
    run(c, replay, poll(3, 0, consumer=single_1, strategy=PollingStrategy.first(), count=1), 43)
    run(
        c,
        replay,
        poll(3, 0, consumer=single_1, strategy=PollingStrategy.last(), count=2, partition_id=1),
        44,
    )
    workers = ConsumerRef.group("workers")
    run(
        c,
        replay,
        poll(
            3,
            0,
            consumer=workers,
            strategy=PollingStrategy.next(),
            count=100,
            auto_commit=True,
            partition_id=1,
        ),
        45,
    )
    group_7 = ConsumerRef.group(7)
    run(
        c,
        replay,
        poll(3, 0, consumer=group_7, strategy=PollingStrategy.next(), count=100, auto_commit=True),
        46,
        47,
    )
    # The re-sync sentinel: sync again and poll the newly assigned partition (2).
    run(
        c,
        replay,
        poll(3, 0, consumer=group_7, strategy=PollingStrategy.next(), count=100, auto_commit=True),
        48,
        49,
        50,
    )
    assert poll_partition(replay.trace.sent[-1]) == 2
    error = fail(
        c,
        replay,
        poll(
            3, 0, consumer=ConsumerRef.group("auditors"), strategy=PollingStrategy.next(), count=1
        ),
        51,
    )
    assert isinstance(error, ConsumerGroupMemberNotFound)
    assert (
        run(
            c,
            replay,
            poll(
                3,
                0,
                consumer=single_1,
                strategy=PollingStrategy.offset(600),
                count=10,
                partition_id=1,
            ),
            52,
        ).messages
        == []
    )
    assert run(c, replay, c.get_consumer_offset(single_1, 3, 0, 1), 53) is not None  # fmt: skip

    run(c, replay, c.create_consumer_group(3, 0, "workers"), 54)
    assert run(c, replay, c.get_consumer_group("orders", "events", "workers"), 55) is not None
    assert run(c, replay, c.get_consumer_group(3, 0, 99), 56) is None
    assert run(c, replay, c.get_consumer_groups(3, 0), 57)
    # What the official SDK's consumer_group() sends, as low-level calls.
    run(c, replay, c.get_stream("orders"), 58)
    run(c, replay, c.get_topic("orders", "events"), 59)
    run(c, replay, c.get_consumer_group("orders", "events", "workers"), 60)
    run(c, replay, c.join_consumer_group("orders", "events", "workers"), 61)
    run(c, replay, c.store_consumer_offset(workers, "orders", "events", 41, 1), 62)
    # An unframed store reply: refused, and the same request (26) asked again.
    run(
        c,
        replay,
        c.store_consumer_offset(workers, "orders", "events", 42, 1),
        63,
        (63, good_reply(63, EmptyPayload())),
    )
    run(c, replay, c.delete_consumer_offset(workers, "orders", "events", 1), 64)
    run(c, replay, c.join_consumer_group(3, 0, "workers"), 65)
    run(c, replay, c.leave_consumer_group(3, 0, 7), 66)
    run(c, replay, c.delete_consumer_group("orders", "events", "workers"), 67)
    run(c, replay, c.delete_topic(3, "events"), 68)
    run(c, replay, c.delete_stream("orders"), 69)
    run(c, replay, c.logout(), 70)
    assert core.session.client_id == 0 and core.session.next_request == 1

    # After logout: a new client id, session 0, request 1; the node evicts it.
    core.session.client_id = client_of(71)
    error = fail(c, replay, c.ping(), 71)
    assert isinstance(error, SessionEvicted)
    assert error.eviction is EvictionReason.NO_SESSION


def test_golden_login_with_wrong_password_raises_invalid_credentials() -> None:
    core = official_core()
    core.session.client_id = client_of(79)
    replay = Replay()
    run(core, replay, core.ping(), 79)
    error = fail(core, replay, core.login("iggy", "wrong"), 80)
    assert isinstance(error, InvalidCredentials)
    assert error.code == 42 and error.eviction is EvictionReason.INVALID_CREDENTIALS
    assert not core.has_credentials


def test_golden_login_to_an_incompatible_server_raises_with_its_version_window() -> None:
    core = official_core()
    core.session.client_id = client_of(81)
    replay = Replay()
    run(core, replay, core.ping(), 81)
    error = fail(core, replay, core.login("iggy", "secret"), 82)
    assert isinstance(error, IncompatibleProtocol)
    assert (error.server_protocol_version, error.server_protocol_version_min) == (12291, 12288)


def test_golden_empty_register_reply_is_a_terminal_login_failure() -> None:
    core = official_core()
    core.session.client_id = client_of(83)
    replay = Replay()
    run(core, replay, core.ping(), 83)
    error = fail(core, replay, core.login("iggy", "secret"), 84)
    assert isinstance(error, InvalidFormat)


def test_golden_redirect_metadata_makes_the_reported_leader_the_metadata_primary() -> None:
    """Where the official SDK re-registers on the leader with a new client id, we keep the
    session and send metadata writes to the leader the roster names."""
    core = official_core()
    core.session.client_id = client_of(72)
    replay = Replay()
    run(core, replay, core.ping(), 72)
    run(core, replay, core.login("iggy", "secret"), 73, 74)
    nodes = frames()[74]["reply"]["fields"]["nodes"]
    assert core.cluster.metadata_primary.port == nodes[1]["tcp_port"]
    # The recorder's ports are random per recording; the manifest holds this recording's.
    assert [n.port for n in core.cluster.nodes] == [node["tcp_port"] for node in nodes]
    sent: list[Sent] = []

    def server(request: Sent) -> bytes:
        sent.append(request)
        return good_reply_for(request)

    drive(core, core.create_stream("routed"), server)
    assert sent[0].address.port == nodes[1]["tcp_port"]
    assert sent[0].header.client == client_of(72)
    assert NODE_A not in core.cluster.nodes


def good_reply_for(sent: Sent) -> bytes:
    from sdk.wire import StreamDetails, StreamInfo

    details = StreamDetails(StreamInfo(1, 0, 0, 0, 0, "routed"))
    return bytes(build_reply_frame(sent.header, encode_reply_body(sent.header.operation, details)))
