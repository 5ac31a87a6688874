"""Read-only checkers: what must hold in every run, whatever the faults.

Purpose: observe the world (applied ops, replica states after each step, client replies)
and fail the run with a named checker the moment a property breaks. Checkers never draw
from a PRNG and never change anything they look at, so turning them off would not change
a run's trace.

Properties (Jepsen's names in brackets, ``reference/vsr.md`` §4.2):

1. ``agreement``: replicas never disagree on a committed op of any group: the first
   replica to apply op ``k`` fixes its prepare checksum and reply bytes; every other
   application of ``k`` must match. A replica applies ops in order, each once per
   incarnation (state transfer may jump forward).
2. ``model``: every committed op's reply is what the reference model expects
   (:mod:`sim.model`), which also proves dense offsets [inconsistent-offsets] and unique
   message ids [duplicate].
3. ``reply``: every reply a client got for a replicated request names a committed op whose
   prepare carries that client's id and request number, with the committed reply bytes
   (no reply before commit, no one else's reply).
4. ``acked``: every acknowledged send is in the committed log exactly once, at the offset
   it was acknowledged with, and a producer's acks on one partition have increasing
   offsets [lost-write, duplicate, nonmonotonic-send].
5. ``poll``: a poll returns a run of the committed log starting exactly at the asked
   offset [poll-skip, nonmonotonic-poll, aborted and uncommitted reads]. With
   ``strict_polls`` off (``--lenient-polls``) a skip to exactly the serving replica's
   retained start is counted (``poll_gaps``) rather than failed; by default it fails, as
   it means that replica's log has a hole of committed messages.
6. ``monotonic``: within an incarnation a replica's view, log_view, commit_min and
   commit_max never go back; across restarts its durable view and log_view never do.
7. ``read-your-writes``: a producer that reads back an acknowledged batch on the
   connection that acknowledged it (the same node, not restarted since) gets that batch:
   the node serves the read only once it has applied what it told the connection, even
   as a backup that forwarded the send.
8. ``hosting``: after every metadata op it applies, a node hosts exactly the partition
   groups the committed metadata names at that op: none of a deleted topic or partition,
   none missing.
9. ``ownership``: in every generation of a consumer group, each partition has at most
   one owner, every node sees the same assignment for that generation, and no partition
   goes from one member's polls straight to another's while the first is still a member:
   it is first revoking (its owner may no longer poll it, nobody else may yet) for at
   least one generation (cooperative revocation, ``broker.state.metadata`` invariant 6).
10. ``deleted``: a poll of a deleted topic, on the connection that was told of the
   deletion, is refused with topic-not-found: its messages are never served again.
11. ``session``: a node admits a request (past the session check) only under a session
   that was a live session of the request's client id in the metadata it had applied:
   never one that ended (a closed connection's, a logout's, one a new login replaced).
   The metadata model also demands that a committed command under an ended session is
   refused as not logged in, never applied.
12. ``fresh-read``: a stored consumer offset read at any node reflects its partition
   group at an applied op no older than every op of the group acknowledged, to any
   client, before the read was first sent [stale-read]: a backup's read index must come
   from its view's primary and from enough replicas of that view that no newer view can
   have acknowledged anything (``broker.core.reads``).
13. ``converged`` (at the end): after healing, every replica of every group that still
   exists holds every op ever committed [lost-write of a whole committed suffix].
14. ``retained-start``: every replica of a partition agrees on its retained start after
   each op it applies: the one the reference model computes from the committed log
   (purges move it to the head, retentions and DELETE_SEGMENTS to their offset, never
   back).
15. ``retained``: nothing at or above the retained start is lost: after a replica deleted
   retired journal segments, its journal still holds the committed send that holds the
   retained start and everything after it (while its log is whole; a replica backfilling
   committed records refuses polls); and a poll from below the retained start returns
   messages from exactly the retained start of the op the serving replica applied
   [poll-skip].
16. ``deleted-read``: a poll never returns a message below the retained start of the op
   the serving replica had applied: once a replica applied a deletion, the deleted
   messages are never served by it again.

Liveness (every pending request finishes in the healed phase) is judged by the world,
which knows the phases; it raises :class:`CheckFailed` with kind ``liveness``.
"""

from __future__ import annotations

import bisect
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Literal

from broker.core.commands import POLL_RESYNC_PARTITION
from broker.core.reconcile import METADATA_GROUP
from broker.state.errors import ErrorCode
from broker.state.metadata import ConsumerGroupInfo
from broker.state.partition_machine import PartitionMachine
from consensus.messages import Prepare
from consensus.replica import Replica, Status
from sdk import wire
from sim.client import READS, Client, Kind, Pending
from sim.disk import Disk
from sim.model import MetadataModel, PartitionModel
from sim.network import ClientReply

FailureKind = Literal["correctness", "liveness"]


_Assignment = tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]
"""A consumer group generation's (member id, partitions, revoking partitions), by member."""


def _pollable(assignment: _Assignment) -> dict[int, int]:
    """Partition -> the member that may poll it."""
    return {
        p: member_id
        for member_id, partitions, revoking in assignment
        for p in partitions
        if p not in revoking
    }


def _revoking(assignment: _Assignment) -> dict[int, int]:
    """Revoking partition -> its owner."""
    return {p: member_id for member_id, _, revoking in assignment for p in revoking}


class CheckFailed(Exception):
    """A property of the run broke."""

    def __init__(self, kind: FailureKind, checker: str, message: str) -> None:
        super().__init__(f"{checker}: {message}")
        self.kind = kind
        self.checker = checker
        self.message = message


@dataclass(frozen=True, slots=True)
class Committed:
    """What the first replica to apply an op saw; every other must see the same."""

    checksum: bytes
    client_id: int
    request: int
    reply: bytes


@dataclass(slots=True)
class _ReplicaSeen:
    incarnation_views: tuple[int, int, int, int] = (0, 0, 0, 0)  # view, log_view, cmin, cmax
    durable_view: int = 0
    durable_log_view: int = 0


@dataclass(slots=True)
class Ack:
    client: int
    group: int
    partition: int
    op: int
    base_offset: int
    message_ids: tuple[int, ...]


@dataclass(slots=True)
class _AckTimeline:
    """A group's acknowledged ops in the order their replies arrived: for each, the tick
    and the highest op acknowledged up to it."""

    ticks: list[int] = field(default_factory=list)
    highest: list[int] = field(default_factory=list)

    def add(self, tick: int, op: int) -> None:
        assert not self.ticks or tick >= self.ticks[-1]
        self.ticks.append(tick)
        self.highest.append(max(op, self.highest[-1] if self.highest else 0))

    def max_before(self, tick: int) -> int:
        """The highest op acknowledged at a tick before ``tick`` (0: none)."""
        index = bisect.bisect_left(self.ticks, tick)
        return self.highest[index - 1] if index else 0


@dataclass(slots=True)
class Checkers:
    """Every safety checker of a run; implements the node observer and client reporter."""

    #: By group id, in the order the groups first applied an op.
    committed: dict[int, dict[int, Committed]] = field(default_factory=dict)
    metadata_model: MetadataModel = field(default_factory=MetadataModel)
    partition_models: dict[int, PartitionModel] = field(default_factory=dict)
    #: Ops applied by the model per group (the canonical log is fed in order).
    modelled: dict[int, int] = field(default_factory=dict)
    _prepares: dict[int, dict[int, tuple[Prepare, bytes]]] = field(default_factory=dict)
    #: The partition groups every node must host at each metadata op the model applied.
    _hosting: dict[int, tuple[int, ...]] = field(default_factory=lambda: {0: ()})
    _last_applied: dict[tuple[int, int], int | None] = field(default_factory=dict)
    _seen: dict[tuple[int, int], _ReplicaSeen] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    #: Every group's acknowledged ops, by the tick their reply reached the client.
    _acked: dict[int, _AckTimeline] = field(default_factory=dict)
    #: Stored-offset reads checked against ``_acked`` (``fresh-read``).
    fresh_reads_checked: int = 0
    abandoned: int = 0
    polls_checked: int = 0
    #: Read-backs answered on the connection that acknowledged their send.
    read_backs_checked: int = 0
    #: Polls of a deleted topic on the connection that was told of its deletion.
    deleted_polls_checked: int = 0
    #: Polls by consumer-group members answered "resync": the partition is another's now.
    resyncs: int = 0
    #: Each consumer group's assignment in each generation, as the first node saw it.
    _assignments: dict[tuple[int, int], _Assignment] = field(default_factory=dict)
    #: Partitions seen to move from one live member to another between two generations,
    #: each through a revocation (``ownership``).
    handoffs: int = 0
    messages_polled: int = 0
    poll_gaps: int = 0
    #: Polls that started at a retained start above the asked offset (retention, purge).
    polls_past_retained: int = 0
    retained_starts_checked: int = 0
    deletions_checked: int = 0
    #: Fail on every poll skip, even one explained by a replica's retained start.
    strict_polls: bool = True

    def partition_model(self, group: int) -> PartitionModel:
        """The model of partition group ``group`` (empty until it commits an op)."""
        model = self.partition_models.get(group)
        if model is None:
            model = self.partition_models[group] = PartitionModel()
        return model

    # Node observer -----------------------------------------------------------------------

    def on_restart(self, node: int) -> None:
        """A node restarts: its replicas replay, so apply order starts over."""
        for key in self._last_applied:
            if key[0] == node:
                self._last_applied[key] = None
        for key, seen in self._seen.items():
            if key[0] == node:
                seen.incarnation_views = (0, 0, 0, 0)

    def on_restore(self, node: int, group: int) -> None:
        self._last_applied[(node, group)] = None  # a snapshot jumps forward

    def on_retained_start(self, node: int, group: int, op: int, retained_start: int) -> None:
        """``node`` applied ``op`` of partition group ``group`` and now retains from
        ``retained_start``."""
        if self.modelled.get(group, 0) < op:
            return  # not fed that far (cannot happen: a replica applied it first)
        expected = self.partition_model(group).retained_start_at(op)
        if retained_start != expected:
            raise CheckFailed(
                "correctness",
                "retained-start",
                f"node {node} group {group} retains from offset {retained_start} after op "
                f"{op}; the committed log says {expected}",
            )
        self.retained_starts_checked += 1

    def on_retained_files(
        self, node: int, group: int, replica: Replica, disk: Disk, machine: PartitionMachine
    ) -> None:
        """``node`` deleted retired segments of ``group``: what is retained is still there."""
        del machine  # judged against the model, not the machine's own idea of its floor
        if not replica.log_whole or self.modelled.get(group, 0) < replica.commit_min:
            return
        model = self.partition_model(group)
        needed = model.op_holding(model.retained_start_at(replica.commit_min))
        self.deletions_checked += 1
        if needed is None or needed > replica.commit_min:
            return
        if disk.read(needed) is None:
            raise CheckFailed(
                "correctness",
                "retained",
                f"node {node} group {group} deleted op {needed}, which holds retained "
                f"messages (retained start {model.retained_start_at(replica.commit_min)} "
                f"at op {replica.commit_min}; the journal starts at op {disk.journal.op_min})",
            )

    def on_apply(self, node: int, group: int, prepare: Prepare, reply: bytes) -> None:
        op = prepare.op
        last = self._last_applied.get((node, group), 0)
        if last is not None and op != last + 1:
            raise CheckFailed(
                "correctness",
                "agreement",
                f"node {node} group {group} applied op {op} after {last}",
            )
        self._last_applied[(node, group)] = op
        header = prepare.header
        committed = self.committed.setdefault(group, {})
        known = committed.get(op)
        if known is None:
            committed[op] = Committed(prepare.checksum, header.client_id, header.request, reply)
            self._prepares.setdefault(group, {})[op] = (prepare, reply)
            self._feed_model(group)
            return
        if known.checksum != prepare.checksum:
            raise CheckFailed(
                "correctness",
                "agreement",
                f"group {group} op {op}: node {node} applied a different prepare "
                f"(client {header.client_id:#x} request {header.request}) than was committed "
                f"first (client {known.client_id:#x} request {known.request})",
            )
        if known.reply != reply:
            raise CheckFailed(
                "correctness",
                "agreement",
                f"group {group} op {op}: node {node} computed a different reply",
            )

    def _feed_model(self, group: int) -> None:
        pending = self._prepares[group]
        while (self.modelled.get(group, 0) + 1) in pending:
            op = self.modelled.get(group, 0) + 1
            prepare, reply = pending.pop(op)
            if group == METADATA_GROUP:
                problem = self.metadata_model.apply(prepare, reply)
                self._hosting[op] = self.metadata_model.partition_groups()
            else:
                problem = self.partition_model(group).apply(prepare, reply)
            if problem is not None:
                raise CheckFailed("correctness", "model", f"group {group} op {op}: {problem}")
            self.modelled[group] = op

    def on_step(self, node: int, group: int, replica: Replica) -> None:
        key = (node, group)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen[key] = _ReplicaSeen()
        now = (replica.view, replica.log_view, replica.commit_min, replica.commit_max)
        for name, before, after in zip(
            ("view", "log_view", "commit_min", "commit_max"),
            seen.incarnation_views,
            now,
            strict=True,
        ):
            if after < before:
                raise CheckFailed(
                    "correctness",
                    "monotonic",
                    f"node {node} group {group}: {name} went back from {before} to {after}",
                )
        seen.incarnation_views = now
        durable = replica.durable
        if durable.view < seen.durable_view or durable.log_view < seen.durable_log_view:
            raise CheckFailed(
                "correctness",
                "monotonic",
                f"node {node} group {group}: durable view/log_view went back to "
                f"{durable.view}/{durable.log_view} from {seen.durable_view}/"
                f"{seen.durable_log_view}",
            )
        if replica.view < seen.durable_view:
            raise CheckFailed(
                "correctness",
                "monotonic",
                f"node {node} group {group}: view {replica.view} below durable {seen.durable_view}",
            )
        seen.durable_view = durable.view
        seen.durable_log_view = durable.log_view

    def on_hosted(
        self, node: int, metadata_op: int, groups: tuple[int, ...], removed: Container[int]
    ) -> None:
        """``node`` reconciled its partition groups after applying metadata op
        ``metadata_op``: it must host exactly the partitions the committed metadata names
        at that op, no group of a deleted partition, none missing, but those it removed
        before (a restart put its metadata behind the removal)."""
        expected = self._hosting.get(metadata_op)
        if expected is None:
            raise CheckFailed(
                "correctness",
                "hosting",
                f"node {node} reconciled at metadata op {metadata_op}, which the model has "
                f"not applied (it is at {self.modelled.get(METADATA_GROUP, 0)})",
            )
        hosted = tuple(sorted(groups))
        expected = tuple(group for group in expected if group not in removed)
        if hosted != expected:
            extra = [group for group in hosted if group not in expected]
            missing = [group for group in expected if group not in hosted]
            raise CheckFailed(
                "correctness",
                "hosting",
                f"node {node} at metadata op {metadata_op} hosts {len(hosted)} partition "
                f"groups: {len(extra)} of deleted or unknown partitions {extra}, "
                f"{len(missing)} missing {missing}",
            )

    def on_assignments(
        self, node: int, metadata_op: int, groups: tuple[ConsumerGroupInfo, ...]
    ) -> None:
        """The workload topic's consumer groups at ``node`` after metadata op
        ``metadata_op``: no partition has two owners, and every node sees one assignment
        per generation."""
        for group in groups:
            owned = [p for member in group.members for p in member.partitions]
            if len(owned) != len(set(owned)):
                raise CheckFailed(
                    "correctness",
                    "ownership",
                    f"node {node} at metadata op {metadata_op}: consumer group {group.id} "
                    f"generation {group.generation} gives a partition to two members: "
                    f"{[(m.member_id, m.partitions) for m in group.members]}",
                )
            assignment = tuple((m.member_id, m.partitions, m.revoking) for m in group.members)
            key = (group.id, group.generation)
            first = self._assignments.get(key)
            if first is None:
                self._assignments[key] = assignment
                self._check_handoffs(group.id, group.generation - 1, group.generation)
                self._check_handoffs(group.id, group.generation, group.generation + 1)
            elif first != assignment:
                raise CheckFailed(
                    "correctness",
                    "ownership",
                    f"node {node} at metadata op {metadata_op}: consumer group {group.id} "
                    f"generation {group.generation} is {assignment}, another node had "
                    f"{first}",
                )

    def _check_handoffs(self, group_id: int, before: int, after: int) -> None:
        """Between two consecutive generations, a partition that one member could poll and
        another member can poll now was revoking (polled by nobody) in between, unless
        the first left the group."""
        old = self._assignments.get((group_id, before))
        new = self._assignments.get((group_id, after))
        if old is None or new is None:
            return
        members_now = {member_id for member_id, _, _ in new}
        pollable_before = _pollable(old)
        for partition_id, owner in sorted(_pollable(new).items()):
            previous = pollable_before.get(partition_id)
            if previous is None or previous == owner or previous not in members_now:
                continue
            raise CheckFailed(
                "correctness",
                "ownership",
                f"consumer group {group_id}: partition {partition_id} went from member "
                f"{previous}'s polls in generation {before} straight to member {owner}'s in "
                f"generation {after}, while {previous} is still a member: two members own it "
                "at once",
            )
        for partition_id, owner in sorted(_revoking(old).items()):
            if _pollable(new).get(partition_id, owner) != owner:
                self.handoffs += 1

    def on_admitted(self, node: int, client_id: int, session: int, metadata_op: int) -> None:
        """``node`` passed a request of ``client_id`` under ``session`` through its session
        check with metadata applied up to ``metadata_op``."""
        model = self.metadata_model
        if self.modelled.get(METADATA_GROUP, 0) < metadata_op:
            return  # not fed that far yet (cannot happen: the node applied those ops)
        if not model.session_live_at(session, client_id, metadata_op):
            ended = model.ended_at.get(session)
            raise CheckFailed(
                "correctness",
                "session",
                f"node {node} admitted a request of client {client_id:#x} under session "
                f"{session} at metadata op {metadata_op}; the session "
                + ("was never opened" if ended is None else f"ended at op {ended}"),
            )

    # Client reporter ---------------------------------------------------------------------

    def on_abandoned(self, client: Client, pending: Pending) -> None:
        del client, pending
        self.abandoned += 1

    def on_reply(self, client: Client, pending: Pending, reply: ClientReply) -> None:
        if pending.kind is Kind.OFFSET_READ:
            self._check_fresh_read(client, pending, reply)
            return
        if pending.kind in READS:
            self._check_poll(client, pending, reply)
            return
        if pending.kind is Kind.DELETE_SEGMENTS and reply.op == 0:
            return  # nothing sealed to delete: answered without a proposal, as Iggy's
        group = reply.group
        self._acked.setdefault(group, _AckTimeline()).add(pending.replied_tick, reply.op)
        known = self.committed.get(group, {}).get(reply.op)
        if known is None:
            raise CheckFailed(
                "correctness",
                "reply",
                f"client {client.index} got a reply for group {group} op {reply.op}, "
                "which no replica has committed",
            )
        if (known.client_id, known.request) != (client.client_id, pending.request.wire_request):
            raise CheckFailed(
                "correctness",
                "reply",
                f"client {client.index} request {pending.request.request} was answered with "
                f"op {reply.op} of client {known.client_id:#x} request {known.request}",
            )
        if known.reply != reply.body:
            raise CheckFailed(
                "correctness",
                "reply",
                f"client {client.index} got reply bytes for op {reply.op} that differ from "
                "the committed reply",
            )
        if pending.kind is Kind.SEND:
            confirmation = wire.SendMessagesReply.decode(reply.body).confirmations[0]
            ack = Ack(
                client.index,
                group,
                pending.partition,
                reply.op,
                confirmation.base_offset,
                pending.message_ids,
            )
            for earlier in reversed(self.acks):
                if earlier.client == ack.client and earlier.group == ack.group:
                    if earlier.base_offset >= ack.base_offset:
                        raise CheckFailed(
                            "correctness",
                            "acked",
                            f"nonmonotonic-send: client {client.index} partition "
                            f"{ack.partition} acked offset {ack.base_offset} after "
                            f"{earlier.base_offset}",
                        )
                    break
            self.acks.append(ack)
            self._check_ack(ack)

    def _check_ack(self, ack: Ack) -> None:
        model = self.partition_model(ack.group)
        for index, message_id in enumerate(ack.message_ids):
            offset = model.offset_of.get(message_id)
            if offset != ack.base_offset + index:
                raise CheckFailed(
                    "correctness",
                    "acked",
                    f"lost-write: message {message_id:#x} acked at offset "
                    f"{ack.base_offset + index} of partition {ack.partition} is at {offset}",
                )

    def _check_fresh_read(self, client: Client, pending: Pending, reply: ClientReply) -> None:
        """A stored-offset read reflects its group at an op no older than any op of the
        group acknowledged, to any client, before the read was first sent."""
        self.fresh_reads_checked += 1
        timeline = self._acked.get(reply.group)
        acked = 0 if timeline is None else timeline.max_before(pending.first_sent_tick)
        if reply.read_op < acked:
            raise CheckFailed(
                "correctness",
                "fresh-read",
                f"client {client.index} read a stored offset of partition "
                f"{pending.partition} on node {pending.replied_by} at op {reply.read_op}, "
                f"but op {acked} of that group was acknowledged before the read was sent "
                "(stale-read)",
            )

    def _check_poll(self, client: Client, pending: Pending, reply: ClientReply) -> None:
        if pending.kind is Kind.POLL_DELETED:
            self._check_deleted_poll(client, pending, reply)
            return
        try:
            polled = wire.PollMessagesReply.decode(reply.body)
        except wire.ProtocolError as error:
            raise CheckFailed("correctness", "poll", f"malformed poll reply: {error}") from None
        model = self.partition_model(reply.group)
        self.polls_checked += 1
        messages = polled.messages()
        if polled.partition_id != pending.partition:
            if not (pending.as_member and polled.partition_id == POLL_RESYNC_PARTITION):
                raise CheckFailed(
                    "correctness",
                    "poll",
                    f"client {client.index} polled partition {pending.partition} and got "
                    f"a reply for partition {polled.partition_id}",
                )
            if messages:
                raise CheckFailed("correctness", "poll", "a resync reply carries messages")
            self.resyncs += 1
            return
        # A poll below the retained start of the op the serving replica applied starts at
        # that retained start, as Iggy's does; nothing below it is served (``deleted-read``)
        # and nothing from it on is skipped (``retained``).
        retained_start = model.retained_start_at(reply.read_op)
        start = max(pending.position, retained_start)
        if messages and messages[0].offset < retained_start:
            raise CheckFailed(
                "correctness",
                "deleted-read",
                f"client {client.index} polled partition {pending.partition} from "
                f"{pending.position} on node {pending.replied_by} at op {reply.read_op} and "
                f"got offset {messages[0].offset}, below the retained start {retained_start}",
            )
        if messages and messages[0].offset != start:
            first = messages[0].offset
            # A replica whose recovery found committed records below its checkpoint damaged
            # used to skip forward to its retained start; now it refuses polls until the
            # records are back. ``--lenient-polls`` counts such a skip instead.
            explained = start < first == reply.first_offset
            if self.strict_polls or not explained:
                raise CheckFailed(
                    "correctness",
                    "retained" if start == retained_start > pending.position else "poll",
                    f"client {client.index} polled partition {pending.partition} from "
                    f"{pending.position} on node {pending.replied_by} and got offset {first} "
                    f"first, not {start} (the replica retains from {reply.first_offset}, the "
                    f"log from {retained_start} at op {reply.read_op}): poll-skip",
                )
            self.poll_gaps += 1
            start = first
        if start > pending.position and messages:
            self.polls_past_retained += 1
        for index, message in enumerate(messages):
            expected_offset = start + index
            if message.offset != expected_offset:
                raise CheckFailed(
                    "correctness",
                    "poll",
                    f"client {client.index} polled partition {pending.partition} from "
                    f"{pending.position} on node {pending.replied_by} and got offset "
                    f"{message.offset} at position {index} (int-poll-skip)",
                )
            if expected_offset >= len(model.message_ids):
                raise CheckFailed(
                    "correctness",
                    "poll",
                    f"client {client.index} read offset {expected_offset} of partition "
                    f"{pending.partition}, which is not committed",
                )
            if model.message_ids[expected_offset] != message.id:
                raise CheckFailed(
                    "correctness",
                    "poll",
                    f"inconsistent-offsets: partition {pending.partition} offset "
                    f"{expected_offset} read as {message.id:#x}, committed "
                    f"{model.message_ids[expected_offset]:#x}",
                )
            self.messages_polled += 1
        if pending.kind is Kind.READ_BACK and start == pending.position:
            self._check_read_back(client, pending, reply, tuple(m.id for m in messages))

    def _check_read_back(
        self, client: Client, pending: Pending, reply: ClientReply, ids: tuple[int, ...]
    ) -> None:
        if (pending.replied_by, reply.incarnation) != pending.via:
            return  # another connection: it may read older committed state
        self.read_backs_checked += 1
        if ids != pending.message_ids:
            raise CheckFailed(
                "correctness",
                "read-your-writes",
                f"client {client.index} read back partition {pending.partition} from "
                f"{pending.position} on node {pending.replied_by}, which acknowledged "
                f"{len(pending.message_ids)} messages there, and got {len(ids)}",
            )

    def _check_deleted_poll(self, client: Client, pending: Pending, reply: ClientReply) -> None:
        if (pending.replied_by, reply.incarnation) != pending.via:
            return  # another connection: it may still see the topic
        self.deleted_polls_checked += 1
        if reply.status != ErrorCode.TOPIC_ID_NOT_FOUND:
            raise CheckFailed(
                "correctness",
                "deleted",
                f"client {client.index} polled topic {pending.topic} on node "
                f"{pending.replied_by}, which told it the topic was deleted, and got status "
                f"{reply.status} ({len(reply.body)} bytes), not topic-not-found",
            )

    # End of run --------------------------------------------------------------------------

    def check_final(self, replicas: list[dict[int, Replica]]) -> None:
        """After healing: acknowledged sends are all there, every replica of every group
        that still exists holds every committed op. ``replicas[node][group]``."""
        for ack in self.acks:
            self._check_ack(ack)
        existing = self._hosting[self.modelled.get(METADATA_GROUP, 0)]
        for group, committed in self.committed.items():
            if group != METADATA_GROUP and group not in existing:
                continue  # its partition was deleted: no node keeps it
            committed_max = max(committed, default=0)
            for node, hosted in enumerate(replicas):
                replica = hosted.get(group)
                if replica is None:
                    raise CheckFailed(
                        "correctness",
                        "hosting",
                        f"group {group} is not hosted on node {node} at the end",
                    )
                if replica.status is not Status.NORMAL or replica.commit_min < committed_max:
                    raise CheckFailed(
                        "correctness",
                        "converged",
                        f"group {group} node {node} ends at commit {replica.commit_min} "
                        f"({replica.status.value}); op {committed_max} was committed",
                    )

    def committed_ops(self) -> int:
        return sum(len(ops) for ops in self.committed.values())
