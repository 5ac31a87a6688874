"""A simulated node: one replica of every group, its disks, and the runtime's admission.

Purpose: host, on one simulated machine, a ``consensus.Replica`` of the metadata group and
of every partition group, each with the real state machine (``MetadataMachine`` or
``PartitionMachine``) and the real journal over a ``MemoryStorage`` (:mod:`sim.disk`);
carry out the replicas' actions with the runtime's own ``broker.core.execution``, doing
only the disk work here (the host contract of ``consensus.protocols``); turn client
requests into consensus requests the way the runtime's admission does, by the same
command table and decisions (``broker.core.commands``); and queue, admit and answer them
with the runtime's own ``broker.core.groups.GroupRequests``, so a reply reaches exactly
the request it belongs to here as on a real node.

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
6. A stored-offset read is answered once: from the partition's applied state when its
   barrier holds (``broker.core.reads``; at a backup, after a decided read index), or
   with 58 when the round fails or ``READ_WAIT_TICKS`` pass; a crash drops it with its
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
from typing import Final, Protocol

from broker.core.commands import (
    ROUTES,
    Balancer,
    Denied,
    PartitionWrite,
    Resync,
    Route,
    admit_metadata_write,
    admit_offset_write,
    admit_poll,
    committed_retry,
    resync_reply,
)
from broker.core.connections import ConnectionContext
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
from broker.core.identity import internal_checksum, register_checksum, request_checksum
from broker.core.reads import READ_WAIT_US, ReadIndexRound, read_index_answer, readable
from broker.core.reconcile import METADATA_GROUP, reconcile
from broker.core.sessions import (
    MetadataView,
    SessionEvicted,
    SessionOk,
    SessionRefused,
    SessionWait,
    check_session,
    logged_in,
    logged_out,
    session_to_end,
)
from broker.core.system import SystemClient
from broker.state.admission import authenticate
from broker.state.codec import encode_command
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    ConsumerGroupInfo,
    Durability,
    EndSession,
    MetadataCommand,
    MetadataState,
    PartitionRef,
)
from broker.state.metadata_machine import MetadataMachine
from broker.state.partition import ConsumerKey
from broker.state.partition_machine import PartitionMachine
from broker.state.routing import route_offset
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
from consensus.protocols import DurableState, Prepared
from consensus.replica import Replica, Status
from sdk import wire
from sdk.wire.codes import CommandCode, IggyErrorCode, Operation
from sim.disk import Disk
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

_Handler = Callable[[int, int, ClientRequest, CommandCode, wire.RequestPayload], None]
"""How the node carries out one route: (tick, source, request, code, payload)."""


class Observer(Protocol):
    """What the checkers see of a node (read-only hooks)."""

    def on_apply(self, node: int, group: int, prepare: Prepare, reply: bytes) -> None: ...

    def on_restore(self, node: int, group: int) -> None: ...

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
        self, op: int, operation: int, body: bytes, timestamp_us: int, frontier: int
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


@dataclass(slots=True)
class SystemQueue:
    """The node's own client (``broker.core.system``, as the runtime's) with the commands
    it still has to run: one request at a time; a new client id for every process, drawn
    from the node's stream of that incarnation."""

    client: SystemClient
    #: The commands still to run, in the order they were asked for.
    queue: deque[MetadataCommand] = field(default_factory=deque)
    #: The submission in flight, if any; its command stays first in ``queue``.
    busy: bool = False
    attempts: int = 0

    @property
    def session(self) -> int:
        return self.client.session


@dataclass(slots=True)
class PendingRead:
    """A stored-offset read waiting at this node: for the read index of a backup (its
    ``round``), then until the replica applied ``target``; refused with 58 at
    ``deadline``, as the runtime's read wait ends."""

    source: int
    request: ClientRequest
    checksum: bytes
    group: int
    consumer: ConsumerKey
    must_see: int
    deadline: int
    round: ReadIndexRound | None = None
    target: int | None = None


class Node:
    """One machine of the cluster; see the module docstring."""

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
        #: Stored-offset reads waiting here, by read-index token (in arrival order).
        self._reads: dict[int, PendingRead] = {}
        self._read_token = 0
        self._balancer = Balancer()
        self.forwards = Forwards()
        #: What this node remembers of each client's connection to it (by client id), as
        #: the runtime's connection contexts: gone with the process.
        self.connections: dict[int, ConnectionContext] = {}
        self.system = self._system_client()
        #: Connections clients closed while this node ran (every incarnation).
        self.connections_closed = 0
        #: Requests this node forwarded to another node's primary (every incarnation).
        self.forwarded_writes = 0
        #: Polls this node's backups served through the read barrier (every incarnation).
        self.backup_polls = 0
        #: Stored offsets this node's backups served through a read index (every
        #: incarnation).
        self.fresh_reads = 0
        #: The routes of ``broker.core.commands.ROUTES`` the workload's clients take.
        self._handlers: dict[Route, _Handler] = {
            Route.LOGIN: self._login,
            Route.METADATA_WRITE: self._metadata_write,
            Route.LOGOUT: self._logout,
            Route.SEND: self._send,
            Route.OFFSET_WRITE: self._offset_write,
            Route.POLL: self._poll,
            Route.OFFSET_READ: self._offset_read,
        }
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
        inner: StateMachine
        if ref is None:
            inner = MetadataMachine()
        else:
            inner = PartitionMachine(ref.stream_id, ref.topic_id, ref.partition_id, disk)
        node = self.index
        machine = _Observed(
            inner,
            lambda prepare, reply: self.observer.on_apply(node, group, prepare, reply),
            lambda: self.observer.on_restore(node, group),
        )
        prng = stream(self.options.seed, f"replica.{node}.{group}.{self.incarnation}")
        # The metadata group is small and rarely written: it always acks synced ops. A
        # partition group uses its topic's durability.
        persisted = ref is None or ref.durability is Durability.PERSISTED
        replica = self._make_replica(group, disk, machine, prng, durable, checkpoint, persisted)
        return GroupHost(group, disk, machine, replica)

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
            config = replace(config, state_transfer=False)
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
        self._reads = {}
        # Every connection closes with the process; as the runtime, the new process ends
        # none of their sessions (``broker.core.sessions``, invariant 6): a client's next
        # login ends its old session.
        self.connections = {}
        self.forwards = Forwards()
        for host in self.groups.values():
            host.io = []
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
                stream(self.options.seed, f"storage.{self.index}.{group}"), log_is_data=True
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
        self.tombstones.add(group)
        del self.disks[group]
        self._recovered.pop(group, None)

    # Stepping ----------------------------------------------------------------------------

    def step(self, tick: int, host: GroupHost, event: Event) -> None:
        assert self.alive
        if host.ticks_owed:
            self._pay_ticks(tick, host)  # time passes before anything else happens
        self._step(tick, host, event)
        self._admit_queued(tick, host)

    def _step(self, tick: int, host: GroupHost, event: Event) -> None:
        replica = host.replica
        actions = replica.step(event)
        self._execute(tick, host, actions)
        if not (replica.status is Status.NORMAL and replica.is_primary):
            host.requests.primary_lost()
        self.observer.on_step(self.index, host.group, replica)
        if host.group == METADATA_GROUP and replica.commit_min != self._reconciled_op:
            self._reconcile(tick)

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
            submission.body,
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

    def tick(self, tick: int) -> None:
        self._expire_waiting(tick)
        self._serve_reads(tick)
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
        """Report every disk completion due by ``tick``, group by group, in order."""
        for host in self._hosts():
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
                disk.write_checkpoint(action.op, action.snapshot)
        machine = host.machine.inner
        if execution.rebuild_index and isinstance(machine, PartitionMachine):
            machine.rebuild_index()  # the repaired messages can be polled again

    def _send_to_replica(self, group: int, replica: int, message: Message) -> None:
        frame = encode_message(message, sender=self.index)
        self.outbox.append((replica, ReplicaFrame(group, frame)))

    def _deliver(self, host: GroupHost, submission: Submission, outcome: Outcome) -> None:
        """Send ``outcome`` to the client that sent ``submission``."""
        checksum = submission.request_checksum
        self._reply(host, submission.client_id, submission.request, checksum, outcome)

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

    # Admission ---------------------------------------------------------------------------

    def on_client_request(self, tick: int, source: int, request: ClientRequest) -> None:
        """Admit a client request as the runtime does, or answer it at once."""
        try:
            self._admit(tick, source, request)
        except (StateError, wire.ProtocolError) as error:
            self._answer(source, request, int(error.code))

    def _admit(self, tick: int, source: int, request: ClientRequest) -> None:
        if request.code == SYSTEM_CODE:
            operation = int.from_bytes(request.payload[:4], "little")
            body = request.payload[4:]
            checksum = internal_checksum(body)
            self._propose(tick, METADATA_GROUP, request, checksum, operation, body)
            return
        code = CommandCode(request.code)
        route = ROUTES.get(code)
        handler = None if route is None else self._handlers.get(route)
        if handler is None:
            raise StateError(ErrorCode.INVALID_COMMAND, f"the simulator does not send {code}")
        metadata = self.groups[METADATA_GROUP].replica
        if route is not Route.LOGIN:
            if not self._check_session(tick, source, request):
                return
            self.observer.on_admitted(
                self.index, request.client_id, request.session, metadata.commit_min
            )
            if metadata.commit_min < self._must_see(request.client_id, METADATA_GROUP):
                # Read your writes: this node checks requests against its metadata only
                # once it applied what the connection was told. The runtime waits for it
                # (a read index); here the client is refused and asks again.
                self._answer(source, request, int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
                return
        payload = wire.COMMANDS[code].decode_request(request.payload)
        handler(tick, source, request, code, payload)

    def _check_session(self, tick: int, source: int, request: ClientRequest) -> bool:
        """Carry out ``broker.core.sessions.check_session`` as the runtime's node does:
        True to go on, else the request is answered (refused, or the client evicted and
        its connection closed)."""
        context = self._connection(request.client_id)
        view = self._metadata_view()
        verdict = check_session(context, request.session, request.client_id, view)
        if isinstance(verdict, SessionWait):
            # The runtime waits (bounded) until it applied the session, then asks again;
            # here the client is refused and asks again, as at the read barrier.
            verdict = SessionRefused(int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
        if isinstance(verdict, SessionRefused):
            self._answer(source, request, verdict.status)
            return False
        if isinstance(verdict, SessionEvicted):
            # An eviction frame, then the transport closes the connection.
            self._answer(source, request, 0, error=ClientError.NO_SESSION.value)
            self.connection_closed(tick, request.client_id)
            return False
        assert isinstance(verdict, SessionOk)
        context.client_id = request.client_id
        return True

    def _metadata_view(self) -> MetadataView:
        replica = self.groups[METADATA_GROUP].replica
        is_primary = replica.status is Status.NORMAL and replica.is_primary
        known_op = max(replica.op, replica.commit_max)
        return MetadataView(replica.commit_min, known_op, is_primary, self.metadata_state().session)

    def connection_closed(self, tick: int, client_id: int) -> None:
        """The client's connection to this node closed: end the session it registered,
        through the metadata group, as the runtime's ``connection_closed`` does."""
        context = self.connections.pop(client_id, None)
        if context is None:
            return  # never opened by this process
        self.connections_closed += 1
        session = session_to_end(context, self.metadata_state().session)
        if session:
            self.system.queue.append(EndSession(session))
            self._run_system(tick)

    def _run_system(self, tick: int) -> None:
        """Submit the system client's next request, if it has one and none in flight:
        its register first, then the command, as the runtime's ``SystemRunner`` does."""
        system = self.system
        if system.busy or not system.queue:
            return
        client = system.client
        registering = client.session == 0
        if registering:
            call = client.register()
        else:
            operation, body = encode_command(system.queue[0])
            call = client.call(int(operation), bytes(body), tick * TICK_US)
            system.attempts += 1

        def deliver(outcome: Outcome) -> None:
            # Only record it: the next request goes at the next tick, never from inside
            # the step that delivered this outcome.
            system.busy = False
            if registering:
                if not client.registered(outcome):
                    system.queue.popleft()  # no session: the runtime gives up the command
                    system.attempts = 0
                return
            if client.answered(outcome, system.attempts):
                system.queue.popleft()
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
        self._submit(tick, self.groups[METADATA_GROUP], submission)

    def _login(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
    ) -> None:
        assert isinstance(payload, wire.LoginRegister)
        state = self.metadata_state()
        register = authenticate(state, request.client_id, payload.username, payload.password)
        operation, body = encode_command(register)
        checksum = register_checksum(register.user_id)
        context = self._connection(request.client_id)
        replica = self.groups[METADATA_GROUP].replica
        known_before = max(replica.op, replica.commit_max)

        def bind(outcome: Outcome) -> None:
            if not isinstance(outcome, Replied):
                return
            try:
                wire.split_result(Operation.REGISTER, outcome.body)
            except wire.ServerRejected:
                return  # no session: the connection stays as it was
            logged_in(context, request.client_id, outcome.op, known_before=known_before)

        self._propose(
            tick, METADATA_GROUP, request, checksum, operation, body, session=0, then=bind
        )

    def _logout(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
    ) -> None:
        context = self._connection(request.client_id)

        def unbind(outcome: Outcome) -> None:
            if isinstance(outcome, Replied):
                logged_out(context)

        self._metadata_write(tick, source, request, code, payload, then=unbind)

    def _metadata_write(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
        *,
        then: Callable[[Outcome], None] | None = None,
    ) -> None:
        state = self.metadata_state()
        write = admit_metadata_write(state, code, payload, request.session, None)
        checksum = request_checksum(code, payload, request.payload)
        if isinstance(write, Denied):
            # A retry of a committed request gets its committed reply, as on a real node.
            host = self.groups[METADATA_GROUP]
            replica = host.replica
            cached = committed_retry(
                replica.client_table,
                request.client_id,
                request.session,
                request.request,
                write,
                checksum,
            )
            if cached is None:
                raise StateError(ErrorCode(write.status), write.refusal)
            replied = Replied(cached.op, replica.commit_max, replica.view, cached.reply)
            if then is not None:
                then(replied)
            self._reply(host, request.client_id, request.request, checksum, replied)
            return
        self._propose(
            tick, METADATA_GROUP, request, checksum, write.operation, write.body, then=then
        )

    def _send(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
    ) -> None:
        assert isinstance(payload, wire.SendMessages)
        state = self.metadata_state()
        write = self._balancer.admit_send(state, payload, request.payload, request.session)
        self._propose_partition(tick, request, code, payload, write)

    def _offset_write(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
    ) -> None:
        assert isinstance(payload, wire.StoreConsumerOffset | wire.DeleteConsumerOffset)
        state = self.metadata_state()
        write = admit_offset_write(state, code, payload, request.session)
        self._propose_partition(tick, request, code, payload, write)

    def _propose_partition(
        self,
        tick: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
        write: PartitionWrite,
    ) -> None:
        route = write.route
        group = self._partition_group(route.stream_id, route.topic_id, route.partition_id)
        checksum = request_checksum(code, payload, request.payload)
        self._propose(tick, group, request, checksum, write.operation, write.body)

    def _poll(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
    ) -> None:
        assert isinstance(payload, wire.PollMessages)
        admitted = admit_poll(self.metadata_state(), payload, request.session)
        checksum = request_checksum(code, payload, request.payload)
        if isinstance(admitted, Resync):
            body = b"".join(bytes(part) for part in resync_reply())
            self._answer(source, request, 0, body, checksum=checksum)
            return
        route = admitted.route
        group = self._partition_group(route.stream_id, route.topic_id, route.partition_id)
        replica = self.groups[group].replica
        if not readable(replica, self._must_see(request.client_id, group)) or not (
            replica.log_whole
        ):
            # In a view change, restarted and not re-committed yet, behind what this
            # connection was told, or committed messages missing here until repaired: the
            # runtime's read barrier would wait, then refuse; the client reads again.
            self._answer(source, request, int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            return
        if not replica.is_primary:
            self.backup_polls += 1
        partition = self.groups[group].machine.inner
        assert isinstance(partition, PartitionMachine) and route.consumer is not None
        parts, _ = partition.poll(payload, route.consumer)
        body = b"".join(bytes(part) for part in parts)
        first_offset = partition.state.first_offset
        self._answer(
            source, request, 0, body, checksum=checksum, first_offset=first_offset, group=group
        )

    def _offset_read(
        self,
        tick: int,
        source: int,
        request: ClientRequest,
        code: CommandCode,
        payload: wire.RequestPayload,
    ) -> None:
        """A stored consumer offset, behind a fresh read barrier (it may have been stored
        through another node), as the runtime's: the replica asks for a confirmed read
        index first (``broker.core.reads``; a backup its primary and enough of the view, a
        primary enough of its backups), then the read waits, bounded, until it applied
        that far."""
        assert isinstance(payload, wire.GetConsumerOffset)
        route = route_offset(self.metadata_state(), payload, request.session)
        group = self._partition_group(route.stream_id, route.topic_id, route.partition_id)
        replica = self.groups[group].replica
        assert route.consumer is not None
        read = PendingRead(
            source,
            request,
            request_checksum(code, payload, request.payload),
            group,
            route.consumer,
            self._must_see(request.client_id, group),
            tick + READ_WAIT_TICKS,
        )
        if not readable(replica, 0):
            # Restarted or in a view change: the runtime would wait for normal status
            # first; here the client is refused and reads again.
            self._answer(source, request, int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            return
        self._read_token += 1
        token = self._read_token
        self._reads[token] = read
        read.round = self._read_index_round(replica)
        commit = read.round.commit
        if commit is not None:  # a lone replica: nobody to ask
            read.target = max(read.must_see, commit)
            self._serve_read(token, read)
            return
        for peer in read.round.peers():
            self.outbox.append((peer, ReadIndexAsk(token, group, replica.view)))

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
        del tick
        read = self._reads.get(reply.token)
        if read is None or read.round is None or read.target is not None:
            return  # answered, expired, or decided already
        read.round.answered(source, reply.in_view, reply.commit)
        if read.round.failed:
            del self._reads[reply.token]
            self._answer(read.source, read.request, int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            return
        commit = read.round.commit
        if commit is not None:
            read.target = max(read.must_see, commit)
            self._serve_read(reply.token, read)

    def _serve_reads(self, tick: int) -> None:
        """Serve every waiting read whose barrier holds now; refuse those past their
        deadline."""
        for token, read in list(self._reads.items()):
            if not self._serve_read(token, read) and tick >= read.deadline:
                del self._reads[token]
                refused = int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
                self._answer(read.source, read.request, refused)

    def _serve_read(self, token: int, read: PendingRead) -> bool:
        """Serve ``read`` if its target is decided and applied here; whether it was."""
        host = self.groups.get(read.group)
        if host is None:
            del self._reads[token]  # the partition went: the client is told so
            status = int(ErrorCode.PARTITION_NOT_FOUND)
            self._answer(read.source, read.request, status, checksum=read.checksum)
            return True
        replica = host.replica
        if read.target is None or not readable(replica, read.target):
            return False
        del self._reads[token]
        if not replica.is_primary:
            self.fresh_reads += 1
        partition = host.machine.inner
        assert isinstance(partition, PartitionMachine)
        body = partition.get_consumer_offset(read.consumer)
        self._answer(
            read.source,
            read.request,
            0,
            body,
            checksum=read.checksum,
            group=read.group,
            read_op=replica.commit_min,
        )
        return True

    def metadata_state(self) -> MetadataState:
        metadata = self.groups[METADATA_GROUP].machine.inner
        assert isinstance(metadata, MetadataMachine)
        return metadata.state

    def _partition_group(self, stream_id: int, topic_id: int, partition_id: int) -> int:
        """The hosted group of a partition the metadata names (it always is hosted here:
        reconciling follows every applied metadata op at once)."""
        group = self._by_partition.get((stream_id, topic_id, partition_id))
        if group is None:
            raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(partition_id))
        return group

    def workload_group(self) -> int | None:
        """The group of the workload topic's first partition, if hosted here."""
        return self._by_partition.get((STREAM_ID, TOPIC_ID, 0))

    def _propose(
        self,
        tick: int,
        group: int,
        request: ClientRequest,
        checksum: bytes,
        operation: int,
        body: bytes,
        *,
        session: int | None = None,
        then: Callable[[Outcome], None] | None = None,
    ) -> None:
        """Submit a client's request to ``group``; ``then`` sees its outcome first, as
        the runtime's handler does after its submission returns."""
        host = self.groups[group]

        def deliver(outcome: Outcome) -> None:
            if then is not None:
                then(outcome)
            self._deliver(host, submission, outcome)

        submission = Submission(
            request.client_id,
            request.session if session is None else session,
            request.request,
            int(operation),
            bytes(body),
            tick * TICK_US,
            deliver,
            checksum,
        )
        self._submit(tick, host, submission)

    def _submit(self, tick: int, host: GroupHost, submission: Submission) -> None:
        """Hand ``submission`` to its group's requests, as the runtime's submitter does,
        which stops waiting for it at its deadline."""
        host.requests.submit(submission)
        self._waiting.append((tick + REQUEST_TIMEOUT_TICKS, host, submission))
        if host.ticks_owed:
            self._pay_ticks(tick, host)  # time passes before anything else happens
        self._admit_queued(tick, host)
