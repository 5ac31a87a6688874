"""High-level consumers: iterate over messages, as a single consumer or a group member.

Purpose: ``async for`` (:class:`AsyncConsumer`, trio) and ``for``
(:class:`Consumer`, blocking) over a topic's messages, with consumer-group membership,
back-off on empty polls and an offset-commit policy. Each consumer has its own session
(``client.new_session()``): group membership belongs to a session, and a session is
lock-step. The logic lives in :class:`~sdk._consumer_core.ConsumerCore`.

A message counts as consumed when the loop asks for the next one (or calls ``commit()``),
so a crash while handling a message never commits it: delivery is at least once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from types import TracebackType
from typing import Unpack

import trio

from sdk._consumer_core import LONG_POLL_WAIT_S_DEFAULT, ConsumerCore
from sdk._driver import AsyncDriver, Driver
from sdk._protocol import ClientCore
from sdk.types import AutoCommit, ConsumerSettings, IdLike, ReceivedMessage
from sdk.wire import PollingStrategy

__all__ = ["AsyncConsumer", "AutoCommit", "Consumer", "ConsumerSettings"]


def _core(
    session_core: ClientCore, stream: IdLike, topic: IdLike, settings: ConsumerSettings
) -> ConsumerCore:
    return ConsumerCore(
        session_core,
        stream,
        topic,
        group=settings.get("group"),
        consumer_id=settings.get("consumer_id", 0),
        partition_ids=settings.get("partition_ids"),
        start=settings.get("start", PollingStrategy.next()),
        batch_length=settings.get("batch_length", 100),
        auto_commit=settings.get("auto_commit", AutoCommit.interval(1.0)),
        create_group=settings.get("create_group", True),
        poll_interval_min_s=settings.get("poll_interval_min_s", 0.05),
        poll_interval_max_s=settings.get("poll_interval_max_s", 1.0),
        sync_interval_s=settings.get("sync_interval_s", 1.0),
        long_poll=settings.get("long_poll", True),
        long_poll_wait_s=settings.get("long_poll_wait_s", LONG_POLL_WAIT_S_DEFAULT),
    )


class AsyncConsumer:
    """A trio consumer; make one with ``client.consumer(stream, topic, ...)``.

    Use it as ``async with client.consumer(...) as consumer: async for message in
    consumer: ...``. Leaving the ``async with`` normally commits (unless auto-commit is
    disabled) and leaves the group; leaving by an exception does not commit the message
    being handled.

    Args:
        client: The client whose settings and credentials the consumer's session uses.
        stream: The stream.
        topic: The topic.
        **settings: See :class:`sdk.types.ConsumerSettings`.
    """

    def __init__(
        self,
        client: AsyncDriver,
        stream: IdLike,
        topic: IdLike,
        **settings: Unpack[ConsumerSettings],
    ) -> None:
        self._session = client.new_session()
        self._core = _core(self._session._core, stream, topic, settings)
        self._buffer: deque[ReceivedMessage] = deque()
        self._handed_out: ReceivedMessage | None = None
        self._closed = False

    @property
    def assigned_partitions(self) -> list[int]:
        """The partitions this consumer reads now."""
        return list(self._core.assigned)

    @property
    def committed_offsets(self) -> dict[int, int]:
        """The last offset stored per partition by this consumer."""
        return dict(self._core.committed)

    async def open(self) -> None:
        """Log in, and join and sync the group (done by the first iteration otherwise)."""
        if not self._core.opened:
            await self._session._run(self._core.open(trio.current_time()))

    def _ack_handed_out(self) -> None:
        if self._handed_out is not None:
            self._core.ack(self._handed_out)
            self._handed_out = None

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        if self._closed:
            raise StopAsyncIteration
        await self.open()
        self._ack_handed_out()
        core = self._core
        while True:
            now = trio.current_time()
            batch_done = not self._buffer
            if core.commit_due(now, batch_done=batch_done):
                await self._session._run(core.commit(now))
            if self._buffer:
                message = self._buffer.popleft()
                self._handed_out = message
                return message
            messages = await self._session._run(core.poll_round(now))
            if messages:
                self._buffer.extend(messages)
                continue
            waited = await self._session._run(core.wait_round(trio.current_time()))
            if waited is not None:
                self._buffer.extend(waited)
                continue  # the node waited for us: poll again at once
            await trio.sleep(core.idle_delay_s())

    async def commit(self) -> int:
        """Store the offsets consumed so far, the message being handled included.

        Returns:
            How many partitions' offsets were stored.
        """
        self._ack_handed_out()
        return await self._session._run(self._core.commit(trio.current_time()))

    async def close(self, *, commit: bool = True) -> None:
        """Commit (per policy, if ``commit``), leave the group, end the session."""
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            try:
                if commit:
                    self._ack_handed_out()
                await self._session._run(self._core.close(trio.current_time(), commit=commit))
            finally:
                await self._session.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close(commit=exc_type is None)


class Consumer:
    """A blocking consumer; make one with ``client.consumer(stream, topic, ...)`` and use
    it as ``with client.consumer(...) as consumer: for message in consumer: ...``.

    :meth:`close` may be called from another thread; it wakes a waiting iteration, which
    then stops.

    Args:
        client: The client whose settings and credentials the consumer's session uses.
        stream: The stream.
        topic: The topic.
        **settings: See :class:`sdk.types.ConsumerSettings`.
    """

    def __init__(
        self, client: Driver, stream: IdLike, topic: IdLike, **settings: Unpack[ConsumerSettings]
    ) -> None:
        self._session = client.new_session()
        self._core = _core(self._session._core, stream, topic, settings)
        self._buffer: deque[ReceivedMessage] = deque()
        self._handed_out: ReceivedMessage | None = None
        self._closed = False
        self._wakeup = threading.Event()
        self._iterating = threading.Lock()

    @property
    def assigned_partitions(self) -> list[int]:
        """The partitions this consumer reads now."""
        return list(self._core.assigned)

    @property
    def committed_offsets(self) -> dict[int, int]:
        """The last offset stored per partition by this consumer."""
        return dict(self._core.committed)

    def open(self) -> None:
        """Log in, and join and sync the group (done by the first iteration otherwise)."""
        if not self._core.opened:
            self._session._run(self._core.open(time.monotonic()))

    def _ack_handed_out(self) -> None:
        if self._handed_out is not None:
            self._core.ack(self._handed_out)
            self._handed_out = None

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ReceivedMessage:
        with self._iterating:
            if self._closed:
                raise StopIteration
            self.open()
            self._ack_handed_out()
            core = self._core
            while not self._closed:
                now = time.monotonic()
                if core.commit_due(now, batch_done=not self._buffer):
                    self._session._run(core.commit(now))
                if self._buffer:
                    message = self._buffer.popleft()
                    self._handed_out = message
                    return message
                messages = self._session._run(core.poll_round(now))
                if messages:
                    self._buffer.extend(messages)
                    continue
                waited = self._session._run(core.wait_round(time.monotonic()))
                if waited is not None:
                    self._buffer.extend(waited)
                    continue  # the node waited for us: poll again at once
                self._wakeup.wait(core.idle_delay_s())
            raise StopIteration

    def commit(self) -> int:
        """Store the offsets consumed so far, the message being handled included."""
        self._ack_handed_out()
        return self._session._run(self._core.commit(time.monotonic()))

    def close(self, *, commit: bool = True) -> None:
        """Commit (per policy, if ``commit``), leave the group, end the session."""
        if self._closed:
            return
        self._closed = True
        self._wakeup.set()
        with self._iterating:
            try:
                if commit:
                    self._ack_handed_out()
                self._session._run(self._core.close(time.monotonic(), commit=commit))
            finally:
                self._session.close()

    def __enter__(self) -> Consumer:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(commit=exc_type is None)
