"""A warm pinned consumer's CPU per poll, on both ends, against a round trip that does nothing.

Run: ``python -m bench.consumer_cpu [--batches 200] [--messages 250] [--size 1000]
[--rounds 10] [--json PATH]`` (about 30 s with the defaults on a quiet machine).

Purpose: a lock-step consumer's poll costs the client's CPU plus the node's, and on a
shared 2-core machine its wall-clock throughput is mostly noise; CPU per poll is not. This
starts one node (``bench.load.servers.embedded_server``), writes ``--batches`` batches of
``--messages`` messages of ``--size`` bytes to one partition (not measured), reads them all
once (warm: the journal's pages are cached), then alternates ``--rounds`` measured rounds:

* **poll**: the whole log polled by offset, one stored batch per poll, through the load
  generator's own poll (``bench.load.drivers.OursClient.poll``: every payload read as a
  view, as the performance page's ``pinned-consumer`` row does);
* **ping**: as many PINGs on the same session: what any request costs both ends (the
  frame, the connection's tasks, the SDK's call), whatever it asks for.

For each it prints the median over its rounds of the client's CPU µs per request (this
process's CPU clock, and the system part from ``getrusage``) and the node's (its process
CPU clock, and the system part from ``/proc/<pid>/stat``, 10 ms ticks). A poll's own cost
is its row minus the ping's.

This is a measurement tool, not a test: it asserts only that every poll returned the
messages written. Compare runs made back to back (two trees: run each in turn).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["ConsumerCpu", "measure"]

USERNAME: Final = "iggy"
PASSWORD: Final = "consumer-cpu-password"
STREAM: Final = "consumer-cpu"


@dataclass(frozen=True, slots=True)
class ConsumerCpu:
    """Median CPU per request over the rounds of one kind.

    Attributes:
        kind: ``poll`` or ``ping``.
        requests: Requests per round.
        rounds: Rounds measured.
        client_us: The client's CPU µs per request.
        client_system_us: Its system part.
        node_us: The node's CPU µs per request (None: not readable).
        node_system_us: Its system part (None: not readable).
    """

    kind: str
    requests: int
    rounds: int
    client_us: float
    client_system_us: float
    node_us: float | None
    node_system_us: float | None


def _node_system_s(pid: int) -> float | None:
    """The node's system CPU seconds, from ``/proc`` (None where there is none)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    return int(text.rpartition(")")[2].split()[12]) / os.sysconf("SC_CLK_TCK")


def _per_request(before: float | None, after: float | None, requests: int) -> float | None:
    if before is None or after is None:
        return None
    return (after - before) * 1e6 / requests


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) else None


async def _measure_async(
    address: str, pid: int, batches: int, messages: int, size: int, rounds: int
) -> list[ConsumerCpu]:
    from bench.load.drivers import OursClient
    from bench.load.plan import TOPIC
    from bench.load.servers import process_cpu_s
    from sdk import AsyncClient, ClientConfig, Message, NodeAddress

    host, _, port = address.rpartition(":")
    config = ClientConfig(
        seeds=(NodeAddress(host, int(port)),), username=USERNAME, password=PASSWORD
    )
    async with AsyncClient(config) as root:
        await root.create_stream(STREAM)
        await root.create_topic(STREAM, TOPIC, 1)
        batch = [Message(bytes([k % 251]) * size) for k in range(messages)]
        for _ in range(batches):
            await root.send_messages(STREAM, TOPIC, batch, 0)
        session = root.new_session()
        await session.connect()
        client = OursClient(session)
        try:

            async def poll_all() -> None:
                offset = 0
                for _ in range(batches):
                    polled = await client.poll(
                        STREAM, partition=0, group=None, offset=offset, count=messages,
                        consumer_id=1,
                    )  # fmt: skip
                    assert polled.messages == messages and polled.first_offset == offset, polled
                    assert polled.user_bytes == messages * size, polled
                    offset = polled.next_offset

            async def ping_all() -> None:
                for _ in range(batches):
                    await session.ping()

            kinds: dict[str, Callable[[], Awaitable[None]]] = {"poll": poll_all, "ping": ping_all}
            await poll_all()  # warm
            samples: dict[str, list[tuple[float, float, float | None, float | None]]] = {
                kind: [] for kind in kinds
            }
            for _ in range(rounds):
                for kind, run in kinds.items():
                    usage = resource.getrusage(resource.RUSAGE_SELF)
                    cpu = time.process_time()
                    node = process_cpu_s(pid)
                    node_system = _node_system_s(pid)
                    await run()
                    node_after = process_cpu_s(pid)
                    node_system_after = _node_system_s(pid)
                    cpu_after = time.process_time()
                    usage_after = resource.getrusage(resource.RUSAGE_SELF)
                    samples[kind].append(
                        (
                            (cpu_after - cpu) * 1e6 / batches,
                            (usage_after.ru_stime - usage.ru_stime) * 1e6 / batches,
                            _per_request(node, node_after, batches),
                            _per_request(node_system, node_system_after, batches),
                        )
                    )
        finally:
            await session.close()
    rows = []
    for kind, values in samples.items():
        client_us, client_system_us, node_us, node_system_us = zip(*values, strict=True)
        rows.append(
            ConsumerCpu(
                kind,
                batches,
                rounds,
                statistics.median(client_us),
                statistics.median(client_system_us),
                _median(list(node_us)),
                _median(list(node_system_us)),
            )
        )
    return rows


def measure(
    *, batches: int = 200, messages: int = 250, size: int = 1000, rounds: int = 10
) -> list[ConsumerCpu]:
    """Start one node, fill one partition, and measure (see the module docstring)."""
    import trio

    from bench.load.params import Embedded
    from bench.load.servers import embedded_server

    assert batches >= 1 and messages >= 1 and size >= 1 and rounds >= 1
    with embedded_server(Embedded.SINGLE, username=USERNAME, password=PASSWORD) as server:
        (address,) = server.addresses
        (pid,) = server.pids
        return trio.run(_measure_async, address, pid, batches, messages, size, rounds)


def render(rows: list[ConsumerCpu]) -> list[str]:
    """The rows as a Markdown table."""

    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.0f}"

    lines = [
        "| request | per round | rounds | client CPU µs | client system µs | node CPU µs "
        "| node system µs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.kind} | {row.requests} | {row.rounds} | {fmt(row.client_us)} | "
            f"{fmt(row.client_system_us)} | {fmt(row.node_us)} | {fmt(row.node_system_us)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200, help="batches written and polled")
    parser.add_argument("--messages", type=int, default=250, help="messages per batch")
    parser.add_argument("--size", type=int, default=1000, help="payload bytes per message")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds of each kind")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    if min(args.batches, args.messages, args.size, args.rounds) < 1:
        parser.error("--batches, --messages, --size and --rounds must be at least 1")
    rows = measure(batches=args.batches, messages=args.messages, size=args.size, rounds=args.rounds)
    print("\n".join(render(rows)))
    if args.json is not None:
        document: dict[str, Any] = {"rows": [asdict(row) for row in rows]}
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
