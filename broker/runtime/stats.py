"""Counters of one node: per group, per node, and the derived figures ``stats`` prints.

Purpose: observability with exact meanings. Every counter is a plain integer bumped by the
one task that owns it (a group's counters by its group task, the node's by whoever does
the counted thing), read by anyone between awaits. Nothing here is replicated: counters
describe this process since it started, and restart at zero.

Each field's docstring says what it counts and what it does not; ``docs/operations.md``
repeats them for operators.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class GroupCounters:
    """One group on this node."""

    prepares: int = 0
    """Prepares appended to this node's journal of the group: as primary (new ops) and as
    backup (replicated ops), repairs included. Not counted: prepares received but not
    appended (duplicates, ops too far ahead)."""
    prepare_bytes: int = 0
    """Bytes of those prepares' bodies (a stamped batch or a CBOR command), headers
    excluded."""
    prepare_messages: int = 0
    """Messages in those prepares (SendMessages batches only; control ops count 0)."""
    commits: int = 0
    """Ops applied to this node's state machine, including ops replayed at startup."""
    commit_rounds: int = 0
    """Replica steps after which the applied op moved: a round commits one op or a run of
    ops at once (a quorum ack covering several prepares commits them together)."""
    syncs: int = 0
    """Journal fsync rounds (group commits) completed; each covers every append made before
    it started, however many. With ``--no-sync`` a round does no fsync but is counted."""
    synced_prepares: int = 0
    """The highest op a completed sync covered (prepares per sync = its growth / syncs)."""
    checkpoints: int = 0
    """Checkpoint snapshots written (every ``CHECKPOINT_INTERVAL_OPS`` applied ops)."""
    records_repaired: int = 0
    """Committed records below the checkpoint written back from a peer's copy after a
    restart found them damaged, or cut from the journal (partition groups only)."""
    bytes_to_replicas: int = 0
    """Bytes of consensus frames of this group handed to the replica bus for other nodes
    (prepares, acks, heartbeats, view-change and repair traffic); zero on one node. Frames
    dropped because a peer is down are still counted."""
    messages_dropped: int = 0
    """Peer messages dropped because the group's inbox was full or it was still opening."""
    disk_full_refusals: int = 0
    """While the node's disk was full (``broker.core.disk``): new messages refused with
    4010 as primary, and, on a nearly exhausted file system, message prepares from peers
    dropped as backup (partition groups only)."""
    segments_deleted: int = 0
    """Journal segments this node deleted because retention, DELETE_SEGMENTS or a purge
    retired every record in them (partition groups only)."""
    bytes_deleted: int = 0
    """Bytes of those segments' logs (their small index files not counted)."""

    def derived(self, uptime_s: float) -> dict[str, float]:
        """Rates and ratios: per second of uptime and per prepare / per sync."""
        prepares = max(1, self.prepares)
        syncs = max(1, self.syncs)
        return {
            "commit_rounds_per_s": self.commit_rounds / max(uptime_s, 1e-9),
            "messages_per_prepare": self.prepare_messages / prepares,
            "bytes_per_prepare": self.prepare_bytes / prepares,
            "prepares_per_sync": self.synced_prepares / syncs if self.syncs else 0.0,
            "messages_per_sync": self.prepare_messages / syncs if self.syncs else 0.0,
        }


@dataclass(slots=True)
class NodeCounters:
    """The node as a whole."""

    connections_accepted: int = 0
    """Client connections accepted since start (refused ones excluded)."""
    connections_refused: int = 0
    """Client connections closed at once: ``connections_max`` were open, or their address
    held ``limits.unauthenticated_connections_per_address_max`` not logged in."""
    connections_dropped: int = 0
    """Connections the node closed for cause: bad frames, timeouts (idle, slow reader or
    writer)."""
    requests: int = 0
    """Client requests read (whole frames), pings and logins included."""
    bytes_received: int = 0
    """Bytes read from client sockets."""
    bytes_sent: int = 0
    """Bytes written to client sockets."""
    password_checks: int = 0
    """scrypt computations run for clients: password checks at login and hashes of new
    passwords (CREATE_USER, CHANGE_PASSWORD); refused logins that never reached the check
    (unknown user, throttled) are not counted."""
    forwarded: int = 0
    """Requests this node forwarded to another node's primary (cluster only)."""
    forwards_held: int = 0
    """Requests for another node's primary that waited for its link to come back."""
    messages_held: int = 0
    """Peer messages that arrived for a group this node had not created yet (a new
    partition whose metadata op it had not applied), held until it had."""
    messages_unhosted: int = 0
    """Peer messages dropped because their group was not created here within the bus's
    wait (or too many were held): a deleted group's late traffic, mostly."""


@dataclass(slots=True)
class StatsReport:
    """What ``viewstream stats`` prints: node counters and every group's counters."""

    node: dict[str, Any]
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)


def group_report(counters: GroupCounters, uptime_s: float) -> dict[str, Any]:
    report: dict[str, Any] = asdict(counters)
    report.update(counters.derived(uptime_s))
    return report
