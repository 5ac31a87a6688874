"""Metadata state machine: every command, its success and each of its rejections."""

from __future__ import annotations

import pytest

from broker.state import metadata
from broker.state.credentials import PasswordHash
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    EXPIRY_NEVER,
    SIZE_UNLIMITED,
    ApplyContext,
    ChangePassword,
    Compression,
    ConsumerGroupCreated,
    CreateConsumerGroup,
    CreatePartitions,
    CreateRootUser,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerGroup,
    DeletePartitions,
    DeleteStream,
    DeleteTopic,
    DeleteUser,
    Done,
    Durability,
    EndSession,
    ExpireRevocations,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    MetadataState,
    PurgeStream,
    PurgeTopic,
    Register,
    Rejected,
    RevocationDrained,
    StreamCreated,
    TopicCreated,
    TopicOptions,
    TopicOptionsPatch,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserCreated,
    UserStatus,
)
from broker.state.permissions import (
    GlobalPermissions,
    Permissions,
    StreamPermissions,
    root_permissions,
)
from tests.state.helpers import PASSWORD, Driver, driver_with_root

# -- streams -----------------------------------------------------------------------------


def test_create_stream_assigns_zero_based_ids_and_prepare_timestamp() -> None:
    d = driver_with_root()
    first = d.as_root(CreateStream("orders"))
    second = d.as_root(CreateStream("payments"))
    assert isinstance(first, StreamCreated) and isinstance(second, StreamCreated)
    assert (first.stream.id, second.stream.id) == (0, 1)
    assert first.stream.created_at_us == 1_000 + 10 * (d.op - 1)
    assert [s.name for s in d.state.streams()] == ["orders", "payments"]


def test_create_stream_with_taken_name_is_rejected() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("orders"))
    assert d.as_root(CreateStream("orders")) == Rejected(ErrorCode.STREAM_NAME_ALREADY_EXISTS)


@pytest.mark.parametrize("name", ["", "x" * 256, "é" * 128])
def test_create_stream_with_bad_name_is_rejected(name: str) -> None:
    d = driver_with_root()
    assert d.as_root(CreateStream(name)) == Rejected(ErrorCode.INVALID_STREAM_NAME)


def test_stream_ids_are_never_reused_after_delete() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("a"))
    assert d.as_root(DeleteStream("a")) == Done()
    again = d.as_root(CreateStream("a"))
    assert isinstance(again, StreamCreated) and again.stream.id == 1


def test_update_stream_renames_and_refuses_a_taken_name() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("a"))
    d.as_root(CreateStream("b"))
    assert d.as_root(UpdateStream(0, "a")) == Done()  # its own name is not "taken"
    assert d.as_root(UpdateStream(0, "b")) == Rejected(ErrorCode.STREAM_NAME_ALREADY_EXISTS)
    assert d.as_root(UpdateStream("a", "c")) == Done()
    assert d.state.stream("c").id == 0


@pytest.mark.parametrize(
    "command",
    [UpdateStream(7, "x"), DeleteStream(7), PurgeStream(7), DeleteStream("nope")],
)
def test_stream_commands_on_missing_stream_are_rejected(
    command: UpdateStream | DeleteStream | PurgeStream,
) -> None:
    d = driver_with_root()
    assert d.as_root(command) == Rejected(ErrorCode.STREAM_ID_NOT_FOUND)


def test_delete_stream_removes_its_topics_and_partitions() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 3))
    assert len(d.state.partition_refs()) == 3
    d.as_root(DeleteStream("s"))
    assert d.state.partition_refs() == ()
    assert d.state.streams() == ()


def test_purge_stream_bumps_purge_generation_of_every_partition() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t1", 2))
    d.as_root(CreateTopic("s", "t2", 1))
    assert d.as_root(PurgeStream("s")) == Done()
    assert [r.purge_generation for r in d.state.partition_refs()] == [1, 1, 1]


# -- topics ------------------------------------------------------------------------------


def test_create_topic_resolves_default_options_and_partitions() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    result = d.as_root(CreateTopic("s", "t", 3))
    assert isinstance(result, TopicCreated)
    topic = result.topic
    assert (topic.id, topic.stream_id, topic.partitions_count) == (0, 0, 3)
    assert topic.options == TopicOptions()
    assert topic.options.message_expiry_us == EXPIRY_NEVER
    assert topic.options.max_topic_size_bytes == SIZE_UNLIMITED
    assert [p.id for p in topic.partitions] == [0, 1, 2]
    assert all(p.created_op == d.op for p in topic.partitions)


def test_create_topic_keeps_given_options() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    patch = TopicOptionsPatch(
        message_expiry_us=60_000_000,
        max_topic_size_bytes=1 << 31,
        compression=Compression.GZIP,
        segment_size_bytes=1 << 20,
        durability=Durability.PERSISTED,
        consumer_offset_durability=Durability.PERSISTED,
    )
    result = d.as_root(CreateTopic("s", "t", 1, patch))
    assert isinstance(result, TopicCreated)
    assert result.topic.options == TopicOptions(
        message_expiry_us=60_000_000,
        max_topic_size_bytes=1 << 31,
        compression=Compression.GZIP,
        segment_size_bytes=1 << 20,
        durability=Durability.PERSISTED,
        consumer_offset_durability=Durability.PERSISTED,
    )
    assert result.topic.explicit_options == (
        "message_expiry_us",
        "max_topic_size_bytes",
        "compression",
        "segment_size_bytes",
        "durability",
        "consumer_offset_durability",
    )
    assert d.state.partition_refs()[0].durability == Durability.PERSISTED


@pytest.mark.parametrize(
    ("patch", "code"),
    [
        (TopicOptionsPatch(segment_size_bytes=1000), ErrorCode.INVALID_SEGMENT_SIZE),
        (TopicOptionsPatch(segment_size_bytes=(1 << 20) + 1), ErrorCode.INVALID_SEGMENT_SIZE),
        (TopicOptionsPatch(segment_size_bytes=1 << 31), ErrorCode.INVALID_SEGMENT_SIZE),
        (TopicOptionsPatch(max_topic_size_bytes=1 << 20), ErrorCode.INVALID_TOPIC_SIZE),
        (TopicOptionsPatch(message_expiry_us=0), ErrorCode.INVALID_OPTION_VALUE),
        (TopicOptionsPatch(max_topic_size_bytes=0), ErrorCode.INVALID_OPTION_VALUE),
        (TopicOptionsPatch(messages_required_to_save=0), ErrorCode.INVALID_OPTION_VALUE),
        (
            TopicOptionsPatch(size_of_messages_required_to_save_bytes=(1 << 30) + 1),
            ErrorCode.INVALID_OPTION_VALUE,
        ),
    ],
)
def test_create_topic_with_bad_options_is_rejected(
    patch: TopicOptionsPatch, code: ErrorCode
) -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    assert d.as_root(CreateTopic("s", "t", 1, patch)) == Rejected(code)
    assert d.state.topics("s") == ()


def test_create_topic_rejections() -> None:
    d = driver_with_root()
    assert d.as_root(CreateTopic(0, "t", 1)) == Rejected(ErrorCode.STREAM_ID_NOT_FOUND)
    d.as_root(CreateStream("s"))
    assert d.as_root(CreateTopic(0, "", 1)) == Rejected(ErrorCode.INVALID_TOPIC_NAME)
    assert d.as_root(CreateTopic(0, "t", -1)) == Rejected(ErrorCode.INVALID_PARTITIONS_COUNT)
    assert d.as_root(CreateTopic(0, "t", 1001)) == Rejected(ErrorCode.TOO_MANY_PARTITIONS)
    assert isinstance(d.as_root(CreateTopic(0, "t", 0)), TopicCreated)
    assert d.as_root(CreateTopic(0, "t", 1)) == Rejected(ErrorCode.TOPIC_NAME_ALREADY_EXISTS)


def test_topic_ids_are_per_stream_and_never_reused() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("a"))
    d.as_root(CreateStream("b"))
    d.as_root(CreateTopic("a", "t", 1))
    d.as_root(DeleteTopic("a", "t"))
    again = d.as_root(CreateTopic("a", "t", 1))
    other = d.as_root(CreateTopic("b", "t", 1))
    assert isinstance(again, TopicCreated) and again.topic.id == 1
    assert isinstance(other, TopicCreated) and other.topic.id == 0


def test_update_topic_patches_only_updatable_options() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 1, TopicOptionsPatch(durability=Durability.PERSISTED)))
    patch = TopicOptionsPatch(message_expiry_us=5, compression=Compression.GZIP)
    assert d.as_root(UpdateTopic("s", "t", "u", patch)) == Done()
    options = d.state.topic("s", "u").options
    assert options.message_expiry_us == 5
    assert options.compression == Compression.GZIP
    assert options.durability == Durability.PERSISTED
    assert options.max_topic_size_bytes == SIZE_UNLIMITED
    explicit = d.state.topic("s", "u").explicit_options
    assert explicit == ("message_expiry_us", "compression", "durability")


@pytest.mark.parametrize(
    "patch",
    [
        TopicOptionsPatch(segment_size_bytes=1 << 20),
        TopicOptionsPatch(preallocate_segments=True),
        TopicOptionsPatch(messages_required_to_save=5),
        TopicOptionsPatch(durability=Durability.REPLICATED),
        TopicOptionsPatch(consumer_offset_durability=Durability.REPLICATED),
    ],
)
def test_update_topic_refuses_create_only_options(patch: TopicOptionsPatch) -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 1))
    assert d.as_root(UpdateTopic("s", "t", "t", patch)) == Rejected(
        ErrorCode.UNSUPPORTED_OPTION_KEY
    )


def test_update_topic_rejections_leave_the_topic_unchanged() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 1))
    d.as_root(CreateTopic("s", "other", 1))
    before = d.state.topic("s", "t")
    assert d.as_root(UpdateTopic("s", "t", "other")) == Rejected(
        ErrorCode.TOPIC_NAME_ALREADY_EXISTS
    )
    small = TopicOptionsPatch(max_topic_size_bytes=10)
    assert d.as_root(UpdateTopic("s", "t", "x", small)) == Rejected(ErrorCode.INVALID_TOPIC_SIZE)
    assert d.as_root(UpdateTopic("s", 9, "x")) == Rejected(ErrorCode.TOPIC_ID_NOT_FOUND)
    assert d.state.topic("s", "t") == before


def test_delete_and_purge_topic() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 2))
    assert d.as_root(PurgeTopic("s", "t")) == Done()
    assert [r.purge_generation for r in d.state.partition_refs()] == [1, 1]
    assert d.as_root(DeleteTopic("s", "t")) == Done()
    assert d.as_root(DeleteTopic("s", "t")) == Rejected(ErrorCode.TOPIC_ID_NOT_FOUND)
    assert d.as_root(PurgeTopic("s", "t")) == Rejected(ErrorCode.TOPIC_ID_NOT_FOUND)


# -- partitions --------------------------------------------------------------------------


def test_create_and_delete_partitions_keep_ids_dense() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 2))
    assert d.as_root(CreatePartitions("s", "t", 3)) == Done()
    created_op = d.op
    partitions = d.state.topic("s", "t").partitions
    assert [p.id for p in partitions] == [0, 1, 2, 3, 4]
    assert partitions[4].created_op == created_op
    assert d.as_root(DeletePartitions("s", "t", 2)) == Done()
    assert [p.id for p in d.state.topic("s", "t").partitions] == [0, 1, 2]
    # A recreated id is a new partition: its created_op tells it from the old one.
    d.as_root(CreatePartitions("s", "t", 1))
    assert d.state.topic("s", "t").partitions[3].created_op == d.op


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (CreatePartitions("s", "t", 0), ErrorCode.INVALID_PARTITIONS_COUNT),
        (CreatePartitions("s", "t", 1001), ErrorCode.TOO_MANY_PARTITIONS),
        (DeletePartitions("s", "t", 0), ErrorCode.INVALID_PARTITIONS_COUNT),
        (DeletePartitions("s", "t", 3), ErrorCode.INVALID_PARTITIONS_COUNT),
        (CreatePartitions("s", "x", 1), ErrorCode.TOPIC_ID_NOT_FOUND),
        (DeletePartitions("x", "t", 1), ErrorCode.STREAM_ID_NOT_FOUND),
    ],
)
def test_partition_command_rejections(
    command: CreatePartitions | DeletePartitions, code: ErrorCode
) -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 2))
    assert d.as_root(command) == Rejected(code)
    assert d.state.topic("s", "t").partitions_count == 2


def test_partitions_total_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "PARTITIONS_TOTAL_MAX", 4)
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 3))
    assert d.as_root(CreateTopic("s", "u", 2)) == Rejected(ErrorCode.PARTITIONS_LIMIT_REACHED)
    assert d.as_root(CreatePartitions("s", "t", 1)) == Done()
    assert d.as_root(CreatePartitions("s", "t", 1)) == Rejected(ErrorCode.PARTITIONS_LIMIT_REACHED)
    d.as_root(DeleteTopic("s", "t"))
    assert isinstance(d.as_root(CreateTopic("s", "u", 4)), TopicCreated)


@pytest.mark.parametrize(
    ("constant", "command", "code"),
    [
        ("STREAMS_MAX", CreateStream("two"), ErrorCode.TOO_MANY_STREAMS),
        ("TOPICS_PER_STREAM_MAX", CreateTopic("one", "t2", 0), ErrorCode.TOO_MANY_TOPICS),
        (
            "PARTITIONS_PER_TOPIC_MAX",
            CreatePartitions("one", "t", 1),
            ErrorCode.TOO_MANY_PARTITIONS,
        ),
        ("USERS_MAX", CreateUser("second", PASSWORD), ErrorCode.USERS_LIMIT_REACHED),
    ],
)
def test_table_bounds_are_enforced(
    monkeypatch: pytest.MonkeyPatch,
    constant: str,
    command: CreateStream | CreateTopic | CreatePartitions | CreateUser,
    code: ErrorCode,
) -> None:
    monkeypatch.setattr(metadata, constant, 1)
    d = driver_with_root()
    d.as_root(CreateStream("one"))
    d.as_root(CreateTopic("one", "t", 1))
    assert d.as_root(command) == Rejected(code)


# -- users and permissions ---------------------------------------------------------------


def test_root_user_is_created_once_by_a_system_command() -> None:
    d = Driver()
    assert d.apply(CreateRootUser("iggy", PASSWORD), session=5) == Rejected(ErrorCode.UNAUTHORIZED)
    created = d.apply(CreateRootUser("iggy", PASSWORD))
    assert isinstance(created, UserCreated)
    assert created.user.permissions == root_permissions()
    assert d.state.root_user_id == 0
    assert d.apply(CreateRootUser("other", PASSWORD)) == Rejected(ErrorCode.USER_ALREADY_EXISTS)


def test_create_user_stores_the_hash_and_never_a_password() -> None:
    d = driver_with_root()
    result = d.as_root(CreateUser("alice", PASSWORD, UserStatus.INACTIVE))
    assert isinstance(result, UserCreated)
    user = d.state.user("alice")
    assert (user.id, user.status, user.password) == (1, UserStatus.INACTIVE, PASSWORD)
    assert user.created_at_us == 1_000 + 10 * d.op


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (CreateUser("iggy", PASSWORD), ErrorCode.USER_ALREADY_EXISTS),
        (CreateUser("ab", PASSWORD), ErrorCode.INVALID_USERNAME),
        (CreateUser("a" * 51, PASSWORD), ErrorCode.INVALID_USERNAME),
        (
            CreateUser("alice", PasswordHash(salt=b"", hash=b"h" * 32)),
            ErrorCode.INVALID_PASSWORD,
        ),
        (
            CreateUser("alice", PasswordHash(salt=b"s", hash=b"h" * 32, n=3)),
            ErrorCode.INVALID_PASSWORD,
        ),
    ],
)
def test_create_user_rejections(command: CreateUser, code: ErrorCode) -> None:
    d = driver_with_root()
    assert d.as_root(command) == Rejected(code)


def test_update_user_renames_and_changes_status() -> None:
    d = driver_with_root()
    d.add_user("alice", None)
    assert d.as_root(UpdateUser("alice", username="alicia", status=UserStatus.INACTIVE)) == Done()
    user = d.state.user(1)
    assert (user.username, user.status) == ("alicia", UserStatus.INACTIVE)
    assert d.as_root(UpdateUser(1, username="iggy")) == Rejected(ErrorCode.USER_ALREADY_EXISTS)
    assert d.as_root(UpdateUser(9, username="zed")) == Rejected(ErrorCode.RESOURCE_NOT_FOUND)
    assert d.as_root(UpdateUser(0, status=UserStatus.INACTIVE)) == Rejected(
        ErrorCode.INVALID_USER_STATUS
    )


def test_delete_user_ends_its_sessions_and_root_cannot_be_deleted() -> None:
    d = driver_with_root()
    d.add_user("alice", root_permissions())
    session = d.login(0xB, 1)
    assert d.as_root(DeleteUser(0)) == Rejected(ErrorCode.CANNOT_DELETE_USER)
    assert d.as_root(DeleteUser("alice")) == Done()
    assert d.state.session_of_client(0xB) is None
    assert d.apply(CreateStream("s"), session) == Rejected(ErrorCode.UNAUTHENTICATED)
    assert d.as_root(DeleteUser("alice")) == Rejected(ErrorCode.RESOURCE_NOT_FOUND)


def test_update_permissions_applies_and_root_cannot_change() -> None:
    d = driver_with_root()
    d.add_user("alice", None)
    session = d.login(0xB, 1)
    assert d.apply(CreateStream("s"), session) == Rejected(ErrorCode.UNAUTHORIZED)
    grant = Permissions(GlobalPermissions(manage_streams=True))
    assert d.as_root(UpdatePermissions("alice", grant)) == Done()
    assert isinstance(d.apply(CreateStream("s"), session), StreamCreated)
    assert d.as_root(UpdatePermissions(0, None)) == Rejected(ErrorCode.CANNOT_CHANGE_PERMISSIONS)


def test_change_password_own_allowed_others_need_manage_users() -> None:
    d = driver_with_root()
    d.add_user("alice", None)
    d.add_user("bob", None)
    session = d.login(0xB, 1)
    new = PasswordHash(salt=b"t" * 16, hash=b"n" * 32, n=2, r=1, p=1)
    assert d.apply(ChangePassword("alice", new), session) == Done()
    assert d.state.user("alice").password == new
    assert d.apply(ChangePassword("bob", new), session) == Rejected(ErrorCode.UNAUTHORIZED)
    assert d.as_root(ChangePassword("bob", new)) == Done()
    bad = PasswordHash(salt=b"t", hash=b"short")
    assert d.as_root(ChangePassword("bob", bad)) == Rejected(ErrorCode.INVALID_PASSWORD)


def test_user_management_needs_manage_users() -> None:
    d = driver_with_root()
    d.add_user("reader", Permissions(GlobalPermissions(read_users=True)))
    session = d.login(0xB, 1)
    for command in (
        CreateUser("alice", PASSWORD),
        UpdateUser(0, username="x"),
        DeleteUser(0),
        UpdatePermissions(0, None),
    ):
        assert d.apply(command, session) == Rejected(ErrorCode.UNAUTHORIZED)


def test_inactive_user_cannot_act_or_log_in() -> None:
    d = driver_with_root()
    d.add_user("alice", root_permissions())
    session = d.login(0xB, 1)
    d.as_root(UpdateUser("alice", status=UserStatus.INACTIVE))
    assert d.apply(CreateStream("s"), session) == Rejected(ErrorCode.USER_INACTIVE)
    assert d.apply(ChangePassword("alice", PASSWORD), session) == Rejected(ErrorCode.USER_INACTIVE)
    assert d.apply(Register(0xC, 1)) == Rejected(ErrorCode.USER_INACTIVE)


def test_stream_scoped_permissions_limit_a_user_to_its_stream() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("mine"))
    d.as_root(CreateStream("theirs"))
    scoped = Permissions(streams=(StreamPermissions(0, manage_stream=True),))
    d.add_user("alice", scoped)
    session = d.login(0xB, 1)
    assert isinstance(d.apply(CreateTopic("mine", "t", 1), session), TopicCreated)
    assert d.apply(CreateTopic("theirs", "t", 1), session) == Rejected(ErrorCode.UNAUTHORIZED)
    assert d.apply(DeleteStream("theirs"), session) == Rejected(ErrorCode.UNAUTHORIZED)
    assert d.apply(CreateStream("new"), session) == Rejected(ErrorCode.UNAUTHORIZED)
    assert d.apply(DeleteStream("mine"), session) == Done()


def test_authorize_matches_the_apply_time_check() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.add_user("alice", None)
    session = d.login(0xB, 1)
    assert d.state.authorize(CreateStream("x"), session) == ErrorCode.UNAUTHORIZED
    assert d.state.authorize(CreateStream("x"), d.root_session) is None
    assert d.state.authorize(DeleteStream("nope"), d.root_session) == (
        ErrorCode.STREAM_ID_NOT_FOUND
    )
    assert d.state.authorize(CreateStream("x"), 999) == ErrorCode.UNAUTHENTICATED
    assert d.state.authorize(CreateRootUser("r", PASSWORD), d.root_session) == (
        ErrorCode.UNAUTHORIZED
    )
    assert d.state.authorize(CreateRootUser("r", PASSWORD), None) is None
    assert d.state.authorize(Register(1, 1), None) is None
    assert d.state.authorize(ChangePassword("alice", PASSWORD), session) is None
    assert d.state.authorize(ChangePassword("iggy", PASSWORD), session) == (ErrorCode.UNAUTHORIZED)


# -- sessions ----------------------------------------------------------------------------


def test_register_session_is_the_op_and_binds_client_and_user() -> None:
    d = driver_with_root()
    session = d.login(0xB, 0)
    info = d.state.session(session)
    assert (info.session, info.client_id, info.user_id) == (d.op, 0xB, 0)
    assert info.number == 1  # the root's session took number 0
    assert d.state.session_of_client(0xB) == info


def test_register_again_with_the_same_client_ends_the_old_session() -> None:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", 2))
    d.as_root(CreateConsumerGroup("s", "t", "g"))
    old = d.login(0xB, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), old)
    new = d.login(0xB, 0)
    assert new != old
    assert [s.session for s in d.state.sessions()] == [d.root_session, new]
    assert d.state.consumer_group("s", "t", "g").members == ()


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (Register(0xB, 7), ErrorCode.INVALID_CREDENTIALS),
        (Register(0, 0), ErrorCode.INVALID_COMMAND),
        (Register(1 << 128, 0), ErrorCode.INVALID_COMMAND),
    ],
)
def test_register_rejections(command: Register, code: ErrorCode) -> None:
    d = driver_with_root()
    assert d.apply(command) == Rejected(code)


def test_logout_ends_the_session() -> None:
    d = driver_with_root()
    session = d.login(0xB, 0)
    assert d.apply(Logout(), session) == Done()
    assert d.state.session_of_client(0xB) is None
    assert d.apply(Logout(), session) == Rejected(ErrorCode.UNAUTHENTICATED)
    assert d.apply(Logout(), None) == Rejected(ErrorCode.UNAUTHENTICATED)


def test_end_session_is_a_system_command() -> None:
    d = driver_with_root()
    session = d.login(0xB, 0)
    assert d.as_root(EndSession(session)) == Rejected(ErrorCode.UNAUTHORIZED)
    assert d.apply(EndSession(session)) == Done()
    assert d.apply(EndSession(session)) == Rejected(ErrorCode.CLIENT_NOT_FOUND)


def test_sessions_are_bounded_and_the_oldest_is_evicted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "SESSIONS_MAX", 3)
    d = driver_with_root()
    second = d.login(0xB, 0)
    third = d.login(0xC, 0)
    fourth = d.login(0xD, 0)
    assert [s.session for s in d.state.sessions()] == [second, third, fourth]


def test_unauthenticated_commands_are_rejected() -> None:
    d = driver_with_root()
    assert d.apply(CreateStream("s"), None) == Rejected(ErrorCode.UNAUTHENTICATED)
    assert d.apply(CreateStream("s"), 12345) == Rejected(ErrorCode.UNAUTHENTICATED)


# -- consumer groups ---------------------------------------------------------------------


def _group_setup(partitions: int = 4) -> Driver:
    d = driver_with_root()
    d.as_root(CreateStream("s"))
    d.as_root(CreateTopic("s", "t", partitions))
    result = d.as_root(CreateConsumerGroup("s", "t", "g"))
    assert isinstance(result, ConsumerGroupCreated)
    assert (result.group.id, result.group.generation, result.group.members) == (0, 1, ())
    return d


def test_a_join_revokes_cooperatively_and_the_partition_moves_once_drained() -> None:
    d = _group_setup(5)
    a = d.login(0xA1, 0)
    b = d.login(0xB1, 0)
    assert d.apply(JoinConsumerGroup("s", "t", "g"), a) == Done()
    assert d.state.assignment("s", "t", "g", a) == (2, (0, 1, 2, 3, 4))
    assert d.apply(JoinConsumerGroup("s", "t", 0), b) == Done()
    group = d.state.consumer_group("s", "t", "g")
    assert group.generation == 3
    # A keeps 3 and 4 (it may still store their offsets) but no longer polls them; B
    # gets nothing until they are drained: no partition has two owners.
    assert [(m.session, m.partitions, m.revoking) for m in group.members] == [
        (a, (0, 1, 2, 3, 4), (3, 4)),
        (b, (), ()),
    ]
    assert d.state.assignment("s", "t", "g", a) == (3, (0, 1, 2))
    assert d.state.assignment("s", "t", "g", b) == (3, ())
    assert [(r.partition_id, r.source, r.target, r.drained) for r in d.state.revocations()] == [
        (3, a, b, ()),
        (4, a, b, ()),
    ]
    # Two nodes of three said they served A nothing uncommitted: not yet.
    d.apply(RevocationDrained(0, 0, 0, 3, a, 0, 3))
    d.apply(RevocationDrained(0, 0, 0, 3, a, 2, 3))
    d.apply(RevocationDrained(0, 0, 0, 3, a, 2, 3))  # a repeated report counts once
    assert d.state.assignment("s", "t", "g", b) == (3, ())
    d.apply(RevocationDrained(0, 0, 0, 3, a, 1, 3))
    assert d.state.assignment("s", "t", "g", b) == (4, (3,))
    assert d.state.assignment("s", "t", "g", a) == (4, (0, 1, 2))
    # A report for a session that does not own the partition (any more) changes nothing.
    assert d.apply(RevocationDrained(0, 0, 0, 4, b, 0, 1)) == Done()
    assert d.state.consumer_group("s", "t", "g").generation == 4
    assert d.state.memberships(a) == ((0, 0, 0),)


def test_revocations_expire_after_the_timeout_at_the_op_timestamp() -> None:
    d = _group_setup(2)
    a = d.login(0xA1, 0)
    b = d.login(0xB1, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), a)
    d.apply(JoinConsumerGroup("s", "t", "g"), b)
    (revocation,) = d.state.revocations()
    # The driver's timestamps advance by 10 per op.
    waited = 1_000 + 10 * (d.op + 1) - revocation.created_at_us
    d.apply(ExpireRevocations(waited + 1))
    assert d.state.assignment("s", "t", "g", b)[1] == ()
    d.apply(ExpireRevocations(waited))
    assert d.state.assignment("s", "t", "g", b)[1] == (1,)
    assert d.state.revocations() == ()


def test_a_revocation_is_cancelled_when_its_target_leaves() -> None:
    d = _group_setup(2)
    a = d.login(0xA1, 0)
    b = d.login(0xB1, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), a)
    d.apply(JoinConsumerGroup("s", "t", "g"), b)
    assert len(d.state.revocations()) == 1
    d.apply(LeaveConsumerGroup("s", "t", "g"), b)
    assert d.state.revocations() == ()
    assert d.state.assignment("s", "t", "g", a)[1] == (0, 1)


def test_system_revocation_commands_need_the_system() -> None:
    d = _group_setup(2)
    assert d.as_root(ExpireRevocations(0)) == Rejected(ErrorCode.UNAUTHORIZED)
    assert d.apply(RevocationDrained(0, 0, 0, 0, 1, 3, 3)) == Rejected(ErrorCode.INVALID_COMMAND)


def test_join_twice_is_a_no_op() -> None:
    d = _group_setup()
    a = d.login(0xA1, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), a)
    assert d.apply(JoinConsumerGroup("s", "t", "g"), a) == Done()
    group = d.state.consumer_group("s", "t", "g")
    assert (group.generation, len(group.members)) == (2, 1)


def test_leave_rebalances_and_leaving_twice_is_rejected() -> None:
    d = _group_setup(4)
    a = d.login(0xA1, 0)
    b = d.login(0xB1, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), a)
    d.apply(JoinConsumerGroup("s", "t", "g"), b)
    # A leaves while 2 and 3 are still revoking toward B: everything A owned has no owner
    # now, so it goes to B at once.
    assert d.apply(LeaveConsumerGroup("s", "t", "g"), a) == Done()
    assert d.state.assignment("s", "t", "g", b) == (4, (0, 1, 2, 3))
    assert d.apply(LeaveConsumerGroup("s", "t", "g"), a) == Rejected(
        ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND
    )


def test_partition_changes_bump_the_generation_and_reassign() -> None:
    d = _group_setup(2)
    a = d.login(0xA1, 0)
    b = d.login(0xB1, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), a)
    d.apply(JoinConsumerGroup("s", "t", "g"), b)
    d.apply(ExpireRevocations(0))  # B got partition 1
    assert d.state.assignment("s", "t", "g", b) == (4, (1,))
    # New partitions have no owner: each goes at once to the least loaded member.
    d.as_root(CreatePartitions("s", "t", 2))
    assert d.state.assignment("s", "t", "g", a) == (5, (0, 2))
    assert d.state.assignment("s", "t", "g", b) == (5, (1, 3))
    d.as_root(DeletePartitions("s", "t", 3))
    assert d.state.assignment("s", "t", "g", a) == (6, (0,))
    assert d.state.assignment("s", "t", "g", b) == (6, ())


def test_logout_and_eviction_remove_the_member() -> None:
    d = _group_setup()
    a = d.login(0xA1, 0)
    b = d.login(0xB1, 0)
    d.apply(JoinConsumerGroup("s", "t", "g"), a)
    d.apply(JoinConsumerGroup("s", "t", "g"), b)
    d.apply(Logout(), a)
    d.apply(EndSession(b))
    group = d.state.consumer_group("s", "t", "g")
    assert (group.members, group.generation) == ((), 5)


def test_consumer_group_rejections() -> None:
    d = _group_setup()
    a = d.login(0xA1, 0)
    assert d.as_root(CreateConsumerGroup("s", "t", "g")) == Rejected(
        ErrorCode.CONSUMER_GROUP_NAME_ALREADY_EXISTS
    )
    assert d.as_root(CreateConsumerGroup("s", "t", "")) == Rejected(
        ErrorCode.INVALID_CONSUMER_GROUP_NAME
    )
    assert d.apply(JoinConsumerGroup("s", "t", "nope"), a) == Rejected(
        ErrorCode.CONSUMER_GROUP_ID_NOT_FOUND
    )
    assert d.apply(JoinConsumerGroup("s", "x", "g"), a) == Rejected(ErrorCode.TOPIC_ID_NOT_FOUND)
    assert d.as_root(DeleteConsumerGroup("s", "t", 5)) == Rejected(
        ErrorCode.CONSUMER_GROUP_ID_NOT_FOUND
    )
    with pytest.raises(StateError) as raised:
        d.state.assignment("s", "t", "g", a)
    assert raised.value.code == ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND


def test_consumer_group_ids_are_never_reused() -> None:
    d = _group_setup()
    assert d.as_root(DeleteConsumerGroup("s", "t", "g")) == Done()
    again = d.as_root(CreateConsumerGroup("s", "t", "g"))
    assert isinstance(again, ConsumerGroupCreated) and again.group.id == 1
    assert [g.id for g in d.state.consumer_groups("s", "t")] == [1]


def test_consumer_groups_need_read_topic() -> None:
    d = _group_setup()
    d.add_user("alice", Permissions(GlobalPermissions(send_messages=True)))
    session = d.login(0xB, 1)
    assert d.apply(JoinConsumerGroup("s", "t", "g"), session) == Rejected(ErrorCode.UNAUTHORIZED)
    d.as_root(UpdatePermissions("alice", Permissions(GlobalPermissions(read_topics=True))))
    assert d.apply(JoinConsumerGroup("s", "t", "g"), session) == Done()


def test_deleting_the_topic_deletes_its_groups() -> None:
    d = _group_setup()
    d.as_root(DeleteTopic("s", "t"))
    d.as_root(CreateTopic("s", "t", 1))
    assert d.state.consumer_groups("s", "t") == ()


# -- apply contract ----------------------------------------------------------------------


def test_apply_refuses_op_zero() -> None:
    with pytest.raises(AssertionError):
        MetadataState().apply(CreateStream("s"), ApplyContext(0, 0, None))
