"""``viewstream-sim``: run one seed, or a swarm of seeds, and say what broke.

Usage::

    viewstream-sim --seed 42              # replay seed 42 exactly: summary and trace hash
    viewstream-sim --seeds 0..999         # a swarm, with a progress bar and a summary
    viewstream-sim --seeds 0..99 --plant longest-log   # show a planted bug is found
    viewstream-sim --seed 7 --no-faults   # the same world without faults

Exit codes: 0 every run passed, 127 a crash (an exception in the code under test),
128 a liveness failure, 129 a correctness failure. A swarm exits with the code of its
first failing seed. Every failure prints its seed, its checker, and the one command that
replays it.

The CLI only prints: the progress bar reads results after each run and never feeds
anything back into a run, so a seed replays the same with or without it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Final

import typer

from sim.planted import PLANTED, PLANTED_NODES, planted_classes
from sim.rng import SEED_MAX
from sim.world import EXIT_CODES, Result, run_seed

_PLANTS: Final = tuple(sorted(PLANTED | PLANTED_NODES))
"""The names ``--plant`` takes."""

app = typer.Typer(
    name="viewstream-sim",
    help="Deterministic simulation of a viewstream cluster from a seed.",
    add_completion=False,
)


def _seed_range(text: str) -> range:
    first, sep, last = text.partition("..")
    if not sep:
        raise typer.BadParameter("expected A..B (both inclusive)", param_hint="--seeds")
    try:
        low, high = int(first), int(last)
    except ValueError:
        raise typer.BadParameter("seeds are integers", param_hint="--seeds") from None
    if not 0 <= low <= high <= SEED_MAX:
        raise typer.BadParameter(f"need 0 <= A <= B <= {SEED_MAX}", param_hint="--seeds")
    return range(low, high + 1)


def _seed(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise typer.BadParameter("a seed is an integer", param_hint="--seed") from None
    if not 0 <= value <= SEED_MAX:
        raise typer.BadParameter(f"a seed is a u64 (0..{SEED_MAX})", param_hint="--seed")
    return value


def replay_command(seed: int, *, faults: bool, plant: str | None, strict_polls: bool = True) -> str:
    """The one command that replays ``seed`` as it was run."""
    parts = ["viewstream-sim", "--seed", str(seed)]
    if not faults:
        parts.append("--no-faults")
    if plant is not None:
        parts += ["--plant", plant]
    if not strict_polls:
        parts.append("--lenient-polls")
    return " ".join(parts)


def _print_failure(result: Result, *, faults: bool, plant: str | None, strict: bool) -> None:
    replay = replay_command(result.seed, faults=faults, plant=plant, strict_polls=strict)
    print(f"FAILED seed {result.seed}: {result.verdict} ({result.checker})")
    print(f"  {result.message}")
    print(f"  replay: {replay}")


def _run_one(seed: int, *, faults: bool, plant: str | None, strict: bool, verbose: bool) -> int:
    replica_class, node_class = planted_classes(plant)
    result = run_seed(
        seed,
        faults=faults,
        replica_class=replica_class,
        node_class=node_class,
        strict_polls=strict,
    )
    print(f"seed {seed}")
    lines = result.options.describe()
    for line in lines if verbose else lines[:1]:
        print(f"  {line}")
    stats = " ".join(f"{key}={value}" for key, value in result.stats.items())
    print(f"  {stats}")
    if verbose:
        for event in result.fault_events:
            print(f"  fault {event}")
    print(f"  ticks {result.ticks}, verdict {result.verdict}")
    print(f"trace {result.trace_hash}")
    if not result.ok:
        _print_failure(result, faults=faults, plant=plant, strict=strict)
    return result.exit_code


def _run_swarm(seeds: range, *, faults: bool, plant: str | None, strict: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Table

    console = Console(stderr=True)
    failures: list[Result] = []
    verdicts: dict[str, int] = {"ok": 0, "correctness": 0, "liveness": 0, "crash": 0}
    totals: dict[str, int] = {}
    by_nodes: dict[int, int] = {}
    replica_class, node_class = planted_classes(plant)
    columns = (
        TextColumn("[bold]swarm"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"),
        TextColumn("seed {task.fields[seed]}"),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("swarm", total=len(seeds), failed=0, seed=seeds[0])
        for seed in seeds:
            progress.update(task, seed=seed)
            result = run_seed(
                seed,
                faults=faults,
                replica_class=replica_class,
                node_class=node_class,
                strict_polls=strict,
            )
            verdicts[result.verdict] += 1
            by_nodes[result.options.node_count] = by_nodes.get(result.options.node_count, 0) + 1
            for key, value in result.stats.items():
                totals[key] = totals.get(key, 0) + value
            if not result.ok:
                failures.append(result)
                progress.console.print(
                    f"FAILED seed {seed}: {result.verdict} ({result.checker}) "
                    f"{result.message[:200]}\n  replay: "
                    f"{replay_command(seed, faults=faults, plant=plant, strict_polls=strict)}"
                )
            progress.update(task, advance=1, failed=len(failures))
    table = Table(title=f"swarm {seeds[0]}..{seeds[-1]} ({len(seeds)} seeds)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for verdict, count in verdicts.items():
        table.add_row(f"verdict {verdict}", str(count))
    for nodes in sorted(by_nodes):
        table.add_row(f"runs with {nodes} node(s)", str(by_nodes[nodes]))
    for key in (
        "committed_ops",
        "acked_messages",
        "messages_polled",
        "requests_completed",
        "logins",
        "logouts",
        "sessions_closed",
        "stale_evictions",
        "forwarded_writes",
        "backup_polls",
        "long_polls",
        "long_polls_woken",
        "fresh_reads",
        "fresh_reads_checked",
        "read_backs",
        "topics_created",
        "topics_deleted",
        "deleted_polls",
        "group_rebalances",
        "member_resyncs",
        "group_handoffs",
        "view_max",
        "crashes",
        "power_losses",
        "partitions",
        "corruptions",
        "outages",
        "packets_lost",
        "retentions",
        "purges",
        "segments_deleted",
        "deletions_crashed",
        "polls_past_retained",
        "poll_gaps",
        "liveness_waived",
    ):
        table.add_row(key, str(totals.get(key, 0)))
    Console().print(table)
    for result in failures:
        _print_failure(result, faults=faults, plant=plant, strict=strict)
    return failures[0].exit_code if failures else 0


@app.command()
def simulate(
    seed: Annotated[
        str | None, typer.Option("--seed", metavar="SEED", help="run (replay) one seed")
    ] = None,
    seeds: Annotated[
        str | None, typer.Option("--seeds", metavar="A..B", help="run a swarm of seeds A..B")
    ] = None,
    no_faults: Annotated[
        bool, typer.Option("--no-faults", help="no crashes, partitions, loss or corruption")
    ] = False,
    plant: Annotated[
        str | None,
        typer.Option(
            "--plant",
            metavar="BUG",
            help="run a replica or node with a deliberately planted bug (the checkers must "
            f"find it): {', '.join(_PLANTS)}",
        ),
    ] = None,
    lenient_polls: Annotated[
        bool,
        typer.Option(
            "--lenient-polls",
            help="count, rather than fail, a poll that skips forward to the serving replica's "
            "retained start (by default every skip is a failure: a hole in a replica's log)",
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="with --seed: print the options and fault log")
    ] = False,
) -> None:
    """Deterministic simulation of a viewstream cluster from a seed."""
    # Seeds arrive as text and are checked here, not by a typer parser, so that one
    # check covers "exactly one of the two" and the range with the same exit code (2).
    if (seed is None) == (seeds is None):
        raise typer.BadParameter("give exactly one of them", param_hint="--seed / --seeds")
    if plant is not None and plant not in _PLANTS:
        raise typer.BadParameter(f"choose from {', '.join(_PLANTS)}", param_hint="--plant")
    faults = not no_faults
    strict = not lenient_polls
    if seed is not None:
        value = _seed(seed)
        code = _run_one(value, faults=faults, plant=plant, strict=strict, verbose=verbose)
    else:
        assert seeds is not None
        swarm = _seed_range(seeds)
        code = _run_swarm(swarm, faults=faults, plant=plant, strict=strict)
    raise typer.Exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``viewstream-sim``; returns the exit code of the run.

    typer ends every invocation with ``SystemExit``: a run's verdict (0, 127, 128, 129;
    ``--help`` exits 0 too) is returned, and anything else (a bad argument: 2, after the
    usage error is printed) propagates as ``SystemExit``.
    """
    try:
        app(args=list(argv) if argv is not None else None, prog_name="viewstream-sim")
    except SystemExit as finished:
        code = finished.code
        if isinstance(code, int) and code in EXIT_CODES.values():
            return code
        raise
    return 0


def entry() -> None:
    """Console-script wrapper: exit with ``main``'s code."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
