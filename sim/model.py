"""Reference models of the state machines, fed the canonical committed log.

Purpose: an independent, much smaller statement of what the broker's state machines must
answer, so the checkers can compare every committed reply (and every reply a client got)
with it. The models understand exactly the operations the simulator's workload sends and
the bootstrap; anything else in a log is a model failure, not silently skipped.

Invariants:

1. A model is fed ops of one group in op order, each once, with the reply the real state
   machine computed; ``apply`` returns None when the reply is what the model expects, or
   a sentence saying what differs.
2. Models never draw randomness and never look at replicas: only the committed prepare.

Theory of operation: the metadata model keeps names and id counters of streams, topics
and consumer groups, the op that created each partition (so the partition groups every
node must host), the users that exist and the sessions: which register opened each, for
which client id, and which op ended it (a new register of the client id, a logout, a
system ``EndSession``), so that a request under a session that ended is seen to be
refused, and a node's admission under it can be judged; the partition model keeps the list of
message ids by offset (so it also proves offsets dense and ids unique: Jepsen's
inconsistent-offsets and duplicate) and answers consumer-offset stores.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import cbor2

from broker.core.reconcile import partition_group_id
from broker.state.codec import InternalOperation, decode_command
from broker.state.errors import ErrorCode
from broker.state.metadata import (
    SESSIONS_PER_USER_MAX,
    CreateConsumerGroup,
    CreatePartitions,
    CreateRootUser,
    CreateStream,
    CreateTopic,
    DeletePartitions,
    DeleteTopic,
    EndSession,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    PurgeTopic,
    Register,
)
from consensus.messages import Prepare
from sdk import wire
from sdk.wire.codes import Operation

_MEMBER_NOT_FOUND = int(ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND)
_UNAUTHENTICATED = wire.result_rejected(int(ErrorCode.UNAUTHENTICATED))


def _ok(reply: bytes) -> bool:
    return reply[:4] == wire.RESULT_OK


@dataclass(slots=True)
class _Topic:
    id: int
    name: str
    #: The op that created each partition, by partition id.
    partitions: list[int]
    groups: dict[str, int] = field(default_factory=dict)
    group_next: int = 0


@dataclass(slots=True)
class _Stream:
    id: int
    name: str
    topics: dict[str, _Topic] = field(default_factory=dict)
    topic_next: int = 0


class MetadataModel:
    """Streams, topics, consumer groups and users, by name and id."""

    def __init__(self) -> None:
        self.users: dict[str, int] = {}
        self.streams: dict[str, _Stream] = {}
        self.stream_next = 0
        self.topics_created = 0
        self.topics_deleted = 0
        #: PURGE_TOPIC commands committed.
        self.purges = 0
        #: Every session a register opened (its op): its client id.
        self.session_client: dict[int, int] = {}
        #: The live session of each client id.
        self.live: dict[int, int] = {}
        #: The op that ended each ended session.
        self.ended_at: dict[int, int] = {}
        self.logins = 0
        self.logouts = 0
        self.sessions_closed = 0

    def session_live_at(self, session: int, client_id: int, op: int) -> bool:
        """Whether ``session`` was a live session of ``client_id`` once op ``op`` applied
        (the model must have been fed that far)."""
        return (
            session <= op
            and self.session_client.get(session) == client_id
            and self.ended_at.get(session, op + 1) > op
        )

    def _end(self, session: int, op: int) -> None:
        client_id = self.session_client[session]
        del self.live[client_id]
        self.ended_at[session] = op

    def partition_groups(self) -> tuple[int, ...]:
        """The group id of every partition that exists, ascending: what every node must
        host once it applied the ops fed so far."""
        return tuple(
            sorted(
                partition_group_id(stream.id, topic.id, partition, created_op)
                for stream in self.streams.values()
                for topic in stream.topics.values()
                for partition, created_op in enumerate(topic.partitions)
            )
        )

    def _stream(self, ident: int | str) -> _Stream | None:
        for stream in self.streams.values():
            if ident in (stream.id, stream.name):
                return stream
        return None

    @staticmethod
    def _topic(stream: _Stream, ident: int | str) -> _Topic | None:
        for topic in stream.topics.values():
            if ident in (topic.id, topic.name):
                return topic
        return None

    def apply(self, prepare: Prepare, reply: bytes) -> str | None:
        header = prepare.header
        command = decode_command(header.operation, prepare.body)
        if isinstance(command, CreateRootUser):
            expect_ok = not self.users
            if expect_ok:
                self.users[command.username] = 0
            return _expect(expect_ok, reply, "create root user")
        if isinstance(command, Register):
            expect_ok = command.user_id in self.users.values()
            problem = _expect(expect_ok, reply, "register")
            if problem is None and expect_ok:
                payload = wire.split_result(Operation.REGISTER, reply)
                registered = wire.LoginRegisterReply.decode(payload)
                if registered.session != header.op or registered.user_id != command.user_id:
                    return f"register answered session {registered.session}, op is {header.op}"
                previous = self.live.get(command.client_id)
                if previous is not None:
                    self._end(previous, header.op)  # a new login ends the client's last
                if len(self.live) >= SESSIONS_PER_USER_MAX:
                    return "the model does not follow sessions ended by the per-user bound"
                self.session_client[header.op] = command.client_id
                self.live[command.client_id] = header.op
                self.logins += 1
            return problem
        if isinstance(command, EndSession):
            client_id = self.session_client.get(command.session)
            expect_ok = client_id is not None and self.live.get(client_id) == command.session
            problem = _expect(expect_ok, reply, f"end session {command.session}")
            if problem is None and expect_ok:
                self._end(command.session, header.op)
                self.sessions_closed += 1
            return problem
        internal = header.operation in tuple(int(op) for op in InternalOperation)
        if (
            not internal
            and not isinstance(command, CreateRootUser)
            and self.live.get(header.client_id) != header.session
        ):
            # A client's command under a session that is not live (ended, or never
            # opened): it must be refused as not logged in, never applied.
            ended = self.ended_at.get(header.session)
            # (A logout's reply carries nothing, whatever its outcome.)
            if reply != (b"" if isinstance(command, Logout) else _UNAUTHENTICATED):
                return (
                    f"op {header.op} of client {header.client_id:#x} under session "
                    f"{header.session} (ended at op {ended}) was applied: {reply[:12]!r}"
                )
            return None
        if isinstance(command, Logout):
            if reply != b"":
                return f"logout answered {reply[:12]!r}: a logout's reply carries nothing"
            self._end(header.session, header.op)
            self.logouts += 1
            return None
        if isinstance(command, CreateStream):
            expect_ok = command.name not in self.streams
            problem = _expect(expect_ok, reply, f"create stream {command.name!r}")
            if problem is None and expect_ok:
                stream = _Stream(self.stream_next, command.name)
                self.streams[command.name] = stream
                self.stream_next += 1
                created = wire.StreamDetails.decode(
                    wire.split_result(Operation.CREATE_STREAM, reply)
                )
                if (created.stream.id, created.stream.name) != (stream.id, stream.name):
                    return f"stream created as {created.stream.id}, model says {stream.id}"
            return problem
        if isinstance(command, CreateTopic):
            found = self._stream(command.stream)
            expect_ok = found is not None and command.name not in found.topics
            problem = _expect(expect_ok, reply, f"create topic {command.name!r}")
            if problem is None and found is not None and expect_ok:
                partitions = [header.op] * command.partitions_count
                topic = _Topic(found.topic_next, command.name, partitions)
                found.topics[command.name] = topic
                found.topic_next += 1
                self.topics_created += 1
                details = wire.TopicDetails.decode(wire.split_result(Operation.CREATE_TOPIC, reply))
                got = (details.topic.id, details.topic.partitions_count)
                if got != (topic.id, len(partitions)):
                    return f"topic created as {got}, model says {topic.id, len(partitions)}"
            return problem
        if isinstance(command, DeleteTopic):
            owner = self._stream(command.stream)
            parent = self._topic(owner, command.topic) if owner is not None else None
            problem = _expect(parent is not None, reply, f"delete topic {command.topic!r}")
            if problem is None and owner is not None and parent is not None:
                del owner.topics[parent.name]
                self.topics_deleted += 1
            return problem
        if isinstance(command, CreatePartitions | DeletePartitions):
            owner = self._stream(command.stream)
            parent = self._topic(owner, command.topic) if owner is not None else None
            creates = isinstance(command, CreatePartitions)
            expect_ok = parent is not None and (creates or command.count <= len(parent.partitions))
            problem = _expect(expect_ok, reply, f"{type(command).__name__} {command.count}")
            if problem is None and parent is not None and expect_ok:
                if creates:
                    parent.partitions.extend([header.op] * command.count)
                else:
                    del parent.partitions[len(parent.partitions) - command.count :]
            return problem
        if isinstance(command, PurgeTopic):
            owner = self._stream(command.stream)
            parent = self._topic(owner, command.topic) if owner is not None else None
            problem = _expect(parent is not None, reply, f"purge topic {command.topic!r}")
            if problem is None and parent is not None:
                self.purges += 1
            return problem
        if isinstance(command, CreateConsumerGroup):
            owner = self._stream(command.stream)
            parent = self._topic(owner, command.topic) if owner is not None else None
            expect_ok = parent is not None and command.name not in parent.groups
            problem = _expect(expect_ok, reply, f"create consumer group {command.name!r}")
            if problem is None and parent is not None and expect_ok:
                parent.groups[command.name] = parent.group_next
                parent.group_next += 1
            return problem
        if isinstance(command, JoinConsumerGroup):
            owner = self._stream(command.stream)
            parent = self._topic(owner, command.topic) if owner is not None else None
            expect_ok = parent is not None and command.group in parent.groups.values()
            return _expect(expect_ok, reply, "join consumer group")
        if isinstance(command, LeaveConsumerGroup):
            owner = self._stream(command.stream)
            parent = self._topic(owner, command.topic) if owner is not None else None
            if parent is None or command.group not in parent.groups.values():
                return _expect(False, reply, "leave consumer group")
            # A member leaves (OK), or a session that is no member any more (its earlier
            # leave committed, or its session ended and took the membership with it) is
            # told so. The model does not follow sessions, so either answer may be right.
            if _ok(reply) or reply == wire.result_rejected(_MEMBER_NOT_FOUND):
                return None
            return f"leave consumer group answered {reply[:12]!r}"
        if header.operation in tuple(int(op) for op in InternalOperation):
            return None
        return f"the model does not know operation {header.operation}"


def _expect(expect_ok: bool, reply: bytes, what: str) -> str | None:
    if _ok(reply) != expect_ok:
        return f"{what}: expected {'success' if expect_ok else 'rejection'}, got {reply[:12]!r}"
    return None


class PartitionModel:
    """Message ids by offset, the retained start and the consumer-offset rule of one
    partition."""

    def __init__(self) -> None:
        self.message_ids: list[int] = []
        self.offset_of: dict[int, int] = {}
        #: op -> (base offset, message count) of every committed send.
        self.sends: dict[int, tuple[int, int]] = {}
        #: The retained start after each op that moved it, ascending: (op, offset). A purge
        #: moves it to the head, a retention to its offset (never back, never past the
        #: head); offsets keep counting either way.
        self.retained: list[tuple[int, int]] = [(0, 0)]
        #: Base offsets and ops of the committed sends, ascending (both).
        self._send_bases: list[int] = []
        self._send_ops: list[int] = []
        self.purge_generation = 0
        self.retentions = 0
        self.purges = 0

    @property
    def retained_start(self) -> int:
        """The retained start after the last op fed."""
        return self.retained[-1][1]

    def retained_start_at(self, op: int) -> int:
        """The retained start after op ``op`` was applied (ops fed so far)."""
        slot = bisect.bisect_right(self.retained, (op, 1 << 64)) - 1
        return self.retained[slot][1]

    def op_holding(self, offset: int) -> int | None:
        """The op of the committed send that holds message ``offset``, or of the first
        one after it; None when no send holds a message at or above ``offset``."""
        slot = max(0, bisect.bisect_right(self._send_bases, offset) - 1)
        if slot < len(self._send_ops):
            base, count = self.sends[self._send_ops[slot]]
            if base + count <= offset:
                slot += 1
        return self._send_ops[slot] if slot < len(self._send_ops) else None

    def apply(self, prepare: Prepare, reply: bytes) -> str | None:
        header = prepare.header
        if header.operation == Operation.SEND_MESSAGES:
            batch_header, messages = wire.read_batch(prepare.body)
            base = len(self.message_ids)
            if batch_header.base_offset != base:
                return (
                    f"inconsistent offsets: op {header.op} stamped "
                    f"{batch_header.base_offset}, next is {base}"
                )
            for index, message in enumerate(messages):
                if message.offset != base + index:
                    return f"inconsistent offsets inside op {header.op}"
                if message.id in self.offset_of:
                    return (
                        f"duplicate: message {message.id:#x} at offsets "
                        f"{self.offset_of[message.id]} and {message.offset}"
                    )
                self.offset_of[message.id] = message.offset
                self.message_ids.append(message.id)
            self.sends[header.op] = (base, len(messages))
            self._send_bases.append(base)
            self._send_ops.append(header.op)
            confirmations = wire.SendMessagesReply.decode(reply).confirmations
            if len(confirmations) != 1 or confirmations[0].base_offset != base:
                return f"send at op {header.op} answered {confirmations}, base offset is {base}"
            return None
        # A control body: canonical CBOR [head next offset, head timestamp, ...], the head
        # being the log position it was prepared at.
        items = cbor2.loads(prepare.body)
        if items[0] != len(self.message_ids):
            return f"inconsistent offsets: op {header.op} prepared at {items[0]}"
        if header.operation == Operation.STORE_CONSUMER_OFFSET:
            # [..., kind, id, offset, user]. The simulated clients store a few consumer ids
            # each, far below the quota.
            offset = items[4]
            expect_ok = self.retained_start <= offset < len(self.message_ids)
            return _expect(expect_ok, reply, f"store offset {offset}")
        if header.operation == Operation.TRUNCATE_PARTITION:
            # [..., "retain", offset] (retention, DELETE_SEGMENTS) or [..., generation]
            # (a purge the metadata group ordered).
            head = len(self.message_ids)
            if len(items) == 4:
                start = max(self.retained_start, min(items[3], head))
                self.retentions += 1
            else:
                generation = items[2]
                start = self.retained_start
                if generation > self.purge_generation:
                    self.purge_generation = generation
                    start = head
                    self.purges += 1
            if start != self.retained_start:
                self.retained.append((header.op, start))
            # A truncation's reply carries nothing (its proposer only needs the commit).
            if reply != b"":
                return f"truncation at op {header.op} answered {reply[:12]!r}"
            return None
        return f"the model does not know partition operation {header.operation}"
