"""Retention in the partition log: "retain from offset X", and consumers across it.

Method: a partition of three batches (offsets 0-2, 3, 4-5, then more) on one or three
replicas of the lock-step test group; retention and purge ops are prepared and committed
like any other, and polls, stored offsets, counts, bytes, the journal floor and snapshots
are checked on every replica.
"""

from __future__ import annotations

import cbor2
import pytest

from broker.state.errors import ErrorCode, StateError
from broker.state.partition import (
    Appended,
    Applied,
    ConsumerKey,
    ConsumerKind,
    PartitionState,
    PollingKind,
    PurgePartition,
    RetainPartition,
    SendMessages,
    StoreConsumerOffset,
    frontier_after,
    operation_of,
)
from broker.state.partition_machine import partition_request, purge_body, retain_body
from consensus.messages import PREPARE_HEADER
from journal import RECORD_HEADER_SIZE
from sdk.wire.codes import Operation
from tests.state.partition_helpers import Group, batch, payloads_of

ALICE = ConsumerKey(ConsumerKind.CONSUMER, 1)
BOB = ConsumerKey(ConsumerKind.CONSUMER, 2)
READER = 10


def _filled(replicas: int = 1) -> Group:
    g = Group.of(replicas)
    g.submit(SendMessages(batch(b"m0", b"m1", b"m2")))  # op 1
    g.submit(SendMessages(batch(b"m3")))  # op 2
    g.submit(SendMessages(batch(b"m4", b"m5")))  # op 3
    return g


def _offsets(
    state: PartitionState, kind: PollingKind, value: int = 0, count: int = 100
) -> list[int]:
    result = state.poll(ALICE, kind, value, count)
    records = [b"".join(bytes(part) for part in piece.parts) for piece in result.slices]
    return [offset for offset, _ in payloads_of(records)]


def test_retain_moves_the_retained_start_on_every_replica() -> None:
    g = _filled(replicas=3)
    assert g.submit(RetainPartition(3)) == Applied()
    for replica in g.replicas:
        state = replica.state
        assert (state.retained_start, state.first_offset, state.current_offset) == (3, 3, 5)
        assert state.retained_messages == 3
    snapshots = {r.state.snapshot() for r in g.replicas}
    assert len(snapshots) == 1


def test_poll_by_offset_below_the_retained_start_starts_at_it() -> None:
    g = _filled()
    g.submit(RetainPartition(3))
    state = g.primary.state
    assert _offsets(state, PollingKind.OFFSET, 0) == [3, 4, 5]
    assert _offsets(state, PollingKind.FIRST) == [3, 4, 5]
    assert _offsets(state, PollingKind.LAST, count=10) == [3, 4, 5]
    assert _offsets(state, PollingKind.TIMESTAMP, 0) == [3, 4, 5]


def test_next_poll_whose_stored_offset_was_retired_skips_forward() -> None:
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 0, READER))
    g.submit(RetainPartition(4))
    state = g.primary.state
    # The stored offset stays readable, as in Iggy, though its message is gone.
    assert state.consumer_offset(ALICE) == 0
    assert _offsets(state, PollingKind.NEXT) == [4, 5]


def test_retain_inside_a_batch_keeps_the_batch_and_slices_it() -> None:
    g = _filled()
    g.submit(RetainPartition(1))
    state = g.primary.state
    assert state.first_offset == 1
    assert _offsets(state, PollingKind.OFFSET, 0) == [1, 2, 3, 4, 5]
    assert state.retention_floor_op() == 1  # the batch at op 1 still holds offsets 1-2
    assert state.retained_messages == 5


def _record_size(g: Group, op: int) -> int:
    """Bytes the journal record of ``op`` takes: its header, the prepare's, the body."""
    return RECORD_HEADER_SIZE + PREPARE_HEADER.size + len(g.primary.log.bodies[op][1])


def test_retained_bytes_are_the_journal_records_from_the_first_retained_message() -> None:
    g = _filled()
    sizes = [_record_size(g, op) for op in (1, 2, 3)]
    state = g.primary.state
    assert state.retained_bytes == sum(sizes)
    op = g.prepare(RetainPartition(3))
    g.commit()
    # From the batch holding offset 3 on, the retention's own record included.
    assert state.retained_bytes == sizes[1] + sizes[2] + _record_size(g, op)
    assert state.retention_floor_op() == 2
    g.submit(RetainPartition(6))  # everything: the head
    assert (state.retained_bytes, state.retained_messages) == (0, 0)
    assert state.retention_floor_op() == state.commit_op + 1


def test_retain_never_moves_back_and_never_past_the_head() -> None:
    g = _filled()
    state = g.primary.state
    g.submit(RetainPartition(4))
    assert g.submit(RetainPartition(2)) == Applied()
    assert state.retained_start == 4
    g.submit(RetainPartition(10**9))
    assert state.retained_start == 6  # the committed head when it was prepared
    assert g.submit(SendMessages(batch(b"m6"))) == Appended(6, 1)
    assert _offsets(state, PollingKind.FIRST) == [6]


def test_store_below_the_retained_start_is_refused() -> None:
    g = _filled()
    g.submit(RetainPartition(3))
    with pytest.raises(StateError) as error:
        g.prepare(StoreConsumerOffset(BOB, 2, READER))
    assert error.value.code == ErrorCode.INVALID_OFFSET


def test_purge_reports_no_messages_and_no_bytes() -> None:
    g = _filled()
    g.submit(PurgePartition(1))
    state = g.primary.state
    assert (state.retained_messages, state.retained_bytes) == (0, 0)
    assert state.retention_floor_op() == state.commit_op + 1


def test_retained_start_survives_snapshot_and_a_log_trimmed_below_it() -> None:
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 1, READER))
    g.submit(RetainPartition(3))
    g.submit(SendMessages(batch(b"m6")))
    state = g.primary.state
    floor = state.retention_floor_op()
    # The host deleted the segments below the floor (one record each here), then
    # restarted: the journal's recovered index is all the restored state reads.
    assert g.primary.log.host.retain(floor) == floor - 1
    g.primary.log.host.reopen()
    assert g.primary.log.journal.op_min == floor
    restored = PartitionState.restore(state.snapshot(), g.primary.log)
    assert restored.retained_start == 3
    assert restored.consumer_offset(ALICE) == 1
    assert restored.retained_bytes == state.retained_bytes
    assert _offsets(restored, PollingKind.OFFSET, 0) == _offsets(state, PollingKind.OFFSET, 0)
    assert restored.snapshot() == state.snapshot()


def test_the_journal_index_holds_message_offsets_and_control_ops_hold_none() -> None:
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 1, READER))  # op 4: no messages
    g.submit(SendMessages(batch(b"m6")))  # op 5
    journal = g.primary.log.journal
    assert [journal.record_offset(op) for op in range(1, 6)] == [0, 3, 4, 6, 6]
    assert [journal.op_for_offset(offset) for offset in range(7)] == [1, 1, 1, 2, 3, 3, 5]
    # One segment per record here, each named by its first offset; the store's record
    # holds no message, so it stays in the segment of the batch after it.
    names = [info.name for info in journal.segments()]
    assert names == [f"{offset:020}" for offset in (0, 3, 4, 6)]


def test_retain_body_round_trips_through_the_partition_request() -> None:
    assert partition_request(Operation.TRUNCATE_PARTITION, retain_body(42)) == RetainPartition(42)
    assert partition_request(Operation.TRUNCATE_PARTITION, purge_body(3)) == PurgePartition(3)
    assert operation_of(RetainPartition(1)) == Operation.TRUNCATE_PARTITION
    g = _filled()
    op = g.prepare(RetainPartition(2))
    operation, body = g.primary.log.bodies[op]
    assert cbor2.loads(body)[2:] == ["retain", 2]
    assert frontier_after(operation, body).next_offset == 6  # a control op adds nothing


def _every_poll(state: PartitionState) -> list[list[int]]:
    """The offsets every kind of poll returns, from several starting points."""
    return [
        _offsets(state, kind, value, count)
        for kind in PollingKind
        for value in (0, 3, 5, 10**9)
        for count in (1, 2, 100)
    ]


def _restarted(g: Group) -> PartitionState:
    """The primary after a restart: its journal recovered from storage, its state from a
    snapshot, with the journal's recovered index the only index it reads."""
    snapshot = g.primary.state.snapshot()
    g.primary.log.host.reopen()
    return PartitionState.restore(snapshot, g.primary.log)


def test_polls_read_the_journal_index_after_restart_retention_and_purge() -> None:
    g = _filled()
    g.submit(StoreConsumerOffset(ALICE, 2, READER))
    g.submit(SendMessages(batch(b"m6", b"m7")))  # offsets 6-7, after a record of none
    live = _every_poll(g.primary.state)
    assert _restarted(g).snapshot() == g.primary.state.snapshot()
    assert _every_poll(_restarted(g)) == live
    # Retention: the retained start moves, the host deletes the sealed segments below
    # the floor, and a restart finds the same answers in what is left.
    g.submit(RetainPartition(4))
    retained = _every_poll(g.primary.state)
    assert min(offset for polled in retained for offset in polled) == 4
    floor = g.primary.state.retention_floor_op()
    assert g.primary.log.host.retain(floor) == floor - 1
    assert _every_poll(g.primary.state) == retained
    restarted = _restarted(g)
    assert _every_poll(restarted) == retained
    assert (restarted.first_offset, restarted.retained_messages) == (4, 4)
    assert restarted.retained_bytes == g.primary.state.retained_bytes > 0
    # Purge: nothing is retained, on the live state and after a restart; later batches
    # continue the offsets and are polled from the same index.
    g.submit(PurgePartition(1))
    assert all(polled == [] for polled in _every_poll(g.primary.state))
    restarted = _restarted(g)
    assert all(polled == [] for polled in _every_poll(restarted))
    assert (restarted.retained_messages, restarted.retained_bytes) == (0, 0)
    assert g.submit(SendMessages(batch(b"m8"))) == Appended(8, 1)
    assert _offsets(g.primary.state, PollingKind.OFFSET, 0) == [8]
    assert _offsets(_restarted(g), PollingKind.TIMESTAMP, 0) == [8]
