"""A deterministic cluster of replicas of one group over an in-memory message queue.

Each node hosts a ``Replica`` with a ``MemoryLog`` and a ``LedgerStateMachine`` and executes
its actions the way the runtime must: journal writes complete (and are reported) on the
next pump, syncs too, superblock and checkpoint writes are durable at once. Every message
goes through the wire codec. The network can drop, duplicate, reorder and partition;
nodes can crash (keeping written data, or losing unsynced data) and restart.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from consensus.config import ReplicaConfig
from consensus.events import (
    Action,
    AppendToJournal,
    Event,
    MessageReceived,
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
from consensus.messages import Message, decode_message, encode_message
from consensus.protocols import DurableState
from consensus.replica import Replica, Status
from consensus.testing import LedgerStateMachine, MemoryLog, client_request

REGISTER: int = 1
OPERATION: int = 7
TEST_CONFIG = ReplicaConfig(
    normal_timeout_ticks=60,
    view_change_timeout_ticks=80,
    view_change_resend_ticks=15,
    prepare_timeout_ticks=8,
    commit_interval_ticks=10,
    recovering_timeout_ticks=20,
    state_transfer_timeout_ticks=20,
    repair_timeout_ticks=5,
)


@dataclass
class Node:
    index: int
    replica: Replica
    log: MemoryLog
    state_machine: LedgerStateMachine
    superblock: DurableState | None = None
    checkpoint: bytes | None = None
    alive: bool = True
    # Host completions not yet reported back to the replica.
    completions: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class Envelope:
    source: int
    target: int
    frame: bytes


class Cluster:
    """N replicas of group ``group`` and the network between them."""

    def __init__(
        self,
        replica_count: int,
        *,
        group: int = 0,
        persisted: bool = False,
        seed: int = 0,
        config: ReplicaConfig = TEST_CONFIG,
        register_operation: int | None = None,
        replica_class: type[Replica] = Replica,
        ledger: Callable[[MemoryLog], LedgerStateMachine] | None = None,
    ) -> None:
        self.replica_class = replica_class
        # Makes a node's state machine over its log (a plain ledger unless told).
        self.ledger = ledger
        self.replica_count = replica_count
        self.group = group
        self.persisted = persisted
        self.config = config
        self.register_operation = register_operation
        self.prng = random.Random(seed)
        self.network: list[Envelope] = []
        self.replies: list[ReplyToClient] = []
        # Links that drop everything: (source, target).
        self.blocked: set[tuple[int, int]] = set()
        self.drop_probability = 0.0
        self.duplicate_probability = 0.0
        self.reorder = False
        self.message_filter: Callable[[int, int, Message], bool] | None = None
        self.nodes: list[Node] = []
        for index in range(replica_count):
            log = MemoryLog()
            state_machine = self._make_ledger(log)
            replica = self._make_replica(index, log, state_machine, durable=None, checkpoint=None)
            self.nodes.append(Node(index, replica, log, state_machine))
            self.nodes[-1].superblock = DurableState(0, 0, 0, 0)

    def _make_ledger(self, log: MemoryLog) -> LedgerStateMachine:
        return LedgerStateMachine() if self.ledger is None else self.ledger(log)

    def _make_replica(
        self,
        index: int,
        log: MemoryLog,
        state_machine: LedgerStateMachine,
        *,
        durable: DurableState | None,
        checkpoint: bytes | None,
    ) -> Replica:
        return self.replica_class(
            self.group,
            index,
            self.replica_count,
            log,
            state_machine,
            random.Random(self.prng.getrandbits(64)),
            persisted=self.persisted,
            durable=durable,
            checkpoint=checkpoint,
            register_operation=self.register_operation,
            config=self.config,
        )

    # Driving ------------------------------------------------------------------------------

    def step(self, index: int, event: Event) -> list[Action]:
        node = self.nodes[index]
        assert node.alive
        actions = node.replica.step(event)
        self._execute(node, actions)
        return actions

    def _execute(self, node: Node, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendToReplica):
                frame = encode_message(action.message, sender=node.index)
                self.network.append(Envelope(node.index, action.replica, frame))
            elif isinstance(action, AppendToJournal):
                node.log.append(action.prepare)
                node.completions.append(PrepareWritten(action.prepare.op, action.prepare.checksum))
            elif isinstance(action, SyncJournal):
                # The sync runs in the background: a crash before it completes loses it.
                node.completions.append(PrepareSynced(action.op, action.checksum))
            elif isinstance(action, TruncateJournal):
                node.log.truncate(action.after_op)
            elif isinstance(action, RepairJournal):
                node.log.repair(action.prepare)
            elif isinstance(action, WriteSuperblock):
                node.superblock = action.state
            elif isinstance(action, WriteCheckpoint):
                node.checkpoint = action.snapshot
                node.log.checkpoint(action.op, action.journal_restart_op)
            else:
                assert isinstance(action, ReplyToClient)
                self.replies.append(action)

    def deliver(self, envelope: Envelope) -> None:
        target = self.nodes[envelope.target]
        if not target.alive:
            return  # packets already sent by a node that crashed since are still delivered
        if (envelope.source, envelope.target) in self.blocked:
            return
        message = decode_message(envelope.frame)
        if self.message_filter is not None and not self.message_filter(
            envelope.source, envelope.target, message
        ):
            return
        self.step(envelope.target, MessageReceived(message))

    def pump(self) -> int:
        """Deliver everything in flight and every host completion, once; return the count."""
        count = 0
        for node in self.nodes:
            if node.alive and node.completions:
                completions, node.completions = node.completions, []
                for event in completions:
                    if isinstance(event, PrepareSynced):
                        node.log.sync()
                    self.step(node.index, event)
                    count += 1
        in_flight, self.network = self.network, []
        if self.reorder:
            self.prng.shuffle(in_flight)
        for envelope in in_flight:
            if self.drop_probability and self.prng.random() < self.drop_probability:
                continue
            self.deliver(envelope)
            if self.duplicate_probability and self.prng.random() < self.duplicate_probability:
                self.network.append(envelope)
            count += 1
        return count

    def complete_io(self) -> None:
        """Report every finished journal write and sync back to its replica."""
        for node in self.nodes:
            while node.alive and node.completions:
                completions, node.completions = node.completions, []
                for event in completions:
                    if isinstance(event, PrepareSynced):
                        node.log.sync()
                    self.step(node.index, event)

    def tick_node(self, index: int) -> None:
        self.step(index, Ticked())

    def settle(self, rounds: int = 50) -> None:
        """Pump until quiet (or ``rounds`` passes)."""
        for _ in range(rounds):
            if self.pump() == 0:
                return

    def tick(self, ticks: int = 1) -> None:
        for _ in range(ticks):
            for node in self.nodes:
                if node.alive:
                    self.step(node.index, Ticked())
            self.pump()

    def run_until(self, condition: Callable[[], bool], ticks_max: int = 3000) -> None:
        self.settle()
        for _ in range(ticks_max):
            if condition():
                return
            self.tick()
        assert condition(), "condition not reached in time"

    # Clients ------------------------------------------------------------------------------

    def request(
        self,
        client_id: int,
        request: int,
        body: bytes = b"x",
        *,
        session: int = 1,
        operation: int = OPERATION,
        to: int | None = None,
        timestamp_us: int = 1_000,
    ) -> None:
        """Send a client request to ``to`` (default: every live replica, as a retry does)."""
        targets = [to] if to is not None else [n.index for n in self.nodes if n.alive]
        for index in targets:
            if self.nodes[index].alive:
                self.step(
                    index,
                    client_request(client_id, session, request, operation, body, timestamp_us),
                )

    def replies_for(self, client_id: int, request: int) -> list[ReplyToClient]:
        return [r for r in self.replies if r.client_id == client_id and r.request == request]

    # Faults -------------------------------------------------------------------------------

    def crash(self, index: int, *, lose_unsynced: bool = False) -> None:
        node = self.nodes[index]
        node.alive = False
        node.completions = []
        self.network = [e for e in self.network if e.target != index]
        if lose_unsynced:
            node.log.lose_unsynced()

    def restart(self, index: int) -> None:
        node = self.nodes[index]
        assert not node.alive
        state_machine = self._make_ledger(node.log)
        node.state_machine = state_machine
        node.replica = self._make_replica(
            index,
            node.log,
            state_machine,
            durable=node.superblock,
            checkpoint=node.checkpoint,
        )
        node.alive = True
        # The first step flushes the restart's own actions (truncation, RequestStartView).
        self.step(index, Ticked())

    def isolate(self, index: int) -> None:
        for other in range(self.replica_count):
            if other != index:
                self.blocked.add((index, other))
                self.blocked.add((other, index))

    def heal(self) -> None:
        self.blocked.clear()
        self.message_filter = None
        self.drop_probability = 0.0
        self.duplicate_probability = 0.0

    # Observations -------------------------------------------------------------------------

    def primary(self) -> Node | None:
        """The live primary in normal status with the highest view, if any."""
        candidates = [
            n
            for n in self.nodes
            if n.alive and n.replica.status is Status.NORMAL and n.replica.is_primary
        ]
        return max(candidates, key=lambda n: n.replica.view) if candidates else None

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.alive]

    def committed(self, client_id: int, request: int) -> bool:
        return bool(self.replies_for(client_id, request))

    def check_safety(self) -> None:
        """Agreement on applied ops, and no client request applied twice on any replica."""
        histories = [n.state_machine.applied for n in self.nodes]
        longest = max(histories, key=len)
        for history in histories:
            assert history == longest[: len(history)], "replicas disagree on a committed op"
        for history in histories:
            seen: set[tuple[int, int, int]] = set()
            for entry in history:
                key = (entry.client_id, entry.session, entry.request)
                assert key not in seen, f"request applied twice: {key}"
                seen.add(key)
            assert [e.op for e in history] == list(range(1, len(history) + 1))
        # Every reply a client got matches the op that committed its request.
        for reply in self.replies:
            if reply.error is not None:
                continue
            if reply.op <= len(longest):
                entry = longest[reply.op - 1]
                assert (entry.client_id, entry.request) == (reply.client_id, reply.request)

    def converged(self) -> bool:
        """Every live replica is normal in one view and has applied every op of the log."""
        live = self.live()
        views = {n.replica.view for n in live}
        statuses = {n.replica.status for n in live}
        commits = {n.replica.commit_min for n in live}
        primary = self.primary()
        return (
            len(views) == 1
            and statuses == {Status.NORMAL}
            and primary is not None
            and commits == {primary.replica.commit_max}
            and primary.replica.op == primary.replica.commit_max
        )
