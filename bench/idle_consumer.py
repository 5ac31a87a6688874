"""An idle consumer and its node: CPU while nothing happens, latency when something does.

Run: ``python -m bench.idle_consumer`` (``--help`` lists the options;
``--no-long-poll`` measures the consumer's back-off polling instead, for comparison).

1. Starts one real node process (``viewstream serve``) on 127.0.0.1 in a temporary
   directory, creates a stream and a one-partition topic, and starts a consumer process:
   our SDK's blocking consumer with its default settings (long polls on), reading the
   topic from the start and printing, for each message, the moment it got it.
2. Idle: lets both settle, then reads the CPU time (utime + stime of ``/proc/<pid>/stat``)
   of the node process and of the consumer process over ``--seconds`` of wall time with
   nothing sent, and prints each one's and their sum's share of one core.
3. Latency: sends ``--sends`` messages one at a time, ``--spacing`` seconds apart (the
   consumer waits for each: it is idle in between), each carrying the moment just before
   its send (``time.monotonic``, one clock for every process of the machine); the
   consumer's moment of receipt minus that is the message's delivery latency (the send's
   round trip to the commit included). Prints p50, p90, p99 and max.

It also prints the machine's load (``/proc/loadavg``) before and after: the figures are
noisy on a shared machine. ``--json PATH`` also writes the figures (the performance page,
``python -m bench.load.perfpage``, runs this and reads them). A measurement tool, not a
test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Final

from bench.idle_bench import _cpu_ticks
from bench.runtime_bench import ROOT_PASSWORD, _free_port, _pinned_client, _wait_line

_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"
STREAM: Final = "idle"
TOPIC: Final = "t"
RECEIVED_PREFIX: Final = "received "
READY_LINE: Final = "consumer ready"
RECEIVE_TIMEOUT_S: Final = 10.0
"""How long the bench waits for the consumer to report one message before it gives up."""


def consume(address: str, *, long_poll: bool) -> None:
    """The consumer process: read the topic from the start; print each message's payload
    and the moment it arrived."""
    from sdk import Client, ClientConfig, PollingStrategy

    config = ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD)
    with (
        Client(config) as client,
        client.consumer(STREAM, TOPIC, start=PollingStrategy.first(), long_poll=long_poll) as c,
    ):
        print(READY_LINE, flush=True)
        for message in c:
            now = time.monotonic()
            print(f"{RECEIVED_PREFIX}{message.payload.decode()} {now!r}", flush=True)


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _share(ticks: int, seconds: float) -> float:
    return ticks / os.sysconf("SC_CLK_TCK") / seconds


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def run(
    seconds: float, sends: int, spacing_s: float, settle_s: float, *, long_poll: bool
) -> dict[str, float]:
    """Measure as the module says; return the figures (shares in percent of a core,
    latencies in milliseconds)."""
    figures: dict[str, float] = {}
    print(f"load before: {_loadavg()}  (cores: {os.cpu_count()})")
    with tempfile.TemporaryDirectory(prefix="viewstream-idle-consumer-") as scratch:
        folder = Path(scratch)
        environment = dict(os.environ)
        environment["VIEWSTREAM_ROOT_PASSWORD"] = ROOT_PASSWORD
        environment["VIEWSTREAM_LOG_LEVEL"] = "warning"
        address = f"127.0.0.1:{_free_port()}"
        command = [sys.executable, "-c", _LAUNCH, "serve", "--address", address]
        command += ["--data-dir", str(folder / "node")]
        node = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
        consumer: subprocess.Popen[str] | None = None
        try:
            _wait_line(node, "viewstream listening on ")
            with _pinned_client(address) as client:
                client.create_stream(STREAM)
                client.create_topic(STREAM, TOPIC, 1)
            consumer_command = [sys.executable, "-m", "bench.idle_consumer", "consume"]
            consumer_command += ["--address", address]
            if not long_poll:
                consumer_command.append("--no-long-poll")
            consumer = subprocess.Popen(consumer_command, stdout=subprocess.PIPE, text=True)
            _wait_line(consumer, READY_LINE)
            lines: queue.Queue[str] = queue.Queue()

            def pump() -> None:
                assert consumer is not None and consumer.stdout is not None
                for line in consumer.stdout:
                    lines.put(line)

            threading.Thread(target=pump, daemon=True).start()
            time.sleep(settle_s)
            node_before, consumer_before = _cpu_ticks(node.pid), _cpu_ticks(consumer.pid)
            started = time.monotonic()
            time.sleep(seconds)
            node_after, consumer_after = _cpu_ticks(node.pid), _cpu_ticks(consumer.pid)
            wall = time.monotonic() - started
            node_share = _share(node_after - node_before, wall)
            consumer_share = _share(consumer_after - consumer_before, wall)
            mode = "long polls" if long_poll else "back-off polling (long polls off)"
            print(f"idle consumer ({mode}) on an idle topic, {wall:.1f} s of wall time:")
            print(f"  node     {node_share * 100:6.2f} % of a core")
            print(f"  consumer {consumer_share * 100:6.2f} % of a core")
            print(f"  together {(node_share + consumer_share) * 100:6.2f} % of a core")
            figures["idle_seconds"] = wall
            figures["node_percent"] = node_share * 100
            figures["consumer_percent"] = consumer_share * 100
            figures["together_percent"] = (node_share + consumer_share) * 100

            latencies_ms: list[float] = []
            with _pinned_client(address) as producer:
                for index in range(sends):
                    time.sleep(spacing_s)
                    sent_at = time.monotonic()
                    producer.send_messages(STREAM, TOPIC, [f"{index} {sent_at!r}".encode()])
                    line = lines.get(timeout=RECEIVE_TIMEOUT_S)
                    assert line.startswith(RECEIVED_PREFIX), line
                    number, sent, received = line[len(RECEIVED_PREFIX) :].split()
                    assert int(number) == index, line
                    latencies_ms.append((float(received) - float(sent)) * 1000)
            print(
                f"delivery latency of {sends} messages sent {spacing_s:g} s apart to the "
                "waiting consumer (before the send to the consumer's receipt):"
            )
            print(
                f"  p50 {statistics.median(latencies_ms):.2f} ms  "
                f"p90 {_percentile(latencies_ms, 0.90):.2f} ms  "
                f"p99 {_percentile(latencies_ms, 0.99):.2f} ms  "
                f"max {max(latencies_ms):.2f} ms"
            )
            figures["sends"] = float(sends)
            figures["p50_ms"] = statistics.median(latencies_ms)
            figures["p99_ms"] = _percentile(latencies_ms, 0.99)
            figures["max_ms"] = max(latencies_ms)
        finally:
            for process in (consumer, node):
                if process is not None:
                    process.kill()
                    process.wait(timeout=30)
    print(f"load after:  {_loadavg()}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=["run", "consume"], default="run")
    parser.add_argument("--seconds", type=float, default=60.0, help="idle wall time measured")
    parser.add_argument("--settle", type=float, default=5.0, help="idle time before measuring")
    parser.add_argument("--sends", type=int, default=200, help="messages sent for latency")
    parser.add_argument("--spacing", type=float, default=0.1, help="seconds between sends")
    parser.add_argument("--no-long-poll", action="store_true", help="the consumer backs off")
    parser.add_argument("--address", help="consume: the node")
    parser.add_argument("--json", type=Path, default=None, help="run: also write the figures here")
    args = parser.parse_args()
    if args.mode == "consume":
        consume(args.address, long_poll=not args.no_long_poll)
        return
    figures = run(
        args.seconds, args.sends, args.spacing, args.settle, long_poll=not args.no_long_poll
    )
    if args.json is not None:
        args.json.write_text(json.dumps(figures) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
