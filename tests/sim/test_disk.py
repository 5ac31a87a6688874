"""The simulated disk: the real journal and superblock behind the consensus Log."""

from __future__ import annotations

import random

from consensus.protocols import DurableState
from sim.disk import Disk
from tests.consensus.test_replica_handlers import _prepares


def test_appended_prepare_reads_back_identical() -> None:
    disk = Disk(random.Random(1), log_is_data=False)
    prepares = _prepares(3)
    for prepare in prepares:
        disk.append(prepare)
    assert disk.op_max() == 3
    assert [disk.read(op) for op in (1, 2, 3)] == prepares
    assert disk.read(4) is None and disk.read(0) is None


def test_power_loss_keeps_synced_records_only() -> None:
    disk = Disk(random.Random(2), log_is_data=False)
    prepares = _prepares(4)
    for prepare in prepares[:2]:
        disk.append(prepare)
    assert disk.sync() == 2
    for prepare in prepares[2:]:
        disk.append(prepare)
    disk.power_loss()
    disk.reopen()
    # The newest unsynced write may survive whole; never a torn or reordered record.
    assert disk.op_max() in (2, 3, 4)
    assert [disk.read(op) for op in range(1, disk.op_max() + 1)] == prepares[: disk.op_max()]


def test_superblock_and_checkpoint_survive_a_power_loss() -> None:
    disk = Disk(random.Random(3), log_is_data=False)
    for prepare in _prepares(3):
        disk.append(prepare)
    disk.write_checkpoint(3, b"snapshot-bytes")
    state = DurableState(view=2, log_view=1, commit=3, checkpoint=3)
    disk.write_superblock(state)
    disk.power_loss()
    durable, checkpoint = disk.reopen()
    assert durable == state and checkpoint == b"snapshot-bytes"
    assert disk.op_max() == 3  # a checkpoint syncs the journal first


def test_superblock_keeps_log_damaged_across_a_power_loss_until_it_is_cleared() -> None:
    disk = Disk(random.Random(5), log_is_data=True)
    damaged = DurableState(view=4, log_view=4, commit=3, checkpoint=0, log_damaged=True)
    disk.write_superblock(damaged)
    disk.power_loss()
    assert disk.reopen()[0] == damaged
    rejoined = DurableState(view=5, log_view=5, commit=12, checkpoint=0)
    disk.write_superblock(rejoined)
    disk.power_loss()
    assert disk.reopen()[0] == rejoined


def test_checkpoint_beyond_the_journal_restarts_it_after_the_checkpoint() -> None:
    disk = Disk(random.Random(4), log_is_data=False)
    prepares = _prepares(6)
    for prepare in prepares[:2]:
        disk.append(prepare)
    disk.write_checkpoint(5, b"state-transfer")
    assert disk.op_max() == 0
    disk.append(prepares[5])  # op 6 continues the checkpoint
    assert disk.read(6) == prepares[5]


def test_corruption_at_rest_is_found_by_recovery_and_never_read() -> None:
    disk = Disk(random.Random(5), log_is_data=False)
    prepares = _prepares(5)
    for prepare in prepares:
        disk.append(prepare)
    disk.sync()
    where = disk.corrupt_record(random.Random(6))
    assert where is not None
    disk.reopen()
    readable = [op for op in range(1, 6) if disk.read(op) == prepares[op - 1]]
    damaged = [op for op in range(1, 6) if op not in readable]
    assert damaged, where
    assert all(disk.read(op) is None for op in damaged)
