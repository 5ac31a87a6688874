"""The node's flusher on real files: syncs of several groups share one syncfs.

Method: group stores and group hosts on real files under one data directory. A gated
store holds the flusher's current round in its worker thread so that the test can queue
the next round's syncs at a known point.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

import pytest
import trio

from broker.core.groups import Replied
from broker.runtime import flush
from broker.runtime.flush import Flusher, syncfs_available
from broker.runtime.group import GroupHost
from broker.runtime.store import GroupStore
from journal import JournalBroken
from tests.journal.helpers import append_many
from tests.runtime.test_group import _host, _submit_many

pytestmark = pytest.mark.skipif(not syncfs_available(), reason="needs syncfs on Linux 5.8+")

TIMEOUT_S = 10.0


class _GatedStore(GroupStore):
    """A store whose next sync waits in its worker thread until the test releases it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, no_sync=False, segment_size_bytes=1 << 20)
        self.entered = threading.Event()
        self.release = threading.Event()

    def sync(self) -> int:
        self.entered.set()
        assert self.release.wait(TIMEOUT_S)
        return super().sync()


def _store(path: Path) -> GroupStore:
    store = GroupStore(path, no_sync=False, segment_size_bytes=1 << 20)
    store.recovered()
    return store


async def _hold_a_round(flusher: Flusher, gated: _GatedStore, nursery: trio.Nursery) -> None:
    """Starts a round of ``gated`` alone and returns once its worker thread is inside it."""
    nursery.start_soon(flusher.sync, gated)
    with trio.fail_after(TIMEOUT_S):
        # A threading.Event, set in the worker thread: wait for it in one too.
        await trio.to_thread.run_sync(gated.entered.wait, TIMEOUT_S)


def _queue_behind_a_held_round(
    flusher: Flusher, gated: _GatedStore, jobs: Sequence[Callable[[], Awaitable[None]]]
) -> None:
    """Runs the flusher, holds a round of ``gated`` alone, starts ``jobs`` (syncs) behind
    it and then releases it: their syncs are all queued for the same next round."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(flusher.run)
            await _hold_a_round(flusher, gated, nursery)
            async with trio.open_nursery() as syncs:
                for job in jobs:
                    syncs.start_soon(job)
                await trio.sleep(0.01)  # every job is queued behind the held round
                gated.release.set()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_syncs_asked_during_a_round_share_the_next_flush(tmp_path: Path) -> None:
    gated = _GatedStore(tmp_path / "gated")
    gated.recovered()
    stores = [_store(tmp_path / f"group-{index}") for index in range(3)]
    for store in stores:
        append_many(store.journal, 4, body_size=300)
    results: dict[int, int] = {}

    async def sync(index: int) -> None:
        results[index] = await flusher.sync(stores[index])

    flusher = Flusher(tmp_path, scope="filesystem")
    _queue_behind_a_held_round(flusher, gated, [partial(sync, index) for index in range(3)])
    assert results == {0: 4, 1: 4, 2: 4}
    assert [store.journal.op_durable for store in stores] == [4, 4, 4]
    # One syncfs for the three; the held round of one group synced its own files.
    assert (flusher.counters.rounds, flusher.counters.groups_flushed) == (1, 3)
    for store in [gated, *stores]:
        store.close()


def test_a_failed_flush_fails_every_sync_of_its_round_and_breaks_their_journals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "syncfs: Input/output error")

    monkeypatch.setattr(flush, "sync_file_system", failing)
    gated = _GatedStore(tmp_path / "gated")
    gated.recovered()
    stores = [_store(tmp_path / f"group-{index}") for index in range(2)]
    for store in stores:
        append_many(store.journal, 2, body_size=300)
    errors: list[OSError] = []

    async def sync(store: GroupStore) -> None:
        try:
            await flusher.sync(store)
        except OSError as error:
            errors.append(error)

    flusher = Flusher(tmp_path, scope="filesystem")
    _queue_behind_a_held_round(flusher, gated, [partial(sync, store) for store in stores])
    assert [error.errno for error in errors] == [errno.EIO, errno.EIO]
    assert flusher.counters.rounds == 0
    for store in stores:
        assert store.journal.op_durable == 0  # nothing the failed flush covered is claimed
        with pytest.raises(JournalBroken):
            append_many(store.journal, 1, body_size=300, op_first=3, offset_first=4)
    gated.close()


def test_a_sync_queued_when_the_flusher_stops_syncs_on_its_own(tmp_path: Path) -> None:
    gated = _GatedStore(tmp_path / "gated")
    gated.recovered()
    store = _store(tmp_path / "group")
    append_many(store.journal, 3, body_size=300)
    flusher = Flusher(tmp_path, scope="filesystem")
    result: list[int] = []

    async def main() -> None:
        async with trio.open_nursery() as outer:

            async def sync() -> None:
                result.append(await flusher.sync(store))

            async with trio.open_nursery() as nursery:
                await nursery.start(flusher.run)
                await _hold_a_round(flusher, gated, nursery)
                outer.start_soon(sync)
                await trio.sleep(0.01)
                nursery.cancel_scope.cancel()  # the flusher stops behind its held round
                gated.release.set()

    trio.run(main)
    assert result == [3]
    assert store.journal.op_durable == 3
    for each in (gated, store):
        each.close()


def test_persisted_groups_busy_at_once_ack_everything_with_shared_flushes(
    tmp_path: Path,
) -> None:
    flusher = Flusher(tmp_path, scope="filesystem")
    hosts = [
        _host(
            tmp_path / f"partition-{group_id}", persisted=True, group_id=group_id, flusher=flusher
        )
        for group_id in range(1, 5)
    ]
    outcomes: dict[int, list[object]] = {}

    async def load(host: GroupHost) -> None:
        outcomes[host.group_id] = list(await _submit_many(host, 24))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(flusher.run)
            for host in hosts:
                await nursery.start(host.run)
            async with trio.open_nursery() as producers:
                for host in hosts:
                    producers.start_soon(load, host)
            nursery.cancel_scope.cancel()
        for host in hosts:
            await host.close()

    trio.run(main)
    for host in hosts:
        assert len(outcomes[host.group_id]) == 24
        assert all(isinstance(outcome, Replied) for outcome in outcomes[host.group_id])
        assert host.counters.synced_prepares == host.counters.prepares == 24
    assert flusher.counters.rounds >= 1
    syncs = sum(host.counters.syncs for host in hosts)
    assert flusher.counters.groups_flushed <= syncs
    # Reopened, every group holds every acknowledged op, durably.
    for host in hosts:
        store = _store(host.path)
        assert store.journal.op_head == store.journal.op_durable == 24
        store.close()


def test_a_group_on_another_file_system_syncs_its_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gated = _GatedStore(tmp_path / "gated")
    gated.recovered()
    stores = [_store(tmp_path / f"group-{index}") for index in range(3)]
    for store in stores:
        append_many(store.journal, 2, body_size=300)
    elsewhere = stores[2].path
    real = flush._device_of

    def device_of(path: Path) -> int:
        # As if group-2's directory were a mount of another disk.
        return -7 if path == elsewhere else real(path)

    monkeypatch.setattr(flush, "_device_of", device_of)
    results: dict[int, int] = {}
    flusher = Flusher(tmp_path, scope="filesystem")

    async def sync(index: int) -> None:
        results[index] = await flusher.sync(stores[index])

    _queue_behind_a_held_round(flusher, gated, [partial(sync, index) for index in range(3)])
    assert results == {0: 2, 1: 2, 2: 2}
    # One syncfs for the two on the data directory's file system; group-2 synced alone.
    assert (flusher.counters.rounds, flusher.counters.groups_flushed) == (1, 2)
    for store in [gated, *stores]:
        store.close()
