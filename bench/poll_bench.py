"""The partition's poll path in one process: what a poll costs the state machine.

Run: ``python -m bench.poll_bench [--batches 3000] [--messages 10] [--repeats 5]``.

Fills one partition group's storage on real files in a temporary directory
(``GroupStore``, the partition state machine, the journal) with ``--batches`` batches of
``--messages`` messages of 100 bytes, then polls the whole log by offset, ``--messages``
at a time, ``--repeats`` times, and prints the best time per poll (and per timestamp
poll). No network, no trio: the state machine's read of its index and of the records.

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
from broker.state.partition_machine import PartitionMachine
from consensus.messages import CHECKSUM_SIZE, Prepare, make_prepare_header
from sdk import wire
from sdk.wire.codes import Operation

PAYLOAD = b"x" * 100


def _fill(store: GroupStore, machine: PartitionMachine, batches: int, messages: int) -> None:
    parent = bytes(CHECKSUM_SIZE)
    for op in range(1, batches + 1):
        body = wire.build_send_messages(
            wire.Identifier(0),
            wire.Identifier(0),
            wire.PartitionId(0),
            [wire.OutgoingMessage(op * messages + k, PAYLOAD) for k in range(messages)],
        )
        prepared = machine.prepare(op, Operation.SEND_MESSAGES, bytes(body), 1_000 + op, 0)
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
) -> float:
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1))
    key = ConsumerKey(ConsumerKind.CONSUMER, 1)
    polls = [
        wire.PollMessages(consumer, wire.Identifier(0), wire.Identifier(0), 0, s, count, False)
        for s in strategies
    ]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for poll in polls:
            machine.poll(poll, key)
        best = min(best, time.perf_counter() - start)
    return best * 1e6 / len(polls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3_000)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    batches, messages = args.batches, args.messages
    with tempfile.TemporaryDirectory() as folder:
        store = GroupStore(
            Path(folder) / "group", no_sync=True, segment_size_bytes=1 << 20, partition=True
        )
        try:
            machine = PartitionMachine(0, 0, 0, store)
            _fill(store, machine, batches, messages)
            by_offset = [
                wire.PollingStrategy.offset(o) for o in range(0, batches * messages, messages)
            ]
            by_time = [wire.PollingStrategy.timestamp(1_000 + op) for op in range(1, batches + 1)]
            offset_us = _best_us(machine, by_offset, messages, args.repeats)
            time_us = _best_us(machine, by_time, messages, args.repeats)
            segments = store.segments_count()
        finally:
            store.close()
    print(f"{batches} batches of {messages} messages in {segments} segments")
    print(f"poll by offset:    {offset_us:.1f} us per poll of {messages} (best of {args.repeats})")
    print(f"poll by timestamp: {time_us:.1f} us per poll of {messages} (best of {args.repeats})")


if __name__ == "__main__":
    main()
