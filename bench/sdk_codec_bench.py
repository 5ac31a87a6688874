"""Micro-benchmark of the SDK's client hot path: the CPU one batch costs the client.

Run: ``python -m bench.sdk_codec_bench`` (options: ``--messages``, ``--size``,
``--rounds``, ``--batches``, ``--against DIR``).

Each case runs the sans-IO client core (``sdk._protocol.ClientCore``) exactly as the
trio and blocking clients do, minus the socket: the step builds its request frame, the
reply frame is fed through a ``FrameDecoder`` and sent back into the step, so what is
measured is everything the SDK does per batch in Python except the system calls.

* ``send Message``: ``send_messages`` of ``Message(payload)`` values (ids minted by the
  SDK), the reply's confirmation decoded;
* ``send bytes``: the same with plain ``bytes`` payloads;
* ``send_payloads``: the bytes path (``ClientCore.send_payloads``, payloads handed
  over as they are), with ids given and with ``memoryview`` payloads, when the tree
  has it;
* ``poll, payloads``: ``poll_messages`` of one stored batch, then the payload of every
  message read (``len(m.payload)``);
* ``poll, payload views``: the same reading ``m.payload_view`` when the tree has it;
* ``poll, payloads()``: the same through ``PolledMessages.payloads()`` (every payload
  as a view, no message object made) when the tree has it;
* ``poll, every field``: every attribute of every message read;
* ``poll, decode only``: the poll and its ``messages`` list, no message read.

With ``--live``, one ``viewstream serve`` node is started and each round also runs,
with the trio client over TCP, ``--batches`` lock-step sends of ``Message`` values
(``live: send Message``) and then polls of them reading every payload (``live: poll,
payloads``): the client's whole CPU per batch, socket and trio included (the node's
CPU is not counted).

Figures are CPU time (``time.process_time``) per batch in µs: the median over
``--rounds`` rounds of ``--batches`` batches each. With ``--against DIR`` (another
checkout's root, e.g. ``git worktree add`` of main), each round runs once in a process
importing ``sdk`` from this tree and once from ``DIR``, alternating (A, B, A, B ...), so
both see the same machine load; the table shows both and their ratio. This is a
measurement tool, not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
_SESSION = 42
USERNAME = "iggy"
PASSWORD = "iggy"
_CLIENT = 0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0


def _cases(messages: int, size: int) -> tuple[Any, dict[str, Callable[[], None]]]:
    """One callable per case, each doing one batch's client work (imports the ``sdk``
    that ``sys.path`` finds first, so the same code measures either tree)."""
    import random

    from sdk._protocol import ClientCore, Exchange
    from sdk.connection_string import ClientConfig, NodeAddress
    from sdk.types import ConsumerRef, Message
    from sdk.wire import (
        FrameDecoder,
        Identifier,
        OutgoingMessage,
        PartitionId,
        PollingStrategy,
        PollMessagesReply,
        RequestHeader,
        SendConfirmation,
        SendMessagesReply,
        build_reply_frame,
        build_send_messages,
        stamp_batch,
        verify_batch,
    )

    node = NodeAddress("127.0.0.1", 8090)
    config = ClientConfig(seeds=(node,), username="u", password="p", cluster_discovery=False)
    core = ClientCore(
        config,
        rng=random.Random(1),
        clock=time.monotonic,
        wall_clock_us=lambda: time.time_ns() // 1000,
    )
    core.session.client_id = _CLIENT
    core.session.session = _SESSION
    core.session.user_id = 1
    rng = random.Random(2)
    block = rng.randbytes(size)
    payloads = [block] * messages
    as_messages = [Message(payload) for payload in payloads]
    send_reply = SendMessagesReply((SendConfirmation(1, 1, 0, 0),)).encode()
    stream, topic = Identifier.numeric(1), Identifier.numeric(1)

    # Reply frames by request number, built once: the worker replays the same numbers
    # in its timed pass, so building them is not measured.
    replies: dict[tuple[int, int], bytes] = {}

    def replied(frame: bytes | bytearray | memoryview, body: bytes | bytearray) -> Any:
        key = (int.from_bytes(frame[168:176], "little"), len(body))  # the request number
        reply = replies.get(key)
        if reply is None:
            reply = replies[key] = bytes(build_reply_frame(RequestHeader.unpack_from(frame), body))
        decoder = FrameDecoder()
        decoder.feed(reply)
        return decoder.next_frame()

    def run(step: Any, body: bytes | bytearray) -> Any:
        action = step.send(None)
        assert isinstance(action, Exchange)
        try:
            step.send(replied(action.frame, body))
        except StopIteration as stop:
            return stop.value
        raise AssertionError("the step asked for a second exchange")

    def send_messages(batch: list[Any]) -> Callable[[], None]:
        def case() -> None:
            run(core.send_messages(stream, topic, batch, 0), send_reply)

        return case

    cases: dict[str, Callable[[], None]] = {
        "send Message": send_messages(as_messages),
        "send bytes": send_messages(list(payloads)),
    }
    send_payloads = getattr(core, "send_payloads", None)
    if send_payloads is not None:
        ids = [rng.getrandbits(128) | 1 for _ in range(messages)]
        views = [memoryview(payload) for payload in payloads]

        def send_raw() -> None:
            run(send_payloads(stream, topic, payloads, 0), send_reply)

        def send_ids() -> None:
            run(send_payloads(stream, topic, payloads, 0, ids=ids), send_reply)

        def send_views() -> None:
            run(send_payloads(stream, topic, views, 0), send_reply)

        cases["send_payloads"] = send_raw
        cases["send_payloads, ids"] = send_ids
        cases["send_payloads, views"] = send_views

    # A stored batch as the server returns it: built, verified, stamped, in one record.
    now_us = time.time_ns() // 1000
    stored = build_send_messages(
        stream,
        topic,
        PartitionId(0),
        [OutgoingMessage(rng.getrandbits(128), block, b"", now_us) for _ in range(messages)],
    )
    prefix = len(build_send_messages(stream, topic, PartitionId(0), [OutgoingMessage(1, b"")]))
    batch = stored[prefix - (256 + 48) :]
    verified = verify_batch(batch)
    stamp_batch(batch, verified, partition_id=0, base_offset=1000, base_timestamp=now_us)
    poll_body = PollMessagesReply(0, 1000 + messages - 1, messages, (bytes(batch),)).encode()

    def poll_reply() -> Any:
        step = core.poll_messages(
            stream,
            topic,
            consumer=ConsumerRef.single(1),
            strategy=PollingStrategy.offset(1000),
            count=messages,
            partition_id=0,
        )
        action = step.send(None)
        assert isinstance(action, Exchange)
        try:
            step.send(replied(action.frame, poll_body))
        except StopIteration as stop:
            return stop.value
        raise AssertionError("the poll asked for a second exchange")

    def poll() -> list[Any]:
        polled: list[Any] = poll_reply().messages
        assert len(polled) == messages
        return polled

    def poll_payloads() -> None:
        total = 0
        for message in poll():
            total += len(message.payload)
        assert total == messages * size

    def poll_fields() -> None:
        for m in poll():
            _ = (m.partition_id, m.offset, m.id, m.checksum, m.timestamp, m.origin_timestamp)
            _ = (m.payload, m.user_headers)

    def poll_only() -> None:
        poll()

    cases["poll, payloads"] = poll_payloads
    probe = poll()[0]
    if hasattr(probe, "payload_view"):

        def poll_views() -> None:
            total = 0
            for message in poll():
                total += len(message.payload_view)
            assert total == messages * size

        cases["poll, payload views"] = poll_views
    if hasattr(poll_reply(), "payloads"):

        def poll_payload_list() -> None:
            total = sum(map(len, poll_reply().payloads()))
            assert total == messages * size

        cases["poll, payloads()"] = poll_payload_list
    cases["poll, every field"] = poll_fields
    cases["poll, decode only"] = poll_only
    return core, cases


def _worker(messages: int, size: int, batches: int) -> None:
    """One round of every case in this process; prints {case: µs per batch} as JSON."""
    core, cases = _cases(messages, size)
    figures: dict[str, float] = {}
    for name, case in cases.items():
        # A warm pass builds the reply frames; the timed pass reuses the same request
        # numbers, so it finds them built.
        first_request = core.session.next_request
        for _ in range(batches):
            case()
        core.session.next_request = first_request
        start = time.process_time()
        for _ in range(batches):
            case()
        figures[name] = (time.process_time() - start) / batches * 1e6
    print(json.dumps(figures))


def _live_worker(address: str, stream: str, messages: int, size: int, batches: int) -> None:
    """Against a real node, with the trio client: ``batches`` lock-step sends of
    ``Message`` values to a new stream, then polls of them by offset reading every
    payload; prints {case: client CPU µs per batch} as JSON (socket and trio included)."""
    import random

    import trio

    from sdk import AsyncClient, ClientConfig, ConsumerRef, Message, PollingStrategy

    payload = random.Random(3).randbytes(size)
    batch = [Message(payload) for _ in range(messages)]

    async def main() -> dict[str, float]:
        config = ClientConfig.one_node(address, username=USERNAME, password=PASSWORD)
        async with AsyncClient(config) as client:
            await client.create_stream(stream)
            await client.create_topic(stream, "t", partitions_count=1)
            for _ in range(10):  # warm: connections, caches
                await client.send_messages(stream, "t", batch, 0)
            start = time.process_time()
            for _ in range(batches):
                await client.send_messages(stream, "t", batch, 0)
            sent = time.process_time() - start
            consumer = ConsumerRef.single(1)
            offset = 0
            read = 0
            start = time.process_time()
            for _ in range(batches):
                polled = await client.poll_messages(
                    stream,
                    "t",
                    consumer=consumer,
                    polling_strategy=PollingStrategy.offset(offset),
                    count=messages,
                    partition_id=0,
                )
                for message in polled.messages:
                    read += len(message.payload)
                offset += len(polled.messages)
            polled_s = time.process_time() - start
            assert read == batches * messages * size, read
            await client.delete_stream(stream)
        return {
            "live: send Message": sent / batches * 1e6,
            "live: poll, payloads": polled_s / batches * 1e6,
        }

    print(json.dumps(trio.run(main)))


def _round(
    tree: Path, arguments: argparse.Namespace, live: str | None = None, stream: str = ""
) -> dict[str, float]:
    environment = dict(os.environ, PYTHONPATH=str(tree))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--messages",
        str(arguments.messages),
        "--size",
        str(arguments.size),
        "--batches",
        str(arguments.batches),
    ]
    if live is not None:
        command += ["--live-node", live, "--live-stream", stream]
    output = subprocess.run(
        command, env=environment, check=True, capture_output=True, text=True, timeout=600
    ).stdout
    figures: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and print one line per case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=250, help="messages per batch")
    parser.add_argument("--size", type=int, default=1000, help="payload bytes per message")
    parser.add_argument("--batches", type=int, default=400, help="batches per round and case")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per tree")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument(
        "--live", action="store_true", help="also send and poll through a real node (trio)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--live-node", help=argparse.SUPPRESS)
    parser.add_argument("--live-stream", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.worker and arguments.live_node:
        _live_worker(
            arguments.live_node,
            arguments.live_stream,
            arguments.messages,
            arguments.size,
            arguments.batches,
        )
        return
    if arguments.worker:
        _worker(arguments.messages, arguments.size, arguments.batches)
        return
    trees: list[tuple[str, Path]] = [("this tree", _ROOT)]
    if arguments.against is not None:
        trees.append(("against", arguments.against.resolve()))
    samples: dict[str, dict[str, list[float]]] = {label: {} for label, _ in trees}
    with contextlib.ExitStack() as stack:
        node: str | None = None
        if arguments.live:
            from bench.load.params import Embedded
            from bench.load.servers import embedded_server

            server = stack.enter_context(
                embedded_server(Embedded.SINGLE, username=USERNAME, password=PASSWORD)
            )
            node = server.addresses[0]
        for number in range(arguments.rounds):
            for index, (label, tree) in enumerate(trees):
                for name, value in _round(tree, arguments).items():
                    samples[label].setdefault(name, []).append(value)
                if node is not None:
                    stream = f"codec-bench-{number}-{index}"
                    for name, value in _round(tree, arguments, node, stream).items():
                        samples[label].setdefault(name, []).append(value)
    print(
        f"client CPU per batch of {arguments.messages} x {arguments.size} B, µs "
        f"(median of {arguments.rounds} rounds of {arguments.batches} batches; process_time)"
    )
    mine = samples["this tree"]
    other = samples.get("against", {})
    header = "| case | this tree |" + (" against | ratio |" if other else "")
    print(header)
    print("|---|---:|" + ("---:|---:|" if other else ""))
    for name in dict.fromkeys([*other, *mine]):
        ours = statistics.median(mine[name]) if name in mine else None
        line = f"| {name} | {'-' if ours is None else f'{ours:.1f}'} |"
        if other:
            theirs = statistics.median(other[name]) if name in other else None
            ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "-"
            line += f" {'-' if theirs is None else f'{theirs:.1f}'} | {ratio} |"
        print(line)


if __name__ == "__main__":
    main()
