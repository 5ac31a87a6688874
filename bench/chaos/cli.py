"""``viewstream-chaos``: a 3-node cluster of real processes, faults from a seed, a verdict.

Usage::

    viewstream-chaos --seed 7 --duration 600              # the documented soak
    viewstream-chaos --seed 7 --duration 60 --faults kill-primary,isolate
    viewstream-chaos --seed 7 --duration 120 --json report.json --keep

Exit codes (as ``viewstream-sim``): 0 the run passed; 129 a correctness violation (an
acknowledged message lost or duplicated, replicas that differ, a consumer that went
backwards, ...); 128 the cluster did not recover within its bound; 127 the harness itself
failed. ``docs/reliability.md`` describes the harness, the faults and the checker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.chaos.faults import FAULT_KINDS
from bench.chaos.run import ChaosConfig, report_json, run_chaos
from bench.chaos.workload import WorkloadConfig


def _range(text: str) -> tuple[float, float]:
    low, sep, high = text.partition("..")
    try:
        values = (float(low), float(high)) if sep else (float(low), float(low))
    except ValueError:
        raise argparse.ArgumentTypeError("expected A..B in seconds") from None
    if not 0 <= values[0] <= values[1]:
        raise argparse.ArgumentTypeError("need 0 <= A <= B")
    return values


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"unknown fault kinds {unknown}; choose from {', '.join(FAULT_KINDS)}"
        )
    return kinds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="viewstream-chaos",
        description="Start a 3-node viewstream cluster on 127.0.0.1, load it with the SDK, "
        "inject faults drawn from a seed, then check that no acknowledged message was lost "
        "or duplicated and that every replica holds the same log.",
    )
    parser.add_argument("--seed", type=int, required=True, help="draws the fault schedule")
    parser.add_argument(
        "--duration",
        type=float,
        required=True,
        metavar="SECONDS",
        help="time spent injecting faults",
    )
    parser.add_argument(
        "--faults-min",
        type=int,
        default=0,
        metavar="N",
        help="apply at least N faults, past --duration if need be",
    )
    parser.add_argument(
        "--faults",
        type=_kinds,
        default=FAULT_KINDS,
        help=f"comma-separated subset of: {', '.join(FAULT_KINDS)}",
    )
    parser.add_argument(
        "--hold", type=_range, default=(2.0, 6.0), metavar="A..B", help="fault duration range, s"
    )
    parser.add_argument(
        "--gap", type=_range, default=(1.0, 3.0), metavar="A..B", help="calm between faults, s"
    )
    parser.add_argument(
        "--recover-timeout",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="liveness bound per fault",
    )
    parser.add_argument("--tick-ms", type=int, default=10, help="the nodes' consensus tick")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--stored-consumers", type=int, default=1)
    parser.add_argument(
        "--dir", type=Path, default=None, help="data and logs (default: a temporary folder)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the folder after a clean run")
    parser.add_argument("--json", type=Path, default=None, help="write the report as JSON")
    parser.add_argument(
        "--allow-retained-gaps",
        action="store_true",
        help="count, rather than fail on, a node that serves a partition only from some offset "
        "on (a replica that caught up by state transfer)",
    )
    parser.add_argument(
        "--no-final-crash", action="store_true", help="skip killing every node at once at the end"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = ChaosConfig(
        seed=args.seed,
        duration_s=args.duration,
        kinds=args.faults,
        faults_min=args.faults_min,
        hold_s=args.hold,
        gap_s=args.gap,
        recover_timeout_s=args.recover_timeout,
        tick_ms=args.tick_ms,
        workload=WorkloadConfig(
            producers=args.producers,
            consumers=args.consumers,
            stored_consumers=args.stored_consumers,
        ),
        folder=args.dir,
        keep=args.keep,
        final_crash=not args.no_final_crash,
        allow_retained_gaps=args.allow_retained_gaps,
    )

    def log(line: str) -> None:
        print(line, flush=True)

    report = run_chaos(config, log)
    print(report.summary(), flush=True)
    if args.json is not None:
        args.json.write_text(report_json(report) + "\n", encoding="utf-8")
    code = report.exit_code
    if code != 0:
        print(f"data and logs kept in {report.folder}", flush=True)
        print(
            f"replay: viewstream-chaos --seed {args.seed} --duration {args.duration:g}",
            flush=True,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
