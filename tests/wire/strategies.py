"""Hypothesis strategies for every value the wire codec encodes."""

from __future__ import annotations

from hypothesis import strategies as st

from sdk.wire import (
    COMMANDS,
    AckLevel,
    Balanced,
    CacheMetric,
    ChangePassword,
    ClientConsumerGroup,
    ClientInfo,
    ClientInfoDetails,
    ClientRef,
    Clients,
    ClusterMetadata,
    ClusterNode,
    ClusterNodeRole,
    ClusterNodeStatus,
    CommandCode,
    Consumer,
    ConsumerGroupAssignment,
    ConsumerGroupDetails,
    ConsumerGroupInfo,
    ConsumerGroupMember,
    ConsumerGroups,
    ConsumerKind,
    ConsumerOffsetInfo,
    ConsumerSessionAttachment,
    CreateConsumerGroup,
    CreatePersonalAccessToken,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerOffset,
    DeleteSegments,
    DescribeOptions,
    Empty,
    GetConsumerOffset,
    GetSnapshot,
    GlobalPermissions,
    GroupRef,
    HeaderKind,
    Identifier,
    LoginRegister,
    LoginRegisterReply,
    LoginRegisterWithPat,
    MessagesKey,
    OptionDescriptor,
    OptionEntry,
    OptionsCatalog,
    OutgoingMessage,
    PartitionId,
    PartitionInfo,
    Partitioning,
    PartitionsChange,
    Permissions,
    PersonalAccessTokenInfo,
    PersonalAccessTokenRef,
    PersonalAccessTokens,
    PollingKind,
    PollingStrategy,
    PollMessages,
    PollMessagesReply,
    PollRoute,
    RawPersonalAccessToken,
    ReplyPayload,
    RequestPayload,
    SendConfirmation,
    SendMessages,
    SendMessagesReply,
    SnapshotArchive,
    Stats,
    StoreConsumerOffset,
    StreamDetails,
    StreamInfo,
    StreamPermissions,
    StreamRef,
    Streams,
    TopicDetails,
    TopicInfo,
    TopicPermissions,
    TopicRef,
    Topics,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserDetails,
    UserHeader,
    UserInfo,
    UserRef,
    Users,
    UserStatus,
    build_batch,
    build_send_messages,
    encode_user_headers,
    stamp_batch,
    verify_batch,
)

U8 = st.integers(0, 0xFF)
U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
U64 = st.integers(0, 0xFFFF_FFFF_FFFF_FFFF)
U128 = st.integers(0, (1 << 128) - 1)
F32 = st.floats(width=32, allow_nan=False)

names = st.text(min_size=1, max_size=24).filter(lambda text: len(text.encode("utf-8")) <= 255)
long_strings = st.text(max_size=40)
identifiers = st.one_of(U32.map(Identifier.numeric), names.map(Identifier.named))
consumers = st.builds(Consumer, st.sampled_from(ConsumerKind), identifiers)
partition_flags = st.none() | U32
partitionings: st.SearchStrategy[Partitioning] = st.one_of(
    st.just(Balanced()),
    st.builds(PartitionId, U32),
    st.binary(min_size=1, max_size=255).map(MessagesKey),
)
polling_strategies = st.builds(PollingStrategy, st.sampled_from(PollingKind), U64)

_FIXED = {
    HeaderKind.BOOL: 1,
    HeaderKind.INT8: 1,
    HeaderKind.UINT8: 1,
    HeaderKind.INT16: 2,
    HeaderKind.UINT16: 2,
    HeaderKind.INT32: 4,
    HeaderKind.UINT32: 4,
    HeaderKind.FLOAT32: 4,
    HeaderKind.INT64: 8,
    HeaderKind.UINT64: 8,
    HeaderKind.FLOAT64: 8,
    HeaderKind.INT128: 16,
    HeaderKind.UINT128: 16,
}


@st.composite
def typed_fields(draw: st.DrawFn) -> tuple[HeaderKind, bytes]:
    """A header kind and raw bytes of a size that kind allows."""
    kind = draw(st.sampled_from(HeaderKind))
    size = _FIXED.get(kind)
    if size is None:
        return kind, draw(st.binary(min_size=1, max_size=40))
    if kind is HeaderKind.BOOL:
        return kind, draw(st.sampled_from([b"\x00", b"\x01"]))
    return kind, draw(st.binary(min_size=size, max_size=size))


@st.composite
def user_headers(draw: st.DrawFn) -> UserHeader:
    """One user header pair with any kinds."""
    key_kind, key = draw(typed_fields())
    value_kind, value = draw(typed_fields())
    return UserHeader(key_kind, key, value_kind, value)


@st.composite
def option_lists(draw: st.DrawFn) -> tuple[OptionEntry, ...]:
    """An options block: unique string keys, typed values."""
    keys = draw(st.lists(names, max_size=4, unique=True))
    return tuple(OptionEntry(key, *draw(typed_fields())) for key in keys)


# --- requests ------------------------------------------------------------------------

logins = st.builds(
    LoginRegister,
    username=names,
    password=st.text(max_size=30).filter(lambda text: len(text.encode("utf-8")) <= 255),
    sdk_name=names,
    sdk_version=names,
    protocol_version=U32,
    context=long_strings,
)
stream_refs = st.builds(StreamRef, identifiers)
topic_refs = st.builds(TopicRef, identifiers, identifiers)
group_refs = st.builds(GroupRef, identifiers, identifiers, identifiers)
create_streams = st.builds(CreateStream, names, option_lists())
update_streams = st.builds(UpdateStream, identifiers, names, option_lists())
create_topics = st.builds(CreateTopic, identifiers, U32, names, option_lists())
update_topics = st.builds(UpdateTopic, identifiers, identifiers, names, option_lists())
partition_changes = st.builds(PartitionsChange, identifiers, identifiers, U32)
delete_segments = st.builds(DeleteSegments, identifiers, identifiers, U32, U32)
polls = st.builds(
    PollMessages,
    consumers,
    identifiers,
    identifiers,
    partition_flags,
    polling_strategies,
    U32,
    st.booleans(),
)
get_offsets = st.builds(GetConsumerOffset, consumers, identifiers, identifiers, partition_flags)
store_offsets = st.builds(
    StoreConsumerOffset,
    consumers,
    identifiers,
    identifiers,
    partition_flags,
    U64,
    st.sampled_from(AckLevel),
)
delete_offsets = st.builds(
    DeleteConsumerOffset,
    consumers,
    identifiers,
    identifiers,
    partition_flags,
    st.sampled_from(AckLevel),
)
create_groups = st.builds(CreateConsumerGroup, identifiers, identifiers, names)


@st.composite
def outgoing_messages(draw: st.DrawFn, max_size: int = 6) -> list[OutgoingMessage]:
    """Messages for one batch: ids, payloads, encoded user headers, close timestamps."""
    base = draw(st.integers(0, 1 << 60))
    count = draw(st.integers(1, max_size))
    messages = []
    for _ in range(count):
        headers = draw(st.lists(user_headers(), max_size=2))
        messages.append(
            OutgoingMessage(
                draw(U128),
                draw(st.binary(max_size=64)),
                encode_user_headers(headers),
                base + draw(st.integers(0, 0xFFFF_FFFF)),
            )
        )
    return messages


@st.composite
def sends(draw: st.DrawFn) -> SendMessages:
    """A send request around a freshly built batch."""
    messages = draw(outgoing_messages())
    stream_id, topic_id, partitioning = draw(identifiers), draw(identifiers), draw(partitionings)
    body = build_send_messages(stream_id, topic_id, partitioning, messages)
    return SendMessages.decode(body)


# --- replies -------------------------------------------------------------------------

login_replies = st.builds(LoginRegisterReply, U32, U64, U32, names)
client_infos = st.builds(
    ClientInfoDetails,
    U32,
    U32,
    U8,
    long_strings,
    st.lists(st.builds(ClientConsumerGroup, U32, U32, U32), max_size=3).map(tuple),
)
options_catalogs = st.lists(
    st.builds(OptionDescriptor, names, U8, st.binary(max_size=16), long_strings), max_size=4
).map(lambda entries: OptionsCatalog(tuple(entries)))
clients_lists = st.lists(st.builds(ClientInfo, U32, U32, U8, long_strings, U32), max_size=4).map(
    lambda clients: Clients(tuple(clients))
)
cluster_metadata = st.builds(
    ClusterMetadata,
    long_strings,
    st.lists(
        st.builds(
            ClusterNode,
            long_strings,
            long_strings,
            U16,
            U16,
            U16,
            U16,
            st.sampled_from(ClusterNodeRole),
            st.sampled_from(ClusterNodeStatus),
        ),
        max_size=3,
    ).map(tuple),
)
stats = st.builds(
    Stats,
    U32,
    F32,
    F32,
    *[U64] * 8,
    U32,
    U32,
    U32,
    U32,
    U64,
    U32,
    U32,
    *[long_strings] * 5,
    st.none() | st.integers(1, 0xFFFF_FFFF),
    st.lists(st.builds(CacheMetric, U32, U32, U32, U64, U64, F32), max_size=3).map(tuple),
    U32,
    U64,
    U64,
)
partition_infos = st.builds(PartitionInfo, U32, U64, U32, U64, U64, U64)


def _topic_info(partitions_count: st.SearchStrategy[int] = U32) -> st.SearchStrategy[TopicInfo]:
    return st.builds(
        TopicInfo,
        U32,
        U64,
        partitions_count,
        U64,
        U8,
        U64,
        U64,
        U64,
        names,
        option_lists(),
        option_lists(),
    )


def _stream_info(topics_count: st.SearchStrategy[int] = U32) -> st.SearchStrategy[StreamInfo]:
    return st.builds(StreamInfo, U32, U64, topics_count, U64, U64, names, option_lists())


@st.composite
def stream_details(draw: st.DrawFn) -> StreamDetails:
    """A stream with a matching number of topics."""
    topics = draw(st.lists(_topic_info(), max_size=2))
    return StreamDetails(draw(_stream_info(st.just(len(topics)))), tuple(topics))


@st.composite
def topic_details(draw: st.DrawFn) -> TopicDetails:
    """A topic with a matching number of partitions."""
    partitions = draw(st.lists(partition_infos, max_size=3))
    return TopicDetails(draw(_topic_info(st.just(len(partitions)))), tuple(partitions))


streams_lists = st.lists(_stream_info(), max_size=3).map(lambda items: Streams(tuple(items)))
topics_lists = st.lists(_topic_info(), max_size=2).map(lambda items: Topics(tuple(items)))
group_infos = st.builds(ConsumerGroupInfo, U32, U32, U32, names)
groups_lists = st.lists(group_infos, max_size=3).map(lambda items: ConsumerGroups(tuple(items)))


@st.composite
def group_details(draw: st.DrawFn) -> ConsumerGroupDetails:
    """A group with a matching number of members."""
    members = draw(
        st.lists(
            st.builds(ConsumerGroupMember, U32, st.lists(U32, max_size=3).map(tuple)), max_size=3
        )
    )
    group = draw(st.builds(ConsumerGroupInfo, U32, U32, st.just(len(members)), names))
    return ConsumerGroupDetails(group, tuple(members))


assignments = st.builds(ConsumerGroupAssignment, U64, st.lists(U32, max_size=4).map(tuple))
offset_infos = st.builds(ConsumerOffsetInfo, U32, U64, U64)
send_replies = st.lists(st.builds(SendConfirmation, U32, U32, U32, U64), max_size=3).map(
    lambda items: SendMessagesReply(tuple(items))
)


@st.composite
def stamped_batches(draw: st.DrawFn) -> bytearray:
    """A batch as a server stores it: built, verified and stamped."""
    batch = build_batch(draw(outgoing_messages()))
    stamp_batch(
        batch,
        verify_batch(batch),
        partition_id=draw(U32),
        base_offset=draw(st.integers(0, 1 << 62)),
        base_timestamp=draw(U64),
    )
    return batch


@st.composite
def poll_replies(draw: st.DrawFn) -> PollMessagesReply:
    """A poll reply of zero or more stored records."""
    records = draw(st.lists(stamped_batches(), max_size=3))
    count = sum(int.from_bytes(record[48:52], "little") for record in records)
    return PollMessagesReply(
        draw(U32), draw(U64), count, tuple(bytes(record) for record in records)
    )


cluster_nodes = st.builds(
    ClusterNode,
    long_strings,
    long_strings,
    U16,
    U16,
    U16,
    U16,
    st.sampled_from(ClusterNodeRole),
    st.sampled_from(ClusterNodeStatus),
)
attachments = st.builds(ConsumerSessionAttachment, U128, U64, U64)
poll_routes = st.builds(PollRoute, attachments, cluster_nodes)

# Users and permissions.

passwords = st.text(max_size=24).filter(lambda text: len(text.encode("utf-8")) <= 255)
user_statuses = st.sampled_from(UserStatus)
_FLAG = st.booleans()


@st.composite
def permission_sets(draw: st.DrawFn) -> Permissions:
    def unique_ids(max_size: int) -> list[int]:
        return draw(st.lists(U32, max_size=max_size, unique=True))

    streams = []
    for stream_id in unique_ids(3):
        topics = tuple(
            TopicPermissions(topic_id, *draw(st.tuples(*[_FLAG] * 4))) for topic_id in unique_ids(3)
        )
        flags = draw(st.tuples(*[_FLAG] * 6))
        names = ("manage_stream", "read_stream", "manage_topics", "read_topics")
        values = dict(zip((*names, "poll_messages", "send_messages"), flags, strict=True))
        streams.append(StreamPermissions(stream_id, topics=topics, **values))
    return Permissions(GlobalPermissions(*draw(st.tuples(*[_FLAG] * 10))), tuple(streams))


user_refs = st.builds(UserRef, identifiers)
create_users = st.builds(
    CreateUser, names, passwords, user_statuses, st.none() | permission_sets(), option_lists()
)
update_users = st.builds(
    UpdateUser, identifiers, st.none() | names, st.none() | user_statuses, option_lists()
)
update_permissions = st.builds(UpdatePermissions, identifiers, st.none() | permission_sets())
change_passwords = st.builds(ChangePassword, identifiers, passwords, passwords)
user_infos = st.builds(UserInfo, U32, U64, user_statuses, names, option_lists())
user_details = st.builds(UserDetails, user_infos, st.none() | permission_sets())
users_lists = st.lists(user_infos, max_size=3).map(tuple).map(Users)
token_logins = st.builds(
    LoginRegisterWithPat,
    token=st.text(max_size=30).filter(lambda text: len(text.encode("utf-8")) <= 255),
    sdk_name=names,
    sdk_version=names,
    protocol_version=U32,
    context=st.text(max_size=16),
)
create_tokens = st.builds(CreatePersonalAccessToken, names, U64)
token_refs = st.builds(PersonalAccessTokenRef, names)
token_lists = (
    st.lists(st.builds(PersonalAccessTokenInfo, names, U64), max_size=3)
    .map(tuple)
    .map(PersonalAccessTokens)
)
raw_tokens = st.builds(RawPersonalAccessToken, names)

REQUESTS: dict[CommandCode, st.SearchStrategy[RequestPayload]] = {
    CommandCode.PING: st.just(Empty()),
    CommandCode.GET_STATS: st.just(Empty()),
    CommandCode.GET_CLUSTER_METADATA: st.just(Empty()),
    CommandCode.GET_ME: st.just(Empty()),
    CommandCode.GET_CLIENT: st.builds(ClientRef, U32),
    CommandCode.DESCRIBE_OPTIONS: st.builds(DescribeOptions, U8),
    CommandCode.GET_SNAPSHOT_FILE: st.builds(GetSnapshot, U8, st.lists(U8, max_size=8).map(tuple)),
    CommandCode.GET_CLIENTS: st.just(Empty()),
    CommandCode.LOGOUT_USER: st.just(Empty()),
    CommandCode.LOGIN_REGISTER: logins,
    CommandCode.POLL_MESSAGES: polls,
    CommandCode.SEND_MESSAGES: sends(),
    CommandCode.GET_CONSUMER_OFFSET: get_offsets,
    CommandCode.STORE_CONSUMER_OFFSET: store_offsets,
    CommandCode.DELETE_CONSUMER_OFFSET: delete_offsets,
    CommandCode.GET_STREAM: stream_refs,
    CommandCode.GET_STREAMS: st.just(Empty()),
    CommandCode.CREATE_STREAM: create_streams,
    CommandCode.DELETE_STREAM: stream_refs,
    CommandCode.UPDATE_STREAM: update_streams,
    CommandCode.PURGE_STREAM: stream_refs,
    CommandCode.GET_TOPIC: topic_refs,
    CommandCode.GET_TOPICS: stream_refs,
    CommandCode.CREATE_TOPIC: create_topics,
    CommandCode.DELETE_TOPIC: topic_refs,
    CommandCode.UPDATE_TOPIC: update_topics,
    CommandCode.PURGE_TOPIC: topic_refs,
    CommandCode.CREATE_PARTITIONS: partition_changes,
    CommandCode.DELETE_PARTITIONS: partition_changes,
    CommandCode.DELETE_SEGMENTS: delete_segments,
    CommandCode.GET_CONSUMER_GROUP: group_refs,
    CommandCode.GET_CONSUMER_GROUPS: topic_refs,
    CommandCode.CREATE_CONSUMER_GROUP: create_groups,
    CommandCode.DELETE_CONSUMER_GROUP: group_refs,
    CommandCode.JOIN_CONSUMER_GROUP: group_refs,
    CommandCode.LEAVE_CONSUMER_GROUP: group_refs,
    CommandCode.SYNC_CONSUMER_GROUP: group_refs,
    CommandCode.ATTACH_CONSUMER_SESSION: attachments,
    CommandCode.POLL_ROUTING: polls,
    CommandCode.POLL_PRIMARY: polls,
    CommandCode.CONSUMER_OFFSET_ROUTING: get_offsets,
    CommandCode.GET_USER: user_refs,
    CommandCode.GET_USERS: st.just(Empty()),
    CommandCode.CREATE_USER: create_users,
    CommandCode.DELETE_USER: user_refs,
    CommandCode.UPDATE_USER: update_users,
    CommandCode.UPDATE_PERMISSIONS: update_permissions,
    CommandCode.CHANGE_PASSWORD: change_passwords,
    CommandCode.LOGIN_REGISTER_WITH_PAT: token_logins,
    CommandCode.GET_PERSONAL_ACCESS_TOKENS: st.just(Empty()),
    CommandCode.CREATE_PERSONAL_ACCESS_TOKEN: create_tokens,
    CommandCode.DELETE_PERSONAL_ACCESS_TOKEN: token_refs,
}

REPLIES: dict[CommandCode, st.SearchStrategy[ReplyPayload]] = {
    CommandCode.PING: st.just(Empty()),
    CommandCode.GET_STATS: stats,
    CommandCode.GET_CLUSTER_METADATA: cluster_metadata,
    CommandCode.GET_ME: client_infos,
    CommandCode.GET_CLIENT: client_infos,
    CommandCode.GET_CLIENTS: clients_lists,
    CommandCode.DESCRIBE_OPTIONS: options_catalogs,
    CommandCode.GET_SNAPSHOT_FILE: st.builds(SnapshotArchive, st.binary(max_size=64)),
    CommandCode.LOGOUT_USER: st.just(Empty()),
    CommandCode.LOGIN_REGISTER: login_replies,
    CommandCode.POLL_MESSAGES: poll_replies(),
    CommandCode.SEND_MESSAGES: send_replies,
    CommandCode.GET_CONSUMER_OFFSET: offset_infos,
    CommandCode.STORE_CONSUMER_OFFSET: st.just(Empty()),
    CommandCode.DELETE_CONSUMER_OFFSET: st.just(Empty()),
    CommandCode.GET_STREAM: stream_details(),
    CommandCode.GET_STREAMS: streams_lists,
    CommandCode.CREATE_STREAM: stream_details(),
    CommandCode.DELETE_STREAM: st.just(Empty()),
    CommandCode.UPDATE_STREAM: st.just(Empty()),
    CommandCode.PURGE_STREAM: st.just(Empty()),
    CommandCode.GET_TOPIC: topic_details(),
    CommandCode.GET_TOPICS: topics_lists,
    CommandCode.CREATE_TOPIC: topic_details(),
    CommandCode.DELETE_TOPIC: st.just(Empty()),
    CommandCode.UPDATE_TOPIC: st.just(Empty()),
    CommandCode.PURGE_TOPIC: st.just(Empty()),
    CommandCode.CREATE_PARTITIONS: st.just(Empty()),
    CommandCode.DELETE_PARTITIONS: st.just(Empty()),
    CommandCode.DELETE_SEGMENTS: st.just(Empty()),
    CommandCode.GET_CONSUMER_GROUP: group_details(),
    CommandCode.GET_CONSUMER_GROUPS: groups_lists,
    CommandCode.CREATE_CONSUMER_GROUP: group_details(),
    CommandCode.DELETE_CONSUMER_GROUP: st.just(Empty()),
    CommandCode.JOIN_CONSUMER_GROUP: st.just(Empty()),
    CommandCode.LEAVE_CONSUMER_GROUP: st.just(Empty()),
    CommandCode.SYNC_CONSUMER_GROUP: assignments,
    CommandCode.ATTACH_CONSUMER_SESSION: st.just(Empty()),
    CommandCode.POLL_ROUTING: poll_routes,
    CommandCode.POLL_PRIMARY: poll_replies(),
    CommandCode.CONSUMER_OFFSET_ROUTING: poll_routes,
    CommandCode.GET_USER: user_details,
    CommandCode.GET_USERS: users_lists,
    CommandCode.CREATE_USER: user_details,
    CommandCode.DELETE_USER: st.just(Empty()),
    CommandCode.UPDATE_USER: st.just(Empty()),
    CommandCode.UPDATE_PERMISSIONS: st.just(Empty()),
    CommandCode.CHANGE_PASSWORD: st.just(Empty()),
    CommandCode.LOGIN_REGISTER_WITH_PAT: login_replies,
    CommandCode.GET_PERSONAL_ACCESS_TOKENS: token_lists,
    CommandCode.CREATE_PERSONAL_ACCESS_TOKEN: raw_tokens,
    CommandCode.DELETE_PERSONAL_ACCESS_TOKEN: st.just(Empty()),
}

assert set(REQUESTS) == set(COMMANDS) == set(REPLIES), "a command without strategies"
