"""The ``viewstream-bench`` command line, shaped like iggy-bench.

```
viewstream-bench [GLOBAL OPTIONS] <kind> [KIND OPTIONS] [tcp [--server-address A]
                 [output [--output-dir DIR] [--identifier ID] [--remark TEXT] [--open-charts]]]
viewstream-bench compare A.json B.json
viewstream-bench examples
```

Kinds (alias): pinned-producer (pp), pinned-consumer (pc), pinned-producer-and-consumer
(ppc), balanced-producer (bp), balanced-consumer-group (bcg),
balanced-producer-and-consumer-group (bpcg), end-to-end-producing-consumer (e2e),
end-to-end-producing-consumer-group (e2ecg). ``docs/performance.md`` has the reference.

iggy-bench's nested subcommands, each with its own options, map one to one onto
``argparse`` sub-parsers, so this CLI uses ``argparse`` rather than typer.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from bench.load.params import (
    DEFAULTS,
    KIND_ALIASES,
    BenchParams,
    Durability,
    Embedded,
    Kind,
    ParamsError,
    SdkChoice,
    parse_duration_s,
    parse_range,
    parse_size_bytes,
)

__all__ = ["build_parser", "main", "params_from_args"]

EXAMPLES: Final = """\
Examples (each one command; --embedded starts and stops its own server):

  # 8 producers, one stream each, against a node already running on 127.0.0.1:8090
  viewstream-bench pp tcp

  # one node started by the bench, 4 producers, 1 KB x 250 messages, 200 batches each
  viewstream-bench --embedded single -m 1000 -P 250 -b 200 pp -p 4

  # the same on a 3-node cluster with fsynced (persisted) topics, and a report folder
  viewstream-bench --embedded cluster --durability persisted -m 1000 -P 250 -b 200 \\
      pp -p 4 tcp output --output-dir performance_results

  # 16 producers dealt to 4 load processes (default: one per core, at most one per stream)
  viewstream-bench --embedded single --processes 4 -m 1000 -P 250 -b 100 pp -p 16

  # 4 consumers reading what the bench wrote first (warm), 10 s of warmup
  viewstream-bench --embedded single -P 250 -b 200 -w 10s pc -c 4

  # producers and consumers at once, consumer latency end to end, capped at 50 MB/s
  viewstream-bench --embedded single -P 250 -b 200 -r 50MB ppc -p 2 -c 2

  # balanced: 4 producers over 12 partitions, 3 consumer groups of consumers
  viewstream-bench --embedded single bpcg -p 4 -c 6 -s 3 -a 12 -g 3

  # round trips (send a batch, poll it back), with the official SDK
  viewstream-bench --embedded single --sdk official -P 100 -b 100 e2e -p 2

  # message sizes and batch lengths drawn from ranges; 2 GB in all
  viewstream-bench -m 200..2000 -P 100..500 -T 2GB bp -p 4 tcp --server-address 10.0.0.5:8090

  # ratios between two runs
  viewstream-bench compare performance_results/A/report.json performance_results/B/report.json
"""


# --- option groups per kind (iggy-bench shows each kind only the options it uses) ------

_KIND_OPTIONS: Final[dict[Kind, tuple[str, ...]]] = {
    Kind.PINNED_PRODUCER: ("streams", "partitions", "producers", "topic"),
    Kind.PINNED_CONSUMER: ("streams", "consumers", "topic"),
    Kind.PINNED_PRODUCER_AND_CONSUMER: (
        "streams",
        "producers",
        "consumers",
        "read_amplification",
        "topic",
    ),
    Kind.BALANCED_PRODUCER: ("streams", "partitions", "producers", "topic"),
    Kind.BALANCED_CONSUMER_GROUP: ("streams", "partitions", "consumers", "groups", "topic"),
    Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP: (
        "streams",
        "partitions",
        "producers",
        "consumers",
        "groups",
        "read_amplification",
        "topic",
    ),
    Kind.END_TO_END_PRODUCING_CONSUMER: ("streams", "producers", "topic"),
    Kind.END_TO_END_PRODUCING_CONSUMER_GROUP: (
        "streams",
        "partitions",
        "producers",
        "groups",
        "topic",
    ),
}


def _size(text: str) -> int:
    try:
        return parse_size_bytes(text)
    except ParamsError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _duration(text: str) -> float:
    try:
        return parse_duration_s(text)
    except ParamsError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_kind_options(parser: argparse.ArgumentParser, kind: Kind) -> None:
    wanted = _KIND_OPTIONS[kind]
    if "streams" in wanted:
        default = "one per actor" if kind.pinned else "1"
        if kind is Kind.END_TO_END_PRODUCING_CONSUMER_GROUP:
            default = "one per consumer group"
        parser.add_argument("-s", "--streams", type=int, help=f"streams (default: {default})")
    if "partitions" in wanted:
        default = "1" if kind.pinned else str(DEFAULTS.balanced_partitions)
        if kind is Kind.END_TO_END_PRODUCING_CONSUMER_GROUP:
            default = "one per member of a group"
        parser.add_argument(
            "-a", "--partitions", type=int, help=f"partitions per stream (default: {default})"
        )
    if "producers" in wanted:
        what = "producing consumers" if kind.producing_consumers else "producers"
        parser.add_argument(
            "-p",
            "--producers",
            type=int,
            default=DEFAULTS.producers,
            help=f"{what} (default: %(default)s)",
        )
    if "consumers" in wanted:
        parser.add_argument(
            "-c",
            "--consumers",
            type=int,
            default=DEFAULTS.consumers,
            help="consumers (default: %(default)s)",
        )
    if "groups" in wanted:
        parser.add_argument(
            "-g",
            "--consumer-groups",
            type=int,
            default=DEFAULTS.consumer_groups,
            help="consumer groups (default: %(default)s)",
        )
    if "read_amplification" in wanted:
        parser.add_argument(
            "-R",
            "--read-amplification",
            type=float,
            default=DEFAULTS.read_amplification,
            help="consumers' share of --rate-limit times this, to keep up (default: %(default)s)",
        )
    if "topic" in wanted:
        parser.add_argument(
            "-T", "--max-topic-size", type=_size, help="topics' max_topic_size (default: unlimited)"
        )
        parser.add_argument(
            "-e", "--message-expiry", type=_duration, help="topics' message_expiry (default: never)"
        )


def _add_transport(parser: argparse.ArgumentParser) -> None:
    transports = parser.add_subparsers(dest="transport", metavar="tcp", required=False)
    tcp = transports.add_parser("tcp", help="TCP transport (the only one; the default)")
    tcp.add_argument(
        "--server-address",
        dest="server_address",
        help=f"HOST:PORT of the server, or several, comma-separated "
        f"(default: {DEFAULTS.server_address})",
    )
    outputs = tcp.add_subparsers(dest="output", metavar="output", required=False)
    output = outputs.add_parser("output", help="write report.json and charts into a folder")
    output.add_argument(
        "-o",
        "--output-dir",
        dest="output_dir",
        default=DEFAULTS.output_dir,
        help="parent folder of the run's folder (default: %(default)s)",
    )
    output.add_argument("--identifier", help="who or what ran it (default: the host name)")
    output.add_argument("--remark", help="free text stored in the report")
    output.add_argument(
        "-c", "--open-charts", dest="open_charts", action="store_true", help="open the charts"
    )
    output.add_argument(
        "--no-charts", dest="no_charts", action="store_true", help="only report.json"
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="viewstream-bench",
        description="iggy-style benchmarks of viewstream (any Apache Iggy 0.9 server over TCP).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `viewstream-bench examples` for examples.",
    )
    g = parser.add_argument_group("global options (before the kind)")
    g.add_argument(
        "-m",
        "--message-size",
        default=str(DEFAULTS.message_size),
        help="payload bytes per message, or a range 200..500 (default: %(default)s)",
    )
    g.add_argument(
        "-P",
        "--messages-per-batch",
        default=str(DEFAULTS.messages_per_batch),
        help="messages per batch, or a range (default: %(default)s)",
    )
    volume = g.add_mutually_exclusive_group()
    volume.add_argument(
        "-b",
        "--message-batches",
        type=int,
        help=f"batches per actor (default: {DEFAULTS.message_batches})",
    )
    volume.add_argument(
        "-T",
        "--total-data",
        type=_size,
        help="user data for all actors together, e.g. 10GB (instead of -b)",
    )
    g.add_argument(
        "-r",
        "--rate-limit",
        type=_size,
        help="aggregate user-data bytes per second, e.g. 100MB, split over the actors",
    )
    g.add_argument(
        "-w",
        "--warmup-time",
        type=_duration,
        default=_duration(DEFAULTS.warmup),
        help="unrecorded run time before measuring, e.g. 5s (default: 0s)",
    )
    g.add_argument(
        "-t",
        "--sampling-time",
        type=_duration,
        default=_duration(DEFAULTS.sampling_time),
        help="time-series bucket (default: 10ms)",
    )
    g.add_argument(
        "-W",
        "--moving-average-window",
        type=int,
        default=DEFAULTS.moving_average_window,
        help="buckets in the throughput moving average (default: %(default)s)",
    )
    g.add_argument("-u", "--username", default=DEFAULTS.username, help="(default: %(default)s)")
    g.add_argument("-p", "--password", default=DEFAULTS.password, help="(default: %(default)s)")
    g.add_argument(
        "--durability",
        choices=[d.value for d in Durability],
        default=Durability.REPLICATED.value,
        help="the bench topics' durability (default: %(default)s)",
    )
    g.add_argument(
        "--reuse-streams", action="store_true", help="keep existing bench streams (pp, bp, pc, bcg)"
    )
    g.add_argument(
        "--embedded",
        choices=[Embedded.SINGLE.value, Embedded.CLUSTER.value],
        help="start a node (single) or a 3-node cluster with fresh data, and stop it",
    )
    g.add_argument(
        "--sdk",
        choices=[s.value for s in SdkChoice],
        default=SdkChoice.OURS.value,
        help="client library of the load (default: %(default)s)",
    )
    g.add_argument("--seed", type=int, default=42, help="payload generator seed (default: 42)")
    g.add_argument(
        "--poll-interval",
        type=_duration,
        default=0.0005,
        help="wait after an empty poll (default: 0.5ms)",
    )
    g.add_argument(
        "--processes",
        type=int,
        help="load processes the actors are dealt to (default: the number of cores, at "
        "most the number of actors; actors sharing a stream stay in one process)",
    )
    g.add_argument("-q", "--quiet", action="store_true", help="no live progress display")

    commands = parser.add_subparsers(dest="command", metavar="<kind>", required=True)
    for kind in Kind:
        sub = commands.add_parser(
            kind.value,
            aliases=[KIND_ALIASES[kind]],
            help=f"({KIND_ALIASES[kind]}) " + _KIND_HELP[kind],
            description=_KIND_HELP[kind],
        )
        sub.set_defaults(kind=kind)
        _add_kind_options(sub, kind)
        _add_transport(sub)
    compare = commands.add_parser("compare", help="ratios B/A between two report.json files")
    compare.add_argument("a", type=Path, help="report.json (or its folder) A")
    compare.add_argument("b", type=Path, help="report.json (or its folder) B")
    commands.add_parser("examples", aliases=["e"], help="print examples")
    return parser


_KIND_HELP: Final[dict[Kind, str]] = {
    Kind.PINNED_PRODUCER: "N producers, each to its own stream (1 topic, partition 0)",
    Kind.PINNED_CONSUMER: "N consumers, each polling its own stream by offset (data written first)",
    Kind.PINNED_PRODUCER_AND_CONSUMER: (
        "pinned producers and consumers at once; consumer latency end to end"
    ),
    Kind.BALANCED_PRODUCER: "N producers over the partitions of K streams, balanced partitioning",
    Kind.BALANCED_CONSUMER_GROUP: "N consumers in G consumer groups (data written first)",
    Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP: "balanced producers and consumer groups at once",
    Kind.END_TO_END_PRODUCING_CONSUMER: "each actor sends a batch, then polls it back",
    Kind.END_TO_END_PRODUCING_CONSUMER_GROUP: "the same, polling as consumer-group members",
}


def params_from_args(args: argparse.Namespace) -> BenchParams:
    """The parameters an ``argparse`` namespace of a kind command says (resolved).

    Raises:
        ParamsError: a value or a combination that cannot run.
    """
    kind: Kind = args.kind
    addresses: tuple[str, ...] = (DEFAULTS.server_address,)
    server_address = getattr(args, "server_address", None)
    if server_address:
        addresses = tuple(a.strip() for a in server_address.split(",") if a.strip())
        for address in addresses:
            host, colon, port = address.rpartition(":")
            if not colon or not host or not port.isdigit():
                raise ParamsError(f"--server-address wants HOST:PORT, got {address!r}")
    embedded = Embedded(args.embedded) if args.embedded else Embedded.NONE
    if embedded is not Embedded.NONE and server_address:
        raise ParamsError("--embedded starts its own server: drop --server-address")
    output_dir = getattr(args, "output_dir", None) if getattr(args, "output", None) else None
    params = BenchParams(
        kind=kind,
        message_size=parse_range(args.message_size, sizes=True),
        messages_per_batch=parse_range(args.messages_per_batch),
        message_batches=args.message_batches,
        total_data_bytes=args.total_data,
        producers=getattr(args, "producers", DEFAULTS.producers),
        consumers=getattr(args, "consumers", DEFAULTS.consumers),
        streams=getattr(args, "streams", None),
        partitions=getattr(args, "partitions", None),
        consumer_groups=getattr(args, "consumer_groups", DEFAULTS.consumer_groups),
        rate_limit_bytes_per_s=args.rate_limit,
        read_amplification=getattr(args, "read_amplification", DEFAULTS.read_amplification),
        warmup_s=args.warmup_time,
        sampling_s=args.sampling_time,
        moving_average_window=args.moving_average_window,
        username=args.username,
        password=args.password,
        durability=Durability(args.durability),
        max_topic_size_bytes=getattr(args, "max_topic_size", None),
        message_expiry_s=getattr(args, "message_expiry", None),
        reuse_streams=args.reuse_streams,
        server_addresses=addresses,
        embedded=embedded,
        sdk=SdkChoice(args.sdk),
        seed=args.seed,
        poll_interval_s=args.poll_interval,
        processes=args.processes,
        output_dir=output_dir,
        identifier=getattr(args, "identifier", None),
        remark=getattr(args, "remark", None),
        open_charts=bool(getattr(args, "open_charts", False)),
    )
    return params.resolved()


def _run_kind(args: argparse.Namespace) -> int:
    from rich.console import Console

    from bench.load.display import live_progress, params_line, print_results, wide_console
    from bench.load.plan import make_plan
    from bench.load.report import build_report, write_report
    from bench.load.runner import run_benchmark
    from bench.load.servers import ServerError
    from sdk.errors import IggyError

    console = wide_console()
    err = Console(stderr=True)
    try:
        params = params_from_args(args)
    except ParamsError as error:
        err.print(f"viewstream-bench: {error}")
        return 2
    console.print(params_line(params, make_plan(params)))
    try:
        result = run_benchmark(params, progress=None if args.quiet else live_progress)
    except ServerError as error:
        err.print(f"viewstream-bench: the embedded server failed: {error}")
        return 1
    except IggyError as error:
        err.print(f"viewstream-bench: the server refused or did not answer: {error}")
        return 1
    except (OSError, RuntimeError) as error:
        err.print(f"viewstream-bench: {type(error).__name__}: {error}")
        return 1
    report = build_report(result)
    if params.identifier is not None or params.remark is not None:
        report["identifier"] = params.identifier
        report["remark"] = params.remark
    print_results(report, console)
    if params.output_dir is not None:
        folder = write_report(
            report, Path(params.output_dir), charts=not getattr(args, "no_charts", False)
        )
        console.print(f"report: {folder / 'report.json'}")
        from bench.load.charts import charts_available

        if not charts_available() and not getattr(args, "no_charts", False):
            err.print("charts skipped: matplotlib is not installed")
        if params.open_charts:
            for name in ("throughput", "latency", "latency_distribution"):
                webbrowser.open((folder / f"{name}.html").resolve().as_uri())
    return 0


def _compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from bench.load.display import print_compare
    from bench.load.report import compare_reports, load_report

    try:
        a, b = load_report(args.a), load_report(args.b)
    except (OSError, ValueError) as error:
        Console(stderr=True).print(f"viewstream-bench compare: {error}")
        return 2
    print_compare(compare_reports(a, b), str(args.a), str(args.b))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``viewstream-bench``; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "compare":
        return _compare(args)
    if args.command in ("examples", "e"):
        sys.stdout.write(EXAMPLES)
        return 0
    return _run_kind(args)


if __name__ == "__main__":
    sys.exit(main())
