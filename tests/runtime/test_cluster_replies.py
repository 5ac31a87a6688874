"""What a node of a real 3-node cluster puts in the reply header, and whom it evicts.

A client routes writes by reply headers: a committed write names the view it committed in
and that view's primary, and a refusal with 58 names the group's current view and primary,
so the next request goes straight to the right node. These tests read raw frames
(``tests.wire_client.WireClient``) so each names exactly what a node says. The cluster
runs behind the chaos fault proxy (``bench.chaos.nodes.ChaosCluster``), which can cut one
node off the replica bus while its clients still reach it; every process binds 127.0.0.1
and is killed in teardown.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos.nodes import ChaosCluster
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import CLUSTER_SECRET, ROOT_PASSWORD
from tests.wire_client import WireClient

NODES = 3
PARTITIONS = 3
TICK_MS = 5
PRIMARY_TIMEOUT_S = 20.0
CATCH_UP_TIMEOUT_S = 30.0
SESSION_END_WAIT_S = 3.0
LINK_DOWN_S = 0.3
"""How long a link stays blocked: well under a group's normal timeout (500 ticks of 5 ms),
so no view change starts."""
METADATA = "metadata"
STORES = 20


@pytest.fixture(scope="module")
def cluster() -> Iterator[ChaosCluster]:
    with tempfile.TemporaryDirectory(prefix="viewstream-replies-") as folder:
        running = ChaosCluster(
            Path(folder),
            root_password=ROOT_PASSWORD,
            cluster_secret=CLUSTER_SECRET,
            tick_ms=TICK_MS,
        )
        try:
            running.start()
            yield running
        finally:
            running.close()


def primary_of(cluster: ChaosCluster, group: str) -> tuple[int, int]:
    """``(node, view)`` of the replica of ``group`` that is primary in normal status in the
    highest view any node reports, waiting (bounded) until there is one."""
    deadline = time.monotonic() + PRIMARY_TIMEOUT_S
    while True:
        best: tuple[int, int] | None = None
        for index in range(cluster.count):
            report = cluster.runtime_stats(index)
            entry = None if report is None else report["groups"].get(group)
            if entry is None or not entry["primary"] or entry["status"] != "normal":
                continue
            if best is None or entry["view"] > best[1]:
                best = (index, int(entry["view"]))
        if best is not None:
            return best
        assert time.monotonic() < deadline, f"no primary of {group} in {PRIMARY_TIMEOUT_S}s"
        time.sleep(0.1)


def login(address: str) -> tuple[WireClient, wire.ReplyHeader]:
    """A logged-in connection and the header of its login reply (a new cluster refuses
    logins with 58 until its root user is committed: retried, bounded)."""
    body = wire.LoginRegister("iggy", ROOT_PASSWORD).encode()
    deadline = time.monotonic() + PRIMARY_TIMEOUT_S
    while True:
        client = WireClient(address)
        frame = client.call_raw(int(CommandCode.LOGIN_REGISTER), body)
        header = frame.reply_header()
        if header.status == 0:
            reply = wire.read_reply(CommandCode.LOGIN_REGISTER, frame)
            assert isinstance(reply, wire.LoginRegisterReply)
            client.session = reply.session
            return client, header
        client.close()
        assert header.status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED, header.status
        assert time.monotonic() < deadline, f"no login at {address} in {PRIMARY_TIMEOUT_S}s"
        time.sleep(0.1)


def create_topic(cluster: ChaosCluster, stream: str) -> list[str]:
    """A stream with one topic "t" of ``PARTITIONS`` partitions; their group names."""
    client, _ = login(cluster.client_addresses[0])
    with client:
        created = client.call(CommandCode.CREATE_STREAM, wire.CreateStream(stream))
        assert isinstance(created, wire.StreamDetails)
        topic = client.call(
            CommandCode.CREATE_TOPIC,
            wire.CreateTopic(wire.Identifier(stream), PARTITIONS, "t", ()),
        )
        assert isinstance(topic, wire.TopicDetails)
    return [f"partition {created.stream.id}/{topic.topic.id}/{p.id}" for p in topic.partitions]


def join(owner: WireClient, address: str) -> WireClient:
    """Another connection, to ``address``, that logs in under ``owner``'s client id: a
    repeated register, which joins ``owner``'s session while it lives (a node serves a
    session only on a connection that logged in to it). Retried while the node refuses
    with 58, bounded."""
    body = wire.LoginRegister("iggy", ROOT_PASSWORD).encode()
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while True:
        other = WireClient(address)
        other.client_id = owner.client_id
        frame = other.call_raw(int(CommandCode.LOGIN_REGISTER), body)
        if frame.command is wire.Command.REPLY and frame.reply_header().status == 0:
            reply = wire.read_reply(CommandCode.LOGIN_REGISTER, frame)
            assert isinstance(reply, wire.LoginRegisterReply)
            other.session, other.request = reply.session, owner.request
            return other
        other.close()
        assert frame.reply_header().status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED
        assert time.monotonic() < deadline, f"no login at {address}"
        time.sleep(0.1)


def test_a_backup_answers_a_forwarded_write_in_the_name_of_the_primary(
    cluster: ChaosCluster,
) -> None:
    groups = create_topic(cluster, "forwarded")
    metadata_primary, metadata_view = primary_of(cluster, METADATA)
    backup = (metadata_primary + 1) % NODES
    client, login_header = login(cluster.client_addresses[backup])
    # The login is a metadata write: the backup forwarded it to the metadata primary.
    assert (login_header.replica, login_header.view) == (metadata_primary, metadata_view)
    with client:
        checked = 0
        for partition, group in enumerate(groups):
            primary, view = primary_of(cluster, group)
            if primary == backup:
                continue
            body = wire.build_send_messages(
                wire.Identifier("forwarded"),
                wire.Identifier("t"),
                wire.PartitionId(partition),
                [wire.OutgoingMessage(partition + 1, b"forwarded")],
            )
            frame = client.call_raw(int(CommandCode.SEND_MESSAGES), body)
            header = frame.reply_header()
            assert header.status == 0
            assert (header.replica, header.view) == (primary, view), group
            checked += 1
        assert checked >= 1, "every partition's primary is the node written to"


def test_a_stale_poll_at_a_backup_is_refused_naming_the_partition_primary(
    cluster: ChaosCluster,
) -> None:
    groups = create_topic(cluster, "stale-route")
    primaries = [primary_of(cluster, group) for group in groups]
    assert any(node != 0 for node, _ in primaries), "some partition's primary is not node 0"
    for partition, (primary, view) in enumerate(primaries):
        backup = (primary + 1) % NODES
        client, _ = login(cluster.client_addresses[backup])
        with client:
            poll = wire.PollMessages(
                wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(1)),
                wire.Identifier("stale-route"),
                wire.Identifier("t"),
                partition,
                wire.PollingStrategy(wire.PollingKind.FIRST, 0),
                10,
                False,
            )
            frame = client.call_raw(int(CommandCode.POLL_PRIMARY), poll.encode())
        header = frame.reply_header()
        assert header.status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED
        assert (header.replica, header.view) == (primary, view), groups[partition]


def test_a_login_at_a_lagging_backup_is_refused_there_not_evicted(
    cluster: ChaosCluster,
) -> None:
    """A node cut off from the others cannot commit a login (its register goes to the
    metadata primary): it refuses with 58, never an eviction, and once it catches up the
    same client id joins its session there."""
    primary, _ = primary_of(cluster, METADATA)
    lagging = (primary + 1) % NODES
    links = [cluster.link_name(lagging, peer) for peer in range(NODES) if peer != lagging]
    for link in links:
        cluster.proxy_command({"op": "block", "link": link, "blocked": True})
    try:
        # Committed by the primary and the third node; the cut-off node never hears of it.
        owner, _ = login(cluster.client_addresses[primary])
        with owner, WireClient(cluster.client_addresses[lagging]) as other:
            other.client_id = owner.client_id
            body = wire.LoginRegister("iggy", ROOT_PASSWORD).encode()
            frame = other.call_raw(int(CommandCode.LOGIN_REGISTER), body)
            assert frame.command is wire.Command.REPLY, "evicted by a node that lags"
            header = frame.reply_header()
            assert header.status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED
            assert header.replica == header.view % NODES  # the metadata primary of its view
            for link in links:
                cluster.proxy_command({"op": "block", "link": link, "blocked": False})
            # Once the node catches up, the same client id joins the same session there.
            with join(owner, cluster.client_addresses[lagging]) as joined:
                assert joined.session == owner.session
                wait_served(joined)
    finally:
        cluster.proxy_command({"op": "heal"})


def served(client: WireClient) -> bool:
    """Whether ``client``'s session is honoured (False while the node refuses with 58)."""
    frame = client.call_raw(int(CommandCode.GET_STREAMS))
    assert frame.command is wire.Command.REPLY, f"evicted: {frame.eviction_header().reason.name}"
    status = frame.reply_header().status
    assert status in (0, IggyErrorCode.TRANSIENT_NOT_ACCEPTED), status
    return status == 0


def wait_served(client: WireClient) -> None:
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while not served(client):
        assert time.monotonic() < deadline, f"{client.address} never applied the session"
        time.sleep(0.05)


def test_only_the_connection_that_logged_in_ends_the_session_when_it_closes(
    cluster: ChaosCluster,
) -> None:
    owner, _ = login(cluster.client_addresses[0])
    session = owner.session
    with owner:
        # A client keeps one connection per node, each joined to the session it registered.
        with join(owner, cluster.client_addresses[1]) as other:
            assert other.session == session
            wait_served(other)
        time.sleep(SESSION_END_WAIT_S)  # time for the node to end it, if it is going to
        assert served(owner)
    deadline = time.monotonic() + SESSION_END_WAIT_S
    while True:
        # Once the session ended, a login under its client id opens another (logged out
        # again at once, so the probe leaves nothing behind).
        with join(owner, cluster.client_addresses[1]) as probe:
            if probe.session != session:
                assert probe.call_raw(int(CommandCode.LOGOUT_USER)).reply_header().status == 0
                break
        assert time.monotonic() < deadline, "closing the owner did not end the session"
        time.sleep(0.05)


def send_status(client: WireClient, stream: str, count: int = 1) -> int:
    """The status of a send of ``count`` messages to partition 0 of topic "t" of ``stream``."""
    body = wire.build_send_messages(
        wire.Identifier(stream),
        wire.Identifier("t"),
        wire.PartitionId(0),
        [wire.OutgoingMessage(index + 1, b"m") for index in range(count)],
    )
    return client.call_raw(int(CommandCode.SEND_MESSAGES), body).reply_header().status


def send_to_partition_0(client: WireClient, stream: str, count: int) -> None:
    """``count`` messages to partition 0 of topic "t" of ``stream``, acknowledged."""
    assert send_status(client, stream, count) == 0


def test_a_backup_reads_the_stored_offset_the_primary_just_acknowledged(
    cluster: ChaosCluster,
) -> None:
    """A consumer that stores its offset at the primary and fails over to a backup must not
    read an older offset there. The backup learns commits with the next prepare or the next
    heartbeat, so without a read index it answers from before the store it was sent."""
    stream = "read-index"
    groups = create_topic(cluster, stream)
    primary, _ = primary_of(cluster, groups[0])
    backup = (primary + 1) % NODES
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(7))
    owner, _ = login(cluster.client_addresses[primary])
    with owner, join(owner, cluster.client_addresses[backup]) as other:
        send_to_partition_0(owner, stream, STORES)
        target = (consumer, wire.Identifier(stream), wire.Identifier("t"), 0)
        read = wire.GetConsumerOffset(*target)
        for offset in range(STORES):
            stored = owner.call(
                CommandCode.STORE_CONSUMER_OFFSET, wire.StoreConsumerOffset(*target, offset)
            )
            assert isinstance(stored, wire.Empty), stored
            reply = other.call(CommandCode.GET_CONSUMER_OFFSET, read)
            assert isinstance(reply, wire.ConsumerOffsetInfo), reply
            assert reply.stored_offset == offset, f"stored {offset}, the backup read {reply}"


def test_a_backup_cut_off_from_the_primary_refuses_the_stored_offset_read(
    cluster: ChaosCluster,
) -> None:
    """Committed by the primary and the third node while the backup hears nothing: the
    backup cannot ask the primary for its commit, so it answers 58, never the old offset."""
    stream = "read-index-cut"
    groups = create_topic(cluster, stream)
    primary, _ = primary_of(cluster, groups[0])
    backup = (primary + 1) % NODES
    consumer = wire.Consumer(wire.ConsumerKind.CONSUMER, wire.Identifier(7))
    target = (consumer, wire.Identifier(stream), wire.Identifier("t"), 0)
    owner, _ = login(cluster.client_addresses[primary])
    with owner, join(owner, cluster.client_addresses[backup]) as other:
        send_to_partition_0(owner, stream, 2)
        owner.call(CommandCode.STORE_CONSUMER_OFFSET, wire.StoreConsumerOffset(*target, 0))
        wait_served(other)
        link = cluster.link_name(primary, backup)
        cluster.proxy_command({"op": "block", "link": link, "blocked": True})
        try:
            stored = owner.call(
                CommandCode.STORE_CONSUMER_OFFSET, wire.StoreConsumerOffset(*target, 1)
            )
            assert isinstance(stored, wire.Empty), stored
            frame = other.call_raw(
                int(CommandCode.GET_CONSUMER_OFFSET), wire.GetConsumerOffset(*target).encode()
            )
            status = frame.reply_header().status
            if status == 0:
                reply = wire.read_reply(CommandCode.GET_CONSUMER_OFFSET, frame)
                assert isinstance(reply, wire.ConsumerOffsetInfo), reply
                assert reply.stored_offset == 1, f"stored 1, the cut-off backup read {reply}"
            else:
                assert status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED, status
        finally:
            cluster.proxy_command({"op": "heal"})


def test_a_client_of_a_backup_reads_its_own_metadata_writes_at_once(
    cluster: ChaosCluster,
) -> None:
    """A stream created through a backup (forwarded to the metadata primary) is known to
    that backup before it answers the next request on the connection: before, the backup
    checked the next request against local state that lacked the stream until the
    primary's next prepare or heartbeat, and answered STREAM_ID_NOT_FOUND."""
    primary, _ = primary_of(cluster, METADATA)
    for backup in (b for b in range(NODES) if b != primary):
        stream = f"own-writes-{backup}"
        client, _ = login(cluster.client_addresses[backup])
        with client:
            created = client.call(CommandCode.CREATE_STREAM, wire.CreateStream(stream))
            assert isinstance(created, wire.StreamDetails)
            topic = client.call(
                CommandCode.CREATE_TOPIC, wire.CreateTopic(wire.Identifier(stream), 1, "t", ())
            )
            assert isinstance(topic, wire.TopicDetails)
            send_to_partition_0(client, stream, 3)


def test_a_write_through_a_backup_waits_for_its_link_to_the_primary_to_come_back(
    cluster: ChaosCluster,
) -> None:
    """A backup whose bus link to a partition's primary is down holds the client's write
    until the link redials and forwards it then: before, it answered 58 at once, so every
    drop of a link cost the backup's clients a refusal."""
    stream = "link-back"
    groups = create_topic(cluster, stream)
    primary, _ = primary_of(cluster, groups[0])
    backup = (primary + 1) % NODES
    client, _ = login(cluster.client_addresses[backup])
    with client:
        send_to_partition_0(client, stream, 1)
        before = cluster.runtime_stats(backup)
        assert before is not None
        cluster.proxy_command(
            {"op": "block", "link": cluster.link_name(primary, backup), "blocked": True}
        )
        statuses: list[int] = []
        try:
            time.sleep(LINK_DOWN_S)  # the link is reset and its redials are refused
            sender = threading.Thread(target=lambda: statuses.append(send_status(client, stream)))
            sender.start()
            time.sleep(LINK_DOWN_S)  # the write waits at the backup
        finally:
            cluster.proxy_command({"op": "heal"})
        sender.join(timeout=CATCH_UP_TIMEOUT_S)
        assert not sender.is_alive()
        assert statuses == [0]
        after = cluster.runtime_stats(backup)
        assert after is not None
        assert after["node"]["forwards_held"] > before["node"]["forwards_held"]
