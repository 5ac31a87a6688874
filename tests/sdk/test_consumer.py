"""High-level consumers (trio and blocking) against the fake cluster."""

from __future__ import annotations

import threading
import time

import trio

from sdk import AsyncClient, AutoCommit, Client, ConsumerRef, Message, PollingStrategy
from sdk.wire import LONG_POLL_CODE, CommandCode
from tests.sdk.conftest import run_trio, url
from tests.sdk.fake_server import FakeCluster


def fill(cluster: FakeCluster, partitions: int, per_partition: int) -> None:
    with Client.from_connection_string(url(cluster)) as client:
        client.create_stream("s")
        client.create_topic("s", "t", partitions)
        for partition in range(partitions if per_partition else 0):
            messages = [
                Message(f"{partition}:{i}".encode(), id=partition * 1000 + i + 1)
                for i in range(per_partition)
            ]
            client.send_messages("s", "t", messages, partition)


def stored(cluster: FakeCluster, consumer: ConsumerRef, partitions: int) -> dict[int, int]:
    with Client.from_connection_string(url(cluster)) as client:
        offsets = {}
        for partition in range(partitions):
            info = client.get_consumer_offset("s", "t", consumer=consumer, partition_id=partition)
            if info is not None:
                offsets[partition] = info.stored_offset
        return offsets


async def take(consumer: object, count: int) -> list[bytes]:
    got: list[bytes] = []
    with trio.fail_after(10):
        async for message in consumer:  # type: ignore[attr-defined]
            got.append(message.payload)
            if len(got) == count:
                break
    return got


def test_trio_single_consumer_reads_every_partition_and_commits_after_each_batch(
    fake: FakeCluster,
) -> None:
    fill(fake, partitions=3, per_partition=25)

    async def body() -> list[bytes]:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.consumer(
                "s", "t", consumer_id=5, batch_length=10, auto_commit=AutoCommit.after_each_batch()
            ) as consumer,
        ):
            return await take(consumer, 75)

    got = run_trio(body)
    assert sorted(got) == sorted(f"{p}:{i}".encode() for p in range(3) for i in range(25))
    for partition in range(3):
        mine = [g for g in got if g.startswith(f"{partition}:".encode())]
        assert mine == [f"{partition}:{i}".encode() for i in range(25)], "in order per partition"
    assert stored(fake, ConsumerRef.single(5), 3) == {0: 24, 1: 24, 2: 24}


def test_a_consumer_resumes_after_the_stored_offset(fake: FakeCluster) -> None:
    fill(fake, partitions=1, per_partition=10)

    async def body() -> tuple[list[bytes], list[bytes]]:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            async with client.consumer("s", "t", consumer_id="c") as first:
                head = await take(first, 4)
            async with client.consumer("s", "t", consumer_id="c") as second:
                tail = await take(second, 6)
            return head, tail

    head, tail = run_trio(body)
    assert head == [f"0:{i}".encode() for i in range(4)]
    assert tail == [f"0:{i}".encode() for i in range(4, 10)]


def test_disabled_auto_commit_stores_only_on_explicit_commit(fake: FakeCluster) -> None:
    fill(fake, partitions=1, per_partition=5)

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            async with client.consumer(
                "s", "t", consumer_id=1, auto_commit=AutoCommit.disabled()
            ) as consumer:
                await take(consumer, 3)
            assert stored(fake, ConsumerRef.single(1), 1) == {}
            async with client.consumer(
                "s", "t", consumer_id=1, auto_commit=AutoCommit.disabled()
            ) as consumer:
                await take(consumer, 2)
                assert await consumer.commit() == 1
            assert stored(fake, ConsumerRef.single(1), 1) == {0: 1}

    run_trio(body)


def test_interval_auto_commit_stores_while_iterating(fake: FakeCluster) -> None:
    fill(fake, partitions=1, per_partition=3)

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            consumer = client.consumer(
                "s", "t", consumer_id=2, auto_commit=AutoCommit.interval(0.05), batch_length=1
            )
            async with consumer:
                await take(consumer, 2)
                await trio.sleep(0.1)
                with trio.move_on_after(0.5):
                    await consumer.__anext__()
                assert consumer.committed_offsets == {0: 1}

    run_trio(body)


def test_a_message_being_handled_when_the_body_fails_is_not_committed(fake: FakeCluster) -> None:
    fill(fake, partitions=1, per_partition=3)

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            try:
                async with client.consumer(
                    "s", "t", consumer_id=3, auto_commit=AutoCommit.after_each_batch()
                ) as consumer:
                    async for message in consumer:
                        if message.offset == 1:
                            raise RuntimeError("handler failed")
            except RuntimeError:
                pass

    run_trio(body)
    assert stored(fake, ConsumerRef.single(3), 1) == {}


def test_an_idle_consumer_backs_off_instead_of_busy_polling(fake: FakeCluster) -> None:
    fill(fake, partitions=1, per_partition=0)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.consumer(
                "s", "t", poll_interval_min_s=0.01, poll_interval_max_s=0.2
            ) as consumer,
        ):
            with trio.move_on_after(1.0):
                await consumer.__anext__()

    run_trio(body)
    # 10, 20, 40, 80, 160, then 200 ms: about 9 rounds in a second, not thousands.
    assert 4 <= len(fake.requests_of(CommandCode.POLL_MESSAGES)) <= 15
    # The fake answers viewstream's long poll as Iggy's server does (InvalidCommand):
    # the consumer tried it once, then backed off between ordinary polls.
    assert fake.unknown_codes == [LONG_POLL_CODE]


def test_a_consumer_with_long_polls_off_never_sends_one(fake: FakeCluster) -> None:
    fill(fake, partitions=1, per_partition=0)

    async def body() -> None:
        async with (
            AsyncClient.from_connection_string(url(fake)) as client,
            client.consumer(
                "s", "t", poll_interval_min_s=0.01, poll_interval_max_s=0.2, long_poll=False
            ) as consumer,
        ):
            with trio.move_on_after(0.5):
                await consumer.__anext__()

    run_trio(body)
    assert fake.unknown_codes == []
    assert len(fake.requests_of(CommandCode.POLL_MESSAGES)) >= 2


def test_group_members_split_partitions_and_rebalance_when_one_leaves(fake: FakeCluster) -> None:
    fill(fake, partitions=4, per_partition=10)

    async def body() -> tuple[list[int], list[int], list[bytes]]:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            settings = {
                "group": "workers",
                "batch_length": 5,
                "sync_interval_s": 0.05,
                "auto_commit": AutoCommit.after_each_batch(),
            }
            first = client.consumer("s", "t", **settings)  # type: ignore[arg-type]
            second = client.consumer("s", "t", **settings)  # type: ignore[arg-type]
            await first.open()
            await second.open()
            await trio.sleep(0.06)
            # The first poll syncs: the second member's arrival halved the first's share.
            got = [(await first.__anext__()).payload]
            split = sorted(first.assigned_partitions)
            other = sorted(second.assigned_partitions)
            await second.close()
            await trio.sleep(0.06)
            got += await take(first, 39)
            whole = sorted(first.assigned_partitions)
            await first.close()
            return split + other, whole, got

    both, whole, got = run_trio(body)
    assert sorted(both) == [0, 1, 2, 3]
    assert whole == [0, 1, 2, 3]
    assert len(set(got)) == 40, "after the rebalance the survivor reads every partition"
    assert fake.group_members("s", "t", "workers") == []


def test_group_consumer_creates_the_group_and_commits_as_the_group(fake: FakeCluster) -> None:
    fill(fake, partitions=2, per_partition=3)

    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            async with client.consumer(
                "s", "t", group="fresh", auto_commit=AutoCommit.after_each_batch()
            ) as consumer:
                await take(consumer, 6)
            assert (await client.get_consumer_group("s", "t", "fresh")) is not None

    run_trio(body)
    assert stored(fake, ConsumerRef.group("fresh"), 2) == {0: 2, 1: 2}


def test_blocking_consumer_iterates_and_stops_when_closed_from_another_thread(
    fake: FakeCluster,
) -> None:
    fill(fake, partitions=2, per_partition=5)
    with Client.from_connection_string(url(fake)) as client:
        consumer = client.consumer(
            "s", "t", group="g", poll_interval_min_s=0.01, poll_interval_max_s=0.05
        )
        got: list[bytes] = []

        def read() -> None:
            for message in consumer:
                got.append(message.payload)

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 5
        while len(got) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        consumer.close()
        reader.join(5)
        assert not reader.is_alive()
    assert sorted(got) == sorted(f"{p}:{i}".encode() for p in range(2) for i in range(5))
    assert stored(fake, ConsumerRef.group("g"), 2) == {0: 4, 1: 4}


def test_blocking_consumer_with_a_start_strategy_and_explicit_partitions(fake: FakeCluster) -> None:
    fill(fake, partitions=3, per_partition=4)
    with (
        Client.from_connection_string(url(fake)) as client,
        client.consumer(
            "s", "t", partition_ids=[2], start=PollingStrategy.offset(2), consumer_id=9
        ) as consumer,
    ):
        got = [next(consumer).payload for _ in range(2)]
    assert got == [b"2:2", b"2:3"]
