"""GET_CLIENTS (22) and GET_CLIENT (21) against a real node: every connection of the node,
its address, transport and user; one client with its consumer groups; ``read_servers``."""

from __future__ import annotations

from sdk import Client, ClientConfig, wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.wire_client import WireClient

WATCHER_PASSWORD = "watcher-Pa55-77"


def _address(client: WireClient) -> str:
    host, port = client.sock.getsockname()[:2]
    return f"{host}:{port}"


def _clients(client: WireClient) -> list[wire.ClientInfo]:
    reply = client.call(CommandCode.GET_CLIENTS, wire.Empty())
    assert isinstance(reply, wire.Clients)
    return list(reply.clients)


def test_get_clients_lists_every_connection_with_its_user_and_address(
    node: NodeProcess,
) -> None:
    with (
        WireClient(node.address) as root,
        WireClient(node.address) as other,
        WireClient(node.address) as anonymous,
    ):
        root.login("iggy", ROOT_PASSWORD)
        other.login("iggy", ROOT_PASSWORD)
        anonymous.ping()  # connected, never logged in
        me = root.call(CommandCode.GET_ME, wire.Empty())
        assert isinstance(me, wire.ClientInfoDetails)
        by_address = {client.address: client for client in _clients(root)}
        mine, theirs = by_address[_address(root)], by_address[_address(other)]
        assert (mine.client_id, mine.user_id) == (me.client_id, me.user_id)
        assert mine.transport == theirs.transport == me.transport
        assert theirs.client_id not in (0, mine.client_id)
        stranger = by_address[_address(anonymous)]
        assert (stranger.client_id, stranger.user_id) == (0, wire.CLIENT_NO_USER)


def test_get_client_gives_one_client_with_its_consumer_groups(node: NodeProcess) -> None:
    with WireClient(node.address) as root, WireClient(node.address) as member:
        root.login("iggy", ROOT_PASSWORD)
        member.login("iggy", ROOT_PASSWORD)
        stream = wire.Identifier("clients")
        root.call(CommandCode.CREATE_STREAM, wire.CreateStream("clients"))
        root.call(CommandCode.CREATE_TOPIC, wire.CreateTopic(stream, 1, "t", ()))
        group = root.call(
            CommandCode.CREATE_CONSUMER_GROUP,
            wire.CreateConsumerGroup(stream, wire.Identifier("t"), "g"),
        )
        assert isinstance(group, wire.ConsumerGroupDetails)
        ref = wire.GroupRef(stream, wire.Identifier("t"), wire.Identifier(group.group.id))
        member.call(CommandCode.JOIN_CONSUMER_GROUP, ref)
        me = member.call(CommandCode.GET_ME, wire.Empty())
        assert isinstance(me, wire.ClientInfoDetails)
        found = root.call(CommandCode.GET_CLIENT, wire.ClientRef(me.client_id))
        assert isinstance(found, wire.ClientInfoDetails)
        assert found.address == _address(member)
        assert [(g.topic_id, g.group_id) for g in found.consumer_groups] == [
            (g.topic_id, g.group_id) for g in me.consumer_groups
        ]
        assert len(found.consumer_groups) == 1
        listed = {c.address: c for c in _clients(root)}[_address(member)]
        assert listed.consumer_groups_count == 1
        assert root.call(CommandCode.GET_CLIENT, wire.ClientRef(0)) is None
        assert root.call(CommandCode.GET_CLIENT, wire.ClientRef(0xFFFF_FFF0)) is None


def test_clients_need_read_servers(node: NodeProcess) -> None:
    with WireClient(node.address) as root:
        root.login("iggy", ROOT_PASSWORD)
        created = root.call_raw(
            int(CommandCode.CREATE_USER), wire.CreateUser("watcher", WATCHER_PASSWORD).encode()
        )
        assert created.reply_header().status == 0
    with WireClient(node.address) as watcher:
        watcher.login("watcher", WATCHER_PASSWORD)
        for code, body in (
            (CommandCode.GET_CLIENTS, b""),
            (CommandCode.GET_CLIENT, wire.ClientRef(1).encode()),
        ):
            frame = watcher.call_raw(int(code), body)
            assert frame.reply_header().status == IggyErrorCode.UNAUTHORIZED


def test_our_sdk_lists_clients_and_describes_options(node: NodeProcess) -> None:
    config = ClientConfig.one_node(node.address, username="iggy", password=ROOT_PASSWORD)
    with Client(config) as client:
        me = client.get_me()
        listed = [c for c in client.get_clients() if c.client_id == me.client_id]
        assert listed and listed[0].user_id == me.user_id
        found = client.get_client(me.client_id)
        assert found is not None and found.client_id == me.client_id
        assert client.get_client(0) is None
        topic = {entry.key: entry for entry in client.describe_options()}
        assert topic["segment_size"].kind == wire.HeaderKind.UINT64
        assert client.describe_options(wire.OptionsScope.USER) == []
