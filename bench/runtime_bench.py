"""Throughput of the broker runtime beside a raw ceiling measured in the same run.

Run: ``python -m bench.runtime_bench`` (options: ``--batches``, ``--messages``, ``--size``,
``--producers``, ``--setups``; ``--help`` lists them).

For each setup and each producer count it starts fresh server process(es) on 127.0.0.1
in a temporary directory, runs the producers (one OS process each, so the client side is
not GIL-bound), and reports MB/s (payload bytes, 10**6 per MB, as iggy-bench counts) and
p50/p99 of the per-batch round trip. Every producer sends ``--batches`` batches of
``--messages`` messages of ``--size`` bytes, lock-step (one batch in flight per producer,
as Iggy's SDKs do), all producers to partition 0 of one topic, so with several producers
a persisted partition can cover several batches with one fsync (group commit). The
``syncs/batch`` column says how many it took (from the node's own counters).

Setups:

* ``raw``: the ceiling. A minimal trio server that reads length-prefixed frames of the
  same size as a batch and appends each to a file, answering 4 bytes; driven by the very
  same producer loop.
* ``1-replicated``, ``1-persisted``: one node, topic durability as named.
* ``3-replicated``, ``3-persisted``: a loopback 3-node cluster; producers connect to the
  node whose replica is the partition's primary.

Only the request number changes between a producer's requests: the batch is built once
(``sdk.wire.build_send_messages``) and the same bytes are sent again, so client-side work
per batch is one ``pack_into`` and the socket calls. This is a measurement tool, not a
test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sdk import Client

ROOT_PASSWORD: Final = "bench-root-password"
_REQUEST_OFFSET: Final = 168  # the request number in an Iggy request header
_LENGTH: Final = struct.Struct("<I")
_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"


# -- the raw ceiling server --------------------------------------------------------------------


def raw_server(path: str) -> None:
    """Serve length-prefixed frames: append each to ``path``, answer 4 bytes."""
    import trio

    async def handle(stream: trio.SocketStream) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        buffer = bytearray()
        try:
            while True:
                data = await stream.receive_some(1 << 20)
                if not data:
                    return
                buffer += data
                while len(buffer) >= 4:
                    (size,) = _LENGTH.unpack_from(buffer, 0)
                    if len(buffer) < 4 + size:
                        break
                    os.write(fd, memoryview(buffer)[4 : 4 + size])
                    del buffer[: 4 + size]
                    await stream.send_all(b"ok\0\0")
        finally:
            os.close(fd)

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        print(f"listening on 127.0.0.1:{port}", flush=True)
        await trio.serve_listeners(handle, listeners)

    trio.run(main)


# -- producers -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    kind: str  # "raw" or "iggy"
    address: str
    batches: int
    messages: int
    size: int


def _batch_body(messages: int, size: int) -> bytearray:
    from sdk import wire

    payload = os.urandom(size)
    outgoing = [wire.OutgoingMessage(i + 1, payload) for i in range(messages)]
    return wire.build_send_messages(
        wire.Identifier("bench"), wire.Identifier("t"), wire.PartitionId(0), outgoing
    )


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("server closed the connection")
        data += chunk
    return bytes(data)


def produce(job: Job) -> tuple[list[float], float, float]:
    """Send ``job.batches`` batches lock-step; return each round trip in seconds, and
    when the first send started and the last reply arrived (``time.monotonic``, which
    every process reads from the same clock)."""
    body = _batch_body(job.messages, job.size)
    if job.kind == "raw":
        host, _, port = job.address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = bytearray(_LENGTH.pack(len(body))) + body

        def next_frame(i: int) -> bytearray:
            del i  # every raw frame is the same bytes
            return frame

        def read_reply() -> None:
            _receive_exactly(sock, 4)
    else:
        from sdk import wire

        host, _, port = job.address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        decoder = wire.FrameDecoder()

        def read_frame() -> wire.Frame:
            while True:
                frame = decoder.next_frame()
                if frame is not wire.NEED_MORE_BYTES:
                    return frame
                data = sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("server closed the connection")
                decoder.feed(data)

        # A raw session: the node serves it only on the connection that logged in.
        client_id = int.from_bytes(os.urandom(16), "little") | 1
        login = wire.LoginRegister("iggy", ROOT_PASSWORD).encode()
        code = wire.CommandCode.LOGIN_REGISTER
        sock.sendall(wire.build_request_frame(code, login, client=client_id, session=0, request=0))
        reply = wire.read_reply(code, read_frame())
        assert isinstance(reply, wire.LoginRegisterReply), reply
        frame = wire.build_request_frame(
            wire.CommandCode.SEND_MESSAGES, body, client=client_id, session=reply.session, request=1
        )

        def next_frame(i: int) -> bytearray:
            struct.pack_into("<Q", frame, _REQUEST_OFFSET, 1 + i)
            return frame

        def read_reply() -> None:
            answer = read_frame()
            assert answer.reply_header().status == 0, answer

    latencies = []
    first_started = time.monotonic()
    for i in range(job.batches):
        started = time.monotonic()
        sock.sendall(next_frame(i))
        read_reply()
        latencies.append(time.monotonic() - started)
    last_done = time.monotonic()
    sock.close()
    return latencies, first_started, last_done


# -- servers -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_line(process: subprocess.Popen[str], prefix: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError(f"server did not print {prefix!r}")


@contextmanager
def raw_setup(folder: Path) -> Iterator[tuple[str, Callable[[], dict[str, float]]]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.runtime_bench", "--raw-server", str(folder / "raw.bin")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address = _wait_line(process, "listening on ")
        yield address, dict
    finally:
        process.kill()
        process.wait(timeout=10)


def _pinned_client(address: str) -> Client:
    """An SDK client of the one node at ``address``, logged in as root."""
    from sdk import Client, ClientConfig

    return Client(ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD))


def _runtime_stats(address: str) -> dict[str, object]:
    with _pinned_client(address) as client:
        report: dict[str, object] = client.get_runtime_stats()
        return report


def _partition_counters(address: str) -> dict[str, float]:
    groups = _runtime_stats(address)["groups"]
    assert isinstance(groups, dict)
    for name, counters in groups.items():
        if name.startswith("partition") and counters["primary"]:
            return {"prepares": counters["prepares"], "syncs": counters["syncs"]}
    return {}


def _create_topic(address: str, durability: str) -> None:
    with _pinned_client(address) as client:
        client.create_stream("bench")
        client.create_topic("bench", "t", 1, durability=durability)


@contextmanager
def node_setup(
    folder: Path, nodes: int, durability: str
) -> Iterator[tuple[str, Callable[[], dict[str, float]]]]:
    environment = dict(os.environ)
    environment["VIEWSTREAM_ROOT_PASSWORD"] = ROOT_PASSWORD
    environment["VIEWSTREAM_LOG_LEVEL"] = "warning"
    environment["VIEWSTREAM_HTTP_ADDRESS"] = ""  # the bench speaks TCP; port 3000 is not ours
    environment["VIEWSTREAM_CLUSTER_SECRET"] = "bench-cluster-secret-0123456789"
    clients = [f"127.0.0.1:{_free_port()}" for _ in range(nodes)]
    buses = [f"127.0.0.1:{_free_port()}" for _ in range(nodes)]
    processes = []
    try:
        for index in range(nodes):
            command = [
                sys.executable,
                "-c",
                _LAUNCH,
                "serve",
                "--address",
                clients[index],
                "--ws-address",
                "",
                "--data-dir",
                str(folder / f"node-{index}"),
            ]
            if nodes > 1:
                command += [
                    "--replica",
                    str(index),
                    "--replicas",
                    ",".join(buses),
                    "--client-addresses",
                    ",".join(clients),
                ]
            processes.append(
                subprocess.Popen(
                    command, stdout=subprocess.PIPE, text=True, env=environment, cwd=folder
                )
            )
        for process in processes:
            _wait_line(process, "viewstream listening on ")
        _create_for_cluster(clients, durability)
        primary = _primary_of_partition(clients)
        yield primary, lambda: _partition_counters(primary)
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)


def _create_for_cluster(clients: list[str], durability: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            _create_topic(clients[0], durability)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _primary_of_partition(clients: list[str]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for address in clients:
            if _partition_counters(address):
                return address
        time.sleep(0.1)
    raise RuntimeError("no node reports itself the partition's primary")


# -- the run ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    setup: str
    producers: int
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    syncs_per_batch: float | None


def run_setup(setup: str, producers: int, args: argparse.Namespace) -> Row:
    with tempfile.TemporaryDirectory(prefix="viewstream-bench-") as scratch:
        folder = Path(scratch)
        if setup == "raw":
            context = raw_setup(folder)
            kind = "raw"
        else:
            count, durability = setup.split("-")
            context = node_setup(folder, int(count), durability)
            kind = "iggy"
        with context as (address, counters):
            before = counters()
            jobs = [Job(kind, address, args.batches, args.messages, args.size)] * producers
            with multiprocessing.get_context("fork").Pool(producers) as pool:
                results = pool.map(produce, jobs)
            after = counters()
    # Throughput over the span in which producers were sending (process start-up and
    # batch building excluded, as iggy-bench does).
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    latencies = sorted(x for r in results for x in r[0])
    batches = len(latencies)
    payload_bytes = batches * args.messages * args.size
    syncs = None
    if "syncs" in after and "persisted" in setup:
        syncs = (after["syncs"] - before.get("syncs", 0)) / batches
    return Row(
        setup,
        producers,
        payload_bytes / elapsed / 1e6,
        statistics.median(latencies) * 1000,
        latencies[min(batches - 1, int(batches * 0.99))] * 1000,
        syncs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200, help="batches per producer")
    parser.add_argument("--messages", type=int, default=250, help="messages per batch")
    parser.add_argument("--size", type=int, default=1000, help="payload bytes per message")
    parser.add_argument("--producers", default="1,4", help="producer counts, comma-separated")
    parser.add_argument(
        "--setups",
        default="raw,1-replicated,1-persisted,3-replicated,3-persisted",
        help="which setups to run, comma-separated",
    )
    parser.add_argument("--raw-server", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_server:
        raw_server(args.raw_server)
        return
    print(
        f"{args.batches} batches x {args.messages} messages x {args.size} B per producer, "
        f"lock-step, one partition; python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    header = ("setup", "producers", "MB/s", "p50 ms", "p99 ms", "syncs/batch")
    print("{:<14} {:>9} {:>8} {:>8} {:>8} {:>12}".format(*header))
    for setup in args.setups.split(","):
        for producers in (int(p) for p in args.producers.split(",")):
            row = run_setup(setup, producers, args)
            syncs = "" if row.syncs_per_batch is None else f"{row.syncs_per_batch:.2f}"
            print(
                f"{row.setup:<14} {row.producers:>9} {row.mb_per_s:>8.1f} {row.p50_ms:>8.2f} "
                f"{row.p99_ms:>8.2f} {syncs:>12}",
                flush=True,
            )


if __name__ == "__main__":
    main()
