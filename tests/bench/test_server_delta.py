"""What the bench derives from two snapshots of a node's counters."""

from __future__ import annotations

from typing import Any

from bench.load.servers import NodeSnapshot, server_delta


def _snapshot(taken_at: float, node: dict[str, Any], groups: dict[str, Any]) -> NodeSnapshot:
    return NodeSnapshot(
        "127.0.0.1:8090", taken_at, {}, {"node": node, "groups": groups}, cpu_s=None
    )


def _partition(syncs: int, messages: int) -> dict[str, int]:
    return {"syncs": syncs, "prepare_messages": messages, "prepares": messages // 250}


def test_disk_syncs_count_shared_flushes_once_and_own_syncs_each() -> None:
    before = _snapshot(
        10.0,
        {"flushes": 5, "groups_flushed": 9},
        {"metadata": {"syncs": 40}, "partition 1/1/1": _partition(10, 2_500)},
    )
    after = _snapshot(
        12.0,
        {"flushes": 15, "groups_flushed": 39},
        {
            "metadata": {"syncs": 90},  # left out: partitions only
            "partition 1/1/1": _partition(30, 7_500),
            "partition 2/1/1": _partition(20, 5_000),
        },
    )
    delta = server_delta(before, after)
    assert delta["syncs"] == 40  # 20 + 20 partition sync rounds
    # 30 of them were covered by 10 flushes; the other 10 synced their own files.
    assert delta["disk_syncs"] == 40 - 30 + 10
    assert delta["disk_syncs_per_message"] == 20 / 10_000
    assert delta["syncs_per_message"] == 40 / 10_000


def test_disk_syncs_without_a_flusher_are_the_partition_syncs() -> None:
    before = _snapshot(0.0, {}, {"partition 1/1/1": _partition(0, 0)})
    after = _snapshot(1.0, {}, {"partition 1/1/1": _partition(8, 2_000)})
    delta = server_delta(before, after)
    assert delta["disk_syncs"] == 8
    assert delta["disk_syncs_per_message"] == 8 / 2_000
