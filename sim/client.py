"""Simulated clients: the operator, producers and consumers of the workload.

Purpose: drive the cluster the way Iggy clients do, through the same wire payloads
(``sdk.wire``), and report to the checkers what they were told.

Invariants:

1. A client has at most one request outstanding (VSR Revisited §4: one request per client
   at a time) and request numbers only grow.
2. A request is retried with the same client id, session, request number and body until
   it gets a reply from the state machine: on a timeout (to every node, since the primary
   may have moved), and after an admission error (a lagging node). A send is therefore
   never re-submitted under a new request number, which is what makes exactly-once
   checkable. A consensus session error abandons the request (it may or may not have been
   applied) and the client registers again. A login is the one request a client sends
   beside its outstanding one: the login that opened its session, repeated on a
   connection that refused a request as not logged in there (40), so that connection joins
   the session (the client table answers it with the same session while it lives). An
   answer to that repeat which says the session is gone (an eviction, or another session)
   is taken for the loss of the session, as a session error to the outstanding request
   is: the request is abandoned and the client logs in again. A client is never left
   waiting on a session it no longer holds.
3. Every random choice comes from the client's own stream; a client never reads the
   cluster's state directly, only replies.
4. A *number reuser* (``WorkloadOptions.number_reusers``) numbers its partition requests
   (sends, offset stores) as some Iggy clients do: each under the client's current request
   number, which only its metadata requests advance. Its retries are the same bytes, so
   they stay exactly-once; its other requests under one number are each applied. A reply
   is taken for the pending request only if it names that request's identity digest
   (or none: an admission error).
5. A producer or consumer closes a connection or logs out only between two operations,
   and never the connection a read-back it still owes must use.

Theory of operation: each client is a little state machine ticked by the world. The
*operator* bootstraps the cluster as the runtime does on first start (a system register,
``CreateRootUser``) and creates the workload's stream, topic and consumer group. Every
client then logs in (``LOGIN_REGISTER``) and runs its script: producers send batches of
uniquely identified messages to chosen partitions; consumers poll partitions from their
own position, store consumer offsets, join and now and then leave the consumer group
(polling as its member half the time while joined); every client may create a few
streams of its own. Between two operations a producer or consumer now and then closes its
connection to a node (which ends the session if that connection registered it) or logs out
(``LOGOUT_USER``) and logs in again. A client logs in on one node; any other node it
reaches refuses it as not logged in on that connection until it repeats its login there.
In the healed phase no new operation starts. A *probe* (``Role.PROBE``) is none of these:
it belongs to a scenario test, which sends its requests by hand and reads its replies; the
invariants above are the workload's and do not bind it.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field
from typing import Final, Protocol

from broker.core.identity import request_checksum
from broker.state.codec import encode_command
from broker.state.credentials import hash_password
from broker.state.metadata import CreateRootUser, Register
from sdk import wire
from sdk.wire.codes import CommandCode, IggyErrorCode, Operation
from sim.network import ClientReply, ClientRequest
from sim.node import STREAM_ID, SYSTEM_CODE, TOPIC_ID
from sim.options import Options

ROOT_USERNAME: Final = "iggy"
ROOT_PASSWORD: Final = "iggy-sim-password"
STREAM_NAME: Final = "sim"
TOPIC_NAME: Final = "events"
GROUP_NAME: Final = "readers"
METADATA_ROUTE: Final = (-1, 0)
"""``Pending.route`` of a metadata request."""
THINK_TICKS_MAX: Final = 20
POLL_COUNT_MAX: Final = 8
#: Ticks to wait after an admission error before retrying (the node may be lagging).
BACKOFF_TICKS: Final = 15
#: The longest wait of a long poll, in ticks of ``TICK_MS`` (the simulator's tick,
#: ``sim.node.TICK_US``): below every client's request timeout (60 ticks or more).
LONG_POLL_WAIT_TICKS_MAX: Final = 40
TICK_MS: Final = 10


class Kind(enum.Enum):
    """What a request is, as the checkers need to know it."""

    SYSTEM_REGISTER = "system_register"
    CREATE_ROOT = "create_root"
    LOGIN = "login"
    CREATE_STREAM = "create_stream"
    CREATE_TOPIC = "create_topic"
    CREATE_GROUP = "create_group"
    JOIN_GROUP = "join_group"
    LEAVE_GROUP = "leave_group"
    SEND = "send"
    POLL = "poll"
    READ_BACK = "read_back"
    POLL_DELETED = "poll_deleted"
    STORE_OFFSET = "store_offset"
    OFFSET_READ = "offset_read"
    CREATE_CHURN_TOPIC = "create_churn_topic"
    CREATE_PARTITION = "create_partition"
    DELETE_PARTITION = "delete_partition"
    DELETE_TOPIC = "delete_topic"
    LOGOUT = "logout"
    DELETE_SEGMENTS = "delete_segments"
    PURGE_TOPIC = "purge_topic"


#: The operator's data lifecycle requests on the workload topic, a few seconds apart.
LIFECYCLE: Final = (Kind.DELETE_SEGMENTS, Kind.PURGE_TOPIC)
LIFECYCLE_PAUSE_TICKS: Final = (100, 400)
#: Kinds answered from committed local state, not through consensus.
READS: Final = (Kind.POLL, Kind.READ_BACK, Kind.POLL_DELETED, Kind.OFFSET_READ)
#: The operator's topic churn (with its sends to the churned topic's partitions).
CHURN: Final = (
    Kind.CREATE_CHURN_TOPIC,
    Kind.CREATE_PARTITION,
    Kind.DELETE_PARTITION,
    Kind.DELETE_TOPIC,
    Kind.POLL_DELETED,
)
TRANSIENT: Final = int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
UNAUTHENTICATED: Final = int(IggyErrorCode.UNAUTHENTICATED)
INVALID_OFFSET: Final = int(IggyErrorCode.INVALID_OFFSET)


@dataclass(slots=True)
class Pending:
    """The one outstanding request of a client."""

    kind: Kind
    #: Where the client routes it: ``METADATA_ROUTE``, or (topic id, partition id) in
    #: the workload's stream. The client's own key; it does not know group ids.
    route: tuple[int, int]
    request: ClientRequest
    sent_tick: int
    #: The tick of its first transmission, and of the reply that completed it.
    first_sent_tick: int = -1
    replied_tick: int = -1
    #: Send: the partition and the message ids; poll: the partition and the position.
    partition: int = 0
    message_ids: tuple[int, ...] = ()
    position: int = 0
    #: Store offset: the offset stored; create stream: the name.
    offset: int = 0
    name: str = ""
    attempts: int = 0
    retry_tick: int = 0
    #: The node whose reply completed the request.
    replied_by: int = -1
    #: Read-back: the connection (node, incarnation) that acknowledged the send it reads;
    #: poll of a deleted topic: the one that acknowledged the deletion.
    via: tuple[int, int] = (-1, -1)
    #: The topic id of a partition request (the workload topic's, or a churned one's).
    topic: int = TOPIC_ID
    #: Poll: as a member of the consumer group (the node may tell it to resync).
    as_member: bool = False
    #: The request's identity digest, as the node computes it (``broker.core.identity``);
    #: empty for logins and system requests, whose digests name what the node resolved.
    checksum: bytes = b""


class Reporter(Protocol):
    """Where a client reports what it was told (the checkers)."""

    def on_reply(self, client: Client, pending: Pending, reply: ClientReply) -> None: ...

    def on_abandoned(self, client: Client, pending: Pending) -> None: ...


class Role(enum.Enum):
    OPERATOR = "operator"
    PRODUCER = "producer"
    CONSUMER = "consumer"
    PROBE = "probe"
    """Runs no script: a scenario sends its requests (``Client.ask``), one at a time or
    several, and reads every reply it got (``Client.replies``); nothing is retried and
    nothing is reported to the checkers (``World.add_probe``)."""


@dataclass(slots=True)
class Client:
    """One simulated client; the world calls ``tick`` and ``on_reply``."""

    index: int
    endpoint: int
    client_id: int
    role: Role
    options: Options
    prng: random.Random
    reporter: Reporter
    session: int = 0
    request_next: int = 0
    #: Invariant 4: partition requests reuse the current request number.
    reuses_numbers: bool = False
    pending: Pending | None = None
    ready_tick: int = 0
    finishing: bool = False
    #: Script progress.
    step: int = 0
    batches_sent: int = 0
    #: Polls this client sent as long polls.
    long_polls: int = 0
    message_seq: int = 0
    streams_created: int = 0
    streams_wanted: int = 0
    positions: dict[int, int] = field(default_factory=dict)
    #: A producer's latest acknowledged send it will read back: the connection that
    #: acknowledged it, the partition, its base offset and message ids.
    read_back_due: tuple[tuple[int, int], int, int, tuple[int, ...]] | None = None
    joined: bool = False
    #: The operator's topic churn: how many topics it still creates and deletes, the
    #: step it is at, and the topic of the current round (its id, once created).
    churns_left: int = 0
    churn_step: int = 0
    churn_round: int = 0
    churn_topic: int = -1
    churn_via: tuple[int, int] = (-1, -1)
    #: The operator's DELETE_SEGMENTS and PURGE_TOPIC requests still to make.
    lifecycle_left: int = 0
    #: Which node answered a replicated request of each group last: the likely primary.
    primary_hint: dict[tuple[int, int], int] = field(default_factory=dict)
    outbox: list[tuple[int, ClientRequest]] = field(default_factory=list)
    #: The login that opened the current session: repeated on a connection that has not
    #: joined it (invariant 2).
    login: ClientRequest | None = None
    #: Nodes whose connection this client closed this tick (the world tells them).
    closes: list[int] = field(default_factory=list)
    logouts: int = 0
    connections_closed: int = 0
    completed: int = 0
    abandoned: int = 0
    #: A probe's replies, in arrival order, with the node that sent each.
    replies: list[tuple[int, ClientReply]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.streams_wanted = self.prng.randint(0, self.options.workload.streams_per_client_max)
        if self.role is Role.OPERATOR:
            self.step = 0
            self.churns_left = self.options.workload.topic_churns
            self.lifecycle_left = self.options.workload.lifecycle_ops
        else:
            self.step = 3  # everyone but the operator starts with a login

    # Scripts -----------------------------------------------------------------------------

    def tick(self, tick: int) -> None:
        if self.role is Role.PROBE:
            return  # its requests are the scenario's (``ask``)
        pending = self.pending
        if pending is not None:
            if pending.retry_tick and tick >= pending.retry_tick:
                pending.retry_tick = 0
                self._transmit(tick, pending, broadcast=False)
            elif tick - pending.sent_tick >= self.options.workload.request_timeout_ticks:
                self._transmit(tick, pending, broadcast=True)
            return
        if self.finishing or tick < self.ready_tick:
            return
        made = self._logout() if self._between_operations() else self._next_operation()
        if made is None:
            return
        made.sent_tick = tick
        made.checksum = _identity(made.request)
        self.pending = made
        self._transmit(tick, made, broadcast=False)

    def ask(self, node: int, code: CommandCode, payload: bytes) -> ClientRequest:
        """A probe's request to ``node`` (``make``), sent at the world's next step; its
        replies arrive in ``replies``."""
        request = self.make(code, payload)
        self.outbox.append((node, request))
        return request

    def make(self, code: CommandCode, payload: bytes) -> ClientRequest:
        """A probe's request under its session and its next request number, not sent: a
        scenario may hand it to a node itself (``Node.on_client_request``), as if it had
        arrived without delay."""
        assert self.role is Role.PROBE
        return self._request(code, payload)

    def answers(self, request: ClientRequest) -> list[tuple[int, ClientReply]]:
        """A probe's replies to ``request`` so far (by its number), with their nodes."""
        return [(node, r) for node, r in self.replies if r.request == request.request]

    def _between_operations(self) -> bool:
        """Now and then close a connection, or log out (invariant 5); True when a logout
        was made the next operation."""
        if self.role is Role.OPERATOR or self.step < 7 or self.read_back_due is not None:
            return False
        workload = self.options.workload
        roll = self.prng.random()
        if roll < workload.connection_closes:
            self.closes.append(self.prng.randrange(self.options.node_count))
            self.connections_closed += 1
            return False
        return roll < workload.connection_closes + workload.logouts

    def _logout(self) -> Pending:
        request = self._request(CommandCode.LOGOUT_USER, b"")
        return Pending(Kind.LOGOUT, METADATA_ROUTE, request, 0)

    def _request(self, code: int, payload: bytes, *, session: int | None = None) -> ClientRequest:
        partition_plane = code in (CommandCode.SEND_MESSAGES, CommandCode.STORE_CONSUMER_OFFSET)
        number = self.request_next
        if not (self.reuses_numbers and partition_plane):
            self.request_next += 1
        return ClientRequest(
            self.client_id, self.session if session is None else session, number, code, payload
        )

    def _consumer(self) -> wire.Consumer:
        """This client as a single consumer (its index is its consumer id)."""
        return wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier.numeric(self.index))

    def _next_operation(self) -> Pending | None:
        """The next operation of the script, or None when there is nothing left to do."""
        if self.role is Role.OPERATOR and self.step < 3:
            return self._bootstrap()
        if self.step == 3:
            login = wire.LoginRegister(ROOT_USERNAME, ROOT_PASSWORD).encode()
            return Pending(
                Kind.LOGIN, METADATA_ROUTE, self._request(CommandCode.LOGIN_REGISTER, login), 0
            )
        if self.role is Role.OPERATOR and self.step < 7:
            return self._setup()
        # Producers and consumers interleave their stream creations with their main work;
        # the operator does them right away.
        wants_stream = self.streams_created < self.streams_wanted
        if wants_stream and (self.role is Role.OPERATOR or self.prng.random() < 0.2):
            name = f"c{self.index}-s{self.streams_created}"
            payload = wire.CreateStream(name).encode()
            return Pending(
                Kind.CREATE_STREAM,
                METADATA_ROUTE,
                self._request(CommandCode.CREATE_STREAM, payload),
                0,
                name=name,
            )
        if self.role is Role.PRODUCER:
            if self.read_back_due is not None:
                return self._read_back()
            if self.batches_sent >= self.options.workload.batches_per_producer:
                return None
            return self._send()
        if self.role is Role.CONSUMER:
            return self._consume()
        if self.churns_left > 0:
            return self._churn()
        if self.lifecycle_left > 0:
            return self._lifecycle()
        return None

    def _bootstrap(self) -> Pending:
        if self.step == 0:
            # What the runtime does on first start: a system session that carries the
            # root user's creation (the register itself is rejected: no user exists yet).
            operation, body = encode_command(Register(self.client_id, 0))
            payload = operation.to_bytes(4, "little") + body
            return Pending(
                Kind.SYSTEM_REGISTER,
                METADATA_ROUTE,
                self._request(SYSTEM_CODE, payload, session=0),
                0,
            )
        assert self.step == 1
        salt = self.prng.getrandbits(128).to_bytes(16, "little")
        password = hash_password(ROOT_PASSWORD, salt, n=16, r=1, p=1)
        operation, body = encode_command(CreateRootUser(ROOT_USERNAME, password))
        payload = operation.to_bytes(4, "little") + body
        self.step = 2  # the register's reply moved us to 1; creation is step 2
        return Pending(Kind.CREATE_ROOT, METADATA_ROUTE, self._request(SYSTEM_CODE, payload), 0)

    def _setup(self) -> Pending:
        stream_id = wire.Identifier.numeric(0)
        topic_id = wire.Identifier.numeric(0)
        if self.step == 4:
            payload = wire.CreateStream(STREAM_NAME).encode()
            return Pending(
                Kind.CREATE_STREAM,
                METADATA_ROUTE,
                self._request(CommandCode.CREATE_STREAM, payload),
                0,
                name=STREAM_NAME,
            )
        if self.step == 5:
            durability = "persisted" if self.options.persisted else "replicated"
            option = wire.OptionEntry.of("durability", durability, wire.HeaderKind.STRING)
            payload = wire.CreateTopic(
                stream_id, self.options.partition_count, TOPIC_NAME, (option,)
            ).encode()
            return Pending(
                Kind.CREATE_TOPIC,
                METADATA_ROUTE,
                self._request(CommandCode.CREATE_TOPIC, payload),
                0,
                name=TOPIC_NAME,
            )
        assert self.step == 6
        payload = wire.CreateConsumerGroup(stream_id, topic_id, GROUP_NAME).encode()
        return Pending(
            Kind.CREATE_GROUP,
            METADATA_ROUTE,
            self._request(CommandCode.CREATE_CONSUMER_GROUP, payload),
            0,
            name=GROUP_NAME,
        )

    def _send(self) -> Pending:
        return self._batch(TOPIC_ID, self.prng.randrange(self.options.partition_count))

    def _batch(self, topic: int, partition: int) -> Pending:
        """A send of uniquely identified messages to ``partition`` of ``topic``."""
        count = self.prng.randint(1, self.options.workload.messages_per_batch_max)
        messages = []
        ids = []
        for _ in range(count):
            self.message_seq += 1
            message_id = (self.index << 32) | self.message_seq
            ids.append(message_id)
            payload = f"c{self.index}-m{self.message_seq}".encode()
            messages.append(wire.OutgoingMessage(message_id, payload))
        body = wire.build_send_messages(
            wire.Identifier.numeric(STREAM_ID),
            wire.Identifier.numeric(topic),
            wire.PartitionId(partition),
            messages,
        )
        return Pending(
            Kind.SEND,
            (topic, partition),
            self._request(CommandCode.SEND_MESSAGES, bytes(body)),
            0,
            partition=partition,
            message_ids=tuple(ids),
            topic=topic,
        )

    def _churn(self) -> Pending:
        """The operator's topic churn, while producers and consumers go on: create a
        topic of one partition, send to it, add a partition and send to that, delete the
        partition, delete the topic, then poll it on the connection that acknowledged the
        deletion (it must be gone). Every node hosts the topic's groups in between."""
        stream = wire.Identifier.numeric(STREAM_ID)
        topic = wire.Identifier.numeric(self.churn_topic)
        step = self.churn_step
        if step == 0:
            name = f"churn-{self.churn_round}"
            durability = "persisted" if self.options.persisted else "replicated"
            option = wire.OptionEntry.of("durability", durability, wire.HeaderKind.STRING)
            payload = wire.CreateTopic(stream, 1, name, (option,)).encode()
            request = self._request(CommandCode.CREATE_TOPIC, payload)
            return Pending(Kind.CREATE_CHURN_TOPIC, METADATA_ROUTE, request, 0, name=name)
        if step in (1, 3):
            return self._batch(self.churn_topic, step // 2)
        if step == 2:
            payload = wire.PartitionsChange(stream, topic, 1).encode()
            request = self._request(CommandCode.CREATE_PARTITIONS, payload)
            return Pending(Kind.CREATE_PARTITION, METADATA_ROUTE, request, 0)
        if step == 4:
            payload = wire.PartitionsChange(stream, topic, 1).encode()
            request = self._request(CommandCode.DELETE_PARTITIONS, payload)
            return Pending(Kind.DELETE_PARTITION, METADATA_ROUTE, request, 0)
        if step == 5:
            payload = wire.TopicRef(stream, topic).encode()
            request = self._request(CommandCode.DELETE_TOPIC, payload)
            return Pending(Kind.DELETE_TOPIC, METADATA_ROUTE, request, 0)
        assert step == 6
        poll = _poll(self._consumer(), stream, topic, 0, 0, POLL_COUNT_MAX)
        return Pending(
            Kind.POLL_DELETED,
            (self.churn_topic, 0),
            self._request(CommandCode.POLL_MESSAGES, poll),
            0,
            via=self.churn_via,
            topic=self.churn_topic,
        )

    def _lifecycle(self) -> Pending:
        """Delete the oldest sealed segments of a partition of the workload topic, or now
        and then purge the whole topic, while producers and consumers go on."""
        stream = wire.Identifier.numeric(STREAM_ID)
        topic = wire.Identifier.numeric(TOPIC_ID)
        if self.prng.random() < 0.3:
            payload = wire.TopicRef(stream, topic).encode()
            request = self._request(CommandCode.PURGE_TOPIC, payload)
            return Pending(Kind.PURGE_TOPIC, METADATA_ROUTE, request, 0, topic=TOPIC_ID)
        partition = self.prng.randrange(self.options.partition_count)
        count = self.prng.randint(1, 3)
        payload = wire.DeleteSegments(stream, topic, partition, count).encode()
        request = self._request(CommandCode.DELETE_SEGMENTS, payload)
        return Pending(
            Kind.DELETE_SEGMENTS, METADATA_ROUTE, request, 0, partition=partition, topic=TOPIC_ID
        )

    def _churn_next(self, pending: Pending, reply: ClientReply) -> None:
        """Move the churn on after its request was answered (by the state machine)."""
        ok = reply.body[:4] == wire.RESULT_OK[:4]
        step = self.churn_step
        if step == 0 and ok:
            details = wire.TopicDetails.decode(
                wire.split_result(Operation.CREATE_TOPIC, reply.body)
            )
            self.churn_topic = details.topic.id
        if step == 5:
            self.churn_via = (pending.replied_by, reply.incarnation)
        if (step == 0 and not ok) or step == 6:
            # A name taken (a create abandoned with its session, then applied): next round.
            self.churns_left -= 1
            self.churn_round += 1
            self.churn_step = 0
            return
        self.churn_step = step + 1

    def _read_back(self) -> Pending:
        """Poll the batch the last acknowledged send wrote, on the connection that
        acknowledged it: the node must answer with it (read-your-writes)."""
        assert self.read_back_due is not None
        via, partition, base_offset, ids = self.read_back_due
        self.read_back_due = None
        workload = wire.Identifier.numeric(0)
        poll = _poll(self._consumer(), workload, workload, partition, base_offset, len(ids))
        return Pending(
            Kind.READ_BACK,
            (TOPIC_ID, partition),
            self._request(CommandCode.POLL_MESSAGES, poll),
            0,
            partition=partition,
            message_ids=ids,
            position=base_offset,
            via=via,
        )

    def _consume(self) -> Pending:
        partition = self.prng.randrange(self.options.partition_count)
        position = self.positions.get(partition, 0)
        stream_id = wire.Identifier.numeric(0)
        topic_id = wire.Identifier.numeric(0)
        consumer = self._consumer()
        roll = self.prng.random()
        if not self.joined and roll < 0.1:
            payload = wire.GroupRef(stream_id, topic_id, wire.Identifier.numeric(0)).encode()
            return Pending(
                Kind.JOIN_GROUP,
                METADATA_ROUTE,
                self._request(CommandCode.JOIN_CONSUMER_GROUP, payload),
                0,
                name=GROUP_NAME,
            )
        if self.joined and roll < 0.04:
            # Leave now and then, so the group rebalances while its members poll.
            payload = wire.GroupRef(stream_id, topic_id, wire.Identifier.numeric(0)).encode()
            return Pending(
                Kind.LEAVE_GROUP,
                METADATA_ROUTE,
                self._request(CommandCode.LEAVE_CONSUMER_GROUP, payload),
                0,
                name=GROUP_NAME,
            )
        if position > 0 and roll < 0.3:
            offset = position - 1
            if self.joined and self.prng.random() < 0.5:
                # A member commits for the group, which lets a partition moving away from
                # it go before the rebalancing timeout (cooperative revocation).
                consumer = wire.Consumer(
                    wire.ConsumerKind.CONSUMER_GROUP, wire.Identifier.numeric(0)
                )
            store = wire.StoreConsumerOffset(
                consumer, stream_id, topic_id, partition, offset, wire.AckLevel.NO_ACK
            ).encode()
            return Pending(
                Kind.STORE_OFFSET,
                (TOPIC_ID, partition),
                self._request(CommandCode.STORE_CONSUMER_OFFSET, store),
                0,
                partition=partition,
                offset=offset,
            )
        if roll < 0.38:
            # Read back what is stored, at any node: a backup asks for a read index.
            read = wire.GetConsumerOffset(consumer, stream_id, topic_id, partition).encode()
            return Pending(
                Kind.OFFSET_READ,
                (TOPIC_ID, partition),
                self._request(CommandCode.GET_CONSUMER_OFFSET, read),
                0,
                partition=partition,
            )
        as_member = self.joined and self.prng.random() < 0.5
        if as_member:
            # The partition may be another member's in this generation: the node then
            # answers with a resync (no messages), as Iggy's server does.
            consumer = wire.Consumer(wire.ConsumerKind.CONSUMER_GROUP, wire.Identifier.numeric(0))
        count = self.prng.randint(1, POLL_COUNT_MAX)
        poll = _poll(consumer, stream_id, topic_id, partition, position, count)
        code = int(CommandCode.POLL_MESSAGES)
        share = self.options.workload.long_poll_share
        if share and self.prng.random() < share:
            # A long poll: the node may hold it until the message at ``position`` is
            # applied there; its answer is checked as any poll's.
            wait_ms = self.prng.randint(1, LONG_POLL_WAIT_TICKS_MAX) * TICK_MS
            poll = wait_ms.to_bytes(4, "little") + poll
            code = wire.LONG_POLL_CODE
            self.long_polls += 1
        return Pending(
            Kind.POLL,
            (TOPIC_ID, partition),
            self._request(code, poll),
            0,
            partition=partition,
            position=position,
            as_member=as_member,
        )

    # Transmission and replies ------------------------------------------------------------

    def _transmit(self, tick: int, pending: Pending, *, broadcast: bool) -> None:
        pending.attempts += 1
        pending.sent_tick = tick
        if pending.first_sent_tick < 0:
            pending.first_sent_tick = tick
        nodes = self.options.node_count
        if broadcast:
            for node in range(nodes):
                self.outbox.append((node, pending.request))
            return
        if pending.kind is Kind.READ_BACK:
            # On the connection that acknowledged the send (a new one if it restarted).
            self.outbox.append((pending.via[0], pending.request))
            return
        hint = self.primary_hint.get(pending.route)
        if hint is None or pending.kind in READS:
            # A first guess: the primary of view 0 of the first groups.
            topic, partition = pending.route
            guess = 0 if topic < 0 else 1 + partition
            hint = (guess if hint is None else self.prng.randrange(nodes)) % nodes
        elif self.prng.random() < self.options.workload.any_node_writes:
            hint = self.prng.randrange(nodes)  # a backup forwards it to the primary
        self.outbox.append((hint, pending.request))

    def _session_lost(self) -> None:
        """Forget the session and log in again; what was pending under it is abandoned
        first (``_abandon``)."""
        self.session = 0
        self.login = None
        # Before the root user exists only a system session works: open a new one, as the
        # runtime's system client does when its session is lost.
        self.step = 0 if self.role is Role.OPERATOR and self.step < 3 else 3

    def _abandon(self, pending: Pending) -> None:
        """Give up ``pending`` with the session it ran under: it may or may not have been
        applied (invariant 2)."""
        self.reporter.on_abandoned(self, pending)
        self.abandoned += 1
        self.pending = None
        if pending.kind in CHURN or pending.topic != TOPIC_ID:
            self.churns_left = 0  # where the churn stood is unknown: it ends here

    def _login_lost(self, reply: ClientReply) -> bool:
        """Whether ``reply``, to the login that opened the current session (repeated to
        join it on another connection), says the session is gone."""
        login = self.login
        if login is None or reply.request != login.request:
            return False
        # Told so (its session was evicted or superseded), or it opened a new session: the
        # one this client had ended (its connection closed).
        return bool(reply.error) or reply.op not in (0, self.session)

    def on_reply(self, tick: int, node: int, reply: ClientReply) -> None:
        if self.role is Role.PROBE:
            self.replies.append((node, reply))
            return
        pending = self.pending
        if self._login_lost(reply):
            # What was pending under the session may or may not have been applied: abandon
            # it, and log in again. The answer names the join, not the pending request, so
            # nothing below would take it, and the client would wait on a lost session.
            if pending is not None:
                self._abandon(pending)
            self._session_lost()
            return
        login = self.login
        if login is not None and reply.request == login.request:
            return  # the session lives (or the join was refused: the next 40 sends it again)
        if pending is None or reply.request != pending.request.request:
            return  # a duplicate, or the answer to an attempt we already got an answer to
        named = reply.request_checksum
        if named and pending.checksum and named != pending.checksum:
            return  # the answer to another request under the same number (invariant 4)
        if reply.error:
            # The session is gone (evicted or superseded): the request may or may not have
            # been applied. Abandon it and log in again.
            self._abandon(pending)
            self._session_lost()
            return
        if reply.status == UNAUTHENTICATED and pending.kind is not Kind.LOGIN:
            if self.login is not None:
                self.outbox.append((node, self.login))  # join the session there
            pending.retry_tick = tick + BACKOFF_TICKS
            return
        if pending.kind is Kind.STORE_OFFSET and reply.op == 0 and reply.status == INVALID_OFFSET:
            # Refused at prepare: the offset is below the partition's retained start now
            # (a purge or retention moved it past this consumer). Not retried: it never
            # entered the log, and the consumer's next poll starts past it.
            self.pending = None
            self.completed += 1
            self.ready_tick = tick + self.prng.randint(0, THINK_TICKS_MAX)
            return
        if reply.op == 0 and reply.status != 0 and pending.kind not in READS:
            # Refused before it entered the log (a lagging node, no topic yet): same
            # request again after a pause, so it is never applied twice, to the primary
            # the refusal names, as the SDK routes again.
            if reply.primary >= 0:
                self.primary_hint[pending.route] = reply.primary
            pending.retry_tick = tick + BACKOFF_TICKS
            return
        gone = pending.kind is Kind.POLL_DELETED and reply.status != TRANSIENT
        if pending.kind in READS and reply.status != 0 and not gone:
            pending.retry_tick = tick + BACKOFF_TICKS
            return
        if pending.kind not in READS:
            # The primary the reply names: not the node that answered when a backup
            # forwarded the write.
            self.primary_hint[pending.route] = reply.primary if reply.primary >= 0 else node
        pending.replied_by = node
        pending.replied_tick = tick
        self.reporter.on_reply(self, pending, reply)
        self._advance(tick, pending, reply)
        self.pending = None
        self.completed += 1
        self.ready_tick = tick + self.prng.randint(0, THINK_TICKS_MAX)
        if pending.kind in LIFECYCLE:
            self.lifecycle_left -= 1
            self.ready_tick = tick + self.prng.randint(*LIFECYCLE_PAUSE_TICKS)

    def _advance(self, tick: int, pending: Pending, reply: ClientReply) -> None:
        del tick
        kind = pending.kind
        if kind is Kind.SYSTEM_REGISTER:
            self.session = reply.op
            self.step = 1
        elif kind is Kind.CREATE_ROOT:
            self.step = 3
        elif kind is Kind.LOGIN:
            if reply.body[:4] == wire.RESULT_OK[:4] and len(reply.body) > 4:
                self.session = reply.op
                self.login = pending.request
                self.step = 4 if self.role is Role.OPERATOR else 7
            # A rejected login (the root user is not there yet) is simply tried again,
            # under a new request number: the register committed, nothing else did.
        elif kind is Kind.CREATE_STREAM:
            if self.role is Role.OPERATOR and self.step == 4:
                self.step = 5
            else:
                self.streams_created += 1
        elif kind is Kind.CREATE_TOPIC:
            self.step = 6
        elif kind is Kind.CREATE_GROUP:
            self.step = 7
        elif kind is Kind.JOIN_GROUP:
            self.joined = True
        elif kind is Kind.LOGOUT:
            self.logouts += 1
            self.session = 0
            self.login = None
            self.joined = False  # the session's memberships ended with it
            self.step = 3  # log in again
        elif kind is Kind.LEAVE_GROUP:
            # Left, or not a member any more (its session ended since it joined).
            self.joined = False
        elif kind in CHURN or (kind is Kind.SEND and pending.topic != TOPIC_ID):
            self._churn_next(pending, reply)
        elif kind is Kind.SEND:
            self.batches_sent += 1
            share = self.options.workload.read_back_share
            if share and self.prng.random() < share:
                confirmation = wire.SendMessagesReply.decode(reply.body).confirmations[0]
                via = (pending.replied_by, reply.incarnation)
                due = (via, pending.partition, confirmation.base_offset, pending.message_ids)
                self.read_back_due = due
        elif kind is Kind.POLL:
            try:
                polled = wire.PollMessagesReply.decode(reply.body)
            except wire.ProtocolError:
                return
            messages = polled.messages()
            if messages:
                self.positions[pending.partition] = messages[-1].offset + 1


def _poll(
    consumer: wire.Consumer,
    stream: wire.Identifier,
    topic: wire.Identifier,
    partition: int,
    offset: int,
    count: int,
) -> bytes:
    """A poll of ``count`` messages from ``offset``, without auto-commit."""
    strategy = wire.PollingStrategy.offset(offset)
    return wire.PollMessages(consumer, stream, topic, partition, strategy, count, False).encode()


def _identity(request: ClientRequest) -> bytes:
    """The identity digest the node gives ``request``; empty where it names what the node
    resolved (a login's user, a system request)."""
    if request.code in (SYSTEM_CODE, CommandCode.LOGIN_REGISTER):
        return b""
    if request.code == wire.LONG_POLL_CODE:
        # Answered as the POLL_MESSAGES it carries, identified by its whole body.
        poll = wire.LongPollMessages.decode(request.payload).poll
        return request_checksum(CommandCode.POLL_MESSAGES, poll, request.payload)
    code = CommandCode(request.code)
    payload = wire.COMMANDS[code].decode_request(request.payload)
    return request_checksum(code, payload, request.payload)
