"""Hypothesis strategies for metadata commands drawn from small pools, so they collide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from hypothesis import strategies as st

from broker.state.credentials import PasswordHash
from broker.state.metadata import (
    ChangePassword,
    Compression,
    CreateConsumerGroup,
    CreatePartitions,
    CreatePersonalAccessToken,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerGroup,
    DeletePartitions,
    DeletePersonalAccessToken,
    DeleteStream,
    DeleteTopic,
    DeleteUser,
    Durability,
    EndSession,
    ExpireRevocations,
    ExpireTokens,
    Ident,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    MetadataCommand,
    PurgeStream,
    PurgeTopic,
    Register,
    RevocationDrained,
    TopicOptionsPatch,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserStatus,
)
from broker.state.permissions import (
    GlobalPermissions,
    Permissions,
    StreamPermissions,
    TopicPermissions,
)

STREAM_NAMES = ("a", "b", "c")
TOPIC_NAMES = ("t", "u")
GROUP_NAMES = ("g", "h")
USERNAMES = ("alice", "bob", "carol")
TOKEN_NAMES = ("ci-token", "deploy", "x")  # "x" is below Iggy's 3-byte minimum
TOKEN_HASHES = tuple(bytes([i]) * 32 for i in range(4))
TOKEN_EXPIRIES_US = (0, (1 << 64) - 1, 5, 50, 1_000_000)

_T = TypeVar("_T")


def _ident(names: tuple[str, ...], ids_max: int) -> st.SearchStrategy[Ident]:
    return st.one_of(st.sampled_from(names), st.integers(0, ids_max))


streams = _ident(STREAM_NAMES, 3)
topics = _ident(TOPIC_NAMES, 2)
groups = _ident(GROUP_NAMES, 2)
users = _ident(USERNAMES, 3)

passwords = st.builds(
    PasswordHash,
    salt=st.binary(min_size=1, max_size=4),
    hash=st.binary(min_size=32, max_size=32),
    n=st.just(2),
    r=st.just(1),
    p=st.just(1),
)

# Invalid values are drawn rarely, so most topics get created and the rest of the history
# has something to act on.
option_patches = st.builds(
    TopicOptionsPatch,
    message_expiry_us=st.sampled_from([None, None, None, None, 5, 0]),
    max_topic_size_bytes=st.sampled_from([None, None, None, None, 1 << 40, 1 << 20]),
    compression=st.none() | st.sampled_from(Compression),
    segment_size_bytes=st.sampled_from([None, None, None, None, 1 << 20, 1000]),
    durability=st.none() | st.sampled_from(Durability),
    consumer_offset_durability=st.none() | st.sampled_from(Durability),
    messages_required_to_save=st.sampled_from([None, None, None, 1, 0]),
    preallocate_segments=st.none() | st.booleans(),
)


def _by_topic_id(topics: list[TopicPermissions]) -> tuple[TopicPermissions, ...]:
    by_id = {topic.topic_id: topic for topic in topics}
    return tuple(by_id[key] for key in sorted(by_id))


def _by_stream_id(streams: list[StreamPermissions]) -> tuple[StreamPermissions, ...]:
    by_id = {stream.stream_id: stream for stream in streams}
    return tuple(by_id[key] for key in sorted(by_id))


topic_permissions = st.builds(
    TopicPermissions, st.integers(0, 2), st.booleans(), st.booleans(), st.booleans()
)
stream_permissions = st.builds(
    StreamPermissions,
    st.integers(0, 3),
    manage_stream=st.booleans(),
    read_stream=st.booleans(),
    manage_topics=st.booleans(),
    read_topics=st.booleans(),
    poll_messages=st.booleans(),
    send_messages=st.booleans(),
    topics=st.lists(topic_permissions, max_size=2).map(_by_topic_id),
)
permissions = st.none() | st.builds(
    Permissions,
    global_=st.builds(
        GlobalPermissions,
        manage_streams=st.booleans(),
        read_streams=st.booleans(),
        manage_topics=st.booleans(),
        send_messages=st.booleans(),
        manage_users=st.booleans(),
    ),
    streams=st.lists(stream_permissions, max_size=2).map(_by_stream_id),
)

commands: st.SearchStrategy[MetadataCommand] = st.one_of(
    st.builds(CreateStream, st.sampled_from(STREAM_NAMES)),
    st.builds(UpdateStream, streams, st.sampled_from(STREAM_NAMES)),
    st.builds(DeleteStream, streams),
    st.builds(PurgeStream, streams),
    st.builds(
        CreateTopic, streams, st.sampled_from(TOPIC_NAMES), st.integers(0, 4), option_patches
    ),
    st.builds(
        UpdateTopic,
        streams,
        topics,
        st.sampled_from(TOPIC_NAMES),
        st.builds(
            TopicOptionsPatch,
            message_expiry_us=st.none() | st.integers(1, 10),
            compression=st.none() | st.sampled_from(Compression),
        ),
    ),
    st.builds(DeleteTopic, streams, topics),
    st.builds(PurgeTopic, streams, topics),
    st.builds(CreatePartitions, streams, topics, st.integers(0, 3)),
    st.builds(DeletePartitions, streams, topics, st.integers(0, 3)),
    st.builds(
        CreateUser, st.sampled_from(USERNAMES), passwords, st.sampled_from(UserStatus), permissions
    ),
    st.builds(
        UpdateUser,
        users,
        st.none() | st.sampled_from(USERNAMES),
        st.none() | st.sampled_from(UserStatus),
    ),
    st.builds(DeleteUser, users),
    st.builds(UpdatePermissions, users, permissions),
    st.builds(ChangePassword, users, passwords),
    st.builds(CreateConsumerGroup, streams, topics, st.sampled_from(GROUP_NAMES)),
    st.builds(DeleteConsumerGroup, streams, topics, groups),
    # Joins and leaves are drawn more often: a leave only succeeds after a join by the
    # same session, and they exercise rebalancing.
    st.builds(JoinConsumerGroup, streams, topics, groups),
    st.builds(JoinConsumerGroup, st.just("a"), st.just("t"), st.just("g")),
    st.builds(LeaveConsumerGroup, streams, topics, groups),
    st.builds(LeaveConsumerGroup, st.just("a"), st.just("t"), st.just("g")),
    st.builds(Register, st.integers(1, 4), st.integers(0, 3)),
    st.builds(Logout),
    st.builds(EndSession, st.integers(0, 5)),  # the n-th live session, see Step
    st.builds(
        CreatePersonalAccessToken,
        st.sampled_from(TOKEN_NAMES),
        st.sampled_from(TOKEN_EXPIRIES_US),
        st.sampled_from(TOKEN_HASHES),
    ),
    st.builds(DeletePersonalAccessToken, st.sampled_from(TOKEN_NAMES)),
    st.builds(ExpireTokens),
    # Revocations: a report names a session that may or may not own the partition; an
    # expiry with a short timeout moves every revocation the history made.
    st.builds(
        RevocationDrained,
        st.integers(0, 1),
        st.integers(0, 1),
        st.integers(0, 1),
        st.integers(0, 3),
        st.integers(0, 40),
        st.integers(0, 1),
        st.integers(1, 2),
    ),
    st.builds(ExpireRevocations, st.sampled_from([0, 10, 1_000_000])),
)


@dataclass(frozen=True)
class Step:
    """One command and who sends it: the root session, the n-th live session, or nobody."""

    command: MetadataCommand
    actor: int | None  # None = system; -1 = root; k >= 0 = the k-th live session (wrapping)


# Mostly the root (whose commands succeed), sometimes another session, sometimes nobody.
steps = st.builds(Step, commands, st.sampled_from([None, -1, -1, -1, -1, 0, 1, 2, 3]))
