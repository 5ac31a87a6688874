"""Regenerate ``docs/performance.md``: run every benchmark of the page and write it.

Run: ``python -m bench.load.perfpage`` (about 15 minutes on 2 cores; ``--help`` for the
options). Every row of the page is one ``viewstream-bench`` command, run ``--runs``
times (2: the spread shows the noise), each with its own embedded node or cluster and
fresh data directories; the raw ceiling of the machine is measured in the same
invocation, and the targets' ratios are computed from these very runs. The reports go to
``--reports-dir`` (one folder per run, as ``viewstream-bench ... output`` writes them).

The commands are parsed by the CLI's own parser, so a row's command pasted into a shell
measures the same thing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bench.load.ceiling import CeilingResult, FsyncResult, fsync_latency, loopback_ceiling
from bench.load.params import format_size

__all__ = ["CASES", "Case", "main", "render"]

PAGE: Final = Path("docs/performance.md")


@dataclass(frozen=True, slots=True)
class Case:
    """One row: a ``viewstream-bench`` command (without the program name)."""

    key: str
    section: str
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return "viewstream-bench " + shlex.join(self.argv)


def _modes_cases(quick: bool) -> list[Case]:
    cases = []
    batches = {1: 400, 4: 150, 16: 50} if not quick else {1: 4, 4: 2, 16: 1}
    producers = (1, 4, 16) if not quick else (1, 4)
    for mode in ("single", "cluster"):
        for durability in ("replicated", "persisted"):
            for n in producers:
                b = batches[n] if mode == "single" or quick else max(20, batches[n] // 2)
                argv = (
                    "-q", "--embedded", mode, "--durability", durability,
                    "-m", "1000", "-P", "250", "-b", str(b), "pp", "-p", str(n),
                )  # fmt: skip
                cases.append(Case(f"pp/{mode}/{durability}/{n}", "modes", argv))
    return cases


def _consumer_cases(quick: bool) -> list[Case]:
    b = "400" if not quick else "4"
    cases = []
    for mode in ("single", "cluster"):
        for n in (1, 4):
            argv = (
                "-q",
                "--embedded",
                mode,
                "-m",
                "1000",
                "-P",
                "250",
                "-b",
                b,
                "pc",
                "-c",
                str(n),
            )
            cases.append(Case(f"pc/{mode}/{n}", "consumers", argv))
    return cases


def _e2e_cases(quick: bool) -> list[Case]:
    cases = []
    for mode, batches in (("single", "200"), ("cluster", "20")):
        for n in (1, 4):
            b = batches if not quick else "2"
            argv = (
                "-q",
                "--embedded",
                mode,
                "-m",
                "1000",
                "-P",
                "250",
                "-b",
                b,
                "e2e",
                "-p",
                str(n),
            )
            cases.append(Case(f"e2e/{mode}/{n}", "e2e", argv))
    return cases


def _batch_cases(quick: bool) -> list[Case]:
    cases = []
    for per_batch, batches in ((1, 2000), (10, 1000), (100, 400), (1000, 100)):
        b = str(batches if not quick else 2)
        argv = (
            "-q",
            "--embedded",
            "single",
            "-m",
            "1000",
            "-P",
            str(per_batch),
            "-b",
            b,
            "pp",
            "-p",
            "1",
        )
        cases.append(Case(f"batch/{per_batch}", "batch", argv))
    return cases


def _group_commit_cases(quick: bool) -> list[Case]:
    cases = []
    for n, batches in ((1, 400), (16, 50)):
        b = str(batches if not quick else 2)
        argv = (
            "-q", "--embedded", "single", "--durability", "persisted",
            "-m", "1000", "-P", "250", "-b", b, "bp", "-p", str(n), "-a", "1",
        )  # fmt: skip
        cases.append(Case(f"gc/{n}", "group-commit", argv))
    return cases


def all_cases(quick: bool = False) -> list[Case]:
    return (
        _modes_cases(quick)
        + _group_commit_cases(quick)
        + _consumer_cases(quick)
        + _e2e_cases(quick)
        + _batch_cases(quick)
    )


CASES: Final = all_cases()


# --- running -----------------------------------------------------------------------------


@dataclass
class Measured:
    """Every report of the invocation, by case key, and the ceiling runs."""

    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    loopback: dict[str, list[CeilingResult]] = field(default_factory=dict)
    fsync: dict[str, list[FsyncResult]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    budget: list[dict[str, Any]] = field(default_factory=list)
    """``bench.cpu_budget`` rows (``BudgetRow.to_json()``)."""
    backup_read: dict[str, Any] = field(default_factory=dict)
    """``bench.backup_read_bench``'s figures, or ``{"why": ...}`` when not measured."""
    idle_consumer: dict[str, Any] = field(default_factory=dict)
    """``bench.idle_consumer``'s figures, or ``{"why": ...}`` when not measured."""
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)


def save_measured(m: Measured, path: Path) -> None:
    """Everything measured, as JSON (``--from`` renders the page again from it)."""
    data = {
        "reports": m.reports,
        "loopback": {k: [r.to_json() for r in v] for k, v in m.loopback.items()},
        "fsync": {k: [r.to_json() for r in v] for k, v in m.fsync.items()},
        "failures": m.failures,
        "budget": m.budget,
        "backup_read": m.backup_read,
        "idle_consumer": m.idle_consumer,
        "started_at": m.started_at.isoformat(),
        "finished_at": (m.finished_at or m.started_at).isoformat(),
        "load_before": list(m.load_before),
        "load_after": list(m.load_after),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) + "\n", encoding="utf-8")


def load_measured(path: Path) -> Measured:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Measured(
        reports=data["reports"],
        loopback={k: [CeilingResult(**r) for r in v] for k, v in data["loopback"].items()},
        fsync={k: [FsyncResult(**r) for r in v] for k, v in data["fsync"].items()},
        failures=data["failures"],
        budget=data.get("budget", []),
        backup_read=data.get("backup_read", {}),
        idle_consumer=data.get("idle_consumer", {}),
        started_at=datetime.fromisoformat(data["started_at"]),
        finished_at=datetime.fromisoformat(data["finished_at"]),
        load_before=tuple(data["load_before"]),
        load_after=tuple(data["load_after"]),
    )


BUDGET_BATCHES: Final = 800
"""Batches per path and producer count of the CPU budget (``bench.cpu_budget``)."""
BACKUP_READ_MODULE: Final = "bench.backup_read_bench"
BACKUP_READ_TIMEOUT_S: Final = 900.0
_P99_TEXT: Final = re.compile(r"p99[^0-9\n]*?([0-9][0-9,]*(?:\.[0-9]+)?)\s*ms")


def measure_backup_read() -> dict[str, Any]:
    """The p99 of a poll on a backup issued right after an acknowledged send, from
    ``python -m bench.backup_read_bench`` when this tree has it: its ``--json PATH``
    output's ``p99_ms``, else the first ``p99 ... ms`` it prints. ``{"why": ...}`` when
    there is no such figure."""
    import importlib.util
    import subprocess
    import tempfile

    if importlib.util.find_spec(BACKUP_READ_MODULE) is None:
        return {"why": "bench/backup_read_bench.py is not in this tree"}
    command = [sys.executable, "-m", BACKUP_READ_MODULE]
    with tempfile.TemporaryDirectory(prefix="viewstream-perfpage-") as folder:
        out = Path(folder) / "backup_read.json"
        try:
            done = subprocess.run(
                [*command, "--json", str(out)],
                capture_output=True,
                text=True,
                timeout=BACKUP_READ_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:  # no --json option: read what it prints
                done = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=BACKUP_READ_TIMEOUT_S,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            return {"why": f"{BACKUP_READ_MODULE} ran past {BACKUP_READ_TIMEOUT_S:.0f} s"}
        if out.exists():
            data = json.loads(out.read_text(encoding="utf-8"))
            p99 = _find_p99(data)
            if p99 is not None:
                return {"p99_ms": p99, "source": "json"}
        match = _P99_TEXT.search(done.stdout)
        if done.returncode == 0 and match is not None:
            return {"p99_ms": float(match.group(1).replace(",", "")), "source": "stdout"}
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return {"why": f"{BACKUP_READ_MODULE} gave no p99 (exit {done.returncode}) {tail[0]}"}


IDLE_CONSUMER_MODULE: Final = "bench.idle_consumer"
IDLE_CONSUMER_TIMEOUT_S: Final = 300.0
"""It idles 60 s after 5 s of settling, then sends 200 messages 0.1 s apart."""


def measure_idle_consumer() -> dict[str, Any]:
    """An idle consumer of our SDK and its node: their CPU over 60 s of an idle topic and
    the delivery latency of messages sent to it (``python -m bench.idle_consumer
    --json PATH``). ``{"why": ...}`` when it gave no figures."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="viewstream-perfpage-") as folder:
        out = Path(folder) / "idle_consumer.json"
        try:
            done = subprocess.run(
                [sys.executable, "-m", IDLE_CONSUMER_MODULE, "--json", str(out)],
                capture_output=True,
                text=True,
                timeout=IDLE_CONSUMER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"why": f"{IDLE_CONSUMER_MODULE} ran past {IDLE_CONSUMER_TIMEOUT_S:.0f} s"}
        if done.returncode == 0 and out.exists():
            figures: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
            return figures
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return {"why": f"{IDLE_CONSUMER_MODULE} failed (exit {done.returncode}) {tail[0]}"}


def _find_p99(data: Any) -> float | None:
    """The first ``p99_ms`` in ``data`` (a JSON value), depth first."""
    if isinstance(data, dict):
        value = data.get("p99_ms")
        if isinstance(value, int | float):
            return float(value)
        children: list[Any] = list(data.values())
    elif isinstance(data, list):
        children = data
    else:
        return None
    for child in children:
        found = _find_p99(child)
        if found is not None:
            return found
    return None


def run_case(case: Case, reports_dir: Path | None, charts: bool) -> dict[str, Any]:
    from bench.cli import build_parser, params_from_args
    from bench.load.report import build_report, write_report
    from bench.load.runner import run_benchmark

    params = params_from_args(build_parser().parse_args(list(case.argv)))
    report = build_report(run_benchmark(params))
    report["command"] = case.command
    if reports_dir is not None:
        write_report(report, reports_dir, charts=charts)
    return report


def measure(
    cases: Sequence[Case],
    runs: int,
    reports_dir: Path | None,
    *,
    charts: bool = False,
    quick: bool = False,
    echo: Callable[[str], None] = print,
) -> Measured:
    measured = Measured(load_before=os.getloadavg())
    from bench.cpu_budget import measure_budget

    try:
        rows = measure_budget(
            (1, 4), 8 if quick else BUDGET_BATCHES, runs=runs, cluster=True, echo=echo
        )
        measured.budget = [r.to_json() for r in rows]
    except Exception as error:  # reported on the page, not hidden
        measured.failures["cpu budget"] = f"{type(error).__name__}: {error}"
        echo(f"  failed: {measured.failures['cpu budget']}")
    echo("backup read after an acknowledged send")
    measured.backup_read = measure_backup_read()
    echo("an idle consumer and its node (about 90 s)")
    measured.idle_consumer = measure_idle_consumer()
    for run in range(runs):
        for name, connections, count, sync in (
            ("1 connection", 1, 2 if quick else 2000, False),
            ("4 connections", 4, 2 if quick else 800, False),
            ("4 connections, fdatasync each frame", 4, 2 if quick else 200, True),
        ):
            echo(f"ceiling {name} (run {run + 1})")
            result = loopback_ceiling(250_000, connections, count, sync=sync)
            measured.loopback.setdefault(name, []).append(result)
        for block in (4096, 250_000):
            echo(f"fsync {block} B (run {run + 1})")
            measured.fsync.setdefault(str(block), []).append(
                fsync_latency(block, 10 if quick else 300)
            )
    for case in cases:
        for run in range(runs):
            echo(f"{case.command} (run {run + 1}/{runs})")
            try:
                report = run_case(case, reports_dir, charts)
            except Exception as error:  # a mode that does not run is reported, not hidden
                measured.failures[case.key] = f"{type(error).__name__}: {error}"
                echo(f"  failed: {measured.failures[case.key]}")
                break
            measured.reports.setdefault(case.key, []).append(report)
    measured.load_after = os.getloadavg()
    measured.finished_at = datetime.now(UTC)
    return measured


# --- figures -----------------------------------------------------------------------------


def _group(report: dict[str, Any], name: str) -> dict[str, Any]:
    for group in report["group_metrics"]:
        if group["group"] == name:
            return dict(group)
    raise KeyError(name)


def _figure(report: dict[str, Any], group: str, what: str) -> float:
    g = _group(report, group)
    if what == "mbps":
        return float(g["total_throughput_megabytes_per_second"])
    if what == "msgps":
        return float(g["total_throughput_messages_per_second"])
    return float(g["average_latency_ms"][what])


def _values(m: Measured, key: str, group: str, what: str) -> list[float]:
    return [_figure(r, group, what) for r in m.reports.get(key, [])]


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _runs(values: Sequence[float], digits: int = 1) -> str:
    if not values:
        return "n/a"
    return " / ".join(f"{v:,.{digits}f}" for v in values)


def _server(report: dict[str, Any], key: str) -> float | None:
    value = report["server_stats"]["totals"].get(key)
    return None if value is None else float(value)


def _client_cpu(reports: Sequence[dict[str, Any]]) -> str:
    """The load generator's CPU % per run, marked when a load process was saturated
    (near 100% of its core: the client, not the server, may have been the limit)."""
    text = _runs([r["client"]["cpu_percent"] for r in reports], 0)
    if any(r["client"]["saturated"] for r in reports):
        text += " (client saturated)"
    return text


def _per_batch(reports: Sequence[dict[str, Any]], key: str) -> str:
    """A ``cpu_per_batch`` figure (µs) per run."""
    values = [r.get("cpu_per_batch", {}).get(key) for r in reports]
    return _runs([float(v) for v in values if v is not None], 0)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _machine(m: Measured) -> list[str]:
    from bench.load.params import SdkChoice
    from bench.load.report import machine_info

    info = machine_info(SdkChoice.OURS)
    memory = info["memory_bytes"]
    return [
        f"- **Machine**: {info['cpu_model']}, {info['cpu_count']} logical CPUs, "
        f"{format_size(memory or 0)} RAM, {info['os']} {info['kernel']}, "
        f"Python {info['python']} ({info['python_implementation']}).",
        "- **Where**: server(s) and load generator on this one machine, over loopback "
        "(127.0.0.1); each run starts its own node or 3-node cluster with fresh data "
        "directories in the system temp folder.",
        f"- **When**: {m.started_at:%Y-%m-%d %H:%M} to "
        f"{(m.finished_at or m.started_at):%H:%M} UTC; load average "
        f"{m.load_before[0]:.2f} before, {m.load_after[0]:.2f} after.",
        "- **Conditions**: the machine is shared with other engineers' test runs, so "
        "figures are noisy; every row was run twice (both values shown) to make the "
        "noise visible. The client (our SDK on trio) deals its actors to worker "
        "processes, as many as there are cores and at most one per stream "
        "(`--processes`); its CPU use is shown beside each figure, marked *client "
        "saturated* where a load process used 90% or more of its core.",
    ]


def _modes_table(m: Measured, producers: Sequence[int]) -> list[str]:
    lines = [
        "| mode | durability | producers | MB/s (run 1 / run 2) | msg/s (mean) | "
        "p50 ms | p99 ms | p999 ms | client CPU % | server CPU % | client CPU µs/batch | "
        "server CPU µs/batch | msgs/prepare | disk syncs/msg |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, label in (("single", "one node"), ("cluster", "3 nodes")):
        for durability in ("replicated", "persisted"):
            for n in producers:
                key = f"pp/{mode}/{durability}/{n}"
                reports = m.reports.get(key, [])
                if not reports:
                    why = m.failures.get(key, "not run")
                    lines.append(
                        f"| {label} | {durability} | {n} | not measured: {why} |" + " |" * 10
                    )
                    continue
                lines.append(
                    f"| {label} | {durability} | {n} | "
                    f"{_runs(_values(m, key, 'producers', 'mbps'))} | "
                    f"{_fmt(_mean(_values(m, key, 'producers', 'msgps')), 0)} | "
                    f"{_runs(_values(m, key, 'producers', 'p50'), 2)} | "
                    f"{_runs(_values(m, key, 'producers', 'p99'), 2)} | "
                    f"{_runs(_values(m, key, 'producers', 'p999'), 2)} | "
                    f"{_client_cpu(reports)} | "
                    f"{_runs([_server(r, 'cpu_percent') or 0.0 for r in reports], 0)} | "
                    f"{_per_batch(reports, 'client_us')} | "
                    f"{_per_batch(reports, 'server_us_total')} | "
                    f"{_fmt(_server(reports[0], 'messages_per_prepare'))} | "
                    f"{_fmt(_server(reports[0], 'disk_syncs_per_message'), 4)} |"
                )
    return lines


def _simple_table(
    m: Measured, keys: Sequence[tuple[str, str]], group: str, header: str
) -> list[str]:
    lines = [
        f"| {header} | MB/s (run 1 / run 2) | p50 ms | p99 ms | client CPU % | server CPU % |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label in keys:
        reports = m.reports.get(key, [])
        if not reports:
            lines.append(f"| {label} | not measured: {m.failures.get(key, 'not run')} | | | | |")
            continue
        lines.append(
            f"| {label} | {_runs(_values(m, key, group, 'mbps'))} | "
            f"{_runs(_values(m, key, group, 'p50'), 2)} | "
            f"{_runs(_values(m, key, group, 'p99'), 2)} | "
            f"{_client_cpu(reports)} | "
            f"{_runs([_server(r, 'cpu_percent') or 0.0 for r in reports], 0)} |"
        )
    return lines


def _group_commit_table(m: Measured) -> list[str]:
    lines = [
        "| producers | MB/s (run 1 / run 2) | p50 ms | p99 ms | disk syncs/msg | prepares/sync | "
        "server CPU % |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in (1, 16):
        key = f"gc/{n}"
        reports = m.reports.get(key, [])
        if not reports:
            lines.append(f"| {n} | not measured: {m.failures.get(key, 'not run')} | | | | | |")
            continue
        per_sync = [d.get("prepares_per_sync") for d in reports[0]["server_stats"]["delta"]]
        lines.append(
            f"| {n} | {_runs(_values(m, key, 'producers', 'mbps'))} | "
            f"{_runs(_values(m, key, 'producers', 'p50'), 2)} | "
            f"{_runs(_values(m, key, 'producers', 'p99'), 2)} | "
            f"{_runs([_server(r, 'disk_syncs_per_message') or 0.0 for r in reports], 4)} | "
            f"{_fmt(next((v for v in per_sync if v is not None), None), 2)} | "
            f"{_runs([_server(r, 'cpu_percent') or 0.0 for r in reports], 0)} |"
        )
    return lines


def _budget_table(m: Measured) -> list[str]:
    if not m.budget:
        return [f"Not measured: {m.failures.get('cpu budget', 'not run')}."]
    from bench.cpu_budget import BudgetRow, render_rows

    return render_rows([BudgetRow(**r) for r in m.budget])


def _ceiling_table(m: Measured) -> list[str]:
    lines = [
        "| raw path (250 KB frames, lock-step) | MB/s (run 1 / run 2) | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for name, results in m.loopback.items():
        lines.append(
            f"| loopback socket to a file, {name} | "
            f"{_runs([r.megabytes_per_second for r in results])} | "
            f"{_runs([r.p50_ms for r in results], 3)} | {_runs([r.p99_ms for r in results], 3)} |"
        )
    lines += ["", "| fsync | p50 ms (run 1 / run 2) | p99 ms | max ms |", "|---|---:|---:|---:|"]
    for block, syncs in m.fsync.items():
        lines.append(
            f"| append {int(block):,} B + fdatasync | {_runs([r.p50_ms for r in syncs], 2)} | "
            f"{_runs([r.p99_ms for r in syncs], 2)} | {_runs([r.max_ms for r in syncs], 2)} |"
        )
    return lines


def _budget(m: Measured, path: str, producers: int, node: str, what: str) -> float | None:
    """The mean over runs of a CPU budget figure (``server_us``, ``client_us``)."""
    values = [
        float(r[what])
        for r in m.budget
        if r["path"] == path
        and r["producers"] == producers
        and r["node"] == node
        and r[what] is not None
    ]
    return _mean(values)


def _backup_us(m: Measured, producers: int) -> float | None:
    """The busier backup's mean server CPU per batch."""
    backups = [_budget(m, "3 nodes", producers, f"backup {i}", "server_us") for i in (1, 2)]
    known = [b for b in backups if b is not None]
    return max(known) if known else None


CLIENT_US_BEFORE: Final = 570.0
"""Our SDK's client CPU per batch (1 producer) before the CPU work on both ends."""


def cpu_targets(m: Measured) -> list[tuple[str, str, str, str]]:
    """``(target, measured, required, met)`` for the CPU, latency and throughput goals."""

    def row(
        name: str, value: float | None, required: float, how: str, *, at_most: bool, unit: str
    ) -> tuple[str, str, str, str]:
        """A target met when ``value`` is at most (or at least) ``required``."""
        if value is None:
            return (name, "not measured", _req(required, at_most, unit), "n/a")
        met = value <= required if at_most else value >= required
        measured = f"{_fmt(value, 2)}{unit}" + (f" ({how})" if how else "")
        return (name, measured, _req(required, at_most, unit), "yes" if met else "**no**")

    raw4 = _budget(m, "raw", 4, "server", "server_us")
    node4 = _budget(m, "one node", 4, "server", "server_us")
    primary4 = _budget(m, "3 nodes", 4, "primary", "server_us")
    backup4 = _backup_us(m, 4)
    client1 = _budget(m, "one node", 1, "server", "client_us")
    producer1 = _mean(_values(m, "pp/single/replicated/1", "producers", "mbps"))
    single4 = _mean(_values(m, "pp/single/replicated/4", "producers", "mbps"))
    cluster4 = _mean(_values(m, "pp/cluster/replicated/4", "producers", "mbps"))
    consumer1 = _mean(_values(m, "pc/single/1", "consumers", "mbps"))
    rows = [
        row(
            "server CPU per batch ≤ 2.5x the raw path's (one node, 4 producers)",
            _ratio(node4, raw4),
            2.5,
            f"{_fmt(node4, 0)} / {_fmt(raw4, 0)} µs",
            at_most=True,
            unit="x",
        ),
        row(
            "a backup's CPU per batch ≤ ½ its primary's (3 nodes, 4 producers; the busier backup)",
            _ratio(backup4, primary4),
            0.5,
            f"{_fmt(backup4, 0)} / {_fmt(primary4, 0)} µs",
            at_most=True,
            unit="x",
        ),
        row(
            f"our SDK's client CPU per batch ≤ ½ of {CLIENT_US_BEFORE:.0f} µs (1 producer)",
            client1,
            CLIENT_US_BEFORE / 2,
            "",
            at_most=True,
            unit=" µs",
        ),
        row(
            "one node, replicated, 1 pinned producer ≥ 1.6x the earlier 240 MB/s",
            producer1,
            380.0,
            "",
            at_most=False,
            unit=" MB/s",
        ),
        row(
            "3 nodes ≥ ½ one node (replicated, 4 producers)",
            _ratio(cluster4, single4),
            0.5,
            f"{_fmt(cluster4)} / {_fmt(single4)} MB/s",
            at_most=False,
            unit="x",
        ),
        row(
            "warm pinned consumer ≥ 2x the pinned producer (1 actor, one node)",
            _ratio(consumer1, producer1),
            2.0,
            f"{_fmt(consumer1)} / {_fmt(producer1)} MB/s",
            at_most=False,
            unit="x",
        ),
    ]
    backup_p99 = m.backup_read.get("p99_ms")
    name = "a poll on a backup right after an acknowledged send returns it: p99 < 10 ms"
    if backup_p99 is None:
        why = m.backup_read.get("why", "not run")
        rows.append((name, f"not measured: {why}", "< 10 ms", "n/a"))
    else:
        met = "yes" if float(backup_p99) < 10.0 else "**no**"
        rows.append((name, f"{_fmt(float(backup_p99), 2)} ms", "< 10 ms", met))
    rows += _idle_consumer_rows(m.idle_consumer)
    return rows


def _idle_consumer_rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The two idle-consumer targets: CPU on an idle topic, delivery once a message comes."""
    cpu_name = "an idle consumer of our SDK and its node, together, over 60 s of an idle topic"
    latency_name = "a message sent to that waiting consumer is delivered: p99"
    together, p99 = figures.get("together_percent"), figures.get("p99_ms")
    if together is None or p99 is None:
        why = f"not measured: {figures.get('why', 'not run')}"
        return [(cpu_name, why, "< 1% of a core", "n/a"), (latency_name, why, "≤ 5 ms", "n/a")]
    node, consumer = figures.get("node_percent"), figures.get("consumer_percent")
    how = f" (node {_fmt(node, 2)}%, consumer {_fmt(consumer, 2)}%)" if node is not None else ""
    return [
        (
            cpu_name,
            f"{_fmt(float(together), 2)}% of a core{how}",
            "< 1% of a core",
            "yes" if float(together) < 1.0 else "**no**",
        ),
        (
            latency_name,
            f"{_fmt(float(p99), 2)} ms (p50 {_fmt(figures.get('p50_ms'), 2)} ms)",
            "≤ 5 ms",
            "yes" if float(p99) <= 5.0 else "**no**",
        ),
    ]


def _req(required: float, at_most: bool, unit: str) -> str:
    return f"{'≤' if at_most else '≥'} {required:g}{unit}"


def targets(m: Measured) -> list[tuple[str, float | None, float, str]]:
    """``(target, measured ratio, required, how)`` for the throughput ratios."""

    def mean_mbps(key: str, group: str = "producers") -> float | None:
        return _mean(_values(m, key, group, "mbps"))

    ceiling = _mean([r.megabytes_per_second for r in m.loopback.get("4 connections", [])])
    single4 = mean_mbps("pp/single/replicated/4")
    cluster4 = mean_mbps("pp/cluster/replicated/4")
    persisted16 = mean_mbps("pp/single/persisted/16")
    persisted1 = mean_mbps("pp/single/persisted/1")
    shared16 = mean_mbps("gc/16")
    shared1 = mean_mbps("gc/1")
    consumer1 = mean_mbps("pc/single/1", "consumers")
    producer1 = mean_mbps("pp/single/replicated/1")
    return [
        (
            "one node, replicated, 4 producers, 1 KB x 250 ≥ ½ raw ceiling (4 connections)",
            _ratio(single4, ceiling),
            0.5,
            f"{_fmt(single4)} / {_fmt(ceiling)} MB/s",
        ),
        (
            "3 nodes replicated ≥ ½ one node (4 producers)",
            _ratio(cluster4, single4),
            0.5,
            f"{_fmt(cluster4)} / {_fmt(single4)} MB/s",
        ),
        (
            "persisted, 16 producers ≥ 5 x 1 producer, one partition (group commit; one node)",
            _ratio(shared16, shared1),
            5.0,
            f"{_fmt(shared16)} / {_fmt(shared1)} MB/s",
        ),
        (
            "the same with a partition per producer (pinned; one node)",
            _ratio(persisted16, persisted1),
            5.0,
            f"{_fmt(persisted16)} / {_fmt(persisted1)} MB/s",
        ),
        (
            "warm pinned consumer ≥ pinned producer (1 actor, one node, replicated)",
            _ratio(consumer1, producer1),
            1.0,
            f"{_fmt(consumer1)} / {_fmt(producer1)} MB/s",
        ),
    ]


def render(m: Measured, *, runs: int, quick: bool = False) -> str:
    """The page, from the measurements (the prose is in ``_prose``)."""
    producers = (1, 4, 16) if not quick else (1, 4)
    lines = [
        "# Performance",
        "",
        "<!-- Generated by `python -m bench.load.perfpage`; edit bench/load/perfpage.py, "
        "not this file. -->",
        "",
        "Every figure on this page comes from one run of",
        "",
        "```",
        "python -m bench.load.perfpage",
        "```",
        "",
        f"which ran each `viewstream-bench` command listed at the bottom {runs} time(s), "
        "each against its own freshly started node or 3-node cluster, measured the raw "
        "ceiling of the machine in the same invocation, and wrote this page. Throughput "
        "is user data (payloads) in MB = 10^6 bytes per second; latencies are per batch, "
        "in milliseconds, averaged over the actors as iggy-bench does (see "
        "[Metrics](#metrics)).",
        "",
        "## Machine and conditions",
        "",
        *_machine(m),
        "",
        "## Targets, from this run",
        "",
        "CPU per batch comes from the [CPU budget](#cpu-per-batch) below; throughput from "
        "the producer and consumer tables.",
        "",
        "| target | measured | required | met |",
        "|---|---:|---:|---|",
        *(
            f"| {name} | {value} | {required} | {met} |"
            for name, value, required, met in cpu_targets(m)
        ),
        "",
        "## Throughput targets, from this run",
        "",
        "| target | measured | required | met |",
        "|---|---:|---:|---|",
    ]
    for name, ratio, required, how in targets(m):
        met = "n/a" if ratio is None else ("yes" if ratio >= required else "**no**")
        lines.append(f"| {name} | {_fmt(ratio, 2)}x ({how}) | {required:g}x | {met} |")
    lines += [
        "",
        "## The raw ceiling of this machine",
        "",
        *_ceiling_table(m),
        "",
        "## CPU per batch",
        "",
        "`python -m bench.cpu_budget` (run by this page, interleaved per producer count): "
        "the same batch (1000-byte messages, 250 per batch) sent lock-step by 1 and 4 "
        "producers over the raw path (a loopback socket into a file; each frame is the "
        "SEND_MESSAGES request of the batch), to one node, and to a 3-node cluster whose "
        "bench partitions all have the same primary (so the other two nodes are backups "
        "of every batch). Server CPU is each node's process CPU clock over the load "
        "window (every thread; nanoseconds); client CPU is the load generator's "
        "(`getrusage`; on the raw path the client threads' `thread_time`); both divided by "
        "the batches. **x raw** is the ratio to the raw path's figure at the same "
        "producer count and run. **idle CPU %** is the node's CPU over one second with "
        "no load just before its run.",
        "",
        *_budget_table(m),
        "",
        "## Producers: modes x durability x producers",
        "",
        "`pinned-producer`: each producer sends lock-step (one batch in flight) to its own "
        "stream (one partition), 1000-byte messages, 250 per batch.",
        "",
        *_modes_table(m, producers),
        "",
        "## Group commit (persisted, one partition)",
        "",
        "`balanced-producer` with one partition: every producer writes the same "
        "partition, so batches of several producers can share one fsync. One node, "
        "persisted.",
        "",
        *_group_commit_table(m),
        "",
        "## Consumers (warm)",
        "",
        "`pinned-consumer`: each consumer polls 250 messages at a time by offset from "
        "its own stream, which the bench wrote just before the measured run (so the data "
        "is in the page cache: warm). Latency is the poll call.",
        "",
        *_simple_table(
            m,
            [
                ("pc/single/1", "one node, 1 consumer"),
                ("pc/single/4", "one node, 4 consumers"),
                ("pc/cluster/1", "3 nodes, 1 consumer"),
                ("pc/cluster/4", "3 nodes, 4 consumers"),
            ],
            "consumers",
            "consumers",
        ),
        "",
        "## End-to-end latency",
        "",
        "`end-to-end-producing-consumer`: each actor sends a batch of 250 x 1000 B, then "
        "polls until it has read it back; latency is now minus the first message's "
        "origin timestamp (send + commit + poll).",
        "",
        *_simple_table(
            m,
            [
                ("e2e/single/1", "one node, 1 actor"),
                ("e2e/single/4", "one node, 4 actors"),
                ("e2e/cluster/1", "3 nodes, 1 actor"),
                ("e2e/cluster/4", "3 nodes, 4 actors"),
            ],
            "producing_consumers",
            "actors",
        ),
        "",
        "## Batch size against latency",
        "",
        "One producer, one node, replicated, 1000-byte messages; only the batch length changes.",
        "",
        "| messages per batch | MB/s (run 1 / run 2) | msg/s (mean) | p50 ms | p99 ms | "
        "client CPU % |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for per_batch in (1, 10, 100, 1000):
        key = f"batch/{per_batch}"
        reports = m.reports.get(key, [])
        if not reports:
            lines.append(
                f"| {per_batch} | not measured: {m.failures.get(key, 'not run')} | | | | |"
            )
            continue
        lines.append(
            f"| {per_batch} | {_runs(_values(m, key, 'producers', 'mbps'))} | "
            f"{_fmt(_mean(_values(m, key, 'producers', 'msgps')), 0)} | "
            f"{_runs(_values(m, key, 'producers', 'p50'), 3)} | "
            f"{_runs(_values(m, key, 'producers', 'p99'), 3)} | "
            f"{_client_cpu(reports)} |"
        )
    lines += ["", "## What the figures say", "", *_prose(m), ""]
    lines += _metrics_section()
    lines += ["", *_reference_section()]
    lines += [
        "",
        "## Commands",
        "",
        "Each row above is one of these (run "
        f"{runs} time(s)); `-q` only turns the live display off.",
        "",
        "```",
    ]
    lines += [case.command for case in all_cases(quick)]
    lines += ["```", ""]
    if m.failures:
        lines += ["## Not measured", ""]
        lines += [f"- `{key}`: {why}" for key, why in sorted(m.failures.items())]
        lines.append("")
    return "\n".join(lines)


def _prose(m: Measured) -> list[str]:
    """The explanations, with this run's numbers in them."""

    def mbps(key: str, group: str = "producers") -> float | None:
        return _mean(_values(m, key, group, "mbps"))

    def p50(key: str, group: str = "producers") -> float | None:
        return _mean(_values(m, key, group, "p50"))

    def client_cpu(key: str) -> float | None:
        return _mean([r["client"]["cpu_percent"] for r in m.reports.get(key, [])])

    def server_cpu(key: str) -> float | None:
        return _mean([_server(r, "cpu_percent") or 0.0 for r in m.reports.get(key, [])])

    def syncs(key: str) -> float | None:
        return _mean([_server(r, "syncs_per_message") or 0.0 for r in m.reports.get(key, [])])

    def disk_syncs(key: str) -> float | None:
        return _mean([_server(r, "disk_syncs_per_message") or 0.0 for r in m.reports.get(key, [])])

    ceiling1 = _mean([r.p50_ms for r in m.loopback.get("1 connection", [])])
    ceiling4 = _mean([r.megabytes_per_second for r in m.loopback.get("4 connections", [])])
    ceiling4_p50 = _mean([r.p50_ms for r in m.loopback.get("4 connections", [])])
    fsync4k = _mean([r.p50_ms for r in m.fsync.get("4096", [])])
    lat1 = p50("batch/1")
    lat1000 = p50("batch/1000")
    per_message_us = (
        (lat1000 - lat1) / 999 * 1000 if lat1 is not None and lat1000 is not None else None
    )
    per_batch_ms = per_message_us * 250 / 1000 if per_message_us is not None else None
    s1, s4, s16 = (mbps(f"pp/single/replicated/{n}") for n in (1, 4, 16))
    q1, q4, q16 = (p50(f"pp/single/replicated/{n}") for n in (1, 4, 16))
    p1, p16 = mbps("pp/single/persisted/1"), mbps("pp/single/persisted/16")
    g1, g16 = mbps("gc/1"), mbps("gc/16")
    c4 = mbps("pp/cluster/replicated/4")
    e2e_cluster = p50("e2e/cluster/1", "producing_consumers")
    e2e_single = p50("e2e/single/1", "producing_consumers")
    load = max(m.load_before[0], m.load_after[0])
    raw1 = _budget(m, "raw", 1, "server", "server_us")
    node1 = _budget(m, "one node", 1, "server", "server_us")
    client1 = _budget(m, "one node", 1, "server", "client_us")
    raw_client1 = _budget(m, "raw", 1, "server", "client_us")
    primary4 = _budget(m, "3 nodes", 4, "primary", "server_us")
    backup4 = _backup_us(m, 4)
    idle = _mean([float(r["idle_cpu_percent"]) for r in m.budget if r.get("idle_cpu_percent")])
    return [
        "**CPU per batch.** One batch of 250 messages costs one node "
        f"{_fmt(node1, 0)} µs of CPU with one producer, against {_fmt(raw1, 0)} µs for the "
        "raw path to take the same bytes into a file; our SDK spends "
        f"{_fmt(client1, 0)} µs building and sending it, against {_fmt(raw_client1, 0)} µs "
        "for the raw client to write it to its socket. A lock-step round trip pays both. "
        "Where the client's CPU goes, by profile (the batch build about a third of it: "
        "copying and hashing 250 payloads in Python), is in the SDK guide, section 12 "
        "(`docs/sdk.md`). "
        f"In a cluster a backup spends {_fmt(backup4, 0)} µs per batch and its primary "
        f"{_fmt(primary4, 0)} µs (4 producers). These are CPU seconds, not wall time, so "
        "they hold on a busy machine better than throughput does, though a loaded machine "
        "still inflates them (cache misses, context switches): compare rows of one run. "
        f"Idle, a node used {_fmt(idle, 2)}% of a core (its ticks and heartbeats; the "
        "last column), which the per-batch figures include.",
        "",
        "**Per-operation cost.** A lock-step producer's latency is the cost of one "
        "operation when nothing waits in front of it. With one message per batch a send "
        f"takes {_fmt(lat1, 3)} ms at the median, while a raw 250 KB loopback round trip "
        f"takes {_fmt(ceiling1, 3)} ms: the fixed cost of a request is Python work on both "
        "ends (framing, checksums, one consensus round, the journal append, the reply), "
        "not moving bytes. From 1 to 1000 messages per batch the median grows by about "
        f"{_fmt(per_message_us, 1)} µs per message, so batching spreads the fixed cost "
        "over the messages: throughput rises with the batch length much faster than "
        "latency does. That per-message cost is also why the raw-ceiling target is missed: "
        f"250 messages cost about {_fmt(per_batch_ms, 2)} ms of per-message work per "
        f"batch, against {_fmt(ceiling4_p50, 2)} ms for the raw path to move the same "
        f"250 KB ({_fmt(ceiling4)} MB/s with 4 connections); the raw path does no "
        "per-message work at all.",
        "",
        "**Queueing.** With more producers the server has more batches than it can take "
        "at once, and the extra latency is waiting, not slower operations: on one node "
        f"(replicated) the median goes {_fmt(q1, 2)} → {_fmt(q4, 2)} → {_fmt(q16, 2)} ms "
        f"at 1, 4 and 16 producers while throughput goes {_fmt(s1)} → {_fmt(s4)} → "
        f"{_fmt(s16)} MB/s. Once throughput stops growing, each added producer adds its "
        "batch's service time to everyone's wait (Little's law: latency ≈ producers / "
        "throughput in batches per second).",
        "",
        "**Who is saturated.** The server runs one event loop (plus fsync threads) and "
        "each load process one Python thread. At 4 producers on one node the client "
        f"used {_fmt(client_cpu('pp/single/replicated/4'), 0)}% of a core and the server "
        f"{_fmt(server_cpu('pp/single/replicated/4'), 0)}%, yet throughput no longer "
        "grew: neither process had a core to itself. The machine has 2 cores and other "
        f"engineers' test runs were using them (load average up to {load:.1f} during this "
        "run), so both sides spent time waiting for a CPU. These figures are a floor for "
        "this code, not its capacity; a CPU column near 100% would mean that side is the "
        "limit.",
        "",
        "**Replicated against persisted.** `persisted` acknowledges a batch only after "
        f"an fdatasync, and one fdatasync takes {_fmt(fsync4k, 2)} ms at the median on this "
        "disk. A lock-step producer therefore pays one sync per batch "
        f"({_fmt(p1)} MB/s for one pinned producer). With pinned producers each partition "
        "has one batch in flight, so each partition's sync covers one batch (1/250 = "
        f"{_fmt(syncs('pp/single/persisted/16'), 4)} partition syncs per message at 16 "
        "producers); but partitions asking at once share one `syncfs` of the file system "
        "(`docs/durability.md`, Group commit), so at 16 producers "
        f"{_fmt(disk_syncs('pp/single/persisted/16'), 4)} syncs per message reached the "
        f"disk, and throughput rose to {_fmt(p16)} MB/s. Group commit within one "
        "partition shows with one shared partition: sixteen producers reach "
        f"{_fmt(g16)} MB/s against {_fmt(g1)} MB/s for one, with "
        f"{_fmt(disk_syncs('gc/16'), 4)} disk syncs per message (several batches per "
        "fsync).",
        "",
        "**Warm consumers.** A pinned consumer's poll of 250 messages takes "
        f"{_fmt(p50('pc/single/1', 'consumers'), 2)} ms at the median on one node, and one "
        f"consumer reads {_fmt(mbps('pc/single/1', 'consumers'))} MB/s against "
        f"{_fmt(s1)} MB/s for one producer. The read path does less on the server (no "
        "consensus round, no journal write) and little per message in the client: the "
        "node sends stored batches as they are, and the load generator reads every "
        "payload as a view of the reply (`PolledMessages.payloads()`), making no object "
        "per message. A poll is lock-step: the client waits for the node and the node for "
        "the client, so a poll takes about the client's CPU per batch plus the node's "
        "(the consumer table), and on two shared cores it also waits for a core. Whether "
        "the consumer beats the producer by 2x depends on which side got more of the "
        "shared cores during the run; compare the two runs of each row.",
        "",
        "**One node against three.** In a 3-node cluster every batch is also written by "
        "two backups and committed once one of them acknowledges; here all three nodes "
        "and the load generator share the same two cores, so the cluster figure "
        f"({_fmt(c4)} MB/s at 4 producers) measures three processes sharing two cores as "
        "much as replication. On separate machines the backups' work would not take CPU "
        "from the primary.",
        "",
        "**End-to-end latency on three nodes.** On one node a producing consumer reads "
        f"its batch back {_fmt(e2e_single, 1)} ms (median) after stamping it; on three "
        f"nodes it takes {_fmt(e2e_cluster, 1)} ms. On three nodes the send is "
        "acknowledged once a backup has the batch, and the node answering the poll "
        "must have applied the op: a backup learns the commit from the Commit its "
        "primary sends as soon as its pipeline drains (it used to wait for the idle "
        "commit heartbeat, up to 500 ms). The 3-node p99 in the table stays far above its "
        "median; this page does not measure why (three nodes and the load generator "
        "share two cores, so a node that must answer may wait for one).",
        "",
        "**Noise.** The two runs of a row differ by what the machine was doing at the "
        "time; treat differences between rows smaller than the spread between runs as "
        "noise.",
    ]


def _metrics_section() -> list[str]:
    return [
        "## Metrics",
        "",
        "- **Latency of a batch**: producer, the send call (from handing the batch to "
        "the SDK to the acknowledgement); consumer of `pc`/`bcg`, the poll call; consumer "
        "of `ppc`/`bpcg` and producing consumers (`e2e`, `e2ecg`), now minus the first "
        "polled message's origin timestamp (end to end).",
        "- **pXX**: linear interpolation between the closest ranks of an actor's sorted "
        "batch latencies; the group figure is the mean of its actors' (iggy-bench's "
        "definition). **avg**, **median**: over the raw latencies. **min, max, std dev**: "
        "over the raw latencies (iggy-bench takes these over its time series).",
        "- **MB/s**: an actor's user-data bytes (payloads, 10^6 per MB) over its measured "
        "time; a group's is the sum over its actors. **msg/s** likewise.",
        "- **client CPU %**: user + system CPU time of the bench's load processes over the "
        "wall time of the load, in percent of one core (`resource.getrusage`, summed over "
        "the worker processes, so above 100 with several). **server CPU %**: the same for "
        "the server processes, read from `/proc`, summed over nodes.",
        "- **client / server CPU µs/batch**: the same CPU seconds over the load window "
        "(the server's from each node's process CPU clock, which counts every thread in "
        "nanoseconds) divided by the batches sent.",
        "- **msgs/prepare**, **disk syncs/msg**: from the server's counters "
        "(`viewstream stats`), differences over the run: messages per replicated "
        "prepare, and syncs that reached the disk per message: a partition's own sync "
        "rounds (`fdatasync`), except those a shared flush covered, plus the shared "
        "flushes (`syncfs`, node counter `flushes`), summed over nodes.",
        "- The full schema of `report.json` is in `bench/load/report.py`; "
        "`viewstream-bench compare A.json B.json` prints the ratios between two runs.",
    ]


def _reference_section() -> list[str]:
    """How to run ``viewstream-bench`` (static text, kept next to the generator)."""
    return [
        "## viewstream-bench",
        "",
        "The shape and the option names are iggy-bench's, so a command reads the same "
        "against Apache Iggy:",
        "",
        "```",
        "viewstream-bench [GLOBAL OPTIONS] <kind> [KIND OPTIONS] [tcp [--server-address A]",
        "                 [output [-o DIR] [--identifier ID] [--remark TEXT] [--open-charts]]]",
        "viewstream-bench compare A.json B.json     # ratios B/A of every group metric",
        "viewstream-bench examples                  # example commands",
        "```",
        "",
        "| kind | alias | actors |",
        "|---|---|---|",
        "| `pinned-producer` | `pp` | producers, each to its own stream, partition 0 |",
        "| `pinned-consumer` | `pc` | consumers, each polling its own stream by offset; "
        "the bench writes the data first (not measured) |",
        "| `pinned-producer-and-consumer` | `ppc` | both at once; consumer latency end to end |",
        "| `balanced-producer` | `bp` | producers over all partitions of the streams "
        "(balanced partitioning) |",
        "| `balanced-consumer-group` | `bcg` | consumers as members of consumer groups "
        "(`next` + auto-commit); data written first |",
        "| `balanced-producer-and-consumer-group` | `bpcg` | both at once |",
        "| `end-to-end-producing-consumer` | `e2e` | each actor sends a batch, then polls "
        "it back |",
        "| `end-to-end-producing-consumer-group` | `e2ecg` | the same, polling as group "
        "members (one partition per member) |",
        "",
        "| global option | default | meaning |",
        "|---|---|---|",
        "| `-m, --message-size` | 1000 | payload bytes per message, or a range `200..500` |",
        "| `-P, --messages-per-batch` | 1000 | or a range |",
        "| `-b, --message-batches` | 1000 | batches per actor |",
        "| `-T, --total-data` | | user bytes for all actors (`10GB`), instead of `-b` |",
        "| `-r, --rate-limit` | none | aggregate bytes/s (`100MB`), split over the actors |",
        "| `-w, --warmup-time` | 0s | each actor runs this long before it records |",
        "| `-t, --sampling-time` | 10ms | time-series bucket |",
        "| `-W, --moving-average-window` | 20 | buckets in the throughput moving average |",
        "| `-u, --username`, `-p, --password` | iggy / iggy | credentials |",
        "| `--durability` | replicated | the bench topics' `durability` (`persisted`: "
        "acknowledged after fsync) |",
        "| `--reuse-streams` | off | keep existing bench streams (pp, bp, pc, bcg) |",
        "| `--embedded single\\|cluster` | off | start a node or a 3-node cluster "
        "(`viewstream serve`, 127.0.0.1, fresh temp data dirs) and stop it after |",
        "| `--sdk ours\\|official` | ours | drive the load with our SDK (trio) or the "
        "official `apache-iggy` (asyncio) |",
        "| `--processes N` | cores, at most actors | worker processes the actors are "
        "dealt to (a stream's actors stay together); reports merged from raw records |",
        "| `--seed`, `--poll-interval`, `-q` | 42, 0.5ms, off | payload seed, wait after "
        "an empty poll, no live display |",
        "",
        "Kind options (each kind offers those it uses): `-p/--producers` (8), "
        "`-c/--consumers` (8), `-s/--streams` (pinned: one per actor; balanced: 1), "
        "`-a/--partitions` (pinned: 1; balanced: 24; e2ecg: one per member), "
        "`-g/--consumer-groups` (1), `-R/--read-amplification` (1.05), "
        "`-T/--max-topic-size`, `-e/--message-expiry`. Transport: `tcp "
        "--server-address HOST:PORT[,HOST:PORT...]` (default 127.0.0.1:8090).",
        "",
        "While it runs it shows a progress bar per role (batches, MB/s); then a "
        "throughput table and a latency table per group, a table per actor, the client's "
        "CPU and the servers' counters. With `output`, a folder per run under the "
        "output directory, named like iggy-bench's "
        "(`<kind>_<actors>_<size>_<batch>_<volume>_tcp_<cpu>_<mode>_<durability>_<sdk>`), "
        "holds `report.json` and `throughput`, `latency` and `latency_distribution` "
        "charts as PNG and as self-contained HTML.",
        "",
        "`report.json` (schema `viewstream-bench/1`): `uuid`, `timestamp`, `params` "
        "(every option and the derived counts), `machine` (host, CPU, memory, kernel, "
        "Python, SDK), `cluster` (embedded mode, addresses, server pids), `client` (CPU "
        "seconds and percent of a core during the load, summed over the load processes and "
        "per process, `saturated` when one is above 90%), `cpu_per_batch` (client and "
        "per-node server CPU µs per batch), "
        "`server_stats` (`before`/`after`: each node's `GET_STATS` and per-group "
        "counters; `delta` per node: commit rounds/s, messages per prepare, syncs and disk "
        "syncs per message, prepares per sync, CPU %; `totals`), `group_metrics[]` (per group: "
        "total and average MB/s and msg/s, `average_latency_ms` and `pooled_latency_ms` "
        "with p50 … p9999, avg, median, min, max, std_dev, the latency distribution and "
        "the time series), `individual_metrics[]` (per actor, with `throughput_mb_ts`, "
        "`throughput_msg_ts`, `latency_ts`) and `warnings[]`.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.perfpage", description="Regenerate docs/performance.md."
    )
    parser.add_argument("--runs", type=int, default=2, help="runs of each row (default: 2)")
    parser.add_argument("--output", type=Path, default=PAGE, help="the page (default: %(default)s)")
    parser.add_argument(
        "--reports-dir",
        type=Path,
        default=None,
        help="keep every run's report folder here (default: performance_results/perfpage-<time>)",
    )
    parser.add_argument("--charts", action="store_true", help="write charts with each report")
    parser.add_argument(
        "--only", default=None, help="run only the rows whose key starts with this (pp/, pc/ ...)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny runs (to test the page)")
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="render the page again from a measured.json an earlier run wrote (no runs)",
    )
    args = parser.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    reports_dir = args.reports_dir or Path("performance_results") / f"perfpage-{stamp}"
    started = time.monotonic()
    if args.source is not None:
        measured = load_measured(args.source)
        reports_dir = args.source.parent
    else:
        cases = [
            c for c in all_cases(args.quick) if args.only is None or c.key.startswith(args.only)
        ]
        measured = measure(cases, args.runs, reports_dir, charts=args.charts, quick=args.quick)
        save_measured(measured, reports_dir / "measured.json")
    page = render(measured, runs=args.runs, quick=args.quick)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page, encoding="utf-8")
    print(
        f"wrote {args.output} in {time.monotonic() - started:.0f} s "
        f"({platform.node()}); reports in {reports_dir}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
