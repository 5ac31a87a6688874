"""Whether a replica may serve a read of its group's committed state.

Purpose: polls, stored consumer offsets and metadata reads are answered from a replica's
applied state without a consensus round. That is safe only where the state holds
everything a client may already have been told: the read barrier. The runtime waits
(bounded) until it holds; the simulator refuses with 58 when it does not, and the client
retries. Both ask the same question here.

Invariants:

1. A replica serves reads only in normal status, once it has applied the op its view
   started at (``Replica.read_floor``): a restarted replica, or one that just took part in
   a view change, lacks acknowledged ops until its view's log is committed again.
2. A read that must see op ``op`` (the connection's own last write to the group, or the
   primary's commit for a fresh read) waits until the replica has applied ``op``.
3. Pure: the replica's own properties, nothing else.
"""

from __future__ import annotations

from consensus.replica import Replica


def readable(replica: Replica | None, op: int) -> bool:
    """Whether ``replica`` may serve a read that must see ``op`` (invariants 1 and 2);
    False while its group is still opening (None)."""
    if replica is None:
        return False
    floor = replica.read_floor
    return floor is not None and replica.commit_min >= max(op, floor)
