"""Micro-benchmark of the message-batch hot path of the wire codec.

Run: ``python -m bench.wire_bench`` (options: ``--messages``, ``--size``, ``--repeat``).

It measures, on one batch of ``messages`` x ``size``-byte payloads:

* ``build``: the client builds a sealed SEND_MESSAGES body (``build_send_messages``:
  copy every payload into one buffer, hash every message, seal the batch);
* ``verify+stamp``: the server verifies every checksum and stamps the batch in place
  (``verify_batch`` + ``stamp_batch``);
* ``read``: a consumer reads every message of the stored batch (``read_batch``);
* ``slice``: a poll cuts the stored batch at its middle offset (``slice_batch``);

next to two raw baselines over the same bytes in the same run, so the ratios are
visible: one ``xxhash.xxh3_64`` over the whole batch, and one ``bytes`` copy of it.

Numbers are the median of ``repeat`` timed rounds (each round runs the operation
enough times to last about 50 ms). MB/s counts payload bytes, 10**6 per MB, as
iggy-bench does. This is a measurement tool, not a test: it asserts nothing about
speed.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections.abc import Callable

import xxhash

from sdk.wire import (
    Identifier,
    OutgoingMessage,
    PartitionId,
    SendMessages,
    build_send_messages,
    read_batch,
    slice_batch,
    stamp_batch,
    verify_batch,
)

_ROUND_SECONDS = 0.05


def _per_call_seconds(operation: Callable[[], object], repeat: int) -> float:
    """Median seconds per call over ``repeat`` rounds of about 50 ms each."""
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            operation()
        elapsed = time.perf_counter() - start
        if elapsed >= _ROUND_SECONDS:
            break
        calls *= 2
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            operation()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print one line per operation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1000, help="messages per batch")
    parser.add_argument("--size", type=int, default=1000, help="payload bytes per message")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds per operation")
    arguments = parser.parse_args(argv)

    rng = random.Random(7)
    now_us = 1_700_000_000_000_000
    messages = [
        OutgoingMessage(rng.getrandbits(128), rng.randbytes(arguments.size), b"", now_us + index)
        for index in range(arguments.messages)
    ]
    stream, topic, partitioning = Identifier(1), Identifier(1), PartitionId(0)

    body = build_send_messages(stream, topic, partitioning, messages)
    batch = SendMessages.decode(body).batch
    stored = bytearray(batch)
    stamp_batch(
        stored, verify_batch(stored), partition_id=0, base_offset=1000, base_timestamp=now_us
    )
    middle = 1000 + arguments.messages // 2
    raw = bytes(stored)

    def verify_and_stamp() -> None:
        verified = verify_batch(stored)
        stamp_batch(stored, verified, partition_id=0, base_offset=1000, base_timestamp=now_us)

    operations: list[tuple[str, Callable[[], object]]] = [
        ("build (client)", lambda: build_send_messages(stream, topic, partitioning, messages)),
        ("verify+stamp (server)", verify_and_stamp),
        ("read (consumer)", lambda: read_batch(stored)),
        ("slice at middle (poll)", lambda: slice_batch(stored, middle, arguments.messages)),
        ("baseline: xxh3_64 of batch", lambda: xxhash.xxh3_64_intdigest(raw)),
        ("baseline: bytes copy of batch", lambda: bytes(stored)),
    ]
    payload_bytes = arguments.messages * arguments.size
    print(
        f"batch: {arguments.messages} messages x {arguments.size} B payload = "
        f"{payload_bytes / 1e6:.3f} MB payload, {len(stored)} B on the wire; "
        f"Python {platform.python_version()} on {platform.machine()}; "
        f"median of {arguments.repeat} rounds"
    )
    print(f"{'operation':<32}{'us/batch':>12}{'MB/s':>12}{'x copy':>10}")
    results = [
        (name, _per_call_seconds(operation, arguments.repeat)) for name, operation in operations
    ]
    copy_seconds = results[-1][1]
    for name, seconds in results:
        print(
            f"{name:<32}{seconds * 1e6:>12.1f}{payload_bytes / seconds / 1e6:>12.0f}"
            f"{seconds / copy_seconds:>10.1f}"
        )


if __name__ == "__main__":
    main()
