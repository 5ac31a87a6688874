"""Bounds, quorums and timeouts of a replica: every limit has a name and lives here.

Timeouts are counted in ticks (10 ms in production). The timeouts that decide *who acts
first* (a backup giving up on its primary, a view change giving up on its new primary)
get random jitter from the replica's injected PRNG, so replicas do not collide in lock step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

#: The largest group this code supports (a replica index fits a u8 on the wire).
REPLICAS_MAX: Final = 32
#: Prepares in flight (prepared, not committed) at the primary. It also bounds how far the
#: log head can be above the commit number, hence the size of a view-change suffix.
PIPELINE_PREPARES_MAX: Final = 8
#: Client table entries per group; the least recently committed client is evicted.
CLIENTS_MAX: Final = 64
#: Ops asked for in one RequestPrepares (each answer is one Prepare message).
REPAIR_CHUNK_MAX: Final = 16
#: A replica more than this many ops behind the commit catches up by state transfer (in a
#: group that allows it; see ``ReplicaConfig.state_transfer``).
REPAIR_OPS_MAX: Final = 256
#: Repair rounds without progress before falling back to state transfer (or, where state
#: transfer is off, before asking the primary again).
REPAIR_ATTEMPTS_MAX: Final = 8
#: Ops between checkpoints (a snapshot plus a superblock write); None disables them.
CHECKPOINT_INTERVAL_OPS: Final = 1024
#: Bytes of snapshot per SnapshotChunk.
SNAPSHOT_CHUNK_BYTES: Final = 256 * 1024
#: RequestStartView attempts before a replica with a trusted log starts a view change
#: itself (every replica may be restarting at once).
RECOVERING_ATTEMPTS_MAX: Final = 3

#: Primary: retransmit unacknowledged prepares.
PREPARE_TIMEOUT_TICKS: Final = 25
#: Primary: send a Commit heartbeat.
COMMIT_INTERVAL_TICKS: Final = 50
#: Backup: no word from the primary for this long starts a view change.
NORMAL_TIMEOUT_TICKS: Final = 500
#: A view change that has not completed in this long moves on to the next view.
VIEW_CHANGE_TIMEOUT_TICKS: Final = 500
#: Resend StartViewChange / DoViewChange while a view change is in progress.
VIEW_CHANGE_RESEND_TICKS: Final = 50
#: Re-request missing prepares.
REPAIR_TIMEOUT_TICKS: Final = 10
#: Recovering replica: resend RequestStartView.
RECOVERING_TIMEOUT_TICKS: Final = 100
#: State transfer: re-request a chunk (from another peer).
STATE_TRANSFER_TIMEOUT_TICKS: Final = 50


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Tunable bounds and timeouts; the defaults are the named constants above."""

    pipeline_prepares_max: int = PIPELINE_PREPARES_MAX
    clients_max: int = CLIENTS_MAX
    repair_chunk_max: int = REPAIR_CHUNK_MAX
    repair_ops_max: int = REPAIR_OPS_MAX
    repair_attempts_max: int = REPAIR_ATTEMPTS_MAX
    checkpoint_interval_ops: int | None = CHECKPOINT_INTERVAL_OPS
    checkpoint_after_operations: tuple[int, ...] = ()
    """Operations after whose commit the replica checkpoints at once, between its
    interval's checkpoints (checkpoints stay off where ``checkpoint_interval_ops`` is
    None). For an op that lets the host delete log records: the host may delete only
    what a restart no longer replays, the ops up to the checkpoint, so without it the
    deletion would wait up to a whole interval of further ops."""
    snapshot_chunk_bytes: int = SNAPSHOT_CHUNK_BYTES
    recovering_attempts_max: int = RECOVERING_ATTEMPTS_MAX
    prepare_timeout_ticks: int = PREPARE_TIMEOUT_TICKS
    commit_interval_ticks: int = COMMIT_INTERVAL_TICKS
    normal_timeout_ticks: int = NORMAL_TIMEOUT_TICKS
    view_change_timeout_ticks: int = VIEW_CHANGE_TIMEOUT_TICKS
    view_change_resend_ticks: int = VIEW_CHANGE_RESEND_TICKS
    repair_timeout_ticks: int = REPAIR_TIMEOUT_TICKS
    recovering_timeout_ticks: int = RECOVERING_TIMEOUT_TICKS
    state_transfer_timeout_ticks: int = STATE_TRANSFER_TIMEOUT_TICKS
    state_transfer: bool = True
    """Whether a replica far behind may jump to a peer's snapshot. False for a group whose
    log *is* its data (a partition: the journal is the message log, and a snapshot holds
    only offsets and the client table): jumping would leave a hole of acknowledged
    messages in this replica's log. Such a replica repairs every op instead, from the
    primary, which vouches for ops the replica has no header of (``RepairPrepare``)."""

    def __post_init__(self) -> None:
        # The view-change suffix must cover the whole pipeline plus one anchor op.
        assert 1 <= self.pipeline_prepares_max < 127
        assert self.clients_max >= 1
        assert 1 <= self.repair_chunk_max <= self.repair_ops_max
        assert self.repair_ops_max > self.pipeline_prepares_max
        assert self.checkpoint_interval_ops is None or self.checkpoint_interval_ops >= 1
        assert self.snapshot_chunk_bytes >= 1


def quorum_replication(replica_count: int) -> int:
    """Acks (the primary's own included) that make an op committed: a majority."""
    assert 1 <= replica_count <= REPLICAS_MAX
    return replica_count // 2 + 1


def quorum_view_change(replica_count: int) -> int:
    """StartViewChange / DoViewChange votes that start a view: a majority, so that every
    view-change quorum intersects every replication quorum (VSR Revisited §8.1)."""
    assert 1 <= replica_count <= REPLICAS_MAX
    return replica_count // 2 + 1


def quorum_nack(replica_count: int) -> int:
    """Nacks that prove an op never committed: so many replicas never acknowledged it that
    fewer than a replication quorum can have."""
    return replica_count - quorum_replication(replica_count) + 1


TICKS_IDLE: Final = 1 << 31
"""What ``Replica.ticks_until_due`` answers when no timeout has anything to do: more ticks
than any host passes in one step."""


class Timeout:
    """A countdown in ticks; ``tick`` returns True on the tick it fires, then it rearms."""

    def __init__(self, name: str, after_ticks: int, *, jitter: bool = False) -> None:
        assert after_ticks >= 1
        self.name = name
        self.after_ticks = after_ticks
        self.jitter = jitter
        self.ticks_left = after_ticks

    def reset(self, prng: random.Random) -> None:
        """Start counting again from the full timeout (plus jitter, if any)."""
        extra = prng.randrange(self.after_ticks // 2 + 1) if self.jitter else 0
        self.ticks_left = self.after_ticks + extra

    def elapse(self, ticks: int, prng: random.Random) -> None:
        """Count ``ticks`` down at once, as ``ticks`` calls of ``tick`` would, rearming on
        each firing (the caller drops the firings: it knows they have nothing to do).

        A fixed timeout's rearms are arithmetic. A jittered one draws its jitter at each
        rearm, and draws must keep the order the ticks would make them, so it may fire
        only on the last of the ``ticks``.
        """
        assert ticks >= 0
        if ticks < self.ticks_left:
            self.ticks_left -= ticks
        elif self.jitter:
            assert ticks == self.ticks_left, "a jittered timeout fires once in a pass"
            self.reset(prng)
        else:
            # Fired after ticks_left ticks, then every after_ticks; this many ticks ago last.
            fired_ago = (ticks - self.ticks_left) % self.after_ticks
            self.ticks_left = self.after_ticks - fired_ago

    def tick(self, prng: random.Random) -> bool:
        assert self.ticks_left >= 1
        self.ticks_left -= 1
        if self.ticks_left == 0:
            self.reset(prng)
            return True
        return False
