"""Exactly-once against a real 3-node cluster whose primaries are killed again and again.

A blocking producer sends numbered messages to one partition without pause while the
test kills -9 the node whose replica is primary of the partition's group, then the one
that is primary of the metadata group, and so on, restarting each victim on its data
directory before the next round. Afterwards the partition must hold every message exactly
once, in send order, and the SDK must really have re-sent writes under the same request
number (so the cluster's client tables, not luck, kept them single).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sdk import Client, ConsumerRef, Message, PollingStrategy
from sdk._protocol import Exchange
from sdk.blocking import Client as BlockingClient
from sdk.producer import Producer
from sdk.wire import CommandCode, Frame, RequestHeader, request_command_code
from tests.sdk.real import METADATA_GROUP_NAME, RealCluster, partition_group_name

STREAM = "exactly-once"
ROUNDS = 6
"""Kills, alternating: the partition group's primary, then the metadata group's."""
PROGRESS_MESSAGES = 200
"""Messages the producer must deliver between two kills (the cluster recovered)."""
PROGRESS_TIMEOUT_S = 25.0
DOWN_S = 0.5
"""How long a victim stays down: long enough for a view change to start without it."""
# An attempt outlasts the node's own 10 s bound on a request, so the SDK never closes a
# connection to a live node for being slow: a closed connection ends its session on the
# node (test_real_sessions), and a write in doubt is then failed, not re-sent.
OPTIONS = {
    "request_timeout": "15s",
    "connect_timeout": "500ms",
    "retry_deadline": "60s",
    "reconnection_interval": "20ms",
    "reconnection_interval_max": "500ms",
}


def payload(i: int) -> bytes:
    return f"exactly-once {i:08d} ".encode() + bytes(64)


@dataclass
class SendAttempts:
    """Every SEND_MESSAGES frame the blocking driver wrote, as (client id, request)."""

    attempts: list[tuple[int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, frame: bytes | bytearray) -> None:
        header = RequestHeader.unpack_from(frame)
        if request_command_code(header) is CommandCode.SEND_MESSAGES:
            with self.lock:
                self.attempts.append((header.client, header.request))

    def resent(self) -> int:
        """Attempts beyond the first of their (client, request)."""
        with self.lock:
            counts = Counter(self.attempts)
        return sum(count - 1 for count in counts.values())


@pytest.fixture
def send_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[SendAttempts]:
    recorder = SendAttempts()
    exchange = BlockingClient._exchange

    def recording(self: BlockingClient, action: Exchange) -> Frame:
        recorder.record(action.frame)
        return exchange(self, action)

    monkeypatch.setattr(BlockingClient, "_exchange", recording)
    yield recorder


class Load:
    """Sends messages 1, 2, 3, ... through ``producer`` from a thread until stopped."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.buffered = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                i = self.buffered + 1
                self.producer.send(Message(payload(i), id=i))
                self.buffered = i
        except BaseException as error:  # reported by the test, not lost in the thread
            self.error = error

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(PROGRESS_TIMEOUT_S)
        assert not self._thread.is_alive(), "the producer's send stayed blocked"
        if self.error is not None:
            raise self.error

    def delivered(self) -> int:
        return self.producer.statistics().messages_sent

    def wait_progress(self, messages: int) -> None:
        target = self.delivered() + messages
        deadline = time.monotonic() + PROGRESS_TIMEOUT_S
        while self.delivered() < target:
            assert self.error is None, self.error
            assert time.monotonic() < deadline, (
                f"no progress: {self.delivered()} of {target} messages delivered"
            )
            time.sleep(0.02)


def read_partition(client: Client, stream: str, topic: str) -> list[tuple[int, int, bytes]]:
    """(offset, id, payload) of every message of partition 0."""
    found: list[tuple[int, int, bytes]] = []
    offset = 0
    while True:
        polled = client.poll_messages(
            stream,
            topic,
            consumer=ConsumerRef.single(1),
            polling_strategy=PollingStrategy.offset(offset),
            count=1000,
            partition_id=0,
        )
        if not polled.messages:
            return found
        found.extend((m.offset, m.id, m.payload) for m in polled.messages)
        offset = polled.messages[-1].offset + 1


@pytest.mark.watchdog_s(150)
def test_exactly_once_while_the_partition_and_metadata_primaries_are_killed_repeatedly(
    real_cluster: RealCluster, send_attempts: SendAttempts
) -> None:
    """exactly-once: the primaries crash (kill -9) six times under a continuous producer"""
    with Client.from_connection_string(real_cluster.url(0, **OPTIONS)) as client:
        stream = client.create_stream(STREAM)
        topic = client.create_topic(STREAM, "t", partitions_count=1)
        partition_group = partition_group_name(stream.stream.id, topic.topic.id, 0)
        producer = client.producer(
            STREAM,
            "t",
            partitioning=0,
            batch_length=20,
            linger_s=0.002,
            max_in_flight=2,
            buffer_size_bytes=64 * 1024,
        )
        load = Load(producer)
        load.start()
        victims: list[tuple[str, int, int]] = []
        try:
            for round_ in range(ROUNDS):
                load.wait_progress(PROGRESS_MESSAGES)
                group = partition_group if round_ % 2 == 0 else METADATA_GROUP_NAME
                victim = real_cluster.wait_primary_of(group)
                victims.append((group, victim, load.delivered()))
                real_cluster.kill(victim)
                time.sleep(DOWN_S)
                real_cluster.restart(victim)
            load.wait_progress(PROGRESS_MESSAGES)
        finally:
            load.stop()
            producer.close()
        assert producer.statistics().batches_failed == 0
        sent = load.buffered
        found = read_partition(client, STREAM, "t")

    print(
        f"exactly-once: {sent} messages, kills (group, node, delivered before) {victims}, "
        f"{send_attempts.resent()} sends re-sent under their request number"
    )
    ids = [message_id for _, message_id, _ in found]
    duplicates = [i for i, count in Counter(ids).items() if count > 1]
    assert not duplicates, f"{len(duplicates)} messages appended twice, e.g. {duplicates[:5]}"
    assert ids == list(range(1, sent + 1)), "a message is missing or out of order"
    assert [offset for offset, _, _ in found] == list(range(sent))
    assert all(body == payload(i) for _, i, body in found)
    assert len(victims) == ROUNDS and len(real_cluster.kills) == ROUNDS
    # The kills hit sends in flight: the SDK re-sent them under the same request number.
    assert send_attempts.resent() > 0
