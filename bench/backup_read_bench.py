"""How soon a backup serves a message its primary just acknowledged.

Run: ``python -m bench.backup_read_bench`` (``--help`` lists the options).

1. Starts a real 3-node cluster (``broker.cli.cluster.start_cluster``, what ``viewstream
   cluster up`` runs, with the production tick unless ``--tick-ms``) on free 127.0.0.1
   ports in a temporary directory, creates a stream and a one-partition topic, and asks
   each node's counters (``viewstream stats``) which one holds the partition's primary.
2. Sends ``--sends`` messages one at a time, ``--spacing`` seconds apart, through a client
   pinned to that primary. Once a send is acknowledged it polls the message's offset
   through a client pinned to a backup (the other backup on every other send), with plain
   polls issued one after another until one returns the message (bounded by
   ``--timeout`` per message), and records the time from the acknowledgement to that
   answer, and whether the first poll already returned it. With ``--long-poll`` it sends
   one long poll instead (viewstream's extension, what our SDK's consumers send), which
   the backup holds until it has applied the message.
3. Prints p50, p90, p99 and max of those times, and how many first polls returned the
   message (with ``--json PATH`` also writes them there, ``p99_ms`` and so on, which the
   performance page reads); then stops every node it started.

The backup learns that the message is committed from its primary: before prompt commits,
from the next prepare or the idle Commit heartbeat (every 50 ticks, 500 ms). It also
prints the machine's load (``/proc/loadavg``): the figures are noisy on a shared machine.
A measurement tool, not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Final

from bench.chaos.nodes import cluster_layout
from bench.runtime_bench import ROOT_PASSWORD
from broker.cli.cluster import start_cluster, stop_processes
from sdk import Client, ClientConfig, ConsumerRef, PollingStrategy

STREAM: Final = "backup-read"
TOPIC: Final = "t"
NODES: Final = 3
PRIMARY_WAIT_S: Final = 30.0
"""How long the bench waits for the partition's primary to be known on every node."""


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (linear interpolation, as the load bench)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


def _client(address: str) -> Client:
    """An SDK client of the one node at ``address`` (no routing), logged in as root."""
    return Client(ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD))


def _partition_primary(addresses: list[str], group: str) -> int:
    """The node whose replica of ``group`` is primary in normal status, in the highest
    view any node reports, once every node hosts the group (bounded wait)."""
    deadline = time.monotonic() + PRIMARY_WAIT_S
    while time.monotonic() < deadline:
        best: tuple[int, int] | None = None
        hosted = 0
        for index, address in enumerate(addresses):
            with _client(address) as client:
                entry = client.get_runtime_stats()["groups"].get(group)
            if entry is None:
                continue
            hosted += 1
            if entry.get("primary") and entry.get("status") == "normal":
                view = int(entry.get("view", 0))
                if best is None or view > best[0]:
                    best = (view, index)
        if best is not None and hosted == len(addresses):
            return best[1]
        time.sleep(0.1)
    raise RuntimeError(f"no primary of {group} within {PRIMARY_WAIT_S} s")


def run(
    sends: int,
    spacing_s: float,
    timeout_s: float,
    tick_ms: int | None,
    *,
    long_poll: bool,
    json_path: Path | None = None,
) -> None:
    print(f"load before: {_loadavg()}  (cores: {os.cpu_count()})")
    with tempfile.TemporaryDirectory(prefix="viewstream-backup-read-") as scratch:
        layout = cluster_layout(Path(scratch) / "cluster", NODES)
        processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=tick_ms, echo=False)
        try:
            addresses = layout.client_addresses
            with _client(addresses[0]) as admin:
                stream = admin.create_stream(STREAM)
                topic = admin.create_topic(STREAM, TOPIC, 1)
            partition = topic.partitions[0].id
            group = f"partition {stream.stream.id}/{topic.topic.id}/{partition}"
            primary = _partition_primary(addresses, group)
            backups = [i for i in range(NODES) if i != primary]
            print(f"partition primary: node {primary}; backups: nodes {backups}")
            latencies_ms: list[float] = []
            first_polls = 0
            polls = 0
            consumer = ConsumerRef.single(1)
            with (
                _client(addresses[primary]) as producer,
                _client(addresses[backups[0]]) as reader_a,
                _client(addresses[backups[1]]) as reader_b,
            ):
                readers = (reader_a, reader_b)
                for index in range(sends):
                    time.sleep(spacing_s)
                    payload = f"m{index}".encode()
                    confirmations = producer.send_messages(STREAM, TOPIC, [payload], partition)
                    acknowledged = time.monotonic()
                    assert confirmations, "the send's reply was lost"
                    offset = confirmations[0].base_offset
                    reader = readers[index % 2]
                    deadline = acknowledged + timeout_s
                    attempts = 0
                    while True:
                        if long_poll:
                            polled = reader.long_poll_messages(
                                STREAM,
                                TOPIC,
                                consumer=consumer,
                                polling_strategy=PollingStrategy.offset(offset),
                                count=1,
                                partition_id=partition,
                                max_wait_s=timeout_s,
                            )
                        else:
                            polled = reader.poll_messages(
                                STREAM,
                                TOPIC,
                                consumer=consumer,
                                polling_strategy=PollingStrategy.offset(offset),
                                count=1,
                                partition_id=partition,
                            )
                        attempts += 1
                        if polled.messages:
                            answered = time.monotonic()
                            assert bytes(polled.messages[0].payload) == payload
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"offset {offset} not served in {timeout_s} s")
                    latencies_ms.append((answered - acknowledged) * 1000)
                    first_polls += attempts == 1
                    polls += attempts
            kind = "long-polled" if long_poll else "polled"
            print(
                f"{sends} messages, each {kind} at a backup once its send was acknowledged "
                f"({spacing_s:g} s apart; time from the acknowledgement to the poll that "
                "returned it):"
            )
            print(
                f"  p50 {statistics.median(latencies_ms):.2f} ms  "
                f"p90 {_percentile(latencies_ms, 0.90):.2f} ms  "
                f"p99 {_percentile(latencies_ms, 0.99):.2f} ms  "
                f"max {max(latencies_ms):.2f} ms"
            )
            print(f"  first poll returned it: {first_polls} of {sends}; polls in all: {polls}")
            if json_path is not None:
                figures = {
                    "sends": sends,
                    "spacing_s": spacing_s,
                    "long_poll": long_poll,
                    "p50_ms": statistics.median(latencies_ms),
                    "p90_ms": _percentile(latencies_ms, 0.90),
                    "p99_ms": _percentile(latencies_ms, 0.99),
                    "max_ms": max(latencies_ms),
                    "first_polls_served": first_polls,
                    "polls": polls,
                }
                json_path.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        finally:
            stop_processes(processes)
    print(f"load after:  {_loadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=200, help="messages sent and read back")
    parser.add_argument("--spacing", type=float, default=0.05, help="seconds between sends")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds a message may take to be served"
    )
    parser.add_argument("--tick-ms", type=int, default=None, help="consensus tick (10 ms)")
    parser.add_argument(
        "--long-poll", action="store_true", help="one long poll (the node waits) per message"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    run(
        args.sends,
        args.spacing,
        args.timeout,
        args.tick_ms,
        long_poll=args.long_poll,
        json_path=args.json,
    )


if __name__ == "__main__":
    main()
