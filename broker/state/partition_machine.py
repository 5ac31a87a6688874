"""A partition group's consensus state machine, and the request bodies it takes.

Purpose: :class:`PartitionMachine` implements ``consensus.protocols.StateMachine``
(``apply(prepare) -> bytes``, ``snapshot``, ``restore``) over
:class:`broker.state.partition.PartitionState`, with the primary-side ``prepare`` hook
that turns a client request body into the prepare body, and serves poll and get consumer
offset from committed local state, never replicated. Beside it, the request bodies it
takes are built (:func:`send_body`, :func:`resolved_offset_request`,
:func:`store_offset_body`, :func:`purge_body`, :func:`retain_body`) and read
(:func:`partition_request`).

Invariants:

1. A partition prepare body is built only by :meth:`PartitionMachine.prepare`; the body a
   client sent (its wire payload) is never journaled as is.
2. A send is decoded and verified once, where it is admitted (:func:`send_body`): the
   request body the group takes is the verified batch and its message checksums, which
   ``prepare`` splits and stamps without reading a message.
3. A store of a consumer offset names the user it is charged to in the request body the
   admitting node builds (:func:`resolved_offset_request`, :func:`store_offset_body`),
   from the session it checked: a backup forwards that body unchanged, and the primary's
   partition machine never looks a session up in metadata it may not have applied yet.
4. Replies are built from the prepare and the committed state alone, so every replica
   returns identical bytes: plain confirmations for SendMessages, result-framed for store
   and delete consumer offset, empty for a purge or a retention.
5. Nothing here reads a clock, draws randomness or touches IO; time arrives as the
   prepare's timestamp.
"""

from __future__ import annotations

import struct
from typing import Final

import cbor2

from broker.state.errors import NOT_FOUND, ErrorCode, StateError
from broker.state.partition import (
    RETAIN_TAG,
    Appended,
    Applied,
    Buffer,
    ConsumerKey,
    ConsumerKind,
    DeleteConsumerOffset,
    PartitionRequest,
    PartitionState,
    PollingKind,
    PurgePartition,
    Refused,
    RetainPartition,
    SendMessages,
    StoreConsumerOffset,
)
from broker.state.records import JournalHost, PartitionJournal
from broker.state.routing import PartitionRoute
from consensus.messages import Prepare
from consensus.protocols import Prepared, RequestBody, RequestRejected, joined_body
from sdk import wire
from sdk.wire.batch import BATCH_HEADER, BATCH_HEADER_SIZE, verify_batch
from sdk.wire.codes import Operation

CHECKPOINT_AFTER_OPERATIONS: Final = (int(Operation.TRUNCATE_PARTITION),)
"""A partition group's replicas checkpoint as each purge or retention commits
(``ReplicaConfig.checkpoint_after_operations``): its host deletes the segments below the
retained start only up to the durable checkpoint, so the space is freed at once, not up
to a checkpoint interval of further ops later (never, on a node refusing new messages)."""


class PartitionMachine:
    """One partition group's ``StateMachine``, plus the primary-side ``prepare`` hook.

    Client request bodies (what ``prepare`` receives) are a SEND_MESSAGES batch as
    admission verified it (:func:`send_body`), Iggy wire payloads of
    DELETE_CONSUMER_OFFSET, routed here by the runtime, and of
    STORE_CONSUMER_OFFSET behind the user id it is charged to (:data:`STORE_USER`);
    consumer groups in them must already name the group by numeric id (see
    :func:`resolved_offset_request`). ``TRUNCATE_PARTITION`` carries :func:`purge_body`
    or :func:`retain_body`.
    """

    def __init__(self, stream_id: int, topic_id: int, partition_id: int, log: JournalHost) -> None:
        """``log`` is the group's journal host (the runtime's ``GroupStore``, the
        simulator's disk): the partition reads its records and its index."""
        self._log = PartitionJournal(log)
        self.state = PartitionState(stream_id, topic_id, partition_id, self._log)

    # -- primary ---------------------------------------------------------------------------

    def prepare(
        self, op: int, operation: int, body: RequestBody, timestamp_us: int, frontier: int
    ) -> Prepared:
        """The prepare body for a client request that will be op ``op``.

        Raises:
            RequestRejected: the request is invalid (its code goes in the reply status).
        """
        try:
            prepared = self.state.prepare(op, partition_request(operation, body), timestamp_us)
        except StateError as error:
            raise RequestRejected(int(error.code), str(error)) from error
        return Prepared(body=prepared, frontier=frontier)

    # -- every replica ---------------------------------------------------------------------

    def check_prepared(self, prepare: Prepare) -> ErrorCode | None:
        """A backup's check that a prepare continues its log (None when it does)."""
        header = prepare.header
        return self.state.check_prepared(header.op, header.operation, prepare.body)

    def apply(self, prepare: Prepare) -> bytes:
        header = prepare.header
        result = self.state.apply(header.op, header.operation, prepare.body)
        match result:
            case Appended(base_offset, _):
                state = self.state
                return SEND_REPLY.pack(
                    1, state.stream_id, state.topic_id, state.partition_id, base_offset
                )
            case Refused(code):
                return wire.result_rejected(int(code))
            case Applied():
                if header.operation == Operation.TRUNCATE_PARTITION:
                    return b""
                return wire.result_ok()

    def snapshot(self) -> bytes:
        return self.state.snapshot()

    def log_op_min(self) -> int:
        """The first op holding a retained message (the log is the partition's data)."""
        return self.state.retention_floor_op()

    def restore(self, snapshot: bytes) -> None:
        state = PartitionState.restore(snapshot, self._log)
        assert (state.stream_id, state.topic_id, state.partition_id) == (
            self.state.stream_id,
            self.state.topic_id,
            self.state.partition_id,
        ), "a snapshot of another partition"
        self.state = state

    # -- reads -----------------------------------------------------------------------------

    def poll(
        self, request: wire.PollMessages, consumer: ConsumerKey
    ) -> tuple[list[Buffer], int | None]:
        """The reply body (as parts to send in order) and, with auto-commit, the offset
        the runtime should store for ``consumer`` with a ``StoreConsumerOffset``.

        Raises:
            StateError: an invalid count or strategy.
        """
        parts, store, _ = self.poll_served(request, consumer)
        return parts, store

    def poll_served(
        self, request: wire.PollMessages, consumer: ConsumerKey
    ) -> tuple[list[Buffer], int | None, int | None]:
        """:meth:`poll`, and the last offset it serves (None: no message), which a node
        remembers of a consumer group member's polls (``broker.core.liveness``)."""
        result = self.state.poll(
            consumer,
            PollingKind(int(request.strategy.kind)),
            request.strategy.value,
            request.count,
            auto_commit=request.auto_commit,
        )
        parts = wire.poll_reply_parts(self.state.partition_id, result.current_offset, result.slices)
        last = result.slices[-1].last_offset if result.slices else None
        return parts, result.store_offset, last

    def poll_wait_offset(self, request: wire.PollMessages, consumer: ConsumerKey) -> int | None:
        """None when ``poll`` would return messages now; else the offset a long poll
        waits for (``PartitionState.poll_wait_offset``).

        Raises:
            StateError: an invalid count or strategy.
        """
        return self.state.poll_wait_offset(
            consumer,
            PollingKind(int(request.strategy.kind)),
            request.strategy.value,
            request.count,
        )

    def get_consumer_offset(self, consumer: ConsumerKey) -> bytes:
        """GET_CONSUMER_OFFSET reply; empty when the consumer has stored no offset."""
        stored = self.state.consumer_offset(consumer)
        if stored is None:
            return NOT_FOUND
        return wire.ConsumerOffsetInfo(
            self.state.partition_id, self.state.current_offset, stored
        ).encode()


def partition_request(operation: int, body: RequestBody) -> PartitionRequest:
    """The domain request a partition-plane client body carries.

    Raises:
        StateError: a malformed body, or an operation the partition plane does not take.
    """
    try:
        if operation == Operation.SEND_MESSAGES:
            # Built by a node's admission (``send_body``): split, not decoded again.
            if isinstance(body, tuple) and len(body) == 2:
                batch, checksums = body  # as admission made it here: already apart
                if len(checksums) == 8 * _message_count(batch):
                    return SendMessages(batch, checksums, handed_over=True)
            view = memoryview(joined_body(body) if isinstance(body, tuple) else body)
            split = len(view) - 8 * _message_count(view)
            if not BATCH_HEADER_SIZE <= split <= len(view):
                raise StateError(ErrorCode.INVALID_FORMAT, "not an admitted batch")
            return SendMessages(view[:split], view[split:])
        whole = joined_body(body)  # control bodies are small, and come whole
        if operation == Operation.STORE_CONSUMER_OFFSET:
            # Built by a node (ours, or a peer's over the authenticated bus), never a
            # client's bytes: a body without its user is a bug.
            assert len(whole) >= STORE_USER.size, "a store request names its user"
            (user_id,) = STORE_USER.unpack_from(whole, 0)
            store = wire.StoreConsumerOffset.decode(whole[STORE_USER.size :])
            return StoreConsumerOffset(_consumer_key(store.consumer), store.offset, user_id)
        if operation == Operation.DELETE_CONSUMER_OFFSET:
            delete = wire.DeleteConsumerOffset.decode(whole)
            return DeleteConsumerOffset(_consumer_key(delete.consumer))
        if operation == Operation.TRUNCATE_PARTITION:
            # Built by a node (its own system request, or the retention a DELETE_SEGMENTS
            # it admitted asks for), never a client's bytes: internal operations are
            # refused at admission, so a body that is neither form is a bug.
            order = cbor2.loads(whole)
            if isinstance(order, list):
                assert len(order) == 2 and order[0] == RETAIN_TAG, "retention body is ours"
                assert isinstance(order[1], int) and order[1] >= 0
                return RetainPartition(order[1])
            assert isinstance(order, int) and order >= 0, "purge body is ours"
            return PurgePartition(order)
    except wire.ProtocolError as error:
        raise StateError(_code(int(error.code)), error.reason) from error
    raise StateError(ErrorCode.INVALID_COMMAND, f"operation {operation} is not a partition op")


def send_body(send: wire.SendMessages) -> tuple[memoryview, bytes]:
    """The SEND_MESSAGES request body :class:`PartitionMachine` takes, from a client's
    request as admission decoded it: its batch, verified in full here (message count,
    layout, every message checksum and the batch checksum: the only time a node reads
    its messages), followed by the packed message checksums, which the primary re-seals
    the stamped batch over.

    The body is given as those two parts (``consensus.protocols.RequestBody``), not
    joined: the batch part is a view of the request's own buffer, which the decoder
    never touches once its frame is handed out (``sdk.wire.framing``, invariant 4).
    The caller hands that buffer over with the parts: it must not reuse or change it
    afterwards, since the primary's ``prepare`` stamps the batch in place and keeps it
    as the prepare body (``broker.state.partition.SendMessages.handed_over``): the one
    user-space copy of a send is then the decoder's, from the socket's reads into the
    frame. Over the bus (a forward) the parts go out gathered and arrive as one buffer,
    which :func:`partition_request` splits and the primary stamps a copy of.

    Raises:
        StateError: the batch is malformed or a checksum does not match (Iggy's codes).
    """
    batch = send.batch
    if send.messages_count != _message_count(batch):
        raise StateError(ErrorCode.INVALID_MESSAGES_COUNT)
    try:
        verified = verify_batch(batch)
    except wire.ProtocolError as error:
        raise StateError(_code(int(error.code)), error.reason) from error
    return memoryview(batch).cast("B"), verified.message_checksums


def purge_body(generation: int) -> bytes:
    """The body of a ``TRUNCATE_PARTITION`` request ordering a purge of ``generation``."""
    return cbor2.dumps(generation)


def retain_body(offset: int) -> bytes:
    """The body of a ``TRUNCATE_PARTITION`` request to retain messages from ``offset`` on
    (what the primary proposes when ``broker.core.retention`` says so)."""
    assert 0 <= offset < 1 << 64
    return cbor2.dumps([RETAIN_TAG, offset])


SEND_REPLY: Final = struct.Struct(
    "<"
    "I"  # confirmations: 1
    "I"  # stream id
    "I"  # topic id
    "I"  # partition id
    "Q"  # base offset of the batch
)
"""A SEND_MESSAGES reply of one batch, packed at once: the bytes of
``wire.SendMessagesReply((wire.SendConfirmation(...),)).encode()``, without building
them field by field on every commit."""
assert SEND_REPLY.size == 4 + 20


STORE_USER: Final = struct.Struct(
    "<I"  # the user id a new stored offset is charged to
)
"""What a STORE_CONSUMER_OFFSET request body for :class:`PartitionMachine` starts with;
the Iggy wire payload follows."""
assert STORE_USER.size == 4


def resolved_offset_request(
    request: wire.StoreConsumerOffset | wire.DeleteConsumerOffset,
    route: PartitionRoute,
    user_id: int,
) -> bytes:
    """The request body with its consumer group named by numeric id and its partition
    explicit, as :class:`PartitionMachine` takes it; a store is charged to ``user_id``
    (the user of the session it acts for), a delete frees whoever's charge it was."""
    assert route.consumer is not None
    consumer = wire.Consumer(
        wire.ConsumerKind(int(route.consumer.kind)), wire.Identifier(route.consumer.id)
    )
    if isinstance(request, wire.StoreConsumerOffset):
        return (
            STORE_USER.pack(user_id)
            + wire.StoreConsumerOffset(
                consumer,
                wire.Identifier(route.stream_id),
                wire.Identifier(route.topic_id),
                route.partition_id,
                request.offset,
                request.ack,
            ).encode()
        )
    return wire.DeleteConsumerOffset(
        consumer,
        wire.Identifier(route.stream_id),
        wire.Identifier(route.topic_id),
        route.partition_id,
        request.ack,
    ).encode()


def store_offset_body(route: PartitionRoute, offset: int, user_id: int) -> bytes:
    """A STORE_CONSUMER_OFFSET body for a poll's auto-commit, charged to ``user_id`` (the
    polling user: the node's own client only carries it)."""
    assert route.consumer is not None
    consumer = wire.Consumer(
        wire.ConsumerKind(int(route.consumer.kind)), wire.Identifier(route.consumer.id)
    )
    return (
        STORE_USER.pack(user_id)
        + wire.StoreConsumerOffset(
            consumer,
            wire.Identifier(route.stream_id),
            wire.Identifier(route.topic_id),
            route.partition_id,
            offset,
            wire.AckLevel.NO_ACK,
        ).encode()
    )


def _consumer_key(consumer: wire.Consumer) -> ConsumerKey:
    return ConsumerKey(ConsumerKind(int(consumer.kind)), consumer.id.value)


def _message_count(batch: Buffer) -> int:
    if len(batch) < BATCH_HEADER_SIZE:
        return -1
    count: int = BATCH_HEADER.unpack_from(batch, 0)[6]
    return count


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.INVALID_FORMAT
