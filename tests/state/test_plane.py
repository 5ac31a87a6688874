"""The planes: wire requests to commands, prepares to Iggy reply bytes, reads, routing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.state.admission import (
    authenticate,
    check_password,
    check_username,
    create_user_command,
    metadata_command,
)
from broker.state.codec import encode_command
from broker.state.credentials import hash_password
from broker.state.errors import NOT_FOUND, ErrorCode, StateError
from broker.state.metadata import (
    Compression,
    CreateConsumerGroup,
    CreateRootUser,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteStream,
    Durability,
    ExpireRevocations,
    JoinConsumerGroup,
    Logout,
    MetadataCommand,
    Register,
    TopicOptionsPatch,
    UpdateUser,
    UserStatus,
)
from broker.state.metadata_machine import MetadataMachine, PartitionStats
from broker.state.options import topic_options
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import (
    SEND_REPLY,
    STORE_USER,
    PartitionMachine,
    purge_body,
    resolved_offset_request,
    send_body,
    store_offset_body,
)
from broker.state.permissions import Permissions, StreamPermissions
from broker.state.routing import PartitionRoute, route_offset, route_poll, route_send
from consensus.messages import CHECKSUM_SIZE, Prepare, PrepareBody, make_prepare_header
from consensus.protocols import RequestBody, RequestRejected, joined_body
from sdk import wire
from sdk.wire.batch import BATCH_HEADER_SIZE, OutgoingMessage
from sdk.wire.codes import CommandCode, Operation
from tests.state.helpers import PASSWORD
from tests.state.partition_helpers import JournalLog
from tests.state.strategies import Step, steps

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "frames"


def _prepare(
    op: int, operation: int, body: PrepareBody, *, session: int = 0, client_id: int = 0xC1
) -> Prepare:
    header = make_prepare_header(
        group=0,
        view=0,
        op=op,
        commit=op - 1,
        parent=bytes(CHECKSUM_SIZE),
        client_id=client_id,
        session=session,
        request=op,
        operation=operation,
        timestamp_us=1_700_000_000_000_000 + op,
        body=body,
    )
    return Prepare(header, body)


class MetadataHost:
    """Feeds commands to a MetadataMachine as consensus would: as committed prepares."""

    def __init__(self) -> None:
        self.machine = MetadataMachine()
        self.op = 0

    def run(self, command: MetadataCommand, session: int = 0) -> bytes:
        self.op += 1
        operation, body = encode_command(command)
        return self.machine.apply(_prepare(self.op, operation, body, session=session))

    def root(self) -> int:
        self.run(CreateRootUser("iggy", hash_password("secret", b"salt", n=16, r=1, p=1)))
        register = authenticate(self.machine.state, 0xAA, "iggy", "secret")
        reply = self.run(register)
        login = wire.LoginRegisterReply.decode(wire.split_result(Operation.REGISTER, reply))
        assert (login.user_id, login.session) == (0, self.op)
        assert login.server_protocol_version == wire.PROTOCOL_VERSION
        return login.session


# -- metadata: prepares to replies -------------------------------------------------------


def test_create_stream_reply_is_a_result_framed_stream_record() -> None:
    host = MetadataHost()
    session = host.root()
    reply = host.run(CreateStream("orders"), session)
    payload = wire.split_result(Operation.CREATE_STREAM, reply)
    details = wire.StreamDetails.decode(payload)
    assert (details.stream.id, details.stream.name, details.stream.topics_count) == (0, "orders", 0)
    assert details.stream.created_at == 1_700_000_000_000_000 + host.op
    assert reply[:4] == bytes(4)


def test_committed_rejection_is_one_result_entry_and_no_payload() -> None:
    host = MetadataHost()
    session = host.root()
    host.run(CreateStream("orders"), session)
    reply = host.run(CreateStream("orders"), session)
    assert reply == (1).to_bytes(4, "little") + bytes(4) + (1012).to_bytes(4, "little")
    with pytest.raises(wire.ServerRejected) as raised:
        wire.split_result(Operation.CREATE_STREAM, reply)
    assert raised.value.code == ErrorCode.STREAM_NAME_ALREADY_EXISTS


def test_create_topic_reply_reports_explicit_and_derived_options() -> None:
    host = MetadataHost()
    session = host.root()
    host.run(CreateStream("s"), session)
    patch = TopicOptionsPatch(durability=Durability.PERSISTED, compression=Compression.GZIP)
    reply = host.run(CreateTopic("s", "t", 2, patch), session)
    details = wire.TopicDetails.decode(wire.split_result(Operation.CREATE_TOPIC, reply))
    assert details.topic.compression_algorithm == 2
    assert details.topic.message_expiry == (1 << 64) - 1
    assert [o.key for o in details.topic.options] == ["compression_algorithm", "durability"]
    derived = {o.key: o for o in details.topic.derived_options}
    assert "segment_size" in derived and "durability" not in derived
    assert [(p.id, p.segments_count, p.current_offset) for p in details.partitions] == [
        (0, 1, 0),
        (1, 1, 0),
    ]


def test_group_creation_logout_and_register_replies() -> None:
    host = MetadataHost()
    session = host.root()
    host.run(CreateStream("s"), session)
    host.run(CreateTopic("s", "t", 3), session)
    reply = host.run(CreateConsumerGroup("s", "t", "g"), session)
    group = wire.ConsumerGroupDetails.decode(
        wire.split_result(Operation.CREATE_CONSUMER_GROUP, reply)
    )
    assert (group.group.id, group.group.partitions_count, group.members) == (0, 3, ())
    assert host.run(Logout(), session) == b""
    assert host.run(JoinConsumerGroup("s", "t", "g"), session) == wire.result_rejected(40)


def test_system_and_register_ops_act_without_a_session() -> None:
    host = MetadataHost()
    session = host.root()
    host.run(CreateUser("alice", PASSWORD), session)
    # A header session on Register is ignored: the register itself opens the session.
    host.op += 1
    operation, body = encode_command(Register(0xBB, 1))
    reply = host.machine.apply(_prepare(host.op, operation, body, session=999))
    assert wire.LoginRegisterReply.decode(wire.split_result(Operation.REGISTER, reply)).session == (
        host.op
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(steps, min_size=5, max_size=50), st.integers(0, 50))
def test_replicas_produce_identical_reply_bytes_and_snapshots_restore(
    history: list[Step], split: int
) -> None:
    first, second = MetadataHost(), MetadataHost()
    sessions = [first.root(), second.root()]
    assert sessions[0] == sessions[1]
    for index, step in enumerate(history):
        if index == split:
            second.machine.restore(first.machine.snapshot())
        session = 0 if step.actor is None else sessions[0]
        assert first.run(step.command, session) == second.run(step.command, session)
    assert first.machine.snapshot() == second.machine.snapshot()


# -- admission -------------------------------------------------------------------------


def _golden_body(name: str) -> bytes:
    return (GOLDEN / f"{name}.request.bin").read_bytes()[256:]


def test_captured_create_topic_options_map_to_the_domain() -> None:
    request = wire.CreateTopic.decode(_golden_body("019-create_topic"))
    command = metadata_command(CommandCode.CREATE_TOPIC, request)
    assert command == CreateTopic(
        3,
        "events",
        3,
        TopicOptionsPatch(
            durability=Durability.REPLICATED, consumer_offset_durability=Durability.REPLICATED
        ),
    )
    never = wire.CreateTopic.decode(_golden_body("021-create_topic_never_expire_unlimited"))
    patch = topic_options(never.options)
    assert (patch.message_expiry_us, patch.max_topic_size_bytes) == ((1 << 64) - 1,) * 2


def test_captured_options_with_a_custom_key_are_refused() -> None:
    request = wire.CreateTopic.decode(_golden_body("020-create_topic_with_options"))
    with pytest.raises(StateError) as raised:
        metadata_command(CommandCode.CREATE_TOPIC, request)
    assert raised.value.code == ErrorCode.UNSUPPORTED_OPTION_KEY
    known = tuple(o for o in request.options if o.key != "x-custom")
    patch = topic_options(known)
    assert patch.durability == Durability.PERSISTED
    assert patch.compression == Compression.GZIP
    assert patch.messages_required_to_save == 1000
    assert patch.preallocate_segments is True
    assert patch.segment_size_bytes == 1 << 24  # 16 MiB, as captured


@pytest.mark.parametrize(
    "option",
    [
        wire.OptionEntry.of("durability", "sometimes", wire.HeaderKind.STRING),
        wire.OptionEntry.of("durability", 1, wire.HeaderKind.UINT8),
        wire.OptionEntry.of("message_expiry", "soon", wire.HeaderKind.STRING),
        wire.OptionEntry.of("message_expiry", -5, wire.HeaderKind.INT64),
        wire.OptionEntry.of("preallocate_segments", 1, wire.HeaderKind.UINT8),
        wire.OptionEntry("compression_algorithm", wire.HeaderKind.STRING, b"\xff"),
    ],
)
def test_bad_option_values_are_refused(option: wire.OptionEntry) -> None:
    with pytest.raises(StateError) as raised:
        topic_options((option,))
    assert raised.value.code == ErrorCode.INVALID_OPTION_VALUE


def test_zero_means_server_default_and_stream_options_are_refused() -> None:
    zero = wire.OptionEntry.of("max_topic_size", 0, wire.HeaderKind.UINT64)
    assert topic_options((zero,)) == TopicOptionsPatch()
    request = wire.UpdateStream.decode(_golden_body("017-update_stream_with_options"))
    with pytest.raises(StateError) as raised:
        metadata_command(CommandCode.UPDATE_STREAM, request)
    assert raised.value.code == ErrorCode.UNSUPPORTED_OPTION_KEY


@pytest.mark.parametrize(
    ("code", "payload", "expected"),
    [
        (CommandCode.CREATE_STREAM, wire.CreateStream("s"), CreateStream("s")),
        (CommandCode.DELETE_STREAM, wire.StreamRef(wire.Identifier("s")), DeleteStream("s")),
        (
            CommandCode.JOIN_CONSUMER_GROUP,
            wire.GroupRef(wire.Identifier(1), wire.Identifier("t"), wire.Identifier(4)),
            JoinConsumerGroup(1, "t", 4),
        ),
        (CommandCode.LOGOUT_USER, wire.Empty(), Logout()),
    ],
)
def test_metadata_command_translation(
    code: CommandCode, payload: wire.RequestPayload, expected: MetadataCommand
) -> None:
    assert metadata_command(code, payload) == expected


def test_non_metadata_commands_are_refused_by_translation() -> None:
    with pytest.raises(StateError) as raised:
        metadata_command(CommandCode.GET_STREAMS, wire.Empty())
    assert raised.value.code == ErrorCode.INVALID_COMMAND


def test_authenticate_checks_the_hash_and_the_status() -> None:
    host = MetadataHost()
    session = host.root()
    assert authenticate(host.machine.state, 7, "iggy", "secret") == Register(7, 0)
    for username, password in (("iggy", "wrong"), ("nobody", "secret")):
        with pytest.raises(StateError) as raised:
            authenticate(host.machine.state, 7, username, password)
        assert raised.value.code == ErrorCode.INVALID_CREDENTIALS
    hashed = hash_password("pw", b"salt2", n=16, r=1, p=1)
    host.run(CreateUser("alice", hashed, UserStatus.INACTIVE), session)
    with pytest.raises(StateError) as raised:
        authenticate(host.machine.state, 7, "alice", "pw")
    assert raised.value.code == ErrorCode.USER_INACTIVE
    host.run(UpdateUser("alice", status=UserStatus.ACTIVE), session)
    assert authenticate(host.machine.state, 7, "alice", "pw") == Register(7, 1)


# -- reads -----------------------------------------------------------------------------


def _world() -> tuple[MetadataHost, int, int]:
    """Root plus a reader who may only read stream 1; streams a (0) and b (1)."""
    host = MetadataHost()
    root = host.root()
    host.run(CreateStream("a"), root)
    host.run(CreateStream("b"), root)
    host.run(CreateTopic("b", "t", 2), root)
    host.run(CreateConsumerGroup("b", "t", "g"), root)
    reader = Permissions(streams=(StreamPermissions(1, read_stream=True),))
    host.run(CreateUser("reader", PASSWORD, permissions=reader), root)
    register = Register(0xBB, 1)
    reply = host.run(register)
    other = wire.LoginRegisterReply.decode(wire.split_result(Operation.REGISTER, reply)).session
    return host, root, other


def test_get_stream_and_streams_respect_permissions_and_not_found() -> None:
    host, root, reader = _world()
    machine = host.machine

    def stats(stream_id: int, topic_id: int, partition_id: int) -> PartitionStats:
        return PartitionStats(2, 9 + partition_id, 100, 10)

    details = wire.StreamDetails.decode(
        machine.get_stream(wire.StreamRef(wire.Identifier("b")), root, stats)
    )
    assert (details.stream.messages_count, details.stream.size_bytes) == (20, 200)
    assert details.topics[0].messages_count == 20
    assert machine.get_stream(wire.StreamRef(wire.Identifier(9)), root) == NOT_FOUND
    with pytest.raises(StateError) as raised:
        machine.get_stream(wire.StreamRef(wire.Identifier("a")), reader)
    assert raised.value.code == ErrorCode.UNAUTHORIZED
    listed = wire.Streams.decode(machine.get_streams(reader))
    assert [s.name for s in listed.streams] == ["b"]
    assert len(wire.Streams.decode(machine.get_streams(root)).streams) == 2
    with pytest.raises(StateError):
        machine.get_streams(4242)


def test_get_topic_topics_and_groups() -> None:
    host, root, reader = _world()
    machine = host.machine
    ref = wire.TopicRef(wire.Identifier("b"), wire.Identifier("t"))
    topic = wire.TopicDetails.decode(machine.get_topic(ref, reader))
    assert (topic.topic.name, len(topic.partitions)) == ("t", 2)
    missing = wire.TopicRef(wire.Identifier("b"), wire.Identifier("x"))
    assert machine.get_topic(missing, root) == NOT_FOUND
    topics = wire.Topics.decode(machine.get_topics(wire.StreamRef(wire.Identifier(1)), root))
    assert [t.name for t in topics.topics] == ["t"]
    assert machine.get_topics(wire.StreamRef(wire.Identifier(9)), root) == NOT_FOUND
    groups = wire.ConsumerGroups.decode(machine.get_consumer_groups(ref, root))
    assert [(g.id, g.name, g.members_count) for g in groups.groups] == [(0, "g", 0)]
    group_ref = wire.GroupRef(wire.Identifier("b"), wire.Identifier("t"), wire.Identifier("g"))
    assert (
        wire.ConsumerGroupDetails.decode(machine.get_consumer_group(group_ref, root)).group.id == 0
    )
    gone = wire.GroupRef(wire.Identifier("b"), wire.Identifier("t"), wire.Identifier("zz"))
    assert machine.get_consumer_group(gone, root) == NOT_FOUND


def test_sync_consumer_group_and_get_me() -> None:
    host, root, _ = _world()
    machine = host.machine
    group_ref = wire.GroupRef(wire.Identifier("b"), wire.Identifier("t"), wire.Identifier("g"))
    assert machine.sync_consumer_group(group_ref, root) == NOT_FOUND
    host.run(JoinConsumerGroup("b", "t", "g"), root)
    assignment = wire.ConsumerGroupAssignment.decode(machine.sync_consumer_group(group_ref, root))
    assert (assignment.generation, assignment.partitions) == (2, (0, 1))
    me = wire.ClientInfoDetails.decode(machine.get_me(root, 1, "127.0.0.1:5000"))
    assert (me.client_id, me.user_id, me.address) == (0, 0, "127.0.0.1:5000")
    assert me.consumer_groups == (wire.ClientConsumerGroup(1, 0, 0),)
    with pytest.raises(StateError) as raised:
        machine.get_me(12345, 1, "x")
    assert raised.value.code == ErrorCode.UNAUTHENTICATED


# -- routing ---------------------------------------------------------------------------


def _send(partitioning: wire.Partitioning, stream: str = "b") -> wire.SendMessages:
    body = wire.build_send_messages(
        wire.Identifier(stream), wire.Identifier("t"), partitioning, [OutgoingMessage(1, b"x")]
    )
    return wire.SendMessages.decode(body)


def test_route_send_by_partition_key_and_round_robin() -> None:
    host, root, reader = _world()
    state = host.machine.state
    assert route_send(state, _send(wire.PartitionId(1)), root, 0).partition_id == 1
    assert {route_send(state, _send(wire.Balanced()), root, n).partition_id for n in (4, 5)} == {
        0,
        1,
    }
    keyed = [route_send(state, _send(wire.MessagesKey(b"k")), root, n) for n in range(3)]
    assert len({r.partition_id for r in keyed}) == 1  # a key always lands on one partition
    for request, session, code in (
        (_send(wire.PartitionId(2)), root, ErrorCode.PARTITION_NOT_FOUND),
        (_send(wire.PartitionId(0)), reader, ErrorCode.UNAUTHORIZED),
        (_send(wire.PartitionId(0), stream="nope"), root, ErrorCode.STREAM_ID_NOT_FOUND),
    ):
        with pytest.raises(StateError) as raised:
            route_send(state, request, session, 0)
        assert raised.value.code == code


def _poll(consumer: wire.Consumer, partition_id: int | None) -> wire.PollMessages:
    return wire.PollMessages(
        consumer,
        wire.Identifier("b"),
        wire.Identifier("t"),
        partition_id,
        wire.PollingStrategy.first(),
        10,
        False,
    )


def test_route_poll_for_consumers_and_group_members() -> None:
    host, root, reader = _world()
    state = host.machine.state
    single = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(3))
    route = route_poll(state, _poll(single, None), reader)
    assert route == PartitionRoute(1, 0, 0, ConsumerKey(ConsumerKind.CONSUMER, 3))
    group = wire.Consumer(wire.ConsumerKind.CONSUMER_GROUP, wire.Identifier("g"))
    with pytest.raises(StateError) as raised:
        route_poll(state, _poll(group, None), root)
    assert raised.value.code == ErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND
    host.run(JoinConsumerGroup("b", "t", "g"), root)
    host.run(JoinConsumerGroup("b", "t", "g"), reader)
    # Partition 1 is revoking from root to the reader: neither may poll it yet.
    with pytest.raises(StateError) as raised:
        route_poll(state, _poll(group, None), reader)
    assert raised.value.code == ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED
    with pytest.raises(StateError) as raised:
        route_poll(state, _poll(group, 1), root)
    assert raised.value.code == ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED
    # ... but root, which still owns it, may store its offset without naming it.
    root_store = wire.StoreConsumerOffset(
        group, wire.Identifier("b"), wire.Identifier("t"), None, 0
    )
    assert route_offset(state, root_store, root).partition_id == 0
    host.run(ExpireRevocations(0))
    assert route_poll(state, _poll(group, None), reader).partition_id == 1
    with pytest.raises(StateError) as raised:
        route_poll(state, _poll(group, 0), reader)
    assert raised.value.code == ErrorCode.CONSUMER_GROUP_PARTITION_NOT_OWNED
    with pytest.raises(StateError) as raised:
        route_poll(state, _poll(single, 5), reader)
    assert raised.value.code == ErrorCode.PARTITION_NOT_FOUND
    # Offsets of an explicit partition may be written by a member that does not own it.
    store = wire.StoreConsumerOffset(group, wire.Identifier("b"), wire.Identifier("t"), 0, 0)
    offset_route = route_offset(state, store, reader)
    assert offset_route.consumer == ConsumerKey(ConsumerKind.CONSUMER_GROUP, 0)
    body = resolved_offset_request(store, offset_route, 42)
    # A store names the user it is charged to before the wire payload; a delete does not.
    assert STORE_USER.unpack_from(body, 0) == (42,)
    resolved = wire.StoreConsumerOffset.decode(body[STORE_USER.size :])
    assert resolved.consumer.id == wire.Identifier(0)
    delete = wire.DeleteConsumerOffset(group, wire.Identifier("b"), wire.Identifier("t"), 0)
    resolved_delete = wire.DeleteConsumerOffset.decode(
        resolved_offset_request(delete, offset_route, 42)
    )
    assert resolved_delete.consumer.id == wire.Identifier(0)


# -- the partition plane ---------------------------------------------------------------


class PartitionHost:
    """One partition replica as consensus would drive it, with the prepare hook."""

    def __init__(self) -> None:
        self.log = JournalLog()
        self.machine = PartitionMachine(1, 0, 1, self.log)

    def run(self, operation: int, body: RequestBody) -> bytes:
        op = self.log.op_max() + 1
        prepared = self.machine.prepare(op, operation, body, 1_000 + op, 0)
        prepare = _prepare(op, operation, prepared.body, session=5)
        assert self.machine.check_prepared(prepare) is None
        self.log.append(prepare)
        return self.machine.apply(prepare)


def test_partition_machine_full_cycle() -> None:
    host = PartitionHost()
    request = wire.build_send_messages(
        wire.Identifier(1),
        wire.Identifier(0),
        wire.PartitionId(1),
        [OutgoingMessage(7, b"a"), OutgoingMessage(8, b"b")],
    )
    send = send_body(wire.SendMessages.decode(request))
    host.run(Operation.SEND_MESSAGES, send)
    host.run(Operation.SEND_MESSAGES, send)
    route = PartitionRoute(1, 0, 1, ConsumerKey(ConsumerKind.CONSUMER, 9))
    assert host.run(Operation.STORE_CONSUMER_OFFSET, store_offset_body(route, 1, 42)) == (
        wire.result_ok()
    )
    assert host.machine.state.offsets_charged(42) == 1
    with pytest.raises(RequestRejected) as raised:
        host.run(Operation.STORE_CONSUMER_OFFSET, store_offset_body(route, 9, 42))
    assert raised.value.status == ErrorCode.INVALID_OFFSET
    key = ConsumerKey(ConsumerKind.CONSUMER, 9)
    info = wire.ConsumerOffsetInfo.decode(host.machine.get_consumer_offset(key))
    assert (info.partition_id, info.current_offset, info.stored_offset) == (1, 3, 1)
    assert host.machine.get_consumer_offset(ConsumerKey(ConsumerKind.CONSUMER, 1)) == NOT_FOUND
    poll = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(9)),
        wire.Identifier(1),
        wire.Identifier(0),
        1,
        wire.PollingStrategy.next(),
        10,
        True,
    )
    parts, store = host.machine.poll(poll, key)
    polled = wire.PollMessagesReply.decode(b"".join(bytes(p) for p in parts))
    assert (polled.partition_id, polled.current_offset, polled.messages_count, store) == (
        1,
        3,
        2,
        3,
    )
    # Restore into a fresh machine over the same log: same state, same polls.
    restored = PartitionMachine(1, 0, 1, host.log)
    restored.restore(host.machine.snapshot())
    assert restored.snapshot() == host.machine.snapshot()
    again, _ = restored.poll(poll, key)
    assert b"".join(bytes(p) for p in again) == b"".join(bytes(p) for p in parts)
    delete = wire.DeleteConsumerOffset(
        wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(9)),
        wire.Identifier(1),
        wire.Identifier(0),
        1,
    ).encode()
    assert host.run(Operation.DELETE_CONSUMER_OFFSET, delete) == wire.result_ok()
    assert host.run(Operation.DELETE_CONSUMER_OFFSET, delete) == wire.result_rejected(3021)
    assert host.run(Operation.TRUNCATE_PARTITION, purge_body(1)) == b""
    assert host.machine.state.first_offset == 4


@pytest.mark.parametrize(
    ("operation", "body", "code"),
    [
        (Operation.SEND_MESSAGES, b"\x01\x00", ErrorCode.INVALID_FORMAT),
        (Operation.CREATE_STREAM, b"", ErrorCode.INVALID_COMMAND),
    ],
)
def test_partition_prepare_refuses_bad_requests(
    operation: int, body: bytes, code: ErrorCode
) -> None:
    host = PartitionHost()
    with pytest.raises(RequestRejected) as raised:
        host.machine.prepare(1, operation, body, 1, 0)
    assert raised.value.status == code


def _one_message_send() -> wire.SendMessages:
    return wire.SendMessages.decode(
        wire.build_send_messages(
            wire.Identifier(1), wire.Identifier(0), wire.PartitionId(1), [OutgoingMessage(1, b"a")]
        )
    )


def test_send_admission_refuses_a_count_that_disagrees_with_the_batch() -> None:
    request = _one_message_send()
    lying = wire.SendMessages(
        request.stream_id, request.topic_id, request.partitioning, 2, request.batch
    )
    with pytest.raises(StateError) as raised:
        send_body(lying)
    assert raised.value.code == ErrorCode.INVALID_MESSAGES_COUNT


def test_send_admission_refuses_a_message_whose_checksum_does_not_match() -> None:
    request = _one_message_send()
    batch = bytearray(request.batch)
    batch[-1] ^= 0xFF  # the payload's last byte, under its message checksum
    tampered = wire.SendMessages(
        request.stream_id, request.topic_id, request.partitioning, 1, batch
    )
    with pytest.raises(StateError) as raised:
        send_body(tampered)
    assert raised.value.code == ErrorCode.INVALID_MESSAGE_CHECKSUM


def test_an_admitted_send_is_the_batch_then_its_checksums_and_prepare_reads_no_message() -> None:
    request = _one_message_send()
    parts = send_body(request)
    body = joined_body(parts)  # as a forward carries it
    batch = bytes(request.batch)
    assert body[: len(batch)] == batch and len(body) == len(batch) + 8
    assert body[len(batch) :] == batch[BATCH_HEADER_SIZE : BATCH_HEADER_SIZE + 8]
    # The primary stamps over the checksums it is handed: a message damaged after
    # admission is not read again, so the stamp still verifies against the checksums.
    damaged = bytearray(body)
    damaged[len(batch) - 1] ^= 0xFF
    prepared = PartitionHost().machine.prepare(1, Operation.SEND_MESSAGES, bytes(damaged), 1, 0)
    header = wire.read_batch(prepared.body)[0]
    assert (header.partition_id, header.base_offset, header.message_count) == (1, 0, 1)


def _send_buffer() -> bytearray:
    """A request body of a one-message send, in a buffer of its own (as a frame's)."""
    return bytearray(
        wire.build_send_messages(
            wire.Identifier(1),
            wire.Identifier(0),
            wire.PartitionId(1),
            [OutgoingMessage(7, b"payload")],
        )
    )


def test_an_admitted_send_is_stamped_in_the_request_buffer_it_hands_over() -> None:
    buffer = _send_buffer()
    batch, checksums = send_body(wire.SendMessages.decode(memoryview(buffer)))
    assert batch.obj is buffer, "the batch part is the request's own bytes, not a copy"
    assert len(checksums) == 8
    prepared = PartitionHost().machine.prepare(1, Operation.SEND_MESSAGES, (batch, checksums), 1, 0)
    body = prepared.body
    assert isinstance(body, memoryview) and body.obj is buffer, "no copy: stamped in place"
    header = wire.verify_batch(body).header
    assert (header.partition_id, header.base_offset, header.base_timestamp) == (1, 0, 1)


@pytest.mark.parametrize("form", ["forwarded", "read-only"])
def test_a_send_body_the_log_cannot_take_over_is_stamped_in_a_copy(form: str) -> None:
    buffer = _send_buffer()
    before = bytes(buffer)
    batch, checksums = send_body(wire.SendMessages.decode(memoryview(buffer)))
    body: RequestBody
    if form == "forwarded":  # one buffer, as the bus delivers it: the bus's, not ours
        body = memoryview(bytearray(joined_body((batch, checksums))))
        source = bytes(body)
    else:
        body = (memoryview(bytes(batch)), checksums)
        source = bytes(body[0])
    prepared = PartitionHost().machine.prepare(1, Operation.SEND_MESSAGES, body, 1, 0)
    assert bytes(buffer) == before
    assert (bytes(body) if isinstance(body, memoryview) else bytes(body[0])) == source
    assert wire.verify_batch(prepared.body).header.partition_id == 1


@pytest.mark.parametrize("cut", [1, 8, 9])
@pytest.mark.parametrize("joined", [True, False])
def test_partition_prepare_refuses_an_admitted_send_that_does_not_add_up(
    cut: int, joined: bool
) -> None:
    batch, checksums = send_body(_one_message_send())
    body: RequestBody
    if joined:  # a forwarded body, one buffer
        body = joined_body((batch, checksums))[:-cut]
    else:  # parts that do not add up: a short batch, or checksums of another count
        body = (batch[:-cut], checksums) if cut % 8 else (batch, checksums[:-cut])
    with pytest.raises(RequestRejected) as raised:
        PartitionHost().machine.prepare(1, Operation.SEND_MESSAGES, body, 1, 0)
    assert raised.value.status == ErrorCode.INVALID_FORMAT


@pytest.mark.parametrize(
    ("username", "fits"),
    [
        ("abc", True),
        ("a" * 50, True),
        ("\u00e9" * 25, True),  # 50 bytes
        ("\u20ac" * 17, False),  # 17 characters, 51 bytes
        ("ab", False),
        ("a" * 51, False),
    ],
)
def test_usernames_are_bounded_in_utf8_bytes_as_iggy_counts_them(username: str, fits: bool) -> None:
    update = wire.UpdateUser(wire.Identifier(1), username, None, ())
    create = wire.CreateUser(username, "secret-password")
    if fits:
        check_username(username)
        assert isinstance(metadata_command(CommandCode.UPDATE_USER, update), UpdateUser)
        return
    for attempt in (
        lambda: check_username(username),
        lambda: metadata_command(CommandCode.UPDATE_USER, update),
        lambda: create_user_command(create, hash_password("secret-password", b"s" * 16, n=2)),
    ):
        with pytest.raises(StateError) as raised:
            attempt()
        assert raised.value.code is ErrorCode.INVALID_USERNAME


def test_passwords_are_bounded_in_utf8_bytes() -> None:
    check_password("\u20ac" * 33)  # 99 bytes
    with pytest.raises(StateError):
        check_password("\u20ac" * 34)  # 34 characters, 102 bytes


@settings(max_examples=200)
@given(
    st.integers(0, 0xFFFF_FFFF),
    st.integers(0, 0xFFFF_FFFF),
    st.integers(0, 0xFFFF_FFFF),
    st.integers(0, 0xFFFF_FFFF_FFFF_FFFF),
)
def test_send_reply_packed_at_once_is_the_wire_encoding(
    stream_id: int, topic_id: int, partition_id: int, base_offset: int
) -> None:
    confirmation = wire.SendConfirmation(stream_id, topic_id, partition_id, base_offset)
    expected = wire.SendMessagesReply((confirmation,)).encode()
    assert SEND_REPLY.pack(1, stream_id, topic_id, partition_id, base_offset) == expected
