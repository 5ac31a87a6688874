"""The fault proxy against two fake bus endpoints over real sockets.

A fake acceptor and a fake dialer exchange the bus handshake's byte counts and then
numbered frames of the bus framing through ``python -m bench.chaos.proxy``; each test sets
one rule and checks what crosses: everything in order, nothing, a seeded share, late,
held back and then all of it, or a refused link.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from bench.chaos.nodes import ProxyProcess, start_proxy
from bench.chaos.proxy import (
    BUS_FRAME_SIZE_MAX,
    FRAME_KINDS,
    HANDSHAKE_ACCEPTOR_BYTES,
    HANDSHAKE_DIALER_BYTES,
    MAC_SIZE,
    MAGIC_SIZE,
    NONCE_SIZE,
)
from broker.runtime import bus

FRAME = struct.Struct("<IB3x")
TIMEOUT_S = 10.0


def test_handshake_sizes_match_the_bus() -> None:
    # The proxy passes the handshake through by length: it must agree with the bus.
    assert len(bus._MAGIC) == MAGIC_SIZE
    assert bus._HELLO_DIAL.size == HANDSHAKE_DIALER_BYTES
    assert MAGIC_SIZE + bus.NONCE_SIZE + bus.MAC_SIZE == HANDSHAKE_ACCEPTOR_BYTES
    assert bus._FRAME.size == FRAME.size
    assert (NONCE_SIZE, MAC_SIZE) == (bus.NONCE_SIZE, bus.MAC_SIZE)
    assert bus.BUS_FRAME_SIZE_MAX == BUS_FRAME_SIZE_MAX
    assert {int(kind) for kind in bus.FrameKind} == FRAME_KINDS


def _frame(number: int, size: int = 24) -> bytes:
    payload = number.to_bytes(8, "little") + bytes(size - 8)
    return FRAME.pack(len(payload), 1) + payload


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _read_frames(sock: socket.socket, wait_s: float) -> list[int]:
    """Frame numbers received until ``wait_s`` passes without a byte."""
    sock.settimeout(wait_s)
    numbers: list[int] = []
    try:
        while True:
            size, _kind = FRAME.unpack(_receive_exactly(sock, FRAME.size))
            payload = _receive_exactly(sock, size)
            numbers.append(int.from_bytes(payload[:8], "little"))
    except (TimeoutError, ConnectionError):
        return numbers


class Pair:
    """A fake acceptor behind the proxy and a dialer in front of it, handshaken."""

    def __init__(self, proxy: ProxyProcess, acceptor: socket.socket) -> None:
        self.dialer = socket.create_connection(("127.0.0.1", proxy.ports["0-1"]), TIMEOUT_S)
        acceptor.settimeout(TIMEOUT_S)
        self.accepted, _ = acceptor.accept()
        self.accepted.settimeout(TIMEOUT_S)
        self.accepted.sendall(b"A" * (MAGIC_SIZE + bus.NONCE_SIZE))
        assert _receive_exactly(self.dialer, MAGIC_SIZE + bus.NONCE_SIZE)
        self.dialer.sendall(b"D" * HANDSHAKE_DIALER_BYTES)
        assert _receive_exactly(self.accepted, HANDSHAKE_DIALER_BYTES) == b"D" * 65
        self.accepted.sendall(b"M" * bus.MAC_SIZE)
        assert _receive_exactly(self.dialer, bus.MAC_SIZE) == b"M" * bus.MAC_SIZE

    def close(self) -> None:
        self.dialer.close()
        self.accepted.close()


@pytest.fixture
def acceptor() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock
    finally:
        sock.close()


@pytest.fixture
def proxy(acceptor: socket.socket) -> Iterator[ProxyProcess]:
    port = acceptor.getsockname()[1]
    process = start_proxy([{"name": "0-1", "port": 0, "target": f"127.0.0.1:{port}"}], 7, None)
    try:
        yield process
    finally:
        process.close()


def test_proxy_without_rules_forwards_every_frame_in_order_both_ways(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    try:
        pair.dialer.sendall(b"".join(_frame(i) for i in range(50)))
        pair.accepted.sendall(b"".join(_frame(100 + i, 4096) for i in range(20)))
        assert _read_frames(pair.accepted, 0.5) == list(range(50))
        assert _read_frames(pair.dialer, 0.5) == [100 + i for i in range(20)]
    finally:
        pair.close()
    links = proxy.command({"op": "stats"})["links"]
    assert links["0-1"]["fwd"]["frames"] == 50 and links["0-1"]["desyncs"] == 0


def test_proxy_one_way_cut_drops_one_direction_and_heals_without_breaking_the_framing(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    try:
        proxy.command({"op": "rule", "link": "0-1", "direction": "fwd", "rule": {"cut": True}})
        pair.dialer.sendall(b"".join(_frame(i) for i in range(10)))
        pair.accepted.sendall(b"".join(_frame(100 + i) for i in range(10)))
        assert _read_frames(pair.accepted, 0.5) == []
        assert _read_frames(pair.dialer, 0.5) == [100 + i for i in range(10)]
        proxy.command({"op": "heal"})
        pair.dialer.sendall(b"".join(_frame(i) for i in range(10, 20)))
        assert _read_frames(pair.accepted, 0.5) == list(range(10, 20))
    finally:
        pair.close()


def test_proxy_drops_a_share_of_frames_and_keeps_the_rest_whole_and_in_order(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    try:
        proxy.command({"op": "rule", "link": "0-1", "direction": "fwd", "rule": {"drop_p": 0.5}})
        pair.dialer.sendall(b"".join(_frame(i) for i in range(400)))
        received = _read_frames(pair.accepted, 0.5)
    finally:
        pair.close()
    assert received == sorted(received)
    assert 100 < len(received) < 300
    dropped = proxy.command({"op": "stats"})["links"]["0-1"]["fwd"]["frames_dropped"]
    assert dropped == 400 - len(received)


def test_proxy_delays_frames_by_at_least_the_rule(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    try:
        proxy.command({"op": "rule", "link": "0-1", "direction": "back", "rule": {"delay_ms": 300}})
        started = time.monotonic()
        pair.accepted.sendall(_frame(1))
        assert _read_frames(pair.dialer, 2.0) == [1]
        assert time.monotonic() - started >= 0.29
    finally:
        pair.close()


def test_proxy_stall_holds_frames_back_and_delivers_all_of_them_after_healing(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    try:
        proxy.command({"op": "rule", "link": "0-1", "direction": "fwd", "rule": {"stall": True}})
        time.sleep(0.2)  # the reader parks only after its read in progress returns
        pair.dialer.sendall(_frame(0))
        pair.dialer.sendall(b"".join(_frame(i) for i in range(1, 30)))
        early = _read_frames(pair.accepted, 0.5)
        proxy.command({"op": "heal"})
        late = _read_frames(pair.accepted, 0.5)
    finally:
        pair.close()
    assert early in ([], [0])  # at most the frame of the read that was in progress
    assert early + late == list(range(30))


def test_proxy_block_resets_the_link_and_refuses_new_connections_until_healed(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    proxy.command({"op": "block", "link": "0-1", "blocked": True})
    try:
        pair.dialer.settimeout(TIMEOUT_S)
        assert pair.dialer.recv(100) == b""  # the proxy closed our side
    finally:
        pair.close()
    with socket.create_connection(("127.0.0.1", proxy.ports["0-1"]), TIMEOUT_S) as refused:
        refused.settimeout(TIMEOUT_S)
        assert refused.recv(100) == b""
    proxy.command({"op": "block", "link": "0-1", "blocked": False})
    healed = Pair(proxy, acceptor)
    try:
        healed.dialer.sendall(_frame(5))
        assert _read_frames(healed.accepted, 0.5) == [5]
    finally:
        healed.close()
    stats = proxy.command({"op": "stats"})["links"]["0-1"]
    assert stats["refused"] == 1


def test_proxy_closes_a_connection_whose_bytes_are_not_bus_frames(
    proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    pair = Pair(proxy, acceptor)
    try:
        pair.dialer.sendall(b"\xff" * 64)  # frame kind 255, a huge size: not the bus
        pair.accepted.settimeout(TIMEOUT_S)
        assert pair.accepted.recv(100) == b""
    finally:
        pair.close()
    assert proxy.command({"op": "stats"})["links"]["0-1"]["desyncs"] == 1


def test_proxy_refuses_a_bad_command_and_keeps_running(proxy: ProxyProcess) -> None:
    with pytest.raises(Exception, match="refused"):
        proxy.command({"op": "rule", "link": "9-9", "rule": {}})
    with pytest.raises(Exception, match="refused"):
        proxy.command({"op": "rule", "link": "0-1", "rule": {"drop_p": 2}})
    assert proxy.command({"op": "stats"})["ok"]


def test_proxy_exits_when_its_control_pipe_closes(proxy: ProxyProcess) -> None:
    assert proxy.process.stdin is not None
    proxy.process.stdin.close()
    assert proxy.process.wait(timeout=TIMEOUT_S) == 0


@pytest.fixture
def opaque_proxy(acceptor: socket.socket) -> Iterator[ProxyProcess]:
    port = acceptor.getsockname()[1]
    links = [{"name": "0-1", "port": 0, "target": f"127.0.0.1:{port}"}]
    process = start_proxy(links, 7, None, opaque=True)
    try:
        yield process
    finally:
        process.close()


def _opaque_pair(
    proxy: ProxyProcess, acceptor: socket.socket
) -> tuple[socket.socket, socket.socket]:
    dialer = socket.create_connection(("127.0.0.1", proxy.ports["0-1"]), TIMEOUT_S)
    acceptor.settimeout(TIMEOUT_S)
    accepted, _ = acceptor.accept()
    accepted.settimeout(TIMEOUT_S)
    return dialer, accepted


def _read_bytes(sock: socket.socket, wait_s: float) -> bytes:
    sock.settimeout(wait_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pass
    return data


def test_opaque_proxy_forwards_bytes_that_are_no_bus_frames_without_a_desync(
    opaque_proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    # What a TLS bus looks like to the proxy: records it cannot frame.
    dialer, accepted = _opaque_pair(opaque_proxy, acceptor)
    try:
        records = bytes(range(256)) * 64
        dialer.sendall(records)
        accepted.sendall(b"\x16\x03\x03" + records[:1000])
        assert _read_bytes(accepted, 0.5) == records
        assert _read_bytes(dialer, 0.5) == b"\x16\x03\x03" + records[:1000]
    finally:
        dialer.close()
        accepted.close()
    links = opaque_proxy.command({"op": "stats"})["links"]
    assert links["0-1"]["desyncs"] == 0 and links["0-1"]["fwd"]["frames"] >= 1


def test_opaque_proxy_cut_drops_every_chunk_of_one_direction_until_healed(
    opaque_proxy: ProxyProcess, acceptor: socket.socket
) -> None:
    dialer, accepted = _opaque_pair(opaque_proxy, acceptor)
    try:
        opaque_proxy.command(
            {"op": "rule", "link": "0-1", "direction": "fwd", "rule": {"cut": True}}
        )
        dialer.sendall(b"lost" * 100)
        accepted.sendall(b"kept")
        assert _read_bytes(accepted, 0.5) == b""
        assert _read_bytes(dialer, 0.5) == b"kept"
        opaque_proxy.command({"op": "heal"})
        dialer.sendall(b"after")
        assert _read_bytes(accepted, 0.5) == b"after"
    finally:
        dialer.close()
        accepted.close()
    fwd = opaque_proxy.command({"op": "stats"})["links"]["0-1"]["fwd"]
    assert fwd["frames_dropped"] >= 1
