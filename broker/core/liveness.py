"""Consumer-group revocations and client heartbeats: what a node proposes, and when.

Purpose: two of the node's own requests (``broker.core.maintenance``) depend on what only
this node saw, never on replicated state alone, so their bookkeeping lives here, pure:

- A revoking partition (``broker.state.metadata``, invariant 6) moves to its target once
  every node reported that it served the owner nothing the group's stored offset does not
  cover (``RevocationDrained``), or once it is older than the rebalancing timeout
  (``ExpireRevocations``, Iggy's ``consumer_group.rebalancing_timeout``). What a node
  served is :class:`ServedPolls`; when to report is :class:`Revocations`.
- A client connection that sends nothing (no request, no PING) for 1.2 heartbeat
  intervals while its session is a consumer-group member is evicted with Iggy's reason
  ``StaleClient`` (13), and its session ended through a replicated ``EndSession``, so its
  groups rebalance off it (Iggy's heartbeat verifier: ``[heartbeat] interval``). Which
  connections went stale is :class:`Heartbeats`.

Invariants:

1. A node reports a revocation drained only if, for each poll it served the owner of that
   partition as a group member, the group's stored offset it has applied is at or past
   the last offset served. It never serves the owner that partition again afterwards: the
   metadata it applied already says the partition is revoking, and a poll is judged on
   the metadata applied when it is served.
2. One report per (revocation, node) in flight at a time; one ``ExpireRevocations`` in
   flight at a time, proposed by the metadata group's primary only, once the oldest
   revocation has waited the timeout at the ``now`` the driver passes.
3. At most ``SERVED_MARKS_MAX`` marks are kept; the oldest goes first. A forgotten mark
   can only make a report early, which redelivers what the owner had not committed
   (at-least-once), never loses a message.
4. A connection is stale when the driver's ``now`` is more than ``6/5`` of the heartbeat
   interval past the last frame it received; only a stale connection whose session is a
   group member is evicted (Iggy evicts only those: a stale one holding nothing is left
   to the idle timeout, and looked at again one stale window later, so a pass costs
   only the connections due, as Iggy's verifier looks once an interval). An eviction
   ends the session the connection is bound to, once: a connection that registered it
   forgets it, so its close does not end it again (:func:`stale_members`).
5. Pure: time, the metadata and the stored offsets arrive as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sized
from typing import Final, Generic, TypeVar

from broker.core.connections import ConnectionContext
from broker.state.metadata import ExpireRevocations, RevocationDrained, RevocationInfo

SERVED_MARKS_MAX: Final = 65_536
"""Served-poll marks a node keeps (invariant 3)."""

HEARTBEAT_STALE_NUMERATOR: Final = 6
HEARTBEAT_STALE_DENOMINATOR: Final = 5
"""A connection is stale after ``6/5`` of the heartbeat interval, as Iggy's verifier."""

PartitionKey = tuple[int, int, int, int]
"""``(stream_id, topic_id, group_id, partition_id)`` of a consumer group's partition."""

Key = TypeVar("Key", bound=Hashable)


class ServedPolls:
    """The last offset this node served each member of each group partition."""

    __slots__ = ("_marks",)

    def __init__(self) -> None:
        self._marks: dict[tuple[PartitionKey, int], int] = {}

    def __len__(self) -> int:
        return len(self._marks)

    def served(self, partition: PartitionKey, session: int, last_offset: int) -> None:
        """This node answered ``session``'s group poll of ``partition`` with messages up
        to ``last_offset``."""
        key = (partition, session)
        previous = self._marks.pop(key, None)
        self._marks[key] = last_offset if previous is None else max(previous, last_offset)
        while len(self._marks) > SERVED_MARKS_MAX:
            del self._marks[next(iter(self._marks))]

    def last_served(self, partition: PartitionKey, session: int) -> int | None:
        return self._marks.get((partition, session))

    def drained(self, partition: PartitionKey, session: int, stored: int | None) -> bool:
        """Whether everything served to ``session`` of ``partition`` here is covered by
        the group's stored offset ``stored`` (None: none stored)."""
        mark = self._marks.get((partition, session))
        return mark is None or (stored is not None and stored >= mark)

    def forget(self, partition: PartitionKey, session: int) -> None:
        self._marks.pop((partition, session), None)


def revocation_key(revocation: RevocationInfo) -> PartitionKey:
    return (
        revocation.stream_id,
        revocation.topic_id,
        revocation.group_id,
        revocation.partition_id,
    )


class Revocations:
    """Which revocation reports and expiries this node proposes now (invariants 1, 2)."""

    __slots__ = ("_expiring", "_node", "_nodes", "_reporting", "_timeout_us")

    def __init__(self, node: int, nodes: int, timeout_us: int) -> None:
        assert 0 <= node < nodes and timeout_us >= 1
        self._node = node
        self._nodes = nodes
        self._timeout_us = timeout_us
        self._reporting: set[tuple[PartitionKey, int]] = set()
        self._expiring = False

    def due(
        self,
        revocations: Iterable[RevocationInfo],
        served: ServedPolls,
        stored: Callable[[RevocationInfo], tuple[bool, int | None]],
        now_us: int,
        *,
        is_primary: bool,
    ) -> list[RevocationDrained | ExpireRevocations]:
        """The commands to propose now. ``stored`` gives ``(known, offset)``: the group's
        stored offset of a revoking partition as this node applied it (None: none
        stored), with ``known`` False when this node cannot tell yet (its partition group
        is still opening)."""
        due: list[RevocationDrained | ExpireRevocations] = []
        expire = False
        for revocation in revocations:
            if revocation.created_at_us + self._timeout_us <= now_us:
                expire = True
            if self._node in revocation.drained:
                continue
            key = (revocation_key(revocation), revocation.source)
            if key in self._reporting:
                continue
            known, offset = stored(revocation)
            if not known:
                continue
            if not served.drained(key[0], revocation.source, offset):
                continue
            self._reporting.add(key)
            due.append(
                RevocationDrained(
                    revocation.stream_id,
                    revocation.topic_id,
                    revocation.group_id,
                    revocation.partition_id,
                    revocation.source,
                    self._node,
                    self._nodes,
                )
            )
        if expire and is_primary and not self._expiring:
            self._expiring = True
            due.append(ExpireRevocations(self._timeout_us))
        return due

    def finished(self, command: RevocationDrained | ExpireRevocations) -> None:
        """A command :meth:`due` named was answered (either way): a report that did not
        take is made again at a later pass, if still due."""
        if isinstance(command, ExpireRevocations):
            self._expiring = False
            return
        key = (
            (command.stream, command.topic, command.group, command.partition_id),
            command.session,
        )
        self._reporting.discard(key)


class Heartbeats(Generic[Key]):
    """When each connection last sent a frame, and which went stale (invariant 4)."""

    __slots__ = ("_heard", "_stale_after_us")

    def __init__(self, interval_us: int) -> None:
        assert interval_us >= 1
        self._stale_after_us = (
            interval_us * HEARTBEAT_STALE_NUMERATOR // HEARTBEAT_STALE_DENOMINATOR
        )
        # Ordered by last frame, oldest first: a frame moves its connection to the end.
        self._heard: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._heard)

    def heard(self, key: Key, now_us: int) -> None:
        """A frame arrived on ``key``'s connection at ``now_us``."""
        self._heard.pop(key, None)
        self._heard[key] = now_us

    def closed(self, key: Key) -> None:
        self._heard.pop(key, None)

    def last_heard(self, key: Key) -> int | None:
        """When ``key``'s connection last sent a frame (None: not tracked now)."""
        return self._heard.get(key)

    def stale(self, now_us: int, is_member: Callable[[Key], bool]) -> list[Key]:
        """The connections to evict now: silent for longer than the stale window and
        acting for a consumer-group member. They are forgotten (evicted once)."""
        evict: list[Key] = []
        looked: list[Key] = []
        for key, heard in self._heard.items():
            if now_us - heard <= self._stale_after_us:
                break  # the rest were heard later
            looked.append(key)
        for key in looked:
            del self._heard[key]
            if is_member(key):
                evict.append(key)
            else:
                # Looked at again one stale window from now, not on every pass: a silent
                # connection that joins a group meanwhile goes within 2.4 intervals.
                self._heard[key] = now_us
        return evict


def stale_members(
    heartbeats: Heartbeats[Key],
    now_us: int,
    context_of: Callable[[Key], ConnectionContext],
    memberships: Callable[[int], Sized],
) -> list[tuple[Key, int]]:
    """The connections to evict now, each with the session its eviction ends (invariant 4).

    A connection is a member as Iggy judges it: by the session it logged in to
    (``bound_session``), so one that only acts for another session (attached) is not.
    ``memberships`` gives a session's consumer-group memberships (in the metadata the node
    applied). A connection that registered the session it is evicted for forgets it here,
    so closing it afterwards does not end the session a second time.
    """

    def is_member(key: Key) -> bool:
        session = context_of(key).bound_session
        return bool(session and memberships(session))

    evicted: list[tuple[Key, int]] = []
    for key in heartbeats.stale(now_us, is_member):
        context = context_of(key)
        session = context.bound_session
        if context.registered_session == session:
            context.registered_session = 0
        evicted.append((key, session))
    return evicted
