"""The report of a run: metrics from the raw records, machine facts, ``report.json``,
the output folder, and ``compare``.

Schema (``SCHEMA``; every figure in ``docs/performance.md`` is read from such a file):

```
schema                "viewstream-bench/1"
uuid, timestamp       run id; UTC start time (ISO 8601)
params                BenchParams.to_json(): every option, plus the derived counts
machine               host, OS, kernel, CPU model and count, memory, Python, SDK
                      (iggy-bench calls it "hardware")
cluster               embedded (none|single|cluster), addresses, nodes, server pids
client                the load generator's CPU over the load (ClientUsage.to_json()):
                      summed over its processes, and each process's own share
cpu_per_batch         client and server CPU microseconds per recorded batch (the
                      server's from /proc over the load window, per node and summed)
server_stats          before / after: each node's GET_STATS and per-group counters;
                      delta: per node, what it did during the load (servers.server_delta);
                      totals: the deltas summed over the nodes
group_metrics[]       GroupMetrics.to_json(): producers, consumers,
                      producing_consumers, and "aggregate" (producers and consumers
                      together) for the producer+consumer kinds
individual_metrics[]  ActorMetrics.to_json() for every actor, with its time series
warnings[]            anything that makes the figures less than they seem
```
"""

from __future__ import annotations

import json
import os
import platform
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.load.metrics import ActorMetrics, GroupMetrics, actor_metrics, group_metrics
from bench.load.params import BenchParams, Embedded, SdkChoice
from bench.load.plan import Role
from bench.load.runner import RunResult
from bench.load.servers import server_delta

__all__ = [
    "SCHEMA",
    "build_report",
    "cpu_per_batch",
    "compare_reports",
    "load_report",
    "machine_info",
    "run_folder_name",
    "write_report",
]

SCHEMA: Final = "viewstream-bench/1"
GROUP_NAMES: Final[dict[Role, str]] = {
    Role.PRODUCER: "producers",
    Role.CONSUMER: "consumers",
    Role.PRODUCING_CONSUMER: "producing_consumers",
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def machine_info(sdk: SdkChoice) -> dict[str, Any]:
    """Facts about this machine and the client library (``machine`` in the report)."""
    if sdk is SdkChoice.OFFICIAL:
        from importlib.metadata import version

        sdk_name, sdk_version = "apache-iggy", version("apache-iggy")
    else:
        from sdk.connection_string import ClientConfig

        sdk_name, sdk_version = ClientConfig().sdk_name, ClientConfig().sdk_version
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "hostname": socket.gethostname(),
        "os": platform.system(),
        "kernel": platform.release(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "sdk": sdk_name,
        "sdk_version": sdk_version,
        "load_average_at_end": list(load),
    }


@dataclass(frozen=True, slots=True)
class Metrics:
    """Per-actor and per-group metrics of a run."""

    actors: list[ActorMetrics]
    groups: list[GroupMetrics]


def compute_metrics(result: RunResult) -> Metrics:
    params = result.params
    actors: list[ActorMetrics] = []
    by_role: dict[Role, list[int]] = {}
    specs = result.plan.actors
    for i, spec in enumerate(specs):
        actors.append(
            actor_metrics(
                spec.name,
                GROUP_NAMES[spec.role],
                result.records[spec.name],
                sampling_s=params.sampling_s,
                window=params.moving_average_window,
            )
        )
        by_role.setdefault(spec.role, []).append(i)
    groups: list[GroupMetrics] = []
    for role, indexes in by_role.items():
        groups.append(
            group_metrics(
                GROUP_NAMES[role],
                [actors[i] for i in indexes],
                [result.records[specs[i].name] for i in indexes],
                sampling_s=params.sampling_s,
            )
        )
    if Role.PRODUCER in by_role and Role.CONSUMER in by_role:
        everyone = list(range(len(specs)))
        groups.append(
            group_metrics(
                "aggregate",
                actors,
                [result.records[specs[i].name] for i in everyone],
                sampling_s=params.sampling_s,
            )
        )
    return Metrics(actors, groups)


def _server_section(result: RunResult) -> dict[str, Any]:
    deltas = [
        server_delta(b, a) for b, a in zip(result.server_before, result.server_after, strict=True)
    ]
    totals: dict[str, Any] = {}
    for key in (
        "prepares",
        "prepare_messages",
        "prepare_bytes",
        "commit_rounds",
        "syncs",
        "disk_syncs",
        "bytes_to_replicas",
        "requests",
        "forwarded",
    ):
        totals[key] = sum(int(d.get(key, 0)) for d in deltas)
    seconds = result.client.wall_s
    # Every replica counts its own copy: per cluster, a prepare is the primaries' count.
    primaries = [d for d in deltas if d.get("partition_primaries")]
    prepares = sum(int(d.get("prepares", 0)) for d in deltas)
    totals["commit_rounds_per_s_per_node"] = (
        totals["commit_rounds"] / seconds / max(1, len(deltas)) if seconds else None
    )
    totals["messages_per_prepare"] = totals["prepare_messages"] / prepares if prepares else None
    totals["syncs_per_message"] = (
        totals["syncs"] / totals["prepare_messages"] if totals["prepare_messages"] else None
    )
    totals["disk_syncs_per_message"] = (
        totals["disk_syncs"] / totals["prepare_messages"] if totals["prepare_messages"] else None
    )
    cpu = [d["cpu_percent"] for d in deltas if "cpu_percent" in d]
    totals["cpu_percent"] = sum(cpu) if cpu else None
    totals["nodes_with_primaries"] = len(primaries)
    return {
        "before": [_snapshot_json(s) for s in result.server_before],
        "after": [_snapshot_json(s) for s in result.server_after],
        "delta": deltas,
        "totals": totals,
    }


def cpu_per_batch(result: RunResult) -> dict[str, Any]:
    """Client and server CPU microseconds per batch: CPU over the load window divided
    by the batches recorded (the writers' when the kind writes, else the readers').
    ``None`` figures when there is no batch or a warmup ran (its batches are in the
    CPU window but not in the records)."""
    writers = [
        s.name for s in result.plan.actors if s.role in (Role.PRODUCER, Role.PRODUCING_CONSUMER)
    ]
    names = writers or [s.name for s in result.plan.actors]
    batches = sum(len(result.records[name]) for name in names)
    usable = batches > 0 and result.params.warmup_s == 0

    def per_batch(seconds: float | None) -> float | None:
        return seconds / batches * 1e6 if usable and seconds is not None else None

    server = {address: per_batch(cpu) for address, cpu in result.server_cpu_s.items()}
    measured = [cpu for cpu in result.server_cpu_s.values() if cpu is not None]
    return {
        "batches": batches,
        "client_us": per_batch(result.client.cpu_s),
        "server_us": server,
        "server_us_total": per_batch(sum(measured)) if measured else None,
    }


def _snapshot_json(snapshot: Any) -> dict[str, Any]:
    return {
        "address": snapshot.address,
        "server": snapshot.server,
        "runtime": snapshot.runtime,
        "cpu_s": snapshot.cpu_s,
        "error": snapshot.error,
    }


def build_report(result: RunResult, metrics: Metrics | None = None) -> dict[str, Any]:
    """The report of ``result`` (see the module docstring for the schema)."""
    metrics = metrics or compute_metrics(result)
    params = result.params
    warnings = list(result.warnings)
    if result.client.saturated:
        warnings.append(
            f"a load process used {result.client.cpu_percent_per_process_max:.0f}% of a core: "
            "the load generator may be the bottleneck, not the server (try --processes)"
        )
    for name, group in result.groups.items():
        if group.duplicates:
            warnings.append(
                f"consumer group {name} was delivered {group.duplicates} message(s) twice "
                "(auto-commit stores the offset after answering the poll); they count in "
                "the throughput"
            )
    for actor in metrics.actors:
        if actor.total_message_batches == 0:
            warnings.append(f"{actor.actor} recorded no batch")
    return {
        "schema": SCHEMA,
        "uuid": str(uuid.uuid4()),
        "timestamp": result.started_at.isoformat(),
        "params": params.to_json(),
        "machine": machine_info(params.sdk),
        "cluster": {
            "embedded": params.embedded.value,
            "addresses": result.addresses,
            "nodes": len(result.addresses),
            "server_pids": result.embedded_pids,
        },
        "preload_s": result.preload_s,
        "consumer_groups": {
            name: {"consumed": g.consumed, "duplicates": g.duplicates}
            for name, g in result.groups.items()
        },
        "client": {**result.client.to_json(), "processes_requested": result.processes_requested},
        "cpu_per_batch": cpu_per_batch(result),
        "server_stats": _server_section(result),
        "group_metrics": [g.to_json() for g in metrics.groups],
        "individual_metrics": [a.to_json() for a in metrics.actors],
        "warnings": warnings,
    }


def _volume(params: BenchParams) -> str:
    if params.total_data_bytes is not None:
        return f"{params.total_data_bytes}B"
    return f"{params.batches_per_actor()}b"


def run_folder_name(params: BenchParams, cpu_model: str) -> str:
    """iggy-bench's folder name: ``<kind>_<actors>_<msgsize>_<batch>_<volume>_tcp_<cpu>``
    plus the mode (``single``/``cluster``/``remote``), the durability and the SDK."""
    cpu = "".join(c if c.isalnum() else "-" for c in cpu_model).strip("-").lower()[:40]
    mode = {Embedded.NONE: "remote", Embedded.SINGLE: "single", Embedded.CLUSTER: "cluster"}
    parts = [
        params.kind.value,
        str(params.actors),
        str(params.message_size).replace("..", "-"),
        str(params.messages_per_batch).replace("..", "-"),
        _volume(params),
        "tcp",
        cpu,
        mode[params.embedded],
        params.durability.value,
        params.sdk.value,
    ]
    return "_".join(parts)


def write_report(report: dict[str, Any], output_dir: Path, *, charts: bool = True) -> Path:
    """Write ``report.json`` (and the charts) into a new folder under ``output_dir``;
    returns the folder. A name already taken gets ``-2``, ``-3`` ... appended."""
    params = BenchParams.from_json(report["params"])
    base = run_folder_name(params, str(report["machine"]["cpu_model"]))
    folder = output_dir / base
    suffix = 2
    while folder.exists():
        folder = output_dir / f"{base}-{suffix}"
        suffix += 1
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if charts:
        from bench.load.charts import write_charts

        write_charts(report, folder)
    return folder


def load_report(path: Path) -> dict[str, Any]:
    """A ``report.json`` (or the folder holding one).

    Raises:
        ValueError: not a viewstream-bench report.
    """
    if path.is_dir():
        path = path / "report.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} report")
    return data


COMPARED: Final = (
    ("total MB/s", ("total_throughput_megabytes_per_second",)),
    ("total msg/s", ("total_throughput_messages_per_second",)),
    ("p50 ms", ("average_latency_ms", "p50")),
    ("p90 ms", ("average_latency_ms", "p90")),
    ("p95 ms", ("average_latency_ms", "p95")),
    ("p99 ms", ("average_latency_ms", "p99")),
    ("p999 ms", ("average_latency_ms", "p999")),
    ("p9999 ms", ("average_latency_ms", "p9999")),
    ("avg ms", ("average_latency_ms", "avg")),
    ("max ms", ("pooled_latency_ms", "max")),
)


def _dig(data: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = data
    for key in path:
        value = value[key]
    return float(value)


def compare_reports(
    a: dict[str, Any], b: dict[str, Any]
) -> list[tuple[str, str, float, float, float | None]]:
    """Rows ``(group, metric, A, B, B/A)`` for every group the two reports share, plus
    the client's and the servers' CPU."""
    rows: list[tuple[str, str, float, float, float | None]] = []
    groups_b = {g["group"]: g for g in b["group_metrics"]}
    for group in a["group_metrics"]:
        other = groups_b.get(group["group"])
        if other is None:
            continue
        for label, path in COMPARED:
            x, y = _dig(group, path), _dig(other, path)
            rows.append((group["group"], label, x, y, y / x if x else None))
    x, y = float(a["client"]["cpu_percent"]), float(b["client"]["cpu_percent"])
    rows.append(("client", "cpu % of a core", x, y, y / x if x else None))
    sa = a["server_stats"]["totals"].get("cpu_percent")
    sb = b["server_stats"]["totals"].get("cpu_percent")
    if sa is not None and sb is not None:
        rows.append(("server", "cpu % of a core", sa, sb, sb / sa if sa else None))
    return rows
