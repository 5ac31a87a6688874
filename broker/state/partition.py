"""The partition state machine: stamped message batches, consumer offsets, polls.

One partition is one consensus group, and its log *is* the partition's message log: each
op is one prepare, stored once by the host in the partition's journal. This module decides
what those prepares contain and what committing them means.

Ops of a partition log (``sdk.wire.codes.Operation``):

- ``SEND_MESSAGES``: the body is the producer's batch, stamped by the primary with
  ``partition_id``, ``base_offset``, ``base_timestamp`` and a recomputed batch checksum.
- ``STORE_CONSUMER_OFFSET`` / ``DELETE_CONSUMER_OFFSET``: a small CBOR body; a store names
  the user it counts against (the node that admitted it checked that user's session).
- ``TRUNCATE_PARTITION``: a purge ordered by the metadata group, or "retain from offset
  X" proposed by the partition's primary (retention); a CBOR body either way.

Invariants:

1. Dense offsets: the ``k``-th message ever committed to the partition has offset ``k``.
   The stamp of op ``n`` continues from the log head after op ``n-1``, committed or not,
   so a backup re-derives and checks it, and apply asserts it against committed state.
2. Every body is self-describing about the log head: a stamped batch names its base offset,
   message count and timestamp; a control body carries the head (next offset, timestamp)
   at the point it was prepared. :func:`frontier_after` therefore needs one body, never
   the history.
3. Message timestamps never go backwards: ``base_timestamp`` is the prepare timestamp,
   raised to the previous batch's when a new primary's clock is behind, so a timestamp
   poll can binary-search.
4. Polls read committed data only: nothing at or beyond the committed next offset is
   returned, and nothing below the retained start (moved by purges and by retention; it
   never moves back and never passes the committed head).
5. Determinism: prepare and apply are functions of their inputs and of the committed state;
   time arrives as ``timestamp_us``. Replies are built from the prepare alone, so every
   replica answers with the same bytes.
6. Stored offsets are bounded twice: at most ``CONSUMER_OFFSETS_MAX`` in the partition, and
   at most ``CONSUMER_OFFSETS_PER_USER_MAX`` counted against any one user, so no user can
   fill the partition's table for the others.

Theory of operation:

- **Primary**: ``prepare(op, request, timestamp_us)`` validates the request, stamps it
  from the head after ``op - 1`` and returns the prepare body. Consensus journals and
  replicates it. A batch arrives verified in full (message checksums, batch checksum,
  layout) by the node that admitted it, with its message checksums: the primary stamps its
  header and re-seals its batch checksum over them, and reads no message.
- **Every replica**: ``apply(op, operation, body)`` commits a prepare, in op order, and
  returns the typed result the reply is built from; for a batch it reads the stamped
  header only (a backup verifies the prepare's checksum, writes and acknowledges it, and
  decodes no message). ``check_prepared(op, operation,
  body)`` tells whether a prepare's stamp continues the log (it refuses a stamp that
  would break dense offsets). Consensus does not call it yet: a backup journals exactly
  the primary's prepare because the hash chain (each prepare names its parent's
  checksum) says so, and a stamp check on backups would only catch a primary's bug.
  Calling it from consensus on backups is not done.
- **The log head** after op ``n`` is the committed frontier when ``n`` is the commit point,
  and otherwise :func:`frontier_after` of op ``n``'s body read back from the log. Nothing
  about uncommitted ops is cached here, so a view change that truncates and replaces the
  suffix needs no notification: the next prepare reads whatever the log now holds.
- **Reads**: ``poll`` and ``consumer_offset`` answer from committed state; batches are read
  back from the host's journal (:class:`PartitionLog`), whose index is the partition's only
  index: every record of the log is stored with the offset of its first message (for a
  control op, of the next message), its message count (0 for a control op) and its
  timestamp (:func:`record_fields`), so a lookup by offset or by timestamp is a binary
  search over the journal's in-memory index, and nothing about batches is kept here. The
  journal's index is local, derived state: a restart recovers it with the journal, and it
  is not part of the snapshot. Deleting a segment is one operation on that one index.
- **Retention** is decided in the log, so every replica retains the same messages: the
  primary proposes ``RetainPartition(offset)`` (``broker.core.retention`` says which
  offset) and applying it moves the retained start there: polls, stats and the floor
  below read the journal's index from there on. The bytes below go later and locally: the
  host deletes the whole sealed journal segments below
  :meth:`PartitionState.retention_floor_op` (``journal.Journal.retain``), never above its
  durable checkpoint, since a restart replays the ops after it. Stored consumer offsets
  below the retained start stay; a poll below it starts at it, as in Iggy.
- **Auto-commit**: a poll never changes replicated state (that would make replicas
  diverge); it returns the offset to store and the runtime proposes a
  ``StoreConsumerOffset`` for it, counted against the polling user.
- **Whose offset counts against whom**: a stored offset belongs to its consumer, and any
  user allowed to poll may move or delete it, as in Iggy. The user whose store created it
  is charged for it until it is deleted (by anyone) or purged; moving it charges nobody, so
  updating an offset one already has always succeeds. Consumer-group offsets are charged
  the same way: a group can be deleted while its offsets stay, so they are not bounded by
  the groups of a topic alone. A deleted user's offsets stay, still charged to its id:
  user ids are never reused, so they count against nobody who can store, only against the
  partition's total. The charge per user is derived state (rebuilt from the owners on
  restore); the snapshot holds each offset's user. Apply decides; the primary also refuses
  at prepare a store that committed state refuses when nothing in flight could change
  that (no delete, purge or store of the same consumer), so a user at its quota storing
  made-up consumers fills no log.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, TypeAlias

import cbor2

from broker.state.errors import ErrorCode, StateError
from consensus.messages import PrepareBody
from sdk.wire.batch import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    BatchHeader,
    BatchSlice,
    VerifiedBatch,
    slice_batch,
    stamp_batch,
    stamped_batch,
    verify_batch,
)
from sdk.wire.codes import Operation
from sdk.wire.errors import ProtocolError

Buffer: TypeAlias = bytes | bytearray | memoryview

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1

CONSUMER_OFFSETS_MAX = 65_536
"""Stored offsets per partition (consumers plus consumer groups)."""
CONSUMER_OFFSETS_PER_USER_MAX = 1_024
"""Stored offsets per partition charged to one user. As many as the sessions a user may
hold (``SESSIONS_PER_USER_MAX``), so a user running a consumer per session never reaches
it, and a 64th of ``CONSUMER_OFFSETS_MAX``: only 64 users at their quota fill a partition,
and users are made by those allowed to manage users."""
POLL_MESSAGES_MAX = 1_000_000
"""Messages one poll may ask for."""
POLL_BYTES_MAX = 32 * 1024 * 1024
"""A poll stops adding batches past this many bytes (it always returns at least one),
keeping replies well under the 64 MiB frame limit."""

SNAPSHOT_VERSION = 2
"""2: every stored offset names the user it is charged to."""

RETAIN_TAG = "retain"
"""Tells a retention's ``TRUNCATE_PARTITION`` body (``[next, timestamp, "retain", offset]``)
from a purge's (``[next, timestamp, generation]``). Iggy's TruncatePartition is this very
"retain from offset" (its delete watermark); the purge shares its operation here."""


PARTITION_OPERATIONS = (
    Operation.SEND_MESSAGES,
    Operation.STORE_CONSUMER_OFFSET,
    Operation.DELETE_CONSUMER_OFFSET,
    Operation.TRUNCATE_PARTITION,
)


class ConsumerKind(IntEnum):
    """Who owns a stored offset (Iggy's consumer kinds)."""

    CONSUMER = 1
    CONSUMER_GROUP = 2


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """The owner of a stored offset. Consumer groups are always numeric (the runtime
    resolves a group name through the metadata state); a single consumer may be named."""

    kind: ConsumerKind
    id: int | str

    def sort_key(self) -> tuple[int, int, int, str]:
        if isinstance(self.id, int):
            return (int(self.kind), 0, self.id, "")
        return (int(self.kind), 1, 0, self.id)


class PollingKind(IntEnum):
    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


@dataclass(frozen=True, slots=True)
class Frontier:
    """The log head: the offset the next message gets, and the last batch timestamp."""

    next_offset: int
    timestamp_us: int


# -- requests (what the primary prepares) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendMessages:
    """A producer's batch (256-byte header plus frames), not yet stamped.

    As a node admits it (``broker.state.partition_machine.send_body``), the batch was
    verified in full there and comes with its packed message checksums (8 bytes each, in
    order: what the batch checksum covers), so it is stamped and re-sealed without reading
    a message. Without them (``None``), ``prepare`` verifies the batch in full itself.

    ``handed_over``: the batch's buffer is the request's own and its owner gives it up
    (the node's admission of a frame it read, ``send_body``): ``prepare`` stamps it in
    place, if it is writable, and the prepare body is a view of it, no copy. Otherwise
    (a forwarded body, a read-only buffer) the prepare body is a stamped copy."""

    batch: Buffer
    message_checksums: Buffer | None = None
    handed_over: bool = False


@dataclass(frozen=True, slots=True)
class StoreConsumerOffset:
    """Store ``offset`` for ``consumer``; a new offset is charged to ``user_id``, the user
    of the session that asked (or whose poll auto-committed)."""

    consumer: ConsumerKey
    offset: int
    user_id: int


@dataclass(frozen=True, slots=True)
class DeleteConsumerOffset:
    consumer: ConsumerKey


@dataclass(frozen=True, slots=True)
class PurgePartition:
    """Drop every message and stored offset; ordered by the metadata group's purge of the
    topic or stream, identified by the partition's purge generation there."""

    generation: int


@dataclass(frozen=True, slots=True)
class RetainPartition:
    """Retain messages from ``offset`` on (retention): polls no longer return older ones,
    and every replica may delete the journal segments that hold only those."""

    offset: int


PartitionRequest: TypeAlias = (
    SendMessages | StoreConsumerOffset | DeleteConsumerOffset | PurgePartition | RetainPartition
)


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """A consumer's stored offset and the user it is charged to."""

    offset: int
    user_id: int


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    """A batch was committed at ``base_offset``."""

    base_offset: int
    message_count: int


@dataclass(frozen=True, slots=True)
class Applied:
    """A control op took effect (or had nothing to do)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A committed business rejection."""

    code: ErrorCode


PartitionResult: TypeAlias = Appended | Applied | Refused


@dataclass(frozen=True, slots=True)
class PollResult:
    """What a poll found.

    Attributes:
        current_offset: The partition's newest committed offset (0 when empty).
        slices: Batch records to send, in offset order; payloads are views, not copies.
        messages_count: Messages across ``slices``.
        store_offset: With auto-commit, the offset to store for the consumer (the last
            one returned); the runtime proposes it. ``None`` otherwise or when empty.
    """

    current_offset: int
    slices: tuple[BatchSlice, ...]
    messages_count: int
    store_offset: int | None

    @property
    def first_offset(self) -> int | None:
        return self.slices[0].first_offset if self.slices else None

    @property
    def last_offset(self) -> int | None:
        return self.slices[-1].last_offset if self.slices else None


class PartitionLog(Protocol):
    """The partition's journal as this state machine reads it (the host writes it): its
    records by op, and its index (offset, message count, timestamp and size per record,
    see :func:`record_fields`). Lookups are binary searches over the index in memory."""

    def read(self, op: int) -> tuple[int, Buffer]:
        """``(operation, body)`` of ``op``, committed or prepared; the caller only asks for
        ops the log holds (appended ones are readable at once, before they are written)."""
        ...

    def offset_min(self) -> int | None:
        """The first message offset the journal still holds (None when it holds no record)."""
        ...

    def op_for_offset(self, offset: int) -> int | None:
        """The op of the record holding message ``offset`` (None if the journal does not)."""
        ...

    def offset_for_timestamp(self, timestamp_us: int, op_max: int) -> int | None:
        """The offset of the first record at or after ``timestamp_us`` (its first message, or
        the next message for a control op), among the ops up to ``op_max``; None if none."""
        ...

    def size_from(self, offset: int, op_max: int) -> int:
        """Bytes the journal records take from the one holding message ``offset`` through
        op ``op_max`` (record headers and control ops included)."""
        ...

    def batches(self, offset: int, *, count_max: int, size_max: int, op_max: int) -> list[Buffer]:
        """The stamped batches holding messages from ``offset`` on, in order, up to op
        ``op_max``: the first holds ``offset`` (and may start before it); they stop once
        ``count_max`` messages from ``offset`` are covered, or before ``size_max`` bytes
        of records are passed (the first always comes), or at a damaged record. Control
        ops are skipped. Bodies are views, not copies."""
        ...


# -- bodies -------------------------------------------------------------------------------


def frontier_after(operation: int, body: Buffer) -> Frontier:
    """The log head after a prepare, from its body alone (bodies are self-describing)."""
    if operation == Operation.SEND_MESSAGES:
        header = _batch_header(body)
        return Frontier(header.base_offset + header.message_count, header.base_timestamp)
    head, _ = _decode_control(operation, body)
    return head


def record_fields(operation: int, body: Buffer) -> tuple[int, int, int]:
    """``(offset, message_count, timestamp_us)`` of the journal record storing a prepare of a
    partition log: a batch's base offset, message count and base timestamp; for a control
    op, the head it was prepared against (next offset, timestamp) and no message. So the
    journal's offsets are the partition's message offsets, and its timestamps never go
    back along the log (invariant 3), which a timestamp lookup relies on."""
    if operation == Operation.SEND_MESSAGES:
        header = _batch_header(body)
        return header.base_offset, header.message_count, header.base_timestamp
    head, _ = _decode_control(operation, body)
    return head.next_offset, 0, head.timestamp_us


def offset_before(operation: int, body: Buffer) -> int:
    """The next offset of the log head a prepare was stamped against."""
    if operation == Operation.SEND_MESSAGES:
        return _batch_header(body).base_offset
    head, _ = _decode_control(operation, body)
    return head.next_offset


@dataclass(frozen=True, slots=True)
class _BatchHeaderFields:
    partition_id: int
    base_offset: int
    base_timestamp: int
    message_count: int


def _batch_header(body: Buffer) -> _BatchHeaderFields:
    assert len(body) >= BATCH_HEADER_SIZE, "a stamped batch holds its header"
    fields = BATCH_HEADER.unpack_from(body, 0)
    return _BatchHeaderFields(fields[0], fields[1], fields[2], fields[6])


def _encode_control(head: Frontier, request: PartitionRequest) -> bytes:
    match request:
        case StoreConsumerOffset(consumer, offset, user_id):
            payload: list[Any] = [int(consumer.kind), consumer.id, offset, user_id]
        case DeleteConsumerOffset(consumer):
            payload = [int(consumer.kind), consumer.id]
        case PurgePartition(generation):
            payload = [generation]
        case RetainPartition(offset):
            payload = [RETAIN_TAG, offset]
        case SendMessages():
            raise AssertionError("a batch is not a control body")
    return cbor2.dumps([head.next_offset, head.timestamp_us, *payload], canonical=True)


def _decode_control(operation: int, body: Buffer) -> tuple[Frontier, PartitionRequest]:
    # Control bodies come from our own primary through a checksummed journal, so a body
    # that does not decode is a bug or corruption the journal missed: fail loudly.
    items = cbor2.loads(bytes(body))
    assert isinstance(items, list) and len(items) >= 2, "malformed partition control body"
    head = Frontier(items[0], items[1])
    rest = items[2:]
    if operation == Operation.STORE_CONSUMER_OFFSET:
        assert len(rest) == 4, "a store body is [next, timestamp, kind, id, offset, user]"
        kind, consumer_id, offset, user_id = rest
        consumer = ConsumerKey(ConsumerKind(kind), consumer_id)
        return head, StoreConsumerOffset(consumer, offset, user_id)
    if operation == Operation.DELETE_CONSUMER_OFFSET:
        kind, consumer_id = rest
        return head, DeleteConsumerOffset(ConsumerKey(ConsumerKind(kind), consumer_id))
    if operation == Operation.TRUNCATE_PARTITION:
        if len(rest) == 2:
            tag, offset = rest
            assert tag == RETAIN_TAG, "a truncation body is a purge or a retention"
            return head, RetainPartition(offset)
        (generation,) = rest
        return head, PurgePartition(generation)
    raise AssertionError(f"operation {operation} is not a partition operation")


def operation_of(request: PartitionRequest) -> Operation:
    """The log operation that carries ``request``."""
    match request:
        case SendMessages():
            return Operation.SEND_MESSAGES
        case StoreConsumerOffset():
            return Operation.STORE_CONSUMER_OFFSET
        case DeleteConsumerOffset():
            return Operation.DELETE_CONSUMER_OFFSET
        case PurgePartition() | RetainPartition():
            return Operation.TRUNCATE_PARTITION


# -- the state machine --------------------------------------------------------------------


class PartitionState:
    """One partition's replicated state; its index is its journal's (:class:`PartitionLog`)."""

    def __init__(self, stream_id: int, topic_id: int, partition_id: int, log: PartitionLog) -> None:
        assert 0 <= stream_id <= U32_MAX and 0 <= topic_id <= U32_MAX
        assert 0 <= partition_id <= U32_MAX
        self.stream_id = stream_id
        self.topic_id = topic_id
        self.partition_id = partition_id
        self._log = log
        # Replicated state (in the snapshot).
        self._commit_op = 0
        self._frontier = Frontier(0, 0)
        # The retained start: the first offset a poll may return (moved by purges and
        # retention, never back).
        self._visible_from = 0
        self._purge_generation = 0
        self._offsets: dict[ConsumerKey, StoredOffset] = {}
        # Derived from ``_offsets``: how many stored offsets each user is charged (users
        # with none have no entry, so it holds at most one entry per stored offset).
        self._charged: dict[int, int] = {}

    # -- properties -----------------------------------------------------------------------

    @property
    def commit_op(self) -> int:
        return self._commit_op

    @property
    def frontier(self) -> Frontier:
        """The committed log head."""
        return self._frontier

    @property
    def purge_generation(self) -> int:
        return self._purge_generation

    @property
    def current_offset(self) -> int:
        """The newest committed offset, 0 for an empty partition (as Iggy reports it)."""
        return max(0, self._frontier.next_offset - 1)

    @property
    def first_offset(self) -> int:
        """The oldest offset a poll can still return: the retained start, or the oldest
        message the journal still holds if that is later (none: the head)."""
        end = self._frontier.next_offset
        held = self._log.offset_min()
        return min(max(self._visible_from, end if held is None else held), end)

    @property
    def retained_start(self) -> int:
        """The replicated retained start (moved by purges and ``RetainPartition``)."""
        return self._visible_from

    @property
    def retained_messages(self) -> int:
        """Messages a poll can still return: from ``first_offset`` to the head."""
        return self._frontier.next_offset - self.first_offset

    @property
    def retained_bytes(self) -> int:
        """Bytes of the journal records from the one holding the first retained message to
        the commit point, as the journal's index sizes them (record headers and the control
        ops among them included; a batch that straddles the retained start counts whole;
        0 when no message is retained, as after a purge)."""
        first = self.first_offset
        if first >= self._frontier.next_offset:
            return 0
        return self._log.size_from(first, self._commit_op)

    def retention_floor_op(self) -> int:
        """The first op whose record a replica must keep for this partition's data: the
        oldest batch holding a retained message, or the op after the commit point when
        none does. Every record below it holds only messages below the retained start, or
        a control op already in committed state. (The host also keeps every op after its
        durable checkpoint, which a restart replays.)"""
        first = self.first_offset
        if first >= self._frontier.next_offset:
            return self._commit_op + 1
        op = self._log.op_for_offset(first)
        assert op is not None and op <= self._commit_op, "a retained message is in the log"
        return op

    def head(self, op: int) -> Frontier:
        """The log head after ``op``: the commit point, or an uncommitted op in the log."""
        if op == self._commit_op:
            return self._frontier
        assert op > self._commit_op, f"op {op} is below the commit point"
        operation, body = self._log.read(op)
        return frontier_after(operation, body)

    # -- primary side ---------------------------------------------------------------------

    def prepare(self, op: int, request: PartitionRequest, timestamp_us: int) -> PrepareBody:
        """Build the prepare body for ``request`` as op ``op`` (primary only).

        Raises:
            StateError: the request is invalid; nothing was recorded.
        """
        assert op > self._commit_op, "prepare beyond the commit point"
        assert 0 <= timestamp_us <= U64_MAX
        before = self.head(op - 1)
        match request:
            case SendMessages(batch, checksums, handed_over):
                body = self._stamp(batch, checksums, before, timestamp_us, handed_over)
            case StoreConsumerOffset(consumer, offset, user_id):
                _check_consumer(consumer)
                assert 0 <= user_id <= U32_MAX, "the node names a user it checked"
                if not 0 <= offset < before.next_offset or offset < self._visible_from:
                    raise StateError(ErrorCode.INVALID_OFFSET, f"offset {offset}")
                refusal = self._store_refusal(consumer, user_id)
                if refusal is not None and not self._in_flight_may_admit(op, consumer):
                    # Refused before it enters the log: a user at its quota storing made-up
                    # consumers costs no journal space and no replication.
                    raise StateError(refusal, f"user {user_id}")
                body = _encode_control(before, request)
            case DeleteConsumerOffset(consumer):
                _check_consumer(consumer)
                body = _encode_control(before, request)
            case PurgePartition(generation):
                assert generation >= 0
                body = _encode_control(before, request)
            case RetainPartition(offset):
                if not 0 <= offset <= U64_MAX:
                    raise StateError(ErrorCode.INVALID_OFFSET, f"retain from {offset}")
                body = _encode_control(before, request)
        return body

    def _stamp(
        self,
        batch: Buffer,
        checksums: Buffer | None,
        before: Frontier,
        timestamp_us: int,
        handed_over: bool,
    ) -> PrepareBody:
        if checksums is None:
            try:
                verified = verify_batch(batch)
            except ProtocolError as error:
                raise StateError(_error_code(int(error.code)), error.reason) from error
        else:
            verified = _admitted(batch, checksums)
        if before.next_offset + verified.header.message_count > U64_MAX:
            raise StateError(ErrorCode.TOO_MANY_MESSAGES, "offsets exhausted")
        base_timestamp = max(timestamp_us, before.timestamp_us)
        if handed_over and isinstance(batch, memoryview) and not batch.readonly:
            # The request's buffer becomes the prepare body: its owner gave it up, nothing
            # reads it as a request again, and it is stamped once, here (the last step of
            # a prepare, after every refusal), so no copy at all.
            stamp_batch(
                batch,
                verified,
                partition_id=self.partition_id,
                base_offset=before.next_offset,
                base_timestamp=base_timestamp,
            )
            return batch
        # One copy, at the ownership boundary: a body the log cannot take over (a
        # forwarded one, in the bus's buffer; a read-only one) stays as it is.
        return stamped_batch(
            batch,
            verified,
            partition_id=self.partition_id,
            base_offset=before.next_offset,
            base_timestamp=base_timestamp,
        )

    # -- every replica --------------------------------------------------------------------

    def check_prepared(self, op: int, operation: int, body: Buffer) -> ErrorCode | None:
        """Whether a prepare for op ``op`` continues this replica's log (a backup's check).

        ``op - 1`` must be the commit point or in the log. Returns ``None`` when the stamp
        continues the log, else the code to refuse it with: a backup never journals a stamp
        that would break dense offsets. Ops at or below the commit point are not checked.
        """
        if op <= self._commit_op:
            return None
        if operation not in PARTITION_OPERATIONS:
            return ErrorCode.INVALID_COMMAND
        previous = self.head(op - 1)
        if offset_before(operation, body) != previous.next_offset:
            return ErrorCode.INVALID_OFFSET
        if operation == Operation.SEND_MESSAGES:
            header = _batch_header(body)
            if header.partition_id != self.partition_id:
                return ErrorCode.PARTITION_NOT_FOUND
            if header.base_timestamp < previous.timestamp_us:
                return ErrorCode.INVALID_OFFSET
        return None

    def apply(self, op: int, operation: int, body: Buffer) -> PartitionResult:
        """Commit op ``op``; ops arrive in order, each exactly once."""
        assert op == self._commit_op + 1, f"apply op {op} after {self._commit_op}"
        before = self._frontier
        if operation == Operation.SEND_MESSAGES:
            header = _batch_header(body)
            assert header.base_offset == before.next_offset, "stamp breaks dense offsets"
            assert header.base_timestamp >= before.timestamp_us, "timestamps went back"
            assert header.partition_id == self.partition_id
            self._frontier = Frontier(
                header.base_offset + header.message_count, header.base_timestamp
            )
            self._commit_op = op
            return Appended(header.base_offset, header.message_count)
        head, request = _decode_control(operation, body)
        assert head.next_offset == before.next_offset, "control body from another log"
        self._commit_op = op
        match request:
            case StoreConsumerOffset(consumer, offset, user_id):
                if not self._visible_from <= offset < before.next_offset:
                    return Refused(ErrorCode.INVALID_OFFSET)
                stored = self._offsets.get(consumer)
                if stored is not None:
                    # Moving an offset charges nobody new: it always succeeds.
                    self._offsets[consumer] = StoredOffset(offset, stored.user_id)
                    return Applied()
                refusal = self._store_refusal(consumer, user_id)
                if refusal is not None:
                    return Refused(refusal)
                self._offsets[consumer] = StoredOffset(offset, user_id)
                self._charged[user_id] = self._charged.get(user_id, 0) + 1
            case DeleteConsumerOffset(consumer):
                removed = self._offsets.pop(consumer, None)
                if removed is None:
                    return Refused(ErrorCode.CONSUMER_OFFSET_NOT_FOUND)
                self._uncharge(removed.user_id)
            case PurgePartition(generation):
                if generation > self._purge_generation:
                    self._purge_generation = generation
                    self._visible_from = before.next_offset
                    self._offsets.clear()
                    self._charged.clear()
            case RetainPartition(offset):
                # Never back (a late or repeated proposal changes nothing) and never past
                # the head: what was committed when it was prepared is all it can retire.
                start = min(offset, before.next_offset)
                self._visible_from = max(self._visible_from, start)
            case SendMessages():
                raise AssertionError("batches are handled above")
        return Applied()

    def _store_refusal(self, consumer: ConsumerKey, user_id: int) -> ErrorCode | None:
        """Why committed state refuses a store for ``consumer`` charged to ``user_id``:
        a new offset beyond the user's quota or the partition's table (never a move)."""
        if consumer in self._offsets:
            return None
        if self._charged.get(user_id, 0) >= CONSUMER_OFFSETS_PER_USER_MAX:
            return ErrorCode.TOO_MANY_CONSUMER_OFFSETS
        if len(self._offsets) >= CONSUMER_OFFSETS_MAX:
            return ErrorCode.TOO_MANY_CONSUMER_OFFSETS
        return None

    def _in_flight_may_admit(self, op: int, consumer: ConsumerKey) -> bool:
        """Whether an op prepared but not committed before ``op`` could make a store for
        ``consumer`` that committed state refuses succeed: a delete or a purge frees
        charges, a store of the same consumer makes it a move. Otherwise charges only
        grow until ``op`` applies, so refusing it at prepare is what apply would do. At
        most a pipeline of ops is read back."""
        for pending in range(self._commit_op + 1, op):
            operation, body = self._log.read(pending)
            if operation in (Operation.DELETE_CONSUMER_OFFSET, Operation.TRUNCATE_PARTITION):
                return True
            if operation == Operation.STORE_CONSUMER_OFFSET:
                _, request = _decode_control(operation, body)
                assert isinstance(request, StoreConsumerOffset)
                if request.consumer == consumer:
                    return True
        return False

    def _uncharge(self, user_id: int) -> None:
        left = self._charged[user_id] - 1
        assert left >= 0
        if left:
            self._charged[user_id] = left
        else:
            del self._charged[user_id]

    # -- reads (committed state only) -----------------------------------------------------

    def consumer_offset(self, consumer: ConsumerKey) -> int | None:
        """The stored offset of ``consumer``, or ``None`` if it has none."""
        stored = self._offsets.get(consumer)
        return None if stored is None else stored.offset

    def consumer_offsets(self) -> tuple[tuple[ConsumerKey, int], ...]:
        """Every stored offset, in consumer order."""
        return tuple((key, stored.offset) for key, stored in self.stored_offsets())

    def stored_offsets(self) -> tuple[tuple[ConsumerKey, StoredOffset], ...]:
        """Every stored offset with the user it is charged to, in consumer order."""
        keys = sorted(self._offsets, key=ConsumerKey.sort_key)
        return tuple((key, self._offsets[key]) for key in keys)

    def offsets_charged(self, user_id: int) -> int:
        """How many stored offsets are charged to ``user_id``."""
        return self._charged.get(user_id, 0)

    def poll(
        self,
        consumer: ConsumerKey,
        kind: PollingKind,
        value: int,
        count: int,
        *,
        auto_commit: bool = False,
    ) -> PollResult:
        """Messages for ``consumer`` from committed data, at most ``count`` of them.

        Raises:
            StateError: ``count`` is 0 or too large, or the strategy is unknown.
        """
        if not 1 <= count <= POLL_MESSAGES_MAX:
            raise StateError(ErrorCode.INVALID_MESSAGES_COUNT, f"count {count}")
        start = self._poll_start(consumer, kind, value, count)
        slices = self._read_from(start, count)
        messages = sum(piece.message_count for piece in slices)
        store = slices[-1].last_offset if auto_commit and slices else None
        return PollResult(self.current_offset, tuple(slices), messages, store)

    def poll_wait_offset(
        self, consumer: ConsumerKey, kind: PollingKind, value: int, count: int
    ) -> int | None:
        """None when ``poll`` with these arguments returns messages now; else the offset
        whose message, once committed, a waiting poll wakes for: where the poll would
        start, or the next offset when that is below it (a ``LAST``, a ``TIMESTAMP``
        past every message, an empty partition).

        Raises:
            StateError: as ``poll``.
        """
        if not 1 <= count <= POLL_MESSAGES_MAX:
            raise StateError(ErrorCode.INVALID_MESSAGES_COUNT, f"count {count}")
        start = self._poll_start(consumer, kind, value, count)
        end = self._frontier.next_offset
        if start < end:
            return None
        return max(start, end)

    def _poll_start(self, consumer: ConsumerKey, kind: PollingKind, value: int, count: int) -> int:
        first = self.first_offset
        end = self._frontier.next_offset
        match kind:
            case PollingKind.OFFSET:
                start = value
            case PollingKind.TIMESTAMP:
                found = self._log.offset_for_timestamp(value, self._commit_op)
                start = end if found is None else min(found, end)
            case PollingKind.FIRST:
                start = first
            case PollingKind.LAST:
                start = end - count
            case PollingKind.NEXT:
                stored = self._offsets.get(consumer)
                start = first if stored is None else stored.offset + 1
            case _:
                raise StateError(ErrorCode.INVALID_COMMAND, f"polling kind {kind}")
        # Below the retained range the poll skips forward to the earliest message, as
        # Iggy does for an offset that retention already deleted.
        return max(start, first)

    def _read_from(self, start: int, count: int) -> list[BatchSlice]:
        end = self._frontier.next_offset
        slices: list[BatchSlice] = []
        remaining = count
        size = 0
        while remaining > 0 and start < end:
            batches = self._log.batches(
                start,
                count_max=remaining,
                size_max=max(1, POLL_BYTES_MAX - size),
                op_max=self._commit_op,
            )
            if not batches:
                break  # a damaged record: what was read is the answer
            before = start
            for batch in batches:
                piece = slice_batch(batch, start, remaining)
                if piece is None:
                    continue
                if slices and size + piece.size > POLL_BYTES_MAX:
                    return slices
                slices.append(piece)
                size += piece.size
                remaining -= piece.message_count
                start = piece.last_offset + 1
                if remaining == 0:
                    break
            assert start > before, "the first batch read holds the offset asked for"
        return slices

    # -- snapshot -------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The replicated state as canonical CBOR (the journal's index is not included)."""
        return cbor2.dumps(
            {
                "version": SNAPSHOT_VERSION,
                "ids": [self.stream_id, self.topic_id, self.partition_id],
                "commit_op": self._commit_op,
                "next_offset": self._frontier.next_offset,
                "timestamp_us": self._frontier.timestamp_us,
                "visible_from": self._visible_from,
                "purge_generation": self._purge_generation,
                "offsets": [
                    [int(k.kind), k.id, stored.offset, stored.user_id]
                    for k, stored in self.stored_offsets()
                ],
            },
            canonical=True,
        )

    @classmethod
    def restore(cls, data: bytes, log: PartitionLog) -> PartitionState:
        """Rebuild from :meth:`snapshot` over ``log``, whose index serves polls of the data
        older than the snapshot that the log still holds.

        Raises:
            SnapshotError: the bytes are not a partition snapshot this version reads.
        """
        try:
            plain = cbor2.loads(data)
            if plain["version"] != SNAPSHOT_VERSION:
                # Version 1 did not name the user each offset is charged to.
                raise ValueError(f"snapshot version {plain['version']!r}, not {SNAPSHOT_VERSION}")
            stream_id, topic_id, partition_id = (_u64(i) for i in plain["ids"])
            state = cls(stream_id, topic_id, partition_id, log)
            state._commit_op = _u64(plain["commit_op"])
            state._frontier = Frontier(_u64(plain["next_offset"]), _u64(plain["timestamp_us"]))
            state._visible_from = _u64(plain["visible_from"])
            state._purge_generation = _u64(plain["purge_generation"])
            for kind, consumer_id, offset, user_id in plain["offsets"]:
                if not isinstance(consumer_id, int | str) or isinstance(consumer_id, bool):
                    raise TypeError("consumer id")
                key = ConsumerKey(ConsumerKind(kind), consumer_id)
                if key in state._offsets:
                    raise ValueError("duplicate consumer offset")
                user = _u64(user_id)
                if user > U32_MAX:
                    raise ValueError(f"user id {user}")
                state._offsets[key] = StoredOffset(_u64(offset), user)
                state._charged[user] = state._charged.get(user, 0) + 1
        except (cbor2.CBORDecodeError, KeyError, TypeError, ValueError) as error:
            raise SnapshotError(f"unreadable partition snapshot: {error}") from error
        if state._visible_from > state._frontier.next_offset or any(
            stored.offset >= state._frontier.next_offset for stored in state._offsets.values()
        ):
            raise SnapshotError("inconsistent partition snapshot")
        return state


class SnapshotError(Exception):
    """A partition snapshot could not be read."""


def _u64(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= U64_MAX:
        raise ValueError(f"expected a u64, got {value!r}")
    return value


def _check_consumer(consumer: ConsumerKey) -> None:
    if isinstance(consumer.id, int):
        if not 0 <= consumer.id <= U32_MAX:
            raise StateError(ErrorCode.INVALID_IDENTIFIER)
    elif not 1 <= len(consumer.id.encode("utf-8")) <= 255:
        raise StateError(ErrorCode.INVALID_IDENTIFIER)
    if consumer.kind == ConsumerKind.CONSUMER_GROUP and not isinstance(consumer.id, int):
        raise StateError(ErrorCode.INVALID_IDENTIFIER, "resolve group names first")


def _admitted(batch: Buffer, checksums: Buffer) -> VerifiedBatch:
    """What admission's verification of ``batch`` found, from the checksums it carries."""
    if len(batch) < BATCH_HEADER_SIZE:
        raise StateError(ErrorCode.INVALID_FORMAT, "an admitted batch without its header")
    header = BatchHeader(*BATCH_HEADER.unpack_from(batch, 0))
    count = header.message_count
    if header.batch_length != len(batch) or len(checksums) != 8 * count or not count:
        # Admission verified it (``send_body``): a mismatch is another node's bug, and
        # costs that request, not this node.
        raise StateError(ErrorCode.INVALID_FORMAT, "an admitted batch that does not add up")
    return VerifiedBatch(header, bytes(checksums))


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.INVALID_FORMAT
