"""The SDK's high-level producer with N batches in flight against one real node.

Run: ``python -m bench.sdk_inflight`` (options: ``--in-flight 1,2,4,8``, ``--batches``,
``--messages``, ``--size``, ``--partitions``, ``--unordered``, ``--persisted``,
``--driver``, ``--repeat``; ``--help`` lists them). With ``--repeat`` the whole table
is run again, N after N, and a last table gives each figure's median over the runs.

For every N it starts a fresh ``viewstream serve`` process on 127.0.0.1 in a temporary
directory (stopped however the run ends), creates a topic, and has one producer
(``client.producer(..., max_in_flight=N)``) send ``--batches`` full batches of
``--messages`` messages of ``--size`` bytes, balanced over ``--partitions`` partitions
(the sticky partitioner fills one partition's batch, then the next one's). With the
default ``ordered`` producer a partition has at most one batch in flight, so N in flight
needs N partitions; ``--unordered`` puts every batch on partition 0 instead.

It prints, per N: MB/s of payload (10**6 bytes per MB, as iggy-bench counts), p50/p99 of
a batch's round trip (from the sender handing it to its session until the reply, retries
included), and the CPU the client process and the node process used over the run, in
percent of one core and in milliseconds per batch: a side near 100% is the bottleneck,
since both are single-threaded Python (the blocking driver's senders are threads sharing
one GIL); when neither is, they are waiting for a core (a shared machine) or for each
other. The CPU figures include the setup and warm-up, a small share of a run. This is a
measurement tool, not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

from broker.runtime.serve import READY_PREFIX
from sdk import AsyncClient, Client, Message
from sdk._driver import AsyncDriver, Driver

ROOT_PASSWORD: Final = "bench-root-password"
READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 15.0
WARMUP_BATCHES: Final = 20
STREAM: Final = "bench"
TOPIC: Final = "t"
_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")

_T = TypeVar("_T")


# -- the node ------------------------------------------------------------------------------------


@dataclass
class Node:
    process: subprocess.Popen[str]
    address: str

    def cpu_s(self) -> float:
        """User + system CPU seconds the node process used so far (Linux ``/proc``)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


@contextmanager
def running_node(folder: Path) -> Iterator[Node]:
    """A ``viewstream serve`` process on 127.0.0.1:0 with its data in ``folder``; it is
    stopped (SIGTERM, then SIGKILL) when the block ends, however it ends."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VIEWSTREAM_")}
    environment["VIEWSTREAM_ROOT_PASSWORD"] = ROOT_PASSWORD
    environment["VIEWSTREAM_LOG_LEVEL"] = "warning"
    environment["VIEWSTREAM_HTTP_ADDRESS"] = ""  # the bench speaks TCP; port 3000 is not ours
    log = (folder / "node.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _LAUNCH,
            "serve",
            "--address",
            "127.0.0.1:0",
            "--ws-address",
            "",
            "--data-dir",
            str(folder / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
        cwd=str(folder),
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    try:
        address = _wait_ready(process, lines)
        yield Node(process, address)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
        log.close()


def _wait_ready(process: subprocess.Popen[str], lines: queue.Queue[str]) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if line.startswith(READY_PREFIX):
            return line[len(READY_PREFIX) :].strip()
    raise RuntimeError("the node did not become ready (see node.log)")


# -- one measurement -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    batches: int
    messages: int
    size: int
    partitions: int
    ordered: bool
    persisted: bool
    driver: str


@dataclass(frozen=True, slots=True)
class Result:
    in_flight: int
    elapsed_s: float
    mb_per_s: float
    latency_ms_p50: float
    latency_ms_p99: float
    client_cpu_percent: float
    node_cpu_percent: float
    client_cpu_ms_per_batch: float
    node_cpu_ms_per_batch: float


class LatencyLog:
    """Round trip of every batch a producer session sent, in seconds."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.lock = threading.Lock()

    def clear(self) -> None:
        with self.lock:
            self.samples.clear()

    def add(self, seconds: float) -> None:
        with self.lock:
            self.samples.append(seconds)


def _time_trio_sessions(sessions: Sequence[AsyncDriver], log: LatencyLog) -> None:
    for session in sessions:
        run = session._run

        async def timed(step: Any, run: Callable[[Any], Awaitable[Any]] = run) -> Any:
            started = time.perf_counter()
            try:
                return await run(step)
            finally:
                log.add(time.perf_counter() - started)

        session._run = timed  # type: ignore[method-assign]


def _time_blocking_sessions(sessions: Sequence[Driver], log: LatencyLog) -> None:
    for session in sessions:
        run = session._run

        def timed(step: Any, run: Callable[..., Any] = run, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return run(step, **kwargs)
            finally:
                log.add(time.perf_counter() - started)

        session._run = timed  # type: ignore[method-assign]


def _topic_options(settings: Settings) -> dict[str, Any]:
    return {"durability": "persisted"} if settings.persisted else {}


def _producer_options(settings: Settings, in_flight: int) -> dict[str, Any]:
    return {
        "partitioning": 0 if not settings.ordered else None,
        "batch_length": settings.messages,
        "batch_size_bytes": 64 * 1024 * 1024,
        "linger_s": 0.005,
        "max_in_flight": in_flight,
        "buffer_size_bytes": 4 * in_flight * settings.messages * (settings.size + 64),
        "ordered": settings.ordered,
    }


def _batch(settings: Settings) -> list[Message]:
    payload = os.urandom(settings.size)
    return [Message(payload) for _ in range(settings.messages)]


def measure_trio(node: Node, settings: Settings, in_flight: int) -> tuple[float, LatencyLog]:
    """Produce with the trio producer; returns (elapsed seconds, batch latencies)."""
    url = f"iggy://iggy:{ROOT_PASSWORD}@{node.address}"
    log = LatencyLog()
    options = {k: v for k, v in _producer_options(settings, in_flight).items() if v is not None}
    batch = _batch(settings)

    async def main() -> float:
        async with AsyncClient.from_connection_string(url) as client:
            await client.create_stream(STREAM)
            await client.create_topic(
                STREAM, TOPIC, partitions_count=settings.partitions, **_topic_options(settings)
            )
            async with client.producer(STREAM, TOPIC, **options) as producer:
                _time_trio_sessions(producer._sessions, log)
                for _ in range(WARMUP_BATCHES):
                    await producer.send(*batch)
                await producer.flush()
                log.clear()
                started = time.perf_counter()
                for _ in range(settings.batches):
                    await producer.send(*batch)
                await producer.flush()
                return time.perf_counter() - started

    return trio.run(main), log


def measure_blocking(node: Node, settings: Settings, in_flight: int) -> tuple[float, LatencyLog]:
    """Produce with the blocking producer (sender threads)."""
    url = f"iggy://iggy:{ROOT_PASSWORD}@{node.address}"
    log = LatencyLog()
    options = {k: v for k, v in _producer_options(settings, in_flight).items() if v is not None}
    batch = _batch(settings)
    with Client.from_connection_string(url) as client:
        client.create_stream(STREAM)
        client.create_topic(
            STREAM, TOPIC, partitions_count=settings.partitions, **_topic_options(settings)
        )
        with client.producer(STREAM, TOPIC, **options) as producer:
            _time_blocking_sessions(producer._sessions, log)
            for _ in range(WARMUP_BATCHES):
                producer.send(*batch)
            producer.flush()
            log.clear()
            started = time.perf_counter()
            for _ in range(settings.batches):
                producer.send(*batch)
            producer.flush()
            return time.perf_counter() - started, log


def run_one(settings: Settings, in_flight: int) -> Result:
    with (
        tempfile.TemporaryDirectory(prefix="sdk-inflight-") as folder,
        running_node(Path(folder)) as node,
    ):
        measure = measure_trio if settings.driver == "trio" else measure_blocking
        node_cpu = node.cpu_s()
        client_cpu = time.process_time()
        elapsed, log = measure(node, settings, in_flight)
        client_cpu = time.process_time() - client_cpu
        node_cpu = node.cpu_s() - node_cpu
    samples = sorted(log.samples)
    payload_bytes = settings.batches * settings.messages * settings.size
    return Result(
        in_flight=in_flight,
        elapsed_s=elapsed,
        mb_per_s=payload_bytes / elapsed / 1e6,
        latency_ms_p50=1000 * statistics.median(samples),
        latency_ms_p99=1000 * samples[min(len(samples) - 1, int(0.99 * len(samples)))],
        client_cpu_percent=100 * client_cpu / elapsed,
        node_cpu_percent=100 * node_cpu / elapsed,
        client_cpu_ms_per_batch=1000 * client_cpu / (settings.batches + WARMUP_BATCHES),
        node_cpu_ms_per_batch=1000 * node_cpu / (settings.batches + WARMUP_BATCHES),
    )


# -- the command ---------------------------------------------------------------------------------


def _table(results: list[Result], settings: Settings) -> str:
    mode = "ordered" if settings.ordered else "unordered, partition 0"
    lines = [
        f"{settings.driver} producer, {settings.batches} batches x {settings.messages} "
        f"messages x {settings.size} B, {settings.partitions} partitions ({mode}), "
        f"{'persisted' if settings.persisted else 'replicated'}, one node",
        "| in flight | MB/s | batch p50 ms | batch p99 ms | client CPU % | node CPU % "
        "| client CPU ms/batch | node CPU ms/batch |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.in_flight} | {r.mb_per_s:.1f} | {r.latency_ms_p50:.1f} | "
            f"{r.latency_ms_p99:.1f} | {r.client_cpu_percent:.0f} | {r.node_cpu_percent:.0f} "
            f"| {r.client_cpu_ms_per_batch:.2f} | {r.node_cpu_ms_per_batch:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk_inflight", description=__doc__)
    parser.add_argument("--in-flight", default="1,2,4,8", help="values of N, comma-separated")
    parser.add_argument("--batches", type=int, default=1000, help="timed batches per N")
    parser.add_argument("--messages", type=int, default=250, help="messages per batch")
    parser.add_argument("--size", type=int, default=1000, help="payload bytes per message")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the topic")
    parser.add_argument("--unordered", action="store_true", help="all batches to partition 0")
    parser.add_argument("--persisted", action="store_true", help="topic durability persisted")
    parser.add_argument("--driver", choices=("trio", "blocking"), default="trio")
    parser.add_argument("--repeat", type=int, default=1, help="run the whole table again")
    args = parser.parse_args(argv)
    settings = Settings(
        batches=args.batches,
        messages=args.messages,
        size=args.size,
        partitions=args.partitions,
        ordered=not args.unordered,
        persisted=args.persisted,
        driver=args.driver,
    )
    values = [int(v) for v in args.in_flight.split(",")]
    runs: list[list[Result]] = []
    for run in range(args.repeat):
        results = [run_one(settings, n) for n in values]
        runs.append(results)
        print(f"run {run + 1}:\n{_table(results, settings)}\n", flush=True)
    if len(runs) > 1:
        medians = [_median([run[i] for run in runs]) for i in range(len(values))]
        print(f"median of {len(runs)} runs:\n{_table(medians, settings)}", flush=True)
    return 0


def _median(results: list[Result]) -> Result:
    """Each figure's median over runs of the same N (a shared machine is noisy)."""
    figures = {
        name: statistics.median(getattr(r, name) for r in results)
        for name in Result.__dataclass_fields__
        if name != "in_flight"
    }
    return Result(in_flight=results[0].in_flight, **figures)


if __name__ == "__main__":
    sys.exit(main())
