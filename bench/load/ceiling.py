"""The raw ceiling of this machine: a loopback socket into a file, and fsync latency.

Purpose: the figures a broker on this machine cannot beat, measured with the same frame
size and the same lock-step request/reply shape as the bench's producers, so the
performance page can say how far from the machine each mode is.

* :func:`loopback_ceiling`: a server *process* (``python -m bench.load.ceiling serve``)
  takes ``connections`` TCP connections on 127.0.0.1; each frame is a 4-byte length and
  a body; the server appends the body to a file per connection (and with ``sync``
  fdatasyncs it) and answers 8 bytes. The clients (threads of this process, one per
  connection) send one unmeasured frame each, then ``frames`` measured frames each, one
  in flight at a time. No parsing, no
  checksums, no consensus: only the kernel's socket and page-cache (or disk) paths.
* :func:`fsync_latency`: append ``block_bytes`` to a file and fdatasync, ``count``
  times, in a fresh file in ``directory``.

Run alone: ``python -m bench.load.ceiling`` prints both as JSON.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from bench.load.metrics import MB, latency_summary
from bench.load.servers import process_cpu_s

__all__ = ["CeilingResult", "FsyncResult", "fsync_latency", "loopback_ceiling"]

LENGTH: Final = struct.Struct("<I")
ACK: Final = b"\x00" * 8
START_TIMEOUT_S: Final = 20.0
IO_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class CeilingResult:
    """Throughput, per-frame round-trip latency and CPU of the raw loopback path.

    ``server_cpu_s`` is the server process's CPU over the frames (see
    ``bench.load.servers.process_cpu_s``), ``client_cpu_s`` the client threads' own
    (``time.thread_time``), both summed over the connections; ``None`` in results
    measured before they were recorded.
    """

    frame_bytes: int
    connections: int
    frames: int
    sync: bool
    seconds: float
    megabytes_per_second: float
    p50_ms: float
    p99_ms: float
    avg_ms: float
    server_cpu_s: float | None = None
    client_cpu_s: float | None = None

    @property
    def server_us_per_frame(self) -> float | None:
        if self.server_cpu_s is None:
            return None
        return self.server_cpu_s / (self.frames * self.connections) * 1e6

    @property
    def client_us_per_frame(self) -> float | None:
        if self.client_cpu_s is None:
            return None
        return self.client_cpu_s / (self.frames * self.connections) * 1e6

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class FsyncResult:
    """Latency of one append plus ``fdatasync``."""

    block_bytes: int
    count: int
    p50_ms: float
    p99_ms: float
    avg_ms: float
    max_ms: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _recv_exactly(sock: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def _serve_connection(sock: socket.socket, path: Path, sync: bool) -> None:
    header = bytearray(LENGTH.size)
    body = bytearray(64 * 2**20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with sock:
            while _recv_exactly(sock, memoryview(header)):
                (size,) = LENGTH.unpack(header)
                view = memoryview(body)[:size]
                if not _recv_exactly(sock, view):
                    return
                os.write(fd, view)
                if sync:
                    os.fdatasync(fd)
                sock.sendall(ACK)
    finally:
        os.close(fd)


def serve(directory: Path, sync: bool) -> None:
    """The server side: print the port, serve connections until stdin closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    listener.settimeout(0.2)
    counter = 0

    def accept_loop() -> None:
        nonlocal counter
        while True:
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(IO_TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            counter += 1
            path = directory / f"conn-{counter}.log"
            threading.Thread(target=_serve_connection, args=(sock, path, sync), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    sys.stdin.read()  # the parent closes our stdin to stop us
    listener.close()


def loopback_ceiling(
    frame_bytes: int,
    connections: int,
    frames: int,
    *,
    sync: bool = False,
    body: bytes | None = None,
) -> CeilingResult:
    """Send ``frames`` frames of ``frame_bytes`` on each of ``connections`` connections
    to a file-appending server process; lock-step per connection.

    Args:
        body: The frame's body (``frame_bytes`` long); random bytes when ``None``.
    """
    assert body is None or len(body) == frame_bytes
    with tempfile.TemporaryDirectory(prefix="viewstream-ceiling-") as folder:
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.load.ceiling", "serve", folder, "sync" if sync else "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            line = _readline_with_timeout(server, START_TIMEOUT_S)
            port = int(line)
            latencies: list[list[float]] = [[] for _ in range(connections)]
            thread_cpu_s = [0.0] * connections
            frame = LENGTH.pack(frame_bytes) + (
                body if body is not None else os.urandom(frame_bytes)
            )
            server_cpu: list[float | None] = []
            # The barrier's action runs once every client has done its unmeasured round
            # trip and before any measured frame: the server's CPU at the clock's start.
            barrier = threading.Barrier(
                connections + 1, action=lambda: server_cpu.append(process_cpu_s(server.pid))
            )
            errors: list[BaseException] = []

            def client(index: int) -> None:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as s:
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        ack = bytearray(len(ACK))
                        # One unmeasured round trip: the server has accepted the
                        # connection and started its thread before the clock starts.
                        s.sendall(frame)
                        if not _recv_exactly(s, memoryview(ack)):
                            raise ConnectionError("the ceiling server closed the connection")
                        barrier.wait(timeout=IO_TIMEOUT_S)
                        out = latencies[index]
                        cpu_started = time.thread_time()
                        for _ in range(frames):
                            started = time.perf_counter()
                            s.sendall(frame)
                            if not _recv_exactly(s, memoryview(ack)):
                                raise ConnectionError("the ceiling server closed the connection")
                            out.append(time.perf_counter() - started)
                        thread_cpu_s[index] = time.thread_time() - cpu_started
                except BaseException as error:
                    errors.append(error)
                    barrier.abort()

            threads = [threading.Thread(target=client, args=(i,)) for i in range(connections)]
            for thread in threads:
                thread.start()
            barrier.wait(timeout=IO_TIMEOUT_S)
            started = time.perf_counter()
            for thread in threads:
                thread.join(IO_TIMEOUT_S * frames)
            seconds = time.perf_counter() - started
            server_cpu.append(process_cpu_s(server.pid))
            if errors:
                raise errors[0]
        finally:
            if server.stdin is not None:
                server.stdin.close()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
            if server.stdout is not None:
                server.stdout.close()
    summary = latency_summary(v for per in latencies for v in per)
    total = frame_bytes * frames * connections
    return CeilingResult(
        frame_bytes=frame_bytes,
        connections=connections,
        frames=frames,
        sync=sync,
        seconds=seconds,
        megabytes_per_second=total / seconds / MB,
        p50_ms=summary.p50,
        p99_ms=summary.p99,
        avg_ms=summary.avg,
        server_cpu_s=(
            None
            if len(server_cpu) != 2 or server_cpu[0] is None or server_cpu[1] is None
            else server_cpu[1] - server_cpu[0]
        ),
        client_cpu_s=sum(thread_cpu_s),
    )


def _readline_with_timeout(process: subprocess.Popen[str], timeout_s: float) -> str:
    result: list[str] = []
    assert process.stdout is not None
    stdout = process.stdout
    reader = threading.Thread(target=lambda: result.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not result or not result[0].strip():
        process.kill()
        raise RuntimeError("the ceiling server did not start")
    return result[0]


def fsync_latency(block_bytes: int, count: int, directory: Path | None = None) -> FsyncResult:
    """Append ``block_bytes`` and fdatasync, ``count`` times, in a fresh file."""
    with tempfile.TemporaryDirectory(prefix="viewstream-fsync-", dir=directory) as folder:
        path = Path(folder) / "fsync.log"
        block = os.urandom(block_bytes)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        samples: list[float] = []
        try:
            for _ in range(count):
                started = time.perf_counter()
                os.write(fd, block)
                os.fdatasync(fd)
                samples.append(time.perf_counter() - started)
        finally:
            os.close(fd)
    summary = latency_summary(samples)
    return FsyncResult(block_bytes, count, summary.p50, summary.p99, summary.avg, summary.max)


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve(Path(argv[1]), argv[2] == "sync")
        return 0
    results = {
        "loopback_1x250KB": loopback_ceiling(250_000, 1, 400).to_json(),
        "loopback_4x250KB": loopback_ceiling(250_000, 4, 200).to_json(),
        "loopback_4x250KB_fdatasync": loopback_ceiling(250_000, 4, 100, sync=True).to_json(),
        "fsync_4KiB": fsync_latency(4096, 200).to_json(),
        "fsync_250KB": fsync_latency(250_000, 100).to_json(),
    }
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
