"""Metadata determinism: two replicas agree, snapshots round-trip, assignment is balanced."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.state.metadata import (
    CreateConsumerGroup,
    CreateStream,
    CreateTopic,
    DeletePartitions,
    EndSession,
    ExpireRevocations,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    MetadataResult,
    RevocationDrained,
)
from broker.state.snapshot import SnapshotError, restore_state, snapshot_state
from tests.state.helpers import ROOT_CLIENT_ID, Driver, driver_with_root
from tests.state.strategies import Step, steps


def _run(driver: Driver, step: Step) -> MetadataResult:
    """Apply one step; the root logs in again whenever its session was ended."""
    if driver.state.session_of_client(ROOT_CLIENT_ID) is None:
        driver.root_session = driver.login(ROOT_CLIENT_ID, 0)
    live = driver.state.sessions()
    command = step.command
    if isinstance(command, EndSession):
        command = EndSession(live[command.session % len(live)].session)
    if step.actor is None:
        return driver.apply(command, None)
    if step.actor < 0:
        return driver.apply(command, driver.root_session)
    return driver.apply(command, live[step.actor % len(live)].session)


def _seeded() -> Driver:
    """A root session plus a few streams, topics, a group and a user for histories to hit."""
    d = driver_with_root()
    d.as_root(CreateStream("a"))
    d.as_root(CreateStream("b"))
    d.as_root(CreateTopic("a", "t", 2))
    d.as_root(CreateTopic("a", "u", 3))
    d.as_root(CreateTopic("b", "t", 1))
    d.as_root(CreateConsumerGroup("a", "t", "g"))
    d.as_root(CreateConsumerGroup("b", "t", "h"))
    d.add_user("alice", None)
    return d


def _restored(driver: Driver) -> Driver:
    clone = Driver(restore_state(snapshot_state(driver.state)), driver.op, driver.root_session)
    assert snapshot_state(clone.state) == snapshot_state(driver.state)
    return clone


@settings(max_examples=400, deadline=None)
@given(st.lists(steps, min_size=5, max_size=80))
def test_two_replicas_applying_the_same_commands_agree(history: list[Step]) -> None:
    first, second = _seeded(), _seeded()
    for step in history:
        assert _run(first, step) == _run(second, step)
    assert snapshot_state(first.state) == snapshot_state(second.state)


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=50), st.lists(steps, min_size=1, max_size=50))
def test_restored_snapshot_gives_the_same_state_and_replies(
    before: list[Step], after: list[Step]
) -> None:
    original = _seeded()
    for step in before:
        _run(original, step)
    restored = _restored(original)
    for step in after:
        assert _run(original, step) == _run(restored, step)
    assert snapshot_state(original.state) == snapshot_state(restored.state)
    assert original.state.streams() == restored.state.streams()
    assert original.state.users() == restored.state.users()
    assert original.state.sessions() == restored.state.sessions()
    assert original.state.partition_refs() == restored.state.partition_refs()


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.integers(0, 12),
    events=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=30),
)
def test_group_assignment_is_deterministic_balanced_and_complete(
    partitions: int, events: list[tuple[int, int]]
) -> None:
    replicas = [driver_with_root(), driver_with_root()]
    members: list[int] = []
    for d in replicas:
        d.as_root(CreateStream("s"))
        d.as_root(CreateTopic("s", "t", partitions))
        d.as_root(CreateConsumerGroup("s", "t", "g"))
        members = [d.login(0x100 + i, 0) for i in range(6)]
    for kind, who in events:
        for d in replicas:
            if kind == 0:
                d.apply(JoinConsumerGroup("s", "t", "g"), members[who])
            elif kind == 1:
                d.apply(LeaveConsumerGroup("s", "t", "g"), members[who])
            elif kind == 2:
                # One node of two drains the owner of the oldest revoking partition.
                for revocation in d.state.revocations()[:1]:
                    d.apply(
                        RevocationDrained(
                            0, 0, 0, revocation.partition_id, revocation.source, who % 2, 2
                        )
                    )
            else:
                d.apply(ExpireRevocations(10 * who))
        groups = [d.state.consumer_group("s", "t", "g") for d in replicas]
        assert groups[0] == groups[1]
        group = groups[0]
        dealt = sorted(p for m in group.members for p in m.partitions)
        # Every partition has exactly one owner at every step.
        assert dealt == (list(range(partitions)) if group.members else [])
    for d in replicas:
        d.apply(ExpireRevocations(0))
    group = replicas[0].state.consumer_group("s", "t", "g")
    assert group == replicas[1].state.consumer_group("s", "t", "g")
    if group.members:
        sizes = [len(m.partitions) for m in group.members]
        assert max(sizes) - min(sizes) <= 1  # balanced once the revocations completed
        assert all(m.revoking == () for m in group.members)


def test_snapshot_bytes_do_not_depend_on_insertion_history() -> None:
    # Same final state reached two ways: the encoding must not leak the path.
    first, second = driver_with_root(), driver_with_root()
    for d in (first, second):
        d.as_root(CreateStream("a"))
        d.as_root(CreateTopic("a", "t", 3))
    first.as_root(DeletePartitions("a", "t", 1))
    second.as_root(DeletePartitions("a", "t", 1))
    assert snapshot_state(first.state) == snapshot_state(second.state)
    decoded = cbor2.loads(snapshot_state(first.state))
    assert cbor2.dumps(decoded, canonical=True) == snapshot_state(first.state)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        cbor2.dumps({"version": 99}),
        cbor2.dumps([1, 2, 3]),
        cbor2.dumps({"version": 1}),
    ],
)
def test_restore_refuses_garbage(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        restore_state(data)


def test_restore_refuses_an_inconsistent_snapshot() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("a"))
    plain = cbor2.loads(snapshot_state(d.state))
    plain["streams"].append(plain["streams"][0])  # two streams with one id and one name
    with pytest.raises(SnapshotError):
        restore_state(cbor2.dumps(plain, canonical=True))
    plain = cbor2.loads(snapshot_state(d.state))
    plain["next_stream_id"] = 0  # an id at or above the counter would be reused
    with pytest.raises(SnapshotError):
        restore_state(cbor2.dumps(plain, canonical=True))
