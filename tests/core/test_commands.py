"""The command table and the write decisions of ``broker.core.commands``."""

from __future__ import annotations

import pytest

from broker.core.commands import (
    METADATA_READS,
    POLL_RESYNC_PARTITION,
    ROUTES,
    Balancer,
    CodeAnswered,
    CodeEvicted,
    Denied,
    MetadataWrite,
    PollAdmitted,
    Resync,
    Route,
    TokenWrite,
    acting_session,
    admit_command,
    admit_create_token,
    admit_delete_segments,
    admit_metadata_write,
    admit_offset_write,
    admit_poll,
    committed_retry,
    judge_code,
    resync_reply,
    token_reply,
)
from broker.core.connections import ConnectionContext
from broker.state.codec import decode_command
from broker.state.credentials import token_hash
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    CreateConsumerGroup,
    CreatePersonalAccessToken,
    CreateStream,
    CreateTopic,
    DeletePersonalAccessToken,
    EndSession,
    JoinConsumerGroup,
    Logout,
)
from broker.state.metadata_machine import MetadataMachine, PartitionStats
from broker.state.partition import ConsumerKey, ConsumerKind
from broker.state.partition_machine import STORE_USER
from broker.state.permissions import Permissions, StreamPermissions
from broker.state.routing import PartitionRoute
from consensus.client_table import ClientTable
from consensus.messages import Prepare, make_prepare_header
from sdk import wire
from sdk.wire import COMMANDS, CommandCode, EvictionReason, IggyErrorCode
from sdk.wire.batch import OutgoingMessage
from sdk.wire.codes import Operation, operation_for_code
from tests.state.helpers import ROOT_CLIENT_ID, Driver, driver_with_root

READER_CLIENT_ID = 0xBB


def _world() -> tuple[Driver, int]:
    """Root, stream "s" (id 0) with topic "t" of 3 partitions and group "g", and a
    reader who may only read that stream; the reader's session."""
    driver = driver_with_root()
    driver.as_root(CreateStream("s"))
    driver.as_root(CreateTopic("s", "t", 3))
    driver.as_root(CreateConsumerGroup("s", "t", "g"))
    reader = Permissions(streams=(StreamPermissions(0, read_stream=True),))
    user_id = driver.add_user("reader", reader)
    return driver, driver.login(READER_CLIENT_ID, user_id)


def _send(partitioning: wire.Partitioning, topic: str = "t") -> tuple[wire.SendMessages, bytes]:
    body = bytes(
        wire.build_send_messages(
            wire.Identifier("s"), wire.Identifier(topic), partitioning, [OutgoingMessage(7, b"x")]
        )
    )
    return wire.SendMessages.decode(body), body


def _group_consumer() -> wire.Consumer:
    return wire.Consumer(wire.ConsumerKind.CONSUMER_GROUP, wire.Identifier("g"))


def test_every_command_of_the_codec_has_one_route_and_every_route_is_taken() -> None:
    assert set(ROUTES) == set(COMMANDS)
    assert set(ROUTES.values()) == set(Route)
    reads = {code for code, route in ROUTES.items() if route is Route.METADATA_READ}
    assert set(METADATA_READS) == reads
    # Every command that changes metadata is proposed to the metadata group.
    for code in COMMANDS:
        if operation_for_code(code).is_metadata:
            assert ROUTES[code] in (
                Route.METADATA_WRITE,
                Route.CREATE_USER,
                Route.CHANGE_PASSWORD,
                Route.CREATE_TOKEN,
            ), code


@pytest.mark.parametrize("logged_in", [False, True])
@pytest.mark.parametrize(
    "code", [CommandCode.LOGIN_USER, CommandCode.LOGIN_WITH_PERSONAL_ACCESS_TOKEN]
)
def test_legacy_login_codes_are_evicted_logged_in_or_not(code: int, logged_in: bool) -> None:
    verdict = judge_code(Operation.NON_REPLICATED, code, logged_in=logged_in)
    assert isinstance(verdict, CodeEvicted)
    assert verdict.reason is EvictionReason.MALFORMED_LOGIN


@pytest.mark.parametrize(
    "code",
    [
        CommandCode.GET_STREAMS,
        CommandCode.GET_STREAM,  # its body is never looked at
        CommandCode.GET_SNAPSHOT_FILE,
        CommandCode.FLUSH_UNSAVED_BUFFER,  # Iggy's, not a command here
        CommandCode.CREATE_STREAM,  # a write sent as a read
        9000,  # ours
        9999,  # nobody's
    ],
)
def test_before_login_every_non_replicated_code_but_ping_gets_40(code: int) -> None:
    verdict = judge_code(Operation.NON_REPLICATED, code, logged_in=False)
    assert verdict == CodeAnswered(IggyErrorCode.UNAUTHENTICATED, "not logged in")
    assert judge_code(Operation.NON_REPLICATED, CommandCode.PING, logged_in=False) is None


def test_logged_in_flush_gets_feature_unavailable_and_other_codes_go_on() -> None:
    flush = judge_code(Operation.NON_REPLICATED, CommandCode.FLUSH_UNSAVED_BUFFER, logged_in=True)
    assert flush == CodeAnswered(IggyErrorCode.FEATURE_UNAVAILABLE)
    for code in (CommandCode.GET_STREAMS, CommandCode.GET_SNAPSHOT_FILE, 9999):
        assert judge_code(Operation.NON_REPLICATED, code, logged_in=True) is None


def test_replicated_operations_are_left_to_the_session_check() -> None:
    for logged_in in (False, True):
        assert judge_code(Operation.CREATE_STREAM, 0, logged_in=logged_in) is None
        assert judge_code(Operation.REGISTER, 0, logged_in=logged_in) is None


def test_a_metadata_write_is_judged_for_its_session_before_it_is_encoded() -> None:
    driver, reader = _world()
    state = driver.state
    create = wire.CreateStream("new", ())
    write = admit_metadata_write(state, CommandCode.CREATE_STREAM, create, driver.root_session, 8)
    assert isinstance(write, MetadataWrite)
    assert write.command == CreateStream("new")
    assert write.operation == int(Operation.CREATE_STREAM)
    assert decode_command(write.operation, write.body) == CreateStream("new")
    denied = admit_metadata_write(state, CommandCode.CREATE_STREAM, create, reader, 8)
    assert denied == Denied(int(ErrorCode.UNAUTHORIZED), operation=int(Operation.CREATE_STREAM))
    logout = admit_metadata_write(state, CommandCode.LOGOUT_USER, wire.Empty(), reader, None)
    assert isinstance(logout, MetadataWrite) and logout.command == Logout()


def test_delete_segments_needs_manage_topic_and_a_partition_that_exists() -> None:
    driver, reader = _world()
    state = driver.state

    def request(stream: str, topic: str, partition: int) -> wire.DeleteSegments:
        return wire.DeleteSegments(wire.Identifier(stream), wire.Identifier(topic), partition, 2)

    route = admit_delete_segments(state, request("s", "t", 2), driver.root_session)
    assert route == PartitionRoute(0, 0, 2)
    for denied, session, code in (
        (request("s", "t", 0), reader, ErrorCode.UNAUTHORIZED),  # reading is not managing
        (request("s", "t", 3), driver.root_session, ErrorCode.PARTITION_NOT_FOUND),
        (request("s", "u", 0), driver.root_session, ErrorCode.TOPIC_ID_NOT_FOUND),
        (request("x", "t", 0), driver.root_session, ErrorCode.STREAM_ID_NOT_FOUND),
    ):
        with pytest.raises(StateError) as refused:
            admit_delete_segments(state, denied, session)
        assert refused.value.code is code


def test_a_creation_beyond_the_node_capacity_is_denied_with_the_reason() -> None:
    driver, reader = _world()
    state = driver.state  # 3 partitions exist
    root = driver.root_session
    assert isinstance(admit_command(state, CreateTopic("s", "u", 5), root, 8), MetadataWrite)
    denied = admit_command(state, CreateTopic("s", "u", 6), root, 8)
    assert isinstance(denied, Denied)
    assert denied.status == int(ErrorCode.PARTITIONS_LIMIT_REACHED)
    assert "6 more partitions do not fit: 3 exist" in denied.refusal
    assert isinstance(admit_command(state, CreateTopic("s", "u", 6), root, None), MetadataWrite)
    # Permissions are judged first: a reader learns nothing of the node's capacity.
    unauthorized = admit_command(state, CreateTopic("s", "u", 6), reader, 8)
    assert isinstance(unauthorized, Denied)
    assert unauthorized.status == int(ErrorCode.UNAUTHORIZED)


def test_balanced_sends_go_round_the_partitions_and_only_admitted_ones_count() -> None:
    driver, reader = _world()
    state = driver.state
    balancer = Balancer()
    root = driver.root_session
    send, _ = _send(wire.Balanced())
    chosen = [balancer.admit_send(state, send, root).partition_id for _ in range(4)]
    assert chosen == [0, 1, 2, 0]
    with pytest.raises(StateError) as raised:
        balancer.admit_send(state, send, reader)  # may read, not send
    assert raised.value.code == ErrorCode.UNAUTHORIZED
    keyed, _ = _send(wire.PartitionId(2))
    assert balancer.admit_send(state, keyed, root).partition_id == 2
    # Neither the refusal nor the explicit partition moved the counter on.
    assert balancer.admit_send(state, send, root).partition_id == 1


def test_an_offset_write_names_the_group_by_id_and_is_charged_to_the_acting_user() -> None:
    driver, reader = _world()
    state = driver.state
    driver.as_root(JoinConsumerGroup("s", "t", "g"))
    store = wire.StoreConsumerOffset(
        _group_consumer(), wire.Identifier("s"), wire.Identifier("t"), None, 41, wire.AckLevel(0)
    )
    write = admit_offset_write(state, CommandCode.STORE_CONSUMER_OFFSET, store, driver.root_session)
    assert write.operation == int(Operation.STORE_CONSUMER_OFFSET)
    assert write.route.consumer == ConsumerKey(ConsumerKind.CONSUMER_GROUP, 0)
    assert write.route.partition_id == 0  # the member's first assigned partition
    (user_id,) = STORE_USER.unpack_from(write.body)
    assert user_id == 0
    resolved = wire.StoreConsumerOffset.decode(write.body[STORE_USER.size :])
    assert (resolved.consumer.id.value, resolved.partition_id, resolved.offset) == (0, 0, 41)
    with pytest.raises(StateError):
        admit_offset_write(state, CommandCode.STORE_CONSUMER_OFFSET, store, reader)


def test_an_attached_session_acts_until_it_ends() -> None:
    driver, reader = _world()
    context = ConnectionContext("127.0.0.1:1")
    assert acting_session(context, driver.state, reader) == reader
    context.attached_session = driver.root_session
    assert acting_session(context, driver.state, reader) == driver.root_session
    driver.apply(EndSession(driver.root_session))  # the node's own command: no session
    assert driver.state.session_of_client(ROOT_CLIENT_ID) is None
    assert acting_session(context, driver.state, reader) is None
    assert context.attached_session == 0  # dropped: the next request acts for its own


def test_a_poll_by_a_member_that_lost_its_partition_is_told_to_resync() -> None:
    driver, _ = _world()
    state = driver.state
    root = driver.root_session
    poll = wire.PollMessages(
        _group_consumer(),
        wire.Identifier("s"),
        wire.Identifier("t"),
        1,
        wire.PollingStrategy.first(),
        10,
        False,
    )
    assert admit_poll(state, poll, root) == Resync()  # not a member yet
    driver.as_root(JoinConsumerGroup("s", "t", "g"))
    admitted = admit_poll(state, poll, root)
    assert isinstance(admitted, PollAdmitted)
    assert (admitted.route.partition_id, admitted.user_id) == (1, 0)
    reply = wire.PollMessagesReply.decode(b"".join(bytes(part) for part in resync_reply()))
    assert (reply.partition_id, reply.messages()) == (POLL_RESYNC_PARTITION, [])
    single = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(5))
    missing = wire.PollMessages(
        single,
        wire.Identifier("s"),
        wire.Identifier("zz"),
        0,
        wire.PollingStrategy.first(),
        1,
        False,
    )
    with pytest.raises(StateError) as raised:
        admit_poll(state, missing, root)  # not a group's rebalance: the error itself
    assert raised.value.code == ErrorCode.TOPIC_ID_NOT_FOUND


def test_a_retry_of_a_committed_write_that_admission_refuses_gets_its_committed_reply() -> None:
    # A DELETE_TOPIC committed, its reply lost: the retry finds no topic at admission.
    # The client table still holds the committed request: its reply answers the retry.
    table = ClientTable(8, registers_sessions=True)
    digest = b"\x07" * 16
    operation = int(Operation.DELETE_TOPIC)

    def committed(op: int, request: int, *, register: bool = False) -> Prepare:
        header = make_prepare_header(
            group=0,
            view=0,
            op=op,
            commit=0,
            parent=bytes(16),
            client_id=41,
            session=0 if register else 3,
            request=request,
            operation=int(Operation.REGISTER) if register else operation,
            timestamp_us=op,
            body=b"",
            request_checksum=b"\x01" * 16 if register else digest,
        )
        return Prepare(header, b"")

    table.commit(committed(3, 1, register=True), b"registered", register=True)
    table.commit(committed(9, 2), b"deleted", register=False)
    refused = Denied(int(ErrorCode.TOPIC_ID_NOT_FOUND), operation=operation)
    cached = committed_retry(table, 41, 3, 2, refused, digest)
    assert cached is not None and (cached.op, cached.reply) == (9, b"deleted")
    # Another request under that number, a new number, or a refusal that knows no
    # operation: the refusal stands.
    assert committed_retry(table, 41, 3, 2, refused, b"\x08" * 16) is None
    assert committed_retry(table, 41, 3, 3, refused, digest) is None
    assert (
        committed_retry(table, 41, 3, 2, Denied(int(ErrorCode.TOPIC_ID_NOT_FOUND)), digest) is None
    )


def test_a_token_creation_proposes_only_the_hash_of_the_token_the_driver_drew() -> None:
    driver, reader = _world()
    request = wire.CreatePersonalAccessToken("ci-token", 0)
    admitted = admit_create_token(driver.state, request, "raw-secret-token", reader)
    assert isinstance(admitted, TokenWrite)
    write = admitted.write
    assert write.operation == int(Operation.CREATE_PERSONAL_ACCESS_TOKEN)
    assert admitted.token_hash == token_hash("raw-secret-token")
    assert decode_command(write.operation, write.body) == CreatePersonalAccessToken(
        "ci-token", 0, admitted.token_hash
    )
    assert b"raw-secret-token" not in write.body  # never in the log
    nobody = admit_create_token(driver.state, request, "raw-secret-token", 12345)
    assert isinstance(nobody, Denied) and nobody.status == int(ErrorCode.UNAUTHENTICATED)


def test_a_token_creation_reply_carries_the_raw_token_once_and_a_replay_is_refused() -> None:
    hashed = token_hash("mine")
    created = wire.result_ok(hashed)  # what the committed creation of "mine" replies
    mine = token_reply(created, hashed, "mine")
    raw = wire.split_result(Operation.CREATE_PERSONAL_ACCESS_TOKEN, mine)
    assert wire.RawPersonalAccessToken.decode(raw) == wire.RawPersonalAccessToken("mine")
    # A retry drew another token, but the client table answered the first creation.
    replayed = token_reply(created, token_hash("retry"), "retry")
    assert replayed == wire.result_rejected(int(ErrorCode.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS))
    assert b"retry" not in replayed
    rejected = wire.result_rejected(int(ErrorCode.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS))
    assert token_reply(rejected, hashed, "mine") == rejected


def test_token_reads_and_deletes_go_through_the_table_for_the_callers_own_tokens() -> None:
    driver, reader = _world()
    driver.as_root(CreatePersonalAccessToken("deploy", 0, token_hash("root's")))
    machine = MetadataMachine(driver.state)
    read = METADATA_READS[CommandCode.GET_PERSONAL_ACCESS_TOKENS]
    assert read(machine, wire.Empty(), reader, lambda *_: PartitionStats()) == b""
    listed = read(machine, wire.Empty(), driver.root_session, lambda *_: PartitionStats())
    assert wire.PersonalAccessTokens.decode(listed).tokens == (
        wire.PersonalAccessTokenInfo("deploy", 0),
    )
    delete = wire.PersonalAccessTokenRef("deploy")
    code = CommandCode.DELETE_PERSONAL_ACCESS_TOKEN
    assert ROUTES[code] is Route.METADATA_WRITE
    write = admit_metadata_write(driver.state, code, delete, reader, None)
    assert isinstance(write, MetadataWrite)
    assert write.command == DeletePersonalAccessToken("deploy")  # acts for the reader's user
    assert ROUTES[CommandCode.LOGIN_REGISTER_WITH_PAT] is Route.LOGIN
