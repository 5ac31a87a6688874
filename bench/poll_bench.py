"""The partition's poll path in one process: what a poll costs the state machine.

Run: ``python -m bench.poll_bench [--batches 3000] [--messages 10] [--size 100]
[--poll-messages N] [--shift K] [--repeats 5] [--segment-bytes B]``.

Fills one partition group's storage on real files in a temporary directory
(``GroupStore``, the partition state machine, the journal) with ``--batches`` batches of
``--messages`` messages of ``--size`` bytes, then polls the whole log by offset,
``--poll-messages`` (default ``--messages``) at a time from ``--shift`` messages into
each batch, ``--repeats`` times, and prints the best time per poll (and per timestamp
poll), wall and CPU. No network, no trio: the state machine's read of its index and of
the records, the cut of the edge batches and the reply's parts. With ``--shift 0`` and
``--poll-messages`` equal to ``--messages`` every poll sends one stored batch whole; any
other shift cuts the first and last batch of each poll. A warm pinned consumer of
iggy-bench's shape is ``--batches 400 --messages 250 --size 1000``.

This is a measurement tool, not a test: it asserts nothing about speed. Figures are noisy
on a shared machine; compare runs made back to back.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from broker.runtime.store import GroupStore
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import PartitionMachine, send_body
from consensus.messages import CHECKSUM_SIZE, Prepare, make_prepare_header
from sdk import wire
from sdk.wire.codes import Operation


def _fill(
    store: GroupStore, machine: PartitionMachine, batches: int, messages: int, size: int
) -> None:
    payload = b"x" * size
    parent = bytes(CHECKSUM_SIZE)
    for op in range(1, batches + 1):
        body = wire.build_send_messages(
            wire.Identifier(0),
            wire.Identifier(0),
            wire.PartitionId(0),
            [wire.OutgoingMessage(op * messages + k, payload) for k in range(messages)],
        )
        admitted = send_body(wire.SendMessages.decode(body))  # as admission hands it on
        prepared = machine.prepare(op, Operation.SEND_MESSAGES, admitted, 1_000 + op, 0)
        header = make_prepare_header(
            group=1,
            view=0,
            op=op,
            commit=op - 1,
            parent=parent,
            client_id=0,
            session=0,
            request=0,
            operation=Operation.SEND_MESSAGES,
            timestamp_us=1_000 + op,
            body=prepared.body,
        )
        prepare = Prepare(header, prepared.body)
        store.append(prepare)
        machine.apply(prepare)
        parent = header.checksum


def _best_us(
    machine: PartitionMachine, strategies: list[wire.PollingStrategy], count: int, repeats: int
) -> tuple[float, float]:
    """The best wall and the best CPU µs per poll over ``repeats`` rounds."""
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1))
    key = ConsumerKey(ConsumerKind.CONSUMER, 1)
    polls = [
        wire.PollMessages(consumer, wire.Identifier(0), wire.Identifier(0), 0, s, count, False)
        for s in strategies
    ]
    best = best_cpu = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        start_cpu = time.process_time()
        for poll in polls:
            machine.poll(poll, key)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
        best = min(best, time.perf_counter() - start)
    return best * 1e6 / len(polls), best_cpu * 1e6 / len(polls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3_000)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message")
    parser.add_argument("--poll-messages", type=int, default=0, help="default: --messages")
    parser.add_argument("--shift", type=int, default=0, help="polls start this far in a batch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--segment-bytes",
        type=int,
        default=1 << 30,
        help="the journal's segment roll size (default: the node's, 1 GiB)",
    )
    args = parser.parse_args()
    batches, messages = args.batches, args.messages
    count = args.poll_messages or messages
    assert 0 <= args.shift < messages, "--shift must fall inside a batch"
    with tempfile.TemporaryDirectory() as folder:
        store = GroupStore(
            Path(folder) / "group",
            no_sync=True,
            segment_size_bytes=args.segment_bytes,
            partition=True,
        )
        try:
            machine = PartitionMachine(0, 0, 0, store)
            _fill(store, machine, batches, messages, args.size)
            by_offset = [
                wire.PollingStrategy.offset(o + args.shift)
                for o in range(0, batches * messages, messages)
            ]
            by_time = [wire.PollingStrategy.timestamp(1_000 + op) for op in range(1, batches + 1)]
            offset_us, offset_cpu_us = _best_us(machine, by_offset, count, args.repeats)
            time_us, time_cpu_us = _best_us(machine, by_time, count, args.repeats)
            segments = store.segments_count()
        finally:
            store.close()
    print(
        f"{batches} batches of {messages} messages of {args.size} B in {segments} segments; "
        f"polls of {count} from {args.shift} into each batch (best of {args.repeats})"
    )
    print(f"poll by offset:    {offset_us:.1f} us per poll, {offset_cpu_us:.1f} us CPU")
    print(f"poll by timestamp: {time_us:.1f} us per poll, {time_cpu_us:.1f} us CPU")


if __name__ == "__main__":
    main()
