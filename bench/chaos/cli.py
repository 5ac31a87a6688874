"""``viewstream-chaos``: a 3-node cluster of real processes, faults from a seed, a verdict.

Usage::

    viewstream-chaos --seed 7 --duration 600              # the documented soak
    viewstream-chaos --seed 7 --duration 60 --faults kill-primary,isolate
    viewstream-chaos --seed 7 --duration 120 --json report.json --keep
    viewstream-chaos --seed 1 --duration 120 --bus-tls      # the replica bus over TLS

Exit codes (as ``viewstream-sim``): 0 the run passed; 129 a correctness violation (an
acknowledged message lost or duplicated, replicas that differ, a consumer that went
backwards, ...); 128 the cluster did not recover within its bound; 127 the harness itself
failed. ``docs/reliability.md`` describes the harness, the faults and the checker.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Final

import typer

from bench.chaos.faults import FAULT_KINDS
from bench.chaos.run import ChaosConfig, report_json, run_chaos
from bench.chaos.workload import WorkloadConfig

USAGE_EXIT_CODE: Final = 2
"""The exit code of a bad argument (typer's usage error); never a run's verdict."""

app = typer.Typer(
    name="viewstream-chaos",
    help="Start a 3-node viewstream cluster on 127.0.0.1, load it with the SDK, inject "
    "faults drawn from a seed, then check that no acknowledged message was lost or "
    "duplicated and that every replica holds the same log.",
    add_completion=False,
)


def _range(text: str, name: str) -> tuple[float, float]:
    low, sep, high = text.partition("..")
    try:
        values = (float(low), float(high)) if sep else (float(low), float(low))
    except ValueError:
        raise typer.BadParameter("expected A..B in seconds", param_hint=name) from None
    if not 0 <= values[0] <= values[1]:
        raise typer.BadParameter("need 0 <= A <= B", param_hint=name)
    return values


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise typer.BadParameter(
            f"unknown fault kinds {unknown}; choose from {', '.join(FAULT_KINDS)}",
            param_hint="--faults",
        )
    return kinds


@app.command()
def chaos(
    seed: Annotated[int, typer.Option("--seed", help="draws the fault schedule")],
    duration: Annotated[
        float, typer.Option("--duration", metavar="SECONDS", help="time spent injecting faults")
    ],
    faults_min: Annotated[
        int,
        typer.Option(
            "--faults-min", metavar="N", help="apply at least N faults, past --duration if need be"
        ),
    ] = 0,
    faults: Annotated[
        str,
        typer.Option("--faults", help=f"comma-separated subset of: {', '.join(FAULT_KINDS)}"),
    ] = ",".join(FAULT_KINDS),
    hold: Annotated[
        str, typer.Option("--hold", metavar="A..B", help="fault duration range, s")
    ] = "2..6",
    gap: Annotated[
        str, typer.Option("--gap", metavar="A..B", help="calm between faults, s")
    ] = "1..3",
    recover_timeout: Annotated[
        float,
        typer.Option("--recover-timeout", metavar="SECONDS", help="liveness bound per fault"),
    ] = 90.0,
    tick_ms: Annotated[int, typer.Option("--tick-ms", help="the nodes' consensus tick")] = 10,
    producers: Annotated[int, typer.Option("--producers")] = 4,
    consumers: Annotated[int, typer.Option("--consumers")] = 2,
    stored_consumers: Annotated[int, typer.Option("--stored-consumers")] = 1,
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="data and logs (default: a temporary folder)"),
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="keep the folder after a clean run")] = False,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the report as JSON")
    ] = None,
    allow_retained_gaps: Annotated[
        bool,
        typer.Option(
            "--allow-retained-gaps",
            help="count, rather than fail on, a node that serves a partition only from some "
            "offset on (a replica that caught up by state transfer)",
        ),
    ] = False,
    no_final_crash: Annotated[
        bool,
        typer.Option("--no-final-crash", help="skip killing every node at once at the end"),
    ] = False,
    bus_tls: Annotated[
        bool,
        typer.Option(
            "--bus-tls",
            help="run the replica bus over mutual TLS, with a CA and node certificates made "
            "for the run (the proxy then cannot see frames: a dropped chunk breaks the "
            "connection)",
        ),
    ] = False,
) -> None:
    """Run the chaos harness once and exit with its verdict."""
    config = ChaosConfig(
        seed=seed,
        duration_s=duration,
        kinds=_kinds(faults),
        faults_min=faults_min,
        hold_s=_range(hold, "--hold"),
        gap_s=_range(gap, "--gap"),
        recover_timeout_s=recover_timeout,
        tick_ms=tick_ms,
        workload=WorkloadConfig(
            producers=producers, consumers=consumers, stored_consumers=stored_consumers
        ),
        folder=folder,
        keep=keep,
        final_crash=not no_final_crash,
        allow_retained_gaps=allow_retained_gaps,
        bus_tls=bus_tls,
    )
    raise typer.Exit(_run(config, json_path))


def _run(config: ChaosConfig, json_path: Path | None) -> int:
    def log(line: str) -> None:
        print(line, flush=True)

    report = run_chaos(config, log)
    print(report.summary(), flush=True)
    if json_path is not None:
        json_path.write_text(report_json(report) + "\n", encoding="utf-8")
    code = report.exit_code
    if code != 0:
        print(f"data and logs kept in {report.folder}", flush=True)
        print(
            f"replay: viewstream-chaos --seed {config.seed} --duration {config.duration_s:g}"
            + (" --bus-tls" if config.bus_tls else ""),
            flush=True,
        )
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``viewstream-chaos``; returns the run's exit code.

    typer ends every invocation with ``SystemExit``: a verdict (0, 127, 128, 129;
    ``--help`` exits 0) is returned, and a bad argument (2, after the usage error is
    printed) propagates as ``SystemExit``.
    """
    try:
        app(args=list(argv) if argv is not None else None, prog_name="viewstream-chaos")
    except SystemExit as finished:
        code = finished.code
        if isinstance(code, int) and code != USAGE_EXIT_CODE:
            return code
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
