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
8. ``converged`` (at the end): after healing, every replica of every group holds every
   op ever committed [lost-write of a whole committed suffix].

Liveness (every pending request finishes in the healed phase) is judged by the world,
which knows the phases; it raises :class:`CheckFailed` with kind ``liveness``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from broker.core.reconcile import METADATA_GROUP
from consensus.messages import Prepare
from consensus.replica import Replica, Status
from sdk import wire
from sim.client import READS, Client, Kind, Pending
from sim.model import MetadataModel, PartitionModel
from sim.network import ClientReply

FailureKind = Literal["correctness", "liveness"]


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
    partition: int
    op: int
    base_offset: int
    message_ids: tuple[int, ...]


@dataclass(slots=True)
class Checkers:
    """Every safety checker of a run; implements the node observer and client reporter."""

    group_count: int
    committed: list[dict[int, Committed]] = field(default_factory=list)
    metadata_model: MetadataModel = field(default_factory=MetadataModel)
    partition_models: list[PartitionModel] = field(default_factory=list)
    #: Ops applied by the model per group (the canonical log is fed in order).
    modelled: list[int] = field(default_factory=list)
    _prepares: list[dict[int, tuple[Prepare, bytes]]] = field(default_factory=list)
    _last_applied: dict[tuple[int, int], int | None] = field(default_factory=dict)
    _seen: dict[tuple[int, int], _ReplicaSeen] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    abandoned: int = 0
    polls_checked: int = 0
    #: Read-backs answered on the connection that acknowledged their send.
    read_backs_checked: int = 0
    messages_polled: int = 0
    poll_gaps: int = 0
    #: Fail on every poll skip, even one explained by a replica's retained start.
    strict_polls: bool = True

    def __post_init__(self) -> None:
        self.committed = [{} for _ in range(self.group_count)]
        self._prepares = [{} for _ in range(self.group_count)]
        self.modelled = [0] * self.group_count
        self.partition_models = [PartitionModel() for _ in range(self.group_count - 1)]

    # Node observer -----------------------------------------------------------------------

    def on_restart(self, node: int) -> None:
        """A node restarts: its replicas replay, so apply order starts over."""
        for group in range(self.group_count):
            self._last_applied[(node, group)] = None
            seen = self._seen.get((node, group))
            if seen is not None:
                seen.incarnation_views = (0, 0, 0, 0)

    def on_restore(self, node: int, group: int) -> None:
        self._last_applied[(node, group)] = None  # a snapshot jumps forward

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
        known = self.committed[group].get(op)
        if known is None:
            self.committed[group][op] = Committed(
                prepare.checksum, header.client_id, header.request, reply
            )
            self._prepares[group][op] = (prepare, reply)
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
        while (self.modelled[group] + 1) in pending:
            op = self.modelled[group] + 1
            prepare, reply = pending.pop(op)
            if group == METADATA_GROUP:
                problem = self.metadata_model.apply(prepare, reply)
            else:
                problem = self.partition_models[group - 1].apply(prepare, reply)
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

    # Client reporter ---------------------------------------------------------------------

    def on_abandoned(self, client: Client, pending: Pending) -> None:
        del client, pending
        self.abandoned += 1

    def on_reply(self, client: Client, pending: Pending, reply: ClientReply) -> None:
        if pending.kind in READS:
            self._check_poll(client, pending, reply)
            return
        group = pending.group
        known = self.committed[group].get(reply.op)
        if known is None:
            raise CheckFailed(
                "correctness",
                "reply",
                f"client {client.index} got a reply for group {group} op {reply.op}, "
                "which no replica has committed",
            )
        if (known.client_id, known.request) != (client.client_id, pending.request.request):
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
                pending.partition,
                reply.op,
                confirmation.base_offset,
                pending.message_ids,
            )
            for earlier in reversed(self.acks):
                if earlier.client == ack.client and earlier.partition == ack.partition:
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
        model = self.partition_models[ack.partition]
        for index, message_id in enumerate(ack.message_ids):
            offset = model.offset_of.get(message_id)
            if offset != ack.base_offset + index:
                raise CheckFailed(
                    "correctness",
                    "acked",
                    f"lost-write: message {message_id:#x} acked at offset "
                    f"{ack.base_offset + index} of partition {ack.partition} is at {offset}",
                )

    def _check_poll(self, client: Client, pending: Pending, reply: ClientReply) -> None:
        try:
            polled = wire.PollMessagesReply.decode(reply.body)
        except wire.ProtocolError as error:
            raise CheckFailed("correctness", "poll", f"malformed poll reply: {error}") from None
        model = self.partition_models[pending.partition]
        self.polls_checked += 1
        messages = polled.messages()
        start = pending.position
        if messages and messages[0].offset != start:
            first = messages[0].offset
            # A replica that restored a snapshot (state transfer), or whose recovery found
            # committed records below its checkpoint damaged, no longer holds the messages
            # before its retained start and skips forward to it. That is a known gap of
            # the design (reported, counted as ``poll_gaps``), not an arbitrary skip: the
            # skip must land exactly on the serving replica's retained start.
            explained = start < first == reply.first_offset
            if self.strict_polls or not explained:
                raise CheckFailed(
                    "correctness",
                    "poll",
                    f"client {client.index} polled partition {pending.partition} from "
                    f"{start} on node {pending.replied_by} and got offset {first} first "
                    f"(the replica retains from {reply.first_offset}): poll-skip",
                )
            self.poll_gaps += 1
            start = first
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

    # End of run --------------------------------------------------------------------------

    def check_final(self, replicas: list[list[Replica]]) -> None:
        """After healing: acknowledged sends are all there, every replica holds every
        committed op. ``replicas[node][group]``."""
        for ack in self.acks:
            self._check_ack(ack)
        for group in range(self.group_count):
            committed_max = max(self.committed[group], default=0)
            for node, hosted in enumerate(replicas):
                replica = hosted[group]
                if replica.status is not Status.NORMAL or replica.commit_min < committed_max:
                    raise CheckFailed(
                        "correctness",
                        "converged",
                        f"group {group} node {node} ends at commit {replica.commit_min} "
                        f"({replica.status.value}); op {committed_max} was committed",
                    )

    def committed_ops(self) -> int:
        return sum(len(ops) for ops in self.committed)
