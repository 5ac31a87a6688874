"""The metadata snapshot's bytes are a format: pinned, and read back to the same state."""

from __future__ import annotations

import hashlib

import cbor2

from broker.state.credentials import PasswordHash, token_hash
from broker.state.metadata import (
    ChangePassword,
    Compression,
    CreateConsumerGroup,
    CreatePartitions,
    CreatePersonalAccessToken,
    CreateStream,
    CreateTopic,
    DeletePartitions,
    DeleteStream,
    DeleteTopic,
    DeleteUser,
    Durability,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    PurgeTopic,
    RevocationDrained,
    TopicOptionsPatch,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserStatus,
)
from broker.state.snapshot import restore_state, snapshot_state
from sdk.wire import GlobalPermissions, Permissions, StreamPermissions, TopicPermissions
from tests.state.helpers import Driver, driver_with_root

# Computed from the history below by version 3 (stored group assignments): replicas and
# disks of that version wrote these bytes, and this version must write (and read) them
# unchanged. A deliberate format change bumps ``SNAPSHOT_VERSION`` and this pin.
PINNED_SIZE_BYTES = 1647
PINNED_SHA256 = "177c62454f4bb1ddc447337419edbbdf13dffc4a75328fe029ab8135f226d410"


def _history() -> Driver:
    """A state touching every table and field the snapshot writes: gaps in every id
    counter, a renamed stream, explicit and updated topic options, grown, shrunk and purged
    partitions, groups whose members joined and left, users with no, global, and per-stream
    and per-topic permissions, an inactive user, a changed password, sessions ended by
    logout and by re-registering, and tokens with and without an expiry."""
    d = driver_with_root()
    d.as_root(CreateStream("orders"))
    d.as_root(CreateStream("scratch"))
    d.as_root(CreateStream("events"))
    d.as_root(DeleteStream("scratch"))
    d.as_root(UpdateStream("events", "audit"))
    explicit = TopicOptionsPatch(
        message_expiry_us=60_000_000,
        compression=Compression.GZIP,
        durability=Durability.PERSISTED,
        preallocate_segments=True,
    )
    d.as_root(CreateTopic("orders", "eu", 3, explicit))
    d.as_root(CreateTopic("orders", "gone", 1))
    d.as_root(CreateTopic("orders", "us", 2))
    d.as_root(DeleteTopic("orders", "gone"))
    d.as_root(CreatePartitions("orders", "us", 3))
    d.as_root(DeletePartitions("orders", "us", 1))
    d.as_root(PurgeTopic("orders", "eu"))
    d.as_root(
        UpdateTopic("orders", "eu", "europe", TopicOptionsPatch(max_topic_size_bytes=1 << 31))
    )
    d.as_root(CreateTopic("audit", "log", 1))
    d.as_root(CreateConsumerGroup("orders", "us", "billing"))
    d.as_root(CreateConsumerGroup("orders", "us", "shipping"))
    scoped = Permissions(
        GlobalPermissions(read_streams=True),
        (
            StreamPermissions(
                0, poll_messages=True, topics=(TopicPermissions(2, send_messages=True),)
            ),
        ),
    )
    alice = d.add_user("alice", scoped)
    d.add_user("bob", scoped)
    d.add_user("dave", None)
    d.add_user("carol", None)
    d.as_root(DeleteUser("carol"))
    d.as_root(UpdateUser("bob", status=UserStatus.INACTIVE))
    d.as_root(UpdatePermissions("alice", Permissions(GlobalPermissions(manage_streams=True))))
    d.as_root(ChangePassword("alice", PasswordHash(salt=b"t" * 16, hash=b"k" * 32, n=4, r=2, p=1)))
    first, second, root_again = d.login(0xA1, alice), d.login(0xA2, alice), d.login(0xB0, 0)
    for session in (first, second, root_again):
        d.apply(JoinConsumerGroup("orders", "us", "billing"), session)
    d.apply(LeaveConsumerGroup("orders", "us", "billing"), second)
    d.apply(JoinConsumerGroup("orders", "us", "shipping"), first)
    d.apply(JoinConsumerGroup("orders", "us", "shipping"), d.root_session)
    # Partitions 2 and 3 of "us" revoke from first to root; one node drained partition 3.
    d.apply(RevocationDrained(0, 2, 1, 3, first, 1, 3))
    d.apply(CreatePersonalAccessToken("ci-token", 500, token_hash("token-a")), first)
    d.apply(CreatePersonalAccessToken("forever", 0, token_hash("token-b")), first)
    d.apply(CreatePersonalAccessToken("root-tok", 9_000, token_hash("token-c")), d.root_session)
    d.apply(Logout(), root_again)
    d.login(0xA2, alice)  # the same client registers again: its earlier session ends
    return d


def test_snapshot_of_a_pinned_history_gives_the_bytes_the_previous_version_wrote() -> None:
    data = snapshot_state(_history().state)
    assert (len(data), hashlib.sha256(data).hexdigest()) == (PINNED_SIZE_BYTES, PINNED_SHA256)


def test_restore_of_the_pinned_snapshot_gives_a_state_with_the_same_bytes_and_answers() -> None:
    original = _history()
    data = snapshot_state(original.state)
    restored = restore_state(data)
    assert snapshot_state(restored) == data
    assert restored.check_invariants() == []
    assert restored.streams() == original.state.streams()
    assert restored.users() == original.state.users()
    assert restored.sessions() == original.state.sessions()
    assert restored.token_expiry_min_us == original.state.token_expiry_min_us
    assert restored.partitions_total == original.state.partitions_total


def test_a_version_2_snapshot_is_read_with_the_assignment_it_implied() -> None:
    # Version 2 stored no assignment: partition p belonged to member p mod m.
    plain = cbor2.loads(snapshot_state(_history().state))
    plain["version"] = 2
    for stream in plain["streams"]:
        for topic in stream[4]:
            topic[7] = [[*group[:3], [m[:3] for m in group[3]]] for group in topic[7]]
    restored = restore_state(cbor2.dumps(plain, canonical=True))
    assert restored.check_invariants() == []
    shipping = restored.consumer_group("orders", "us", "shipping")
    assert [m.partitions for m in shipping.members] == [(0, 2), (1, 3)]
    assert [m.revoking for m in shipping.members] == [(), ()]
