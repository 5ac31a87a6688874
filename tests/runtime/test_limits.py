"""Limits and bad input against a real node: each costs only its sender, never the node.

The node runs with small limits (set through ``VIEWSTREAM_LIMITS__*``), and every test
checks, after the abuse, that a well-behaved client on another connection still gets
answers and that acknowledged data is still there.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.core.connections import ConnectionContext, Response
from broker.runtime.config import load_config
from broker.runtime.connection import Connection
from broker.runtime.stats import NodeCounters
from sdk import wire
from sdk.wire import (
    HEADER_SIZE,
    CommandCode,
    EvictionReason,
    Frame,
    IggyErrorCode,
    build_reply_frame,
    build_request_frame,
)
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.wire_client import WireClient

FRAME_MAX = 64 * 1024
CONNECTIONS_MAX = 6
IN_FLIGHT_MAX = 2
IDLE_S = 1.5
FRAME_READ_S = 1.0


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data_dir: Path = tmp_path_factory.mktemp("limited") / "data"
    env = {
        "VIEWSTREAM_LIMITS__FRAME_SIZE_BYTES_MAX": str(FRAME_MAX),
        "VIEWSTREAM_LIMITS__CONNECTIONS_MAX": str(CONNECTIONS_MAX),
        "VIEWSTREAM_LIMITS__REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX": str(IN_FLIGHT_MAX),
        "VIEWSTREAM_LIMITS__IDLE_TIMEOUT_S": str(IDLE_S),
        "VIEWSTREAM_LIMITS__FRAME_READ_TIMEOUT_S": str(FRAME_READ_S),
    }
    process = start_node(data_dir, env=env)
    try:
        with WireClient(process.address) as setup:
            setup.login("iggy", ROOT_PASSWORD)
            setup.call(CommandCode.CREATE_STREAM, wire.CreateStream("limits"))
            setup.call(
                CommandCode.CREATE_TOPIC,
                wire.CreateTopic(wire.Identifier("limits"), 1, "t", ()),
            )
            _send(setup, [b"kept-1", b"kept-2"])
        yield process
    finally:
        process.kill()


def _send(client: WireClient, payloads: list[bytes]) -> None:
    body = wire.build_send_messages(
        wire.Identifier("limits"),
        wire.Identifier("t"),
        wire.PartitionId(0),
        [wire.OutgoingMessage(i + 1, p) for i, p in enumerate(payloads)],
    )
    client.call(CommandCode.SEND_MESSAGES, wire.SendMessages.decode(body))


def _healthy(node: NodeProcess) -> None:
    """Another client logs in, and the acknowledged messages are all still there."""
    with WireClient(node.address, timeout_s=5) as client:
        client.login("iggy", ROOT_PASSWORD)
        reply = client.call(
            CommandCode.POLL_MESSAGES,
            wire.PollMessages(
                wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
                wire.Identifier("limits"),
                wire.Identifier("t"),
                0,
                wire.PollingStrategy(wire.PollingKind.FIRST, 0),
                10,
                False,
            ),
        )
        assert isinstance(reply, wire.PollMessagesReply)
        assert reply.messages_count >= 2


def _read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    received = b""
    while True:
        data = sock.recv(65536)
        if not data:
            return received
        received += data


def _eviction_reason(data: bytes) -> EvictionReason:
    frame = wire.decode_frame(data[:HEADER_SIZE])
    assert frame.command is wire.Command.EVICTION
    return frame.eviction_header().reason


def test_frame_above_the_size_limit_is_evicted_and_the_node_serves_others(
    limited: NodeProcess,
) -> None:
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        header = bytearray(HEADER_SIZE)
        header[:HEADER_SIZE] = build_request_frame(
            int(CommandCode.PING), b"", client=client.client_id, session=0, request=1
        )
        struct.pack_into("<I", header, 48, FRAME_MAX + 1)
        client.send_frame(header)
        received = _read_until_closed(client.sock, 5)
    assert _eviction_reason(received) is EvictionReason.INVALID_REQUEST_BODY_SIZE
    _healthy(limited)


def test_connections_beyond_the_limit_are_closed_at_once(limited: NodeProcess) -> None:
    clients = []
    try:
        # The fixture's probes may still be closing: fill up whatever room is left.
        for _ in range(CONNECTIONS_MAX * 2):
            client = WireClient(limited.address, timeout_s=5)
            try:
                client.ping()
            except (ConnectionError, OSError):
                client.close()
                break
            clients.append(client)
        assert 1 <= len(clients) <= CONNECTIONS_MAX
        extra = WireClient(limited.address, timeout_s=5)
        assert _read_until_closed(extra.sock, 5) == b""
        extra.close()
        for client in clients:
            client.ping()  # the ones already in are untouched
    finally:
        for client in clients:
            client.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            _healthy(limited)
            break
        except (ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_pipelined_requests_beyond_the_in_flight_limit_are_all_answered_in_order(
    limited: NodeProcess,
) -> None:
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        frames = [
            build_request_frame(
                int(CommandCode.GET_STREAMS),
                b"",
                client=client.client_id,
                session=client.session,
                request=1 + i,
            )
            for i in range(IN_FLIGHT_MAX * 5)
        ]
        client.send_frame(b"".join(frames))
        answered = []
        for _ in frames:
            frame = client.read_frame()
            assert frame is not None and frame.command is wire.Command.REPLY
            answered.append(frame.reply_header().request)
    assert answered == [1 + i for i in range(IN_FLIGHT_MAX * 5)]
    _healthy(limited)


def test_idle_connection_is_closed_after_the_idle_timeout(limited: NodeProcess) -> None:
    with WireClient(limited.address) as client:
        client.ping()
        started = time.monotonic()
        assert _read_until_closed(client.sock, IDLE_S * 5) == b""
        assert time.monotonic() - started >= IDLE_S * 0.8
    _healthy(limited)


def test_half_a_header_then_silence_is_dropped_without_disturbing_others(
    limited: NodeProcess,
) -> None:
    with WireClient(limited.address) as slow, WireClient(limited.address) as other:
        other.login("iggy", ROOT_PASSWORD)
        slow.send_frame(slow.frame_for(int(CommandCode.PING))[: HEADER_SIZE // 2])
        started = time.monotonic()
        other.ping()  # served while the slow client stalls
        assert _read_until_closed(slow.sock, FRAME_READ_S * 5) == b""
        elapsed = time.monotonic() - started
        assert FRAME_READ_S * 0.8 <= elapsed < IDLE_S, elapsed
        other.ping()
    _healthy(limited)


def test_unknown_header_kind_is_evicted(limited: NodeProcess) -> None:
    with WireClient(limited.address) as client:
        frame = client.frame_for(int(CommandCode.PING))
        frame[60] = 99  # not Request, Reply or Eviction
        client.send_frame(frame)
        received = _read_until_closed(client.sock, 5)
    assert _eviction_reason(received) is EvictionReason.INVALID_REQUEST_OPERATION
    _healthy(limited)


def test_malformed_body_gets_an_error_code_and_the_connection_is_closed(
    limited: NodeProcess,
) -> None:
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        reply = client.call_raw(int(CommandCode.CREATE_STREAM), b"\xff\x00garbage")
        assert reply.command is wire.Command.REPLY
        assert reply.reply_header().status != 0
        assert _read_until_closed(client.sock, 5) == b""
    _healthy(limited)


def test_unknown_command_code_is_answered_with_invalid_command(limited: NodeProcess) -> None:
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        reply = client.call_raw(9999, b"")
        assert reply.reply_header().status == IggyErrorCode.INVALID_COMMAND
        client.ping()  # a well-framed request of an unknown kind keeps the connection


def test_before_login_every_code_but_ping_gets_40_known_or_not(limited: NodeProcess) -> None:
    with WireClient(limited.address) as client:
        for code in (9999, int(CommandCode.GET_STREAMS), int(CommandCode.FLUSH_UNSAVED_BUFFER)):
            reply = client.call_raw(code, b"")
            assert reply.reply_header().status == IggyErrorCode.UNAUTHENTICATED, code
        client.ping()  # answered, and the connection is kept for the login
        client.login("iggy", ROOT_PASSWORD)
        # Logged in: Iggy's answer to a flush it cannot do (there is no unsaved buffer).
        flush = client.call_raw(int(CommandCode.FLUSH_UNSAVED_BUFFER), b"")
        assert flush.reply_header().status == IggyErrorCode.FEATURE_UNAVAILABLE


def test_before_login_a_code_whose_body_would_not_decode_gets_40_and_keeps_the_connection(
    limited: NodeProcess,
) -> None:
    # Each of these empty bodies is malformed (a logged-in client gets 4 or 3 for it): the
    # answer before login says only that the client must log in first, as Iggy's does.
    codes = (
        CommandCode.GET_STREAM,
        CommandCode.GET_CLIENT,
        CommandCode.DESCRIBE_OPTIONS,
        CommandCode.GET_SNAPSHOT_FILE,
        9000,  # the node's own runtime counters
    )
    with WireClient(limited.address) as client:
        for code in codes:
            reply = client.call_raw(int(code), b"")
            assert reply.command is wire.Command.REPLY, code
            assert reply.reply_header().status == IggyErrorCode.UNAUTHENTICATED, code
        client.login("iggy", ROOT_PASSWORD)
        stream = client.call_raw(int(CommandCode.GET_STREAM), b"")
        assert stream.reply_header().status == IggyErrorCode.INVALID_FORMAT


def _result(frame: Frame) -> int:
    """The status of a result-framed reply: the header's, else its one result entry's."""
    status = frame.reply_header().status
    if status or len(frame.body) < 12:
        return status
    count, _, result = struct.unpack_from("<III", frame.body)
    return result if count else 0


def test_user_names_and_passwords_are_bounded_in_bytes_as_iggy_counts_them(
    limited: NodeProcess,
) -> None:
    # 17 three-byte characters: 51 bytes, one more than Iggy's 50, though only 17 characters.
    too_long, longest = "\u20ac" * 17, "\u20ac" * 16 + "ab"
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        create = wire.CreateUser(too_long, "bytes-Pa55")
        refused = client.call_raw(int(CommandCode.CREATE_USER), create.encode())
        assert _result(refused) == IggyErrorCode.INVALID_USERNAME
        update = wire.UpdateUser(wire.Identifier("iggy"), too_long)
        refused = client.call_raw(int(CommandCode.UPDATE_USER), update.encode())
        assert _result(refused) == IggyErrorCode.INVALID_USERNAME
        password = wire.CreateUser("bytes-user", "\u20ac" * 33 + "ab")  # 101 bytes
        refused = client.call_raw(int(CommandCode.CREATE_USER), password.encode())
        assert _result(refused) == IggyErrorCode.INVALID_PASSWORD
        created = client.call(CommandCode.CREATE_USER, wire.CreateUser(longest, "bytes-Pa55"))
        assert isinstance(created, wire.UserDetails) and created.user.username == longest


def test_describe_options_of_an_unknown_scope_is_invalid_and_keeps_the_connection(
    limited: NodeProcess,
) -> None:
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        reply = client.call_raw(int(CommandCode.DESCRIBE_OPTIONS), bytes([9]))
        assert reply.reply_header().status == IggyErrorCode.INVALID_COMMAND
        catalog = client.call(CommandCode.DESCRIBE_OPTIONS, wire.DescribeOptions(1))
        assert isinstance(catalog, wire.OptionsCatalog) and catalog.entries


def test_legacy_login_codes_are_evicted_as_malformed_logins(limited: NodeProcess) -> None:
    legacy = (int(CommandCode.LOGIN_USER), int(CommandCode.LOGIN_WITH_PERSONAL_ACCESS_TOKEN))
    for code, logged_in in ((legacy[0], False), (legacy[1], False), (legacy[0], True)):
        with WireClient(limited.address) as client:
            if logged_in:
                client.login("iggy", ROOT_PASSWORD)
            frame = client.call_raw(code, wire.LoginRegister("iggy", ROOT_PASSWORD).encode())
            assert frame.command is wire.Command.EVICTION, code
            assert frame.eviction_header().reason is EvictionReason.MALFORMED_LOGIN
            assert _read_until_closed(client.sock, 5) == b""
    _healthy(limited)


def test_batch_with_a_bad_checksum_is_refused_and_nothing_is_stored(
    limited: NodeProcess,
) -> None:
    with WireClient(limited.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        body = wire.build_send_messages(
            wire.Identifier("limits"),
            wire.Identifier("t"),
            wire.PartitionId(0),
            [wire.OutgoingMessage(1, b"tampered")],
        )
        body[-1] ^= 0xFF  # flip a payload byte: the frame checksum no longer matches
        reply = client.call_raw(int(CommandCode.SEND_MESSAGES), body)
        assert reply.reply_header().status == IggyErrorCode.INVALID_MESSAGE_CHECKSUM
        client.ping()
    _healthy(limited)


def test_requests_without_a_session_are_refused(limited: NodeProcess) -> None:
    with WireClient(limited.address) as client:
        reply = client.call_raw(int(CommandCode.GET_STREAMS))
        assert reply.reply_header().status == IggyErrorCode.UNAUTHENTICATED
        client.session = 12345  # a session this connection did not log in to
        reply = client.call_raw(int(CommandCode.GET_STREAMS))
        assert reply.command is wire.Command.REPLY
        assert reply.reply_header().status == IggyErrorCode.UNAUTHENTICATED


# -- the connection's in-flight bound, with a node that never answers ------------------------


class _StuckNode:
    """A node stand-in whose answers wait until released."""

    def __init__(self) -> None:
        self.config = load_config(limits={"requests_in_flight_per_connection_max": 3})
        self.counters = NodeCounters()
        self.release = trio.Event()
        self.handled = 0

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response:
        self.handled += 1
        await self.release.wait()
        return Response([build_reply_frame(frame.request_header())])

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None:
        pass  # nothing this test refuses

    def connection_busy(self, context: ConnectionContext) -> None:
        pass  # no long polls here


def test_connection_stops_reading_at_the_in_flight_limit() -> None:
    trio.run(_stops_reading_at_the_in_flight_limit)


async def _stops_reading_at_the_in_flight_limit() -> None:
    node = _StuckNode()
    client, server = trio.testing.memory_stream_pair()
    connection = Connection(node, server, ConnectionContext("memory"))
    frames = [
        build_request_frame(int(CommandCode.PING), b"", client=7, session=0, request=1)
        for _ in range(10)
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        await client.send_all(b"".join(frames))
        await trio.testing.wait_all_tasks_blocked()
        # One request in the handler, the rest of the allowance queued, none read beyond.
        assert connection.statistics() == (3, 3)
        assert node.handled == 1
        node.release.set()
        received = b""
        while len(received) < HEADER_SIZE * 10:
            received += await client.receive_some()
        assert connection.statistics()[0] == 10
        await client.aclose()
