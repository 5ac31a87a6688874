"""A simulated node: one replica of every group, its disks, and the runtime's own handling.

Purpose: host, on one simulated machine, a ``consensus.Replica`` of the metadata group and
of every partition group, each with the real state machine (``MetadataMachine`` or
``PartitionMachine``) and the real journal over a ``MemoryStorage`` (:mod:`sim.disk`);
carry out the replicas' actions with the runtime's own ``broker.core.execution``, doing
only the disk work here (the host contract of ``consensus.protocols``); answer client
requests with the runtime's own request handling (``broker.core.handlers``): each
request is read as its Iggy frame, its flow is stepped here as the runtime awaits it,
and its response frames are read back into the client's reply; and queue, admit and
answer submissions with the runtime's own ``broker.core.groups.GroupRequests``, so a
reply reaches exactly the request it belongs to here as on a real node.

Invariants:

1. Actions of one ``step`` run in order; a ``WriteSuperblock`` is durable before the next
   action; appends are readable at once; ``PrepareWritten`` and ``PrepareSynced`` arrive
   later (disk latency), in append order, and never after a crash.
2. A down node executes nothing, receives nothing and keeps only what its disks hold.
3. Every replica of a node gets its own PRNG stream, renewed at every incarnation, so a
   restart draws a fresh nonce and the draws of one group never shift another's.
4. The observer sees every applied op, every restored snapshot and every step's outcome;
   it only reads.
5. Every client request is answered at most once, by ``GroupRequests``: with its reply,
   a refusal that names the primary of the group's view here, or, after
   ``REQUEST_TIMEOUT_TICKS``, 58 or 59 as the runtime's submitter says. A backup forwards
   it to the node of the view's primary and answers it with that node's outcome
   (``broker.core.forwarding``), or with 59 once its submitter's deadline passed.
6. A flow waiting for a catch-up or a read barrier is resumed once: when the group
   applied what it waits for (a barrier: in normal status, after a decided read index
   when the read is fresh or a backup is behind), or when the round fails or
   ``READ_WAIT_TICKS`` pass; a flow whose submission was answered is resumed after the
   replica step that answered it, never inside it; a crash drops every flow with its
   connection.

Theory of operation: group 0 is the metadata group. After every step that applied
metadata ops (or restored a snapshot), the node reconciles its partition groups with the
applied metadata (``broker.core.reconcile``), as the runtime does: a partition that
appeared gets its group (id ``partition_group_id``), opened over its disk, a fresh one
or, after a restart, the one the node kept; a partition that went has its group stopped,
its waiting requests refused with 58, its tombstone recorded (durable) and its disk
deleted. A restart opens the metadata group first and the partition groups as its
recovered state names them again, but never a tombstoned one (its metadata may be behind
the removal). Frames and forwarded requests for a group the node does not host are
dropped or refused. The node's clock is ``tick * TICK_US``; a primary makes it monotonic.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final, Protocol

from broker.core.commands import (
    Balancer,
)
from broker.core.connections import ConnectionContext, Response
from broker.core.execution import Execution
from broker.core.forwarding import Forwards, forward_target
from broker.core.groups import (
    REQUEST_TIMEOUT_US,
    Forward,
    GroupRequests,
    Outcome,
    Refused,
    RefusedDiskFull,
    Replied,
    SessionLost,
    Submission,
    timed_out,
)
from broker.core.handlers import (
    RULES,
    AwaitMessages,
    CatchUp,
    Effect,
    Flow,
    HashPassword,
    PasswordLogin,
    PurgeApplied,
    ReadBarrier,
    Rules,
    Submit,
    VerifyPassword,
    handle,
    login_user,
)
from broker.core.handlers import Group as CoreGroup
from broker.core.identity import internal_checksum
from broker.core.liveness import Heartbeats, Revocations, ServedPolls, stale_members
from broker.core.long_polls import LongPolls, Refusal, Woken
from broker.core.maintenance import PurgesDue, PurgeView, RetentionsDue, RetentionView
from broker.core.reads import READ_WAIT_US, ReadIndexRound, read_index_answer, readable
from broker.core.reconcile import METADATA_GROUP, reconcile
from broker.core.retention import retention_due, topic_limits
from broker.core.sessions import (
    MetadataView,
    session_to_end,
)
from broker.core.system import SystemClient
from broker.state.codec import encode_command
from broker.state.credentials import hash_password, verify_password
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    EXPIRY_NEVER,
    SIZE_UNLIMITED,
    ConsumerGroupInfo,
    Durability,
    EndSession,
    ExpireRevocations,
    MetadataCommand,
    MetadataState,
    PartitionRef,
    RevocationDrained,
    RevocationInfo,
)
from broker.state.metadata_machine import MetadataMachine, PartitionStats
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import (
    CHECKPOINT_AFTER_OPERATIONS,
    PartitionMachine,
    purge_body,
    retain_body,
)
from broker.state.routing import PartitionRoute
from consensus.config import ReplicaConfig
from consensus.events import (
    Action,
    AppendToJournal,
    ClientError,
    Event,
    PrepareSynced,
    PrepareWritten,
    RepairJournal,
    SyncJournal,
    Ticked,
    TruncateJournal,
    WriteCheckpoint,
    WriteSuperblock,
)
from consensus.messages import Commit, Message, Prepare, encode_message
from consensus.protocols import DurableState, Prepared, RequestBody, joined_body
from consensus.replica import Replica, Status
from journal import SegmentInfo
from sdk import wire
from sdk.wire import Command, EvictionReason
from sdk.wire.codes import CommandCode, IggyErrorCode, Operation
from sim.disk import SEGMENT_SIZE_BYTES, Disk
from sim.network import (
    ClientReply,
    ClientRequest,
    ForwardedOutcome,
    ForwardedRequest,
    Payload,
    ReadIndexAsk,
    ReadIndexReply,
    ReplicaFrame,
)
from sim.options import Options
from sim.rng import stream

TICK_US: Final = 10_000
REBALANCING_TIMEOUT_US: Final = 3_000_000
"""The simulated nodes' ``consumer_group.rebalancing_timeout``: shorter than the runtime's
30 s so that runs see revocations both drained and timed out."""
"""One tick is 10 ms of simulated wall clock, as in production."""
REQUEST_TIMEOUT_TICKS: Final = REQUEST_TIMEOUT_US // TICK_US
"""How long a request waits for its group before it is told 58 or 59, as in production."""
READ_WAIT_TICKS: Final = READ_WAIT_US // TICK_US
"""How long a read waits for its barrier before it is told 58, as in production."""
STREAM_ID: Final = 0
TOPIC_ID: Final = 0
"""The ids of the workload's stream and topic: the operator creates them first."""
SYSTEM_CODE: Final = 0
"""``ClientRequest.code`` of a runtime-internal metadata command (bootstrap only)."""
_ROUTING_STATUSES: Final = frozenset(
    {int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED), int(IggyErrorCode.TRANSIENT_NOT_COMMITTED)}
)
"""Statuses whose reply names the group's view and its primary, for the client to route
by (``broker.core.answers.refused``); other status replies name no one."""


class Observer(Protocol):
    """What the checkers see of a node (read-only hooks)."""

    def on_apply(self, node: int, group: int, prepare: Prepare, reply: bytes) -> None: ...

    def on_restore(self, node: int, group: int) -> None: ...

    def on_retained_start(self, node: int, group: int, op: int, retained_start: int) -> None: ...

    def on_retained_files(
        self, node: int, group: int, replica: Replica, disk: Disk, machine: PartitionMachine
    ) -> None: ...

    def on_step(self, node: int, group: int, replica: Replica) -> None: ...

    def on_hosted(
        self, node: int, metadata_op: int, groups: tuple[int, ...], removed: Container[int]
    ) -> None: ...

    def on_assignments(
        self, node: int, metadata_op: int, groups: tuple[ConsumerGroupInfo, ...]
    ) -> None: ...

    def on_admitted(self, node: int, client_id: int, session: int, metadata_op: int) -> None: ...


StateMachine = MetadataMachine | PartitionMachine


class _Observed:
    """A state machine whose applies and restores the observer sees."""

    def __init__(
        self,
        inner: StateMachine,
        on_apply: Callable[[Prepare, bytes], None],
        on_restore: Callable[[], None],
    ) -> None:
        self.inner = inner
        self._on_apply = on_apply
        self._on_restore = on_restore

    def prepare(
        self, op: int, operation: int, body: RequestBody, timestamp_us: int, frontier: int
    ) -> Prepared:
        return self.inner.prepare(op, operation, body, timestamp_us, frontier)

    def apply(self, prepare: Prepare) -> bytes:
        reply = self.inner.apply(prepare)
        self._on_apply(prepare, reply)
        return reply

    def snapshot(self) -> bytes:
        return self.inner.snapshot()

    def restore(self, snapshot: bytes) -> None:
        self.inner.restore(snapshot)
        self._on_restore()

    def log_op_min(self) -> int | None:
        return self.inner.log_op_min()


@dataclass(slots=True)
class GroupHost:
    """One replica of one group on this node, with its disk and pending disk work."""

    group: int
    disk: Disk
    machine: _Observed
    replica: Replica
    #: (tick due, event) in completion order; writes and syncs complete in append order.
    io: list[tuple[int, Event]] = field(default_factory=list)
    io_tick_last: int = 0
    #: Ticks passed but not yet stepped (``Options.lazy_ticks``): none of them due.
    ticks_owed: int = 0
    #: Its client requests, as the runtime's group host keeps them (``broker.core.groups``).
    requests: GroupRequests = field(default_factory=GroupRequests)
    #: A partition group's deletion of retired journal segments, due at this tick (it
    #: runs beside the replica, as the runtime's in a worker thread); None: none due.
    retain_tick: int | None = None
    #: The retained start the host last sealed the open segment for (a purge).
    retained_start_seen: int = 0

    # What a request's flow reads of it (``broker.core.handlers.Group``), as of the
    # runtime's group host.

    @property
    def group_id(self) -> int:
        return self.group

    @property
    def is_primary(self) -> bool:
        return self.replica.status is Status.NORMAL and self.replica.is_primary

    @property
    def primary_index(self) -> int | None:
        return self.replica.primary if self.replica.status is Status.NORMAL else None

    @property
    def applied_op(self) -> int:
        return self.replica.commit_min

    @property
    def partition_machine(self) -> PartitionMachine | None:
        machine = self.machine.inner
        return machine if isinstance(machine, PartitionMachine) else None


@dataclass(frozen=True, slots=True)
class PartitionCall:
    """A request of the node's own to a partition group, which its primary proposes:
    the truncation a committed purge orders, or a retention (``broker.core.maintenance``)."""

    group: int
    #: A ``TRUNCATE_PARTITION`` body: ``purge_body`` or ``retain_body``.
    body: bytes
    purge: bool


@dataclass(slots=True)
class SystemQueue:
    """The node's own client (``broker.core.system``, as the runtime's) with the commands
    it still has to run: one request at a time; a new client id for every process, drawn
    from the node's stream of that incarnation."""

    client: SystemClient
    #: The commands still to run, in the order they were asked for: metadata commands,
    #: and the node's own partition requests (a purge's truncation, a retention).
    queue: deque[MetadataCommand | PartitionCall] = field(default_factory=deque)
    #: The submission in flight, if any; its command stays first in ``queue``.
    busy: bool = False
    attempts: int = 0

    @property
    def session(self) -> int:
        return self.client.session


@dataclass(slots=True)
class _Flow:
    """A client request's flow at this node (``broker.core.handlers``), and where its
    answer goes; a flow of an earlier incarnation is never resumed."""

    flow: Flow
    source: int
    request: ClientRequest
    incarnation: int


@dataclass(slots=True)
class _Wait:
    """A flow waiting for a catch-up or a read barrier: for normal status (a barrier),
    then for its read index (``round``, when it needs one), then until the replica applied
    ``target``; resumed with False (a barrier) at ``deadline``, as the runtime's wait ends."""

    waiting: _Flow
    effect: CatchUp | ReadBarrier | PurgeApplied
    deadline: int
    round: ReadIndexRound | None = None
    target: int | None = None


class Node:
    """One machine of the cluster; see the module docstring."""

    #: The handling's decision points (``broker.core.handlers.Rules``); a planted node
    #: (``sim.planted``) gets one wrong.
    rules: Rules = RULES

    def __init__(
        self,
        index: int,
        options: Options,
        observer: Observer,
        client_endpoints: dict[int, int],
        replica_class: type[Replica] = Replica,
    ) -> None:
        self.index = index
        self.options = options
        self.observer = observer
        self.client_endpoints = client_endpoints
        self.replica_class = replica_class
        self.alive = True
        self.incarnation = 0
        self.disk_slow_until = 0
        self.outbox: list[tuple[int, Payload]] = []
        self._disk_prng = stream(options.seed, f"disk.latency.{index}")
        #: (deadline tick, submission) in submission order: the node's submitters, each of
        #: which stops waiting at its deadline (``broker.core.groups.timed_out``).
        self._waiting: deque[tuple[int, GroupHost, Submission]] = deque()
        #: Flows waiting here for a catch-up or a read barrier, by read-index token (in
        #: arrival order), and flows whose submission was answered, to resume in order.
        self._waits: dict[int, _Wait] = {}
        self._read_token = 0
        self._ready: deque[tuple[_Flow, Outcome | Woken]] = deque()
        #: Long polls waiting here (``broker.core.long_polls``), and their flows by token.
        self.long_polls = LongPolls()
        self._long_polls: dict[int, _Flow] = {}
        #: Long polls this node answered after a wait (every incarnation).
        self.long_polls_woken = 0
        #: The tick of what the node is doing now: its clock for the flows.
        self._tick = 0
        #: The node's randomness for the flows (salts, tokens), renewed at every restart.
        self._prng = stream(options.seed, f"node.{index}.0")
        self._balancer = Balancer()
        self.forwards = Forwards()
        #: What this node remembers of each client's connection to it (by client id), as
        #: the runtime's connection contexts: gone with the process.
        self.connections: dict[int, ConnectionContext] = {}
        self.system = self._system_client()
        #: What this process served consumer group members, and the revocation reports
        #: in flight (``broker.core.liveness``): gone with the process, as the runtime's.
        self._served = ServedPolls()
        self._revocations = self._revocations_due()
        #: When each client's connection last sent a frame, if heartbeats are on: gone
        #: with the process, as the runtime's.
        self._heartbeats = self._heartbeats_due()
        #: Connections this node evicted as stale group members (every incarnation).
        self.stale_evictions = 0
        #: When the node's own partition requests are due (``broker.core.maintenance``),
        #: as the runtime's maintenance pass keeps them: new with every process.
        self._purges = PurgesDue()
        self._retentions = RetentionsDue(options.workload.retention_interval_ticks * TICK_US)
        #: When a deletion of retired segments completes, and where a crash stops one.
        self._retain_prng = stream(options.seed, f"disk.retention.{index}")
        #: Retentions this node proposed as a primary, segments it deleted, and deletions
        #: a crash stopped between two unlinks (every incarnation).
        self.retentions_proposed = 0
        self.segments_deleted = 0
        self.deletions_crashed = 0
        #: Connections clients closed while this node ran (every incarnation).
        self.connections_closed = 0
        #: Requests this node forwarded to another node's primary (every incarnation).
        self.forwarded_writes = 0
        #: Polls this node's backups served through the read barrier (every incarnation).
        self.backup_polls = 0
        #: Stored offsets this node's backups served through a read index (every
        #: incarnation).
        self.fresh_reads = 0
        #: Every group's disk, by group id: what the node's data directory holds. A
        #: group's disk outlives the process; it goes when the group is removed.
        self.disks: dict[int, Disk] = {
            METADATA_GROUP: Disk(stream(options.seed, f"storage.{index}.0"), log_is_data=False)
        }
        #: The groups the node hosts, by group id: the metadata group, then the partition
        #: groups its committed metadata names, in the order they appeared.
        self.groups: dict[int, GroupHost] = {}
        #: The ref of every hosted partition group, and the group of every partition.
        self._refs: dict[int, PartitionRef] = {}
        self._by_partition: dict[tuple[int, int, int], int] = {}
        #: What a restart read from the disks of partition groups not hosted yet: each is
        #: opened with it once the metadata names its partition again.
        self._recovered: dict[int, tuple[DurableState | None, bytes | None]] = {}
        #: The metadata op the hosted groups were last reconciled with.
        self._reconciled_op = 0
        #: The groups this node removed, recorded before their disks went: durable, as
        #: the runtime's tombstone files (``broker.core.reconcile``, invariant 4).
        self.tombstones: set[int] = set()
        disk = self.disks[METADATA_GROUP]
        self.groups[METADATA_GROUP] = self._host(
            METADATA_GROUP, disk, None, durable=None, checkpoint=None
        )

    # Construction ------------------------------------------------------------------------

    def _revocations_due(self) -> Revocations:
        return Revocations(self.index, self.options.node_count, REBALANCING_TIMEOUT_US)

    def _heartbeats_due(self) -> Heartbeats[int] | None:
        interval = self.options.heartbeat_interval_ticks
        return None if interval is None else Heartbeats(interval * TICK_US)

    def _system_client(self) -> SystemQueue:
        prng = stream(self.options.seed, f"system.{self.index}.{self.incarnation}")
        return SystemQueue(SystemClient(prng.getrandbits(128) | 1))

    def _host(
        self,
        group: int,
        disk: Disk,
        ref: PartitionRef | None,
        *,
        durable: DurableState | None,
        checkpoint: bytes | None,
    ) -> GroupHost:
        inner: StateMachine = (
            MetadataMachine() if ref is None else self._partition_machine(ref, disk)
        )
        node = self.index
        observer = self.observer

        def applied(prepare: Prepare, reply: bytes) -> None:
            observer.on_apply(node, group, prepare, reply)
            if isinstance(inner, PartitionMachine):
                observer.on_retained_start(node, group, prepare.op, inner.state.retained_start)

        machine = _Observed(inner, applied, lambda: observer.on_restore(node, group))
        prng = stream(self.options.seed, f"replica.{node}.{group}.{self.incarnation}")
        # The metadata group is small and rarely written: it always acks synced ops. A
        # partition group uses its topic's durability.
        persisted = ref is None or ref.durability is Durability.PERSISTED
        replica = self._make_replica(group, disk, machine, prng, durable, checkpoint, persisted)
        return GroupHost(group, disk, machine, replica)

    def _partition_machine(self, ref: PartitionRef, disk: Disk) -> PartitionMachine:
        return PartitionMachine(ref.stream_id, ref.topic_id, ref.partition_id, disk)

    def _make_replica(
        self,
        group: int,
        disk: Disk,
        machine: _Observed,
        prng: random.Random,
        durable: DurableState | None,
        checkpoint: bytes | None,
        persisted: bool,
    ) -> Replica:
        config: ReplicaConfig = self.options.replica
        if group != METADATA_GROUP:
            # A partition's log is its messages: never jump over them to a snapshot.
            config = replace(
                config,
                state_transfer=False,
                checkpoint_after_operations=CHECKPOINT_AFTER_OPERATIONS,
            )
        return self.replica_class(
            group,
            self.index,
            self.options.node_count,
            disk,
            machine,
            prng,
            persisted=persisted,
            durable=durable,
            checkpoint=checkpoint,
            register_operation=Operation.REGISTER if group == METADATA_GROUP else None,
            session_live=(
                machine.inner.session_live if isinstance(machine.inner, MetadataMachine) else None
            ),
            config=config,
        )

    # Crash and restart -------------------------------------------------------------------

    def crash(self, *, power_loss: bool) -> None:
        assert self.alive
        self.alive = False
        self.outbox = []
        self._waiting.clear()  # the connections that waited are gone with the process
        self._waits = {}
        self._ready.clear()
        self.long_polls = LongPolls()
        self._long_polls = {}
        # Every connection closes with the process; as the runtime, the new process ends
        # none of their sessions (``broker.core.sessions``, invariant 6): a client's next
        # login ends its old session.
        self.connections = {}
        self.forwards = Forwards()
        for host in self.groups.values():
            host.io = []
            if host.retain_tick is not None:
                self._crash_in_deletion(host)
                host.retain_tick = None
        if power_loss:
            for disk in self.disks.values():
                disk.power_loss()

    def restart(self, tick: int) -> None:
        """Start a new process over the disks: the metadata group first, then, as its
        recovered state names them, the partition groups (``_reconcile``)."""
        assert not self.alive
        self.alive = True
        self.incarnation += 1
        self.system = self._system_client()
        self._served = ServedPolls()
        self._revocations = self._revocations_due()
        self._heartbeats = self._heartbeats_due()
        self._purges = PurgesDue()
        self._retentions = RetentionsDue(self.options.workload.retention_interval_ticks * TICK_US)
        self._prng = stream(self.options.seed, f"node.{self.index}.{self.incarnation}")
        self._recovered = {group: disk.reopen() for group, disk in self.disks.items()}
        durable, checkpoint = self._recovered.pop(METADATA_GROUP)
        disk = self.disks[METADATA_GROUP]
        metadata = self._host(METADATA_GROUP, disk, None, durable=durable, checkpoint=checkpoint)
        self.groups = {METADATA_GROUP: metadata}
        self._refs = {}
        self._by_partition = {}
        self._reconciled_op = -1  # reconcile after the first step, whatever it applied
        # The first step flushes the restart's own actions (truncation, RequestStartView).
        self.step(tick, metadata, Ticked())

    # Hosting partition groups ------------------------------------------------------------

    def _reconcile(self, tick: int) -> None:
        """Host exactly the partitions the applied metadata names, as the runtime does
        after every applied metadata op (``broker.core.reconcile``)."""
        metadata = self.groups[METADATA_GROUP]
        self._reconciled_op = metadata.replica.commit_min
        refs = self.metadata_state().partition_refs()
        change = reconcile(self._refs, refs, self.tombstones)
        for group in change.remove:
            self._remove_group(group)
        for group, ref in change.add:
            self._add_group(tick, group, ref)
        self._refs.update(change.refs)
        for group in change.purge_due:
            self._purges.watch(group)
        hosted = tuple(group for group in self.groups if group != METADATA_GROUP)
        self.observer.on_hosted(self.index, self._reconciled_op, hosted, self.tombstones)
        try:
            groups = self.metadata_state().consumer_groups(STREAM_ID, TOPIC_ID)
        except StateError:
            groups = ()  # the workload's topic does not exist yet
        self.observer.on_assignments(self.index, self._reconciled_op, groups)

    def _add_group(self, tick: int, group: int, ref: PartitionRef) -> None:
        disk = self.disks.get(group)
        if disk is None:
            disk = Disk(
                stream(self.options.seed, f"storage.{self.index}.{group}"),
                log_is_data=True,
                # The topic's own segment size, if it set one; else the node-wide one.
                segment_size_bytes=ref.segment_size_bytes or SEGMENT_SIZE_BYTES,
            )
            self.disks[group] = disk
            durable, checkpoint = None, None
        else:
            durable, checkpoint = self._recovered.pop(group)
        host = self._host(group, disk, ref, durable=durable, checkpoint=checkpoint)
        self.groups[group] = host
        self._refs[group] = ref
        self._by_partition[(ref.stream_id, ref.topic_id, ref.partition_id)] = group
        self._step(tick, host, Ticked())  # flush what opening it did (truncation, ...)

    def _remove_group(self, group: int) -> None:
        """The partition is gone from the metadata: stop its group, answer what waited
        for it, record its tombstone and delete its disk, as the runtime closes the group,
        writes its tombstone and removes its directory."""
        host = self.groups.pop(group)
        ref = self._refs.pop(group)
        key = (ref.stream_id, ref.topic_id, ref.partition_id)
        if self._by_partition.get(key) == group:
            del self._by_partition[key]
        host.requests.refuse_all(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
        self._wake_long_polls(self.long_polls.group_gone(group))
        self.tombstones.add(group)
        del self.disks[group]
        self._recovered.pop(group, None)

    # Stepping ----------------------------------------------------------------------------

    def step(self, tick: int, host: GroupHost, event: Event) -> None:
        assert self.alive
        self._tick = tick
        if host.ticks_owed:
            self._pay_ticks(tick, host)  # time passes before anything else happens
        self._step(tick, host, event)
        self._admit_queued(tick, host)
        self._resume_ready()

    def _step(self, tick: int, host: GroupHost, event: Event) -> None:
        replica = host.replica
        actions = replica.step(event)
        self._execute(tick, host, actions)
        if not (replica.status is Status.NORMAL and replica.is_primary):
            host.requests.primary_lost()
        self.observer.on_step(self.index, host.group, replica)
        if host.group == METADATA_GROUP and replica.commit_min != self._reconciled_op:
            self._reconcile(tick)
            self._wake_long_polls(self.long_polls.metadata_changed())
        elif self._long_polls:
            machine = host.partition_machine
            if machine is not None:
                next_offset = machine.state.frontier.next_offset
                self._wake_long_polls(self.long_polls.applied(host.group, next_offset))

    def _admit_queued(self, tick: int, host: GroupHost) -> None:
        """Carry out ``GroupRequests.take`` as the runtime's group host does: a backup
        forwards to the primary's node (``broker.core.forwarding``), or refuses with 58
        when it may not."""
        requests = host.requests
        while (taken := requests.take(host.replica, disk_full=False)) is not None:
            submission = taken.submission
            if isinstance(taken, Forward):
                if not self._forward(host, submission):
                    submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            elif not isinstance(taken, RefusedDiskFull):
                self._step(tick, host, submission.event())
                requests.settle(submission)

    def _forward(self, host: GroupHost, submission: Submission) -> bool:
        """Send ``submission`` to the node of its group's primary, as the replica bus does."""
        primary = forward_target(host.replica, submission)
        if primary is None:
            return False
        forwards = self.forwards
        token = forwards.next_token()
        forwarded = ForwardedRequest(
            token,
            host.group,
            submission.client_id,
            submission.session,
            submission.request,
            submission.operation,
            # As the replica bus delivers it: parts gathered on the wire, one on arrival.
            joined_body(submission.body),
            submission.timestamp_us,
            submission.request_checksum,
        )
        self.outbox.append((primary, forwarded))
        forwards.sent(token, primary, submission)
        self.forwarded_writes += 1
        return True

    def on_forwarded(self, tick: int, source: int, forwarded: ForwardedRequest) -> None:
        """Submit a request another node forwarded as this node's own; its outcome goes
        back to that node under the same token (never forwarded again)."""
        host = self.groups.get(forwarded.group)
        token = forwarded.token

        def deliver(outcome: Outcome) -> None:
            self.outbox.append((source, ForwardedOutcome(token, outcome)))

        if host is None:
            # Not created here yet, or removed already: the client asks again.
            deliver(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            return
        submission = Submission(
            forwarded.client_id,
            forwarded.session,
            forwarded.request,
            forwarded.operation,
            forwarded.body,
            forwarded.timestamp_us,
            deliver,
            forwarded.request_checksum,
            forwarded=True,
        )
        host.requests.submit(submission)
        if host.ticks_owed:
            self._pay_ticks(tick, host)
        self._admit_queued(tick, host)

    def on_forwarded_outcome(self, source: int, forwarded: ForwardedOutcome) -> None:
        self.forwards.answered(source, forwarded.token, forwarded.outcome)
        self._resume_ready()

    def tick(self, tick: int) -> None:
        self._tick = tick
        self._wake_long_polls(self.long_polls.expired(tick * TICK_US))
        self._expire_waiting(tick)
        self._resume_ready()
        self._check_waits(tick)
        self._resume_ready()
        self._move_revoked()
        self._maintain(tick)
        self._evict_stale(tick)
        self._run_system(tick)
        if not self.options.lazy_ticks:
            for host in self._hosts():
                if self.groups.get(host.group) is host:
                    self.step(tick, host, Ticked())
            return
        # As the runtime does: step a replica only on the tick a timeout with something
        # to do fires; the ticks before it are owed and paid in one Ticked(count), first
        # thing. (No cap on what is owed here: a lone replica may owe a whole run.)
        for host in self._hosts():
            if self.groups.get(host.group) is not host:
                continue  # removed by a metadata op this tick applied
            host.ticks_owed += 1
            if host.ticks_owed >= host.replica.ticks_until_due():
                self._pay_ticks(tick, host)
                self._admit_queued(tick, host)

    def _expire_waiting(self, tick: int) -> None:
        waiting = self._waiting
        expired = False
        while waiting and (waiting[0][0] <= tick or waiting[0][2].done):
            _, host, submission = waiting.popleft()
            if not submission.done:
                host.requests.abandon(submission)
                submission.deliver(timed_out(submission))
                expired = True
        if expired:
            self.forwards.forget_answered()  # a forward whose outcome never came back

    def _pay_ticks(self, tick: int, host: GroupHost) -> None:
        while host.ticks_owed:
            count = min(host.ticks_owed, host.replica.ticks_until_due())
            host.ticks_owed -= count
            self._step(tick, host, Ticked(count))

    def _hosts(self) -> list[GroupHost]:
        """The hosted groups in order, as a list: stepping one may add or remove others."""
        return list(self.groups.values())

    def complete_io(self, tick: int) -> None:
        """Report every disk completion due by ``tick``, group by group, in order; run
        the deletions of retired segments due by then."""
        for host in self._hosts():
            if host.retain_tick is not None and host.retain_tick <= tick:
                host.retain_tick = None
                if self.groups.get(host.group) is host:
                    self._delete_retired(host)
            while host.io and host.io[0][0] <= tick and self.groups.get(host.group) is host:
                assert self.alive
                _, event = host.io.pop(0)
                if isinstance(event, PrepareSynced):
                    durable = host.disk.sync()
                    if durable < event.op:
                        continue  # truncated meanwhile; a later sync covers the new op
                self.step(tick, host, event)

    def _io_due(self, tick: int, host: GroupHost, latency_max: int) -> int:
        latency = self._disk_prng.randint(0, latency_max)
        if tick < self.disk_slow_until:
            latency *= self.options.disk.slow_factor
        # Completions keep append order: a later one never overtakes an earlier one.
        host.io_tick_last = max(host.io_tick_last, tick + latency)
        return host.io_tick_last

    def _execute(self, tick: int, host: GroupHost, actions: list[Action]) -> None:
        """Carry out ``actions`` as the runtime does (``broker.core.execution``): the disk
        work here, each write and sync completing later with simulated latency."""
        disk = host.disk
        execution = Execution(
            host.replica, host.requests, partial(self._send_to_replica, host.group)
        )
        for action in execution.run(actions):
            if isinstance(action, AppendToJournal):
                disk.append(action.prepare)
                due = self._io_due(tick, host, self.options.disk.write_ticks_max)
                host.io.append((due, PrepareWritten(action.prepare.op, action.prepare.checksum)))
            elif isinstance(action, SyncJournal):
                due = self._io_due(tick, host, self.options.disk.sync_ticks_max)
                host.io.append((due, PrepareSynced(action.op, action.checksum)))
            elif isinstance(action, TruncateJournal):
                disk.truncate(action.after_op)
            elif isinstance(action, WriteSuperblock):
                disk.write_superblock(action.state)
            elif isinstance(action, RepairJournal):
                disk.repair(action.prepare)
            else:
                assert isinstance(action, WriteCheckpoint)
                disk.write_checkpoint(action.op, action.snapshot, action.journal_restart_op)
        machine = host.machine.inner
        if isinstance(machine, PartitionMachine):
            self._schedule_deletion(tick, host, machine)

    # Retention: the files ----------------------------------------------------------------

    def _retention_floor(self, host: GroupHost, machine: PartitionMachine) -> int:
        """The first op whose record this replica must keep, as the runtime's group host
        says: the partition's retention floor, but never past the durable checkpoint
        (a restart replays every op after it from the journal)."""
        checkpoint = host.disk.superblock.state.checkpoint
        return min(machine.state.retention_floor_op(), checkpoint + 1)

    def _schedule_deletion(self, tick: int, host: GroupHost, machine: PartitionMachine) -> None:
        """After a step: seal the open segment once a purge or retention retired all it
        holds, and start deleting the sealed segments below the floor (it completes later,
        as the runtime's deletion in a worker thread)."""
        disk = host.disk
        state = machine.state
        if not host.replica.log_whole:
            return  # backfilling committed records: the state's floor does not see them yet
        if state.retained_start != host.retained_start_seen:
            host.retained_start_seen = state.retained_start
            disk.seal_if_retired(state.retention_floor_op())
        if host.retain_tick is None and disk.journal.retain_due(
            self._retention_floor(host, machine)
        ):
            host.retain_tick = tick + self._retain_prng.randint(
                1, 1 + self.options.disk.sync_ticks_max
            )

    def _delete_retired(self, host: GroupHost) -> None:
        machine = host.partition_machine
        assert machine is not None
        if not host.replica.log_whole:
            return  # a state transfer since: its backfill goes first
        floor = self._retention_floor(host, machine)
        self.segments_deleted += host.disk.retain(floor)
        self.observer.on_retained_files(self.index, host.group, host.replica, host.disk, machine)

    def _crash_in_deletion(self, host: GroupHost) -> None:
        """The process dies while it deletes retired segments: after a drawn number of
        the unlinks (the retained start is recorded first), the rest never happen."""
        machine = host.partition_machine
        assert machine is not None
        if not host.replica.log_whole:
            return
        if host.disk.crash_in_retain(self._retention_floor(host, machine), self._retain_prng):
            self.deletions_crashed += 1

    def _send_to_replica(self, group: int, replica: int, message: Message) -> None:
        frame = encode_message(message, sender=self.index)
        self.outbox.append((replica, ReplicaFrame(group, frame)))

    def _reply(
        self, host: GroupHost, client_id: int, request: int, checksum: bytes, outcome: Outcome
    ) -> None:
        """Send ``outcome`` to the client, as its connection would carry it: a refusal
        names the primary of the group's view here, as the runtime's status replies do,
        so the client can route again."""
        endpoint = self.client_endpoints.get(client_id)
        if endpoint is None:
            return  # the bootstrap's system client id: nobody waits for it
        op, status, body, error, primary = 0, 0, b"", "", -1
        if isinstance(outcome, Replied):
            op, body = outcome.op, outcome.body
            primary = host.replica.primary_index(outcome.view)
            self._connection(client_id).saw(host.group, op)
        elif isinstance(outcome, Refused):
            status, primary = outcome.status, host.replica.primary
        else:
            assert isinstance(outcome, SessionLost)
            error = outcome.error.value
        reply = ClientReply(
            client_id,
            request,
            op,
            status,
            body,
            error,
            checksum,
            primary=primary,
            incarnation=self.incarnation,
            group=host.group,
        )
        self.outbox.append((endpoint, reply))

    def _answer(
        self,
        source: int,
        request: ClientRequest,
        status: int,
        body: bytes = b"",
        *,
        checksum: bytes = b"",
        first_offset: int = 0,
        group: int = 0,
        error: str = "",
        read_op: int = 0,
    ) -> None:
        """Answer ``request`` at once, on its connection: a refusal, an eviction
        (``error``), or a read (of ``group``, at its applied op ``read_op``)."""
        reply = ClientReply(
            request.client_id,
            request.request,
            0,
            status,
            body,
            error,
            request_checksum=checksum,
            first_offset=first_offset,
            incarnation=self.incarnation,
            group=group,
            read_op=read_op,
        )
        self.outbox.append((source, reply))

    def _connection(self, client_id: int) -> ConnectionContext:
        connection = self.connections.get(client_id)
        if connection is None:
            connection = ConnectionContext(f"client-{client_id}", client_id)
            self.connections[client_id] = connection
        return connection

    def _must_see(self, client_id: int, group: int) -> int:
        """The op of ``group`` a read on this client's connection must find applied: what
        the connection was told (read-your-writes)."""
        return self._connection(client_id).must_see(group)

    # Requests, carried out by ``broker.core.handlers`` --------------------------------------

    def on_client_request(self, tick: int, source: int, request: ClientRequest) -> None:
        """Run the request's flow as the runtime does: decode its frame, judge it, and
        carry out each effect the flow waits on (``_carry_out``)."""
        self._tick = tick
        if request.code == SYSTEM_CODE:
            self._propose_system(tick, request)
            return
        # A buffer of its own, as the runtime's frame decoder hands out: a send's batch is
        # then stamped in place by the primary, as in the runtime.
        frame = wire.decode_frame(bytearray(request.frame()))
        context = self._connection(request.client_id)
        if self._heartbeats is not None:
            self._heartbeats.heard(request.client_id, tick * TICK_US)
        # As the runtime's connection: a long poll waiting for it answers first.
        self._wake_long_polls(self.long_polls.connection_busy(id(context)))
        self._resume_ready()
        flow = handle(self, context, frame, self.rules)
        self._resume(_Flow(flow, source, request, self.incarnation), None)
        self._resume_ready()

    def _resume(self, waiting: _Flow, result: Any) -> None:
        """Send ``result`` to the flow and carry out its next effect, or answer with the
        response it returned."""
        if waiting.incarnation != self.incarnation or not self.alive:
            return  # its connection went with the process that ran it
        try:
            effect = waiting.flow.send(result)
        except StopIteration as stop:
            self._respond(waiting, stop.value)
            return
        self._carry_out(waiting, effect)

    def _resume_ready(self) -> None:
        """Resume the flows whose submission was answered meanwhile, in order: never from
        inside the replica step that answered it."""
        while self._ready:
            waiting, outcome = self._ready.popleft()
            self._resume(waiting, outcome)

    def _carry_out(self, waiting: _Flow, effect: Effect) -> None:
        if isinstance(effect, Submit):
            self._submit_effect(waiting, effect)
        elif isinstance(effect, CatchUp | ReadBarrier | PurgeApplied):
            self._wait_effect(waiting, effect)
        elif isinstance(effect, AwaitMessages):
            token = self.long_polls.register(
                id(effect.context),
                effect.group_id,
                effect.offset,
                now_us=self._tick * TICK_US,
                wait_us=effect.wait_us,
                deadline_us=effect.deadline_us,
            )
            if isinstance(token, Refusal):
                self._resume(waiting, token)
            else:
                self._long_polls[token] = waiting
        elif isinstance(effect, PasswordLogin):
            user = login_user(self.metadata_state(), effect.username)
            if user is not None and not verify_password(user.password, effect.password):
                user = None
            self._resume(waiting, user)
        elif isinstance(effect, VerifyPassword):
            self._resume(waiting, verify_password(effect.stored, effect.password))
        else:
            assert isinstance(effect, HashPassword)
            salt = self._prng.randbytes(16)
            self._resume(waiting, hash_password(effect.password, salt, n=16, r=1, p=1))

    def _wake_long_polls(self, released: list[tuple[int, Woken]]) -> None:
        """Resume the released long polls in order, after the step that released them."""
        for token, woken in released:
            self.long_polls_woken += 1
            self._ready.append((self._long_polls.pop(token), woken))

    def _submit_effect(self, waiting: _Flow, effect: Submit) -> None:
        host = self.groups.get(effect.group_id)
        if host is None:
            self._resume(waiting, Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            return

        def deliver(outcome: Outcome) -> None:
            self._ready.append((waiting, outcome))

        submission = Submission(
            effect.client_id,
            effect.session,
            effect.request,
            effect.operation,
            effect.body,
            self._tick * TICK_US,
            deliver,
            effect.checksum,
        )
        self._submit(self._tick, host, submission)

    def _wait_effect(self, waiting: _Flow, effect: CatchUp | ReadBarrier | PurgeApplied) -> None:
        """Wait, bounded by ``READ_WAIT_TICKS``, as the runtime's ``_catch_up`` and
        ``_read_barrier`` do (``broker.core.reads``)."""
        wait = _Wait(waiting, effect, self._tick + READ_WAIT_TICKS)
        self._read_token += 1
        self._waits[self._read_token] = wait
        self._check_wait(self._read_token, wait)

    def _check_wait(self, token: int, wait: _Wait) -> None:
        """Take ``wait`` as far as it can go now; resume its flow once it is decided."""
        effect = wait.effect
        barrier = isinstance(effect, ReadBarrier)
        host = self.groups.get(effect.group_id)
        if host is None or self._tick >= wait.deadline:
            self._end_wait(token, wait, False)
            return
        if isinstance(effect, PurgeApplied):
            machine = host.machine.inner
            applied = isinstance(machine, PartitionMachine) and (
                machine.state.purge_generation >= effect.generation
            )
            if applied:
                self._end_wait(token, wait, None)
            return
        replica = host.replica
        if wait.target is None:
            if barrier and not readable(replica, 0):
                return  # restarted or in a view change: the read waits for normal status
            fresh = isinstance(effect, ReadBarrier) and effect.fresh
            if fresh and replica.status is not Status.NORMAL:
                self._end_wait(token, wait, False)  # no read index outside normal status
                return
            if wait.round is None:
                self._start_round(token, wait, replica)
            if wait.target is None:
                return  # asked; the answers decide it
        target = wait.target
        if barrier and readable(replica, target):
            self._end_wait(token, wait, True)
        elif not barrier and replica.commit_min >= target:
            self._end_wait(token, wait, None)

    def _start_round(self, token: int, wait: _Wait, replica: Replica) -> None:
        """Ask for a read index when the wait needs one (a fresh read, or a backup
        behind the op it waits for), or decide the wait's target at once."""
        effect = wait.effect
        assert isinstance(effect, CatchUp | ReadBarrier)  # a purge's wait has no op
        fresh = isinstance(effect, ReadBarrier) and effect.fresh
        behind = replica.commit_min < effect.op and not replica.is_primary
        if not (fresh or behind) or replica.status is not Status.NORMAL:
            wait.target = effect.op
            return
        wait.round = (
            self._read_index_round(replica) if fresh else ReadIndexRound(replica, confirmed=False)
        )
        commit = wait.round.commit
        if commit is not None:  # a primary, or a lone replica: nobody to ask
            wait.target = max(effect.op, commit)
            return
        for peer in wait.round.peers():
            self.outbox.append((peer, ReadIndexAsk(token, effect.group_id, replica.view)))

    def _end_wait(self, token: int, wait: _Wait, result: bool | None) -> None:
        del self._waits[token]
        effect = wait.effect
        self._resume(wait.waiting, result if isinstance(effect, ReadBarrier) else None)

    def _respond(self, waiting: _Flow, response: Response) -> None:
        """Send the flow's response to its client as the frames it is, read back into a
        ``ClientReply``; close the connection when the response says so."""
        request = waiting.request
        frame = wire.decode_frame(b"".join(bytes(part) for part in response.parts))
        op, status, body, error, primary = 0, 0, b"", "", -1
        if frame.command is Command.EVICTION:
            reason = frame.eviction_header().reason
            no_session = reason is EvictionReason.NO_SESSION
            error = (ClientError.NO_SESSION if no_session else ClientError.SESSION_EVICTED).value
        else:
            header = frame.reply_header()
            op, status, body = header.op, header.status, bytes(frame.body)
            if op or status in _ROUTING_STATUSES:
                primary = header.replica  # the group's primary the answer names
        self._count_read(request, response, status)
        reply = ClientReply(
            request.client_id,
            request.request,
            op,
            status,
            body,
            error,
            response.checksum,
            first_offset=response.first_offset,
            primary=primary,
            incarnation=self.incarnation,
            group=response.group if response.group >= 0 else 0,
            read_op=response.read_op,
        )
        self.outbox.append((waiting.source, reply))
        if response.close:
            self.connection_closed(self._tick, request.client_id)

    def _count_read(self, request: ClientRequest, response: Response, status: int) -> None:
        host = self.groups.get(response.group)
        if status or host is None or host.replica.is_primary:
            return
        if request.code in (CommandCode.POLL_MESSAGES, wire.LONG_POLL_CODE):
            self.backup_polls += 1
        elif request.code == CommandCode.GET_CONSUMER_OFFSET:
            self.fresh_reads += 1

    def _propose_system(self, tick: int, request: ClientRequest) -> None:
        """The operator's bootstrap: a runtime-internal metadata command, as the runtime's
        own system client proposes it (no frame, no session check)."""
        body = request.payload[4:]
        checksum = internal_checksum(body)
        host = self.groups[METADATA_GROUP]

        def deliver(outcome: Outcome) -> None:
            # Under the client's own number: the wire's register carries 0.
            self._reply(host, request.client_id, request.request, checksum, outcome)

        register = request.operation == Operation.REGISTER
        submission = Submission(
            request.client_id,
            0 if register else request.session,
            request.wire_request,
            request.operation,
            bytes(body),
            tick * TICK_US,
            deliver,
            checksum,
        )
        self._submit(tick, host, submission)

    # What the flows read of this node (``broker.core.handlers.Node``) ----------------------

    @property
    def replica_index(self) -> int:
        return self.index

    @property
    def replica_count(self) -> int:
        return self.options.node_count

    @property
    def balancer(self) -> Balancer:
        return self._balancer

    @property
    def partitions_max(self) -> int | None:
        return None  # the simulated disk has no descriptor budget

    @property
    def metadata(self) -> GroupHost:
        return self.groups[METADATA_GROUP]

    def metadata_machine(self) -> MetadataMachine | None:
        machine = self.groups[METADATA_GROUP].machine.inner
        assert isinstance(machine, MetadataMachine)
        return machine

    def metadata_view(self) -> MetadataView:
        replica = self.groups[METADATA_GROUP].replica
        is_primary = replica.status is Status.NORMAL and replica.is_primary
        known_op = max(replica.op, replica.commit_max)
        return MetadataView(replica.commit_min, known_op, is_primary, self.metadata_state().session)

    def partition(self, route: PartitionRoute) -> GroupHost:
        """The hosted group of a partition the metadata names (it always is hosted here:
        reconciling follows every applied metadata op at once)."""
        group = self._by_partition.get((route.stream_id, route.topic_id, route.partition_id))
        if group is None:
            raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(route.partition_id))
        return self.groups[group]

    def cluster_nodes(self) -> tuple[wire.ClusterNode, ...]:
        return ()  # simulated nodes have no addresses: a route request is refused (58)

    def now_us(self) -> int:
        return self._tick * TICK_US

    def draw_token(self) -> str:
        return self._prng.randbytes(32).hex()

    def served_group_poll(self, route: PartitionRoute, session: int, last_offset: int) -> None:
        assert route.consumer is not None
        key = (route.stream_id, route.topic_id, int(route.consumer.id), route.partition_id)
        self._served.served(key, session, last_offset)

    def _move_revoked(self) -> None:
        """Queue the revocation reports and expiries due (as the runtime's maintenance)."""
        metadata = self.groups[METADATA_GROUP]
        if metadata.replica.status is not Status.NORMAL:
            return
        revocations = self.metadata_state().revocations()
        if not revocations:
            return
        due = self._revocations.due(
            revocations,
            self._served,
            self._stored_group_offset,
            self.now_us(),
            is_primary=metadata.is_primary,
        )
        self.system.queue.extend(due)

    def _stored_group_offset(self, revocation: RevocationInfo) -> tuple[bool, int | None]:
        key = (revocation.stream_id, revocation.topic_id, revocation.partition_id)
        group = self._by_partition.get(key)
        machine = None if group is None else self.groups[group].machine.inner
        if not isinstance(machine, PartitionMachine):
            return False, None
        consumer = ConsumerKey(ConsumerKind.CONSUMER_GROUP, revocation.group_id)
        return True, machine.state.consumer_offset(consumer)

    def _system_done(self, command: MetadataCommand | PartitionCall, outcome: Outcome) -> None:
        if isinstance(command, PartitionCall):
            self._partition_call_done(command)
            return
        if isinstance(command, RevocationDrained | ExpireRevocations):
            if isinstance(command, RevocationDrained) and isinstance(outcome, Replied):
                key = (command.stream, command.topic, command.group, command.partition_id)
                self._served.forget(key, command.session)
            self._revocations.finished(command)

    def _partition_call_done(self, call: PartitionCall) -> None:
        if call.purge:
            self._purges.finished(call.group)
        else:
            self._retentions.finished(call.group)

    def auto_commit(
        self, group: CoreGroup, route: PartitionRoute, offset: int, user_id: int
    ) -> None:
        raise AssertionError("the simulated workload polls without auto-commit")

    def login_failed(self, host: str) -> None:
        del host  # the simulator draws no login throttle: its clients know the password

    def login_succeeded(self, host: str) -> None:
        del host

    def session_admitted(self, context: ConnectionContext, header: wire.RequestHeader) -> None:
        metadata = self.groups[METADATA_GROUP].replica
        self.observer.on_admitted(self.index, header.client, header.session, metadata.commit_min)

    def node_read(
        self, context: ConnectionContext, code: CommandCode, session: int, payload: Any
    ) -> bytes:
        raise StateError(ErrorCode.INVALID_COMMAND, "the simulator serves no node reads")

    def runtime_stats(self) -> bytes:
        raise StateError(ErrorCode.INVALID_COMMAND, "the simulator keeps no runtime stats")

    def partition_segments(self, group: CoreGroup) -> list[SegmentInfo] | None:
        """The journal segments of a partition group here, oldest first (DELETE_SEGMENTS)."""
        host = self.groups.get(group.group_id)
        if host is None or host.partition_machine is None:
            return None
        return host.disk.journal.segments()

    def partition_stats(self, stream_id: int, topic_id: int, partition_id: int) -> PartitionStats:
        """Offsets, counts and sizes of the retained messages, from the partition's state,
        as the runtime's."""
        group = self._by_partition.get((stream_id, topic_id, partition_id))
        machine = None if group is None else self.groups[group].machine.inner
        if not isinstance(machine, PartitionMachine):
            return PartitionStats()
        state = machine.state
        return PartitionStats(
            segments_count=1,
            current_offset=state.current_offset,
            size_bytes=state.retained_bytes,
            messages_count=max(0, state.retained_messages),
        )

    def connection_closed(self, tick: int, client_id: int) -> None:
        """The client's connection to this node closed: end the session it registered,
        through the metadata group, as the runtime's ``connection_closed`` does."""
        context = self.connections.pop(client_id, None)
        if context is None:
            return  # never opened by this process
        if self._heartbeats is not None:
            self._heartbeats.closed(client_id)
        self._wake_long_polls(self.long_polls.connection_busy(id(context)))
        self.connections_closed += 1
        session = session_to_end(context, self.metadata_state().session)
        if session:
            self.system.queue.append(EndSession(session))
            self._run_system(tick)

    def _run_system(self, tick: int) -> None:
        """Submit the system client's next request, if it has one and none in flight:
        its register first, then the command, as the runtime's ``SystemRunner`` does."""
        system = self.system
        while not system.busy and system.queue and isinstance(system.queue[0], PartitionCall):
            call_for = system.queue[0]
            assert isinstance(call_for, PartitionCall)
            target = self.groups.get(call_for.group)
            if target is not None and target.is_primary:
                break
            # No longer this node's to propose (a view change, the partition went): the
            # runtime's task would be refused; the next pass proposes again if still due.
            system.queue.popleft()
            self._partition_call_done(call_for)
        if system.busy or not system.queue:
            return
        client = system.client
        registering = client.session == 0
        item = system.queue[0]
        host = self.groups[METADATA_GROUP]
        if registering:
            call = client.register()
        else:
            if isinstance(item, PartitionCall):
                host = self.groups[item.group]
                operation, body = int(Operation.TRUNCATE_PARTITION), item.body
            else:
                encoded, body = encode_command(item)
                operation = int(encoded)
            call = client.call(operation, bytes(body), tick * TICK_US)
            system.attempts += 1

        def deliver(outcome: Outcome) -> None:
            # Only record it: the next request goes at the next tick, never from inside
            # the step that delivered this outcome.
            system.busy = False
            if registering:
                if not client.registered(outcome):
                    # No session: the runtime gives up the command.
                    self._system_done(system.queue.popleft(), outcome)
                    system.attempts = 0
                return
            if client.answered(outcome, system.attempts):
                self._system_done(system.queue.popleft(), outcome)
                system.attempts = 0

        system.busy = True
        submission = Submission(
            call.client_id,
            call.session,
            call.request,
            call.operation,
            call.body,
            tick * TICK_US,
            deliver,
            call.checksum,
        )
        self._submit(tick, host, submission)

    # The node's own partition requests (``broker.core.maintenance``) ----------------------

    def _maintain(self, tick: int) -> None:
        """The runtime's maintenance pass: truncate, as primary, the partitions whose
        committed purge their state has not applied, and propose the retention of those
        whose oldest sealed segments expired or overflow their topic's share."""
        for group, generation in self._purges.due(self._refs, self._purge_view):
            self.system.queue.append(PartitionCall(group, purge_body(generation), purge=True))
        now = tick * TICK_US
        for group in self._retentions.due(now, self._hosted_partitions, self._retention_view):
            offset = self._retention_offset(self.groups[group], now)
            if offset is not None:
                self._retentions.proposing(group)
                self.retentions_proposed += 1
                self.system.queue.append(PartitionCall(group, retain_body(offset), purge=False))

    def heard_us(self, client_id: int) -> int | None:
        """When this process last heard from the client's connection, in µs of the node's
        clock; None: heartbeats are off, or no connection (or it went stale)."""
        heartbeats = self._heartbeats
        return None if heartbeats is None else heartbeats.last_heard(client_id)

    def _evict_stale(self, tick: int) -> None:
        """The runtime's heartbeat pass: close each consumer-group member's connection
        that sent nothing for 6/5 of the heartbeat interval, and end its session through
        the metadata group (``broker.core.liveness.stale_members``). The client learns
        it as from a closed connection: its next request there is not logged in."""
        heartbeats = self._heartbeats
        machine = self.metadata_machine()
        if heartbeats is None or machine is None:
            return
        stale = stale_members(
            heartbeats, tick * TICK_US, self.connections.__getitem__, machine.state.memberships
        )
        for client_id, session in stale:
            context = self.connections.pop(client_id)
            self._wake_long_polls(self.long_polls.connection_busy(id(context)))
            self.stale_evictions += 1
            self.system.queue.append(EndSession(session))

    def _purge_view(self, group: int) -> PurgeView | None:
        host = self.groups.get(group)
        machine = None if host is None else host.partition_machine
        if host is None or machine is None:
            return None
        return PurgeView(machine.state.purge_generation, host.is_primary)

    def _hosted_partitions(self) -> list[int]:
        return [group for group in self._refs if group in self.groups]

    def _retention_view(self, group: int) -> RetentionView | None:
        host = self.groups.get(group)
        if host is None or host.partition_machine is None:
            return None
        return RetentionView(host.is_primary, readable=True)

    def _retention_offset(self, host: GroupHost, now_us: int) -> int | None:
        """The offset ``host``'s partition should retain from now, from its journal and its
        topic's committed options (the node's defaults: none)."""
        ref = self._refs.get(host.group)
        machine = host.partition_machine
        if ref is None or machine is None:
            return None
        try:
            topic = self.metadata_state().topic(ref.stream_id, ref.topic_id)
        except StateError:
            return None  # deleted since: its group goes with the next reconcile
        expiry_us, size_bytes = topic_limits(
            topic, message_expiry_us=EXPIRY_NEVER, max_topic_size_bytes=SIZE_UNLIMITED
        )
        return retention_due(
            machine.state,
            host.disk.journal.segments(),
            message_expiry_us=expiry_us,
            max_topic_size_bytes=size_bytes,
            partition_count=topic.partitions_count,
            segment_size_bytes=SEGMENT_SIZE_BYTES,
            now_us=now_us,
        )

    def _read_index_round(self, replica: Replica) -> ReadIndexRound:
        return ReadIndexRound(replica, confirmed=True)

    def on_read_index_ask(self, source: int, ask: ReadIndexAsk) -> None:
        """Answer a peer's read-index ask as the runtime's bus does: a primary sends its
        commit ahead of the answer, so the asker learns it at once."""
        host = self.groups.get(ask.group)
        in_view, commit = read_index_answer(None if host is None else host.replica, ask.view)
        if commit is not None:
            self._send_to_replica(
                ask.group, source, Commit(ask.group, self.index, ask.view, commit)
            )
        self.outbox.append((source, ReadIndexReply(ask.token, in_view, commit)))

    def on_read_index_reply(self, tick: int, source: int, reply: ReadIndexReply) -> None:
        self._tick = tick
        wait = self._waits.get(reply.token)
        if wait is None or wait.round is None or wait.target is not None:
            return  # answered, expired, or decided already
        round_ = wait.round
        round_.answered(source, reply.in_view, reply.commit)
        effect = wait.effect
        assert isinstance(effect, CatchUp | ReadBarrier)  # only they ask for a read index
        if round_.failed:
            fresh = isinstance(effect, ReadBarrier) and effect.fresh
            if fresh:
                self._end_wait(reply.token, wait, False)
                self._resume_ready()
                return
            wait.target = effect.op  # only a hint failed: wait for the op itself
        elif round_.commit is not None:
            wait.target = max(effect.op, round_.commit)
        if wait.target is not None:
            self._check_wait(reply.token, wait)
        self._resume_ready()

    def _check_waits(self, tick: int) -> None:
        """Take every waiting read or catch-up as far as it goes at ``tick``."""
        self._tick = tick
        for token, wait in list(self._waits.items()):
            if token in self._waits:
                self._check_wait(token, wait)

    def metadata_state(self) -> MetadataState:
        metadata = self.groups[METADATA_GROUP].machine.inner
        assert isinstance(metadata, MetadataMachine)
        return metadata.state

    def workload_group(self) -> int | None:
        """The group of the workload topic's first partition, if hosted here."""
        return self._by_partition.get((STREAM_ID, TOPIC_ID, 0))

    def _submit(self, tick: int, host: GroupHost, submission: Submission) -> None:
        """Hand ``submission`` to its group's requests, as the runtime's submitter does,
        which stops waiting for it at its deadline."""
        host.requests.submit(submission)
        self._waiting.append((tick + REQUEST_TIMEOUT_TICKS, host, submission))
        if host.ticks_owed:
            self._pay_ticks(tick, host)  # time passes before anything else happens
        self._admit_queued(tick, host)
