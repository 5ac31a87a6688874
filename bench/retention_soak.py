"""Retention soak: producers at a fixed rate into a topic with a short expiry, for minutes;
the data directories must stay bounded, no acknowledged message still inside its
retention window may go missing, and the nodes' memory must stay flat.

Run: ``python -m bench.retention_soak --minutes 15`` (``--help`` lists the options).

For each setup (``--setups``: ``node``, one real node; ``cluster``, three real nodes on
127.0.0.1, each with its own data directory, started as ``viewstream cluster up`` starts
them), in a fresh temporary directory:

1. A topic of ``--partitions`` partitions with a 1-minute ``message_expiry`` and 1 MiB
   segments (``--expiry-s``, ``--segment-mib``); the nodes look for expired segments every
   ``--retention-interval-s``.
2. ``--producers`` threads send batches of ``--batch`` messages of ``--message-size``
   bytes, round robin over the partitions, paced to ``--rate`` messages per second in
   all, for ``--minutes``. Every acknowledged message is recorded with the time its send
   started (a lower bound of the broker's append time) and the offset it got.
3. Every ``--sample-s`` a sampler walks each node's data directory (every file by size,
   as the node's disk budget counts) and reads each node's resident memory (``VmRSS`` of
   ``/proc/<pid>/status``).
4. At the end the producers stop and every partition is polled back from offset 0 (a
   poll starts at the retained start). *Lost*: an acknowledged message whose send
   started less than the expiry before the poll began (so no segment holding it can
   have expired; a margin of ``CLOCK_MARGIN_S`` covers the clocks' granularity) and that
   the poll does not return at its offset. Also checked: what is served is exactly the
   acknowledged messages from the retained start on, in order (nothing acknowledged is
   lost above it, no hole).

It prints, per setup, the curve's maximum (bytes of the largest data directory at any
sample, and of all nodes together), the RSS of each node after the first expiry and at
the end (the growth in between says whether memory stays flat: before the first expiry
the data only grows), the messages acknowledged, retained and lost, and writes
``<out>/retention_soak_<setup>.png`` (data-directory bytes and RSS over time) and
``<out>/retention_soak.json``. The exit status is 1 when a message was lost.

This is a measurement tool, not a test: it asserts nothing about speed, and it runs on a
shared machine at a modest rate by default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from broker.cli.cluster import ClusterLayout, start_cluster, stop_processes
from broker.runtime.disk import used_bytes
from sdk import Client, ClientConfig, ConsumerRef, Message, Partitioning, PollingStrategy

ROOT_PASSWORD: Final = "soak-root-password"
STREAM: Final = "soak"
TOPIC: Final = "t"
CLOCK_MARGIN_S: Final = 1.0
"""Slack in the retention-window check for the clocks' granularity (the node stamps with
its wall clock, the bench reads its own)."""
POLL_COUNT: Final = 5_000
"""Messages asked for in one poll of the final read-back."""
SETUPS: Final = ("node", "cluster")


@dataclass(slots=True)
class Acked:
    """Messages acknowledged for one partition, in offset order."""

    offsets: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    """Wall-clock time each message's send started (seconds since the epoch)."""


@dataclass(slots=True)
class Sample:
    elapsed_s: float
    dir_bytes: list[int]
    rss_bytes: list[int]


@dataclass(slots=True)
class Outcome:
    setup: str
    nodes: int
    minutes: float
    rate: int
    acknowledged: int = 0
    send_errors: int = 0
    retained: int = 0
    in_window: int = 0
    lost: int = 0
    holes: int = 0
    """Acknowledged messages at or above the retained start that were not served, plus
    one for each partition whose served offsets are not dense."""
    dir_bytes_max: int = 0
    dir_bytes_total_max: int = 0
    dir_bytes_end: list[int] = field(default_factory=list)
    rss_after_first_expiry: list[int] = field(default_factory=list)
    rss_end: list[int] = field(default_factory=list)
    rss_max: list[int] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


# -- nodes -------------------------------------------------------------------------------------


def _rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except FileNotFoundError:
        return 0
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start(folder: Path, nodes: int, retention_interval_s: int) -> tuple[ClusterLayout, list[Any]]:
    """Start ``nodes`` nodes on 127.0.0.1 with data under ``folder``."""
    os.environ["VIEWSTREAM_RETENTION_INTERVAL_S"] = str(retention_interval_s)
    os.environ["VIEWSTREAM_LOG_LEVEL"] = "warning"
    layout = ClusterLayout(folder, nodes, _free_port(), _free_port(), _free_port())
    processes = start_cluster(layout, root_password=ROOT_PASSWORD, echo=False)
    return layout, processes


def _client(address: str) -> Client:
    config = ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD)
    return Client(config.replace(retry_deadline_s=60.0))


# -- the run -----------------------------------------------------------------------------------


def _produce(
    address: str,
    partitions: int,
    producer: int,
    producers: int,
    args: argparse.Namespace,
    stop: threading.Event,
    acked: list[Acked],
    lock: threading.Lock,
    errors: list[int],
) -> None:
    """Send paced batches until ``stop``; record what was acknowledged."""
    interval_s = args.batch * producers / args.rate
    payload = b"s" * max(0, args.message_size - 16)
    batch_index = 0
    next_at = time.monotonic() + interval_s * producer / producers
    with _client(address) as client:
        while not stop.is_set():
            now = time.monotonic()
            if now < next_at:
                stop.wait(next_at - now)
                continue
            next_at += interval_s
            partition = (producer + batch_index * producers) % partitions
            first_id = (producer << 64) | (batch_index * args.batch)
            ids = [first_id + k for k in range(args.batch)]
            messages = [Message(i.to_bytes(16, "little") + payload, id=i) for i in ids]
            batch_index += 1
            started = time.time()
            try:
                confirmations = client.send_messages(
                    STREAM, TOPIC, messages, Partitioning.partition_id(partition)
                )
            except Exception as error:  # the outcome is unknown: not counted as acked
                print(f"  producer {producer}: send failed: {error!r}", file=sys.stderr)
                errors[0] += 1
                continue
            (confirmation,) = confirmations
            base = confirmation.base_offset
            with lock:
                record = acked[partition]
                record.offsets.extend(range(base, base + len(ids)))
                record.ids.extend(ids)
                record.sent_at.extend([started] * len(ids))


def _sample(layout: ClusterLayout, processes: list[Any], started: float) -> Sample:
    return Sample(
        elapsed_s=time.monotonic() - started,
        dir_bytes=[used_bytes(layout.folder / f"node-{i}") for i in range(layout.nodes)],
        rss_bytes=[_rss_bytes(process.pid) for process in processes],
    )


def _read_back(address: str, partitions: int) -> list[list[tuple[int, int]]]:
    """(offset, id) of every message each partition serves, from the retained start."""
    found: list[list[tuple[int, int]]] = []
    with _client(address) as client:
        for partition in range(partitions):
            messages: list[tuple[int, int]] = []
            offset = 0
            while True:
                polled = client.poll_messages(
                    STREAM,
                    TOPIC,
                    consumer=ConsumerRef.single("soak-checker"),
                    polling_strategy=PollingStrategy.offset(offset),
                    count=POLL_COUNT,
                    partition_id=partition,
                )
                if not polled.messages:
                    break
                messages.extend((m.offset, m.id) for m in polled.messages)
                offset = polled.messages[-1].offset + 1
            found.append(messages)
    return found


def _check(
    outcome: Outcome,
    acked: list[Acked],
    served: list[list[tuple[int, int]]],
    poll_started: float,
    expiry_s: float,
) -> None:
    for record, messages in zip(acked, served, strict=True):
        outcome.acknowledged += len(record.ids)
        outcome.retained += len(messages)
        by_offset = dict(messages)
        for offset, message_id, sent_at in zip(
            record.offsets, record.ids, record.sent_at, strict=True
        ):
            if sent_at + expiry_s > poll_started + CLOCK_MARGIN_S:
                outcome.in_window += 1
                if by_offset.get(offset) != message_id:
                    outcome.lost += 1
        # What is served is exactly the acknowledged messages from the retained start on.
        start = messages[0][0] if messages else (record.offsets[-1] + 1 if record.offsets else 0)
        expected = [
            (offset, message_id)
            for offset, message_id in zip(record.offsets, record.ids, strict=True)
            if offset >= start
        ]
        outcome.holes += len(set(expected) - set(messages))
        offsets = [offset for offset, _ in messages]
        if offsets != list(range(start, start + len(offsets))):
            outcome.holes += 1  # the offsets served are not dense


def run_setup(setup: str, args: argparse.Namespace, out: Path) -> Outcome:
    nodes = 1 if setup == "node" else 3
    outcome = Outcome(setup, nodes, args.minutes, args.rate)
    with tempfile.TemporaryDirectory(prefix=f"soak-{setup}-") as folder_name:
        layout, processes = _start(Path(folder_name), nodes, args.retention_interval_s)
        try:
            address = layout.client_addresses[0]
            with _client(address) as client:
                client.create_stream(STREAM)
                client.create_topic(
                    STREAM,
                    TOPIC,
                    args.partitions,
                    message_expiry=timedelta(seconds=args.expiry_s),
                    segment_size=args.segment_mib << 20,
                )
            acked = [Acked() for _ in range(args.partitions)]
            lock = threading.Lock()
            stop = threading.Event()
            errors = [0]
            producers = [
                threading.Thread(
                    target=_produce,
                    args=(address, args.partitions, p, args.producers, args, stop, acked, lock),
                    kwargs={"errors": errors},
                    daemon=True,
                )
                for p in range(args.producers)
            ]
            started = time.monotonic()
            for thread in producers:
                thread.start()
            end = started + args.minutes * 60
            next_sample = started
            while (now := time.monotonic()) < end:
                if now >= next_sample:
                    sample = _sample(layout, processes, started)
                    outcome.samples.append(sample)
                    next_sample += args.sample_s
                    with lock:
                        count = sum(len(a.ids) for a in acked)
                    print(
                        f"  {setup} {sample.elapsed_s:6.0f} s: {count} acked, data dirs "
                        f"{[round(b / 2**20, 1) for b in sample.dir_bytes]} MiB, rss "
                        f"{[round(r / 2**20) for r in sample.rss_bytes]} MiB",
                        flush=True,
                    )
                time.sleep(min(0.5, max(0.0, next_sample - time.monotonic())))
            stop.set()
            for thread in producers:
                thread.join(timeout=120)
            outcome.send_errors = errors[0]
            outcome.samples.append(_sample(layout, processes, started))
            poll_started = time.time()
            served = _read_back(address, args.partitions)
            _check(outcome, acked, served, poll_started, args.expiry_s)
        finally:
            stop_processes(processes)
    _summarise(outcome, args)
    _plot(outcome, args, out / f"retention_soak_{setup}.png")
    return outcome


def _summarise(outcome: Outcome, args: argparse.Namespace) -> None:
    samples = outcome.samples
    outcome.dir_bytes_max = max(max(s.dir_bytes) for s in samples)
    outcome.dir_bytes_total_max = max(sum(s.dir_bytes) for s in samples)
    outcome.dir_bytes_end = samples[-1].dir_bytes
    warm = args.expiry_s + args.retention_interval_s
    after = [s for s in samples if s.elapsed_s >= warm] or samples[-1:]
    outcome.rss_after_first_expiry = after[0].rss_bytes
    outcome.rss_end = samples[-1].rss_bytes
    outcome.rss_max = [max(s.rss_bytes[i] for s in after) for i in range(outcome.nodes)]


def _plot(outcome: Outcome, args: argparse.Namespace, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("  matplotlib is not installed: no chart", file=sys.stderr)
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (disk, memory) = pyplot.subplots(2, 1, figsize=(10, 7), sharex=True)
    try:
        minutes = [s.elapsed_s / 60 for s in outcome.samples]
        for node in range(outcome.nodes):
            disk.plot(
                minutes, [s.dir_bytes[node] / 2**20 for s in outcome.samples], label=f"node {node}"
            )
            memory.plot(
                minutes, [s.rss_bytes[node] / 2**20 for s in outcome.samples], label=f"node {node}"
            )
        disk.axhline(outcome.dir_bytes_max / 2**20, color="grey", linestyle=":", linewidth=1)
        disk.set_ylabel("data directory (MiB)")
        memory.set_ylabel("RSS (MiB)")
        memory.set_xlabel("minutes")
        disk.set_title(
            f"retention soak, {outcome.setup} ({outcome.nodes} node"
            f"{'s' if outcome.nodes > 1 else ''}): {args.rate} msg/s of {args.message_size} B, "
            f"expiry {args.expiry_s} s, {args.segment_mib} MiB segments; max "
            f"{outcome.dir_bytes_max / 2**20:.1f} MiB, lost {outcome.lost}",
            fontsize=9,
        )
        for axes in (disk, memory):
            axes.grid(True, alpha=0.3)
            axes.legend(fontsize=8, loc="best")
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        pyplot.close(figure)
    print(f"  chart: {path}")


def _report(outcome: Outcome) -> str:
    mib = 2**20
    rss_growth = [
        (end - first) / first * 100 if first else 0.0
        for first, end in zip(outcome.rss_after_first_expiry, outcome.rss_end, strict=True)
    ]
    return "\n".join(
        [
            f"{outcome.setup}: {outcome.nodes} node(s), {outcome.minutes:g} min at "
            f"{outcome.rate} msg/s",
            f"  acknowledged {outcome.acknowledged}, send errors {outcome.send_errors}, "
            f"retained at the end {outcome.retained}",
            f"  inside their retention window {outcome.in_window}, lost {outcome.lost}, "
            f"holes {outcome.holes}",
            f"  data directory max {outcome.dir_bytes_max / mib:.1f} MiB (all nodes "
            f"{outcome.dir_bytes_total_max / mib:.1f} MiB), at the end "
            f"{[round(b / mib, 1) for b in outcome.dir_bytes_end]} MiB",
            f"  RSS after the first expiry "
            f"{[round(r / mib) for r in outcome.rss_after_first_expiry]} MiB, max since "
            f"{[round(r / mib) for r in outcome.rss_max]} MiB, at the end "
            f"{[round(r / mib) for r in outcome.rss_end]} MiB "
            f"(growth {', '.join(f'{g:+.1f}%' for g in rss_growth)})",
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.retention_soak",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--minutes", type=float, default=15.0, help="producing time per setup")
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated: node, cluster")
    parser.add_argument("--rate", type=int, default=2_000, help="messages per second, in all")
    parser.add_argument("--message-size", type=int, default=1_000, help="bytes per message")
    parser.add_argument("--batch", type=int, default=100, help="messages per send")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--expiry-s", type=int, default=60, help="the topic's message_expiry")
    parser.add_argument("--segment-mib", type=int, default=1, help="the topic's segment_size")
    parser.add_argument(
        "--retention-interval-s",
        type=int,
        default=10,
        help="how often the nodes look for expired segments (retention_interval_s)",
    )
    parser.add_argument("--sample-s", type=float, default=5.0, help="sampling period")
    parser.add_argument("--out", type=Path, default=Path("soak_results"), help="output folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    unknown = [s for s in setups if s not in SETUPS]
    if unknown or not setups:
        print(f"unknown setups {unknown}; choose from {', '.join(SETUPS)}", file=sys.stderr)
        return 2
    if args.rate < 1 or args.batch < 1 or args.producers < 1 or args.partitions < 1:
        print("--rate, --batch, --producers and --partitions must be at least 1", file=sys.stderr)
        return 2
    if args.message_size < 16:
        print("--message-size must be at least 16 (the id is in the payload)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for setup in setups:
        print(f"{setup}: producing for {args.minutes:g} min", flush=True)
        outcome = run_setup(setup, args, args.out)
        print(_report(outcome), flush=True)
        outcomes.append(outcome)
    summary = {
        "command": "python -m bench.retention_soak "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "params": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "outcomes": [asdict(o) for o in outcomes],
    }
    (args.out / "retention_soak.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 1 if any(o.lost or o.holes for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
