"""Bugs the chaos runs found, each reduced to a small real-process reproduction.

Each test states the correct behaviour. While a bug stands its test is marked
``xfail(strict=True)``: it runs in CI, fails as expected, and turns into an unexpected
pass (which ``xfail_strict`` reports as a failure) the day the bug is fixed, so its marker
must then be removed; fixed ones stay here as regression tests. ``docs/reliability.md``
("Findings") tells the story of each.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bench.chaos.nodes import ChaosCluster
from bench.chaos.run import all_stats, converged
from sdk import AsyncClient, ClientConfig, ConsumerRef, NodeAddress, PollingStrategy, wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.wire_client import WireClient

REPAIR_OPS = 300
"""More ops than a replica repairs one by one (``consensus.config.REPAIR_OPS_MAX``)."""


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data_dir: Path = tmp_path_factory.mktemp("known-bugs") / "data"
    process = start_node(data_dir)
    try:
        yield process
    finally:
        process.kill()


def test_closing_one_connection_of_a_session_leaves_the_session_to_its_other_connections(
    single: NodeProcess,
) -> None:
    with WireClient(single.address) as first:
        session = first.login("iggy", ROOT_PASSWORD)
        first.call(CommandCode.GET_STREAMS, wire.Empty())
        with WireClient(single.address) as second:
            # The second connection joins the session: a login under the same client id.
            second.client_id = first.client_id
            assert second.login("iggy", ROOT_PASSWORD) == session
            second.call(CommandCode.GET_STREAMS, wire.Empty())
        time.sleep(0.5)  # let the node act on the closed connection
        first.call(CommandCode.GET_STREAMS, wire.Empty())  # evicted: NO_SESSION


@pytest.fixture
def cluster() -> Iterator[ChaosCluster]:
    with tempfile.TemporaryDirectory(prefix="viewstream-known-bugs-") as folder:
        running = ChaosCluster(
            Path(folder),
            root_password=ROOT_PASSWORD,
            cluster_secret="known-bugs-cluster-secret-0123",
        )
        try:
            running.start()
            yield running
        finally:
            running.close()


async def _far_behind_replica_serves_everything(cluster: ChaosCluster) -> None:
    seeds = tuple(
        NodeAddress(a.rpartition(":")[0], int(a.rpartition(":")[2]))
        for a in cluster.client_addresses
    )
    config = ClientConfig(
        seeds=seeds, username="iggy", password=ROOT_PASSWORD, retry_deadline_s=60.0
    )
    async with AsyncClient(config) as client:
        await client.create_stream("behind")
        await client.create_topic("behind", "t", 1)
        await client.send_messages("behind", "t", [b"first"], 0)
        # Stop a node that is neither the metadata primary nor the partition's primary,
        # so the cluster keeps its quorum and nothing fails over.
        reports = await all_stats(cluster)
        primaries = {
            index
            for index, report in enumerate(reports)
            if report is not None
            for entry in report["groups"].values()
            if entry["primary"]
        }
        victim = next(i for i in range(cluster.count) if i not in primaries)
        await trio.to_thread.run_sync(cluster.kill, victim)
        for i in range(REPAIR_OPS):
            await client.send_messages("behind", "t", [f"m{i}".encode()], 0)
        await trio.to_thread.run_sync(cluster.restart, victim)
        with trio.fail_after(60):
            while True:
                if converged(await all_stats(cluster), {}) is None:
                    break
                await trio.sleep(0.25)
        await client.send_messages("behind", "t", [b"after the restart"], 0)
    address = cluster.client_addresses[victim]
    host, _, port = address.rpartition(":")
    alone = ClientConfig(
        seeds=(NodeAddress(host, int(port)),),
        username="iggy",
        password=ROOT_PASSWORD,
        cluster_discovery=False,
    )
    first: int | None = None
    async with AsyncClient(alone) as reader:
        with trio.move_on_after(30):
            while True:
                polled = await reader.poll_messages(
                    "behind",
                    "t",
                    consumer=ConsumerRef.single(1),
                    polling_strategy=PollingStrategy.offset(0),
                    count=10,
                    partition_id=0,
                )
                if polled.messages:
                    first = polled.messages[0].offset
                    break
                await trio.sleep(0.2)
    assert first == 0, f"node {victim} serves the partition from offset {first} (None: nothing)"


def test_a_replica_restarted_far_behind_serves_the_partition_from_offset_zero(
    cluster: ChaosCluster,
) -> None:
    trio.run(_far_behind_replica_serves_everything, cluster)


async def _stored_offset_after_restart(cluster: ChaosCluster) -> list[str]:
    seeds = tuple(
        NodeAddress(a.rpartition(":")[0], int(a.rpartition(":")[2]))
        for a in cluster.client_addresses
    )
    config = ClientConfig(
        seeds=seeds, username="iggy", password=ROOT_PASSWORD, retry_deadline_s=60.0
    )
    consumer = ConsumerRef.single(7)
    async with AsyncClient(config) as client:
        await client.create_stream("offsets")
        await client.create_topic("offsets", "t", 1)
        await client.send_messages("offsets", "t", [f"m{i}".encode() for i in range(10)], 0)
        for offset in range(1, 9):
            await client.store_consumer_offset(
                "offsets", "t", offset, consumer=consumer, partition_id=0
            )
    await trio.to_thread.run_sync(cluster.kill_all)
    for node in cluster.nodes:
        await trio.to_thread.run_sync(cluster.launch, node.index)
    for node in cluster.nodes:
        await trio.to_thread.run_sync(cluster.wait_ready, node.index)
    stale: list[str] = []

    async def watch(address: str) -> None:
        host, _, port = address.rpartition(":")
        alone = ClientConfig(
            seeds=(NodeAddress(host, int(port)),),
            username="iggy",
            password=ROOT_PASSWORD,
            cluster_discovery=False,
            request_timeout_s=2.0,
            retry_deadline_s=10.0,
        )
        async with AsyncClient(alone) as reader:
            for _ in range(40):
                found = await reader.get_consumer_offset(
                    "offsets", "t", consumer=consumer, partition_id=0
                )
                stored = None if found is None else found.stored_offset
                if stored != 8:
                    stale.append(f"{address} answered {stored}")
                await trio.sleep(0.05)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for address in cluster.client_addresses:
                nursery.start_soon(watch, address)
    return stale


def test_a_stored_consumer_offset_never_reads_older_after_every_node_restarts(
    cluster: ChaosCluster,
) -> None:
    stale = trio.run(_stored_offset_after_restart, cluster)
    assert not stale, f"{len(stale)} stale answers, first: {stale[:5]}"
