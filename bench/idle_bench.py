"""CPU of idle partition groups: what a node pays for partitions nobody uses.

Run: ``python -m bench.idle_bench node --partitions 3000`` or
``python -m bench.idle_bench groups --groups 10000`` (``--help`` lists the options).

* ``node``: starts one real node process (``viewstream serve``) on 127.0.0.1 in a
  temporary directory, with its descriptor limit raised to the hard limit, a partition
  reserve that fits ``--partitions`` and few client connections (so both fit); creates
  topics of at most 1,000 partitions each (the per-request limit) until ``--partitions``
  exist and are open; lets it settle; then
  reads the process's CPU time (utime + stime of ``/proc/<pid>/stat``) over ``--seconds``
  of wall time with nothing connected, and reports it as a share of one core.
* ``groups``: in this process, ``--groups`` partition groups (``GroupHost``, a lone
  replica each, the real partition state machine) on memory storage (the journal's
  ``MemoryStorage``: ten thousand groups on files would need more descriptors than a
  process may have), driven by the node's ticker for ``--seconds`` of trio's real clock;
  reports the CPU time of the process over that wall time. Nothing but ticks reaches the
  groups: it is the per-tick cost of hosting them.

This is a measurement tool, not a test: it asserts nothing about speed. Figures are noisy
on a shared machine; compare runs made back to back.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from bench.runtime_bench import ROOT_PASSWORD, _free_port, _runtime_stats, _wait_line

_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"
PARTITIONS_PER_TOPIC_MAX: Final = 1000
"""Partitions one CREATE_TOPIC may ask for."""
DESCRIPTORS_PER_PARTITION: Final = 5
"""What the node charges an open partition (``PARTITION_DESCRIPTORS_CHARGED``)."""
CONNECTIONS_MAX: Final = 64
"""The node's client connections (``limits.connections_max``): the bench's only."""


# -- one real node ----------------------------------------------------------------------------


def _raise_descriptor_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _cpu_ticks(pid: int) -> int:
    """utime + stime of process ``pid``, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _create_topics(address: str, partitions: int) -> None:
    from sdk import Client, ClientConfig

    with Client(ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD)) as client:
        client.create_stream("idle")
        topic = 0
        while partitions > 0:
            count = min(partitions, PARTITIONS_PER_TOPIC_MAX)
            topic += 1
            client.create_topic("idle", f"t{topic}", count)
            partitions -= count


def _wait_open(address: str, partitions: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        groups = _runtime_stats(address)["groups"]
        assert isinstance(groups, dict)
        ready = sum(
            1 for name, entry in groups.items() if name.startswith("partition") and "view" in entry
        )
        if ready >= partitions:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {ready} of {partitions} partitions opened")
        time.sleep(1)


def run_node(partitions: int, seconds: float, settle_s: float) -> float:
    """The share of a core one idle node with ``partitions`` partitions uses."""
    with tempfile.TemporaryDirectory(prefix="viewstream-idle-") as scratch:
        folder = Path(scratch)
        environment = dict(os.environ)
        environment["VIEWSTREAM_ROOT_PASSWORD"] = ROOT_PASSWORD
        environment["VIEWSTREAM_LOG_LEVEL"] = "warning"
        environment["VIEWSTREAM_HTTP_ADDRESS"] = ""  # port 3000 is not ours to take
        reserve = (partitions + 16) * DESCRIPTORS_PER_PARTITION
        environment["VIEWSTREAM_LIMITS__PARTITION_DESCRIPTORS_RESERVED"] = str(reserve)
        # Room for the reserve under the hard limit: nothing connects but the bench.
        environment["VIEWSTREAM_LIMITS__CONNECTIONS_MAX"] = str(CONNECTIONS_MAX)
        address = f"127.0.0.1:{_free_port()}"
        _raise_descriptor_limit()  # the node inherits it
        command = [sys.executable, "-c", _LAUNCH, "serve", "--address", address]
        command += ["--ws-address", ""]
        command += ["--data-dir", str(folder / "node")]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=folder,
        )
        try:
            _wait_line(process, "viewstream listening on ")
            _create_topics(address, partitions)
            _wait_open(address, partitions)
            time.sleep(settle_s)
            ticks_per_s = os.sysconf("SC_CLK_TCK")
            before, started = _cpu_ticks(process.pid), time.monotonic()
            time.sleep(seconds)
            after, ended = _cpu_ticks(process.pid), time.monotonic()
            return (after - before) / ticks_per_s / (ended - started)
        finally:
            process.kill()
            process.wait(timeout=30)


# -- idle groups in this process ----------------------------------------------------------------


def run_groups(groups: int, seconds: float, settle_s: float) -> float:
    """The share of a core ``groups`` idle lone partition groups and their ticker use."""
    import trio

    from broker.runtime import store
    from broker.runtime.group import (
        DescriptorReserve,
        GroupHost,
        GroupKind,
        GroupTicker,
        PartitionIds,
    )
    from broker.runtime.node import run_ticker
    from consensus import ReplicaConfig
    from journal.memory_storage import MemoryStorage

    class _Memory(MemoryStorage):
        def close(self) -> None:
            pass

    def memory_storage(path: Path, *, no_sync: bool) -> tuple[_Memory, _Memory]:
        storage = _Memory(random.Random(0))
        return storage, storage

    store._storage = memory_storage  # type: ignore[assignment]

    async def main() -> float:
        with tempfile.TemporaryDirectory(prefix="viewstream-idle-") as scratch:
            ticker = GroupTicker()
            hosts = [
                GroupHost(
                    group_id=1 + index,
                    kind=GroupKind.PARTITION,
                    path=Path(scratch) / str(index),
                    replica_index=0,
                    replica_count=1,
                    persisted=False,
                    no_sync=True,
                    segment_size_bytes=1 << 20,
                    replica_config=ReplicaConfig(state_transfer=False),
                    send=lambda group, replica, message: None,
                    on_applied=lambda host: None,
                    prng=random.Random(index),
                    partition=PartitionIds(1, 1, 1 + index, 1),
                    descriptors=DescriptorReserve(),
                    ticker=ticker,
                )
                for index in range(groups)
            ]
            async with trio.open_nursery() as nursery:
                for host in hosts:
                    await nursery.start(host.run)
                nursery.start_soon(run_ticker, 0.01, ticker)  # as Node._ticker
                await trio.sleep(settle_s)
                cpu, wall = time.process_time(), time.monotonic()
                await trio.sleep(seconds)
                share = (time.process_time() - cpu) / (time.monotonic() - wall)
                nursery.cancel_scope.cancel()
            return share

    return trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["node", "groups"])
    parser.add_argument("--partitions", type=int, default=1000, help="node: partitions")
    parser.add_argument("--groups", type=int, default=10000, help="groups: partition groups")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured wall time")
    parser.add_argument("--settle", type=float, default=5.0, help="idle time before measuring")
    args = parser.parse_args()
    if args.mode == "node":
        share = run_node(args.partitions, args.seconds, args.settle)
        what = f"one idle node, {args.partitions} partitions"
    else:
        share = run_groups(args.groups, args.seconds, args.settle)
        what = f"{args.groups} idle lone partition groups in-process"
    print(f"{what}: {share * 100:.1f}% of a core over {args.seconds:g} s")


if __name__ == "__main__":
    main()
