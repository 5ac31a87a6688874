"""Partition determinism against a model: replicas agree, offsets stay dense, polls only
see committed data, snapshots restore to the same future."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.state.errors import StateError
from broker.state.partition import (
    ConsumerKey,
    ConsumerKind,
    DeleteConsumerOffset,
    PartitionRequest,
    PartitionState,
    PollingKind,
    PurgePartition,
    RetainPartition,
    SendMessages,
    StoreConsumerOffset,
)
from consensus.messages import PREPARE_HEADER
from journal import RECORD_HEADER_SIZE
from sdk.wire.batch import read_batch
from sdk.wire.codes import Operation
from tests.state.partition_helpers import Group, batch, payloads_of

CONSUMERS = (
    ConsumerKey(ConsumerKind.CONSUMER, 0),
    ConsumerKey(ConsumerKind.CONSUMER, "named"),
    ConsumerKey(ConsumerKind.CONSUMER_GROUP, 0),
)


@dataclass(frozen=True)
class Send:
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Store:
    consumer: int
    offset_hint: int
    user: int


@dataclass(frozen=True)
class Delete:
    consumer: int


@dataclass(frozen=True)
class Purge:
    generation: int


@dataclass(frozen=True)
class Retain:
    offset_hint: int


@dataclass(frozen=True)
class Commit:
    ops: int  # how many prepared ops to commit (clamped to what is prepared)


@dataclass(frozen=True)
class Poll:
    consumer: int
    kind: PollingKind
    value: int
    count: int


Action = Send | Store | Delete | Purge | Retain | Commit | Poll

actions: st.SearchStrategy[Action] = st.one_of(
    st.builds(Send, st.lists(st.integers(0, 40), min_size=1, max_size=4).map(tuple)),
    st.builds(Send, st.lists(st.integers(0, 40), min_size=1, max_size=4).map(tuple)),
    st.builds(Store, st.integers(0, 2), st.integers(0, 50), st.integers(1, 2)),
    st.builds(Delete, st.integers(0, 2)),
    st.builds(Purge, st.integers(0, 3)),
    st.builds(Retain, st.integers(0, 60)),
    st.builds(Commit, st.integers(0, 4)),
    st.builds(Commit, st.integers(0, 4)),
    st.builds(
        Poll,
        st.integers(0, 2),
        st.sampled_from(PollingKind),
        st.integers(0, 1_000_200),
        st.integers(1, 20),
    ),
)


def _request(
    action: Send | Store | Delete | Purge | Retain, head_next_offset: int
) -> PartitionRequest:
    match action:
        case Send(sizes):
            return SendMessages(batch(*[bytes([len(sizes)]) * size for size in sizes]))
        case Store(consumer, hint, user):
            return StoreConsumerOffset(CONSUMERS[consumer], hint % max(1, head_next_offset), user)
        case Delete(consumer):
            return DeleteConsumerOffset(CONSUMERS[consumer])
        case Purge(generation):
            return PurgePartition(generation)
        case Retain(hint):
            return RetainPartition(hint % (head_next_offset + 2))


def _poll_bytes(state: PartitionState, poll: Poll) -> list[bytes]:
    result = state.poll(CONSUMERS[poll.consumer], poll.kind, poll.value, poll.count)
    return [b"".join(bytes(part) for part in piece.parts) for piece in result.slices]


@settings(max_examples=500, deadline=None)
@given(st.lists(actions, min_size=5, max_size=60), st.integers(0, 60))
def test_replicas_agree_and_polls_are_committed_dense_prefixes(
    history: list[Action], restore_at: int
) -> None:
    g = Group.of(3)
    committed_messages = 0
    retained_start = 0
    restored: PartitionState | None = None
    for step, action in enumerate(history):
        if step == restore_at:
            # A replica restarts from a snapshot of the primary over the same journal,
            # whose index it reads as it is: nothing to rebuild.
            primary = g.primary
            restored = PartitionState.restore(primary.state.snapshot(), primary.log)
        match action:
            case Commit(ops):
                last = min(g.primary.head_op, g.primary.state.commit_op + ops)
                first_op = g.primary.state.commit_op + 1
                results = g.commit(last)
                assert results[0] == results[1] == results[2]
                if restored is not None:
                    for op in range(first_op, last + 1):
                        assert (
                            restored.apply(op, *g.primary.log.read(op)) == results[0][op - first_op]
                        )
                committed_messages = g.primary.state.frontier.next_offset
                state = g.primary.state
                # The retained start never moves back nor past the head, and the bytes
                # reported are exactly the journal's records from the first batch holding
                # a retained message.
                assert retained_start <= state.retained_start <= committed_messages
                retained_start = state.retained_start
                assert state.retained_bytes == _bytes_from(g, state.retained_start)
                assert state.retained_messages == committed_messages - state.first_offset
            case Poll():
                polls = [_poll_bytes(r.state, action) for r in g.replicas]
                assert polls[0] == polls[1] == polls[2]
                if restored is not None:
                    assert _poll_bytes(restored, action) == polls[0]
                offsets = [offset for offset, _ in payloads_of(polls[0])]
                # Dense, ascending, committed only, and never past the count.
                if offsets:
                    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
                assert all(offset < committed_messages for offset in offsets)
                assert all(offset >= retained_start for offset in offsets)
                assert len(offsets) <= action.count
            case _:
                head = g.primary.state.head(g.primary.head_op)
                with contextlib.suppress(StateError):  # an invalid request prepares nothing
                    g.prepare(_request(action, head.next_offset))
    g.commit()
    states = [r.state for r in g.replicas]
    assert states[0].snapshot() == states[1].snapshot() == states[2].snapshot()
    # Every message ever sent is in the log exactly once, at a dense offset.
    log = g.primary.log
    everything = payloads_of(
        [bytes(log.read(op)[1]) for op in range(1, log.journal.op_head + 1) if _is_batch(g, op)]
    )
    assert [offset for offset, _ in everything] == list(range(len(everything)))
    sent = [len(a.sizes) for a in history if isinstance(a, Send)]
    assert len(everything) == sum(sent)


def _bytes_from(g: Group, offset: int) -> int:
    """Bytes of the committed journal records from the first batch with a message at or
    above ``offset`` (headers and control ops included), by reading every record."""
    total = 0
    counting = False
    for op in range(1, g.primary.state.commit_op + 1):
        operation, body = g.primary.log.read(op)
        if operation == Operation.SEND_MESSAGES:
            _, messages = read_batch(body)
            counting = counting or (bool(messages) and messages[-1].offset >= offset)
        if counting:
            total += RECORD_HEADER_SIZE + PREPARE_HEADER.size + len(body)
    return total


def _is_batch(g: Group, op: int) -> bool:
    return g.primary.log.read(op)[0] == Operation.SEND_MESSAGES
