"""High-level producers (trio tasks and threads) against the fake cluster."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from sdk import AsyncClient, Backpressure, Client, Message
from sdk.errors import ProducerBufferFull, ProducerClosed, ProducerSendError
from sdk.wire import CommandCode, IggyErrorCode
from tests.sdk.conftest import run_trio, url
from tests.sdk.fake_server import FakeCluster


def payloads(cluster: FakeCluster, partition: int = 0) -> list[bytes]:
    return [m[2] for m in cluster.messages("s", "t", partition)]


def setup_topic(cluster: FakeCluster, partitions: int = 1) -> None:
    with Client.from_connection_string(url(cluster)) as client:
        client.create_stream("s")
        client.create_topic("s", "t", partitions)


# --- trio ------------------------------------------------------------------------------------


def test_trio_producer_batches_by_count_and_keeps_order(fake: FakeCluster) -> None:
    setup_topic(fake)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.producer("s", "t", batch_length=10, linger_s=5.0) as producer,
        ):
            for i in range(95):
                await producer.send(f"{i}")
        stats = producer.statistics()
        assert stats.messages_sent == 95 and stats.batches_sent == 10
        assert stats.buffered_bytes == 0

    run_trio(body)
    assert payloads(fake) == [f"{i}".encode() for i in range(95)]


def test_trio_producer_sends_a_lone_message_after_the_linger_time(fake: FakeCluster) -> None:
    setup_topic(fake)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.producer("s", "t", linger_s=0.05) as producer,
        ):
            await producer.send(b"lonely")
            await trio.sleep(0.5)
            assert producer.statistics().messages_sent == 1

    run_trio(body)
    assert payloads(fake) == [b"lonely"]


def test_trio_producer_batches_by_bytes(fake: FakeCluster) -> None:
    setup_topic(fake)

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            size = 48 + 100
            async with client.producer(
                "s", "t", batch_length=1000, batch_size_bytes=3 * size, linger_s=5.0
            ) as producer:
                for _ in range(9):
                    await producer.send(bytes(100))
            assert producer.statistics().batches_sent == 3

    run_trio(body)


def test_trio_producer_keeps_several_batches_in_flight_on_separate_sessions(
    fake: FakeCluster,
) -> None:
    setup_topic(fake, partitions=4)
    fake.add_fault("delay", code=CommandCode.SEND_MESSAGES, delay_s=0.1, times=1000)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.producer("s", "t", max_in_flight=4, batch_length=5, linger_s=0.001) as producer,
        ):
            for i in range(80):
                await producer.send(Message(b"x", id=i + 1))

    run_trio(body)
    sends = fake.requests_of(CommandCode.SEND_MESSAGES)
    assert len({r.client for r in sends}) == 4
    assert fake.in_progress_max >= 4
    ids = sorted(m[1] for p in range(4) for m in fake.messages("s", "t", p))
    assert ids == list(range(1, 81))


def test_trio_backpressure_fail_raises_when_the_buffer_is_full(fake: FakeCluster) -> None:
    setup_topic(fake)
    fake.add_fault("delay", code=CommandCode.SEND_MESSAGES, delay_s=0.3, times=100)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake, request_timeout="3s")) as client,
            client.producer(
                "s", "t", buffer_size_bytes=500, linger_s=0.0, backpressure=Backpressure.fail()
            ) as producer,
        ):
            with pytest.raises(ProducerBufferFull):
                for _ in range(20):
                    await producer.send(bytes(100))

    run_trio(body)


def test_trio_backpressure_block_with_timeout_gives_up_after_the_timeout(fake: FakeCluster) -> None:
    setup_topic(fake)
    fake.add_fault("delay", code=CommandCode.SEND_MESSAGES, delay_s=1.0, times=100)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake, request_timeout="3s")) as client,
            client.producer(
                "s",
                "t",
                buffer_size_bytes=200,
                linger_s=0.0,
                backpressure=Backpressure.block_with_timeout(0.1),
            ) as producer,
        ):
            await producer.send(bytes(100))
            start = trio.current_time()
            with pytest.raises(ProducerBufferFull):
                await producer.send(bytes(100))
            assert trio.current_time() - start >= 0.1

    run_trio(body)


def test_trio_backpressure_block_waits_for_room(fake: FakeCluster) -> None:
    setup_topic(fake)
    fake.add_fault("delay", code=CommandCode.SEND_MESSAGES, delay_s=0.05, times=100)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.producer("s", "t", buffer_size_bytes=200, linger_s=0.0) as producer,
        ):
            for i in range(5):
                await producer.send(f"{i}")
            assert producer.statistics().buffered_bytes <= 200

    run_trio(body)
    assert payloads(fake) == [f"{i}".encode() for i in range(5)]


def test_trio_flush_raises_failed_batches_and_close_is_idempotent(fake: FakeCluster) -> None:
    setup_topic(fake)
    fake.add_fault(
        "status", code=CommandCode.SEND_MESSAGES, status=IggyErrorCode.TOO_BIG_MESSAGE_PAYLOAD
    )

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            producer_context = client.producer("s", "t", linger_s=0.0)
            async with producer_context as producer:
                await producer.send(b"refused")
                with pytest.raises(ProducerSendError) as raised:
                    await producer.flush()
                (failure,) = raised.value.failures
                assert failure[:2] == (0, 1) and failure[2].code == 4022
                await producer.send(b"fine")
                await producer.flush()
            await producer.aclose()
            with pytest.raises(ProducerClosed):
                await producer.send(b"late")

    run_trio(body)
    assert payloads(fake) == [b"fine"]


def test_trio_producer_leaving_by_an_exception_drops_the_buffer(fake: FakeCluster) -> None:
    setup_topic(fake)

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            with pytest.raises(RuntimeError):
                async with client.producer("s", "t", linger_s=10.0) as producer:
                    await producer.send(b"never")
                    raise RuntimeError("stop")

    run_trio(body)
    assert payloads(fake) == []


def test_trio_producer_keyed_messages_go_to_the_key_partition(fake: FakeCluster) -> None:
    setup_topic(fake, partitions=3)
    import xxhash

    from sdk import Partitioning

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.producer("s", "t") as producer,
        ):
            await producer.send(b"a", b"b", partitioning=Partitioning.messages_key("user-1"))

    run_trio(body)
    assert payloads(fake, xxhash.xxh32_intdigest(b"user-1") % 3) == [b"a", b"b"]


# --- threads -----------------------------------------------------------------------------------


def test_blocking_producer_batches_flushes_and_closes(fake: FakeCluster) -> None:
    setup_topic(fake, partitions=2)
    with Client.from_connection_string(url(fake)) as client:
        with client.producer("s", "t", batch_length=10, max_in_flight=2, linger_s=5.0) as producer:
            for i in range(50):
                producer.send(Message(f"{i}".encode(), id=i + 1))
            producer.flush()
            assert producer.statistics().messages_sent == 50
        with pytest.raises(ProducerClosed):
            producer.send(b"late")
    ids = sorted(m[1] for p in range(2) for m in fake.messages("s", "t", p))
    assert ids == list(range(1, 51))


def test_blocking_backpressure_modes(fake: FakeCluster) -> None:
    setup_topic(fake)
    fake.add_fault("delay", code=CommandCode.SEND_MESSAGES, delay_s=0.3, times=100)
    with Client.from_connection_string(url(fake, request_timeout="3s")) as client:
        producer = client.producer(
            "s", "t", buffer_size_bytes=200, linger_s=0.0, backpressure=Backpressure.fail()
        )
        producer.send(bytes(100))
        with pytest.raises(ProducerBufferFull):
            producer.send(bytes(100))
        producer.close()
        timed = client.producer(
            "s",
            "t",
            buffer_size_bytes=200,
            linger_s=0.0,
            backpressure=Backpressure.block_with_timeout(0.05),
        )
        timed.send(bytes(100))
        start = time.monotonic()
        with pytest.raises(ProducerBufferFull):
            timed.send(bytes(100))
        assert time.monotonic() - start >= 0.05
        timed.close()
        blocking = client.producer("s", "t", buffer_size_bytes=200, linger_s=0.0)
        for _ in range(3):
            blocking.send(bytes(100))
        blocking.close()
    assert len(payloads(fake)) == 5


def test_blocking_producer_is_safe_to_feed_from_several_threads(fake: FakeCluster) -> None:
    setup_topic(fake, partitions=3)
    with (
        Client.from_connection_string(url(fake)) as client,
        client.producer("s", "t", max_in_flight=3, batch_length=7, linger_s=0.001) as producer,
    ):

        def feed(start: int) -> None:
            for i in range(start, start + 100):
                producer.send(Message(b"t", id=i))

        threads = [threading.Thread(target=feed, args=(1 + 100 * k,)) for k in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    ids = sorted(m[1] for p in range(3) for m in fake.messages("s", "t", p))
    assert ids == list(range(1, 301))
