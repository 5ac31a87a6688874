"""A simulated node: one replica of every group, its disks, and the runtime's admission.

Purpose: host, on one simulated machine, a ``consensus.Replica`` of the metadata group and
of every partition group, each with the real state machine (``MetadataMachine`` or
``PartitionMachine``) and the real journal over a ``MemoryStorage`` (:mod:`sim.disk`);
execute the replicas' actions the way the runtime must (the host contract of
``consensus.protocols``); turn client requests into consensus requests the way the
runtime's admission does, with the same ``broker.state`` functions (``admission``,
``routing``, ``partition_machine``); and queue, admit and answer them with the runtime's
own ``broker.core.groups.GroupRequests``, so a reply reaches exactly the request it
belongs to here as on a real node.

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
   ``REQUEST_TIMEOUT_TICKS``, 58 or 59 as the runtime's submitter says. A backup has
   nobody to forward to and refuses with 58.

Theory of operation: group 0 is the metadata group; group ``1 + p`` is partition ``p`` of
stream 0, topic 0, which the workload's operator creates first. Partition groups exist on
every node from the start, as if the runtime had already reconciled them with the
metadata; until the topic exists admission refuses sends with "topic not found", and the
client retries. The node's clock is ``tick * TICK_US``; a primary makes it monotonic.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

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
from broker.core.reconcile import METADATA_GROUP
from broker.state.admission import authenticate, metadata_command
from broker.state.codec import encode_command
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import MetadataCommand
from broker.state.metadata_machine import MetadataMachine
from broker.state.partition_machine import PartitionMachine, resolved_offset_request
from broker.state.routing import route_offset, route_poll, route_send
from consensus.config import ReplicaConfig
from consensus.events import (
    Action,
    AppendToJournal,
    Event,
    PrepareSynced,
    PrepareWritten,
    RepairJournal,
    ReplyToClient,
    SendToReplica,
    SyncJournal,
    Ticked,
    TruncateJournal,
    WriteCheckpoint,
    WriteSuperblock,
)
from consensus.messages import Prepare, encode_message
from consensus.protocols import DurableState, Prepared
from consensus.replica import Replica, Status
from sdk import wire
from sdk.wire.codes import CommandCode, IggyErrorCode, Operation
from sim.disk import Disk
from sim.network import ClientReply, ClientRequest, Payload, ReplicaFrame
from sim.options import Options
from sim.rng import stream

TICK_US: Final = 10_000
"""One tick is 10 ms of simulated wall clock, as in production."""
REQUEST_TIMEOUT_TICKS: Final = REQUEST_TIMEOUT_US // TICK_US
"""How long a request waits for its group before it is told 58 or 59, as in production."""
STREAM_ID: Final = 0
TOPIC_ID: Final = 0
SYSTEM_CODE: Final = 0
"""``ClientRequest.code`` of a runtime-internal metadata command (bootstrap only)."""

# Client commands that become metadata ops, and those that become partition ops.
_METADATA_CODES: Final = (
    CommandCode.CREATE_STREAM,
    CommandCode.CREATE_TOPIC,
    CommandCode.CREATE_CONSUMER_GROUP,
    CommandCode.JOIN_CONSUMER_GROUP,
    CommandCode.LEAVE_CONSUMER_GROUP,
)


class Observer(Protocol):
    """What the checkers see of a node (read-only hooks)."""

    def on_apply(self, node: int, group: int, prepare: Prepare, reply: bytes) -> None: ...

    def on_restore(self, node: int, group: int) -> None: ...

    def on_step(self, node: int, group: int, replica: Replica) -> None: ...


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
        self.groups: list[GroupHost] = []
        for group in range(1 + options.partition_count):
            disk = Disk(
                stream(options.seed, f"storage.{index}.{group}"),
                log_is_data=group != METADATA_GROUP,
            )
            self.groups.append(self._host(group, disk, durable=None, checkpoint=None))

    # Construction ------------------------------------------------------------------------

    def _host(
        self, group: int, disk: Disk, *, durable: DurableState | None, checkpoint: bytes | None
    ) -> GroupHost:
        inner: StateMachine
        if group == METADATA_GROUP:
            inner = MetadataMachine()
        else:
            inner = PartitionMachine(STREAM_ID, TOPIC_ID, group - 1, disk)
        node = self.index
        machine = _Observed(
            inner,
            lambda prepare, reply: self.observer.on_apply(node, group, prepare, reply),
            lambda: self.observer.on_restore(node, group),
        )
        prng = stream(self.options.seed, f"replica.{node}.{group}.{self.incarnation}")
        replica = self._make_replica(group, disk, machine, prng, durable, checkpoint)
        return GroupHost(group, disk, machine, replica)

    def _make_replica(
        self,
        group: int,
        disk: Disk,
        machine: _Observed,
        prng: random.Random,
        durable: DurableState | None,
        checkpoint: bytes | None,
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
            persisted=self.persisted(group),
            durable=durable,
            checkpoint=checkpoint,
            register_operation=Operation.REGISTER if group == METADATA_GROUP else None,
            session_live=(
                machine.inner.session_live if isinstance(machine.inner, MetadataMachine) else None
            ),
            config=config,
        )

    def persisted(self, group: int) -> bool:
        # The metadata group is small and rarely written: it always acks synced ops. The
        # partition groups use the durability the swarm chose for the topic.
        return True if group == METADATA_GROUP else self.options.persisted

    # Crash and restart -------------------------------------------------------------------

    def crash(self, *, power_loss: bool) -> None:
        assert self.alive
        self.alive = False
        self.outbox = []
        self._waiting.clear()  # the connections that waited are gone with the process
        for host in self.groups:
            host.io = []
            if power_loss:
                host.disk.power_loss()

    def restart(self, tick: int) -> None:
        assert not self.alive
        self.alive = True
        self.incarnation += 1
        restarted: list[GroupHost] = []
        for host in self.groups:
            durable, checkpoint = host.disk.reopen()
            new = self._host(host.group, host.disk, durable=durable, checkpoint=checkpoint)
            restarted.append(new)
        self.groups = restarted
        for host in self.groups:
            # The first step flushes the restart's own actions (truncation, RequestStartView).
            self.step(tick, host, Ticked())

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

    def _admit_queued(self, tick: int, host: GroupHost) -> None:
        """Carry out ``GroupRequests.take`` as the runtime's group host does. Nobody
        forwards here: a backup refuses with 58, as a node without peers would."""
        requests = host.requests
        while (taken := requests.take(host.replica, disk_full=False)) is not None:
            submission = taken.submission
            if isinstance(taken, Forward):
                submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            elif not isinstance(taken, RefusedDiskFull):
                self._step(tick, host, submission.event())
                requests.settle(submission)

    def tick(self, tick: int) -> None:
        self._expire_waiting(tick)
        if not self.options.lazy_ticks:
            for host in self.groups:
                self.step(tick, host, Ticked())
            return
        # As the runtime does: step a replica only on the tick a timeout with something
        # to do fires; the ticks before it are owed and paid in one Ticked(count), first
        # thing. (No cap on what is owed here: a lone replica may owe a whole run.)
        for host in self.groups:
            host.ticks_owed += 1
            if host.ticks_owed >= host.replica.ticks_until_due():
                self._pay_ticks(tick, host)
                self._admit_queued(tick, host)

    def _expire_waiting(self, tick: int) -> None:
        waiting = self._waiting
        while waiting and (waiting[0][0] <= tick or waiting[0][2].done):
            _, host, submission = waiting.popleft()
            if not submission.done:
                host.requests.abandon(submission)
                submission.deliver(timed_out(submission))

    def _pay_ticks(self, tick: int, host: GroupHost) -> None:
        while host.ticks_owed:
            count = min(host.ticks_owed, host.replica.ticks_until_due())
            host.ticks_owed -= count
            self._step(tick, host, Ticked(count))

    def complete_io(self, tick: int) -> None:
        """Report every disk completion due by ``tick``, group by group, in order."""
        for host in self.groups:
            while host.io and host.io[0][0] <= tick and self.alive:
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
        disk = host.disk
        repaired = False
        for action in actions:
            if isinstance(action, SendToReplica):
                frame = encode_message(action.message, sender=self.index)
                self.outbox.append((action.replica, ReplicaFrame(host.group, frame)))
            elif isinstance(action, ReplyToClient):
                replica = host.replica
                host.requests.replied(action, commit=replica.commit_max, view=replica.view)
            elif isinstance(action, AppendToJournal):
                disk.append(action.prepare)
                host.requests.prepared(action.prepare.header, primary=host.replica.is_primary)
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
                repaired = True
            else:
                assert isinstance(action, WriteCheckpoint)
                disk.write_checkpoint(action.op, action.snapshot)
        machine = host.machine.inner
        if repaired and host.replica.log_whole and isinstance(machine, PartitionMachine):
            # After every action of the step: the ops the replica applied right after the
            # last repair are appended by then, so the index reaches down past them.
            machine.rebuild_index()  # the repaired messages can be polled again

    def _deliver(self, host: GroupHost, submission: Submission, outcome: Outcome) -> None:
        """Send ``outcome`` to the client that sent ``submission``, as its connection
        would carry it: a refusal names the primary of the group's view here, as the
        runtime's status replies do, so the client can route again."""
        endpoint = self.client_endpoints.get(submission.client_id)
        if endpoint is None:
            return  # the bootstrap's system client id: nobody waits for it
        op, status, body, error, primary = 0, 0, b"", "", -1
        if isinstance(outcome, Replied):
            op, body = outcome.op, outcome.body
        elif isinstance(outcome, Refused):
            status, primary = outcome.status, host.replica.primary
        else:
            assert isinstance(outcome, SessionLost)
            error = outcome.error.value
        checksum = submission.request_checksum
        client_id, request = submission.client_id, submission.request
        reply = ClientReply(client_id, request, op, status, body, error, checksum, primary=primary)
        self.outbox.append((endpoint, reply))

    # Admission ---------------------------------------------------------------------------

    def on_client_request(self, tick: int, source: int, request: ClientRequest) -> None:
        """Admit a client request as the runtime does, or answer it at once."""
        try:
            self._admit(tick, source, request)
        except StateError as error:
            self.outbox.append(
                (source, ClientReply(request.client_id, request.request, 0, int(error.code), b""))
            )
        except wire.ProtocolError as error:
            self.outbox.append(
                (source, ClientReply(request.client_id, request.request, 0, int(error.code), b""))
            )

    def _admit(self, tick: int, source: int, request: ClientRequest) -> None:
        metadata = self.groups[METADATA_GROUP].machine.inner
        assert isinstance(metadata, MetadataMachine)
        state = metadata.state
        code = request.code
        if code == SYSTEM_CODE:
            operation = int.from_bytes(request.payload[:4], "little")
            body = request.payload[4:]
            checksum = internal_checksum(body)
            self._propose(tick, METADATA_GROUP, request, checksum, operation, body)
            return
        spec = wire.COMMANDS[CommandCode(code)]
        payload = spec.decode_request(request.payload)
        if code == CommandCode.LOGIN_REGISTER:
            assert isinstance(payload, wire.LoginRegister)
            register = authenticate(state, request.client_id, payload.username, payload.password)
            operation, body = encode_command(register)
            checksum = register_checksum(register.user_id)
            self._propose(tick, METADATA_GROUP, request, checksum, operation, body, session=0)
            return
        checksum = request_checksum(CommandCode(code), payload, request.payload)
        if code in _METADATA_CODES:
            command: MetadataCommand = metadata_command(CommandCode(code), payload)
            refusal = state.authorize(command, request.session)
            if refusal is not None:
                raise StateError(refusal)
            operation, body = encode_command(command)
            self._propose(tick, METADATA_GROUP, request, checksum, operation, body)
            return
        if code == CommandCode.SEND_MESSAGES:
            assert isinstance(payload, wire.SendMessages)
            route = route_send(state, payload, request.session, 0)
            group = self._partition_group(route.stream_id, route.topic_id, route.partition_id)
            self._propose(tick, group, request, checksum, Operation.SEND_MESSAGES, request.payload)
            return
        if code == CommandCode.STORE_CONSUMER_OFFSET:
            assert isinstance(payload, wire.StoreConsumerOffset)
            route = route_offset(state, payload, request.session)
            group = self._partition_group(route.stream_id, route.topic_id, route.partition_id)
            user_id = state.session(request.session).user_id
            body = resolved_offset_request(payload, route, user_id)
            self._propose(tick, group, request, checksum, Operation.STORE_CONSUMER_OFFSET, body)
            return
        if code == CommandCode.POLL_MESSAGES:
            assert isinstance(payload, wire.PollMessages)
            route = route_poll(state, payload, request.session)
            group = self._partition_group(route.stream_id, route.topic_id, route.partition_id)
            if not self.groups[group].replica.log_whole:
                # Committed messages are missing here until repaired: read elsewhere.
                status = int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
                self.outbox.append(
                    (source, ClientReply(request.client_id, request.request, 0, status, b""))
                )
                return
            partition = self.groups[group].machine.inner
            assert isinstance(partition, PartitionMachine) and route.consumer is not None
            parts, _ = partition.poll(payload, route.consumer)
            body = b"".join(bytes(part) for part in parts)
            first_offset = partition.state.first_offset
            reply = ClientReply(
                request.client_id,
                request.request,
                0,
                0,
                body,
                request_checksum=checksum,
                first_offset=first_offset,
            )
            self.outbox.append((source, reply))
            return
        raise StateError(ErrorCode.INVALID_COMMAND, f"the simulator does not send {code}")

    def _partition_group(self, stream_id: int, topic_id: int, partition_id: int) -> int:
        if (stream_id, topic_id) != (STREAM_ID, TOPIC_ID) or not (
            0 <= partition_id < self.options.partition_count
        ):
            # Only the workload's own topic has partition groups in the simulator.
            raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(partition_id))
        return 1 + partition_id

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
    ) -> None:
        host = self.groups[group]

        def deliver(outcome: Outcome) -> None:
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
        host.requests.submit(submission)
        self._waiting.append((tick + REQUEST_TIMEOUT_TICKS, host, submission))
        if host.ticks_owed:
            self._pay_ticks(tick, host)  # time passes before anything else happens
        self._admit_queued(tick, host)
