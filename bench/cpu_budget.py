"""CPU per batch, measured: the raw path against viewstream, with the same batches.

Run: ``python -m bench.cpu_budget`` (``--help`` for the options; about a minute).

Purpose: a lock-step producer's round trip is client work plus server work, and on a
shared 2-core machine wall-clock throughput is mostly noise; CPU seconds per batch are
not. This script drives, in one invocation and interleaved per producer count:

* **raw**: the raw ceiling's loopback path (``bench.load.ceiling``): a server process
  that appends each frame to a file and answers 8 bytes. Each frame is a SEND_MESSAGES
  request of the batch (256-byte header space and the body our SDK builds), so both
  paths move the same bytes per batch;
* **one node**: ``viewstream-bench pp`` against one node;
* **3 nodes**: the same against a 3-node cluster whose bench partitions all have the
  same primary (streams are recreated until each partition's primary is that node), so
  one node is the primary of every batch and the other two are backups of every batch.

Each with 1000-byte messages, 250 per batch, replicated durability, and 1 and 4
producers (connections on the raw path), one in flight each. For each it prints the
server's CPU µs per batch (every node's, from its process CPU clock over the load
window: ``bench.load.servers.process_cpu_s``), the client's CPU µs per batch (the load
generator's ``getrusage``; the raw client threads' ``thread_time``) and both ratios to
the raw path's at the same producer count.

``--json PATH`` writes the rows; the performance page (``python -m bench.load.perfpage``)
runs :func:`measure_budget` itself and shows the same table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "BudgetRow",
    "batch_frame",
    "measure_budget",
    "render_rows",
]

MESSAGE_SIZE: Final = 1000
MESSAGES_PER_BATCH: Final = 250
USERNAME: Final = "iggy"
PASSWORD: Final = "cpu-budget-password"
ALIGN_ATTEMPTS_MAX: Final = 40
"""Recreations of one stream until its partition's primary is the chosen node (each try
lands there with probability 1/3)."""
PRIMARY_WAIT_S: Final = 20.0
IDLE_WINDOW_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """CPU per batch of one process of one path.

    Attributes:
        path: ``raw``, ``one node`` or ``3 nodes``.
        producers: Producers (raw: connections), one batch in flight each.
        node: ``server`` (raw, one node), ``primary``, ``backup 1``, ``backup 2``.
        run: 1-based run of the invocation (``--runs``).
        batches: Batches the row's CPU is divided by.
        server_us: The node's CPU µs per batch over the load window.
        client_us: The load generator's CPU µs per batch (the same on every node's row).
        megabytes_per_second: User data (payload) throughput of the run.
        client_saturated: A load process used nearly all of a core.
        idle_cpu_percent: The node's CPU, in percent of a core, over
            ``IDLE_WINDOW_S`` with no load just before the run (its ticks and
            heartbeats; part of every per-batch figure).
    """

    path: str
    producers: int
    node: str
    run: int
    batches: int
    server_us: float | None
    client_us: float | None
    megabytes_per_second: float
    client_saturated: bool = False
    idle_cpu_percent: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def batch_frame(message_size: int = MESSAGE_SIZE, per_batch: int = MESSAGES_PER_BATCH) -> bytes:
    """The bytes of one SEND_MESSAGES request of the bench's batch: the request header's
    space and the body, as our SDK builds it."""
    from sdk.wire import (
        HEADER_SIZE,
        Identifier,
        OutgoingMessage,
        PartitionId,
        build_send_messages,
    )

    payload = os.urandom(message_size)
    messages = [OutgoingMessage(i + 1, payload, b"", 0) for i in range(per_batch)]
    body = build_send_messages(
        Identifier("bench-stream-1"),
        Identifier("topic-1"),
        PartitionId(0),
        messages,
        headroom=HEADER_SIZE,
    )
    return bytes(body)


def _raw(producers: int, batches: int, run: int) -> BudgetRow:
    from bench.load.ceiling import loopback_ceiling

    frame = batch_frame()
    per_connection = max(1, batches // producers)
    result = loopback_ceiling(len(frame), producers, per_connection, body=frame)
    user_bytes = MESSAGE_SIZE * MESSAGES_PER_BATCH * per_connection * producers
    return BudgetRow(
        path="raw",
        producers=producers,
        node="server",
        run=run,
        batches=per_connection * producers,
        server_us=result.server_us_per_frame,
        client_us=result.client_us_per_frame,
        megabytes_per_second=user_bytes / result.seconds / 1e6,
    )


def _params(addresses: Sequence[str], producers: int, batches: int, *, reuse: bool) -> Any:
    from bench.load.params import BenchParams, Durability, Kind, Range

    return BenchParams(
        kind=Kind.PINNED_PRODUCER,
        message_size=Range(MESSAGE_SIZE, MESSAGE_SIZE),
        messages_per_batch=Range(MESSAGES_PER_BATCH, MESSAGES_PER_BATCH),
        message_batches=max(1, batches // producers),
        producers=producers,
        password=PASSWORD,
        durability=Durability.REPLICATED,
        server_addresses=tuple(addresses),
        reuse_streams=reuse,
        processes=1,
    ).resolved()


def _idle_cpu_percent(addresses: Sequence[str], pids: Sequence[int]) -> dict[str, float | None]:
    """Each node's CPU over ``IDLE_WINDOW_S`` of no load, in percent of a core."""
    from bench.load.servers import process_cpu_s

    before = [process_cpu_s(pid) for pid in pids]
    started = time.monotonic()
    time.sleep(IDLE_WINDOW_S)
    after = [process_cpu_s(pid) for pid in pids]
    seconds = time.monotonic() - started
    return {
        address: None if a is None or b is None else (b - a) / seconds * 100.0
        for address, a, b in zip(addresses, before, after, strict=True)
    }


def _rows_of(
    path: str,
    run: int,
    report: dict[str, Any],
    roles: dict[str, str],
    idle: dict[str, float | None],
) -> list[BudgetRow]:
    budget = report["cpu_per_batch"]
    producers = next(g for g in report["group_metrics"] if g["group"] == "producers")
    rows = []
    for address, node in roles.items():
        rows.append(
            BudgetRow(
                path=path,
                producers=int(report["params"]["producers"]),
                node=node,
                run=run,
                batches=int(budget["batches"]),
                server_us=budget["server_us"].get(address),
                client_us=budget["client_us"],
                megabytes_per_second=float(producers["total_throughput_megabytes_per_second"]),
                client_saturated=bool(report["client"]["saturated"]),
                idle_cpu_percent=idle.get(address),
            )
        )
    return rows


def _one_node(producers: int, batches: int, run: int) -> list[BudgetRow]:
    from bench.load.params import Embedded
    from bench.load.report import build_report
    from bench.load.runner import run_benchmark
    from bench.load.servers import embedded_server

    with embedded_server(Embedded.SINGLE, username=USERNAME, password=PASSWORD) as server:
        idle = _idle_cpu_percent(server.addresses, server.pids)
        params = _params(server.addresses, producers, batches, reuse=False)
        report = build_report(run_benchmark(params))
        return _rows_of("one node", run, report, {server.addresses[0]: "server"}, idle)


def _partition_primary(addresses: Sequence[str], group_name: str) -> str | None:
    """The node whose counters say it is the primary of ``group_name`` (``None``: no
    node hosts it as primary yet)."""
    from sdk import Client, ClientConfig

    for address in addresses:
        config = ClientConfig.one_node(address, username=USERNAME, password=PASSWORD)
        with Client(config) as client:
            group = client.get_runtime_stats().get("groups", {}).get(group_name)
        if group is not None and group.get("primary"):
            return address
    return None


def _align_primaries(addresses: Sequence[str], streams: Sequence[str]) -> str:
    """Create ``streams`` (one replicated topic of one partition each) so that one node
    is the primary of every partition; return that node's address."""
    from bench.load.plan import TOPIC
    from sdk import Client, ClientConfig, NodeAddress

    seeds = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        seeds.append(NodeAddress(host, int(port)))
    config = ClientConfig(seeds=tuple(seeds), username=USERNAME, password=PASSWORD)
    target: str | None = None
    with Client(config) as client:
        for stream in streams:
            for _ in range(ALIGN_ATTEMPTS_MAX):
                if client.get_stream(stream) is not None:
                    client.delete_stream(stream)
                client.create_stream(stream)
                client.create_topic(stream, TOPIC, 1, durability="replicated")
                details, topic = client.get_stream(stream), client.get_topic(stream, TOPIC)
                assert details is not None and topic is not None
                name = f"partition {details.stream.id}/{topic.topic.id}/0"
                primary = _wait_primary(addresses, name)
                target = target or primary
                if primary == target:
                    break
            else:
                raise RuntimeError(f"{stream}: no partition primary on {target} after retries")
    assert target is not None
    return target


def _wait_primary(addresses: Sequence[str], group_name: str) -> str:
    deadline = time.monotonic() + PRIMARY_WAIT_S
    while time.monotonic() < deadline:
        primary = _partition_primary(addresses, group_name)
        if primary is not None:
            return primary
        time.sleep(0.05)
    raise RuntimeError(f"no node became the primary of {group_name}")


def _cluster(producers: int, batches: int, run: int) -> list[BudgetRow]:
    from bench.load.params import Embedded
    from bench.load.plan import stream_name
    from bench.load.report import build_report
    from bench.load.runner import run_benchmark
    from bench.load.servers import embedded_server

    with embedded_server(Embedded.CLUSTER, username=USERNAME, password=PASSWORD) as server:
        streams = [stream_name(i + 1) for i in range(producers)]
        primary = _align_primaries(server.addresses, streams)
        idle = _idle_cpu_percent(server.addresses, server.pids)
        params = _params(server.addresses, producers, batches, reuse=True)
        report = build_report(run_benchmark(params))
        roles = {primary: "primary"}
        backups = [a for a in server.addresses if a != primary]
        roles.update({a: f"backup {i + 1}" for i, a in enumerate(backups)})
        return _rows_of("3 nodes", run, report, roles, idle)


def measure_budget(
    producers: Sequence[int] = (1, 4),
    batches: int = 800,
    *,
    runs: int = 1,
    cluster: bool = True,
    echo: Callable[[str], None] = print,
) -> list[BudgetRow]:
    """Every row, interleaved: for each run and producer count, raw, one node, 3 nodes.

    Args:
        producers: Producer counts (raw: connections).
        batches: Batches per path and producer count, split over the producers.
        runs: Repetitions of the whole sequence.
        cluster: Measure the 3-node cluster too.
        echo: Where progress lines go.
    """
    rows: list[BudgetRow] = []
    for run in range(1, runs + 1):
        for n in producers:
            echo(f"cpu budget, run {run}: raw path, {n} connection(s)")
            rows.append(_raw(n, batches, run))
            echo(f"cpu budget, run {run}: one node, {n} producer(s)")
            rows += _one_node(n, batches, run)
            if cluster:
                echo(f"cpu budget, run {run}: 3 nodes, {n} producer(s)")
                rows += _cluster(n, batches, run)
    return rows


def raw_row(rows: Sequence[BudgetRow], row: BudgetRow) -> BudgetRow | None:
    """The raw path's row of ``row``'s run and producer count."""
    return next(
        (r for r in rows if r.path == "raw" and r.producers == row.producers and r.run == row.run),
        None,
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratios(rows: Sequence[BudgetRow], row: BudgetRow) -> tuple[float | None, float | None]:
    """``row``'s server and client CPU per batch over the raw path's."""
    raw = raw_row(rows, row)
    if raw is None:
        return None, None
    return _ratio(row.server_us, raw.server_us), _ratio(row.client_us, raw.client_us)


def render_rows(rows: Sequence[BudgetRow]) -> list[str]:
    """A Markdown table of ``rows`` with their ratios to the raw path."""

    def f(value: float | None, digits: int = 0) -> str:
        return "n/a" if value is None else f"{value:,.{digits}f}"

    lines = [
        "| path | producers | process | run | batches | server CPU µs/batch | x raw | "
        "client CPU µs/batch | x raw | MB/s | idle CPU % |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        server_x, client_x = ratios(rows, row)
        saturated = " (client saturated)" if row.client_saturated else ""
        lines.append(
            f"| {row.path} | {row.producers} | {row.node} | {row.run} | {row.batches} | "
            f"{f(row.server_us)} | {f(server_x, 2)} | {f(row.client_us)} | {f(client_x, 2)} | "
            f"{f(row.megabytes_per_second, 1)}{saturated} | {f(row.idle_cpu_percent, 2)} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cpu_budget",
        description="Server and client CPU per batch: the raw path against viewstream.",
    )
    parser.add_argument(
        "--producers",
        type=int,
        nargs="+",
        default=[1, 4],
        help="producer counts (default: 1 4)",
    )
    parser.add_argument(
        "--batches",
        type=int,
        default=800,
        help="batches per path and producer count, split over the producers (default: 800)",
    )
    parser.add_argument("--runs", type=int, default=1, help="repetitions, interleaved (default 1)")
    parser.add_argument("--no-cluster", action="store_true", help="skip the 3-node cluster")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.batches < max(args.producers) or min(args.producers) < 1 or args.runs < 1:
        parser.error("--batches must be at least the largest producer count; counts >= 1")
    rows = measure_budget(
        args.producers,
        args.batches,
        runs=args.runs,
        cluster=not args.no_cluster,
        echo=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print("\n".join(render_rows(rows)))
    if args.json is not None:
        args.json.write_text(json.dumps([r.to_json() for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
