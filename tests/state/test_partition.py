"""Partition state machine: stamping, dense offsets, committed-only polls, offsets, purge."""

from __future__ import annotations

import cbor2
import pytest

from broker.state import partition
from broker.state.errors import ErrorCode, StateError
from broker.state.partition import (
    Appended,
    Applied,
    ConsumerKey,
    ConsumerKind,
    DeleteConsumerOffset,
    Frontier,
    PartitionResult,
    PartitionState,
    PollingKind,
    PollResult,
    PurgePartition,
    Refused,
    SendMessages,
    SnapshotError,
    StoreConsumerOffset,
    frontier_after,
)
from sdk.wire.batch import BATCH_HEADER, read_batch, verify_batch
from sdk.wire.codes import Operation
from tests.state.partition_helpers import (
    PARTITION_ID,
    Group,
    MemoryLog,
    batch,
    payloads_of,
)

ALICE = ConsumerKey(ConsumerKind.CONSUMER, 1)
GROUP = ConsumerKey(ConsumerKind.CONSUMER_GROUP, 7)
READER, OTHER = 10, 11  # user ids


def _records(result: PollResult) -> list[bytes]:
    return [b"".join(bytes(part) for part in piece.parts) for piece in result.slices]


def _polled(
    state: PartitionState, kind: PollingKind, value: int = 0, count: int = 100
) -> list[tuple[int, bytes]]:
    return payloads_of(_records(state.poll(ALICE, kind, value, count)))


# -- stamping -----------------------------------------------------------------------------


def test_prepare_stamps_partition_offset_timestamp_and_reseals() -> None:
    g = Group.of(1)
    g.submit(SendMessages(batch(b"a", b"b")))
    op = g.prepare(SendMessages(batch(b"c")), timestamp_us=5_000_000)
    body = g.primary.log.bodies[op][1]
    fields = BATCH_HEADER.unpack_from(body, 0)
    assert (fields[0], fields[1], fields[2]) == (PARTITION_ID, 2, 5_000_000)
    verified = verify_batch(body)  # the recomputed batch checksum holds
    assert verified.header.message_count == 1
    _, messages = read_batch(body)
    assert [(m.offset, bytes(m.payload)) for m in messages] == [(2, b"c")]


def test_pipelined_prepares_continue_offsets_from_uncommitted_ones() -> None:
    g = Group.of(3)
    ops = [g.prepare(SendMessages(batch(*[b"x"] * n))) for n in (3, 1, 2)]
    g.prepare(StoreConsumerOffset(ALICE, 2, READER))
    last = g.prepare(SendMessages(batch(b"y")))
    bases = [BATCH_HEADER.unpack_from(g.primary.log.bodies[op][1], 0)[1] for op in ops]
    assert bases == [0, 3, 4]
    assert frontier_after(Operation.SEND_MESSAGES, g.primary.log.bodies[last][1]).next_offset == 7
    results = g.commit()
    assert results[0] == results[1] == results[2]
    assert [r for r in results[0] if isinstance(r, Appended)] == [
        Appended(0, 3),
        Appended(3, 1),
        Appended(4, 2),
        Appended(6, 1),
    ]
    assert g.primary.state.frontier.next_offset == 7


def test_timestamps_never_go_back_when_the_primary_clock_does() -> None:
    g = Group.of(1)
    g.prepare(SendMessages(batch(b"a")), timestamp_us=2_000)
    op = g.prepare(SendMessages(batch(b"b")), timestamp_us=1_000)
    assert BATCH_HEADER.unpack_from(g.primary.log.bodies[op][1], 0)[2] == 2_000


def _corrupt(data: bytearray, position: int) -> bytearray:
    data[position] ^= 0xFF
    return data


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (_corrupt(batch(b"hello"), 256 + 48), ErrorCode.INVALID_MESSAGE_CHECKSUM),
        (_corrupt(batch(b"hello"), 40), ErrorCode.INVALID_BATCH_CHECKSUM),
        (_corrupt(batch(b"hello"), 100), ErrorCode.INVALID_RESERVED_FIELD),
        (batch(b"hello")[:-1], ErrorCode.INVALID_FORMAT),
        (bytearray(10), ErrorCode.INVALID_FORMAT),
    ],
)
def test_prepare_refuses_a_bad_batch_and_records_nothing(data: bytearray, code: ErrorCode) -> None:
    g = Group.of(1)
    with pytest.raises(StateError) as raised:
        g.primary.state.prepare(1, SendMessages(data), 1)
    assert raised.value.code == code
    # Nothing was remembered: op 1 can still be prepared.
    g.submit(SendMessages(batch(b"ok")))
    assert g.primary.state.frontier.next_offset == 1


# -- backups ------------------------------------------------------------------------------


def test_backup_refuses_a_stamp_that_breaks_dense_offsets() -> None:
    g = Group.of(2)
    g.prepare(SendMessages(batch(b"a", b"b")))
    primary = PartitionState(3, 4, PARTITION_ID, MemoryLog())
    skewed = primary.prepare(1, SendMessages(batch(b"c")), 1)  # stamped at offset 0, not 2
    backup = g.replicas[1].state
    assert backup.check_prepared(2, Operation.SEND_MESSAGES, skewed) == ErrorCode.INVALID_OFFSET
    other = PartitionState(3, 4, PARTITION_ID + 1, MemoryLog())
    first = other.prepare(1, SendMessages(batch(b"a", b"b")), 1)
    other.apply(1, Operation.SEND_MESSAGES, first)
    foreign = other.prepare(2, SendMessages(batch(b"c")), 2)  # right offset, wrong partition
    g.commit()
    assert backup.check_prepared(2, Operation.SEND_MESSAGES, foreign) == (
        ErrorCode.PARTITION_NOT_FOUND
    )
    assert backup.check_prepared(2, Operation.CREATE_STREAM, foreign) == ErrorCode.INVALID_COMMAND


def test_truncated_suffix_is_forgotten_and_reprepared_from_the_commit_point() -> None:
    g = Group.of(2)
    g.submit(SendMessages(batch(b"a")))
    g.prepare(SendMessages(batch(b"b", b"c")))
    for replica in g.replicas:  # a view change proved op 2 never committed
        replica.log.truncate(1)
    op = g.prepare(SendMessages(batch(b"d")))
    assert op == 2
    assert BATCH_HEADER.unpack_from(g.primary.log.bodies[op][1], 0)[1] == 1
    g.commit()
    assert _polled(g.replicas[1].state, PollingKind.FIRST) == [(0, b"a"), (1, b"d")]


def test_a_new_primary_continues_from_the_suffix_it_learned_as_a_backup() -> None:
    g = Group.of(2)
    g.prepare(SendMessages(batch(b"a", b"b")))
    g.prepare(DeleteConsumerOffset(ALICE))
    g.replicas.reverse()  # the backup becomes primary with two uncommitted ops
    op = g.prepare(SendMessages(batch(b"c")))
    assert BATCH_HEADER.unpack_from(g.primary.log.bodies[op][1], 0)[1] == 2


# -- polls --------------------------------------------------------------------------------


def test_polls_never_return_uncommitted_messages() -> None:
    g = Group.of(2)
    g.submit(SendMessages(batch(b"a")))
    g.prepare(SendMessages(batch(b"b")))
    for replica in g.replicas:
        assert _polled(replica.state, PollingKind.FIRST) == [(0, b"a")]
        assert _polled(replica.state, PollingKind.OFFSET, 1) == []
        assert _polled(replica.state, PollingKind.LAST, count=5) == [(0, b"a")]
        assert replica.state.current_offset == 0
    g.commit()
    assert _polled(g.primary.state, PollingKind.OFFSET, 1) == [(1, b"b")]


def _filled() -> Group:
    g = Group.of(1)
    g.submit(SendMessages(batch(b"m0", b"m1", b"m2")))  # ts 1_000_010
    g.submit(SendMessages(batch(b"m3")))  # ts 1_000_020
    g.submit(SendMessages(batch(b"m4", b"m5")))  # ts 1_000_030
    return g


def _offsets(found: list[tuple[int, bytes]]) -> list[int]:
    return [offset for offset, _ in found]


@pytest.mark.parametrize(
    ("kind", "value", "count", "expected"),
    [
        (PollingKind.OFFSET, 0, 100, [0, 1, 2, 3, 4, 5]),
        (PollingKind.OFFSET, 1, 2, [1, 2]),
        (PollingKind.OFFSET, 2, 2, [2, 3]),
        (PollingKind.OFFSET, 5, 9, [5]),
        (PollingKind.OFFSET, 6, 9, []),
        (PollingKind.TIMESTAMP, 0, 100, [0, 1, 2, 3, 4, 5]),
        (PollingKind.TIMESTAMP, 1_000_011, 100, [3, 4, 5]),
        (PollingKind.TIMESTAMP, 1_000_020, 1, [3]),
        (PollingKind.TIMESTAMP, 1_000_031, 100, []),
        (PollingKind.FIRST, 0, 4, [0, 1, 2, 3]),
        (PollingKind.LAST, 0, 3, [3, 4, 5]),
        (PollingKind.LAST, 0, 100, [0, 1, 2, 3, 4, 5]),
        (PollingKind.NEXT, 0, 2, [0, 1]),
    ],
)
def test_polling_strategies(kind: PollingKind, value: int, count: int, expected: list[int]) -> None:
    state = _filled().primary.state
    result = state.poll(ALICE, kind, value, count)
    assert _offsets(payloads_of(_records(result))) == expected
    assert result.messages_count == len(expected)
    assert result.current_offset == 5
    assert result.store_offset is None


def test_poll_slices_a_stored_batch_without_changing_stored_bytes() -> None:
    g = _filled()
    stored = bytes(g.primary.log.read(1)[1])
    result = g.primary.state.poll(ALICE, PollingKind.OFFSET, 1, 1)
    (record,) = _records(result)
    verify_batch(record, first_offset_delta=None)  # a slice is a sealed batch of its own
    assert payloads_of([record]) == [(1, b"m1")]
    assert bytes(g.primary.log.read(1)[1]) == stored


def test_next_polls_continue_after_the_stored_offset_and_auto_commit_reports_it() -> None:
    g = _filled()
    state = g.primary.state
    first = state.poll(ALICE, PollingKind.NEXT, 0, 2, auto_commit=True)
    assert (first.first_offset, first.last_offset, first.store_offset) == (0, 1, 1)
    assert state.consumer_offset(ALICE) is None  # a poll never changes replicated state
    assert first.store_offset is not None
    g.submit(StoreConsumerOffset(ALICE, first.store_offset, READER))
    second = state.poll(ALICE, PollingKind.NEXT, 0, 10, auto_commit=True)
    assert _offsets(payloads_of(_records(second))) == [2, 3, 4, 5]
    assert second.store_offset == 5
    empty = state.poll(GROUP, PollingKind.NEXT, 0, 10, auto_commit=True)
    assert empty.messages_count == 6 and empty.store_offset == 5  # groups keep their own


def test_poll_of_an_empty_partition() -> None:
    state = Group.of(1).primary.state
    result = state.poll(ALICE, PollingKind.NEXT, 0, 10, auto_commit=True)
    assert (result.current_offset, result.messages_count, result.store_offset) == (0, 0, None)
    assert result.first_offset is None and result.last_offset is None


@pytest.mark.parametrize("count", [0, partition.POLL_MESSAGES_MAX + 1])
def test_poll_count_is_bounded(count: int) -> None:
    with pytest.raises(StateError) as raised:
        _filled().primary.state.poll(ALICE, PollingKind.FIRST, 0, count)
    assert raised.value.code == ErrorCode.INVALID_MESSAGES_COUNT


def test_poll_stops_at_the_byte_bound_but_returns_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partition, "POLL_BYTES_MAX", 1)
    state = _filled().primary.state
    assert _offsets(_polled(state, PollingKind.FIRST)) == [0, 1, 2]


def test_local_retention_makes_polls_skip_forward() -> None:
    g = _filled()
    # The journal's first two segments were deleted (one record per segment here).
    assert g.primary.log.host.retain(3) == 2
    assert g.primary.state.first_offset == 4
    assert _offsets(_polled(g.primary.state, PollingKind.OFFSET, 0)) == [4, 5]
    assert _offsets(_polled(g.primary.state, PollingKind.NEXT)) == [4, 5]


# -- consumer offsets ---------------------------------------------------------------------


def test_store_get_and_delete_consumer_offsets() -> None:
    g = _filled()
    state = g.primary.state
    assert g.submit(StoreConsumerOffset(ALICE, 3, READER)) == Applied()
    assert g.submit(StoreConsumerOffset(GROUP, 5, READER)) == Applied()
    assert g.submit(StoreConsumerOffset(ALICE, 1, READER)) == Applied()  # moving back is allowed
    assert state.consumer_offset(ALICE) == 1
    assert state.consumer_offsets() == ((ALICE, 1), (GROUP, 5))
    assert g.submit(DeleteConsumerOffset(ALICE)) == Applied()
    assert state.consumer_offset(ALICE) is None
    assert g.submit(DeleteConsumerOffset(ALICE)) == Refused(ErrorCode.CONSUMER_OFFSET_NOT_FOUND)


@pytest.mark.parametrize(
    ("consumer", "offset", "code"),
    [
        (ALICE, 6, ErrorCode.INVALID_OFFSET),
        (ConsumerKey(ConsumerKind.CONSUMER, 1 << 32), 0, ErrorCode.INVALID_IDENTIFIER),
        (ConsumerKey(ConsumerKind.CONSUMER, ""), 0, ErrorCode.INVALID_IDENTIFIER),
        (ConsumerKey(ConsumerKind.CONSUMER_GROUP, "g"), 0, ErrorCode.INVALID_IDENTIFIER),
    ],
)
def test_store_consumer_offset_rejections(
    consumer: ConsumerKey, offset: int, code: ErrorCode
) -> None:
    g = _filled()
    with pytest.raises(StateError) as raised:
        g.prepare(StoreConsumerOffset(consumer, offset, READER))
    assert raised.value.code == code


def test_named_consumers_keep_offsets_apart_from_numbered_ones() -> None:
    g = _filled()
    named = ConsumerKey(ConsumerKind.CONSUMER, "reader")
    g.submit(StoreConsumerOffset(named, 2, READER))
    g.submit(StoreConsumerOffset(ALICE, 4, READER))
    assert g.primary.state.consumer_offsets() == ((ALICE, 4), (named, 2))


def test_store_of_an_offset_purged_in_flight_is_refused_at_commit() -> None:
    g = _filled()
    g.prepare(PurgePartition(1))
    g.prepare(StoreConsumerOffset(ALICE, 2, READER))  # valid when prepared, purged when applied
    results = g.commit()
    assert results[0] == [Applied(), Refused(ErrorCode.INVALID_OFFSET)]


def test_consumer_offsets_are_bounded_per_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition, "CONSUMER_OFFSETS_MAX", 1)
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 1, READER))
    assert g.submit(StoreConsumerOffset(ALICE, 2, READER)) == Applied()
    too_many = ErrorCode.TOO_MANY_CONSUMER_OFFSETS
    assert _prepare_refusal(g, StoreConsumerOffset(GROUP, 2, OTHER)) == too_many
    # Prepared in flight (nothing committed refused them yet), apply refuses the second.
    h = _filled()
    h.prepare(StoreConsumerOffset(ALICE, 1, READER))
    h.prepare(StoreConsumerOffset(GROUP, 2, OTHER))
    assert h.commit()[0][-2:] == [Applied(), Refused(too_many)]


def _prepare_refusal(g: Group, request: StoreConsumerOffset) -> ErrorCode | None:
    try:
        g.prepare(request)
    except StateError as error:
        return error.code
    return None


def _store(g: Group, request: StoreConsumerOffset) -> PartitionResult:
    """What the client is answered: a refusal at prepare, else the committed result."""
    code = _prepare_refusal(g, request)
    if code is not None:
        return Refused(code)
    results = g.commit()
    assert all(r == results[0] for r in results), results
    return results[0][-1]


def _made_up(count: int, first: int = 1_000) -> list[ConsumerKey]:
    return [ConsumerKey(ConsumerKind.CONSUMER, first + i) for i in range(count)]


def _fill_quota(g: Group, user: int) -> list[ConsumerKey]:
    """Store ``CONSUMER_OFFSETS_PER_USER_MAX`` made-up consumer ids as ``user``."""
    keys = _made_up(partition.CONSUMER_OFFSETS_PER_USER_MAX)
    for key in keys:
        assert g.submit(StoreConsumerOffset(key, 0, user)) == Applied()
    return keys


def test_a_user_at_its_quota_is_refused_a_new_consumer_and_others_are_not() -> None:
    g = _filled()
    keys = _fill_quota(g, READER)
    state = g.primary.state
    assert state.offsets_charged(READER) == partition.CONSUMER_OFFSETS_PER_USER_MAX
    too_many = Refused(ErrorCode.TOO_MANY_CONSUMER_OFFSETS)
    assert _store(g, StoreConsumerOffset(ALICE, 1, READER)) == too_many
    assert _store(g, StoreConsumerOffset(GROUP, 1, READER)) == too_many
    assert state.consumer_offset(ALICE) is None
    # Another user's new consumer and its later moves are unaffected.
    assert _store(g, StoreConsumerOffset(ALICE, 1, OTHER)) == Applied()
    assert _store(g, StoreConsumerOffset(ALICE, 4, OTHER)) == Applied()
    assert (state.consumer_offset(ALICE), state.offsets_charged(OTHER)) == (4, 1)
    # The user at its quota still moves the offsets it has.
    assert _store(g, StoreConsumerOffset(keys[-1], 5, READER)) == Applied()
    assert state.consumer_offset(keys[-1]) == 5


def test_a_store_committed_state_refuses_is_refused_at_prepare_and_not_logged() -> None:
    g = _filled()
    _fill_quota(g, READER)
    head = g.primary.head_op
    code = _prepare_refusal(g, StoreConsumerOffset(ALICE, 1, READER))
    assert code == ErrorCode.TOO_MANY_CONSUMER_OFFSETS
    assert g.primary.head_op == head
    # A move of an existing offset and another user's store are prepared as usual.
    assert _prepare_refusal(g, StoreConsumerOffset(_made_up(1)[0], 2, READER)) is None
    assert _prepare_refusal(g, StoreConsumerOffset(GROUP, 2, OTHER)) is None


def test_a_store_is_prepared_when_an_op_in_flight_may_make_room_for_it() -> None:
    g = _filled()
    keys = _fill_quota(g, READER)
    g.prepare(DeleteConsumerOffset(keys[0]))  # not committed yet
    assert _prepare_refusal(g, StoreConsumerOffset(ALICE, 1, READER)) is None
    assert g.commit()[0] == [Applied(), Applied()]
    # The same consumer stored in flight by another user makes the store a move.
    g.prepare(StoreConsumerOffset(GROUP, 1, OTHER))
    assert _prepare_refusal(g, StoreConsumerOffset(GROUP, 2, READER)) is None
    assert g.commit()[0] == [Applied(), Applied()]
    assert g.primary.state.stored_offsets()[-1] == (GROUP, partition.StoredOffset(2, OTHER))


def test_moving_anothers_offset_charges_its_creator_and_always_succeeds() -> None:
    g = _filled()
    _fill_quota(g, READER)
    assert _store(g, StoreConsumerOffset(ALICE, 1, OTHER)) == Applied()
    # READER is at its quota, yet moves the offset OTHER created: it is charged to OTHER.
    assert _store(g, StoreConsumerOffset(ALICE, 3, READER)) == Applied()
    state = g.primary.state
    assert state.consumer_offset(ALICE) == 3
    assert state.offsets_charged(OTHER) == 1
    assert state.offsets_charged(READER) == partition.CONSUMER_OFFSETS_PER_USER_MAX


def test_deleting_an_offset_frees_its_creators_charge_whoever_deletes() -> None:
    g = _filled()
    keys = _fill_quota(g, READER)
    state = g.primary.state
    assert g.submit(DeleteConsumerOffset(keys[0])) == Applied()
    assert state.offsets_charged(READER) == partition.CONSUMER_OFFSETS_PER_USER_MAX - 1
    assert _store(g, StoreConsumerOffset(ALICE, 1, READER)) == Applied()
    assert _store(g, StoreConsumerOffset(GROUP, 1, READER)) == Refused(
        ErrorCode.TOO_MANY_CONSUMER_OFFSETS
    )
    # A delete is not charged to whoever sends it: it frees the creator's charge.
    assert g.submit(DeleteConsumerOffset(ALICE)) == Applied()
    assert _store(g, StoreConsumerOffset(GROUP, 1, READER)) == Applied()
    assert state.offsets_charged(READER) == partition.CONSUMER_OFFSETS_PER_USER_MAX


def test_a_refused_store_is_refused_on_every_replica_alike() -> None:
    g = Group.of(3)
    g.submit(SendMessages(batch(b"m0")))
    for key in _made_up(partition.CONSUMER_OFFSETS_PER_USER_MAX + 1):
        g.prepare(StoreConsumerOffset(key, 0, READER))  # pipelined, none committed yet
    results = g.commit()
    assert results[0] == results[1] == results[2]
    assert results[0][-1] == Refused(ErrorCode.TOO_MANY_CONSUMER_OFFSETS)
    assert results[0][:-1] == [Applied()] * partition.CONSUMER_OFFSETS_PER_USER_MAX


# -- purge --------------------------------------------------------------------------------


def test_purge_hides_messages_clears_offsets_and_keeps_offsets_dense() -> None:
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 2, READER))
    assert g.submit(PurgePartition(1)) == Applied()
    state = g.primary.state
    assert (state.purge_generation, state.first_offset, state.current_offset) == (1, 6, 5)
    assert state.consumer_offsets() == ()
    assert state.offsets_charged(READER) == 0
    assert _polled(state, PollingKind.FIRST) == []
    assert _polled(state, PollingKind.TIMESTAMP, 0) == []
    assert g.submit(SendMessages(batch(b"after"))) == Appended(6, 1)
    assert _polled(state, PollingKind.OFFSET, 0) == [(6, b"after")]
    # A repeated purge of the same generation is a no-op.
    assert g.submit(PurgePartition(1)) == Applied()
    assert _polled(state, PollingKind.FIRST) == [(6, b"after")]


# -- snapshot -----------------------------------------------------------------------------


def test_snapshot_restore_over_the_same_journal_serves_the_same_polls() -> None:
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 3, READER))
    g.submit(PurgePartition(1))
    g.submit(SendMessages(batch(b"n0", b"n1")))
    g.submit(StoreConsumerOffset(GROUP, 7, READER))
    state = g.primary.state
    # Nothing to rebuild: the journal's index is the partition's.
    restored = PartitionState.restore(state.snapshot(), g.primary.log)
    assert restored.snapshot() == state.snapshot()
    for kind in PollingKind:
        assert _records(restored.poll(GROUP, kind, 0, 10)) == _records(
            state.poll(GROUP, kind, 0, 10)
        )
    # Both continue identically.
    op = state.commit_op + 1
    body = state.prepare(op, SendMessages(batch(b"z")), 9)
    assert restored.prepare(op, SendMessages(batch(b"z")), 9) == body
    assert restored.apply(op, Operation.SEND_MESSAGES, body) == state.apply(
        op, Operation.SEND_MESSAGES, body
    )


def test_snapshot_keeps_whom_each_offset_is_charged_to() -> None:
    g = _filled()
    keys = _fill_quota(g, READER)
    g.submit(StoreConsumerOffset(ALICE, 2, OTHER))
    g.submit(StoreConsumerOffset(GROUP, 3, OTHER))
    state = g.primary.state
    restored = PartitionState.restore(state.snapshot(), g.primary.log)
    assert restored.snapshot() == state.snapshot()
    assert restored.stored_offsets() == state.stored_offsets()
    assert restored.offsets_charged(READER) == partition.CONSUMER_OFFSETS_PER_USER_MAX
    assert restored.offsets_charged(OTHER) == 2
    # The restored replica refuses and frees exactly as the original does.
    new = ConsumerKey(ConsumerKind.CONSUMER, "new")
    with pytest.raises(StateError):
        restored.prepare(state.commit_op + 1, StoreConsumerOffset(new, 1, READER), 9)
    for request in (DeleteConsumerOffset(keys[0]), StoreConsumerOffset(new, 1, READER)):
        op = state.commit_op + 1
        body = state.prepare(op, request, 9)
        assert restored.prepare(op, request, 9) == body
        operation = partition.operation_of(request)
        assert restored.apply(op, operation, body) == state.apply(op, operation, body)
    assert restored.snapshot() == state.snapshot()
    assert restored.offsets_charged(READER) == partition.CONSUMER_OFFSETS_PER_USER_MAX


def _snapshot_plain(version: int, offsets: list[list[object]]) -> bytes:
    return cbor2.dumps(
        {
            "version": version,
            "ids": [1, 2, 3],
            "commit_op": 1,
            "next_offset": 1,
            "timestamp_us": 0,
            "visible_from": 0,
            "purge_generation": 0,
            "offsets": offsets,
        }
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        cbor2.dumps({"version": 3}),
        cbor2.dumps({"version": 2, "ids": [1, 2]}),
        _snapshot_plain(2, [[1, 1, 5, 10]]),  # stored beyond the log
        _snapshot_plain(2, [[1, 1, 0]]),  # no user
        _snapshot_plain(2, [[1, 1, 0, 1 << 32]]),  # not a user id
        _snapshot_plain(2, [[1, 1, 0, 10], [1, 1, 0, 11]]),  # one consumer twice
    ],
)
def test_restore_refuses_garbage(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        PartitionState.restore(data, MemoryLog())


def test_restore_refuses_a_version_1_snapshot_by_its_version() -> None:
    # Version 1 did not say whom an offset is charged to.
    with pytest.raises(SnapshotError, match="version 1"):
        PartitionState.restore(_snapshot_plain(1, [[1, 1, 0]]), MemoryLog())


def test_apply_asserts_on_a_stamp_that_breaks_the_log() -> None:
    g = Group.of(1)
    other = PartitionState(3, 4, PARTITION_ID, MemoryLog())
    other.apply(1, Operation.SEND_MESSAGES, other.prepare(1, SendMessages(batch(b"a")), 1))
    body = other.prepare(2, SendMessages(batch(b"b")), 2)  # base offset 1, this log is empty
    with pytest.raises(AssertionError):
        g.primary.state.apply(1, Operation.SEND_MESSAGES, body)


def test_frontier_of_control_bodies_is_the_head_they_were_prepared_at() -> None:
    g = _filled()
    op = g.prepare(DeleteConsumerOffset(ALICE))
    assert frontier_after(Operation.DELETE_CONSUMER_OFFSET, g.primary.log.bodies[op][1]) == (
        Frontier(6, 1_000_030)
    )


@pytest.mark.parametrize(
    ("kind", "value", "count", "waits_for"),
    [
        (PollingKind.OFFSET, 0, 100, None),
        (PollingKind.OFFSET, 5, 1, None),
        (PollingKind.OFFSET, 6, 1, 6),
        (PollingKind.OFFSET, 9, 1, 9),
        (PollingKind.TIMESTAMP, 1_000_020, 1, None),
        (PollingKind.TIMESTAMP, 1_000_031, 100, 6),
        (PollingKind.FIRST, 0, 4, None),
        (PollingKind.LAST, 0, 3, None),
        (PollingKind.NEXT, 0, 2, None),
    ],
)
def test_poll_wait_offset_agrees_with_poll(
    kind: PollingKind, value: int, count: int, waits_for: int | None
) -> None:
    """None exactly when the poll returns messages; otherwise the offset whose commit
    would give the poll something (a long poll wakes for it)."""
    state = _filled().primary.state
    assert state.poll_wait_offset(ALICE, kind, value, count) == waits_for
    assert (state.poll(ALICE, kind, value, count).messages_count == 0) == (waits_for is not None)


def test_poll_wait_offset_of_an_empty_partition_and_after_the_stored_offset() -> None:
    g = Group.of(1)
    state = g.primary.state
    for kind in (PollingKind.FIRST, PollingKind.LAST, PollingKind.NEXT, PollingKind.OFFSET):
        assert state.poll_wait_offset(ALICE, kind, 0, 10) == 0
    g.submit(SendMessages(batch(b"m0", b"m1")))
    g.submit(StoreConsumerOffset(ALICE, 1, READER))
    assert state.poll_wait_offset(ALICE, PollingKind.NEXT, 0, 10) == 2
    assert state.poll_wait_offset(GROUP, PollingKind.NEXT, 0, 10) is None
    with pytest.raises(StateError):
        state.poll_wait_offset(ALICE, PollingKind.NEXT, 0, 0)
