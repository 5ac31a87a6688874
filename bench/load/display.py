"""What a person sees: the live progress display, the params line, the results tables and
the ``compare`` table (all with ``rich``).

The live display reads the actors' counters (:class:`bench.load.actors.Progress`) from
rich's refresh thread; the counters are plain integers written by the event loop, so a
read may be one batch stale and never blocks the load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from bench.load.actors import Shared
from bench.load.params import BenchParams, Embedded
from bench.load.plan import Plan, Role

__all__ = [
    "live_progress",
    "wide_console",
    "params_line",
    "print_compare",
    "print_results",
]

_LABELS = {
    Role.PRODUCER: "producers",
    Role.CONSUMER: "consumers",
    Role.PRODUCING_CONSUMER: "producing consumers",
}


class _RateColumn(ProgressColumn):
    """MB/s of user data since the task started."""

    def render(self, task: Task) -> Text:
        started = task.fields.get("started", 0.0)
        user_bytes = task.fields.get("user_bytes", 0)
        seconds = max(time.perf_counter() - started, 1e-9)
        return Text(f"{user_bytes / seconds / 1e6:8.2f} MB/s", style="cyan")


def _expected_batches(params: BenchParams, plan: Plan, role: Role) -> int | None:
    actors = sum(1 for a in plan.actors if a.role is role)
    if role is Role.CONSUMER and params.kind.has_producers:
        return None  # consumers follow the producers: as many batches as polls return
    return actors * plan.batches_per_actor


class _LiveProgress(Progress):
    """A ``Progress`` that pulls fresh numbers each time rich renders it (rich's refresh
    thread calls :meth:`get_renderable`)."""

    def __init__(self, *columns: ProgressColumn | str, pull: Callable[[], None], **kw: Any):
        # Set first: rich renders once while it builds its ``Live`` (rich 14 does).
        self._pull = pull
        super().__init__(*columns, **kw)

    def get_renderable(self) -> RenderableType:
        self._pull()
        return super().get_renderable()


@contextmanager
def live_progress(
    params: BenchParams, plan: Plan, shared: Shared, console: Console | None = None
) -> Iterator[object]:
    """A bar per role, refreshed from ``shared`` while the ``with`` block runs."""
    console = console or Console(stderr=True)
    roles = [r for r in Role if any(a.role is r for a in plan.actors)]
    tasks: dict[Role, TaskID] = {}

    def pull() -> None:
        for role, task in tasks.items():
            counters = shared.progress[role]
            progress.update(task, completed=counters.batches, user_bytes=counters.user_bytes)

    progress = _LiveProgress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        pull=pull,
        console=console,
        transient=False,
        disable=not console.is_terminal,
        refresh_per_second=4,
    )
    for role in roles:
        tasks[role] = progress.add_task(
            _LABELS[role],
            total=_expected_batches(params, plan, role),
            started=time.perf_counter(),
            user_bytes=0,
        )
    with progress:
        yield progress


def params_line(params: BenchParams, plan: Plan) -> str:
    """iggy-bench's one-line summary of what runs."""
    total_messages = plan.batches_per_actor * params.messages_per_batch.mean
    writers = params.producer_count + params.producing_consumer_count
    if params.embedded is Embedded.NONE:
        server = ",".join(params.server_addresses)
    else:
        server = f"embedded {params.embedded.value}"
    return (
        f"{params.kind.value} ({params.kind.alias}): producers {params.producer_count}, "
        f"consumers {params.consumer_count}, producing consumers "
        f"{params.producing_consumer_count}, streams {len(plan.streams)}, partitions "
        f"{plan.partitions}, consumer groups {len(plan.groups)}, "
        f"{plan.batches_per_actor} batches per actor, {params.messages_per_batch} messages "
        f"per batch of {params.message_size} B, "
        f"{total_messages * max(1, writers):.0f} messages written in all, durability "
        f"{params.durability.value}, sdk {params.sdk.value}, "
        f"server {server}"
    )


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 160 columns into a file or pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def print_results(report: dict[str, Any], console: Console | None = None) -> None:
    """The results tables of a report: groups, actors, client and server."""
    console = console or wide_console()
    throughput = Table(title="Throughput per group (MB = 10^6 bytes of user data)")
    for column in (
        "group",
        "actors",
        "total MB/s",
        "total msg/s",
        "MB/s per actor",
        "msg/s per actor",
        "messages",
        "time s",
    ):
        throughput.add_column(column, justify="left" if column == "group" else "right")
    latency = Table(
        title="Batch latency per group, ms (pXX, avg: mean over actors as iggy; "
        "min, max, std dev: all batches)"
    )
    for column in (
        "group",
        "p50",
        "p90",
        "p95",
        "p99",
        "p999",
        "p9999",
        "avg",
        "min",
        "max",
        "std dev",
    ):
        latency.add_column(column, justify="left" if column == "group" else "right")
    for g in report["group_metrics"]:
        lat = g["average_latency_ms"]
        pooled = g["pooled_latency_ms"]
        throughput.add_row(
            g["group"],
            str(g["actors"]),
            _f(g["total_throughput_megabytes_per_second"]),
            _f(g["total_throughput_messages_per_second"], 0),
            _f(g["average_throughput_megabytes_per_second"]),
            _f(g["average_throughput_messages_per_second"], 0),
            _f(g["total_messages"]),
            _f(g["total_time_s"]),
        )
        latency.add_row(
            g["group"],
            *(_f(lat[k], 3) for k in ("p50", "p90", "p95", "p99", "p999", "p9999", "avg")),
            _f(pooled["min"], 3),
            _f(pooled["max"], 3),
            _f(pooled["std_dev"], 3),
        )
    console.print(throughput)
    console.print(latency)
    if len(report["individual_metrics"]) <= 32:
        actors = Table(title="Results per actor")
        for column in ("actor", "batches", "MB/s", "msg/s", "p50", "p99", "p999", "max"):
            actors.add_column(column, justify="left" if column == "actor" else "right")
        for a in report["individual_metrics"]:
            lat = a["latency_ms"]
            actors.add_row(
                a["actor"],
                str(a["total_message_batches"]),
                _f(a["throughput_megabytes_per_second"]),
                _f(a["throughput_messages_per_second"], 0),
                *(_f(lat[k], 3) for k in ("p50", "p99", "p999", "max")),
            )
        console.print(actors)
    client = report["client"]
    totals = report["server_stats"]["totals"]
    processes = client.get("processes", 1)
    per_process = ""
    if processes > 1:
        shares = ", ".join(f"{p:.0f}%" for p in client["cpu_percent_per_process"])
        per_process = f" in {processes} processes ({shares})"
    console.print(
        f"client: {client['cpu_percent']:.0f}% of a core over {client['wall_s']:.2f} s"
        f"{per_process} (user {client['user_s']:.2f} s, system {client['system_s']:.2f} s)"
        + ("  [bold red]load generator saturated[/]" if client["saturated"] else "")
    )
    budget = report.get("cpu_per_batch")
    if budget and budget.get("client_us") is not None:
        console.print(
            f"cpu per batch: client {_f(budget['client_us'], 0)} µs, server "
            f"{_f(budget['server_us_total'], 0)} µs (all nodes; "
            + ", ".join(f"{a} {_f(v, 0)}" for a, v in budget["server_us"].items())
            + f") over {budget['batches']} batches"
        )
    console.print(
        f"server: cpu {_f(totals.get('cpu_percent'), 0)}% of a core (all nodes), "
        f"commit rounds/s per node {_f(totals.get('commit_rounds_per_s_per_node'), 1)}, "
        f"messages/prepare {_f(totals.get('messages_per_prepare'), 1)}, "
        f"syncs/message {_f(totals.get('syncs_per_message'), 5)} "
        f"(disk {_f(totals.get('disk_syncs_per_message'), 5)}), "
        f"bytes to replicas {_f(totals.get('bytes_to_replicas'))}"
    )
    for delta in report["server_stats"]["delta"]:
        if "error" in delta:
            console.print(f"[yellow]server stats of {delta['address']}: {delta['error']}[/]")
    for warning in report["warnings"]:
        console.print(f"[yellow]warning: {warning}[/]")


def print_compare(
    rows: list[tuple[str, str, float, float, float | None]],
    a_name: str,
    b_name: str,
    console: Console | None = None,
) -> None:
    """The ``compare`` table: each metric of A and B and the ratio B/A."""
    console = console or wide_console()
    table = Table(title=f"B/A with A = {a_name}, B = {b_name}")
    for column in ("group", "metric", "A", "B", "B/A"):
        table.add_column(column, justify="left" if column in ("group", "metric") else "right")
    for group, metric, x, y, ratio in rows:
        table.add_row(group, metric, _f(x, 3), _f(y, 3), "-" if ratio is None else f"{ratio:.3f}x")
    console.print(table)
