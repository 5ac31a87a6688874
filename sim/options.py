"""Swarm options: everything about a run that the seed chooses.

Purpose: swarm testing (VOPR's ``options_swarm``): each seed draws its own topology,
workload, fault rates and replica bounds, so a swarm of seeds covers many fault mixes
instead of one average. The draw uses the ``options`` stream only, so the options of a
seed never depend on anything that happens in the run.

Invariants:

1. ``Options.from_seed(seed, faults=...)`` is a pure function of its arguments.
2. Every probability is per tick (or per packet for the network) and lies in [0, 1).
3. With ``faults=False`` every fault rate is zero; network delay and disk latency, which
   are not faults, stay as drawn.

Theory of operation: the run has a *fault phase* of ``ticks_fault`` ticks, in which the
fault rates apply, followed by a *healed phase* of at most ``ticks_heal_max`` ticks, in
which every node runs, partitions are gone, nothing is lost or duplicated and disks are
fast; clients only finish what they started. Timeouts of the replicas are scaled down
from production (10 ms ticks) so one run sees many view changes; their ratios are kept.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from consensus.config import ReplicaConfig
from sim.rng import stream

NODE_COUNTS: Final = (1, 3, 3, 3, 5, 5)
"""Cluster sizes and their weights: three-node clusters are the common case."""
PARTITIONS_MAX: Final = 3
PRODUCERS_MAX: Final = 4
CONSUMERS_MAX: Final = 2
TICKS_FAULT_MIN: Final = 2_000
TICKS_FAULT_MAX: Final = 5_000
TICKS_HEAL_MAX: Final = 6_000
"""The liveness bound: a healed cluster must finish every request within this many ticks."""


@dataclass(frozen=True, slots=True)
class NetworkOptions:
    """Per-packet behaviour of the simulated network (replica links and client links)."""

    delay_min_ticks: int
    delay_mean_ticks: float
    loss: float
    duplicate: float


PARTITION_MODES: Final = ("isolate", "isolate-primary", "split", "asymmetric")
"""Every shape a network partition takes (``sim.faults``)."""


@dataclass(frozen=True, slots=True)
class FaultOptions:
    """Per-tick fault rates of the fault phase."""

    #: A node crashes (process or power).
    crash: float
    #: Of the crashes, how many lose power: unsynced writes are lost, the last one torn.
    power_loss_ratio: float
    #: Shortest time a crashed node stays down, and the rate it restarts after that.
    down_ticks_min: int
    restart: float
    #: Allow more than f nodes down at once (a correlated failure: a whole rack).
    correlated: bool
    #: Every node fails at once: a power outage in ``persisted`` runs (nothing acked is
    #: lost), a crash of every process in ``replicated`` runs (page caches survive).
    outage: float
    #: A network partition starts (when none is in place), and how long it lasts.
    partition: float
    partition_ticks_max: int
    #: Corrupt a record of a down node's journal (a latent sector error found at restart).
    corruption: float
    #: A node's disk becomes slow for a while (syncs and writes take longer).
    slow_disk: float
    #: The shapes a partition takes, drawn evenly (``sim.faults``). Not drawn per seed.
    partition_modes: tuple[str, ...] = PARTITION_MODES
    #: Of the isolate-primary partitions, the share that flip when they heal: the new
    #: primary is cut off at once. Not drawn per seed.
    flip: float = 0.5


@dataclass(frozen=True, slots=True)
class DiskOptions:
    """Latency of journal writes and syncs, in ticks (a slow disk multiplies them)."""

    write_ticks_max: int
    sync_ticks_max: int
    slow_factor: int
    slow_ticks_max: int


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    producers: int
    consumers: int
    batches_per_producer: int
    messages_per_batch_max: int
    streams_per_client_max: int
    #: Ticks a client waits for a reply before it retries (same client id and request).
    request_timeout_ticks: int
    #: How many producers and consumers number their partition requests as some Iggy
    #: clients do: every send and offset store under the client's current request number,
    #: never advanced (``sim.client``, invariant 4).
    number_reusers: int = 0
    #: The share of a producer's acknowledged sends it reads back on the connection that
    #: acknowledged them (``sim.client``; the ``read-your-writes`` checker). Not drawn.
    read_back_share: float = 0.3
    #: The share of a consumer's polls sent as long polls (``sdk.wire.LONG_POLL_CODE``),
    #: each waiting up to ``LONG_POLL_WAIT_TICKS_MAX`` ticks on the node. Not drawn.
    long_poll_share: float = 0.3
    #: The share of writes sent to a node drawn at random rather than to the known
    #: primary, as a client behind a load balancer sends them: a backup forwards them.
    #: Not drawn.
    any_node_writes: float = 0.2
    #: How many topics the operator creates, grows by a partition, shrinks and deletes
    #: while the others work (``sim.client``; the ``hosting`` and ``deleted`` checkers).
    #: Not drawn.
    topic_churns: int = 3
    #: The chance that a producer or consumer, between two operations, closes its
    #: connection to a node drawn at random (the node ends the session that connection
    #: registered). Not drawn.
    connection_closes: float = 0.03
    #: The chance that a producer or consumer, between two operations, logs out (and then
    #: logs in again). Not drawn.
    logouts: float = 0.01
    #: How often a partition's primary looks at retention (``retention_interval_s``).
    retention_interval_ticks: int = 100
    #: The workload topic's ``message_expiry`` in ticks of simulated time, and its
    #: ``max_topic_size`` in bytes; None: the server default (none).
    message_expiry_ticks: int | None = None
    max_topic_size_bytes: int | None = None
    #: How many times the operator, after its churn, deletes the oldest segments of a
    #: partition of the workload topic (DELETE_SEGMENTS) or purges it (PURGE_TOPIC), a
    #: few seconds apart (``sim.client``).
    lifecycle_ops: int = 0


@dataclass(frozen=True, slots=True)
class Options:
    """Everything a seed decides about a run."""

    seed: int
    faults_enabled: bool
    node_count: int
    partition_count: int
    #: Partition groups ack after a quorum synced (``persisted``) or wrote (``replicated``).
    persisted: bool
    ticks_fault: int
    ticks_heal_max: int
    network: NetworkOptions
    faults: FaultOptions
    disk: DiskOptions
    workload: WorkloadOptions
    replica: ReplicaConfig
    #: The nodes' heartbeat interval (``[heartbeat] interval``) in ticks, None: heartbeats
    #: off. A node evicts a consumer-group member's connection that sent nothing for 6/5
    #: of it and ends its session (``broker.core.liveness``). The workload's clients send
    #: no PING: they are clients without a heartbeat, so a member's connection to a node
    #: it has no reason to talk to goes stale, as a paused or non-pinging client's would.
    heartbeat_interval_ticks: int | None = None
    #: Step a replica on a tick only when a timeout with something to do is due (or
    #: before another event), passing the ticks before it in one ``Ticked(count)``, as
    #: the runtime does.
    #: Not drawn from the seed and left out of the trace: a run must be the same, packet
    #: for packet, either way (``tests/sim/test_lazy_ticks.py``).
    lazy_ticks: bool = dataclasses.field(default=False, repr=False, compare=False)

    @property
    def failures_max(self) -> int:
        """f: how many replicas of a group may fail at once without losing it."""
        return (self.node_count - 1) // 2

    @classmethod
    def from_seed(cls, seed: int, *, faults: bool = True) -> Options:
        """The options of run ``seed`` (see the module docstring)."""
        prng = stream(seed, "options")
        node_count = prng.choice(NODE_COUNTS)
        network = NetworkOptions(
            delay_min_ticks=prng.randint(0, 2),
            delay_mean_ticks=prng.uniform(0.5, 8.0),
            loss=prng.choice((0.0, 0.0, 0.01, 0.05, 0.15)),
            duplicate=prng.choice((0.0, 0.01, 0.05)),
        )
        fault_options = FaultOptions(
            crash=prng.choice((0.0, 0.0005, 0.001, 0.003)),
            power_loss_ratio=prng.choice((0.0, 0.5, 1.0)),
            down_ticks_min=prng.randint(10, 200),
            restart=prng.choice((0.005, 0.02, 0.1)),
            correlated=prng.random() < 0.2,
            outage=prng.choice((0.0, 0.0, 0.0003, 0.001)),
            partition=prng.choice((0.0, 0.001, 0.003, 0.01)),
            partition_ticks_max=prng.randint(50, 600),
            corruption=prng.choice((0.0, 0.002, 0.01)),
            slow_disk=prng.choice((0.0, 0.001, 0.005)),
        )
        if not faults:
            network = dataclasses.replace(network, loss=0.0, duplicate=0.0)
            fault_options = dataclasses.replace(
                fault_options,
                crash=0.0,
                outage=0.0,
                partition=0.0,
                corruption=0.0,
                slow_disk=0.0,
            )
        disk = DiskOptions(
            write_ticks_max=prng.randint(0, 3),
            sync_ticks_max=prng.randint(0, 8),
            slow_factor=prng.randint(5, 40),
            slow_ticks_max=prng.randint(50, 400),
        )
        workload = WorkloadOptions(
            producers=prng.randint(1, PRODUCERS_MAX),
            consumers=prng.randint(0, CONSUMERS_MAX),
            batches_per_producer=prng.randint(8, 48),
            messages_per_batch_max=prng.randint(1, 5),
            streams_per_client_max=prng.randint(0, 3),
            request_timeout_ticks=prng.randint(60, 200),
        )
        pipeline = prng.choice((1, 2, 4, 8))
        replica = ReplicaConfig(
            pipeline_prepares_max=pipeline,
            checkpoint_interval_ops=prng.choice((None, 8, 16, 64)),
            repair_ops_max=prng.choice((16, 64, 256)),
            normal_timeout_ticks=prng.randint(80, 160),
            view_change_timeout_ticks=prng.randint(100, 200),
            view_change_resend_ticks=prng.randint(15, 30),
            prepare_timeout_ticks=prng.randint(8, 16),
            commit_interval_ticks=prng.randint(10, 30),
            recovering_timeout_ticks=prng.randint(20, 50),
            state_transfer_timeout_ticks=prng.randint(20, 50),
            repair_timeout_ticks=prng.randint(4, 10),
        )
        options = cls(
            seed=seed,
            faults_enabled=faults,
            node_count=node_count,
            partition_count=prng.randint(1, PARTITIONS_MAX),
            persisted=prng.random() < 0.5,
            ticks_fault=prng.randint(TICKS_FAULT_MIN, TICKS_FAULT_MAX),
            ticks_heal_max=TICKS_HEAL_MAX,
            network=network,
            faults=fault_options,
            disk=disk,
            workload=workload,
            replica=replica,
        )
        # Drawn last, so every other option of a seed stays what it was before it existed.
        clients = workload.producers + workload.consumers
        reusers = prng.randint(1, clients) if prng.random() < 0.5 else 0
        # Retention and purge, drawn after everything else for the same reason.
        lifecycle = dataclasses.replace(
            workload,
            number_reusers=reusers,
            retention_interval_ticks=prng.randint(50, 300),
            message_expiry_ticks=prng.choice((None, 300, 1_000, 3_000)),
            max_topic_size_bytes=prng.choice((None, None, 48 * 1024, 96 * 1024)),
            lifecycle_ops=prng.randint(0, 4),
        )
        # Heartbeats, drawn after everything else for the same reason.
        heartbeat = prng.choice((None, 150, 300, 600, 1_500))
        return dataclasses.replace(options, workload=lifecycle, heartbeat_interval_ticks=heartbeat)

    def describe(self) -> list[str]:
        """One line per option group, for the run summary."""
        return [
            f"nodes={self.node_count} partitions={self.partition_count} "
            f"durability={'persisted' if self.persisted else 'replicated'} "
            f"faults={'on' if self.faults_enabled else 'off'} "
            f"ticks_fault={self.ticks_fault} heartbeat={self.heartbeat_interval_ticks}",
            f"network: {_fields(self.network)}",
            f"faults: {_fields(self.faults)}",
            f"disk: {_fields(self.disk)}",
            f"workload: {_fields(self.workload)}",
            f"replica: pipeline={self.replica.pipeline_prepares_max} "
            f"checkpoint={self.replica.checkpoint_interval_ops} "
            f"repair_ops_max={self.replica.repair_ops_max} "
            f"normal_timeout={self.replica.normal_timeout_ticks}",
        ]


def _fields(value: object) -> str:
    parts = []
    for field in dataclasses.fields(value):  # type: ignore[arg-type]
        item = getattr(value, field.name)
        parts.append(
            f"{field.name}={item:.3g}" if isinstance(item, float) else f"{field.name}={item}"
        )
    return " ".join(parts)
