"""Turn the plain fields of `manifest.json` into `sdk.wire` values.

The manifest describes every captured request (as `tests.golden.layouts` read it) and every
reply (as `tests.golden.replies` built it) in JSON. These converters build the matching
typed values of our codec, so that

- the recorder can answer the SDK with replies made by our encoder (cross-checked against
  the hand-built bytes), and
- the golden test can compare our decoder's output with the manifest and re-encode.

Nothing here reads the frame bytes: values come from the manifest only.
"""

from __future__ import annotations

from typing import Any

from sdk.wire import (
    AckLevel,
    Balanced,
    CacheMetric,
    ChangePassword,
    ClientConsumerGroup,
    ClientInfoDetails,
    ClusterMetadata,
    ClusterNode,
    ClusterNodeRole,
    ClusterNodeStatus,
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
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerOffset,
    Empty,
    GetConsumerOffset,
    GlobalPermissions,
    GroupRef,
    HeaderKind,
    Identifier,
    LoginRegister,
    LoginRegisterReply,
    MessagesKey,
    OptionEntry,
    OutgoingMessage,
    PartitionId,
    PartitionInfo,
    Partitioning,
    PartitionsChange,
    Permissions,
    PollingKind,
    PollingStrategy,
    PollMessages,
    PollMessagesReply,
    PollRoute,
    ReplyPayload,
    RequestPayload,
    SendConfirmation,
    SendMessages,
    SendMessagesReply,
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
    encode_user_headers,
    stamp_batch,
    verify_batch,
)
from tests.golden.layouts import Reader

# Request bodies (fields as tests.golden.layouts.describe_request_body writes them).

CONSUMER_KINDS = {"consumer": ConsumerKind.CONSUMER, "consumer_group": ConsumerKind.CONSUMER_GROUP}
POLLING_KINDS = {
    "offset": PollingKind.OFFSET,
    "timestamp": PollingKind.TIMESTAMP,
    "first": PollingKind.FIRST,
    "last": PollingKind.LAST,
    "next": PollingKind.NEXT,
}


def identifier(value: int | str) -> Identifier:
    return Identifier(value)


def consumer(fields: dict[str, Any]) -> Consumer:
    return Consumer(CONSUMER_KINDS[fields["kind"]], identifier(fields["id"]))


def partitioning(fields: dict[str, Any]) -> Partitioning:
    if fields["kind"] == "balanced":
        return Balanced()
    if fields["kind"] == "partition_id":
        return PartitionId(fields["value"])
    return MessagesKey(bytes.fromhex(fields["value_hex"]))


def strategy(fields: dict[str, Any]) -> PollingStrategy:
    return PollingStrategy(POLLING_KINDS[fields["kind"]], fields["value"])


def options(entries: list[dict[str, Any]]) -> tuple[OptionEntry, ...]:
    out = []
    for entry in entries:
        assert entry["key_kind"] == HeaderKind.STRING
        key = bytes.fromhex(entry["key_hex"]).decode("utf-8")
        out.append(
            OptionEntry(key, HeaderKind(entry["value_kind"]), bytes.fromhex(entry["value_hex"]))
        )
    return tuple(out)


def user_headers(entries: list[dict[str, Any]]) -> bytes:
    return encode_user_headers(
        [
            UserHeader(
                HeaderKind(e["key_kind"]),
                bytes.fromhex(e["key_hex"]),
                HeaderKind(e["value_kind"]),
                bytes.fromhex(e["value_hex"]),
            )
            for e in entries
        ]
    )


def outgoing_messages(batch: dict[str, Any]) -> list[OutgoingMessage]:
    """The producer's view of a captured batch: ids and origin timestamps as captured."""
    return [
        OutgoingMessage(
            id=m["id"],
            payload=bytes.fromhex(m["payload_hex"]),
            user_headers=user_headers(m["user_headers"]),
            origin_timestamp=batch["origin_timestamp"] + m["timestamp_delta"],
        )
        for m in batch["messages"]
    ]


def _stream_permissions(
    stream_id: int, flags: list[bool], topics: tuple[TopicPermissions, ...]
) -> StreamPermissions:
    names = ("manage_stream", "read_stream", "manage_topics", "read_topics")
    values = dict(zip((*names, "poll_messages", "send_messages"), flags, strict=True))
    return StreamPermissions(stream_id, topics=topics, **values)


def permissions(fields: dict[str, Any] | None) -> Permissions | None:
    """From `tests.golden.layouts` (request) or `replies.Perms` via `jsonable` (reply)."""
    if fields is None:
        return None
    hand = "global_flags" in fields  # a hand-built reply value, else a captured request
    id_key = "stream_id" if hand else "id"
    topic_key = "topic_id" if hand else "id"
    streams = tuple(
        _stream_permissions(
            s[id_key],
            s["flags"],
            tuple(TopicPermissions(t[topic_key], *t["flags"]) for t in s["topics"]),
        )
        for s in fields["streams"]
    )
    return Permissions(GlobalPermissions(*fields["global_flags" if hand else "global"]), streams)


def request_payload(code: int, body: dict[str, Any]) -> RequestPayload:
    """The typed request our decoder must produce for a captured body."""
    if code in (1, 10, 12, 20, 32, 39, 201):
        return Empty()
    if code == 14:
        return ConsumerSessionAttachment(
            int(body["client_hex"], 16), body["session"], body["metadata_op"]
        )
    if code in (31, 34):
        return UserRef(identifier(body["user"]))
    if code == 33:
        return CreateUser(
            body["username"],
            body["password"],
            UserStatus(body["status"]),
            permissions(body["permissions"]),
            options(body["options"]),
        )
    if code == 35:
        status = body["status"]
        return UpdateUser(
            identifier(body["user"]),
            body["username"],
            None if status is None else UserStatus(status),
            options(body["options"]),
        )
    if code == 36:
        return UpdatePermissions(identifier(body["user"]), permissions(body["permissions"]))
    if code == 37:
        return ChangePassword(
            identifier(body["user"]), body["current_password"], body["new_password"]
        )
    if code == 40:
        return LoginRegister(
            username=body["username"],
            password=body["password"],
            sdk_name=body["sdk_name"],
            sdk_version=body["sdk_version"],
            protocol_version=body["protocol_version"],
            context=bytes.fromhex(body["context_hex"]).decode("utf-8"),
        )
    if code in (100, 103, 104):
        return PollMessages(
            consumer(body["consumer"]),
            identifier(body["stream"]),
            identifier(body["topic"]),
            body["partition_id"],
            strategy(body["strategy"]),
            body["count"],
            bool(body["auto_commit"]),
        )
    if code == 101:
        return SendMessages(
            identifier(body["stream"]),
            identifier(body["topic"]),
            partitioning(body["partitioning"]),
            body["messages_count"],
            bytes(build_batch(outgoing_messages(body["batch"]))),
        )
    if code in (120, 123):
        return GetConsumerOffset(
            consumer(body["consumer"]),
            identifier(body["stream"]),
            identifier(body["topic"]),
            body["partition_id"],
        )
    if code == 121:
        return StoreConsumerOffset(
            consumer(body["consumer"]),
            identifier(body["stream"]),
            identifier(body["topic"]),
            body["partition_id"],
            body["offset"],
            AckLevel(body["ack"]),
        )
    if code == 122:
        return DeleteConsumerOffset(
            consumer(body["consumer"]),
            identifier(body["stream"]),
            identifier(body["topic"]),
            body["partition_id"],
            AckLevel(body["ack"]),
        )
    if code in (200, 203, 205, 301):
        return StreamRef(identifier(body["stream"]))
    if code == 202:
        return CreateStream(body["name"], options(body["options"]))
    if code == 204:
        return UpdateStream(identifier(body["stream"]), body["name"], options(body["options"]))
    if code in (300, 303, 305, 601):
        return TopicRef(identifier(body["stream"]), identifier(body["topic"]))
    if code == 302:
        return CreateTopic(
            identifier(body["stream"]),
            body["partitions_count"],
            body["name"],
            options(body["options"]),
        )
    if code == 304:
        return UpdateTopic(
            identifier(body["stream"]),
            identifier(body["topic"]),
            body["name"],
            options(body["options"]),
        )
    if code in (402, 403):
        return PartitionsChange(
            identifier(body["stream"]), identifier(body["topic"]), body["partitions_count"]
        )
    if code in (600, 603, 604, 605, 606):
        return GroupRef(
            identifier(body["stream"]), identifier(body["topic"]), identifier(body["group"])
        )
    if code == 602:
        return CreateConsumerGroup(
            identifier(body["stream"]), identifier(body["topic"]), body["name"]
        )
    raise AssertionError(f"no request payload for code {code}")


# Reply payloads (fields as tests.golden.record.jsonable writes the hand-built values).


def hex_bytes(value: dict[str, str]) -> bytes:
    return bytes.fromhex(value["hex"])


def option_block(value: dict[str, str]) -> tuple[OptionEntry, ...]:
    return options(Reader(b"").key_values(hex_bytes(value)))


def topic_info(t: dict[str, Any]) -> TopicInfo:
    return TopicInfo(
        id=t["id"],
        created_at=t["created_at"],
        partitions_count=len(t["partitions"]),
        message_expiry=t["message_expiry"],
        compression_algorithm=t["compression_algorithm"],
        max_topic_size=t["max_topic_size"],
        size_bytes=t["size_bytes"],
        messages_count=t["messages_count"],
        name=t["name"],
        options=option_block(t["options"]),
        derived_options=option_block(t["derived_options"]),
    )


def topic_details(t: dict[str, Any]) -> TopicDetails:
    partitions = tuple(
        PartitionInfo(
            p["id"],
            p["created_at"],
            p["segments_count"],
            p["current_offset"],
            p["size_bytes"],
            p["messages_count"],
        )
        for p in t["partitions"]
    )
    return TopicDetails(topic_info(t), partitions)


def stream_info(s: dict[str, Any]) -> StreamInfo:
    return StreamInfo(
        id=s["id"],
        created_at=s["created_at"],
        topics_count=len(s["topics"]),
        size_bytes=s["size_bytes"],
        messages_count=s["messages_count"],
        name=s["name"],
        options=option_block(s["options"]),
    )


def group_info(g: dict[str, Any]) -> ConsumerGroupInfo:
    return ConsumerGroupInfo(g["id"], g["partitions_count"], len(g["members"]), g["name"])


def stamped_batch(b: dict[str, Any]) -> bytes:
    """A stored batch record: built by our producer path, then stamped by our server path."""
    messages = [
        OutgoingMessage(
            id=m["id"],
            payload=hex_bytes(m["payload"]),
            user_headers=hex_bytes(m["user_headers"]),
            origin_timestamp=b["origin_timestamp"] + m["timestamp_delta"],
        )
        for m in b["messages"]
    ]
    assert b["first_offset_delta"] == 0
    batch = build_batch(messages)
    stamp_batch(
        batch,
        verify_batch(batch),
        partition_id=b["partition_id"],
        base_offset=b["base_offset"],
        base_timestamp=b["base_timestamp"],
    )
    return bytes(batch)


def user_info(u: dict[str, Any]) -> UserInfo:
    return UserInfo(u["id"], u["created_at"], UserStatus(u["status"]), u["username"])


def reply_payload(kind: str, fields: Any) -> ReplyPayload | None:
    """The typed reply for a manifest reply; None for kinds that are not a payload."""
    if kind == "empty":
        return Empty()
    if kind == "login":
        return LoginRegisterReply(
            fields["user_id"],
            fields["session"],
            fields["server_protocol_version"],
            fields["server_version"],
        )
    if kind == "cluster_metadata":
        nodes = tuple(
            ClusterNode(
                n["name"],
                n["ip"],
                n["tcp_port"],
                n["quic_port"],
                n["http_port"],
                n["websocket_port"],
                ClusterNodeRole(n["role"]),
                ClusterNodeStatus(n["status"]),
            )
            for n in fields["nodes"]
        )
        return ClusterMetadata(fields["name"], nodes)
    if kind == "stats":
        metrics = tuple(
            CacheMetric(
                m["stream_id"],
                m["topic_id"],
                m["partition_id"],
                m["hits"],
                m["misses"],
                m["hit_ratio"],
            )
            for m in fields["cache_metrics"]
        )
        values = {k: v for k, v in fields.items() if k != "cache_metrics"}
        values["iggy_server_semver"] = values["iggy_server_semver"] or None
        return Stats(**values, cache_metrics=metrics)
    if kind == "client_details":
        groups = tuple(ClientConsumerGroup(*g) for g in fields["consumer_groups"])
        return ClientInfoDetails(
            fields["client_id"], fields["user_id"], fields["transport"], fields["address"], groups
        )
    if kind == "stream_details":
        return StreamDetails(stream_info(fields), tuple(topic_info(t) for t in fields["topics"]))
    if kind == "streams":
        return Streams(tuple(stream_info(s) for s in fields))
    if kind == "topic_details":
        return topic_details(fields)
    if kind == "topics":
        return Topics(tuple(topic_info(t) for t in fields))
    if kind == "group_details":
        members = tuple(
            ConsumerGroupMember(m["id"], tuple(m["partitions"])) for m in fields["members"]
        )
        return ConsumerGroupDetails(group_info(fields), members)
    if kind == "groups":
        return ConsumerGroups(tuple(group_info(g) for g in fields))
    if kind == "sync_group":
        return ConsumerGroupAssignment(fields["generation"], tuple(fields["partitions"]))
    if kind == "consumer_offset":
        return ConsumerOffsetInfo(
            fields["partition_id"], fields["current_offset"], fields["stored_offset"]
        )
    if kind == "send_confirmations":
        return SendMessagesReply(tuple(SendConfirmation(*e) for e in fields["entries"]))
    if kind == "poll_route":
        a = fields["attachment"]
        node = fields["primary"]
        return PollRoute(
            ConsumerSessionAttachment(int(a["client_hex"], 16), a["session"], a["metadata_op"]),
            ClusterNode(
                node["name"],
                node["ip"],
                node["tcp_port"],
                node["quic_port"],
                node["http_port"],
                node["websocket_port"],
                ClusterNodeRole(node["role"]),
                ClusterNodeStatus(node["status"]),
            ),
        )
    if kind == "user_details":
        return UserDetails(user_info(fields), permissions(fields["permissions"]))
    if kind == "users":
        return Users(tuple(user_info(u) for u in fields))
    if kind == "poll":
        records = tuple(stamped_batch(b) for b in fields["batches"])
        count = sum(len(b["messages"]) for b in fields["batches"])
        return PollMessagesReply(fields["partition_id"], fields["current_offset"], count, records)
    return None
