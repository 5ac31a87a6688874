"""Exactly-once on retries, against the fake cluster's client table.

A send whose reply is lost (dropped, connection closed, primary crashed after applying
it) is retried by the SDK under the same client id, session and request number; the
cluster answers the retry from its client table instead of appending again. Every test
checks both sides: each message is in the log exactly once, and the fake really saw the
same request more than once (so the mechanism, not luck, kept it single).
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import trio

from sdk import AsyncClient, Client, Message
from sdk.errors import SessionEvicted
from sdk.wire import CommandCode, EvictionReason
from tests.sdk.conftest import run_trio, url
from tests.sdk.fake_server import FakeCluster, RequestRecord


def every(n: int) -> object:
    counter = itertools.count(1)
    return lambda _header: next(counter) % n == 0


def retried_sends(cluster: FakeCluster) -> list[tuple[int, int]]:
    sends: list[RequestRecord] = cluster.requests_of(CommandCode.SEND_MESSAGES)
    counts = Counter((r.client, r.request) for r in sends)
    return [key for key, count in counts.items() if count > 1]


def assert_applied_once(cluster: FakeCluster) -> None:
    applied = Counter((client, request) for client, request, code in cluster.applied)
    assert max(applied.values()) == 1


def ids_in(cluster: FakeCluster, stream: str, topic: str, partitions: int) -> list[list[int]]:
    return [[m[1] for m in cluster.messages(stream, topic, p)] for p in range(partitions)]


def test_lost_replies_are_answered_from_the_client_table_not_appended_twice(
    fake: FakeCluster,
) -> None:
    with Client.from_connection_string(url(fake)) as client:
        client.create_stream("s")
        client.create_topic("s", "t", 1)
        drop = fake.add_fault("drop_reply", code=CommandCode.SEND_MESSAGES, times=2, when=every(3))
        close = fake.add_fault(
            "close_after", code=CommandCode.SEND_MESSAGES, times=3, when=every(2)
        )
        for i in range(20):
            client.send_messages("s", "t", [Message(b"m", id=i + 1)], 0)
    assert (drop.times, close.times) == (0, 0), "every fault fired"
    assert ids_in(fake, "s", "t", 1) == [list(range(1, 21))]
    assert len(retried_sends(fake)) >= 3
    assert_applied_once(fake)


def test_primary_killed_mid_send_many_times_every_message_lands_exactly_once(
    fake3: FakeCluster,
) -> None:
    """The primary of the partition's group crashes right after applying a send, again
    and again; each time the view moves on and the node returns later."""
    with Client.from_connection_string(url(fake3, retry_deadline="20s")) as client:
        client.create_stream("s")
        client.create_topic("s", "t", 1)
        fake3.add_fault(
            "crash_after", code=CommandCode.SEND_MESSAGES, times=12, when=every(3), delay_s=0.2
        )
        fake3.add_fault(
            "crash_before", code=CommandCode.SEND_MESSAGES, times=4, when=every(7), delay_s=0.2
        )
        ids = itertools.count(1)
        for _ in range(60):
            client.send_messages("s", "t", [Message(b"m", id=next(ids)) for _ in range(5)], 0)
    assert fake3.crashes == 16
    assert ids_in(fake3, "s", "t", 1) == [list(range(1, 301))]
    # Every request a crash hit was sent again under the same request number (a retry of
    # one request can itself be hit by a later crash, so there may be fewer than 16).
    assert len(fake3.crashed_requests) == 16
    assert set(fake3.crashed_requests) <= set(retried_sends(fake3))
    assert_applied_once(fake3)


def test_session_eviction_of_a_send_in_doubt_fails_it_and_never_appends_it_twice(
    fake: FakeCluster,
) -> None:
    """The first attempt is applied and its connection closed; the retry is evicted. The
    SDK cannot know whether the send landed and a new session would not deduplicate it,
    so it reports the send as in doubt; the next send registers a new client id."""
    with Client.from_connection_string(url(fake)) as client:
        client.create_stream("s")
        client.create_topic("s", "t", 1)
        fake.add_fault("close_after", code=CommandCode.SEND_MESSAGES, times=1)
        fake.add_fault(
            "evict", code=CommandCode.SEND_MESSAGES, times=1, eviction=EvictionReason.NO_SESSION
        )
        with pytest.raises(SessionEvicted) as raised:
            client.send_messages("s", "t", [Message(b"m", id=1)], 0)
        assert raised.value.outcome_unknown
        client.send_messages("s", "t", [Message(b"m", id=2)], 0)
    assert ids_in(fake, "s", "t", 1) == [[1, 2]]
    assert len(fake.requests_of(CommandCode.LOGIN_REGISTER)) == 2
    sends = fake.requests_of(CommandCode.SEND_MESSAGES)
    assert len({r.client for r in sends}) == 2
    assert len({(r.client, r.session) for r in sends}) == 2
    assert_applied_once(fake)


def test_a_reply_that_aged_out_of_the_table_still_counts_as_delivered() -> None:
    with (
        FakeCluster(1, reply_cache_max=1) as cluster,
        Client.from_connection_string(url(cluster)) as client,
    ):
        client.create_stream("s")
        client.create_topic("s", "t", 1)
        # The first send is applied, its reply lost; before the retry arrives, another
        # client-table entry of ours pushes its cached reply out (the metadata write).
        fault = cluster.add_fault("drop_reply", code=CommandCode.SEND_MESSAGES, times=1)
        assert fault.times == 1

        def age_out(_header: object) -> bool:
            entry = next(iter(cluster.clients.values()))
            entry.replies.clear()
            return False

        cluster.add_fault("status", code=CommandCode.SEND_MESSAGES, when=age_out)
        assert client.send_messages("s", "t", [Message(b"m", id=1)], 0) == []
    assert ids_in(cluster, "s", "t", 1) == [[1]]


def test_trio_producer_with_batches_in_flight_survives_crashing_primaries(
    fake3: FakeCluster,
) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake3, retry_deadline="20s")) as client:
            await client.create_stream("s")
            await client.create_topic("s", "t", 3)
            fake3.add_fault(
                "crash_after", code=CommandCode.SEND_MESSAGES, times=8, when=every(4), delay_s=0.2
            )
            async with client.producer("s", "t", max_in_flight=3, batch_length=20) as producer:
                for i in range(600):
                    await producer.send(Message(b"p", id=i + 1))
            assert producer.statistics().messages_sent == 600

    run_trio(body, timeout_s=45)
    per_partition = ids_in(fake3, "s", "t", 3)
    everything = sorted(i for ids in per_partition for i in ids)
    assert everything == list(range(1, 601))
    for ids in per_partition:
        assert ids == sorted(ids), "ordered producer keeps each partition in send order"
    assert fake3.crashes == 8
    assert retried_sends(fake3)
    assert_applied_once(fake3)


def test_trio_send_retried_after_timeouts_keeps_its_request_number(fake: FakeCluster) -> None:
    async def body() -> None:
        async with AsyncClient.from_connection_string(url(fake)) as client:
            await client.create_stream("s")
            await client.create_topic("s", "t", 1)
            fake.add_fault("drop_reply", code=CommandCode.SEND_MESSAGES, times=2)
            await client.send_messages("s", "t", [Message(b"x", id=9)], 0)
            with trio.fail_after(5):
                await client.send_messages("s", "t", [Message(b"y", id=10)], 0)

    run_trio(body)
    sends = fake.requests_of(CommandCode.SEND_MESSAGES)
    assert [r.request for r in sends] == [sends[0].request] * 3 + [sends[0].request + 1]
    assert ids_in(fake, "s", "t", 1) == [[9, 10]]
