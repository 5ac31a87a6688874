"""Tiny real runs: every kind against a real node, the report folder, charts, compare.

One node (``viewstream serve`` in a subprocess, through the bench's own embedded-server
code) is shared by the module; each run recreates its bench streams. A handful of
small batches per run keeps the module within a few seconds of the node's start-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.cli import build_parser, main, params_from_args
from bench.load.charts import charts_available
from bench.load.params import Embedded
from bench.load.report import SCHEMA, build_report, compare_reports, load_report
from bench.load.runner import run_benchmark
from bench.load.servers import embedded_server

PASSWORD = "bench-test-password"


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    with embedded_server(Embedded.SINGLE, username="iggy", password=PASSWORD) as server:
        yield server.addresses[0]


def _run(address: str, *argv: str) -> dict[str, Any]:
    args = build_parser().parse_args(["-q", "-p", PASSWORD, "-m", "100", "-P", "10", *argv])
    params = replace(params_from_args(args), server_addresses=(address,))
    return build_report(run_benchmark(params))


def _group(report: dict[str, Any], name: str) -> dict[str, Any]:
    groups = report["group_metrics"]
    assert isinstance(groups, list)
    return next(g for g in groups if g["group"] == name)


def test_pinned_producer_writes_exactly_what_it_reports(address: str) -> None:
    report = _run(address, "-b", "5", "pp", "-p", "2")
    producers = _group(report, "producers")
    assert producers["total_messages"] == 2 * 5 * 10
    assert producers["total_user_data_bytes"] == 2 * 5 * 10 * 100
    totals = report["server_stats"]["totals"]
    assert totals["prepare_messages"] == 100  # the server counted the same messages
    assert totals["messages_per_prepare"] == pytest.approx(10.0)
    assert all("core" in w for w in report["warnings"])  # at most "client saturated"


EVERY_KIND: list[tuple[tuple[str, ...], dict[str, int]]] = [
    (("-b", "5", "pp", "-p", "2"), {"producers": 100}),
    (("-b", "5", "pc", "-c", "2"), {"consumers": 2 * 5 * 10}),
    (("-b", "5", "ppc", "-p", "2", "-c", "2"), {"producers": 100, "consumers": 100}),
    (("-b", "5", "bp", "-p", "2", "-a", "3"), {"producers": 100}),
    (("-b", "4", "bcg", "-c", "2", "-a", "2"), {"consumers": 2 * 4 * 10}),
    (
        ("-b", "5", "bpcg", "-p", "2", "-c", "2", "-a", "2"),
        {"producers": 100, "consumers": 100},
    ),
    (("-b", "5", "e2e", "-p", "2"), {"producing_consumers": 100}),
    (("-b", "5", "e2ecg", "-p", "2"), {"producing_consumers": 100}),
]
"""Every kind with a tiny load, and the messages each of its groups must move."""
EVERY_KIND_IDS = [argv[2] for argv, _ in EVERY_KIND]


@pytest.mark.parametrize(("argv", "groups"), EVERY_KIND, ids=EVERY_KIND_IDS)
def test_every_kind_runs_and_moves_the_expected_messages(
    address: str, argv: tuple[str, ...], groups: dict[str, int]
) -> None:
    check_kind_report(_run(address, *argv), argv, groups)


def check_kind_report(
    report: dict[str, Any], argv: tuple[str, ...], groups: dict[str, int]
) -> None:
    """Each group moved its messages (less auto-commit's repeats) with sane latencies."""
    repeats = sum(g["duplicates"] for g in report["consumer_groups"].values())
    for name, messages in groups.items():
        group = _group(report, name)
        polls_as_group = (name, argv[2]) in {
            ("consumers", "bpcg"),
            ("producing_consumers", "e2ecg"),
        }
        again = repeats if polls_as_group else 0  # auto-commit can deliver a message twice
        assert group["total_messages"] - again == messages, name
        latency = group["average_latency_ms"]
        assert isinstance(latency, dict)
        assert 0 < latency["p50"] <= latency["p99"] <= latency["p9999"]


def test_official_sdk_drives_the_same_load(address: str) -> None:
    report = _run(address, "--sdk", "official", "-b", "3", "e2e", "-p", "1")
    assert _group(report, "producing_consumers")["total_messages"] == 30
    assert report["machine"]["sdk"] == "apache-iggy"


def test_output_folder_holds_the_report_and_charts_and_compare_reads_it(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["-q", "-p", PASSWORD, "-m", "100", "-P", "10", "-b", "3", "pp", "-p", "1", "tcp",
            "--server-address", address, "output", "--output-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    assert main(argv) == 0
    folders = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(folders) == 2  # a folder per run, the second one suffixed
    report = load_report(folders[0])
    assert report["schema"] == SCHEMA
    assert set(report) >= {
        "uuid", "timestamp", "params", "machine", "cluster", "client", "server_stats",
        "group_metrics", "individual_metrics", "warnings",
    }  # fmt: skip
    actor = report["individual_metrics"][0]
    assert set(actor) >= {
        "throughput_megabytes_per_second", "throughput_messages_per_second", "latency_ms",
        "throughput_mb_ts", "throughput_msg_ts", "latency_ts",
    }  # fmt: skip
    assert set(actor["latency_ms"]) == {
        "p50", "p90", "p95", "p99", "p999", "p9999", "avg", "median", "min", "max", "std_dev"
    }  # fmt: skip
    assert report["client"]["cpu_s"] >= 0
    json.dumps(report)  # plain JSON all the way down
    if charts_available():  # matplotlib is the optional "bench" extra
        for name in ("throughput", "latency", "latency_distribution"):
            for suffix in ("png", "html"):
                assert (folders[0] / f"{name}.{suffix}").stat().st_size > 0
    capsys.readouterr()
    assert main(["compare", str(folders[0]), str(folders[1])]) == 0
    assert "B/A" in capsys.readouterr().out


def test_compare_ratios_are_b_over_a() -> None:
    def report(mbps: float, p99: float) -> dict[str, Any]:
        latency = dict.fromkeys(("p50", "p90", "p95", "p99", "p999", "p9999", "avg", "max"), 1.0)
        return {
            "group_metrics": [
                {
                    "group": "producers",
                    "total_throughput_megabytes_per_second": mbps,
                    "total_throughput_messages_per_second": mbps * 1000,
                    "average_latency_ms": {**latency, "p99": p99},
                    "pooled_latency_ms": latency,
                }
            ],
            "client": {"cpu_percent": 50.0},
            "server_stats": {"totals": {"cpu_percent": None}},
        }

    rows = compare_reports(report(100.0, 2.0), report(150.0, 1.0))
    by_metric = {(g, m): ratio for g, m, _, _, ratio in rows}
    assert by_metric[("producers", "total MB/s")] == pytest.approx(1.5)
    assert by_metric[("producers", "p99 ms")] == pytest.approx(0.5)
    assert by_metric[("client", "cpu % of a core")] == pytest.approx(1.0)
