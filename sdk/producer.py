"""High-level producers: batching, several batches in flight, bounded buffer, flush.

Purpose: turn many small ``send`` calls into few large batches, and keep up to
``max_in_flight`` of them on the wire at once. A session is lock-step, so each batch in
flight has its own session (``client.new_session()``); every session keeps its client id
across reconnects and retries a batch under the same request number, so each batch is
appended exactly once even when a node dies mid-send.

:class:`AsyncProducer` runs its senders as trio tasks (``async with client.producer(...)``);
:class:`Producer` runs them as threads (``with client.producer(...)``). Both use the
sans-IO :class:`~sdk._producer_core.Accumulator`.

Delivery errors (a batch whose retries ran out) are collected and raised from the next
:meth:`flush` / close as :class:`~sdk.errors.ProducerSendError`.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Unpack

import trio

from sdk._driver import AsyncDriver, Driver
from sdk._producer_core import Accumulator, PendingBatch, message_size
from sdk.errors import (
    IggyError,
    InvalidFormat,
    ProducerBufferFull,
    ProducerClosed,
    ProducerSendError,
)
from sdk.types import (
    Backpressure,
    IdLike,
    MessageLike,
    PartitioningLike,
    ProducerSettings,
    to_identifier,
    to_message,
    to_partitioning,
)
from sdk.wire import (
    HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    Balanced,
    Identifier,
    MessagesKey,
    OutgoingMessage,
    PartitionId,
    build_send_messages,
)

__all__ = [
    "Backpressure",
    "AsyncProducer",
    "Producer",
    "ProducerSettings",
    "ProducerStatistics",
    "open_async_producer",
]

IN_FLIGHT_MAX: Final = 64
"""Most batches (sessions) a producer may keep in flight."""


@dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """Counters of a producer.

    Attributes:
        messages_sent: Messages in batches the cluster confirmed.
        batches_sent: Batches the cluster confirmed.
        batches_failed: Batches whose retries ran out.
        buffered_bytes: Bytes appended and not yet confirmed or failed.
        batches_in_flight: Batches on the wire now.
    """

    messages_sent: int
    batches_sent: int
    batches_failed: int
    buffered_bytes: int
    batches_in_flight: int


class _ProducerState:
    """What both producers share: settings, the accumulator, partition resolution and
    the outcome counters (no IO, no waiting)."""

    def __init__(self, stream: IdLike, topic: IdLike, settings: ProducerSettings) -> None:
        self.stream_id: Identifier = to_identifier(stream)
        self.topic_id: Identifier = to_identifier(topic)
        self.partitioning = to_partitioning(settings.get("partitioning", Balanced()))
        self.max_in_flight = settings.get("max_in_flight", 1)
        if not 1 <= self.max_in_flight <= IN_FLIGHT_MAX:
            raise ValueError(f"max_in_flight must be 1..{IN_FLIGHT_MAX}")
        self.backpressure = settings.get("backpressure", Backpressure.block())
        self.accumulator = Accumulator(
            batch_length_max=settings.get("batch_length", 1000),
            batch_size_bytes_max=settings.get("batch_size_bytes", 1024 * 1024),
            linger_s=settings.get("linger_s", 0.005),
            buffer_size_bytes_max=settings.get("buffer_size_bytes", 32 * 1024 * 1024),
            ordered=settings.get("ordered", True),
        )
        self.partitions_count: int | None = None
        self.closed = False
        self.flushing = 0
        self.failures: list[tuple[int, int, IggyError]] = []
        self.messages_sent = 0
        self.batches_sent = 0
        self.batches_failed = 0

    def needs_partitions_count(self, partitioning: PartitioningLike | None) -> bool:
        chosen = self.partitioning if partitioning is None else to_partitioning(partitioning)
        return not isinstance(chosen, PartitionId) and self.partitions_count is None

    def partition_for(self, partitioning: PartitioningLike | None) -> int:
        chosen = self.partitioning if partitioning is None else to_partitioning(partitioning)
        if isinstance(chosen, PartitionId):
            return chosen.partition_id
        count = self.partitions_count
        assert count is not None and count > 0
        if isinstance(chosen, MessagesKey):
            return chosen.partition(count)
        return self.accumulator.balanced_partition(count)

    def outgoing(self, value: MessageLike, rng: random.Random) -> OutgoingMessage:
        message = to_message(value)
        message_id = message.id
        while message_id == 0:
            message_id = rng.getrandbits(128)
        return message.outgoing(message_id, message.origin_timestamp or time.time_ns() // 1000)

    def check_size(self, outgoing: OutgoingMessage) -> int:
        if len(outgoing.payload) > MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"a payload of {len(outgoing.payload)} bytes exceeds {MAX_PAYLOAD_BYTES}"
            )
        size = message_size(outgoing)
        if size > self.accumulator.buffer_size_bytes_max:
            raise ProducerBufferFull(detail=f"a {size}-byte message exceeds the whole buffer")
        return size

    def build(self, batch: PendingBatch) -> bytearray:
        return build_send_messages(
            self.stream_id,
            self.topic_id,
            PartitionId(batch.partition_id),
            batch.messages,
            headroom=HEADER_SIZE,
        )

    def record(self, batch: PendingBatch, error: IggyError | None) -> None:
        if error is None:
            self.messages_sent += len(batch.messages)
            self.batches_sent += 1
        else:
            self.batches_failed += 1
            self.failures.append((batch.partition_id, len(batch.messages), error))
        self.accumulator.complete(batch)

    def raise_failures(self) -> None:
        if self.failures:
            failures, self.failures = self.failures, []
            raise ProducerSendError(failures)

    def statistics(self) -> ProducerStatistics:
        return ProducerStatistics(
            self.messages_sent,
            self.batches_sent,
            self.batches_failed,
            self.accumulator.buffered_bytes,
            self.accumulator.in_flight,
        )


# --- trio ----------------------------------------------------------------------------------


class AsyncProducer:
    """A batching producer on trio; make one with ``client.producer(stream, topic, ...)``
    (an async context manager that flushes and closes it on exit).

    Args:
        client: The client whose settings and credentials the sender sessions use.
        stream: The stream.
        topic: The topic.
        **settings: See :class:`sdk.types.ProducerSettings`.
    """

    def __init__(
        self,
        client: AsyncDriver,
        stream: IdLike,
        topic: IdLike,
        **settings: Unpack[ProducerSettings],
    ) -> None:
        self._client = client
        self._state = _ProducerState(stream, topic, settings)
        self._rng = random.Random(client._rng.getrandbits(64))
        self._sessions: list[AsyncDriver] = []
        self._changed = trio.Event()
        self._cancel_scope = trio.CancelScope()
        self._senders_done = trio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _start(self, nursery: trio.Nursery) -> None:
        self._sessions = [self._client.new_session() for _ in range(self._state.max_in_flight)]
        nursery.start_soon(self._run_senders)

    async def _run_senders(self) -> None:
        try:
            with self._cancel_scope:
                async with trio.open_nursery() as senders:
                    for session in self._sessions:
                        senders.start_soon(self._sender, session)
        finally:
            self._senders_done.set()
            self._notify()

    async def _sender(self, session: AsyncDriver) -> None:
        state = self._state
        accumulator = state.accumulator
        try:
            while True:
                now = trio.current_time()
                flushing = state.flushing > 0 or state.closed
                batch = accumulator.take(now, flushing=flushing)
                if batch is None:
                    if state.closed and not accumulator.queued:
                        return
                    deadline = accumulator.next_deadline()
                    changed = self._changed
                    with trio.move_on_at(math.inf if deadline is None else deadline):
                        await changed.wait()
                    continue
                error: IggyError | None = None
                try:
                    buffer = state.build(batch)
                    await session._run(
                        session._core.send_prepared(
                            state.stream_id, state.topic_id, batch.partition_id, buffer
                        )
                    )
                except IggyError as failure:
                    error = failure
                except ValueError as invalid:  # a batch the wire format cannot carry
                    error = InvalidFormat(detail=str(invalid))
                state.record(batch, error)
                self._notify()
        finally:
            self._notify()

    async def send(
        self, *messages: MessageLike, partitioning: PartitioningLike | None = None
    ) -> None:
        """Buffer messages for sending; returns once they are buffered.

        Args:
            *messages: :class:`~sdk.types.Message` values or payloads.
            partitioning: This call's partitioning (default: the producer's).

        Raises:
            ProducerBufferFull: the buffer stayed full (backpressure ``fail`` or a
                timed-out ``block_with_timeout``), or a message exceeds the buffer.
            ProducerClosed: the producer is closed.
            ValueError: a payload exceeds Iggy's ``MAX_PAYLOAD_BYTES``.
        """
        state = self._state
        if state.closed:
            raise ProducerClosed
        if state.needs_partitions_count(partitioning):
            state.partitions_count = await self._client._run(
                self._client._core.partitions_count(state.stream_id, state.topic_id)
            )
        accumulator = state.accumulator
        for count, value in enumerate(messages, 1):
            outgoing = state.outgoing(value, self._rng)
            size = state.check_size(outgoing)
            await self._wait_for_room(size)
            if state.closed:
                raise ProducerClosed
            accumulator.append(state.partition_for(partitioning), outgoing, trio.current_time())
            if count % accumulator.batch_length_max == 0:
                # Let the senders ship what is sealed and read their replies: batching
                # a long call must not starve the batches already in flight.
                self._notify()
                await trio.lowlevel.checkpoint()
        self._notify()
        await trio.lowlevel.checkpoint()

    async def _wait_for_room(self, size: int) -> None:
        state = self._state
        accumulator = state.accumulator
        if accumulator.room_for(size):
            return
        backpressure = state.backpressure
        if backpressure.mode == "fail":
            raise ProducerBufferFull(detail=f"{accumulator.buffered_bytes} bytes buffered")
        limit = math.inf if backpressure.timeout_s is None else backpressure.timeout_s
        with trio.move_on_after(limit):
            while not accumulator.room_for(size) and not state.closed:
                await self._changed.wait()
            return
        raise ProducerBufferFull(detail=f"no room within {backpressure.timeout_s}s")

    async def flush(self) -> None:
        """Send every buffered message now and wait until all are confirmed or failed.

        Raises:
            ProducerSendError: batches failed since the last flush.
        """
        state = self._state
        state.flushing += 1
        self._notify()
        try:
            while not state.accumulator.idle and not self._senders_done.is_set():
                await self._changed.wait()
        finally:
            state.flushing -= 1
        state.raise_failures()

    async def aclose(self) -> None:
        """Flush, stop the senders and close their sessions. Idempotent.

        Raises:
            ProducerSendError: batches failed since the last flush.
        """
        state = self._state
        if not state.closed:
            state.closed = True
            self._notify()
            await self._senders_done.wait()
            for session in self._sessions:
                await session.close()
        state.raise_failures()

    def _abort(self) -> None:
        self._state.closed = True
        self._cancel_scope.cancel()

    def statistics(self) -> ProducerStatistics:
        """Counters of delivered and failed batches and of the buffer."""
        return self._state.statistics()


@asynccontextmanager
async def open_async_producer(
    client: AsyncDriver, stream: IdLike, topic: IdLike, **settings: Unpack[ProducerSettings]
) -> AsyncIterator[AsyncProducer]:
    """Run an :class:`AsyncProducer` for the body of an ``async with``.

    Leaving normally flushes and closes it (raising ProducerSendError if batches
    failed); leaving by an exception drops what is still buffered. Exceptions come out
    as themselves, not wrapped in the internal nursery's exception group.
    """
    producer = AsyncProducer(client, stream, topic, **settings)
    try:
        async with trio.open_nursery() as nursery:
            producer._start(nursery)
            try:
                yield producer
            except BaseException:
                producer._abort()
                with trio.CancelScope(shield=True):
                    for session in producer._sessions:
                        await session.close()
                raise
            await producer.aclose()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


# --- threads ---------------------------------------------------------------------------------


class Producer:
    """A batching producer whose senders are threads; make one with
    ``client.producer(stream, topic, ...)`` and close it (or use ``with``).

    Args:
        client: The client whose settings and credentials the sender sessions use.
        stream: The stream.
        topic: The topic.
        **settings: See :class:`sdk.types.ProducerSettings`.
    """

    def __init__(
        self, client: Driver, stream: IdLike, topic: IdLike, **settings: Unpack[ProducerSettings]
    ) -> None:
        self._client = client
        self._state = _ProducerState(stream, topic, settings)
        self._rng = random.Random(client._rng.getrandbits(64))
        self._condition = threading.Condition()
        self._sessions = [client.new_session() for _ in range(self._state.max_in_flight)]
        self._threads = [
            threading.Thread(
                target=self._sender, args=(session,), daemon=True, name=f"producer-{i}"
            )
            for i, session in enumerate(self._sessions)
        ]
        self._aborted = False
        for thread in self._threads:
            thread.start()

    def _sender(self, session: Driver) -> None:
        state = self._state
        accumulator = state.accumulator
        condition = self._condition
        while True:
            with condition:
                while True:
                    if self._aborted:
                        return
                    flushing = state.flushing > 0 or state.closed
                    batch = accumulator.take(time.monotonic(), flushing=flushing)
                    if batch is not None:
                        break
                    if state.closed and not accumulator.queued:
                        condition.notify_all()
                        return
                    deadline = accumulator.next_deadline()
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    condition.wait(timeout)
            error: IggyError | None = None
            try:
                buffer = state.build(batch)
                session._run(
                    session._core.send_prepared(
                        state.stream_id, state.topic_id, batch.partition_id, buffer
                    )
                )
            except IggyError as failure:
                error = failure
            except ValueError as invalid:  # a batch the wire format cannot carry
                error = InvalidFormat(detail=str(invalid))
            with condition:
                state.record(batch, error)
                condition.notify_all()

    def send(self, *messages: MessageLike, partitioning: PartitioningLike | None = None) -> None:
        """Buffer messages for sending (see :meth:`AsyncProducer.send`)."""
        state = self._state
        if state.closed:
            raise ProducerClosed
        if state.needs_partitions_count(partitioning):
            count = self._client._run(
                self._client._core.partitions_count(state.stream_id, state.topic_id)
            )
            with self._condition:
                state.partitions_count = count
        for value in messages:
            outgoing = state.outgoing(value, self._rng)
            size = state.check_size(outgoing)
            with self._condition:
                self._wait_for_room(size)
                if state.closed:
                    raise ProducerClosed
                partition = state.partition_for(partitioning)
                state.accumulator.append(partition, outgoing, time.monotonic())
                self._condition.notify_all()

    def _wait_for_room(self, size: int) -> None:
        state = self._state
        accumulator = state.accumulator
        if accumulator.room_for(size):
            return
        backpressure = state.backpressure
        if backpressure.mode == "fail":
            raise ProducerBufferFull(detail=f"{accumulator.buffered_bytes} bytes buffered")
        if not self._condition.wait_for(
            lambda: accumulator.room_for(size) or state.closed, backpressure.timeout_s
        ):
            raise ProducerBufferFull(detail=f"no room within {backpressure.timeout_s}s")

    def flush(self) -> None:
        """Send every buffered message now and wait until all are confirmed or failed.

        Raises:
            ProducerSendError: batches failed since the last flush.
        """
        state = self._state
        with self._condition:
            state.flushing += 1
            self._condition.notify_all()
            try:
                self._condition.wait_for(
                    lambda: state.accumulator.idle or not any(t.is_alive() for t in self._threads)
                )
            finally:
                state.flushing -= 1
            state.raise_failures()

    def close(self) -> None:
        """Flush, stop the senders and close their sessions. Idempotent.

        Raises:
            ProducerSendError: batches failed since the last flush.
        """
        state = self._state
        with self._condition:
            already = state.closed
            state.closed = True
            self._condition.notify_all()
        if not already:
            for thread in self._threads:
                thread.join()
            for session in self._sessions:
                session.close()
        with self._condition:
            state.raise_failures()

    def abort(self) -> None:
        """Stop at once, dropping what is still buffered (batches in flight finish)."""
        with self._condition:
            self._state.closed = True
            self._aborted = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join()
        for session in self._sessions:
            session.close()

    def statistics(self) -> ProducerStatistics:
        """Counters of delivered and failed batches and of the buffer."""
        with self._condition:
            return self._state.statistics()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
