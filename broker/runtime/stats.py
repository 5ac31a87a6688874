"""Counters of one node: per group, per node, and the derived figures ``stats`` prints.

Purpose: observability with exact meanings. Every counter is a plain integer bumped by the
one task that owns it (a group's counters by its group task, the node's by whoever does
the counted thing), read by anyone between awaits. Nothing here is replicated: counters
describe this process since it started, and restart at zero.

Each field's docstring says what it counts and what it does not; ``docs/operations.md``
repeats them for operators.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from sdk.wire import HEADER_SIZE, Command, Operation

REQUEST_SECONDS_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds of the request latency histogram's buckets, in seconds (+Inf beyond)."""
UNKNOWN_COMMAND: Final = "unknown"
"""The command label of a request whose header names no command this node knows: bad
clients cannot grow the label set."""


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
    view_changes: int = 0
    """Times this replica of the group moved to a higher view after it opened (as a
    participant of a view change or told of the new view). Not counted: the view it
    opened in, and a view change that started but has not yet ended in a new view."""
    state_transfers: int = 0
    """State transfers this replica started (it was too far behind to repair op by op and
    took a peer's checkpoint; metadata group only)."""

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


@dataclass(slots=True)
class LatencyHistogram:
    """Requests of one command: how many, their total time, and how many took at most each
    bound of ``REQUEST_SECONDS_BUCKETS`` (not cumulative; the last slot is +Inf)."""

    count: int = 0
    sum_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(REQUEST_SECONDS_BUCKETS) + 1))

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.sum_s += seconds
        self.buckets[bisect.bisect_left(REQUEST_SECONDS_BUCKETS, seconds)] += 1


@dataclass(slots=True)
class RequestCounters:
    """Client requests answered by this node, by command, and their refusals by code.

    A request counts once it is answered (its reply handed to the connection): from the
    moment its whole frame was read to that moment, whatever the answer. Requests a
    connection answered itself (a frame refused on its header before login) and frames
    that were not requests (the connection was dropped for them) are not counted.
    """

    latency: dict[str, LatencyHistogram] = field(default_factory=dict)
    """By command name (``CommandCode``), or ``UNKNOWN_COMMAND``."""
    refused: dict[int, int] = field(default_factory=dict)
    """Replies with a non-zero status in their header (refused before execution: session,
    permission, admission, transient), by Iggy error code."""
    rejected: dict[int, int] = field(default_factory=dict)
    """Replies whose result section names an error (a business rejection, decided when
    the operation was applied: stream exists, not found...), by Iggy error code."""
    evicted: dict[int, int] = field(default_factory=dict)
    """Eviction frames sent as answers (the session ended), by eviction reason."""

    def observe(self, command: str, seconds: float, parts: list[Any]) -> None:
        """Count one answered request: its command, latency and what its reply says."""
        histogram = self.latency.get(command)
        if histogram is None:
            histogram = self.latency[command] = LatencyHistogram()
        histogram.observe(seconds)
        if not parts:
            return
        head = memoryview(parts[0]).cast("B")
        if len(head) < HEADER_SIZE:
            return
        kind = head[60]
        if kind == Command.EVICTION:
            reason = head[REASON_OFFSET]
            self.evicted[reason] = self.evicted.get(reason, 0) + 1
            return
        if kind != Command.REPLY:
            return
        status = int.from_bytes(head[216:220], "little")
        if status:
            self.refused[status] = self.refused.get(status, 0) + 1
            return
        try:
            operation = Operation(head[208])
        except ValueError:
            return
        size = int.from_bytes(head[48:52], "little")
        # A login's reply is result-framed only when it has a body (``sdk.wire``).
        register = operation is Operation.REGISTER and size > HEADER_SIZE
        if not (operation.is_result_framed or register):
            return
        result = _result_head(parts)
        if len(result) >= 12 and int.from_bytes(result[0:4], "little") > 0:
            code = int.from_bytes(result[8:12], "little")
            self.rejected[code] = self.rejected.get(code, 0) + 1


REASON_OFFSET: Final = 255
"""Where an eviction header keeps its reason (``sdk.wire`` EvictionHeader)."""


def _result_head(parts: list[Any]) -> bytes:
    """The first 12 bytes of a reply's body (its result section's count and first entry),
    wherever the parts put them."""
    wanted = HEADER_SIZE + 12
    head = bytearray()
    for part in parts:
        head += memoryview(part).cast("B")[: wanted - len(head)]
        if len(head) >= wanted:
            break
    return bytes(head[HEADER_SIZE:])
