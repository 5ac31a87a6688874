"""Whether a replica may serve a read of its group's committed state, and the read index.

Purpose: polls, stored consumer offsets and metadata reads are answered from a replica's
applied state without a consensus round. That is safe only where the state holds
everything a client may already have been told: the read barrier. A read that must see
everything the group acknowledged to any client (a fresh read: a stored consumer offset, a
``NEXT`` poll) needs more at a backup, which learns commits late: the commit of its view's
primary, asked over the replica bus (the read index), and proof that no newer view can
have committed anything behind the asker's back. The runtime and the simulator ask the
same questions here and carry out the answers (wait, ask, serve or refuse with 58).

Invariants:

1. A replica serves reads only in normal status, once it has applied the op its view
   started at (``Replica.read_floor``): a restarted replica, or one that just took part in
   a view change, lacks acknowledged ops until its view's log is committed again.
2. A read that must see op ``op`` (the connection's own last write to the group, or the
   primary's commit for a fresh read) waits until the replica has applied ``op``.
3. A read index is decided only once the view's primary named its commit in the asker's
   view and, counting the asker, ``read_index_confirmations`` replicas were in that view
   when they answered an ask sent after the read arrived. A newer view needs
   ``quorum_view_change`` replicas that left the asker's view, so none can have formed
   before the ask, and everything acknowledged before the read is at or below the
   primary's commit. With three replicas the asker and the primary suffice; with five, one
   more backup must answer. The primary itself is no exception: it may have been deposed
   without knowing it (cut off, a newer view formed and acknowledged writes), so for a
   fresh read it asks its backups the same question, with its own commit as the answer.
4. A read index fails as soon as it cannot be decided: the primary is not primary in the
   asker's view, or too many replicas are not in it.
5. Pure: the replica's own properties and the answers the driver hands in, nothing else.
"""

from __future__ import annotations

from typing import Final

from consensus.config import quorum_view_change
from consensus.replica import Replica, Status

READ_WAIT_US: Final = 2_000_000
"""How long a read waits for its barrier (and a read index for its answers) before the
client is told 58 and reads again, elsewhere if it likes."""


def readable(replica: Replica | None, op: int) -> bool:
    """Whether ``replica`` may serve a read that must see ``op`` (invariants 1 and 2);
    False while its group is still opening (None)."""
    if replica is None:
        return False
    floor = replica.read_floor
    return floor is not None and replica.commit_min >= max(op, floor)


def read_index_confirmations(replica_count: int) -> int:
    """Replicas, the asker included, that must be in the asker's view for its read index
    (invariant 3): more than ``replica_count - quorum_view_change(replica_count)``."""
    return replica_count - quorum_view_change(replica_count) + 1


def read_index_answer(replica: Replica | None, view: int) -> tuple[bool, int | None]:
    """What ``replica`` answers a read-index ask made in ``view``: whether it is in normal
    status in that view, and its commit if it is that view's primary."""
    if replica is None or replica.status is not Status.NORMAL or replica.view != view:
        return False, None
    return True, replica.commit_max if replica.is_primary else None


class ReadIndexRound:
    """One replica's read index: the asks it sends and the answers it takes (invariants
    3 and 4). Made by a replica in normal status, backup or primary; ``commit`` is the
    decided read index."""

    __slots__ = (
        "_asker",
        "_commit",
        "_confirmed",
        "_count",
        "_denied",
        "_needed",
        "primary",
        "view",
    )

    def __init__(self, replica: Replica, *, confirmed: bool = True) -> None:
        """A round of ``replica``'s; unless ``confirmed``, the primary's commit alone
        decides it: a hint for a backup to learn a commit early, never a fresh read's
        barrier (a primary's unconfirmed round is its own commit)."""
        assert replica.status is Status.NORMAL
        self.view = replica.view
        self.primary = replica.primary
        self._asker = replica.replica
        self._count = replica.replica_count
        needed = read_index_confirmations(replica.replica_count)
        self._needed = needed if confirmed else min(needed, 2)
        self._confirmed = 1 << replica.replica
        self._denied = 0
        self._commit: int | None = None
        if replica.is_primary:
            self._commit = replica.commit_max  # taken after the read arrived
            if not confirmed:
                self._needed = 1

    def peers(self) -> list[int]:
        """The replicas to ask, in order: the primary (unless it asks: its commit is its
        own), and every other replica when the asker and the primary alone do not
        confirm the view."""
        others = [i for i in range(self._count) if i not in (self._asker, self.primary)]
        if self._asker == self.primary:
            return others if self._needed > 1 else []
        if self._needed <= 2:
            return [self.primary]
        return [self.primary, *others]

    def answered(self, replica: int, in_view: bool, commit: int | None) -> None:
        """Take ``replica``'s answer to this round's ask (a repeated one changes nothing)."""
        bit = 1 << replica
        if not in_view:
            self._denied |= bit
            return
        self._confirmed |= bit
        if replica == self.primary and commit is not None:
            self._commit = commit

    @property
    def commit(self) -> int | None:
        """The read index, once decided: the primary's commit."""
        if self._commit is None or self._confirmed.bit_count() < self._needed:
            return None
        return self._commit

    @property
    def failed(self) -> bool:
        """Whether the round can no longer be decided: the primary is not primary in this
        view, or too few replicas are left that could confirm it."""
        if self._denied >> self.primary & 1:
            return True
        return self._count - self._denied.bit_count() < self._needed
