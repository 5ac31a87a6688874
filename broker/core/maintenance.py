"""The node's own requests: the root user, purges, auto-commits, expiry and retention.

Purpose: besides answering clients, a node proposes a few requests of its own through its
system client (``broker.core.system``): the root user when a new cluster has none, the
truncation of a partition whose purge is committed, the consumer offsets that auto-commit
polls store, the removal of expired personal access tokens, and the retention of a
partition whose oldest segments expired or overflow its topic's size. When each is due,
and which of several waiting auto-commits goes next, are decisions a test must be able
to replay; the runtime only runs the system client's requests they name.

Invariants:

1. The root user is proposed only by the metadata group's primary, only while the
   committed metadata holds no user, and by one proposal at a time.
2. A partition whose committed purge generation is ahead of its state is truncated by its
   primary, one truncation at a time per partition; it stops being watched once its state
   caught up (on any replica) or it was deleted. Only partitions a purge was committed for
   are watched, so idle partitions cost the maintenance pass nothing.
3. Auto-commits of one partition are stored one request at a time, in the order their
   consumers first waited; a consumer that polls again before its offset was stored has
   only its newest offset stored (a poll never waits for its auto-commit).
4. Expired personal access tokens are removed by the metadata group's primary, through
   one replicated ``ExpireTokens`` at a time, once the earliest committed expiry has
   passed at the ``now`` the driver reads; the op removes what expired at its own
   timestamp, so every replica removes the same tokens.
5. Retention is looked at once every ``interval_us`` for every partition group hosted
   here, by the group's primary only, and proposed (``broker.core.retention``) one
   proposal at a time per partition. A look that finds the group's journal busy (a
   truncation, a checkpoint or a deletion in a worker thread) or still opening waits
   for the next pass instead of the next interval; a group that is gone, or whose
   replica here is a backup, is not looked at until the next interval.
6. Pure: the driver says what the replicas and the metadata hold and what time it is, and
   runs what it is told.

Theory of operation: the runtime's maintenance pass calls :func:`root_user_due`,
:func:`tokens_expiry_due` and ``PurgesDue.due`` every ``MAINTENANCE_INTERVAL_S`` and starts
a task for each answer; a task ends with ``PurgesDue.finished``. The same pass calls
``RetentionsDue.due`` (between intervals it touches only the groups still owed a look),
decides for each group it names whether an offset is due (``broker.core.retention``), and
for each that has one calls ``RetentionsDue.proposing`` and starts a proposal task, which
ends with ``RetentionsDue.finished``. An auto-commit poll calls ``AutoCommits.add``; when
it says so, the driver starts the partition's runner, which stores ``AutoCommits.next``
until it returns None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from broker.state.metadata import MetadataState, PartitionRef

Item = TypeVar("Item")


def root_user_due(state: MetadataState, *, is_primary: bool, bootstrapping: bool) -> bool:
    """Whether this node should propose the root user now (invariant 1)."""
    return is_primary and not bootstrapping and state.root_user_id is None and not state.users()


def tokens_expiry_due(
    state: MetadataState, now_us: int, *, is_primary: bool, expiring: bool
) -> bool:
    """Whether this node should propose ``ExpireTokens`` now (invariant 4): it is the
    primary, none is in flight, and a committed token has expired at ``now_us``. O(1):
    the state keeps its earliest expiry."""
    expiry = state.token_expiry_min_us
    return is_primary and not expiring and expiry is not None and expiry <= now_us


@dataclass(frozen=True, slots=True)
class PurgeView:
    """What the driver knows of one watched partition group on this node."""

    applied_generation: int | None
    """The purge generation its state has applied; None while it is still opening."""
    is_primary: bool


class PurgesDue:
    """The partition groups a committed purge may still have to truncate (invariant 2)."""

    __slots__ = ("_running", "_watched")

    def __init__(self) -> None:
        self._watched: dict[int, None] = {}
        self._running: set[int] = set()

    def watch(self, group_id: int) -> None:
        """A purge of ``group_id`` was committed (``reconcile``'s ``purge_due``)."""
        self._watched[group_id] = None

    def due(
        self,
        refs: dict[int, PartitionRef],
        view: Callable[[int], PurgeView | None],
    ) -> list[tuple[int, int]]:
        """The (group id, generation) truncations to start now. ``refs`` are the committed
        partitions; ``view`` what this node hosts of a group (None: not hosted)."""
        start: list[tuple[int, int]] = []
        for group_id in list(self._watched):
            ref = refs.get(group_id)
            seen = None if ref is None else view(group_id)
            if ref is None or seen is None:
                del self._watched[group_id]  # deleted since
                continue
            if seen.applied_generation is None:
                continue  # still opening, or failed until its storage opens
            if seen.applied_generation >= ref.purge_generation:
                del self._watched[group_id]
                continue
            if seen.is_primary and group_id not in self._running:
                self._running.add(group_id)
                start.append((group_id, ref.purge_generation))
        return start

    def finished(self, group_id: int) -> None:
        """The truncation of ``group_id`` started by :meth:`due` ended (either way)."""
        self._running.discard(group_id)


@dataclass(frozen=True, slots=True)
class RetentionView:
    """What the driver knows of one partition group hosted here, for a retention look."""

    is_primary: bool
    readable: bool
    """Its state is open and its journal may be read now (not busy in a worker thread)."""


class RetentionsDue:
    """When each hosted partition group is looked at for retention (invariant 5)."""

    __slots__ = ("_interval_us", "_next_us", "_owed", "_running")

    def __init__(self, interval_us: int) -> None:
        assert interval_us >= 1
        self._interval_us = interval_us
        self._next_us: int | None = None
        self._owed: dict[int, None] = {}
        """Groups owed a look this interval, in the order they were listed."""
        self._running: set[int] = set()

    def due(
        self,
        now_us: int,
        hosted: Callable[[], Iterable[int]],
        view: Callable[[int], RetentionView | None],
    ) -> list[int]:
        """The groups to look at now. ``hosted`` lists the partition groups hosted here
        (called once an interval, so a pass between intervals costs nothing per
        partition); ``view`` what this node hosts of one (None: not hosted any more)."""
        if self._next_us is None:
            # The first look comes one interval after the node started, as Iggy's
            # segment cleaner first runs after its interval: not while groups open.
            self._next_us = now_us + self._interval_us
        if now_us >= self._next_us:
            self._next_us = now_us + self._interval_us
            for group_id in sorted(hosted()):
                self._owed[group_id] = None
        look: list[int] = []
        for group_id in list(self._owed):
            seen = view(group_id)
            if seen is not None and seen.is_primary and not seen.readable:
                continue  # its journal is busy or it is opening: the next pass
            del self._owed[group_id]
            if seen is not None and seen.is_primary and group_id not in self._running:
                look.append(group_id)
        return look

    def proposing(self, group_id: int) -> None:
        """A look at ``group_id`` found an offset: the driver proposes it now."""
        assert group_id not in self._running
        self._running.add(group_id)

    def finished(self, group_id: int) -> None:
        """The proposal of ``group_id`` ended (either way)."""
        self._running.discard(group_id)


class AutoCommits(Generic[Item]):
    """The offsets auto-commit polls left to store, per partition group (invariant 3).
    ``Item`` is what the driver stores (its route, offset and user)."""

    __slots__ = ("_pending", "_running")

    def __init__(self) -> None:
        self._pending: dict[int, dict[object, Item]] = {}
        self._running: set[int] = set()

    def add(self, group_id: int, consumer: object, item: Item) -> bool:
        """Keep ``item`` as ``consumer``'s newest offset to store in ``group_id``; True
        when the driver must start the group's runner (none runs)."""
        self._pending.setdefault(group_id, {})[consumer] = item
        if group_id in self._running:
            return False
        self._running.add(group_id)
        return True

    def next(self, group_id: int) -> Item | None:
        """The next offset the group's runner stores, or None: the runner ends."""
        pending = self._pending.get(group_id)
        if not pending:
            self._pending.pop(group_id, None)
            self._running.discard(group_id)
            return None
        consumer = next(iter(pending))
        return pending.pop(consumer)

    def stopped(self, group_id: int) -> None:
        """The group's runner ended early (cancelled, or its group failed): a later
        auto-commit starts a new one. What it had not stored yet stays pending."""
        self._running.discard(group_id)
