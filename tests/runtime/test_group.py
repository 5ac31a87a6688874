"""A group host on real files, in-process: group commit, ordering, and restart."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing

from broker.core.groups import Outcome, Replied, Submission
from broker.core.identity import internal_checksum
from broker.runtime.flush import Flusher
from broker.runtime.group import TICKS_OWED_MAX, GroupHost, GroupKind, PartitionIds, ReplyWaiter
from broker.runtime.store import GroupStore
from broker.state.partition_machine import send_body
from consensus import Action, Event, Message, ReplicaConfig, Ticked
from consensus.config import TICKS_IDLE
from consensus.messages import StartViewChange
from consensus.protocols import DurableState, RequestBody, joined_body
from consensus.replica import Status
from sdk import wire
from sdk.wire.codes import Operation


def _host(
    path: Path,
    *,
    persisted: bool,
    group_id: int = 1,
    flusher: Flusher | None = None,
    replica_count: int = 1,
) -> GroupHost:
    def send(group: int, replica: int, message: Message) -> None:
        if replica_count == 1:
            raise AssertionError("a group of one sends nothing")

    return GroupHost(
        group_id=group_id,
        kind=GroupKind.PARTITION,
        path=path,
        replica_index=0,
        replica_count=replica_count,
        persisted=persisted,
        no_sync=False,
        segment_size_bytes=1 << 20,
        replica_config=ReplicaConfig(),
        send=send,
        on_applied=lambda host: None,
        prng=random.Random(group_id),
        partition=PartitionIds(group_id - 1, 0, 0, group_id),
        flusher=flusher,
    )


def _send_body(payload: bytes) -> RequestBody:
    """A send of one message as admission hands it to the group (``send_body``)."""
    request = wire.build_send_messages(
        wire.Identifier(0),
        wire.Identifier(0),
        wire.PartitionId(0),
        [wire.OutgoingMessage(1, payload)],
    )
    return send_body(wire.SendMessages.decode(request))


async def _submit_many(
    host: GroupHost, count: int, session: int = 7, request: int = 1
) -> list[Outcome]:
    waiters = [ReplyWaiter() for _ in range(count)]
    for index, waiter in enumerate(waiters):
        body = _send_body(f"m{index}".encode())
        host.submit(
            Submission(
                client_id=100 + index,
                session=session,
                request=request,
                operation=Operation.SEND_MESSAGES,
                body=body,
                timestamp_us=1_000_000 + index,
                deliver=waiter.deliver,
                request_checksum=internal_checksum(joined_body(body)),
            )
        )
    with trio.fail_after(10):
        for waiter in waiters:
            await waiter.event.wait()
    return [w.outcome for w in waiters if w.outcome is not None]


def test_persisted_group_acks_every_request_with_fewer_fsyncs_than_prepares(
    tmp_path: Path,
) -> None:
    async def main() -> tuple[list[Outcome], int, int]:
        host = _host(tmp_path / "group", persisted=True)
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            outcomes = await _submit_many(host, 32)
            nursery.cancel_scope.cancel()
        await host.close()
        return outcomes, host.counters.prepares, host.counters.syncs

    outcomes, prepares, syncs = trio.run(main)
    assert len(outcomes) == 32 and all(isinstance(o, Replied) for o in outcomes)
    # Dense offsets in submission order: the k-th request's batch starts at offset k.
    offsets = [
        wire.SendMessagesReply.decode(o.body).confirmations[0].base_offset
        for o in outcomes
        if isinstance(o, Replied)
    ]
    assert offsets == list(range(32))
    assert prepares == 32
    assert 1 <= syncs < prepares  # group commit: one fsync covered several prepares


def test_group_restarts_from_its_files_and_continues_the_offsets(tmp_path: Path) -> None:
    async def round_trip(session: int, request: int) -> list[int]:
        host = _host(tmp_path / "group", persisted=False)
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            outcomes = await _submit_many(host, 3, session, request)
            nursery.cancel_scope.cancel()
        await host.close()
        return [
            wire.SendMessagesReply.decode(o.body).confirmations[0].base_offset
            for o in outcomes
            if isinstance(o, Replied)
        ]

    assert trio.run(round_trip, 7, 1) == [0, 1, 2]
    # The same client ids in a newer session: a retried request number is answered from
    # the client table (numbers belong to the client id, not the session), new numbers are
    # appended after the first three.
    assert trio.run(round_trip, 8, 1) == [0, 1, 2]
    assert trio.run(round_trip, 8, 2) == [3, 4, 5]


def test_an_idle_group_steps_its_replica_only_when_a_timeout_is_due(tmp_path: Path) -> None:
    """Ticks are owed, not stepped one by one, and the ticker wakes only due groups. A lone
    replica's timeouts have nothing to do, so it is stepped once TICKS_OWED_MAX ticks are
    owed, all of them in one step; a request pays the ticks owed since, first."""

    async def main() -> tuple[list[int], int]:
        host = _host(tmp_path / "group", persisted=False)
        counts: list[int] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            replica = host.replica
            assert replica is not None
            await trio.testing.wait_all_tasks_blocked()
            step = replica.step

            def counting_step(event: Event) -> list[Action]:
                counts.append(event.count if isinstance(event, Ticked) else 0)
                return step(event)

            replica.step = counting_step  # type: ignore[method-assign]
            due = replica.ticks_until_due()
            for ticks in (1, TICKS_OWED_MAX - 2, 1, 1, 7):
                host.ticker.advance(ticks)
                await trio.testing.wait_all_tasks_blocked()
            await _submit_many(host, 1)
            nursery.cancel_scope.cancel()
        await host.close()
        return counts, due

    counts, due = trio.run(main)
    assert due == TICKS_IDLE  # alone and in normal status: nobody to heartbeat or repair
    # Nothing for the first TICKS_OWED_MAX - 1 ticks, one step on the last, then the 8
    # ticks owed since, paid before the request (and its write) is stepped.
    assert counts[:2] == [TICKS_OWED_MAX, 8]
    assert 0 not in counts[:2] and set(counts[2:]) == {0}


def test_group_store_keeps_every_durable_field_across_a_restart(tmp_path: Path) -> None:
    """restart: the superblock gives back the replica's whole durable state, the mark of a
    damaged journal included (a replica that forgot it would vote on a cut log)."""
    store = GroupStore(tmp_path, no_sync=False, segment_size_bytes=1 << 20)
    store.recovered()
    damaged = DurableState(view=4, log_view=4, commit=3, checkpoint=0, log_damaged=True)
    store.write_superblock(damaged)
    store.close()
    store = GroupStore(tmp_path, no_sync=False, segment_size_bytes=1 << 20)
    assert store.recovered().durable == damaged
    store.close()


def test_a_view_change_before_a_new_groups_first_step_is_counted(tmp_path: Path) -> None:
    """A new group whose first event is a peer's StartViewChange (its primary died before
    any prepare reached this replica) counts the view change it then joins: the view it
    opened in is the first one seen, not the view of its first step."""

    async def main() -> tuple[int, int]:
        host = _host(tmp_path / "group", persisted=False, replica_count=3)
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            replica = host.replica
            assert replica is not None and replica.view == 0
            host.receive(StartViewChange(group=host.group_id, replica=1, view=1))
            await trio.testing.wait_all_tasks_blocked()
            assert replica.status is Status.VIEW_CHANGE
            nursery.cancel_scope.cancel()
        await host.close()
        return replica.view, host.counters.view_changes

    assert trio.run(main) == (1, 1)
