"""SDK adapters: the few calls the actors make, with our SDK or the official one.

Purpose: the actor loops (``bench.load.actors``) are written once against
:class:`LoadClient`; :class:`OursClient` runs them on trio with ``sdk.AsyncClient``,
:class:`OfficialClient` on asyncio with the official ``apache_iggy`` client. Each actor
has its own client (its own session and connection), as in iggy-bench.

Batches are prepared once (:meth:`LoadClient.prepare`) and sent again and again, as
iggy-bench does, so the load generator spends its time in the SDK's send path (ids,
timestamps, encoding, checksums) and not in building payloads.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final, Protocol

from bench.load.params import BenchParams, Range
from bench.load.plan import TOPIC

__all__ = [
    "MESSAGE_HEADER_BYTES",
    "BatchPayload",
    "BatchPool",
    "LoadClient",
    "OfficialClient",
    "OursClient",
    "Polled",
    "Sleep",
]

MESSAGE_HEADER_BYTES: Final = 48
"""Bytes of one message's header in the Iggy 0.9 batch format (``total_bytes`` counts it)."""
POOL_SIZE_MAX: Final = 16
"""Distinct batches prepared when sizes or lengths are ranges."""

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BatchPayload:
    """One batch's payloads and its sizes."""

    payloads: tuple[bytes, ...]
    user_bytes: int
    total_bytes: int

    @property
    def messages(self) -> int:
        return len(self.payloads)


class BatchPool:
    """Pre-built batches, handed out in a cycle (one per distinct size when ``-m`` or
    ``-P`` is a range, drawn from a seeded generator so runs are comparable)."""

    def __init__(self, message_size: Range, messages_per_batch: Range, seed: int) -> None:
        rng = random.Random(seed)
        fixed = message_size.fixed and messages_per_batch.fixed
        count = 1 if fixed else POOL_SIZE_MAX
        block = rng.randbytes(message_size.high)
        batches: list[BatchPayload] = []
        for _ in range(count):
            length = rng.randint(messages_per_batch.low, messages_per_batch.high)
            sizes = [rng.randint(message_size.low, message_size.high) for _ in range(length)]
            payloads = tuple(block[:size] for size in sizes)
            user = sum(sizes)
            batches.append(BatchPayload(payloads, user, user + MESSAGE_HEADER_BYTES * length))
        self.batches: Final = tuple(batches)
        self._next = 0

    def next(self) -> BatchPayload:
        batch = self.batches[self._next % len(self.batches)]
        self._next += 1
        return batch


@dataclass(frozen=True, slots=True)
class Polled:
    """What one poll returned.

    Attributes:
        messages: Messages returned.
        user_bytes: Their payload bytes.
        total_bytes: Payloads plus message and user headers.
        first_origin_us: ``origin_timestamp`` of the first message (0 when empty).
        next_offset: The offset after the last message (``-1`` when empty).
        first_offset: The first message's offset (``-1`` when empty).
        partition_id: The partition they came from (``-1`` when empty).
    """

    messages: int
    user_bytes: int
    total_bytes: int
    first_origin_us: int
    next_offset: int
    first_offset: int = -1
    partition_id: int = -1


EMPTY: Final = Polled(0, 0, 0, 0, -1)


class LoadClient(Protocol):
    """The calls an actor makes."""

    def prepare(self, batch: BatchPayload) -> object:
        """The SDK's message objects for ``batch`` (built once, sent many times)."""
        ...

    async def send(self, stream: str, partition: int | None, prepared: object) -> None:
        """Send one batch to ``partition`` (``None``: balanced)."""
        ...

    async def poll(
        self,
        stream: str,
        *,
        partition: int | None,
        group: str | None,
        offset: int | None,
        count: int,
        consumer_id: int,
    ) -> Polled:
        """Poll ``count`` messages: from ``offset`` as consumer ``consumer_id``, or as a
        member of ``group`` (the next messages, auto-committed)."""
        ...

    async def join_group(self, stream: str, group: str) -> None: ...

    async def close(self) -> None: ...


# --- ours --------------------------------------------------------------------------------


class OursClient:
    """An actor's session of ``sdk.AsyncClient`` (trio)."""

    def __init__(self, client: Any) -> None:
        from sdk import ConsumerRef, Message, Partitioning, PollingStrategy

        self._client = client
        self._message = Message
        self._balanced = Partitioning.balanced()
        self._consumer_ref = ConsumerRef
        self._strategy = PollingStrategy
        self._prepared: dict[int, list[Any]] = {}

    @classmethod
    async def open_root(cls, params: BenchParams) -> Any:
        """The root client every actor's session is forked from (connected)."""
        from sdk import AsyncClient, ClientConfig, NodeAddress

        seeds = []
        for address in params.server_addresses:
            host, _, port = address.rpartition(":")
            seeds.append(NodeAddress(host, int(port)))
        config = ClientConfig(
            seeds=tuple(seeds), username=params.username, password=params.password
        )
        root = AsyncClient(config)
        await root.connect()
        return root

    @classmethod
    async def open(cls, root: Any) -> OursClient:
        session = root.new_session()
        await session.connect()
        return cls(session)

    def prepare(self, batch: BatchPayload) -> object:
        return [self._message(p) for p in batch.payloads]

    async def send(self, stream: str, partition: int | None, prepared: object) -> None:
        assert isinstance(prepared, list)
        target = self._balanced if partition is None else partition
        await self._client.send_messages(stream, TOPIC, prepared, target)

    async def poll(
        self,
        stream: str,
        *,
        partition: int | None,
        group: str | None,
        offset: int | None,
        count: int,
        consumer_id: int,
    ) -> Polled:
        if group is not None:
            consumer = self._consumer_ref.group(group)
            strategy = self._strategy.next()
            auto_commit = True
        else:
            assert offset is not None
            consumer = self._consumer_ref.single(consumer_id)
            strategy = self._strategy.offset(offset)
            auto_commit = False
        polled = await self._client.poll_messages(
            stream,
            TOPIC,
            consumer=consumer,
            polling_strategy=strategy,
            count=count,
            auto_commit=auto_commit,
            partition_id=partition,
        )
        count = polled.count
        if not count:
            return EMPTY
        # Every payload is read (as a view: the SDK's zero-copy way), the rest from the
        # reply's sizes and its first and last message, so the load generator does the
        # per-message work a consumer of payloads does, and no more.
        user = sum(map(len, polled.payloads()))
        first, last = polled.message(0), polled.message(-1)
        return Polled(
            messages=count,
            user_bytes=user,
            total_bytes=polled.size_bytes,
            first_origin_us=first.origin_timestamp,
            next_offset=last.offset + 1,
            first_offset=first.offset,
            partition_id=first.partition_id,
        )

    async def join_group(self, stream: str, group: str) -> None:
        await self._client.join_consumer_group(stream, TOPIC, group)

    async def close(self) -> None:
        await self._client.close()


# --- the official SDK ------------------------------------------------------------------


class OfficialClient:
    """An actor's ``apache_iggy.IggyClient`` (asyncio, backed by the SDK's Tokio runtime)."""

    def __init__(self, client: Any) -> None:
        import apache_iggy

        self._iggy = apache_iggy
        self._client = client
        self._balanced = apache_iggy.Partitioning.balanced()

    @classmethod
    async def open(cls, params: BenchParams) -> OfficialClient:
        import apache_iggy

        client = apache_iggy.IggyClient(params.server_addresses[0])
        await client.connect()
        await client.login_user(params.username, params.password)
        return cls(client)

    def prepare(self, batch: BatchPayload) -> object:
        return batch.payloads

    async def send(self, stream: str, partition: int | None, prepared: object) -> None:
        # A SendMessage takes its origin timestamp (and id) when it is constructed, so
        # the messages are made anew for every send; reusing them would age the
        # end-to-end latencies by the run's duration.
        assert isinstance(prepared, tuple)
        make = self._iggy.SendMessage
        target = self._balanced if partition is None else partition
        await self._client.send_messages(stream, TOPIC, target, [make(p) for p in prepared])

    async def poll(
        self,
        stream: str,
        *,
        partition: int | None,
        group: str | None,
        offset: int | None,
        count: int,
        consumer_id: int,
    ) -> Polled:
        iggy = self._iggy
        if group is not None:
            consumer = iggy.Consumer.Group(group)
            strategy = iggy.PollingStrategy.Next()
            auto_commit = True
        else:
            assert offset is not None
            consumer = iggy.Consumer.Single(consumer_id)
            strategy = iggy.PollingStrategy.Offset(offset)
            auto_commit = False
        messages: Sequence[Any] = await self._client.poll_messages(
            stream,
            TOPIC,
            consumer=consumer,
            polling_strategy=strategy,
            count=count,
            auto_commit=auto_commit,
            partition_id=partition,
        )
        if not messages:
            return EMPTY
        user = sum(len(m.payload()) for m in messages)
        return Polled(
            messages=len(messages),
            user_bytes=user,
            total_bytes=user + MESSAGE_HEADER_BYTES * len(messages),
            first_origin_us=messages[0].origin_timestamp(),
            next_offset=messages[-1].offset() + 1,
            first_offset=messages[0].offset(),
            partition_id=messages[0].partition_id(),
        )

    async def join_group(self, stream: str, group: str) -> None:
        await self._client.join_consumer_group(stream, TOPIC, group)

    async def close(self) -> None:
        with suppress(RuntimeError):  # already gone; the connection closes with the object
            await self._client.logout_user()
