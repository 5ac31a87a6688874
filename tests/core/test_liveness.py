"""Revocation reports, their expiry, and heartbeat staleness, as pure bookkeeping."""

from __future__ import annotations

from collections.abc import Callable

from broker.core.connections import ConnectionContext
from broker.core.liveness import (
    SERVED_MARKS_MAX,
    Heartbeats,
    Revocations,
    ServedPolls,
    stale_members,
)
from broker.state.metadata import ExpireRevocations, RevocationDrained, RevocationInfo

PARTITION = (1, 2, 3, 4)


def _revocation(created_at_us: int = 1_000, drained: tuple[int, ...] = ()) -> RevocationInfo:
    return RevocationInfo(1, 2, 3, 4, 7, 8, created_at_us, drained)


def _stored(
    offset: int | None, *, known: bool = True
) -> Callable[[RevocationInfo], tuple[bool, int | None]]:
    return lambda revocation: (known, offset)


def test_a_node_that_served_the_owner_nothing_reports_the_revocation_drained() -> None:
    due = Revocations(1, 3, 30_000_000).due(
        [_revocation()], ServedPolls(), _stored(None), 2_000, is_primary=False
    )
    assert due == [RevocationDrained(1, 2, 3, 4, 7, 1, 3)]


def test_a_node_waits_until_the_group_stored_what_it_served_the_owner() -> None:
    served = ServedPolls()
    served.served(PARTITION, 7, 41)
    served.served(PARTITION, 9, 99)  # another member's polls do not hold this one
    revocations = Revocations(0, 1, 30_000_000)
    assert revocations.due([_revocation()], served, _stored(None), 2_000, is_primary=True) == []
    assert revocations.due([_revocation()], served, _stored(40), 2_000, is_primary=True) == []
    due = revocations.due([_revocation()], served, _stored(41), 2_000, is_primary=True)
    assert due == [RevocationDrained(1, 2, 3, 4, 7, 0, 1)]
    # One report in flight at a time; once answered, it may be made again if still due.
    assert revocations.due([_revocation()], served, _stored(41), 2_000, is_primary=True) == []
    revocations.finished(due[0])
    assert revocations.due([_revocation()], served, _stored(41), 2_000, is_primary=True) == due


def test_a_node_that_cannot_read_the_partition_yet_does_not_report() -> None:
    due = Revocations(0, 1, 30_000_000).due(
        [_revocation()], ServedPolls(), _stored(None, known=False), 2_000, is_primary=True
    )
    assert due == []


def test_a_node_already_counted_does_not_report_again() -> None:
    due = Revocations(2, 3, 30_000_000).due(
        [_revocation(drained=(0, 2))], ServedPolls(), _stored(None), 2_000, is_primary=False
    )
    assert due == []


def test_only_the_primary_expires_revocations_once_the_oldest_waited_the_timeout() -> None:
    served = ServedPolls()
    served.served(PARTITION, 7, 5)  # never committed: only the timeout moves it
    revocations = Revocations(0, 3, 1_000)
    old = [_revocation(created_at_us=1_000)]
    assert revocations.due(old, served, _stored(None), 1_999, is_primary=True) == []
    assert revocations.due(old, served, _stored(None), 2_000, is_primary=False) == []
    due = revocations.due(old, served, _stored(None), 2_000, is_primary=True)
    assert due == [ExpireRevocations(1_000)]
    assert revocations.due(old, served, _stored(None), 3_000, is_primary=True) == []
    revocations.finished(due[0])
    assert revocations.due(old, served, _stored(None), 3_000, is_primary=True) == due


def test_served_marks_keep_the_highest_offset_and_are_bounded() -> None:
    served = ServedPolls()
    served.served(PARTITION, 7, 10)
    served.served(PARTITION, 7, 4)
    assert served.last_served(PARTITION, 7) == 10
    for i in range(SERVED_MARKS_MAX + 5):
        served.served((0, 0, 0, i), 1, i)
    assert len(served) == SERVED_MARKS_MAX
    assert served.last_served(PARTITION, 7) is None  # the oldest went first


def test_a_silent_group_member_goes_stale_after_six_fifths_of_the_interval() -> None:
    heartbeats: Heartbeats[str] = Heartbeats(1_000_000)
    heartbeats.heard("member", 0)
    heartbeats.heard("idle", 0)
    heartbeats.heard("pinging", 0)
    members = {"member", "pinging"}

    def is_member(key: str) -> bool:
        return key in members

    heartbeats.heard("pinging", 1_100_000)
    assert heartbeats.stale(1_200_000, is_member) == []
    assert heartbeats.stale(1_200_001, is_member) == ["member"]
    # Evicted once; a connection that is no member stays to the idle timeout.
    assert heartbeats.stale(2_000_000, is_member) == []
    heartbeats.closed("idle")
    assert heartbeats.stale(2_300_001, is_member) == ["pinging"]
    assert len(heartbeats) == 0


def test_an_eviction_ends_the_bound_session_once_and_spares_attached_connections() -> None:
    """A stale member connection is evicted with the session it logged in to; the one
    that registered it forgets it (its close must not end it again), one that joined it
    leaves the registering connection's record alone, and a connection that only acts
    for a member session (attached) is no member itself."""
    registering = ConnectionContext("a", 1)
    registering.registered_session = registering.bound_session = 10
    joined = ConnectionContext("b", 2)
    joined.bound_session = 20
    joined.registered_session = 0
    attached = ConnectionContext("c", 3)
    attached.bound_session = 30  # not a member itself
    attached.attached_session = 10  # acts for a member session
    contexts = {"a": registering, "b": joined, "c": attached}
    heartbeats: Heartbeats[str] = Heartbeats(1_000_000)
    for key in contexts:
        heartbeats.heard(key, 0)
    groups = {10: ((1, 1, 1),), 20: ((1, 1, 1),)}

    evicted = stale_members(
        heartbeats, 1_200_001, contexts.__getitem__, lambda s: groups.get(s, ())
    )

    assert evicted == [("a", 10), ("b", 20)]
    assert registering.registered_session == 0
    assert joined.registered_session == 0 and joined.bound_session == 20
    assert attached.bound_session == 30
    assert stale_members(heartbeats, 1_300_000, contexts.__getitem__, lambda s: ()) == []
