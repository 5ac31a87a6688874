"""The load in worker processes: how actors are dealt, how reports merge, and a real
``--processes 2`` run against a node."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.cli import build_parser, params_from_args
from bench.load.actors import GroupState
from bench.load.metrics import BatchRecords, actor_metrics, group_metrics, latency_summary
from bench.load.plan import make_plan
from bench.load.report import build_report
from bench.load.runner import SATURATED_CPU_PERCENT, ClientUsage, LoadOutcome, run_benchmark
from bench.load.workers import assign_actors, merge_outcomes
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node


def _plan(*argv: str) -> Any:
    return make_plan(params_from_args(build_parser().parse_args(["-b", "3", *argv])))


def test_assign_actors_keeps_each_streams_actors_in_one_worker() -> None:
    plan = _plan("ppc", "-p", "3", "-c", "3")
    workers = assign_actors(plan, 2)
    assert len(workers) == 2
    assert sorted(a.name for w in workers for a in w) == sorted(a.name for a in plan.actors)
    for worker in workers:
        for actor in worker:
            others = [w for w in workers if w is not worker]
            assert all(actor.stream not in {a.stream for a in w} for w in others)


def test_assign_actors_uses_no_more_workers_than_streams_or_asked() -> None:
    assert len(assign_actors(_plan("pp", "-p", "4"), 8)) == 4
    assert len(assign_actors(_plan("pp", "-p", "4"), 3)) == 3
    assert len(assign_actors(_plan("pp", "-p", "4"), 1)) == 1
    assert len(assign_actors(_plan("bp", "-p", "4"), 4)) == 1  # one stream: one worker


def test_assign_actors_balances_actor_counts() -> None:
    workers = assign_actors(_plan("pp", "-p", "5"), 2)
    assert sorted(len(w) for w in workers) == [2, 3]


def _records(latencies_s: list[float], messages: int = 10) -> BatchRecords:
    records = BatchRecords(start_s=0.0)
    for i, latency in enumerate(latencies_s):
        records.add((i + 1) * 0.01, latency, messages, messages * 100, messages * 148)
    return records


def _usage(cpu_s: float, wall_s: float = 1.0) -> ClientUsage:
    return ClientUsage(wall_s, cpu_s, cpu_s * 0.75, cpu_s * 0.25, cpu_s, 1000)


def test_merge_unions_records_sums_cpu_and_judges_saturation_per_process() -> None:
    plan = _plan("pp", "-p", "3")
    a = LoadOutcome(
        {"producer-1": _records([0.001] * 4), "producer-3": _records([0.002] * 3)},
        _usage(0.5),
        ["slow"],
        {},
    )
    b = LoadOutcome({"producer-2": _records([0.003] * 5)}, _usage(0.95), ["slow"], {})
    merged = merge_outcomes(plan, [a, b], wall_s=1.2)
    assert list(merged.records) == ["producer-1", "producer-2", "producer-3"]
    assert sum(len(r) for r in merged.records.values()) == 12
    assert sum(sum(r.messages) for r in merged.records.values()) == 120
    assert merged.client.cpu_s == pytest.approx(1.45)
    assert merged.client.wall_s == 1.2
    assert merged.client.process_count == 2
    # 121% of a core over both: not one process saturated by the sum, but by its own.
    assert merged.client.cpu_percent == pytest.approx(1.45 / 1.2 * 100)
    assert merged.client.cpu_percent_per_process_max == pytest.approx(95.0)
    assert SATURATED_CPU_PERCENT <= 95.0
    assert merged.client.saturated
    assert merged.warnings == ["slow"]


def test_merge_flags_no_saturation_when_every_process_has_headroom() -> None:
    plan = _plan("pp", "-p", "2")
    outcomes = [
        LoadOutcome({"producer-1": _records([0.001])}, _usage(0.6), [], {}),
        LoadOutcome({"producer-2": _records([0.001])}, _usage(0.6), [], {}),
    ]
    merged = merge_outcomes(plan, outcomes, wall_s=1.0)
    assert merged.client.cpu_percent == pytest.approx(120.0)
    assert not merged.client.saturated


def test_merged_group_percentiles_come_from_the_raw_samples_not_averages() -> None:
    plan = _plan("pp", "-p", "2")
    fast, slow = [0.001] * 99, [0.001] * 90 + [0.1] * 9
    outcomes = [
        LoadOutcome({"producer-1": _records(fast)}, _usage(0.1), [], {}),
        LoadOutcome({"producer-2": _records(slow)}, _usage(0.1), [], {}),
    ]
    merged = merge_outcomes(plan, outcomes, wall_s=1.0)
    records = list(merged.records.values())
    actors = [
        actor_metrics(n, "producers", r, sampling_s=0.01, window=1)
        for n, r in merged.records.items()
    ]
    group = group_metrics("producers", actors, records, sampling_s=0.01)
    assert group.pooled_latency_ms == latency_summary(fast + slow)
    assert group.total_messages == 10 * (99 + 99)


def test_merge_keeps_each_workers_consumer_groups_and_refuses_an_actor_twice() -> None:
    plan = _plan("pp", "-p", "2")
    a = LoadOutcome({"producer-1": _records([0.001])}, _usage(0.1), [], {"cg-1": GroupState(5)})
    b = LoadOutcome({"producer-2": _records([0.001])}, _usage(0.1), [], {"cg-2": GroupState(7)})
    merged = merge_outcomes(plan, [a, b], wall_s=1.0)
    assert {n: g.consumed for n, g in merged.groups.items()} == {"cg-1": 5, "cg-2": 7}
    with pytest.raises(AssertionError):
        merge_outcomes(plan, [a, a], wall_s=1.0)


# --- a real run --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data = tmp_path_factory.mktemp("workers") / "node"
    data.mkdir()
    process = start_node(data)
    try:
        yield process
    finally:
        process.kill()


def _run(node: NodeProcess, *argv: str) -> dict[str, Any]:
    args = build_parser().parse_args(["-q", "-p", ROOT_PASSWORD, "-m", "100", "-P", "10", *argv])
    params = replace(params_from_args(args), server_addresses=(node.address,))
    return build_report(run_benchmark(params))


def _group(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in report["group_metrics"] if g["group"] == name)


def test_two_processes_report_every_message_sent(node: NodeProcess, tmp_path: Path) -> None:
    report = _run(node, "--processes", "2", "-b", "5", "pp", "-p", "3")
    assert report["client"]["processes"] == 2
    assert len(report["client"]["cpu_percent_per_process"]) == 2
    producers = _group(report, "producers")
    assert producers["total_messages"] == 3 * 5 * 10
    assert [a["total_message_batches"] for a in report["individual_metrics"]] == [5, 5, 5]
    assert report["server_stats"]["totals"]["prepare_messages"] == 3 * 5 * 10
    assert report["cpu_per_batch"]["batches"] == 15
    assert report["cpu_per_batch"]["server_us"][node.address] > 0


def test_two_processes_run_producers_and_their_consumers(node: NodeProcess) -> None:
    report = _run(node, "--processes", "2", "-b", "4", "ppc", "-p", "2", "-c", "2")
    assert report["client"]["processes"] == 2
    assert _group(report, "producers")["total_messages"] == 2 * 4 * 10
    assert _group(report, "consumers")["total_messages"] == 2 * 4 * 10
