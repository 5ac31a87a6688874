"""Deliberately broken replicas and nodes, to prove the simulator's checkers bite.

Purpose: each replica class overrides one of the four decision points
``consensus.replica`` isolates for this purpose and makes the classic mistake there; each
node class makes one mistake of the node layer. They live in the
simulator, never in production code, and are selected with ``viewstream-sim --plant``
and by ``tests/sim/test_planted_bugs.py``.

1. ``longest-log``: the new primary takes the DoViewChange with the highest op, not the
   highest log_view (VSR Revisited §4.2 step 3 read carelessly): an older view's longer
   log can replace committed ops.
2. ``ack-before-write``: a backup sends PrepareOk for what it appended, before the write
   (or sync) completed: a power loss then takes acknowledged, committed ops with it.
3. ``table-at-prepare``: the client table records a request when it is prepared, as the
   paper's §4.1 does: a request whose prepare a view change discards is then answered as
   a duplicate forever (a locked-out client), or with a reply that was never committed.
4. ``apply-past-commit``: a backup applies ops it holds beyond the commit number: a view
   change that discards them leaves the backup's state diverged.
5. ``number-only-dedup``: the client table takes a request for a duplicate by its number
   alone: a client that reuses a number for another request gets the cached reply of
   the first, and its request is never applied (acknowledged, then lost).

And broken nodes, for the node layer (``sim.node`` carrying out ``broker.core``):

6. ``forward-ack-at-prepare``: the primary's node answers a send another node forwarded
   as soon as its prepare is in the journal, with the offsets the prepare stamped, instead
   of waiting for the commit: the client is told of a write a view change may discard.
7. ``backup-poll-above-applied``: a node serves a poll once its replica may serve reads at
   all, without waiting to apply what it told the poll's connection: a backup that
   forwarded a send answers the sender's read-back without the batch it acknowledged.
8. ``keep-removed-group``: a node goes on hosting a partition group after the metadata
   it applied deleted the partition (its topic deleted, or the topic shrunk): the
   group's replica and data outlive the partition.
9. ``skip-session-check``: a node admits a request under any session its header names,
   ended or not.
10. ``read-index-unconfirmed``: a backup's read index for a stored offset takes the
   primary's commit alone: with five replicas, a primary and a backup cut off from a
   newer view agree on an old commit, and the backup serves an offset older than one the
   newer view acknowledged.
11. ``retain-ignored``: a node's partitions apply a retention ("retain from offset X")
   as one that moves nothing: its replicas keep serving what the others retired.
12. ``delete-past-floor``: a node deletes every sealed segment up to its durable
   checkpoint, not only those below the partition's retention floor: retained messages
   go with them.
13. ``index-outlives-retention``: a node's partitions keep retired batches in their
   index (as if it dropped them only with their files) and start polls at the oldest
   batch indexed: a poll from below the retained start returns deleted messages.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import cbor2

from broker.core.connections import ConnectionContext
from broker.core.groups import Replied, RequestIdentity
from broker.core.handlers import Rules
from broker.core.reads import ReadIndexRound
from broker.core.sessions import MetadataView, SessionOk, SessionVerdict
from broker.state.metadata import PartitionRef
from broker.state.partition import PartitionState
from broker.state.partition_machine import PartitionMachine
from broker.state.records import JournalHost
from consensus.client_table import CachedReply, ClientTable, Verdict
from consensus.events import Action, AppendToJournal
from consensus.messages import DoViewChange, Prepare
from consensus.replica import Replica
from sdk import wire
from sdk.wire import RequestHeader
from sdk.wire.batch import read_batch
from sdk.wire.codes import Operation
from sim.disk import Disk
from sim.network import ForwardedOutcome, ForwardedRequest
from sim.node import GroupHost, Node


class PicksLongestLog(Replica):
    def _canonical_do_view_change(self, dvcs: list[DoViewChange]) -> DoViewChange:
        return max(dvcs, key=lambda d: (d.op, d.log_view, -d.replica))


class AcksBeforeWritten(Replica):
    def _ackable_op(self) -> int:
        return self.journal_op


class TableAtPrepare(Replica):
    def _learn(self, prepare: Prepare) -> None:
        super()._learn(prepare)
        self._record_at_prepare(prepare)

    def _append_journal(self, prepare: Prepare) -> None:
        super()._append_journal(prepare)
        self._record_at_prepare(prepare)

    def _record_at_prepare(self, prepare: Prepare) -> None:
        header = prepare.header
        if header.client_id == 0 or header.op <= self.commit_min:
            return
        entry = self.client_table.get(header.client_id)
        if entry is None or entry.request < header.request:
            register = (
                self.register_operation is not None and header.operation == self.register_operation
            )
            self.client_table.commit(prepare, b"", register=register)

    def _commit_client_reply(self, prepare: Prepare, reply: bytes) -> None:
        entry = self.client_table.get(prepare.header.client_id)
        if entry is None or entry.op < prepare.op:
            super()._commit_client_reply(prepare, reply)
        elif entry.op == prepare.op:
            entry.reply = reply


class AppliesPastCommit(Replica):
    def _apply_op_max(self) -> int:
        return self.journal_verified_op


class _NumberOnlyTable(ClientTable):
    """Judges and answers a request under the latest number as if it were that one."""

    def judge(
        self,
        client_id: int,
        session: int,
        request: int,
        *,
        register: bool,
        operation: int,
        request_checksum: bytes,
    ) -> Verdict:
        entry = self.entries.get(client_id)
        if entry is not None and not register and request == entry.request_number:
            operation, request_checksum = entry.request_operation, entry.request_checksum
        return super().judge(
            client_id,
            session,
            request,
            register=register,
            operation=operation,
            request_checksum=request_checksum,
        )

    def cached_reply(
        self,
        client_id: int,
        *,
        register: bool,
        operation: int = 0,
        request_checksum: bytes = bytes(16),
    ) -> CachedReply:
        entry = self.entries[client_id]
        if not register:
            operation, request_checksum = entry.request_operation, entry.request_checksum
        return super().cached_reply(
            client_id, register=register, operation=operation, request_checksum=request_checksum
        )


class JudgesByNumberOnly(Replica):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        table = self.client_table
        planted = _NumberOnlyTable(
            table.clients_max,
            registers_sessions=table.registers_sessions,
            session_live=table.session_live,
        )
        planted.entries = table.entries
        planted.session_evicted_max = table.session_evicted_max
        self.client_table = planted


class AcksForwardAtPrepare(Node):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._early: dict[tuple[int, int, RequestIdentity], tuple[int, int]] = {}

    def on_forwarded(self, tick: int, source: int, forwarded: ForwardedRequest) -> None:
        if forwarded.operation == Operation.SEND_MESSAGES:
            identity = (forwarded.request, forwarded.operation, forwarded.request_checksum)
            key = (forwarded.group, forwarded.client_id, identity)
            self._early[key] = (source, forwarded.token)
        super().on_forwarded(tick, source, forwarded)

    def _execute(self, tick: int, host: GroupHost, actions: list[Action]) -> None:
        super()._execute(tick, host, actions)
        for action in actions:
            if isinstance(action, AppendToJournal):
                self._ack_early(host, action.prepare)

    def _ack_early(self, host: GroupHost, prepare: Prepare) -> None:
        header = prepare.header
        identity = (header.request, header.operation, header.request_checksum)
        early = self._early.pop((host.group, header.client_id, identity), None)
        if early is None or not host.replica.is_primary:
            return
        source, token = early
        stamped, _ = read_batch(prepare.body)
        machine = host.machine.inner
        assert isinstance(machine, PartitionMachine)
        state = machine.state
        confirmation = wire.SendConfirmation(
            state.stream_id, state.topic_id, state.partition_id, stamped.base_offset
        )
        body = wire.SendMessagesReply((confirmation,)).encode()
        replied = Replied(header.op, host.replica.commit_max, host.replica.view, body)
        self.outbox.append((source, ForwardedOutcome(token, replied)))


class KeepsRemovedGroups(Node):
    def _remove_group(self, group: int) -> None:
        del group  # keeps its replica, its requests and its disk


class _ForgetsWhatWasTold(Rules):
    def must_see(self, context: ConnectionContext, group_id: int) -> int:
        return 0


class ServesPollsAboveApplied(Node):
    rules = _ForgetsWhatWasTold()


class _TrustsTheHeader(Rules):
    def session(
        self,
        context: ConnectionContext,
        header: RequestHeader,
        view: MetadataView,
        *,
        waited: bool,
    ) -> SessionVerdict:
        return SessionOk()  # any session the header names, ended or not, on any connection


class SkipsSessionCheck(Node):
    rules = _TrustsTheHeader()


class TrustsThePrimaryAlone(Node):
    def _read_index_round(self, replica: Replica) -> ReadIndexRound:
        return ReadIndexRound(replica, confirmed=False)  # the primary's commit, unconfirmed


class _RetainsNothing(PartitionMachine):
    """Applies every retention as "retain from offset 0": never back, so nothing moves."""

    def apply(self, prepare: Prepare) -> bytes:
        header = prepare.header
        if header.operation == Operation.TRUNCATE_PARTITION:
            items = cbor2.loads(prepare.body)
            if len(items) == 4:  # [next offset, timestamp, "retain", offset]
                body = cbor2.dumps([*items[:3], 0], canonical=True)
                prepare = Prepare(replace(header, body_size=len(body)), body)
        return super().apply(prepare)


class IgnoresRetention(Node):
    def _partition_machine(self, ref: PartitionRef, disk: Disk) -> PartitionMachine:
        return _RetainsNothing(ref.stream_id, ref.topic_id, ref.partition_id, disk)


class DeletesPastTheFloor(Node):
    def _retention_floor(self, host: GroupHost, machine: PartitionMachine) -> int:
        return host.disk.superblock.state.checkpoint + 1  # the partition's floor ignored


class _KeepsRetiredBatches(PartitionState):
    @property
    def first_offset(self) -> int:
        # The retained start ignored: what the journal still holds stays readable.
        end = self._frontier.next_offset
        held = self._log.offset_min()
        return min(end if held is None else held, end)


class _IndexOutlivesRetention(PartitionMachine):
    def __init__(self, stream_id: int, topic_id: int, partition_id: int, log: JournalHost) -> None:
        super().__init__(stream_id, topic_id, partition_id, log)
        self.state = _KeepsRetiredBatches(stream_id, topic_id, partition_id, self._log)


class KeepsRetiredBatches(Node):
    def _partition_machine(self, ref: PartitionRef, disk: Disk) -> PartitionMachine:
        return _IndexOutlivesRetention(ref.stream_id, ref.topic_id, ref.partition_id, disk)


PLANTED: Final[dict[str, type[Replica]]] = {
    "longest-log": PicksLongestLog,
    "ack-before-write": AcksBeforeWritten,
    "table-at-prepare": TableAtPrepare,
    "apply-past-commit": AppliesPastCommit,
    "number-only-dedup": JudgesByNumberOnly,
}


PLANTED_NODES: Final[dict[str, type[Node]]] = {
    "forward-ack-at-prepare": AcksForwardAtPrepare,
    "backup-poll-above-applied": ServesPollsAboveApplied,
    "keep-removed-group": KeepsRemovedGroups,
    "skip-session-check": SkipsSessionCheck,
    "read-index-unconfirmed": TrustsThePrimaryAlone,
    "retain-ignored": IgnoresRetention,
    "delete-past-floor": DeletesPastTheFloor,
    "index-outlives-retention": KeepsRetiredBatches,
}
"""The planted node-layer bugs, run with the correct replica."""


def planted_classes(name: str | None) -> tuple[type[Replica], type[Node]]:
    """The replica and node classes of planted bug ``name`` (the correct ones for None)."""
    if name is None:
        return Replica, Node
    if name in PLANTED_NODES:
        return Replica, PLANTED_NODES[name]
    return PLANTED[name], Node
