"""The trio client against the fake cluster over real loopback TCP."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
import trio
import trio.testing

from sdk import AsyncClient, ConsumerRef, Message, Partitioning, PollingStrategy
from sdk.errors import (
    ClientClosed,
    ConnectionFailed,
    InvalidCredentials,
    StreamAlreadyExists,
    TopicNotFound,
)
from sdk.wire import CommandCode
from tests.sdk.conftest import run_trio, url
from tests.sdk.fake_server import FakeCluster


def test_trio_client_every_call_round_trips(fake: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            await client.ping()
            assert client.session != 0 and client.client_id != 0
            assert (await client.get_me()).user_id == 1
            assert len((await client.get_cluster_metadata()).nodes) == 1
            stream = await client.create_stream("orders", options={"retention": "7d"})
            assert stream.stream.name == "orders"
            with pytest.raises(StreamAlreadyExists):
                await client.create_stream("orders")
            await client.update_stream("orders", "orders2")
            assert (await client.get_stream("orders2")) is not None
            assert [s.name for s in await client.get_streams()] == ["orders2"]
            topic = await client.create_topic(
                "orders2",
                "events",
                2,
                message_expiry=timedelta(hours=1),
                max_topic_size="unlimited",
            )
            assert topic.topic.partitions_count == 2
            await client.update_topic("orders2", "events", "events", compression_algorithm="gzip")
            assert [t.name for t in await client.get_topics("orders2")] == ["events"]
            await client.create_partitions("orders2", "events", 2)
            await client.delete_partitions("orders2", "events", 1)
            assert len(await client.get_partitions("orders2", "events")) == 3
            assert (await client.get_partition("orders2", "events", 2)) is not None
            assert (await client.get_partition("orders2", "events", 7)) is None

            sent = await client.send_messages(
                "orders2", "events", [Message(b"a", headers={"k": "v"}), b"b", "c"], 1
            )
            assert sent[0].partition_id == 1 and sent[0].base_offset == 0
            await client.send_messages("orders2", "events", [b"d"], Partitioning.balanced())
            await client.send_messages("orders2", "events", [b"e"], Partitioning.messages_key("k"))
            me = ConsumerRef.single(7)
            polled = await client.poll_messages(
                "orders2",
                "events",
                consumer=me,
                polling_strategy=PollingStrategy.first(),
                count=10,
                partition_id=1,
            )
            assert [m.payload for m in polled.messages][:3] == [b"a", b"b", b"c"]
            assert polled.messages[0].headers == {"k": "v"}
            await client.store_consumer_offset("orders2", "events", 1, consumer=me, partition_id=1)
            offset = await client.get_consumer_offset(
                "orders2", "events", consumer=me, partition_id=1
            )
            assert offset is not None and offset.stored_offset == 1
            polled = await client.poll_messages(
                "orders2",
                "events",
                consumer=me,
                polling_strategy=PollingStrategy.next(),
                count=10,
                partition_id=1,
            )
            assert [m.offset for m in polled.messages][:1] == [2]
            await client.delete_consumer_offset("orders2", "events", consumer=me, partition_id=1)
            assert (
                await client.get_consumer_offset("orders2", "events", consumer=me, partition_id=1)
                is None
            )

            group = await client.create_consumer_group("orders2", "events", "workers")
            assert group.group.name == "workers"
            await client.join_consumer_group("orders2", "events", "workers")
            assignment = await client.sync_consumer_group("orders2", "events", "workers")
            assert assignment is not None and sorted(assignment.partitions) == [0, 1, 2]
            details = await client.get_consumer_group("orders2", "events", "workers")
            assert details is not None and details.group.members_count == 1
            assert [g.name for g in await client.get_consumer_groups("orders2", "events")] == [
                "workers"
            ]
            polled = await client.poll_messages(
                "orders2",
                "events",
                consumer=ConsumerRef.group("workers"),
                polling_strategy=PollingStrategy.next(),
                count=10,
            )
            assert polled.partition_id in (0, 1, 2)
            await client.leave_consumer_group("orders2", "events", "workers")
            await client.delete_consumer_group("orders2", "events", "workers")
            stats = await client.get_stats()
            assert stats.messages_count == 5 and stats.streams_count == 1
            await client.purge_topic("orders2", "events")
            await client.purge_stream("orders2")
            await client.delete_topic("orders2", "events")
            with pytest.raises(TopicNotFound):
                await client.get_partitions("orders2", "events")
            await client.delete_stream("orders2")
        assert not fake.clients, "closing the client logged out"

    run_trio(body)


def test_trio_client_sets_tcp_nodelay(fake: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            (connection,) = client._connections.values()
            assert connection.sock is not None
            assert connection.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    run_trio(body)


def test_frames_larger_than_the_socket_buffers_go_and_come_whole(fake: FakeCluster) -> None:
    """The plain-TCP path writes and reads the socket directly: a request the kernel takes
    only in part is finished by a waiting send, and a reply is read over many readable
    turns. Socket buffers of 64 KiB force both for 2 MB each way."""
    payloads = [bytes([k]) * 300_000 for k in range(1, 8)]

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            await client.create_stream("big")
            await client.create_topic("big", "events", 1)
            (connection,) = client._connections.values()
            assert connection.sock is not None
            connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            await client.send_messages("big", "events", payloads, 0)
            polled = await client.poll_messages(
                "big",
                "events",
                consumer=ConsumerRef.single(1),
                polling_strategy=PollingStrategy.offset(0),
                count=len(payloads),
                partition_id=0,
            )
            assert [bytes(view) for view in polled.payloads()] == payloads
            assert [m.offset for m in polled.messages] == list(range(len(payloads)))
            assert list(client._connections.values()) == [connection]  # never redialled

    run_trio(body)


def test_trio_client_retries_a_read_whose_reply_never_came(fake: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            fake.add_fault("drop_reply", code=CommandCode.GET_STREAMS, times=2)
            assert await client.get_streams() == []
            assert len(fake.requests_of(CommandCode.GET_STREAMS)) == 3

    run_trio(body)


def test_cancelling_a_call_closes_its_connection_and_the_next_call_redials(
    fake: FakeCluster,
) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            fake.add_fault("delay", code=CommandCode.GET_STATS, delay_s=0.5)
            with trio.move_on_after(0.1):
                await client.get_stats()
            assert client._connections == {}
            await client.ping()
            assert len(client._connections) == 1

    run_trio(body)


def test_concurrent_calls_on_one_client_take_turns_in_arrival_order(
    fake: FakeCluster,
) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            fake.add_fault("delay", code=CommandCode.GET_STATS, delay_s=0.3)
            finished: list[str] = []

            async def call(name: str) -> None:
                if name == "stats":
                    await client.get_stats()
                else:
                    await client.get_streams()
                finished.append(name)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "stats")
                await trio.testing.wait_all_tasks_blocked()
                held = client._busy  # the stats call holds the session, awaiting its reply
                assert held
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await client.get_streams()  # cancelled while it waits its turn
                nursery.start_soon(call, "first")
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(call, "second")
            assert finished == ["stats", "first", "second"]
            assert not client._busy
            assert len(client._connections) == 1  # the cancelled waiter sent nothing

    run_trio(body)


def test_trio_client_fails_over_when_the_node_it_uses_dies(fake3: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake3)) as client:
            await client.create_stream("s")
            fake3.kill(0)  # the metadata primary
            fake3.view_change(0)  # node 1 leads now
            await client.create_stream("t")
            assert client._core.cluster.metadata_primary.port == fake3.nodes[1].port
            assert {s.name for s in await client.get_streams()} == {"s", "t"}

    run_trio(body)


def test_trio_client_reconnects_to_a_revived_node(fake: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake, retry_deadline="5s")) as client:
            await client.ping()
            fake.kill(0)

            async def revive_soon() -> None:
                await trio.sleep(0.3)
                fake.revive(0)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(revive_soon)
                await client.get_streams()

    run_trio(body)


def test_unreachable_cluster_raises_connection_failed_within_the_deadline() -> None:
    async def body() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        client = AsyncClient.from_connection_string(
            f"iggy://iggy:iggy@127.0.0.1:{port}?retry_deadline=500ms&reconnection_interval=10ms"
        )
        start = trio.current_time()
        with pytest.raises(ConnectionFailed):
            await client.ping()
        assert trio.current_time() - start < 5

    run_trio(body)


def test_wrong_password_raises_invalid_credentials(fake: FakeCluster) -> None:
    async def body() -> None:
        client = AsyncClient.from_connection_string(url(fake).replace("iggy:iggy", "iggy:nope"))
        with pytest.raises(InvalidCredentials):
            await client.connect()
        await client.close()

    run_trio(body)


def test_a_closed_client_refuses_calls(fake: FakeCluster) -> None:
    async def body() -> None:
        client = AsyncClient.from_connection_string(url(fake))
        await client.connect()
        await client.close()
        await client.close()
        with pytest.raises(ClientClosed):
            await client.ping()

    run_trio(body)


def test_new_sessions_are_independent_and_reuse_the_credentials(fake: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            other = client.new_session()
            await other.get_streams()
            assert other.client_id != client.client_id
            assert other.session not in (0, client.session)
            await other.close()

    run_trio(body)


def test_silent_nodes_time_out_each_exchange_at_its_own_deadline_and_drop_its_connection() -> None:
    # A node that accepts and never answers; two clients with different attempt
    # timeouts in one run: the later, shorter deadline must fire first, so the run's
    # timekeeper (asleep until the longer one) is woken early.
    from sdk._protocol import Exchange, ExchangeTimedOut
    from sdk.connection_string import ClientConfig, NodeAddress

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    address = NodeAddress("127.0.0.1", listener.getsockname()[1])
    ended: dict[str, float] = {}

    async def body() -> None:
        slow = AsyncClient(ClientConfig(seeds=(address,)))
        quick = AsyncClient(ClientConfig(seeds=(address,)))
        started = trio.current_time()

        async def exchange(name: str, client: AsyncClient, timeout_s: float) -> None:
            with pytest.raises(ExchangeTimedOut):
                await client._exchange(Exchange(address, b"\0" * 256, timeout_s, 1.0))
            ended[name] = trio.current_time() - started
            assert client._connections == {}

        async with trio.open_nursery() as nursery:
            nursery.start_soon(exchange, "slow", slow, 10.0)
            await trio.sleep(0.5)
            nursery.start_soon(exchange, "quick", quick, 1.0)

    try:
        trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        listener.close()
    assert 1.5 <= ended["quick"] < 1.6  # started at 0.5, 1 s to answer
    assert 10.0 <= ended["slow"] < 10.1


def test_a_client_used_again_in_another_trio_run_still_times_out_a_lost_reply(
    fake: FakeCluster,
) -> None:
    # Its connection was dialled in the first run; the second run's timekeeper must
    # still end the exchange whose reply never comes (request_timeout 250 ms).
    client = AsyncClient.from_connection_string(url(fake))
    trio.run(client.connect)

    async def second() -> None:
        fake.add_fault("drop_reply", code=CommandCode.GET_STREAMS, times=1)
        with trio.fail_after(10):
            assert await client.get_streams() == []
        await client.close()

    trio.run(second)
    assert len(fake.requests_of(CommandCode.GET_STREAMS)) == 2
