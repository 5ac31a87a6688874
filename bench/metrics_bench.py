"""What a Prometheus scrape of a node costs: ``render_metrics`` on a node with N partitions.

Purpose: measure the render (the work behind ``GET /metrics``) where it runs, on the
node's event loop, for a node hosting many partition groups: the figure that says whether
a scrape every few seconds disturbs the node.

Theory of operation: one node runs in this process (real sockets and files, no fsync,
in a temporary directory); a client creates a topic with ``--partitions`` partitions and
sends a message to each, so every series has a value; once every group is open, the
render runs ``--renders`` times on the node's loop and the script prints the fastest,
median and slowest, the body size and the number of samples. Run:

    python -m bench.metrics_bench --partitions 1000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Final

import trio

from broker.runtime.config import load_config
from broker.runtime.metrics import render_metrics
from broker.runtime.node import Node

PASSWORD: Final = "metrics-bench-password"
TOPIC_PARTITIONS_MAX: Final = 1000
"""Partitions one CREATE_TOPIC may ask for (Iggy's limit)."""
OPEN_TIMEOUT_S: Final = 600.0


async def _measure(data_dir: Path, partitions: int, renders: int) -> dict[str, float]:
    from sdk import AsyncClient, ClientConfig, Partitioning

    config = load_config(
        address="127.0.0.1:0",
        ws_address="",
        data_dir=data_dir,
        root_password=PASSWORD,
        no_sync=True,
        password_hash_cost_log2=10,
        limits={"partition_descriptors_reserved": 5 * (partitions + 16)},
    )
    node = Node(config, announce=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        assert node.address is not None
        address = f"{node.address[0]}:{node.address[1]}"
        settings = ClientConfig.one_node(address, username="iggy", password=PASSWORD)
        async with AsyncClient(settings.replace(request_timeout_s=120, retry_deadline_s=600)) as c:
            await c.create_stream("bench")
            topics = -(-partitions // TOPIC_PARTITIONS_MAX)
            for index in range(topics):
                count = min(TOPIC_PARTITIONS_MAX, partitions - index * TOPIC_PARTITIONS_MAX)
                await c.create_topic("bench", f"t{index}", count)
            with trio.fail_after(OPEN_TIMEOUT_S):
                for host in list(node.groups.values()):
                    await host.opened.wait()
            for index in range(topics):
                count = min(TOPIC_PARTITIONS_MAX, partitions - index * TOPIC_PARTITIONS_MAX)
                for partition in range(count):
                    await c.send_messages(
                        "bench", f"t{index}", [b"x"], Partitioning.partition_id(partition)
                    )
        times_s = []
        body = b""
        for _ in range(renders):
            started = time.perf_counter()
            body, _ = render_metrics(node)
            times_s.append(time.perf_counter() - started)
        node.request_shutdown()
        await node.stopped.wait()
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {
        "groups": float(len(node.groups)),
        "render_s_min": min(times_s),
        "render_s_median": statistics.median(times_s),
        "render_s_max": max(times_s),
        "body_bytes": float(len(body)),
        "samples": float(samples),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--renders", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="viewstream-metrics-") as folder:
        result = trio.run(_measure, Path(folder) / "data", args.partitions, args.renders)
    print(
        f"{int(result['groups'])} groups, {int(result['samples'])} samples, "
        f"{int(result['body_bytes'])} bytes: render "
        f"min {result['render_s_min'] * 1000:.1f} ms, "
        f"median {result['render_s_median'] * 1000:.1f} ms, "
        f"max {result['render_s_max'] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
