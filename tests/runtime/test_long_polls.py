"""Long polls on a real node: released by a commit, by their deadline, by another request
on the connection and by shutdown, and bounded per node; our SDK's consumer uses them and
Iggy's official SDK never sees them.

Every wait is bounded; no assertion depends on how fast the machine is, only on the
order of events: a poll that waits 30 s and answers with a message well before then was
released by the commit, not by its deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from sdk import AsyncClient, Client, ClientConfig, Message, wire
from sdk.wire import CommandCode, Identifier, IggyErrorCode, PollingStrategy
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.sdk.real import node_url, runtime_stats
from tests.wire_client import WireClient

WAIT_MS: Final = 30_000
"""A long poll's wait in these tests: far beyond anything a release by an event takes."""
RELEASED_WELL_BEFORE_S: Final = 20.0
"""A poll answered sooner than this after it started was not released by its deadline."""
SOCKET_TIMEOUT_S: Final = 45.0
SETTLE_TIMEOUT_S: Final = 10.0


def _client(address: str) -> Client:
    return Client(ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD))


def _topic(address: str, stream: str) -> None:
    with _client(address) as client:
        client.create_stream(stream)
        client.create_topic(stream, "t", 1)


def _send(address: str, stream: str, payload: bytes) -> None:
    with _client(address) as client:
        client.send_messages(stream, "t", [Message(payload)])


def _long_poll_body(stream: str, wait_ms: int, offset: int = 0) -> bytes:
    poll = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, Identifier.numeric(1)),
        Identifier.named(stream),
        Identifier.named("t"),
        0,
        PollingStrategy.offset(offset),
        10,
        False,
    )
    return wire.LongPollMessages(wait_ms, poll).encode()


def _logged_in(address: str) -> WireClient:
    client = WireClient(address, timeout_s=SOCKET_TIMEOUT_S)
    client.login("iggy", ROOT_PASSWORD)
    return client


def _polled(frame: wire.Frame) -> wire.PollMessagesReply:
    header = frame.reply_header()
    assert header.status == 0, f"status {header.status}"
    return wire.PollMessagesReply.decode(frame.body)


def _wait_waiting(address: str, count: int) -> None:
    """Until ``count`` long polls wait on the node (its counters say so), bounded."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while runtime_stats(address)["node"]["long_polls_waiting"] != count:
        assert time.monotonic() < deadline, "the long polls never waited"
        time.sleep(0.02)


class _Poller(threading.Thread):
    """One long poll on its own connection, in a thread: its reply and how long it took."""

    def __init__(self, address: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.client = _logged_in(address)
        self.body = body
        self.frame: wire.Frame | None = None
        self.elapsed_s = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.frame = self.client.call_raw(wire.LONG_POLL_CODE, self.body)
        except BaseException as error:  # reported by the test thread
            self.error = error
        self.elapsed_s = time.monotonic() - started

    def result(self) -> wire.Frame:
        self.join(SOCKET_TIMEOUT_S)
        assert not self.is_alive(), "the long poll never answered"
        self.client.close()
        if self.error is not None:
            raise self.error
        assert self.frame is not None
        return self.frame


@pytest.fixture(scope="module")
def bounded_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node where one long poll at most may wait."""
    data_dir: Path = tmp_path_factory.mktemp("bounded") / "data"
    process = start_node(data_dir, env={"VIEWSTREAM_LIMITS__LONG_POLLS_WAITING_MAX": "1"})
    try:
        yield process
    finally:
        process.kill()


def test_waiting_long_poll_answers_with_the_message_sent_meanwhile(node: NodeProcess) -> None:
    _topic(node.address, "lp-commit")
    poller = _Poller(node.address, _long_poll_body("lp-commit", WAIT_MS))
    poller.start()
    _wait_waiting(node.address, 1)
    _send(node.address, "lp-commit", b"hello")
    reply = _polled(poller.result())
    assert [bytes(m.payload) for m in reply.messages()] == [b"hello"]
    assert poller.elapsed_s < RELEASED_WELL_BEFORE_S


def test_long_poll_with_messages_answers_at_once_like_a_poll(node: NodeProcess) -> None:
    _topic(node.address, "lp-ready")
    _send(node.address, "lp-ready", b"there")
    with _logged_in(node.address) as client:
        started = time.monotonic()
        answered = client.call_raw(wire.LONG_POLL_CODE, _long_poll_body("lp-ready", WAIT_MS))
        assert time.monotonic() - started < RELEASED_WELL_BEFORE_S
        ordinary = client.call_raw(
            int(CommandCode.POLL_MESSAGES), _long_poll_body("lp-ready", 0)[4:]
        )
    assert [bytes(m.payload) for m in _polled(answered).messages()] == [b"there"]
    assert bytes(ordinary.body) == bytes(answered.body)  # the same answer as POLL_MESSAGES


def test_long_poll_on_an_idle_partition_answers_empty_at_its_deadline(node: NodeProcess) -> None:
    _topic(node.address, "lp-deadline")
    with _logged_in(node.address) as client:
        started = time.monotonic()
        reply = _polled(client.call_raw(wire.LONG_POLL_CODE, _long_poll_body("lp-deadline", 300)))
        elapsed = time.monotonic() - started
    assert reply.messages_count == 0
    assert elapsed >= 0.3  # it waited its whole wait: nothing came


def test_request_behind_a_waiting_long_poll_releases_it(node: NodeProcess) -> None:
    """A connection answers in order: a PING pipelined behind a waiting poll makes the
    poll answer (empty) at once, then the PING is answered."""
    _topic(node.address, "lp-pipelined")
    with _logged_in(node.address) as client:
        started = time.monotonic()
        client.send_frame(
            client.frame_for(wire.LONG_POLL_CODE, _long_poll_body("lp-pipelined", WAIT_MS))
        )
        _wait_waiting(node.address, 1)
        client.send_frame(client.frame_for(int(CommandCode.PING)))
        first, second = client.read_frame(), client.read_frame()
        elapsed = time.monotonic() - started
    assert first is not None and second is not None
    assert _polled(first).messages_count == 0
    assert second.reply_header().status == 0
    assert elapsed < RELEASED_WELL_BEFORE_S


def test_long_poll_beyond_the_node_bound_is_refused_with_feature_unavailable(
    bounded_node: NodeProcess,
) -> None:
    address = bounded_node.address
    _topic(address, "lp-bound")
    poller = _Poller(address, _long_poll_body("lp-bound", WAIT_MS))
    poller.start()
    _wait_waiting(address, 1)
    with _logged_in(address) as client:
        refused = client.call_raw(wire.LONG_POLL_CODE, _long_poll_body("lp-bound", WAIT_MS))
        assert refused.reply_header().status == IggyErrorCode.FEATURE_UNAVAILABLE
        # The connection is kept, and an ordinary poll still works on it.
        ordinary = client.call_raw(
            int(CommandCode.POLL_MESSAGES), _long_poll_body("lp-bound", 0)[4:]
        )
        assert _polled(ordinary).messages_count == 0
    assert runtime_stats(address)["node"]["long_polls_refused"] == 1
    _send(address, "lp-bound", b"first")
    assert [bytes(m.payload) for m in _polled(poller.result()).messages()] == [b"first"]


def test_shutdown_answers_waiting_long_polls_and_the_node_exits(tmp_path: Path) -> None:
    process = start_node(tmp_path / "data")
    try:
        _topic(process.address, "lp-stop")
        poller = _Poller(process.address, _long_poll_body("lp-stop", WAIT_MS))
        poller.start()
        _wait_waiting(process.address, 1)
        started = time.monotonic()
        assert process.stop() == 0  # SIGTERM: a graceful stop, bounded by STOP_TIMEOUT_S
        assert time.monotonic() - started < RELEASED_WELL_BEFORE_S
        frame = poller.result()
        assert _polled(frame).messages_count == 0
    finally:
        process.kill()


def test_our_consumer_waits_on_the_node_and_gets_a_message_sent_later(node: NodeProcess) -> None:
    address = node.address
    _topic(address, "lp-sdk")
    started_before = runtime_stats(address)["node"]["long_polls_started"]
    received: list[bytes] = []

    async def consume() -> None:
        async with (
            AsyncClient.from_connection_string(node_url(address)) as client,
            client.consumer("lp-sdk", "t", long_poll_wait_s=WAIT_MS / 1000) as consumer,
        ):
            with trio.fail_after(SOCKET_TIMEOUT_S):
                async for message in consumer:
                    received.append(message.payload)
                    return

    thread = threading.Thread(target=trio.run, args=(consume,), daemon=True)
    thread.start()
    _wait_waiting(address, 1)
    started = time.monotonic()
    _send(address, "lp-sdk", b"late")
    thread.join(SOCKET_TIMEOUT_S)
    assert not thread.is_alive()
    assert received == [b"late"]
    assert time.monotonic() - started < RELEASED_WELL_BEFORE_S
    assert runtime_stats(address)["node"]["long_polls_started"] > started_before


def test_official_sdk_polls_while_a_long_poll_waits(node: NodeProcess) -> None:
    """Iggy's SDK never sends the code: its polls are answered as before, at once, while
    another connection's long poll waits on the same partition."""
    import asyncio

    from apache_iggy import Consumer as OfficialConsumer
    from apache_iggy import IggyClient
    from apache_iggy import PollingStrategy as OfficialStrategy

    address = node.address
    _topic(address, "lp-official")
    _send(address, "lp-official", b"one")
    poller = _Poller(address, _long_poll_body("lp-official", WAIT_MS, offset=1))
    poller.start()
    _wait_waiting(address, 1)

    async def official() -> list[Any]:
        client = IggyClient(address)
        await client.connect()
        await client.login_user("iggy", ROOT_PASSWORD)
        polled: list[Any] = await client.poll_messages(
            "lp-official",
            "t",
            consumer=OfficialConsumer.Single(5),
            polling_strategy=OfficialStrategy.Offset(0),
            count=10,
            auto_commit=False,
            partition_id=0,
        )
        return polled

    polled = asyncio.run(asyncio.wait_for(official(), SOCKET_TIMEOUT_S))
    assert [bytes(m.payload()) for m in polled] == [b"one"]
    assert runtime_stats(address)["node"]["long_polls_waiting"] == 1  # still waiting
    _send(address, "lp-official", b"two")
    assert [bytes(m.payload) for m in _polled(poller.result()).messages()] == [b"two"]
