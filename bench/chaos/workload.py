"""The load of a chaos run: producers and consumers on the project's SDK, recording history.

Purpose: keep a cluster busy while faults happen and write down, as plain data
(:mod:`bench.chaos.history`), everything the clients saw: every send call with its outcome
and acknowledged offset, every poll with the offsets and ids it returned.

- **Producers** (``producers``) each own one SDK session and send lock-step batches of
  1..``batch_max`` messages to partitions drawn from their own seeded PRNG. Every message
  id is unique in the run and its payload is a function of the id
  (:func:`bench.chaos.history.payload_for`). The SDK retries a send under the same
  request number (exactly-once retries, ``docs/sdk.md`` §4); a call that ends in an error
  is recorded as ``unknown`` unless the SDK says the outcome is known.
- **Positional consumers** (``consumers``) read every partition in turn from the offset
  after the last message they saw (``PollingStrategy.offset``).
- **Stored-offset consumers** (``stored_consumers``) read with ``PollingStrategy.next()``
  and store the last offset they read after each poll: the server keeps their position.
- **Probes** (:meth:`Workload.probe`) send one message to every partition; the fault
  loop uses them to decide that every partition takes writes again.
- **Final reads** (:func:`read_node_log`) read every partition from one node only (no
  cluster discovery), from offset 0 (or the first offset the node still holds) to its end.

Invariants: every call is bounded by the SDK's retry deadline; each session is used by one
task; a send cancelled mid-call is recorded as ``unknown``.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import trio

from bench.chaos.history import (
    Outcome,
    PartitionKey,
    Poll,
    Polled,
    Send,
    digest,
    message_id,
    payload_for,
)
from sdk import AsyncClient, ClientConfig, ConsumerRef, Message, NodeAddress, PollingStrategy
from sdk.errors import AlreadyExists, IggyError

STREAM: Final = "chaos"
TOPICS: Final = (("replicated", "replicated"), ("persisted", "persisted"))
"""(topic name, durability): one topic of each durability level."""
PARTITIONS_PER_TOPIC: Final = 3
PROBE_PRODUCER: Final = 1 << 20
"""The producer number of probe sends (ids apart from every real producer's)."""
FINAL_READ_COUNT: Final = 1000
POSITIONAL_CONSUMER_BASE: Final = 100
STORED_CONSUMER_BASE: Final = 200


def partitions() -> list[PartitionKey]:
    return [(topic, p) for topic, _ in TOPICS for p in range(PARTITIONS_PER_TOPIC)]


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """How much load a chaos run applies.

    Attributes:
        producers: Producer sessions.
        consumers: Positional consumers.
        stored_consumers: Consumers that read from their stored offset.
        batch_max: Most messages per send call.
        send_pause_s_max: Each producer waits up to this long between calls.
        poll_count: Most messages per poll.
        request_timeout_s: SDK: one attempt.
        retry_deadline_s: SDK: one call, retries included.
    """

    producers: int = 4
    consumers: int = 2
    stored_consumers: int = 1
    batch_max: int = 8
    send_pause_s_max: float = 0.02
    poll_count: int = 100
    request_timeout_s: float = 2.0
    retry_deadline_s: float = 120.0


@dataclass
class History:
    """What the clients saw (appended by the workload's tasks, read by the checker)."""

    sends: list[Send] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    def acknowledged(self) -> int:
        return sum(len(s.message_ids) for s in self.sends if s.outcome == "ok")


def _outcome(error: BaseException) -> Outcome:
    """``failed`` only when the SDK says so; anything else may have been applied."""
    known = getattr(error, "outcome_unknown", None)
    return "failed" if known is False else "unknown"


def _address(text: str) -> NodeAddress:
    host, _, port = text.rpartition(":")
    return NodeAddress(host, int(port))


class Workload:
    """Producers, consumers and probes against one cluster; see the module docstring.

    Args:
        addresses: Client addresses of every node.
        password: The root user's password.
        config: How much load.
        seed: Seeds every producer's and consumer's choices.
    """

    def __init__(
        self, addresses: list[str], password: str, config: WorkloadConfig, seed: int
    ) -> None:
        self.addresses = addresses
        self.password = password
        self.config = config
        self.seed = seed
        self.history = History()
        self.partitions = partitions()
        self._probe_sequence = 0
        self.last_probe_error = ""
        self.started_at = 0.0
        """``trio.current_time()`` at the start of the run (polls are stamped from it)."""
        self._client: AsyncClient | None = None
        self._probe_session: AsyncClient | None = None

    def client_config(
        self, seeds: list[str] | None = None, *, discovery: bool = True
    ) -> ClientConfig:
        return ClientConfig(
            seeds=tuple(_address(a) for a in (seeds or self.addresses)),
            username="iggy",
            password=self.password,
            request_timeout_s=self.config.request_timeout_s,
            connect_timeout_s=min(1.0, self.config.request_timeout_s),
            retry_deadline_s=self.config.retry_deadline_s,
            cluster_discovery=discovery,
        )

    async def setup(self) -> None:
        """Create the stream and topics (tolerating a retried create that applied)."""
        client = AsyncClient(self.client_config(), rng=random.Random(self.seed))
        self._client = client
        await client.connect()
        with contextlib.suppress(AlreadyExists):
            await client.create_stream(STREAM)
        for topic, durability in TOPICS:
            with contextlib.suppress(AlreadyExists):
                await client.create_topic(
                    STREAM, topic, PARTITIONS_PER_TOPIC, durability=durability
                )
        self._probe_session = client.new_session()

    async def close(self) -> None:
        for client in (self._probe_session, self._client):
            if client is not None:
                with trio.move_on_after(5):
                    await client.close()

    def _now(self) -> float:
        return trio.current_time() - self.started_at

    def _session(self) -> AsyncClient:
        assert self._client is not None, "setup() first"
        return self._client.new_session()

    # -- producers --------------------------------------------------------------------------

    async def _send(
        self, session: AsyncClient, producer: int, sequence: int, key: PartitionKey, ids: list[int]
    ) -> None:
        outcome: Outcome = "unknown"
        base: int | None = None
        try:
            confirmations = await session.send_messages(
                STREAM, key[0], [Message(payload_for(i), id=i) for i in ids], key[1]
            )
            outcome = "ok"
            if confirmations:
                base = confirmations[0].base_offset
        except IggyError as error:
            outcome = _outcome(error)
            self.history.errors[f"send {type(error).__name__}"] += 1
            if producer == PROBE_PRODUCER:
                self.last_probe_error = f"{type(error).__name__}: {error}"
        finally:
            self.history.sends.append(Send(producer, sequence, key, tuple(ids), outcome, base))

    async def producer(self, index: int, stop: trio.Event) -> None:
        """Send until ``stop`` is set (the call in hand is finished first)."""
        rng = random.Random(f"{self.seed}/producer/{index}")
        session = self._session()
        sequence = 0
        next_id = 0
        try:
            while not stop.is_set():
                key = rng.choice(self.partitions)
                count = rng.randint(1, self.config.batch_max)
                ids = [message_id(index, next_id + k) for k in range(count)]
                next_id += count
                await self._send(session, index, sequence, key, ids)
                sequence += 1
                with trio.move_on_after(rng.uniform(0, self.config.send_pause_s_max)):
                    await stop.wait()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await session.close()

    async def probe(self) -> None:
        """One message to every partition, in turn; returns once all were acknowledged.

        Raises:
            IggyError: a probe failed (the caller decides whether to try again).
        """
        session = self._probe_session
        assert session is not None, "setup() first"
        for key in self.partitions:
            sequence = self._probe_sequence
            self._probe_sequence += 1
            ids = [message_id(PROBE_PRODUCER, sequence)]
            await self._send(session, PROBE_PRODUCER, sequence, key, ids)
            if self.history.sends[-1].outcome != "ok":
                raise RuntimeError(f"probe of {key[0]}/{key[1]}: {self.last_probe_error}")

    # -- consumers --------------------------------------------------------------------------

    async def positional_consumer(self, index: int, stop: trio.Event) -> None:
        """Read every partition in turn from where it left off, until ``stop``."""
        consumer = POSITIONAL_CONSUMER_BASE + index
        session = self._session()
        position = dict.fromkeys(self.partitions, 0)
        try:
            while not stop.is_set():
                empty = True
                for key in self.partitions:
                    asked = position[key]
                    try:
                        polled = await session.poll_messages(
                            STREAM,
                            key[0],
                            consumer=ConsumerRef.single(consumer),
                            polling_strategy=PollingStrategy.offset(asked),
                            count=self.config.poll_count,
                            partition_id=key[1],
                        )
                    except IggyError as error:
                        self.history.errors[f"poll {type(error).__name__}"] += 1
                        continue
                    messages = tuple(
                        Polled(m.offset, m.id, digest(m.payload)) for m in polled.messages
                    )
                    self.history.polls.append(
                        Poll(consumer, key, messages, asked=asked, at_s=self._now())
                    )
                    if messages:
                        empty = False
                        position[key] = messages[-1].offset + 1
                if empty:
                    with trio.move_on_after(0.05):
                        await stop.wait()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await session.close()

    async def stored_consumer(self, index: int, stop: trio.Event) -> None:
        """Read with ``next()`` and store the last offset read after each poll."""
        consumer = STORED_CONSUMER_BASE + index
        ref = ConsumerRef.single(consumer)
        session = self._session()
        expected: dict[PartitionKey, int | None] = dict.fromkeys(self.partitions, 0)
        floor = dict.fromkeys(self.partitions, 0)
        unknown: dict[PartitionKey, set[int]] = {key: set() for key in self.partitions}
        try:
            while not stop.is_set():
                empty = True
                for key in self.partitions:
                    try:
                        polled = await session.poll_messages(
                            STREAM,
                            key[0],
                            consumer=ref,
                            polling_strategy=PollingStrategy.next(),
                            count=self.config.poll_count,
                            partition_id=key[1],
                        )
                    except IggyError as error:
                        self.history.errors[f"poll {type(error).__name__}"] += 1
                        continue
                    messages = tuple(
                        Polled(m.offset, m.id, digest(m.payload)) for m in polled.messages
                    )
                    self.history.polls.append(
                        Poll(
                            consumer,
                            key,
                            messages,
                            expected=expected[key],
                            floor=floor[key],
                            unknown_stores=tuple(sorted(unknown[key])),
                            at_s=self._now(),
                        )
                    )
                    if not messages:
                        continue
                    empty = False
                    last = messages[-1].offset
                    try:
                        await session.store_consumer_offset(
                            STREAM, key[0], last, consumer=ref, partition_id=key[1]
                        )
                    except IggyError as error:
                        self.history.errors[f"store {type(error).__name__}"] += 1
                        expected[key] = None  # stored or not: either start is right
                        unknown[key].add(last + 1)  # and it may still take effect later
                        continue
                    expected[key] = last + 1
                    floor[key] = last + 1
                if empty:
                    with trio.move_on_after(0.05):
                        await stop.wait()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await session.close()


async def read_node_log(
    workload: Workload, address: str, keys: list[PartitionKey]
) -> dict[PartitionKey, list[Polled]]:
    """Every message of every partition as the node at ``address`` serves it.

    Raises:
        IggyError: the node did not answer within the SDK's retry deadline.
    """
    config = workload.client_config([address], discovery=False)
    logs: dict[PartitionKey, list[Polled]] = {}
    async with AsyncClient(config) as client:
        for key in keys:
            log: list[Polled] = []
            while True:
                polled = await client.poll_messages(
                    STREAM,
                    key[0],
                    consumer=ConsumerRef.single(1),
                    polling_strategy=PollingStrategy.offset(log[-1].offset + 1 if log else 0),
                    count=FINAL_READ_COUNT,
                    partition_id=key[1],
                )
                if not polled.messages:
                    break
                expected = log[-1].offset + 1 if log else polled.messages[0].offset
                log.extend(Polled(m.offset, m.id, digest(m.payload)) for m in polled.messages)
                if polled.messages[0].offset != expected:
                    break  # a skip inside the log: the checker reports it; stop here
            logs[key] = log
    return logs
