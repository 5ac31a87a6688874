"""Real viewstream processes for the SDK tests: one node, a 3-node cluster, kill -9, restart.

The node is ``tests.runtime.processes.start_node`` (``viewstream serve`` on port 0 in a
temporary directory); the cluster is ``broker.cli.cluster`` (what ``viewstream
cluster up`` runs) with a 5 ms tick, so a view change after a kill takes a second or two.
Every process binds 127.0.0.1, every wait is bounded, and whoever starts a process kills
it by its pid in teardown.

Which replica is the primary of which group comes from the nodes themselves: each
node's per-group counters (command 9000, what ``viewstream stats`` prints) say whether
its replica of a group is primary, in which view and with which status.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import (
    ClusterLayout,
    start_cluster,
    start_node_process,
    stop_processes,
    wait_ready,
)
from broker.core.handlers import RUNTIME_STATS_CODE
from sdk import wire
from tests.runtime.processes import ROOT_PASSWORD
from tests.wire_client import WireClient

TICK_MS: Final = 5
"""Consensus tick of the test clusters (the default 10 ms makes view changes slower)."""
KILL_WAIT_S: Final = 15.0
STATS_TIMEOUT_S: Final = 5.0
PORT_TRIES: Final = 20
METADATA_GROUP_NAME: Final = "metadata"


def node_url(address: str, **options: str) -> str:
    """A connection string for the root user of a test node."""
    query = "&".join(f"{key}={value}" for key, value in options.items())
    base = f"iggy://iggy:{ROOT_PASSWORD}@{address}"
    return f"{base}?{query}" if query else base


def partition_group_name(stream_id: int, topic_id: int, partition_id: int) -> str:
    """How the node's counters name a partition's group."""
    return f"partition {stream_id}/{topic_id}/{partition_id}"


def runtime_stats(address: str, timeout_s: float = STATS_TIMEOUT_S) -> dict[str, Any]:
    """One node's counters (``viewstream stats --json``'s ``runtime`` part).

    Raises:
        OSError: the node does not answer.
        wire.ServerRejected: it refused the login (e.g. still opening).
    """
    with WireClient(address, timeout_s=timeout_s) as client:
        client.login("iggy", ROOT_PASSWORD)
        frame = client.call_raw(RUNTIME_STATS_CODE)
        if frame.reply_header().status != 0:
            raise wire.ServerRejected(frame.reply_header().status)
        report: dict[str, Any] = json.loads(bytes(frame.body))
        return report


@dataclass
class RealCluster:
    """A running local cluster whose nodes can be killed and restarted."""

    layout: ClusterLayout
    processes: list[subprocess.Popen[bytes]]
    kills: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, folder: Path, nodes: int = 3) -> RealCluster:
        layout = cluster_layout(folder, nodes)
        processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
        return cls(layout, processes)

    @property
    def addresses(self) -> list[str]:
        return self.layout.client_addresses

    def url(self, index: int = 0, **options: str) -> str:
        return node_url(self.addresses[index], **options)

    def alive(self, index: int) -> bool:
        return self.processes[index].poll() is None

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (a crash) and reap it."""
        process = self.processes[index]
        if process.poll() is None:
            process.kill()
        process.wait(timeout=KILL_WAIT_S)
        self.kills.append(index)

    def restart(self, index: int) -> None:
        """Start node ``index`` again on its data directory and ports; wait until it
        listens."""
        assert not self.alive(index), "restart a node that is down"
        process = start_node_process(
            self.layout, index, root_password=ROOT_PASSWORD, tick_ms=TICK_MS
        )
        self.processes[index] = process
        try:
            wait_ready(self.layout, [process], [index])
        except BaseException:
            stop_processes([process])
            raise

    def stats(self, index: int) -> dict[str, Any] | None:
        """Node ``index``'s counters, or ``None`` if it does not answer."""
        if not self.alive(index):
            return None
        try:
            return runtime_stats(self.addresses[index])
        except (OSError, wire.ServerRejected, wire.SessionEvicted, wire.ProtocolError):
            return None

    def primary_of(self, group: str) -> int | None:
        """The node whose replica of ``group`` is a primary in normal status, in the
        highest view any live node reports (``None`` during a view change)."""
        best: tuple[int, int] | None = None
        for index in range(self.layout.nodes):
            report = self.stats(index)
            entry = None if report is None else report["groups"].get(group)
            if entry is None or not entry.get("primary") or entry.get("status") != "normal":
                continue
            view = int(entry.get("view", 0))
            if best is None or view > best[0]:
                best = (view, index)
        return None if best is None else best[1]

    def wait_primary_of(self, group: str, timeout_s: float = 20.0) -> int:
        """:meth:`primary_of`, waiting (bounded) until there is one."""
        deadline = time.monotonic() + timeout_s
        while True:
            primary = self.primary_of(group)
            if primary is not None:
                return primary
            assert time.monotonic() < deadline, f"no primary of {group} within {timeout_s}s"
            time.sleep(0.1)

    def forwarded(self) -> list[int]:
        """Each live node's count of requests it forwarded to another node's primary."""
        counts = []
        for index in range(self.layout.nodes):
            report = self.stats(index)
            counts.append(0 if report is None else int(report["node"]["forwarded"]))
        return counts

    def stop(self) -> None:
        """Kill every node by pid and reap it (teardown)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=KILL_WAIT_S)
