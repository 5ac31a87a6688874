"""Routing partition requests: the partition a send, poll or offset request goes to.

Purpose: at admission, and for reads, a partition-plane request is resolved against
committed metadata to its partition and, for polls and offsets, to the consumer whose
offset it reads or writes (:class:`PartitionRoute`), with Iggy's permission check.
Failures raise :class:`StateError`; the runtime answers with its code in the reply
header's status, before anything is replicated.

Invariants:

1. Nothing here reads a clock, draws randomness or touches IO; the balanced-partitioning
   counter is passed in (the runtime's, per topic, local as in Iggy).
2. A poll by a consumer group member reads only a partition the member owns and is not
   giving away (revoking) in the current generation; a group's offset of an explicit
   partition may be read or written by a session that does not own it.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import MetadataState
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.permissions import Action
from sdk import wire


@dataclass(frozen=True, slots=True)
class PartitionRoute:
    """Where a partition request goes, and whose offset it reads or writes."""

    stream_id: int
    topic_id: int
    partition_id: int
    consumer: ConsumerKey | None = None


def route_send(
    state: MetadataState, request: wire.SendMessages, session: int, balanced_counter: int
) -> PartitionRoute:
    """The partition a send goes to; ``balanced_counter`` is the runtime's per-topic
    round-robin counter (local, as in Iggy), consulted only for balanced sends.

    Raises:
        StateError: unknown stream, topic or partition, no partitions, or no permission.
    """
    topic = state.topic(request.stream_id.value, request.topic_id.value)
    _require(state, session, Action.SEND_MESSAGES, topic.stream_id, topic.id)
    count = topic.partitions_count
    if count == 0:
        raise StateError(ErrorCode.NO_PARTITIONS)
    match request.partitioning:
        case wire.PartitionId(partition_id):
            if partition_id >= count:
                raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(partition_id))
        case wire.MessagesKey() as by_key:
            partition_id = by_key.partition(count)
        case wire.Balanced():
            partition_id = balanced_counter % count
    return PartitionRoute(topic.stream_id, topic.id, partition_id)


def route_poll(state: MetadataState, request: wire.PollMessages, session: int) -> PartitionRoute:
    """The partition and offset owner of a poll.

    A consumer without a partition reads partition 0. A consumer group member must be a
    member; without a partition it reads the first partition assigned to it, and with
    one it must own that partition in the current generation.

    Raises:
        StateError: unknown objects, no permission, not a member, or a partition the
            member does not own.
    """
    return _route_owned(
        state,
        request.consumer,
        request.stream_id,
        request.topic_id,
        request.partition_id,
        session,
        owned_only=True,
    )


def route_poll_target(
    state: MetadataState, request: wire.PollMessages, session: int
) -> PartitionRoute:
    """The partition a poll reads, without judging the group assignment: where an
    auto-commit poll is routed to, the node that serves it judges the assignment.

    Raises:
        StateError: unknown objects, no permission, or a group member without a
            partition that owns none.
    """
    return _route_owned(
        state,
        request.consumer,
        request.stream_id,
        request.topic_id,
        request.partition_id,
        session,
        owned_only=False,
    )


def route_offset(
    state: MetadataState,
    request: wire.GetConsumerOffset | wire.StoreConsumerOffset | wire.DeleteConsumerOffset,
    session: int,
) -> PartitionRoute:
    """The partition and offset owner of a get/store/delete consumer offset request.

    Unlike a poll, a group's offset of an explicit partition may be read or written by a
    session that does not own it (an old owner committing after a rebalance, a tool);
    without a partition, the session's first assigned partition is meant.
    """
    return _route_owned(
        state,
        request.consumer,
        request.stream_id,
        request.topic_id,
        request.partition_id,
        session,
        owned_only=False,
    )


def _route_owned(
    state: MetadataState,
    consumer: wire.Consumer,
    stream: wire.Identifier,
    topic_ident: wire.Identifier,
    partition_id: int | None,
    session: int,
    *,
    owned_only: bool,
) -> PartitionRoute:
    topic = state.topic(stream.value, topic_ident.value)
    _require(state, session, Action.POLL_MESSAGES, topic.stream_id, topic.id)
    if consumer.kind == wire.ConsumerKind.CONSUMER_GROUP:
        group = state.consumer_group(topic.stream_id, topic.id, consumer.id.value)
        key = ConsumerKey(ConsumerKind.CONSUMER_GROUP, group.id)
        if owned_only or partition_id is None:
            # A poll reads a partition the member may poll; an offset write may name one
            # it still owns while it moves to another member (it commits what it polled).
            _, owned = state.assignment(
                topic.stream_id, topic.id, group.id, session, revoking=not owned_only
            )
            if partition_id is None:
                if not owned:
                    raise StateError(ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED)
                partition_id = owned[0]
            elif partition_id not in owned:
                raise StateError(ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED, str(partition_id))
    else:
        key = ConsumerKey(ConsumerKind.CONSUMER, consumer.id.value)
        partition_id = 0 if partition_id is None else partition_id
    if partition_id >= topic.partitions_count:
        raise StateError(ErrorCode.PARTITION_NOT_FOUND, str(partition_id))
    return PartitionRoute(topic.stream_id, topic.id, partition_id, key)


def _require(
    state: MetadataState, session: int, action: Action, stream_id: int, topic_id: int
) -> None:
    code = state.permits(session, action, stream_id, topic_id)
    if code is not None:
        raise StateError(code)
