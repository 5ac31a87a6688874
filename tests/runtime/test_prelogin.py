"""Connections before login: what a client that has not logged in can make the node hold.

The connection is tested with memory streams and ``MockClock(autojump_threshold=0)``
against a node stand-in; the bookkeeping (``broker.core.admission``) synchronously; and a
few tests run against real node processes over loopback: a churn of connections that
each declare a 64 MiB frame and hang up, the per-address cap, and the pre-login bound.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.core.admission import (
    UNAUTHENTICATED_FRAME_SIZE_MAX,
    IncomingFrameBytes,
    UnauthenticatedConnections,
)
from broker.core.connections import ConnectionContext, Response
from broker.runtime.config import ConfigError, load_config
from broker.runtime.connection import Connection, connection_guard
from broker.runtime.stats import NodeCounters
from sdk import wire
from sdk.wire import (
    FRAME_SIZE_MAX,
    HEADER_SIZE,
    NEED_MORE_BYTES,
    CommandCode,
    EvictionReason,
    Frame,
    FrameDecoder,
    IggyErrorCode,
    Operation,
    build_reply_frame,
    build_request_frame,
)
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.wire_client import WireClient

CLIENT = 0x5EED


def _frame(code: CommandCode, body: bytes = b"", *, session: int = 0, request: int = 1) -> bytes:
    return bytes(build_request_frame(code, body, client=CLIENT, session=session, request=request))


def _declaring(size: int, *, session: int = 0) -> bytes:
    """A valid PING request header that declares ``size`` bytes (body not included)."""
    header = bytearray(_frame(CommandCode.PING, session=session))
    struct.pack_into("<I", header, 48, size)
    return bytes(header)


def _login() -> bytes:
    return _frame(CommandCode.LOGIN_REGISTER, wire.LoginRegister("iggy", "secret").encode())


# -- a node stand-in ------------------------------------------------------------------------


class _Node:
    """Answers every request at once (after ``gate``, when set); a register logs in."""

    def __init__(self, **limits: float) -> None:
        self.config = load_config(limits=limits)
        self.counters = NodeCounters()
        self.handled: list[int] = []
        self.refusals: list[str] = []
        self.gate: trio.Event | None = None
        self.login_delay_s = 0.0

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response:
        self.handled.append(len(frame.data))
        if self.gate is not None:
            await self.gate.wait()
        header = frame.request_header()
        if header.operation is Operation.REGISTER:
            await trio.sleep(self.login_delay_s)
            context.client_id = header.client
        return Response([build_reply_frame(header)])

    def log_refusal(self, context: ConnectionContext, command: str, reason: str) -> None:
        self.refusals.append(reason)

    def connection_busy(self, context: ConnectionContext) -> None:
        pass  # no long polls here


class _Reader:
    """The client side's frames, one at a time."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    async def frame(self) -> Frame | None:
        """The next frame, or None once the connection closed."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_MORE_BYTES:
                return frame
            data = await self.stream.receive_some()
            if not data:
                return None
            self.decoder.feed(data)


async def _serve(connection: Connection, stream: trio.abc.Stream) -> None:
    """Run ``connection``, then close its stream (as ``serve_connection`` does)."""
    try:
        await connection.run()
    finally:
        await trio.aclose_forcefully(stream)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def _status(frame: Frame | None) -> int:
    assert frame is not None and frame.command is wire.Command.REPLY
    return frame.reply_header().status


# -- the pre-login frame bound --------------------------------------------------------------


def test_prelogin_frame_declaring_more_than_the_bound_is_evicted_before_its_body_is_read() -> None:
    async def main() -> None:
        node = _Node()
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            await client.send_all(_declaring(FRAME_SIZE_MAX) + b"\x00" * 1000)
            reader = _Reader(client)
            eviction = await reader.frame()
            assert eviction is not None and eviction.command is wire.Command.EVICTION
            assert eviction.eviction_header().reason is EvictionReason.INVALID_REQUEST_BODY_SIZE
            assert await reader.frame() is None  # then closed
        assert node.handled == []
        assert node.counters.connections_dropped == 1
        assert any("before login" in reason for reason in node.refusals), node.refusals
        assert connection_guard(node).frame_bytes.reserved == 0

    _run(main)


def test_prelogin_frame_of_exactly_the_bound_is_served() -> None:
    async def main() -> None:
        node = _Node()
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        body = b"p" * (UNAUTHENTICATED_FRAME_SIZE_MAX - HEADER_SIZE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            await client.send_all(_frame(CommandCode.PING, body))
            assert _status(await _Reader(client).frame()) == 0
            nursery.cancel_scope.cancel()
        assert node.handled == [UNAUTHENTICATED_FRAME_SIZE_MAX]

    _run(main)


def test_prelogin_large_frame_under_a_session_gets_40_and_is_served_after_login() -> None:
    """A client whose session lives on another connection sends its first request here:
    it is answered as the node answers it (40, log in here), without its body being kept,
    and the connection stays usable for the login and the retry."""

    async def main() -> None:
        node = _Node()
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        big = _frame(CommandCode.PING, b"b" * 100_000, session=9)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            reader = _Reader(client)
            await client.send_all(big)
            assert _status(await reader.frame()) == IggyErrorCode.UNAUTHENTICATED
            assert node.handled == []
            await client.send_all(_login())
            assert _status(await reader.frame()) == 0
            await client.send_all(big)
            assert _status(await reader.frame()) == 0
            nursery.cancel_scope.cancel()
        assert node.handled == [len(_login()), len(big)]
        assert any("body dropped" in reason for reason in node.refusals), node.refusals

    _run(main)


def test_login_pipelined_ahead_of_a_large_frame_is_answered_before_the_frame_is_judged() -> None:
    async def main() -> None:
        node = _Node()
        node.login_delay_s = 1.0
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        big = _frame(CommandCode.PING, b"b" * 50_000, session=9)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            reader = _Reader(client)
            await client.send_all(_login() + big)
            assert _status(await reader.frame()) == 0
            assert _status(await reader.frame()) == 0
            nursery.cancel_scope.cancel()
        assert node.handled == [len(_login()), len(big)]

    _run(main)


# -- the login timeout ---------------------------------------------------------------------


def test_connection_that_only_pings_is_closed_at_the_login_timeout() -> None:
    async def main() -> None:
        node = _Node(login_timeout_s=5.0)
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        pongs = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            started = trio.current_time()
            reader = _Reader(client)
            for _ in range(30):  # bounded: without the timeout the pings would go on
                await client.send_all(_frame(CommandCode.PING))
                frame = await reader.frame()
                if frame is None:
                    break
                pongs += 1
                await trio.sleep(1.0)
            closed_after = trio.current_time() - started
            nursery.cancel_scope.cancel()
        assert 5.0 <= closed_after < 6.0, closed_after
        assert pongs == 5  # served at 0..4 s: a ping does not extend the time
        assert node.counters.connections_dropped == 1
        assert any("not logged in within 5 s" in reason for reason in node.refusals)

    _run(main)


def test_silent_connection_is_closed_at_the_login_timeout() -> None:
    async def main() -> None:
        node = _Node(login_timeout_s=3.0)
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            started = trio.current_time()
            assert await _Reader(client).frame() is None
            assert trio.current_time() - started == pytest.approx(3.0)

    _run(main)


def test_logged_in_connection_outlives_the_login_timeout() -> None:
    async def main() -> None:
        node = _Node(login_timeout_s=2.0)
        client, server = trio.testing.memory_stream_pair()
        connection = Connection(node, server, ConnectionContext("memory"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve, connection, server)
            reader = _Reader(client)
            await trio.sleep(1.0)
            await client.send_all(_login())
            assert _status(await reader.frame()) == 0
            await trio.sleep(30.0)
            await client.send_all(_frame(CommandCode.PING))
            assert _status(await reader.frame()) == 0
            nursery.cancel_scope.cancel()
        assert node.counters.connections_dropped == 0

    _run(main)


# -- replies the client does not read ------------------------------------------------------


def test_client_that_does_not_read_its_replies_is_dropped_and_logged() -> None:
    async def main() -> None:
        node = _Node(frame_read_timeout_s=2.0)
        client, server = trio.testing.lockstep_stream_pair()  # a send waits for the reader
        connection = Connection(node, server, ConnectionContext("memory"))
        async with trio.open_nursery() as nursery:
            started = trio.current_time()

            async def send_and_never_read() -> None:
                await client.send_all(_frame(CommandCode.PING))
                await trio.sleep_forever()

            nursery.start_soon(send_and_never_read)
            await connection.run()
            ended_after = trio.current_time() - started
            nursery.cancel_scope.cancel()
        assert ended_after == pytest.approx(2.0)
        assert node.counters.connections_dropped == 1
        assert "connection closed: it does not read its replies" in node.refusals

    _run(main)


# -- the node-wide budget of frame bytes ----------------------------------------------------


def test_frame_that_does_not_fit_the_node_wide_budget_waits_unread_then_goes_on() -> None:
    async def main() -> None:
        node = _Node(frame_size_bytes_max=4096, incoming_frame_bytes_max=8192)
        node.gate = trio.Event()
        guard = connection_guard(node)
        first_client, first_server = trio.testing.memory_stream_pair()
        second_client, second_server = trio.testing.memory_stream_pair()
        first = Connection(node, first_server, ConnectionContext("first"))
        second = Connection(node, second_server, ConnectionContext("second"))
        body = b"f" * (4096 - HEADER_SIZE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run)
            nursery.start_soon(second.run)
            await first_client.send_all(
                _frame(CommandCode.PING, body) + _frame(CommandCode.PING, body, request=2)
            )
            await trio.testing.wait_all_tasks_blocked()
            await second_client.send_all(_frame(CommandCode.PING, body, request=3))
            await trio.testing.wait_all_tasks_blocked()
            # The first connection holds the whole budget: the second frame is not read.
            assert guard.frame_bytes.reserved == 8192
            assert first.statistics() == (2, 2)
            assert second.statistics() == (0, 0)
            node.gate.set()
            for client in (first_client, first_client, second_client):
                received = b""
                while len(received) < HEADER_SIZE:
                    received += await client.receive_some()
            assert second.statistics()[0] == 1
            nursery.cancel_scope.cancel()
        assert node.handled == [4096, 4096, 4096]
        assert guard.frame_bytes.reserved == 0

    _run(main)


def test_budget_smaller_than_the_largest_frame_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="incoming_frame_bytes_max"):
        load_config(limits={"frame_size_bytes_max": 1 << 20, "incoming_frame_bytes_max": 1 << 19})


# -- the bookkeeping ------------------------------------------------------------------------


def test_unauthenticated_connections_are_capped_per_address_and_forgotten_at_zero() -> None:
    table = UnauthenticatedConnections(per_address_max=2)
    assert table.admit("10.0.0.1")
    assert table.admit("10.0.0.1")
    assert not table.admit("10.0.0.1")  # the third is refused, and not counted
    assert table.count("10.0.0.1") == 2
    assert table.admit("10.0.0.2")  # other addresses are not affected
    table.release("10.0.0.1")
    assert table.admit("10.0.0.1")
    for _ in range(2):
        table.release("10.0.0.1")
    table.release("10.0.0.2")
    assert table.addresses == 0
    with pytest.raises(KeyError):
        table.release("10.0.0.1")  # a release without an admit is a bug


def test_frame_bytes_are_reserved_whole_or_not_at_all() -> None:
    budget = IncomingFrameBytes(bytes_max=10_000)
    assert budget.try_reserve(6_000)
    assert not budget.try_reserve(6_000)
    assert budget.reserved == 6_000
    assert budget.try_reserve(4_000)
    budget.release(10_000)
    assert budget.reserved == 0
    with pytest.raises(AssertionError):
        budget.release(1)


# -- against real node processes -----------------------------------------------------------

CHURN_CYCLES = 4000
CHURN_THREADS = 8
CHURN_WALL_S_MAX = 60.0
RSS_GROWTH_MAX_BYTES = 50 * 1024 * 1024
ADDRESS_CAP = 3


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def _connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _wait_closed(sock: socket.socket) -> None:
    """Read until the node closes the connection (or resets it)."""
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass


def _login_and_ping(address: str) -> float:
    started = time.monotonic()
    with WireClient(address, timeout_s=5) as client:
        client.login("iggy", ROOT_PASSWORD)
        client.ping()
    return time.monotonic() - started


def test_churn_of_connections_declaring_64_mib_leaves_rss_flat_and_logins_fast(
    node: NodeProcess,
) -> None:
    _login_and_ping(node.address)  # warm up: the first login, the first reply
    pid = node.process.pid
    idle = _rss_bytes(pid)
    headers = [_declaring(FRAME_SIZE_MAX), _declaring(FRAME_SIZE_MAX, session=7)]
    errors: list[BaseException] = []
    stop = threading.Event()
    peak = idle

    def churn(cycles: int) -> None:
        try:
            for i in range(cycles):
                if stop.is_set():
                    return
                with _connect(node.address) as sock:
                    sock.sendall(headers[i % 2])
                    # Hang up, then wait for the node to: the churn goes at the node's pace
                    # instead of queueing thousands of connections in the kernel.
                    sock.shutdown(socket.SHUT_WR)
                    _wait_closed(sock)
        except BaseException as error:  # reported by the test thread
            errors.append(error)

    threads = [
        threading.Thread(target=churn, args=(CHURN_CYCLES // CHURN_THREADS,), daemon=True)
        for _ in range(CHURN_THREADS)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    during_s: list[float] = []
    try:
        while any(thread.is_alive() for thread in threads):
            peak = max(peak, _rss_bytes(pid))
            assert time.monotonic() - started < CHURN_WALL_S_MAX, "the churn did not finish"
            if not during_s and time.monotonic() - started > 0.5:
                during_s.append(_login_and_ping(node.address))
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
    churn_s = time.monotonic() - started
    assert not errors, errors[:3]
    after = _rss_bytes(pid)
    login_s = _login_and_ping(node.address)
    mib = 1024 * 1024
    print(
        f"\nchurn of {CHURN_CYCLES} in {churn_s:.1f} s: RSS idle {idle / mib:.1f} MiB, "
        f"peak {peak / mib:.1f} MiB, after {after / mib:.1f} MiB; login+ping during "
        f"{during_s[0] if during_s else float('nan'):.3f} s, after {login_s:.3f} s"
    )
    assert peak - idle < RSS_GROWTH_MAX_BYTES, (idle, peak)
    assert after - idle < RSS_GROWTH_MAX_BYTES, (idle, after)
    assert login_s < 1.0, login_s


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data_dir: Path = tmp_path_factory.mktemp("strict") / "data"
    env = {"VIEWSTREAM_LIMITS__UNAUTHENTICATED_CONNECTIONS_PER_ADDRESS_MAX": str(ADDRESS_CAP)}
    process = start_node(data_dir, env=env)
    try:
        yield process
    finally:
        process.kill()


def _closed_at_once(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _accepted(address: str, deadline_s: float = 5.0) -> WireClient:
    """A new connection that the node serves (earlier ones may still be closing)."""
    deadline = time.monotonic() + deadline_s
    while True:
        client = WireClient(address, timeout_s=2)
        try:
            client.ping()
            return client
        except (ConnectionError, OSError):
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_connections_of_one_address_beyond_the_cap_before_login_are_closed_at_once(
    strict: NodeProcess,
) -> None:
    waiting = [_accepted(strict.address) for _ in range(ADDRESS_CAP)]
    try:
        with _connect(strict.address) as extra:
            assert _closed_at_once(extra)
        waiting[0].login("iggy", ROOT_PASSWORD)  # a login gives its place back
        waiting.append(_accepted(strict.address))
        with _connect(strict.address) as extra:
            assert _closed_at_once(extra)
        for client in waiting:
            client.ping()  # the ones already in are untouched
    finally:
        for client in waiting:
            client.close()
    # Closing gives the places back too.
    again = [_accepted(strict.address) for _ in range(ADDRESS_CAP)]
    for client in again:
        client.close()


def test_real_node_evicts_a_large_prelogin_frame_and_drops_the_body_of_one_under_a_session(
    strict: NodeProcess,
) -> None:
    with _accepted(strict.address) as client:
        client.send_frame(_declaring(FRAME_SIZE_MAX))
        eviction = client.read_frame()
        assert eviction is not None and eviction.command is wire.Command.EVICTION
        assert eviction.eviction_header().reason is EvictionReason.INVALID_REQUEST_BODY_SIZE
        assert client.read_frame() is None
    with _accepted(strict.address) as client:
        big = build_request_frame(
            CommandCode.PING, b"b" * 200_000, client=client.client_id, session=3, request=1
        )
        client.send_frame(big)
        reply = client.read_frame()
        assert reply is not None
        assert reply.reply_header().status == IggyErrorCode.UNAUTHENTICATED
        client.login("iggy", ROOT_PASSWORD)
        big = build_request_frame(
            CommandCode.PING,
            b"b" * 200_000,
            client=client.client_id,
            session=client.session,
            request=1,
        )
        client.send_frame(big)
        reply = client.read_frame()
        assert reply is not None
        assert reply.reply_header().status == 0
