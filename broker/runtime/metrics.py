"""Prometheus metrics of a running node: its counters in the Prometheus text format.

Purpose: let Prometheus scrape what ``viewstream stats`` shows (``broker.runtime.stats``)
plus the request latencies and refusals the node counts as it answers. The HTTP route
``GET /metrics`` serves :func:`render_metrics`; nothing here opens a socket.

Invariants:

1. Nothing is updated per event for metrics' sake: the node's own counters (plain
   integers owned by the task that bumps them) are read at scrape time by a custom
   collector, so a scrape costs O(groups + commands + error codes) and an idle node pays
   nothing between scrapes.
2. Names follow Prometheus conventions (``viewstream_`` prefix, ``_total`` for counters,
   ``_bytes`` and ``_seconds`` units), and each HELP text says what the series counts and
   what it does not; ``docs/operations.md`` repeats them (a test checks every name is
   there).
3. Every series describes this process since it started; counters restart at zero with
   it (Prometheus's ``rate`` handles the reset). Nothing here is replicated: each node is
   scraped on its own, and a group's series on three nodes are three replicas' views.
4. Per-group series carry one label, ``group``; ``viewstream_group_info`` says what each
   group is. Label values are bounded: commands are ``CommandCode`` names or ``unknown``, codes
   are the error codes the node itself puts in replies, groups are the groups it hosts.

Theory of operation: one ``CollectorRegistry`` per node (made on first use), holding one
collector that walks ``node.counters``, ``node.requests``, ``node.disk`` and
``node.flusher`` on each ``collect``; ``prometheus_client`` renders the families it
yields. The per-group families, the only part that grows with the node (one line per
group and series), are written by ``group_text`` from ``node.groups`` in the same format.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric

from broker.runtime.stats import REQUEST_SECONDS_BUCKETS, GroupCounters, NodeCounters
from sdk.wire import EvictionReason, IggyErrorCode

if TYPE_CHECKING:
    from broker.runtime.config import Config
    from broker.runtime.disk import DiskGuard
    from broker.runtime.flush import Flusher
    from broker.runtime.group import GroupHost
    from broker.runtime.stats import RequestCounters


class Node(Protocol):
    """What a scrape reads of a node (``broker.runtime.node.Node`` is one). A protocol,
    not the class, so this module does not import the node that serves it."""

    config: Config
    counters: NodeCounters
    requests: RequestCounters
    started_at: float
    groups: dict[int, GroupHost]
    disk: DiskGuard
    flusher: Flusher
    metadata: GroupHost
    connections: int


PREFIX: Final = "viewstream_"
GROUP_LABELS: Final = ("group",)
"""The label of a per-group series: the group id (0: the metadata group). What a group is
(``kind``, and a partition's numeric ``stream``, ``topic`` and ``partition`` ids) is in
``viewstream_group_info``, joined on ``group`` where a query needs it: each series carries
one label, so a scrape of thousands of groups stays cheap (invariant 1)."""
GROUP_INFO_LABELS: Final = ("group", "kind", "stream", "topic", "partition")


@dataclass(frozen=True, slots=True)
class Series:
    """One metric: its name (without ``viewstream_``), type, HELP text and reading."""

    name: str
    kind: str
    """``counter`` or ``gauge``."""
    help: str


@dataclass(frozen=True, slots=True)
class NodeSeries(Series):
    read: Callable[[Node], float]


@dataclass(frozen=True, slots=True)
class GroupSeries(Series):
    read: Callable[[GroupHost, GroupCounters], float]


def _node_counter(field: str) -> Callable[[Node], float]:
    def read(node: Node) -> float:
        value: int = getattr(node.counters, field)
        return value

    assert field in NodeCounters.__dataclass_fields__
    return read


def _group_counter(field: str) -> Callable[[GroupHost, GroupCounters], float]:
    def read(_: GroupHost, counters: GroupCounters) -> float:
        value: int = getattr(counters, field)
        return value

    assert field in GroupCounters.__dataclass_fields__
    return read


def _sessions(node: Node) -> float:
    machine = node.metadata.metadata
    return 0 if machine is None else len(machine.state.sessions())


def _replica_field(name: str) -> Callable[[GroupHost, GroupCounters], float]:
    def read(host: GroupHost, _: GroupCounters) -> float:
        replica = host.replica
        if replica is None:
            return 0
        value: int = getattr(replica, name)
        return value

    return read


def _partition_state(host: GroupHost, name: str) -> float:
    machine = host.partition_machine
    if machine is None:
        return 0
    value: int = getattr(machine.state, name)
    return value


NODE_SERIES: Final = (
    NodeSeries(
        "uptime_seconds",
        "gauge",
        "Seconds since this node process started.",
        lambda node: time.monotonic() - node.started_at,
    ),
    NodeSeries(
        "connections_open",
        "gauge",
        "Client connections (TCP and WebSocket) open now, counted from accept to close, "
        "including ones still in their TLS handshake or WebSocket upgrade.",
        lambda node: node.connections,
    ),
    NodeSeries(
        "connections_accepted_total",
        "counter",
        "Client connections (TCP and WebSocket) accepted. Not counted: connections refused "
        "at accept (viewstream_connections_refused_total).",
        _node_counter("connections_accepted"),
    ),
    NodeSeries(
        "connections_refused_total",
        "counter",
        "Client connections closed as they were accepted: limits.connections_max were "
        "open, the node was stopping, or their address held "
        "limits.unauthenticated_connections_per_address_max connections not logged in.",
        _node_counter("connections_refused"),
    ),
    NodeSeries(
        "connections_dropped_total",
        "counter",
        "Client connections the node closed for cause: a bad frame, a timeout (idle, "
        "login, a stalled frame, a reply not read), a failed TLS handshake or WebSocket "
        "upgrade, a WebSocket protocol violation. Not counted: connections the client "
        "closed.",
        _node_counter("connections_dropped"),
    ),
    NodeSeries(
        "sessions",
        "gauge",
        "Client sessions live in this node's committed metadata (one per login that has "
        "not logged out or been ended), on every node of the cluster, not only this one.",
        _sessions,
    ),
    NodeSeries(
        "requests_read_total",
        "counter",
        "Client request frames handed to the node, pings and logins included. Not "
        "counted: frames refused on their header before login, and frames that were not "
        "requests (their connection was dropped).",
        _node_counter("requests"),
    ),
    NodeSeries(
        "client_received_bytes_total",
        "counter",
        "Bytes of Iggy frames read from client connections (WebSocket: message payload, "
        "not the WebSocket framing; TLS: after decryption).",
        _node_counter("bytes_received"),
    ),
    NodeSeries(
        "client_sent_bytes_total",
        "counter",
        "Bytes of Iggy frames written to client connections (WebSocket: message payload; "
        "TLS: before encryption).",
        _node_counter("bytes_sent"),
    ),
    NodeSeries(
        "password_checks_total",
        "counter",
        "scrypt computations run for clients: password checks at login and hashes of new "
        "passwords. Not counted: logins refused before the check (unknown user, throttled).",
        _node_counter("password_checks"),
    ),
    NodeSeries(
        "requests_forwarded_total",
        "counter",
        "Client requests this node forwarded over the replica bus to the node of their "
        "group's primary (cluster only).",
        _node_counter("forwarded"),
    ),
    NodeSeries(
        "requests_forward_waits_total",
        "counter",
        "Requests for another node's primary that waited for the replica-bus link to it "
        "to come back.",
        _node_counter("forwards_held"),
    ),
    NodeSeries(
        "peer_messages_held_total",
        "counter",
        "Replica-bus messages that arrived for a group this node had not created yet, "
        "held until it had.",
        _node_counter("messages_held"),
    ),
    NodeSeries(
        "peer_messages_unhosted_total",
        "counter",
        "Replica-bus messages dropped because their group was not created here in time "
        "(mostly late traffic of a deleted partition).",
        _node_counter("messages_unhosted"),
    ),
    NodeSeries(
        "groups",
        "gauge",
        "Consensus groups hosted by this node: the metadata group and one per partition.",
        lambda node: len(node.groups),
    ),
    NodeSeries(
        "disk_used_bytes",
        "gauge",
        "Bytes of every file under the data directory (st_size, so sparse files count in "
        "full) at the last walk, plus journal bytes appended since.",
        lambda node: node.disk.usage.used_bytes,
    ),
    NodeSeries(
        "disk_free_bytes",
        "gauge",
        "Bytes free on the data directory's file system for an unprivileged writer at the "
        "last reading, minus journal bytes appended since.",
        lambda node: node.disk.usage.free_bytes,
    ),
    NodeSeries(
        "disk_budget_bytes",
        "gauge",
        "The disk budget in force: most bytes the data directory may hold before the node "
        "refuses new messages (4010), limits.disk_budget_bytes or, unset, what leaves 5% of "
        "the file system free; 0 means no budget (configured 0, or no reading yet).",
        lambda node: node.disk.usage.budget_bytes or 0,
    ),
    NodeSeries(
        "disk_free_min_bytes",
        "gauge",
        "limits.disk_free_min_bytes: free space below which the node refuses new messages "
        "as when over its budget.",
        lambda node: node.config.limits.disk_free_min_bytes,
    ),
    NodeSeries(
        "disk_full",
        "gauge",
        "1 while the node is full (over its disk budget or under its free minimum) and "
        "refuses new messages, else 0.",
        lambda node: 1 if node.disk.full else 0,
    ),
    NodeSeries(
        "flushes_total",
        "counter",
        "Flushes of the data directory's file system (syncfs) completed, each covering the "
        "syncs of two or more partition groups. Not counted: syncs of one group on its own "
        "(they count only in its viewstream_group_syncs_total).",
        lambda node: node.flusher.counters.rounds,
    ),
    NodeSeries(
        "flushed_groups_total",
        "counter",
        "Partition-group syncs those flushes completed (groups per flush = this / "
        "viewstream_flushes_total).",
        lambda node: node.flusher.counters.groups_flushed,
    ),
)

GROUP_SERIES: Final = (
    GroupSeries(
        "group_prepares_total",
        "counter",
        "Prepares appended to this node's journal of the group, as primary (new ops) and "
        "as backup (replicated ops), repairs included. Not counted: prepares received but "
        "not appended (duplicates, ops too far ahead).",
        _group_counter("prepares"),
    ),
    GroupSeries(
        "group_prepare_bytes_total",
        "counter",
        "Bytes of those prepares' bodies (a stamped message batch or a CBOR command), "
        "headers excluded (bytes per prepare = this / viewstream_group_prepares_total).",
        _group_counter("prepare_bytes"),
    ),
    GroupSeries(
        "group_prepare_messages_total",
        "counter",
        "Messages in those prepares: SendMessages batches only, control ops count 0. On a "
        "partition's primary this is the messages it took in; backups count the same "
        "messages again as they replicate them.",
        _group_counter("prepare_messages"),
    ),
    GroupSeries(
        "group_commits_total",
        "counter",
        "Ops applied to this node's state machine of the group, including ops replayed at startup.",
        _group_counter("commits"),
    ),
    GroupSeries(
        "group_commit_rounds_total",
        "counter",
        "Replica steps after which the applied op moved: one round commits one op or a run "
        "of ops at once (ops per round = commits / this).",
        _group_counter("commit_rounds"),
    ),
    GroupSeries(
        "group_syncs_total",
        "counter",
        "Journal sync rounds (group commits) completed; each covers every append made "
        "before it started. With no_sync a round does no fsync but is counted.",
        _group_counter("syncs"),
    ),
    GroupSeries(
        "group_synced_op",
        "gauge",
        "The highest op a completed sync covered (prepares per sync = its growth / the "
        "growth of viewstream_group_syncs_total).",
        _group_counter("synced_prepares"),
    ),
    GroupSeries(
        "group_checkpoints_total",
        "counter",
        "Checkpoint snapshots of the group's state written by this node.",
        _group_counter("checkpoints"),
    ),
    GroupSeries(
        "group_records_repaired_total",
        "counter",
        "Committed records below the checkpoint written back from a peer's copy after a "
        "restart found them damaged, or cut from the journal (partition groups only).",
        _group_counter("records_repaired"),
    ),
    GroupSeries(
        "group_replica_sent_bytes_total",
        "counter",
        "Bytes of this group's consensus frames handed to the replica bus for other nodes "
        "(prepares, acks, heartbeats, view-change and repair traffic), frames dropped "
        "because a peer was down included; 0 on one node.",
        _group_counter("bytes_to_replicas"),
    ),
    GroupSeries(
        "group_peer_messages_dropped_total",
        "counter",
        "Replica-bus messages for this group dropped because its inbox was full or it "
        "was still opening.",
        _group_counter("messages_dropped"),
    ),
    GroupSeries(
        "group_disk_full_refusals_total",
        "counter",
        "While the node's disk was full: new messages refused with 4010 as primary, and "
        "prepares from peers dropped as backup (partition groups only).",
        _group_counter("disk_full_refusals"),
    ),
    GroupSeries(
        "group_view_changes_total",
        "counter",
        "Times this replica moved to a higher view after it opened. Not counted: the view "
        "it opened in, and a view change still in progress.",
        _group_counter("view_changes"),
    ),
    GroupSeries(
        "group_state_transfers_total",
        "counter",
        "State transfers this replica started: too far behind to repair op by op, it took "
        "a peer's checkpoint (metadata group only).",
        _group_counter("state_transfers"),
    ),
    GroupSeries(
        "group_retention_segments_deleted_total",
        "counter",
        "Journal segment files deleted because every record in them was below the "
        "partition's retained start (expiry or size retention, a purge, DELETE_SEGMENTS). "
        "Not counted: the files of a deleted partition.",
        _group_counter("segments_deleted"),
    ),
    GroupSeries(
        "group_current_offset",
        "gauge",
        "A partition's newest committed offset as this node applied it (0 for an empty "
        "partition, as Iggy reports it; 0 for the metadata group). Consumer lag is this "
        "minus a consumer's stored offset.",
        lambda host, _: _partition_state(host, "current_offset"),
    ),
    GroupSeries(
        "group_retained_messages",
        "gauge",
        "Messages of a partition a poll can still return here (from its first retained "
        "offset to its head; purges and retention take messages out). 0 for the metadata "
        "group.",
        lambda host, _: _partition_state(host, "retained_messages"),
    ),
    GroupSeries(
        "group_retained_bytes",
        "gauge",
        "Bytes of a partition's committed batches that hold a retained message (a batch "
        "straddling the retained start counts whole), as GET_STATS adds them up. 0 for the "
        "metadata group.",
        lambda host, _: _partition_state(host, "retained_bytes"),
    ),
    GroupSeries(
        "group_view",
        "gauge",
        "The view this replica of the group is in (0 while the group opens).",
        _replica_field("view"),
    ),
    GroupSeries(
        "group_op",
        "gauge",
        "The highest op in this replica's journal of the group (prepared, not necessarily "
        "committed).",
        _replica_field("op"),
    ),
    GroupSeries(
        "group_commit_op",
        "gauge",
        "The highest op this replica knows committed in the group (applied here or about to be).",
        _replica_field("commit_max"),
    ),
    GroupSeries(
        "group_primary",
        "gauge",
        "1 while this replica is the group's primary in normal status, else 0.",
        lambda host, _: 1 if host.is_primary else 0,
    ),
)

REQUEST_DURATION: Final = Series(
    "request_duration_seconds",
    "histogram",
    "Time from a client request's whole frame being read to its reply being handed to its "
    "connection (not the time to write it), by command: for writes, admission, "
    "replication to a quorum and commit; for reads, the read barrier and the read. Every "
    "answer counts, refusals included. Not counted: frames the connection refused "
    "itself.",
)
REQUESTS_REFUSED: Final = Series(
    "requests_refused_total",
    "counter",
    "Replies with a non-zero status in their header, by Iggy error code and name: refused "
    "before execution (session, permission, admission, TransientNotAccepted 58 during a "
    "view change...). Not counted: business rejections (viewstream_requests_rejected_total).",
)
REQUESTS_REJECTED: Final = Series(
    "requests_rejected_total",
    "counter",
    "Replies whose result section names an error, by Iggy error code and name: rejected "
    "when the operation was applied (stream already exists, not found...). Not counted: "
    "refusals before execution.",
)
EVICTIONS: Final = Series(
    "evictions_total",
    "counter",
    "Eviction frames sent in answer to a request (the client's session ended), by eviction "
    "reason. Not counted: evictions for frames that were not requests (connection dropped).",
)


def _error_name(code: int) -> str:
    try:
        return IggyErrorCode(code).name.lower()
    except ValueError:
        return "unknown"


def _eviction_name(reason: int) -> str:
    try:
        return EvictionReason(reason).name.lower()
    except ValueError:
        return "unknown"


GROUP_INFO: Final = Series(
    "group_info",
    "gauge",
    "1 for each consensus group this node hosts, labelled with what it is: kind "
    "(metadata or partition) and a partition's numeric stream, topic and partition ids "
    "(empty for the metadata group). Join the group_ series on group to break them down.",
)


def _group_labels(host: GroupHost) -> list[str]:
    partition = host.partition
    if partition is None:
        return [str(host.group_id), "metadata", "", "", ""]
    return [
        str(host.group_id),
        "partition",
        str(partition.stream_id),
        str(partition.topic_id),
        str(partition.partition_id),
    ]


def _family(series: Series, labels: tuple[str, ...]) -> CounterMetricFamily | GaugeMetricFamily:
    name = PREFIX + series.name
    if series.kind == "counter":
        return CounterMetricFamily(name, series.help, labels=labels)
    assert series.kind == "gauge"
    return GaugeMetricFamily(name, series.help, labels=labels)


class NodeCollector:
    """Reads one node's counters at scrape time (invariant 1)."""

    def __init__(self, node: Node) -> None:
        self._node = weakref.ref(node)

    def collect(self) -> Iterator[Metric]:
        node = self._node()
        if node is None:
            return
        for series in NODE_SERIES:
            family = _family(series, ())
            family.add_metric([], series.read(node))
            yield family
        yield from self._requests(node)

    def _requests(self, node: Node) -> Iterator[Metric]:
        requests = node.requests
        histogram = HistogramMetricFamily(
            PREFIX + REQUEST_DURATION.name, REQUEST_DURATION.help, labels=("command",)
        )
        bounds = [*(f"{bound:g}" for bound in REQUEST_SECONDS_BUCKETS), "+Inf"]
        for command, latency in sorted(requests.latency.items()):
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(bounds, latency.buckets, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            histogram.add_metric([command], buckets, latency.sum_s)
        yield histogram
        for series, table in (
            (REQUESTS_REFUSED, requests.refused),
            (REQUESTS_REJECTED, requests.rejected),
        ):
            family = _family(series, ("code", "error"))
            for code, count in sorted(table.items()):
                family.add_metric([str(code), _error_name(code)], count)
            yield family
        evictions = _family(EVICTIONS, ("reason",))
        for reason, count in sorted(requests.evicted.items()):
            evictions.add_metric([_eviction_name(reason)], count)
        yield evictions


_REGISTRIES: Final[weakref.WeakKeyDictionary[Node, CollectorRegistry]] = weakref.WeakKeyDictionary()


def registry_of(node: Node) -> CollectorRegistry:
    """``node``'s registry (made on first use, holding its collector)."""
    registry = _REGISTRIES.get(node)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(NodeCollector(node))
        _REGISTRIES[node] = registry
    return registry


def _help_line(name: str, series: Series) -> str:
    text = series.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {text}\n# TYPE {name} {series.kind}\n"


def group_text(node: Node) -> str:
    """The per-group families (``viewstream_group_info`` and ``GROUP_SERIES``) in the
    Prometheus text format.

    Written here rather than through ``prometheus_client``'s generic exposition, whose
    per-sample escaping and validation cost about 12 µs a sample (measured), a quarter of
    a second for 1,000 groups: these lines are all alike, a fixed name, one integer label
    value and a number, so none of that work applies (label values here are decimal ids
    and fixed words, never text that needs escaping).
    """
    hosts = [host for _, host in sorted(node.groups.items())]
    lines: list[str] = []
    name = PREFIX + GROUP_INFO.name
    lines.append(_help_line(name, GROUP_INFO))
    for host in hosts:
        group, kind, stream, topic, partition = _group_labels(host)
        lines.append(
            f'{name}{{group="{group}",kind="{kind}",stream="{stream}",topic="{topic}",'
            f'partition="{partition}"}} 1\n'
        )
    ids = [f'{{group="{host.group_id}"}} ' for host in hosts]
    for series in GROUP_SERIES:
        name = PREFIX + series.name
        lines.append(_help_line(name, series))
        read = series.read
        for host, labels in zip(hosts, ids, strict=True):
            lines.append(f"{name}{labels}{read(host, host.counters)!r}\n")
    return "".join(lines)


def render_metrics(node: Node) -> tuple[bytes, str]:
    """The node's metrics in the Prometheus text format (version 0.0.4): its node-wide
    and request families rendered by ``prometheus_client``, then its per-group families
    (``group_text``).

    Returns:
        The body and its content type, for ``GET /metrics``.
    """
    body = generate_latest(registry_of(node)) + group_text(node).encode()
    return body, CONTENT_TYPE_PLAIN_0_0_4


def metric_help() -> dict[str, str]:
    """Every metric family this module renders, by name, with its HELP text (for the
    docs check)."""
    extra = (GROUP_INFO, REQUEST_DURATION, REQUESTS_REFUSED, REQUESTS_REJECTED, EVICTIONS)
    return {PREFIX + series.name: series.help for series in (*NODE_SERIES, *GROUP_SERIES, *extra)}


def metric_names() -> list[str]:
    """Every metric family name this module renders."""
    return list(metric_help())
