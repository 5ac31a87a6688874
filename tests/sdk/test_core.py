"""The sans-IO core, synchronously: numbering, sessions, retries, routing, replies."""

from __future__ import annotations

import pytest

from sdk._cluster import PartitionGroup
from sdk._protocol import (
    ATTEMPTS_MAX,
    ConnectFailed,
    ConnectionLost,
    ExchangeTimedOut,
    SessionState,
)
from sdk.errors import (
    ConnectionFailed,
    ConsumerGroupMemberNotFound,
    InvalidFormat,
    RequestAlreadyApplied,
    RequestTimeout,
    SessionEvicted,
    StreamNotFound,
    TopicNotFound,
    TransientNotAccepted,
    Unauthenticated,
)
from sdk.types import ConsumerRef, Message
from sdk.wire import (
    Balanced,
    CommandCode,
    ConsumerGroupAssignment,
    EvictionReason,
    IggyErrorCode,
    LoginRegisterWithPat,
    MessagesKey,
    Operation,
    PartitionInfo,
    PollingStrategy,
    PollMessagesReply,
    SendConfirmation,
    SendMessagesReply,
    StreamDetails,
    StreamInfo,
    Streams,
    TopicDetails,
    TopicInfo,
)
from tests.sdk.script import (
    NODE_A,
    NODE_B,
    NODE_C,
    SESSION,
    Scripted,
    Sent,
    Trace,
    drive,
    evict,
    login_reply,
    make_core,
    ok,
    poll_partition,
    raw,
    send_partition,
    status,
)

STREAM = StreamDetails(StreamInfo(1, 0, 0, 0, 0, "s"))


def topic_details(partitions: int) -> TopicDetails:
    info = TopicInfo(0, 0, partitions, 0, 1, 0, 0, 0, "t")
    return TopicDetails(info, tuple(PartitionInfo(i, 0, 1, 0, 0, 0) for i in range(partitions)))


def confirmed(sent: Sent, *, view: int = 0, replica: int = 0) -> bytes:
    partition = send_partition(sent)
    reply = SendMessagesReply((SendConfirmation(1, 0, partition, 0),))
    return ok(sent, reply, view=view, replica=replica)


# --- request numbers and sessions ----------------------------------------------------------


def test_request_numbers_follow_the_official_sdk_register_reads_and_writes() -> None:
    state = SessionState()
    assert state.number_for(Operation.REGISTER) == 0
    assert state.number_for(Operation.NON_REPLICATED) == 1
    assert state.number_for(Operation.NON_REPLICATED) == 1
    assert state.number_for(Operation.CREATE_STREAM) == 1
    assert state.number_for(Operation.NON_REPLICATED) == 2
    assert state.number_for(Operation.SEND_MESSAGES) == 2
    assert state.number_for(Operation.STORE_CONSUMER_OFFSET) == 3
    assert state.number_for(Operation.LOGOUT) == 4
    assert state.next_request == 5


def test_calls_log_in_on_demand_and_a_refused_write_still_uses_its_number() -> None:
    core, _ = make_core()
    trace = Trace()
    server = Scripted({CommandCode.CREATE_STREAM: lambda s: ok(s, STREAM)})
    drive(core, core.create_stream("a"), server, trace=trace)
    server.handlers[CommandCode.CREATE_STREAM] = lambda s: status(s, IggyErrorCode.UNAUTHORIZED)
    with pytest.raises(Exception, match="unauthorized"):
        drive(core, core.create_stream("b"), server, trace=trace)
    server.handlers[CommandCode.CREATE_STREAM] = lambda s: ok(s, STREAM)
    drive(core, core.create_stream("c"), server, trace=trace)
    codes = trace.codes()
    assert codes[:2] == [CommandCode.LOGIN_REGISTER, CommandCode.GET_CLUSTER_METADATA]
    creates = [s.header for s in trace.sent if s.code is CommandCode.CREATE_STREAM]
    assert [h.request for h in creates] == [1, 2, 3]
    assert {h.session for h in creates} == {SESSION}
    assert len({s.header.client for s in trace.sent}) == 1


def test_a_replicated_call_without_credentials_or_session_fails_before_any_io() -> None:
    core, _ = make_core(credentials=False)
    trace = Trace()
    with pytest.raises(Unauthenticated):
        drive(core, core.create_stream("x"), Scripted(), trace=trace)
    assert trace.sent == []


def test_logout_forgets_client_id_counter_and_credentials() -> None:
    core, _ = make_core()
    drive(
        core,
        core.create_stream("a"),
        Scripted({CommandCode.CREATE_STREAM: lambda s: ok(s, STREAM)}),
    )
    assert core.session.client_id != 0
    drive(core, core.logout(), Scripted())
    assert (core.session.client_id, core.session.session, core.session.next_request) == (0, 0, 1)
    assert not core.has_credentials


def test_client_id_is_random_and_differs_between_cores() -> None:
    first, _ = make_core(seed=1)
    second, _ = make_core(seed=2)
    drive(first, first.ping(), Scripted())
    drive(second, second.ping(), Scripted())
    assert first.session.client_id != second.session.client_id != 0


# --- retries keep the request number --------------------------------------------------------


def test_a_timed_out_send_is_resent_byte_identical_under_the_same_request_number() -> None:
    core, clock = make_core()
    trace = Trace()
    attempts: list[Sent] = []

    def send(sent: Sent) -> bytes | ExchangeTimedOut:
        attempts.append(sent)
        if len(attempts) < 3:
            return ExchangeTimedOut(sent.address)
        return confirmed(sent)

    server = Scripted({CommandCode.SEND_MESSAGES: send})
    result = drive(core, core.send_messages(1, 0, [b"x"], 0), server, clock=clock, trace=trace)
    assert result == [SendConfirmation(1, 0, 0, 0)]
    assert len(attempts) == 3
    assert len({a.frame for a in attempts}) == 1
    assert {a.header.request for a in attempts} == {1}


def test_a_write_whose_connection_drops_is_retried_then_reports_unknown_outcome() -> None:
    core, clock = make_core(retry_deadline_s=2.0)
    server = Scripted({CommandCode.SEND_MESSAGES: lambda s: ConnectionLost(s.address)})
    trace = Trace()
    with pytest.raises(Exception) as raised:
        drive(core, core.send_messages(1, 0, [b"x"], 0), server, clock=clock, trace=trace)
    assert getattr(raised.value, "outcome_unknown", None) is True
    sends = [s for s in trace.sent if s.code is CommandCode.SEND_MESSAGES]
    assert len(sends) > 2
    assert {s.header.request for s in sends} == {1}
    assert all(b > 0 for b in trace.sleeps)


def test_timeouts_exhaust_the_deadline_into_request_timeout_with_unknown_outcome() -> None:
    core, clock = make_core(retry_deadline_s=3.0)
    server = Scripted({CommandCode.CREATE_STREAM: lambda s: ExchangeTimedOut(s.address)})
    with pytest.raises(RequestTimeout) as raised:
        drive(core, core.create_stream("x"), server, clock=clock)
    assert raised.value.outcome_unknown
    assert raised.value.retryable


def test_unreachable_nodes_back_off_instead_of_spinning_then_fail_to_connect() -> None:
    core, clock = make_core(seeds=(NODE_A, NODE_B), retry_deadline_s=2.0, credentials=False)
    trace = Trace()
    with pytest.raises(ConnectionFailed):
        drive(core, core.ping(), lambda s: ConnectFailed(s.address), clock=clock, trace=trace)
    assert trace.sleeps, "waited between rounds"
    assert len(trace.sent) < ATTEMPTS_MAX
    assert clock.now >= 2.0


def test_already_applied_after_a_retry_counts_as_delivered() -> None:
    core, clock = make_core()
    calls: list[Sent] = []

    def send(sent: Sent) -> bytes | ConnectionLost:
        calls.append(sent)
        if len(calls) == 1:
            return ConnectionLost(sent.address)
        return status(sent, IggyErrorCode.REQUEST_ALREADY_APPLIED)

    result = drive(
        core,
        core.send_messages(1, 0, [b"x"], 0),
        Scripted({CommandCode.SEND_MESSAGES: send}),
        clock=clock,
    )
    assert result == []
    assert calls[0].frame == calls[1].frame


def test_already_applied_on_a_first_attempt_is_an_error() -> None:
    core, _ = make_core()
    server = Scripted(
        {CommandCode.SEND_MESSAGES: lambda s: status(s, IggyErrorCode.REQUEST_ALREADY_APPLIED)}
    )
    with pytest.raises(RequestAlreadyApplied):
        drive(core, core.send_messages(1, 0, [b"x"], 0), server)


def test_transient_not_committed_waits_and_replays_the_same_request() -> None:
    core, clock = make_core()
    calls: list[Sent] = []

    def create(sent: Sent) -> bytes:
        calls.append(sent)
        if len(calls) == 1:
            return status(sent, IggyErrorCode.TRANSIENT_NOT_COMMITTED)
        return ok(sent, STREAM)

    trace = Trace()
    drive(
        core,
        core.create_stream("x"),
        Scripted({CommandCode.CREATE_STREAM: create}),
        clock=clock,
        trace=trace,
    )
    assert [c.header.request for c in calls] == [1, 1]
    assert trace.sleeps


def test_a_mismatched_reply_closes_the_connection_and_retries() -> None:
    core, _ = make_core()
    calls: list[Sent] = []

    def create(sent: Sent) -> bytes:
        calls.append(sent)
        if len(calls) == 1:
            from sdk.wire import RequestHeader, build_reply_frame

            wrong = RequestHeader(
                256, sent.header.client, 99, sent.header.session, sent.header.operation
            )
            return bytes(build_reply_frame(wrong))
        return ok(sent, STREAM)

    trace = Trace()
    drive(core, core.create_stream("x"), Scripted({CommandCode.CREATE_STREAM: create}), trace=trace)
    assert trace.disconnects == [NODE_A]
    assert len(calls) == 2


def test_a_persistently_malformed_reply_fails_as_invalid_format() -> None:
    core, _ = make_core()
    server = Scripted({CommandCode.GET_STREAM: lambda s: raw(s, b"\x01\x02")})
    with pytest.raises(InvalidFormat):
        drive(core, core.get_stream(1), server)


# --- evictions and sessions -----------------------------------------------------------------


def test_session_loss_registers_a_new_client_id_and_replays_the_request() -> None:
    """An eviction applies nothing, so a request evicted on its first attempt is sent
    again under a new session. The cluster's client table answers a Register from a known
    client id with the old session, so the new session needs a new client id."""
    core, _ = make_core()
    trace = Trace()
    server = Scripted({CommandCode.CREATE_STREAM: lambda s: ok(s, STREAM)})
    drive(core, core.create_stream("a"), server, trace=trace)
    client = core.session.client_id
    evicted: list[Sent] = []

    def once_evicted(sent: Sent) -> bytes:
        if not evicted:
            evicted.append(sent)
            return evict(sent, EvictionReason.NO_SESSION)
        return ok(sent, STREAM)

    server.handlers[CommandCode.CREATE_STREAM] = once_evicted
    drive(core, core.create_stream("b"), server, trace=trace)
    registers = [s for s in trace.sent if s.code is CommandCode.LOGIN_REGISTER]
    creates = [s for s in trace.sent if s.code is CommandCode.CREATE_STREAM]
    assert len(registers) == 2
    assert registers[0].header.client == client != registers[1].header.client
    assert [c.header.client for c in creates] == [client, client, registers[1].header.client]
    assert [c.header.request for c in creates] == [1, 2, 2]
    assert creates[1].header.session == SESSION and creates[2].header.session == SESSION + 1
    assert core.session.next_request == 3, "the counter keeps counting"


def test_session_loss_while_a_write_is_in_doubt_fails_it_instead_of_resending() -> None:
    """The first attempt may have been applied (its connection broke after the write);
    the retry is evicted. Re-sending under a new session could apply it twice, so the
    call fails with outcome_unknown and the next call registers a new client id."""
    core, clock = make_core()
    trace = Trace()
    server = Scripted({CommandCode.CREATE_STREAM: lambda s: ok(s, STREAM)})
    drive(core, core.create_stream("a"), server, clock=clock, trace=trace)
    client = core.session.client_id
    attempts: list[Sent] = []

    def lost_then_evicted(sent: Sent) -> bytes | ConnectionLost:
        attempts.append(sent)
        if len(attempts) == 1:
            return ConnectionLost(sent.address, "reset after the write")
        return evict(sent, EvictionReason.NO_SESSION)

    server.handlers[CommandCode.CREATE_STREAM] = lost_then_evicted
    with pytest.raises(SessionEvicted) as raised:
        drive(core, core.create_stream("b"), server, clock=clock, trace=trace)
    assert raised.value.outcome_unknown
    assert len(attempts) == 2 and {a.header.request for a in attempts} == {2}
    assert [s for s in trace.sent if s.code is CommandCode.LOGIN_REGISTER][1:] == []
    server.handlers[CommandCode.CREATE_STREAM] = lambda s: ok(s, STREAM)
    drive(core, core.create_stream("c"), server, clock=clock, trace=trace)
    registers = [s for s in trace.sent if s.code is CommandCode.LOGIN_REGISTER]
    assert len(registers) == 2 and registers[1].header.client not in (0, client)


def test_eviction_from_a_node_behind_a_fresh_register_moves_to_another_node() -> None:
    """After the call registered again, a node that has not applied that register evicts
    the new session; the request goes to another node instead of failing."""
    core, _ = make_core(seeds=(NODE_A, NODE_B))
    server = Scripted({CommandCode.CREATE_STREAM: lambda s: ok(s, STREAM)}, roster=[NODE_A, NODE_B])
    drive(core, core.create_stream("a"), server)
    seen: list[Sent] = []

    def behind_on_a(sent: Sent) -> bytes:
        seen.append(sent)
        if sent.address == NODE_A:
            return evict(sent, EvictionReason.NO_SESSION)
        return ok(sent, STREAM)

    server.handlers[CommandCode.CREATE_STREAM] = behind_on_a
    drive(core, core.create_stream("b"), server)
    assert [s.address for s in seen] == [NODE_A, NODE_A, NODE_B]
    assert seen[0].header.session != seen[1].header.session == seen[2].header.session


def test_unauthenticated_read_after_a_server_restart_logs_in_again() -> None:
    core, _ = make_core()
    server = Scripted(
        {CommandCode.GET_STREAMS: lambda s: ok(s, __import__("sdk.wire").wire.Streams())}
    )
    drive(core, core.get_streams(), server)
    failed: list[Sent] = []

    def forgetful(sent: Sent) -> bytes:
        if not failed:
            failed.append(sent)
            return status(sent, IggyErrorCode.UNAUTHENTICATED)
        from sdk.wire import Streams

        return ok(sent, Streams())

    server.handlers[CommandCode.GET_STREAMS] = forgetful
    trace = Trace()
    assert drive(core, core.get_streams(), server, trace=trace) == []
    assert trace.codes()[:2] == [CommandCode.GET_STREAMS, CommandCode.LOGIN_REGISTER]


def test_an_eviction_without_credentials_raises_session_evicted() -> None:
    core, _ = make_core(credentials=False)
    core.session.session = 7
    server = Scripted({CommandCode.GET_STATS: lambda s: evict(s, EvictionReason.STALE_CLIENT)})
    with pytest.raises(SessionEvicted) as raised:
        drive(core, core.get_stats(), server)
    assert raised.value.eviction is EvictionReason.STALE_CLIENT
    assert core.session.session == 0


# --- routing -----------------------------------------------------------------------------


def test_login_adopts_the_roster_and_sends_metadata_writes_to_the_leader() -> None:
    core, _ = make_core(seeds=(NODE_A,))
    server = Scripted(
        {CommandCode.CREATE_STREAM: lambda s: ok(s, STREAM)},
        roster=[NODE_A, NODE_B, NODE_C],
        leader=2,
    )
    trace = Trace()
    drive(core, core.create_stream("x"), server, trace=trace)
    assert core.cluster.nodes == [NODE_A, NODE_B, NODE_C]
    assert [s.address for s in trace.sent if s.code is CommandCode.CREATE_STREAM] == [NODE_C]


def test_not_accepted_rotates_to_the_next_node_and_remembers_the_partition_primary() -> None:
    core, _ = make_core()
    roster = [NODE_A, NODE_B, NODE_C]

    def send(sent: Sent) -> bytes:
        if sent.address != NODE_C:
            return status(sent, IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
        return confirmed(sent)

    server = Scripted({CommandCode.SEND_MESSAGES: send}, roster=roster, leader=0)
    trace = Trace()
    drive(core, core.send_messages("s", "t", [b"1"], 4), server, trace=trace)
    sends = [s.address for s in trace.sent if s.code is CommandCode.SEND_MESSAGES]
    assert sends == [NODE_A, NODE_B, NODE_C]
    assert core.cluster.cached_primary(PartitionGroup("s", "t", 4)) == NODE_C
    trace = Trace()
    drive(core, core.send_messages("s", "t", [b"2"], 4), server, trace=trace)
    assert [s.address for s in trace.sent] == [NODE_C]


def test_not_accepted_with_a_view_jumps_to_the_predicted_primary() -> None:
    """Group g's primary is (view + g) % n: one success teaches g % n, so after a view
    change the 58 reply's view names the new primary without trying every node."""
    core, _ = make_core()
    roster = [NODE_A, NODE_B, NODE_C]
    group = 4  # primary in view v is roster[(v + 4) % 3]
    view = {"v": 0}

    def send(sent: Sent) -> bytes:
        primary = roster[(view["v"] + group) % 3]
        index = roster.index(sent.address)
        if sent.address != primary:
            return status(sent, IggyErrorCode.TRANSIENT_NOT_ACCEPTED, view=view["v"], replica=index)
        return bytes(
            __import__("sdk.wire").wire.build_reply_frame(
                sent.header,
                SendMessagesReply((SendConfirmation(1, 0, 0, 0),)).encode(),
                view=view["v"],
                replica=index,
            )
        )

    server = Scripted({CommandCode.SEND_MESSAGES: send}, roster=roster)
    drive(core, core.send_messages("s", "t", [b"1"], 0), server)
    assert core.cluster.cached_primary(PartitionGroup("s", "t", 0)) == NODE_B
    view["v"] = 1  # primary moves to roster[(1 + 4) % 3] = NODE_C
    trace = Trace()
    drive(core, core.send_messages("s", "t", [b"2"], 0), server, trace=trace)
    assert [s.address for s in trace.sent] == [NODE_B, NODE_C]


def test_every_node_refusing_ends_as_transient_not_accepted_after_backing_off() -> None:
    core, clock = make_core(retry_deadline_s=1.0)
    server = Scripted(
        {CommandCode.SEND_MESSAGES: lambda s: status(s, IggyErrorCode.TRANSIENT_NOT_ACCEPTED)},
        roster=[NODE_A, NODE_B],
    )
    trace = Trace()
    with pytest.raises(TransientNotAccepted) as raised:
        drive(core, core.send_messages(1, 0, [b"x"], 0), server, clock=clock, trace=trace)
    assert raised.value.retryable
    assert trace.sleeps


def test_a_dead_metadata_primary_is_skipped_and_the_roster_refreshed_elsewhere() -> None:
    core, clock = make_core()
    roster = [NODE_A, NODE_B, NODE_C]
    leader = {"index": 0}

    def create(sent: Sent) -> bytes | ConnectFailed:
        if sent.address == NODE_A:
            return ConnectFailed(sent.address)
        if sent.address != roster[leader["index"]]:
            return status(sent, IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
        return ok(sent, STREAM)

    server = Scripted({CommandCode.CREATE_STREAM: create}, roster=roster)
    drive(core, core.login("iggy", "iggy"), server, clock=clock)
    leader["index"] = 1
    server.leader = 1
    trace = Trace()
    drive(core, core.create_stream("x"), server, clock=clock, trace=trace)
    assert trace.sent[-1].address == NODE_B
    assert core.cluster.metadata_primary == NODE_B
    assert CommandCode.GET_CLUSTER_METADATA in trace.codes()


# --- partitioning ------------------------------------------------------------------------


def test_balanced_sends_learn_the_partition_count_once_then_round_robin_from_zero() -> None:
    core, _ = make_core()
    server = Scripted(
        {
            CommandCode.GET_TOPIC: lambda s: ok(s, topic_details(3)),
            CommandCode.SEND_MESSAGES: confirmed,
        }
    )
    trace = Trace()
    for _ in range(4):
        drive(core, core.send_messages(1, 0, [b"x"], Balanced()), server, trace=trace)
    partitions = [send_partition(s) for s in trace.sent if s.code is CommandCode.SEND_MESSAGES]
    assert partitions == [0, 1, 2, 0]
    assert trace.codes().count(CommandCode.GET_TOPIC) == 1


def test_messages_key_picks_xxh32_modulo_partitions() -> None:
    import xxhash

    core, _ = make_core()
    server = Scripted(
        {
            CommandCode.GET_TOPIC: lambda s: ok(s, topic_details(7)),
            CommandCode.SEND_MESSAGES: confirmed,
        }
    )
    trace = Trace()
    drive(core, core.send_messages(1, 0, [b"x"], MessagesKey(b"customer-9")), server, trace=trace)
    sent = next(s for s in trace.sent if s.code is CommandCode.SEND_MESSAGES)
    assert send_partition(sent) == xxhash.xxh32_intdigest(b"customer-9") % 7


def test_sending_to_a_missing_topic_raises_topic_not_found() -> None:
    core, _ = make_core()
    server = Scripted({CommandCode.GET_TOPIC: lambda s: raw(s, b"")})
    with pytest.raises(TopicNotFound):
        drive(core, core.send_messages(1, "nope", [b"x"]), server)


def test_messages_without_id_get_a_random_nonzero_id_and_the_wall_clock() -> None:
    from sdk.wire import read_batch

    core, _ = make_core()
    trace = Trace()
    drive(
        core,
        core.send_messages(1, 0, [Message(b"a"), Message(b"b", id=5)], 0),
        Scripted({CommandCode.SEND_MESSAGES: confirmed}),
        trace=trace,
    )
    batch = trace.sent[-1].payload.batch  # type: ignore[union-attr]
    _, messages = read_batch(batch)
    assert messages[0].id != 0 and messages[1].id == 5
    assert messages[0].origin_timestamp == 1_700_000_000_000_000


# --- consumer groups ------------------------------------------------------------------------


def test_group_poll_without_partition_syncs_once_and_resyncs_on_the_sentinel() -> None:
    core, _ = make_core()
    assignments = iter([ConsumerGroupAssignment(1, (0, 1)), ConsumerGroupAssignment(2, (1,))])
    polls: list[int] = []

    def poll(sent: Sent) -> bytes:
        partition = poll_partition(sent)
        assert partition is not None
        polls.append(partition)
        if len(polls) == 2:
            return ok(sent, PollMessagesReply(0xFFFF_FFFF, 0, 0))
        return ok(sent, PollMessagesReply(partition, 0, 0))

    server = Scripted(
        {
            CommandCode.SYNC_CONSUMER_GROUP: lambda s: ok(s, next(assignments)),
            CommandCode.POLL_MESSAGES: poll,
        }
    )
    group = ConsumerRef.group("g")
    trace = Trace()
    for _ in range(2):
        drive(
            core,
            core.poll_messages(1, 0, consumer=group, strategy=PollingStrategy.next(), count=10),
            server,
            trace=trace,
        )
    codes = [
        c
        for c in trace.codes()
        if c in (CommandCode.SYNC_CONSUMER_GROUP, CommandCode.POLL_MESSAGES)
    ]
    assert codes == [
        CommandCode.SYNC_CONSUMER_GROUP,
        CommandCode.POLL_MESSAGES,
        CommandCode.POLL_MESSAGES,
        CommandCode.SYNC_CONSUMER_GROUP,
        CommandCode.POLL_MESSAGES,
    ]
    assert polls == [0, 1, 1]


def test_group_poll_by_a_non_member_raises_member_not_found() -> None:
    core, _ = make_core()
    server = Scripted({CommandCode.SYNC_CONSUMER_GROUP: lambda s: raw(s, b"")})
    with pytest.raises(ConsumerGroupMemberNotFound):
        drive(
            core,
            core.poll_messages(
                1, 0, consumer=ConsumerRef.group("g"), strategy=PollingStrategy.next(), count=1
            ),
            server,
        )


def test_a_committed_rejection_raises_the_typed_error_with_its_code() -> None:
    from sdk.wire import result_rejected

    core, _ = make_core()
    server = Scripted(
        {
            CommandCode.DELETE_STREAM: lambda s: raw(
                s, result_rejected(IggyErrorCode.STREAM_ID_NOT_FOUND)
            )
        }
    )
    with pytest.raises(StreamNotFound) as raised:
        drive(core, core.delete_stream(9), server)
    assert raised.value.code == 1009


def test_partition_route_reads_prefer_the_cached_primary() -> None:
    core, _ = make_core()
    core.cluster.nodes = [NODE_A, NODE_B]
    core.cluster.on_primary(PartitionGroup(1, 0, 3), NODE_B, 0)
    trace = Trace()
    server = Scripted(
        {CommandCode.POLL_MESSAGES: lambda s: ok(s, PollMessagesReply(3, 0, 0))},
        roster=[NODE_A, NODE_B],
    )
    drive(
        core,
        core.poll_messages(
            1,
            0,
            consumer=ConsumerRef.single(1),
            strategy=PollingStrategy.first(),
            count=1,
            partition_id=3,
        ),
        server,
        trace=trace,
    )
    assert trace.sent[-1].address == NODE_B


def test_a_token_login_registers_with_45_and_logs_in_again_with_the_token() -> None:
    """A session opened with a token is re-opened with the token (never with the
    settings' password) when the node forgets it, and the token stays out of reprs."""
    core, _ = make_core(credentials=False)
    sessions = iter(range(SESSION, SESSION + 10))
    forgot: list[Sent] = []

    def forgetful(sent: Sent) -> bytes:
        if not forgot:
            forgot.append(sent)
            return status(sent, IggyErrorCode.UNAUTHENTICATED)
        return ok(sent, Streams())

    server = Scripted(
        {
            CommandCode.LOGIN_REGISTER_WITH_PAT: lambda s: login_reply(s, next(sessions)),
            CommandCode.GET_STREAMS: forgetful,
        }
    )
    trace = Trace()
    drive(core, core.login_with_personal_access_token("secret-token"), server, trace=trace)
    assert drive(core, core.get_streams(), server, trace=trace) == []
    registers = [s for s in trace.sent if s.header.operation is Operation.REGISTER]
    assert [s.code for s in registers] == [CommandCode.LOGIN_REGISTER_WITH_PAT] * 2
    tokens = [s.payload.token for s in registers if isinstance(s.payload, LoginRegisterWithPat)]
    assert tokens == ["secret-token"] * 2
    assert core.session.session == SESSION + 1
    assert "secret-token" not in repr(core.credentials)


def test_a_token_in_the_settings_logs_in_by_itself_with_45() -> None:
    """``ClientConfig(token=...)`` (a connection string's ``iggy://TOKEN@...``) is
    what the core logs in with on the first call that needs a session."""
    core, _ = make_core(credentials=False, token="settings-token")
    server = Scripted(
        {
            CommandCode.LOGIN_REGISTER_WITH_PAT: lambda s: login_reply(s, SESSION),
            CommandCode.GET_STREAMS: lambda s: ok(s, Streams()),
        }
    )
    trace = Trace()
    assert core.has_credentials
    assert drive(core, core.get_streams(), server, trace=trace) == []
    registers = [s for s in trace.sent if s.header.operation is Operation.REGISTER]
    assert [s.code for s in registers] == [CommandCode.LOGIN_REGISTER_WITH_PAT]
    assert isinstance(registers[0].payload, LoginRegisterWithPat)
    assert registers[0].payload.token == "settings-token"
