"""The consumer's logic, sans IO: assignment, positions, polling order, back-off and
offset commits, as steps over a :class:`~sdk._protocol.ClientCore`.

Purpose: the trio and the blocking consumer share this and only differ in how they wait
and iterate.

Theory of operation. A consumer reads a set of partitions: all of a topic's (or those
given) for a single consumer, or the ones the cluster assigns this session in a consumer
group. Each round polls the partitions in turn until one returns messages. The first poll
of a partition uses the configured start strategy (``next``: after the stored offset);
later polls continue from the local position (``offset``), so positions never depend on
how often offsets are committed. A message counts as *consumed* once the caller asks for
the next one (or commits), and commits store the last consumed offset per partition.

Invariants:

1. Committed offsets never go past what the caller has consumed (at-least-once).
2. After a round that found nothing, the consumer long-polls (``wait_round``): one
   partition's poll waits on the node until a message is applied or ``long_poll_wait_s``
   passes (shorter when a group sync or a commit falls due first, and at most
   ``poll_interval_max_s`` when it reads several partitions, so the others are polled as
   often as without long polls). Without long polls (turned off, refused by a server
   that does not know them, or by a node holding as many as it may) the caller waits
   ``idle_delay_s()``: it doubles from ``poll_interval_min_s`` to ``poll_interval_max_s``
   over consecutive empty rounds and resets on data. Either way an idle consumer never
   busy-polls.
3. A group member re-syncs its assignment every ``sync_interval_s``, on the re-sync
   sentinel and on "partition not owned" / "member not found"; partitions it lost are
   dropped from its positions (their buffered messages may also reach the new owner:
   delivery is at least once).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Final

from sdk._protocol import NO_PARTITION, ClientCore, Step
from sdk.errors import ConsumerGroupAlreadyExists, ConsumerGroupMemberNotFound, IggyError
from sdk.types import AutoCommit, ConsumerRef, IdLike, ReceivedMessage, to_identifier
from sdk.wire import LONG_POLL_WAIT_MS_MAX, IggyErrorCode, PollingStrategy

__all__ = ["AutoCommit", "ConsumerCore"]

_RESYNC_CODES: Final = (
    IggyErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED,
    IggyErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND,
    IggyErrorCode.PARTITION_NOT_FOUND,
)

LONG_POLL_WAIT_S_DEFAULT: Final = 5.0
"""A long poll's longest wait by default: an idle consumer asks the node every 5 s."""
LONG_POLL_WAIT_S_MIN: Final = 0.01
"""A shorter wait is not worth a long poll: the consumer backs off instead."""


class ConsumerCore:
    """Assignment, positions and commits of one consumer (one session).

    Args:
        core: The consumer's own client session.
        stream: The stream.
        topic: The topic.
        group: A consumer group to join (``None``: a single consumer).
        consumer_id: The single consumer's id (ignored for a group).
        partition_ids: The single consumer's partitions (``None``: all).
        start: Where a partition is first read from.
        batch_length: Most messages per poll.
        auto_commit: The commit policy.
        create_group: Create the group if it does not exist.
        poll_interval_min_s: First wait after an empty round.
        poll_interval_max_s: Longest wait after empty rounds.
        sync_interval_s: How often a group member re-checks its assignment.
        long_poll: Wait on the node for messages after an empty round (viewstream's
            long poll); off, or against a server without it, back off instead.
        long_poll_wait_s: Longest wait of one long poll.
    """

    def __init__(
        self,
        core: ClientCore,
        stream: IdLike,
        topic: IdLike,
        *,
        group: IdLike | None,
        consumer_id: IdLike,
        partition_ids: Sequence[int] | None,
        start: PollingStrategy,
        batch_length: int,
        auto_commit: AutoCommit,
        create_group: bool,
        poll_interval_min_s: float,
        poll_interval_max_s: float,
        sync_interval_s: float,
        long_poll: bool = True,
        long_poll_wait_s: float = LONG_POLL_WAIT_S_DEFAULT,
    ) -> None:
        if not 0 < poll_interval_min_s <= poll_interval_max_s:
            raise ValueError("need 0 < poll_interval_min_s <= poll_interval_max_s")
        if not 0 < long_poll_wait_s <= LONG_POLL_WAIT_MS_MAX / 1000:
            raise ValueError(f"need 0 < long_poll_wait_s <= {LONG_POLL_WAIT_MS_MAX / 1000:g}")
        if batch_length < 1:
            raise ValueError("batch_length must be positive")
        self.core = core
        self.stream_id = to_identifier(stream)
        self.topic_id = to_identifier(topic)
        self.group = None if group is None else to_identifier(group)
        self.consumer = (
            ConsumerRef.group(self.group) if self.group is not None else ConsumerRef(consumer_id)
        )
        self._partition_ids = None if partition_ids is None else list(partition_ids)
        self.start = start
        self.batch_length = batch_length
        self.auto_commit = auto_commit
        self.create_group = create_group
        self.poll_interval_min_s = poll_interval_min_s
        self.poll_interval_max_s = poll_interval_max_s
        self.sync_interval_s = sync_interval_s
        self.long_poll = long_poll
        """Whether empty rounds long-poll: the setting, until a server refuses the code."""
        self.long_poll_wait_s = long_poll_wait_s
        self.assigned: list[int] = []
        self.generation: int | None = None
        self.positions: dict[int, int] = {}
        self.consumed: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.empty_rounds = 0
        self.opened = False
        self.joined = False
        self._turn = 0
        self._last_sync_at = 0.0
        self._last_commit_at = 0.0

    # --- membership ----------------------------------------------------------------------

    def open(self, now: float) -> Step[None]:
        """Learn the partitions (single consumer) or create/join/sync the group."""
        self._last_commit_at = now
        if self.group is None:
            if self._partition_ids is None:
                count = yield from self.core.partitions_count(self.stream_id, self.topic_id)
                self.assigned = list(range(count))
            else:
                self.assigned = list(self._partition_ids)
            self.opened = True
            return
        if self.create_group and isinstance(self.group.value, str):
            existing = yield from self.core.get_consumer_group(
                self.stream_id, self.topic_id, self.group
            )
            if existing is None:
                with contextlib.suppress(ConsumerGroupAlreadyExists):
                    yield from self.core.create_consumer_group(
                        self.stream_id, self.topic_id, self.group.value
                    )
        yield from self.core.join_consumer_group(self.stream_id, self.topic_id, self.group)
        self.joined = True
        yield from self._sync(now)
        self.opened = True

    def _sync(self, now: float) -> Step[None]:
        assert self.group is not None
        self._last_sync_at = now
        assignment = yield from self.core.sync_consumer_group(
            self.stream_id, self.topic_id, self.group
        )
        if assignment is None:
            # Our membership is gone (session re-registered, group recreated): join again.
            yield from self.core.join_consumer_group(self.stream_id, self.topic_id, self.group)
            assignment = yield from self.core.sync_consumer_group(
                self.stream_id, self.topic_id, self.group
            )
            if assignment is None:
                raise ConsumerGroupMemberNotFound(detail=f"cannot join group {self.group}")
        partitions = list(assignment.partitions)
        if assignment.generation != self.generation or partitions != self.assigned:
            self.generation = assignment.generation
            for lost in set(self.assigned) - set(partitions):
                self.positions.pop(lost, None)
            self.assigned = partitions

    # --- polling ---------------------------------------------------------------------------

    def poll_round(self, now: float) -> Step[list[ReceivedMessage]]:
        """Poll the assigned partitions in turn until one has messages (``[]``: none)."""
        if self.group is not None and now - self._last_sync_at >= self.sync_interval_s:
            yield from self._sync(now)
        for _ in range(len(self.assigned)):
            partition = self.assigned[self._turn % len(self.assigned)]
            self._turn += 1
            position = self.positions.get(partition)
            strategy = self.start if position is None else PollingStrategy.offset(position)
            try:
                polled = yield from self.core.poll_messages(
                    self.stream_id,
                    self.topic_id,
                    consumer=self.consumer,
                    strategy=strategy,
                    count=self.batch_length,
                    partition_id=partition,
                )
            except IggyError as error:
                if self.group is not None and error.code in _RESYNC_CODES:
                    yield from self._sync(now)
                    break
                raise
            if polled.partition_id == NO_PARTITION:
                yield from self._sync(now)
                break
            if polled.messages:
                self.positions[partition] = polled.messages[-1].offset + 1
                self.empty_rounds = 0
                return polled.messages
        self.empty_rounds += 1
        return []

    def wait_round(self, now: float) -> Step[list[ReceivedMessage] | None]:
        """After an empty round: long-poll the next partition in turn. The messages it
        brought, ``[]`` when the node waited and none came (poll again at once), or None
        when nothing waited (long polls off or refused): the caller backs off
        (``idle_delay_s``)."""
        if not self.long_poll or not self.assigned:
            return None
        wait = self._long_poll_wait_s(now)
        if wait < LONG_POLL_WAIT_S_MIN:
            return None
        partition = self.assigned[self._turn % len(self.assigned)]
        self._turn += 1
        position = self.positions.get(partition)
        strategy = self.start if position is None else PollingStrategy.offset(position)
        try:
            polled = yield from self.core.long_poll_messages(
                self.stream_id,
                self.topic_id,
                consumer=self.consumer,
                strategy=strategy,
                count=self.batch_length,
                partition_id=partition,
                max_wait_s=wait,
            )
        except IggyError as error:
            if error.code == IggyErrorCode.INVALID_COMMAND:
                self.long_poll = False  # a server without long polls (Iggy's)
                return None
            if error.code == IggyErrorCode.FEATURE_UNAVAILABLE:
                return None  # the node holds as many waiting polls as it may
            if self.group is not None and error.code in _RESYNC_CODES:
                yield from self._sync(now)
                return None
            raise
        if polled.messages:
            self.positions[partition] = polled.messages[-1].offset + 1
            self.empty_rounds = 0
            return polled.messages
        return []

    def _long_poll_wait_s(self, now: float) -> float:
        """How long the next long poll may wait: until the next group sync or commit
        falls due, and no longer than ``poll_interval_max_s`` when other partitions
        wait to be polled."""
        wait = self.long_poll_wait_s
        if len(self.assigned) > 1:
            wait = min(wait, self.poll_interval_max_s)
        if self.group is not None:
            wait = min(wait, self._last_sync_at + self.sync_interval_s - now)
        if self.auto_commit.mode == "interval" and self.dirty:
            wait = min(wait, self._last_commit_at + self.auto_commit.interval_s - now)
        return wait

    def idle_delay_s(self) -> float:
        """How long to wait after an empty round."""
        exponent = min(max(0, self.empty_rounds - 1), 30)
        return min(self.poll_interval_max_s, self.poll_interval_min_s * (1 << exponent))

    # --- offsets ---------------------------------------------------------------------------

    def ack(self, message: ReceivedMessage) -> None:
        """The caller is done with ``message``."""
        partition = message.partition_id
        if message.offset > self.consumed.get(partition, -1):
            self.consumed[partition] = message.offset

    @property
    def dirty(self) -> bool:
        """Whether some consumed offset is not committed."""
        return any(self.committed.get(p) != o for p, o in self.consumed.items())

    def commit_due(self, now: float, *, batch_done: bool) -> bool:
        """Whether the policy wants a commit now."""
        mode = self.auto_commit.mode
        if mode == "disabled" or not self.dirty:
            return False
        if mode == "after_batch":
            return batch_done
        return now - self._last_commit_at >= self.auto_commit.interval_s

    def commit(self, now: float) -> Step[int]:
        """Store every consumed, uncommitted offset; returns how many were stored.

        Offsets of partitions this member lost are dropped if the server refuses them.
        """
        self._last_commit_at = now
        stored = 0
        for partition, offset in sorted(self.consumed.items()):
            if self.committed.get(partition) == offset:
                continue
            try:
                yield from self.core.store_consumer_offset(
                    self.consumer, self.stream_id, self.topic_id, offset, partition
                )
            except IggyError as error:
                if self.group is not None and partition not in self.assigned:
                    del self.consumed[partition]
                    continue
                if self.group is not None and error.code in _RESYNC_CODES:
                    continue
                raise
            self.committed[partition] = offset
            stored += 1
        return stored

    def close(self, now: float, *, commit: bool) -> Step[None]:
        """Commit (unless disabled or ``commit`` is false) and leave the group."""
        failure: IggyError | None = None
        if commit and self.auto_commit.mode != "disabled" and self.dirty:
            try:
                yield from self.commit(now)
            except IggyError as error:
                failure = error
        if self.group is not None and self.joined:
            self.joined = False
            with contextlib.suppress(IggyError):
                yield from self.core.leave_consumer_group(self.stream_id, self.topic_id, self.group)
        if failure is not None:
            raise failure
