"""Consumer offsets per user per partition, against a real node process.

A user allowed only to poll stores 65,536 made-up consumer ids in one partition (as many
as the partition's whole offset table holds), pipelined over a few connections. Only
``CONSUMER_OFFSETS_PER_USER_MAX`` of them are stored, the rest are answered 3024
TooManyConsumerOffsets, and afterwards another user's offset store and the official SDK's
auto-commit polls on that partition still work. The same user's poll auto-commits are
charged to it too, so they are no way around its quota.

In a 3-node cluster, stores sent to a backup of the partition are forwarded to its
primary with the user they are charged to: a user past its quota there is refused at the
primary too, and another user's store through the same backup is not.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_iggy import Consumer, IggyClient, PollingStrategy

from bench.chaos.nodes import ChaosCluster
from broker.state.errors import ErrorCode
from broker.state.partition import CONSUMER_OFFSETS_MAX, CONSUMER_OFFSETS_PER_USER_MAX
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import CLUSTER_SECRET, ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_cluster_replies import primary_of
from tests.runtime.test_interop_node import run
from tests.wire_client import WireClient

STREAM = "quota"
MESSAGES = 8
POLLER_PASSWORD = "poller-Pa55-5150"
OTHER_PASSWORD = "other-Pa55-8086"
TOO_MANY = int(ErrorCode.TOO_MANY_CONSUMER_OFFSETS)
MADE_UP_IDS = CONSUMER_OFFSETS_MAX
CONNECTIONS = 16
WINDOW = 64  # requests each connection has on the wire before it reads their replies
AUTO_COMMIT_WAIT_S = 5.0
CLUSTER_TICK_MS = 5
CLUSTER_LOGIN_TIMEOUT_S = 20.0
CLUSTER_CONNECTIONS = 4


@pytest.fixture(scope="module")
def quota_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data_dir: Path = tmp_path_factory.mktemp("quota") / "data"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    process = start_node(data_dir)
    try:
        with WireClient(process.address) as admin:
            admin.login("iggy", ROOT_PASSWORD)
            setup(admin)
        yield process
    finally:
        process.kill()


def setup(admin: WireClient) -> None:
    """A one-partition topic with a few messages, and two users who may only poll."""
    admin.call(CommandCode.CREATE_STREAM, wire.CreateStream(STREAM))
    admin.call(CommandCode.CREATE_TOPIC, wire.CreateTopic(ident(STREAM), 1, "t", ()))
    messages = [wire.OutgoingMessage(i + 1, b"m%d" % i) for i in range(MESSAGES)]
    send = wire.build_send_messages(ident(STREAM), ident("t"), wire.PartitionId(0), messages)
    admin.call(CommandCode.SEND_MESSAGES, wire.SendMessages.decode(send))
    poll_only = wire.Permissions(wire.GlobalPermissions(poll_messages=True))
    for username, password in (("poller", POLLER_PASSWORD), ("other", OTHER_PASSWORD)):
        admin.call(
            CommandCode.CREATE_USER,
            wire.CreateUser(username, password, permissions=poll_only),
        )


def ident(value: int | str) -> wire.Identifier:
    return wire.Identifier(value)


def consumer(consumer_id: int | str) -> wire.Consumer:
    return wire.Consumer(wire.ConsumerKind.CONSUMER, ident(consumer_id))


def store_body(consumer_id: int | str, offset: int) -> bytes:
    return wire.StoreConsumerOffset(
        consumer(consumer_id), ident(STREAM), ident("t"), 0, offset
    ).encode()


def outcome(frame: wire.Frame) -> int:
    """0 for a stored offset, else the code it was refused with."""
    try:
        wire.read_reply(CommandCode.STORE_CONSUMER_OFFSET, frame)
    except wire.ServerRejected as rejected:
        return rejected.code
    return 0


def store_pipelined(clients: list[WireClient], consumer_ids: range) -> Counter[int]:
    """Store offset 0 for every id, spread over ``clients``, each with ``WINDOW`` requests
    on the wire at a time; how many stores got each outcome."""
    outcomes: Counter[int] = Counter()
    shares = [consumer_ids[i :: len(clients)] for i in range(len(clients))]
    for start in range(0, max(len(share) for share in shares), WINDOW):
        sent: list[tuple[WireClient, int]] = []
        for client, share in zip(clients, shares, strict=True):
            window = share[start : start + WINDOW]
            frames = bytearray()
            for consumer_id in window:
                frames += client.frame_for(
                    CommandCode.STORE_CONSUMER_OFFSET, store_body(consumer_id, 0)
                )
                client.request += 1
            client.send_frame(frames)
            sent.append((client, len(window)))
        for client, count in sent:
            for _ in range(count):
                frame = client.read_frame()
                assert frame is not None, "the node closed the connection"
                outcomes[outcome(frame)] += 1
    return outcomes


def login(node: NodeProcess, username: str, password: str) -> WireClient:
    client = WireClient(node.address, timeout_s=30.0)
    client.login(username, password)
    return client


def login_at(address: str, username: str, password: str) -> WireClient:
    """A logged-in connection to a cluster node (retried, bounded, while the node says 58:
    a new cluster's root user, or a new user, not committed or applied there yet)."""
    body = wire.LoginRegister(username, password).encode()
    deadline = time.monotonic() + CLUSTER_LOGIN_TIMEOUT_S
    while True:
        client = WireClient(address, timeout_s=30.0)
        frame = client.call_raw(int(CommandCode.LOGIN_REGISTER), body)
        if frame.command is wire.Command.REPLY and frame.reply_header().status == 0:
            reply = wire.read_reply(CommandCode.LOGIN_REGISTER, frame)
            assert isinstance(reply, wire.LoginRegisterReply)
            client.session = reply.session
            client.request = 1
            return client
        client.close()
        assert frame.command is wire.Command.REPLY, f"{username} evicted at {address}"
        status = frame.reply_header().status
        assert status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED, status
        assert time.monotonic() < deadline, f"no login at {address}"
        time.sleep(0.1)


def stored_offset(client: WireClient, consumer_id: int | str) -> int | None:
    reply = client.call(
        CommandCode.GET_CONSUMER_OFFSET,
        wire.GetConsumerOffset(consumer(consumer_id), ident(STREAM), ident("t"), 0),
    )
    if reply is None:
        return None
    assert isinstance(reply, wire.ConsumerOffsetInfo)
    return reply.stored_offset


def wait_stored(client: WireClient, consumer_id: int | str, expected: int) -> int | None:
    """The stored offset once it is ``expected``, or what it is after a bounded wait."""
    deadline = time.monotonic() + AUTO_COMMIT_WAIT_S
    while (found := stored_offset(client, consumer_id)) != expected:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return found


def poll_next(client: WireClient, consumer_id: int | str, count: int) -> list[int]:
    """Offsets a NEXT poll with auto-commit returns (our wire client, lock-step)."""
    reply = client.call(
        CommandCode.POLL_MESSAGES,
        wire.PollMessages(
            consumer(consumer_id),
            ident(STREAM),
            ident("t"),
            0,
            wire.PollingStrategy.next(),
            count,
            True,
        ),
    )
    assert isinstance(reply, wire.PollMessagesReply)
    return [message.offset for message in reply.messages()]


def sdk_auto_commit_polls(node: NodeProcess) -> tuple[list[int], list[int]]:
    """Two NEXT polls with auto-commit by the official SDK, as user ``other``: the first
    from the start, the second (retried while the auto-commit is in flight) after it."""

    async def scenario() -> tuple[list[int], list[int]]:
        client = IggyClient(node.address)
        await client.connect()
        await client.login_user("other", OTHER_PASSWORD)

        async def offsets() -> list[int]:
            polled: list[Any] = await client.poll_messages(
                STREAM,
                "t",
                consumer=Consumer.Single("sdk-reader"),
                polling_strategy=PollingStrategy.Next(),
                count=3,
                auto_commit=True,
                partition_id=0,
            )
            return [m.offset() for m in polled]

        first = await offsets()
        following: list[int] = []
        for _ in range(int(AUTO_COMMIT_WAIT_S / 0.05)):
            following = await offsets()
            if following != first:
                break
            await asyncio.sleep(0.05)
        return first, following

    return run(scenario())


def test_made_up_consumer_ids_of_one_user_leave_other_users_offset_stores_working(
    quota_node: NodeProcess,
) -> None:
    clients = [login(quota_node, "poller", POLLER_PASSWORD) for _ in range(CONNECTIONS)]
    try:
        poller = clients[0]
        assert (
            outcome(poller.call_raw(CommandCode.STORE_CONSUMER_OFFSET, store_body("own", 0))) == 0
        )
        started = time.monotonic()
        outcomes = store_pipelined(clients, range(1, MADE_UP_IDS + 1))
        elapsed_s = time.monotonic() - started
        print(f"{MADE_UP_IDS} made-up consumer ids in {elapsed_s:.1f} s: {dict(outcomes)}")
        assert outcomes == {
            0: CONSUMER_OFFSETS_PER_USER_MAX - 1,
            TOO_MANY: MADE_UP_IDS - CONSUMER_OFFSETS_PER_USER_MAX + 1,
        }
        # At its quota, the user still moves the offsets it has.
        assert (
            outcome(poller.call_raw(CommandCode.STORE_CONSUMER_OFFSET, store_body("own", 3))) == 0
        )
        assert stored_offset(poller, "own") == 3
        # Its poll's auto-commit of a new consumer is charged to it as well: polled, not
        # stored (checked below, once a later auto-commit on this partition has landed).
        assert poll_next(poller, "sneaky", 2) == [0, 1]
    finally:
        for client in clients:
            client.close()
    with login(quota_node, "other", OTHER_PASSWORD) as other:
        assert (
            outcome(other.call_raw(CommandCode.STORE_CONSUMER_OFFSET, store_body("mine", 5))) == 0
        )
        assert stored_offset(other, "mine") == 5
        # The official SDK's auto-commit polls move on: its offsets are stored. Auto-commits
        # of a partition are stored one at a time in poll order, so by now the poller's
        # auto-commit of "sneaky" has been decided too.
        first, following = sdk_auto_commit_polls(quota_node)
        assert (first, following) == ([0, 1, 2], [3, 4, 5])
        # The second poll's auto-commit lands after its reply.
        assert wait_stored(other, "sdk-reader", 5) == 5
        assert stored_offset(other, "sneaky") is None


@pytest.fixture(scope="module")
def cluster() -> Iterator[ChaosCluster]:
    with tempfile.TemporaryDirectory(prefix="viewstream-quota-") as folder:
        running = ChaosCluster(
            Path(folder),
            root_password=ROOT_PASSWORD,
            cluster_secret=CLUSTER_SECRET,
            tick_ms=CLUSTER_TICK_MS,
        )
        try:
            running.start()
            yield running
        finally:
            running.close()


def forwarded(cluster: ChaosCluster, index: int) -> int:
    """Requests node ``index`` has forwarded to another node's primary replica."""
    report = cluster.runtime_stats(index)
    assert report is not None
    return int(report["node"]["forwarded"])


def test_stores_through_a_backup_are_charged_to_their_user_at_the_primary(
    cluster: ChaosCluster,
) -> None:
    addresses = cluster.client_addresses
    with login_at(addresses[0], "iggy", ROOT_PASSWORD) as admin:
        setup(admin)
        details = admin.call(CommandCode.GET_STREAM, wire.StreamRef(ident(STREAM)))
        assert isinstance(details, wire.StreamDetails)
    primary, _ = primary_of(cluster, f"partition {details.stream.id}/0/0")
    backup_index = (primary + 1) % cluster.count
    backup = addresses[backup_index]
    made_up = CONSUMER_OFFSETS_PER_USER_MAX + 256
    forwarded_before = forwarded(cluster, backup_index)
    clients = [login_at(backup, "poller", POLLER_PASSWORD) for _ in range(CLUSTER_CONNECTIONS)]
    try:
        outcomes = store_pipelined(clients, range(1, made_up + 1))
    finally:
        for client in clients:
            client.close()
    assert outcomes == {0: CONSUMER_OFFSETS_PER_USER_MAX, TOO_MANY: 256}
    assert forwarded(cluster, backup_index) - forwarded_before >= made_up
    with login_at(addresses[primary], "poller", POLLER_PASSWORD) as at_primary:
        frame = at_primary.call_raw(CommandCode.STORE_CONSUMER_OFFSET, store_body("direct", 0))
        assert outcome(frame) == TOO_MANY
    with login_at(backup, "other", OTHER_PASSWORD) as other:
        assert (
            outcome(other.call_raw(CommandCode.STORE_CONSUMER_OFFSET, store_body("mine", 4))) == 0
        )
        assert stored_offset(other, "mine") == 4
