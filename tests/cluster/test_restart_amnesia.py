"""A replica whose journal lost everything it held must not restart as a fresh replica.

Found by ``viewstream-chaos --seed 3`` (fault 1, ``truncate-tail``): the primary of a
partition group that had committed one op (the group had never written a superblock) was
killed and the op's record torn from its journal. It restarted as a brand-new replica,
primary of view 0 with an empty log, while both backups held op 1 committed: the group
stopped taking writes for good (and a fresh primary could have reused op 1 for another
prepare). A group directory that already existed must restart through recovery
(``Status.RECOVERING``), which asks the other replicas for the view and the log.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bench.chaos import segments
from bench.chaos.nodes import ChaosCluster
from bench.chaos.run import all_stats, primary_of, wait_recovered
from bench.chaos.workload import Workload, WorkloadConfig
from broker.runtime.store import GroupStore
from consensus.protocols import DurableState

PASSWORD = "amnesia-root-password"
GROUP = "partition 0/0/1"


def test_a_reopened_group_directory_is_not_a_fresh_replica(tmp_path: Path) -> None:
    store = GroupStore(tmp_path / "group", no_sync=True, segment_size_bytes=1 << 20)
    assert store.recovered().durable is None  # created just now: a fresh replica
    store.close()
    reopened = GroupStore(tmp_path / "group", no_sync=True, segment_size_bytes=1 << 20)
    try:
        assert reopened.recovered().durable == DurableState(
            view=0, log_view=0, commit=0, checkpoint=0
        )
    finally:
        reopened.close()


@pytest.fixture
def cluster() -> Iterator[ChaosCluster]:
    with tempfile.TemporaryDirectory(prefix="viewstream-amnesia-") as folder:
        running = ChaosCluster(
            Path(folder), root_password=PASSWORD, cluster_secret="amnesia-cluster-secret-0123"
        )
        try:
            running.start()
            yield running
        finally:
            running.close()


async def _primary_loses_its_only_op(cluster: ChaosCluster) -> None:
    workload = Workload(cluster.client_addresses, PASSWORD, WorkloadConfig(), seed=3)
    try:
        await workload.setup()
        recovered, missing = await wait_recovered(cluster, workload, 60)  # op 1 everywhere
        assert recovered is not None, missing
        primary = primary_of(await all_stats(cluster), GROUP)
        assert primary is not None
        await trio.to_thread.run_sync(cluster.kill, primary)
        journal = next(
            path
            for name, path in segments.journal_dirs(cluster.nodes[primary].data_dir).items()
            if name.startswith("0-0-1-")
        )
        first = segments.segments(journal)[0]
        assert [span.op for span in segments.walk(first)] == [1]
        os.truncate(first, 130)  # inside op 1's record: a torn tail, nothing left
        await trio.to_thread.run_sync(cluster.restart, primary)
        recovered, missing = await wait_recovered(cluster, workload, 45)
        assert recovered is not None, f"the group did not recover: {missing}"
    finally:
        await workload.close()


def test_a_primary_that_lost_its_only_committed_op_rejoins_and_the_group_takes_writes(
    cluster: ChaosCluster,
) -> None:
    trio.run(_primary_loses_its_only_op, cluster)
