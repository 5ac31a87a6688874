"""Security against a real node process: user management, permissions, passwords.

- User management with the official SDK: create, read, update, re-permission, change a
  password, delete; the new user logs in with what was set and nothing else.
- Permissions command by command (``sdk.wire`` frames, one per command): a user without
  rights is answered Unauthorized (41) on every command that needs a right; a user with
  rights on stream A only is refused on stream B and served on A (so every check can
  fail); reads that list things show only what the user may see.
- Passwords never reach the node's log output (at debug level) nor any file of its data
  directory in clear, after users were created, passwords changed and logins failed.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apache_iggy import (
    GlobalPermissions,
    IggyClient,
    Partitioning,
    Permissions,
    SendMessage,
    StreamPermissions,
    UserStatus,
)

from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_interop_node import run
from tests.wire_client import WireClient

UNAUTHORIZED = int(IggyErrorCode.UNAUTHORIZED)
NOBODY_PASSWORD = "nobody-Pa55-7731"
ALICE_PASSWORD = "alice-Pa55-2208"


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data_dir: Path = tmp_path_factory.mktemp("secure") / "data"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    process = start_node(data_dir, env={"VIEWSTREAM_LOG_LEVEL": "debug"})
    try:
        yield process
    finally:
        process.kill()


def root(node: NodeProcess) -> WireClient:
    client = WireClient(node.address)
    client.login("iggy", ROOT_PASSWORD)
    return client


# -- user management with the official SDK --------------------------------------------


def test_sdk_user_management_round_trip(secure_node: NodeProcess) -> None:
    async def scenario() -> dict[str, Any]:
        admin = IggyClient(secure_node.address)
        await admin.connect()
        await admin.login_user("iggy", ROOT_PASSWORD)
        await admin.create_stream("um")
        stream = await admin.get_stream("um")
        assert stream is not None
        stream_id = stream.id
        perms = Permissions(
            global_permissions=GlobalPermissions(read_servers=True),
            streams={stream_id: StreamPermissions(read_stream=True, poll_messages=True)},
        )
        created = await admin.create_user("carol", "carol-Pa55-01", UserStatus.Active, perms)
        fetched = await admin.get_user("carol")
        listed = [u.username for u in await admin.get_users()]
        await admin.update_user("carol", "carol2", UserStatus.Active)
        await admin.update_permissions("carol2", None)
        stripped = await admin.get_user("carol2")
        user = IggyClient(secure_node.address)
        await user.connect()
        await user.login_user("carol2", "carol-Pa55-01")
        own = await user.get_user("carol2")  # one's own details need no right
        await user.change_password("carol2", "carol-Pa55-01", "carol-Pa55-02")
        relogin = IggyClient(secure_node.address)
        await relogin.connect()
        try:
            await relogin.login_user("carol2", "carol-Pa55-01")
            old_password_works = True
        except RuntimeError:
            old_password_works = False
        renewed = IggyClient(secure_node.address)
        await renewed.connect()
        await renewed.login_user("carol2", "carol-Pa55-02")
        await admin.delete_user("carol2")
        missing = await admin.get_user("carol2")
        assert fetched is not None and fetched.permissions is not None
        assert stripped is not None and own is not None
        return {
            "created": (created.username, created.status, created.permissions is not None),
            "fetched": (
                fetched.id == created.id,
                fetched.permissions.global_permissions.read_servers,
                sorted((fetched.permissions.streams or {}).keys()) == [stream_id],
            ),
            "listed": listed,
            "stripped": (stripped.username, stripped.permissions),
            "own": own.username,
            "old_password_works": old_password_works,
            "missing": missing,
        }

    found = run(scenario())
    assert found["created"] == ("carol", UserStatus.Active, True)
    assert found["fetched"] == (True, True, True)
    assert found["listed"] == ["iggy", "carol"]
    assert found["stripped"] == ("carol2", None)
    assert found["own"] == "carol2"
    assert found["old_password_works"] is False
    assert found["missing"] is None


def test_sdk_user_without_manage_users_cannot_create_users(secure_node: NodeProcess) -> None:
    async def scenario() -> str:
        admin = IggyClient(secure_node.address)
        await admin.connect()
        await admin.login_user("iggy", ROOT_PASSWORD)
        await admin.create_user("dave", "dave-Pa55-01")
        dave = IggyClient(secure_node.address)
        await dave.connect()
        await dave.login_user("dave", "dave-Pa55-01")
        try:
            await dave.create_user("eve", "eve-Pa55-01")
        except RuntimeError as error:
            return str(error)
        return "created"

    assert "Unauthorized" in run(scenario())


# -- permissions, command by command ------------------------------------------------------


@dataclass(frozen=True)
class World:
    """Streams A (the one alice may use) and B, each with topic ``t`` (one partition, one
    message) and consumer group ``g``; users ``nobody`` (no rights) and ``alice``."""

    node: NodeProcess


def _ident(value: int | str) -> wire.Identifier:
    return wire.Identifier(value)


@pytest.fixture(scope="module")
def world(secure_node: NodeProcess) -> World:
    with root(secure_node) as admin:
        for stream in ("A", "B"):
            admin.call(CommandCode.CREATE_STREAM, wire.CreateStream(stream))
            admin.call(CommandCode.CREATE_TOPIC, wire.CreateTopic(_ident(stream), 1, "t", ()))
            admin.call(
                CommandCode.SEND_MESSAGES,
                wire.SendMessages.decode(
                    wire.build_send_messages(
                        _ident(stream),
                        _ident("t"),
                        wire.PartitionId(0),
                        [wire.OutgoingMessage(1, b"hello")],
                    )
                ),
            )
            admin.call(
                CommandCode.CREATE_CONSUMER_GROUP,
                wire.CreateConsumerGroup(_ident(stream), _ident("t"), "g"),
            )
        details = admin.call(CommandCode.GET_STREAM, wire.StreamRef(_ident("A")))
        assert isinstance(details, wire.StreamDetails)
        everything_on_a = wire.StreamPermissions(details.stream.id, *(True,) * 6)
        admin.call(CommandCode.CREATE_USER, wire.CreateUser("nobody", NOBODY_PASSWORD))
        admin.call(
            CommandCode.CREATE_USER,
            wire.CreateUser(
                "alice",
                ALICE_PASSWORD,
                permissions=wire.Permissions(streams=(everything_on_a,)),
            ),
        )
    return World(secure_node)


def _poll(stream: str, auto_commit: bool = False) -> wire.PollMessages:
    return wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER, _ident(1)),
        _ident(stream),
        _ident("t"),
        0,
        wire.PollingStrategy(wire.PollingKind.FIRST, 0),
        10,
        auto_commit,
    )


def _offset_target(stream: str) -> tuple[wire.Consumer, wire.Identifier, wire.Identifier, int]:
    return wire.Consumer(wire.ConsumerKind.CONSUMER, _ident(1)), _ident(stream), _ident("t"), 0


def _send(stream: str) -> bytes:
    body = wire.build_send_messages(
        _ident(stream), _ident("t"), wire.PartitionId(0), [wire.OutgoingMessage(2, b"x")]
    )
    return bytes(body)


# Every command that needs a right on stream ``s``: (name, code, body). Bodies are valid
# apart from the right, so Unauthorized is the only reason to refuse them.
def stream_commands(s: str) -> list[tuple[str, CommandCode, bytes]]:
    group = wire.GroupRef(_ident(s), _ident("t"), _ident("g"))
    return [
        ("get_stream", CommandCode.GET_STREAM, wire.StreamRef(_ident(s)).encode()),
        ("update_stream", CommandCode.UPDATE_STREAM, wire.UpdateStream(_ident(s), s).encode()),
        ("purge_stream", CommandCode.PURGE_STREAM, wire.StreamRef(_ident(s)).encode()),
        ("delete_stream", CommandCode.DELETE_STREAM, wire.StreamRef(_ident(s)).encode()),
        ("get_topic", CommandCode.GET_TOPIC, wire.TopicRef(_ident(s), _ident("t")).encode()),
        (
            "create_topic",
            CommandCode.CREATE_TOPIC,
            wire.CreateTopic(_ident(s), 1, "u", ()).encode(),
        ),
        (
            "update_topic",
            CommandCode.UPDATE_TOPIC,
            wire.UpdateTopic(_ident(s), _ident("t"), "t").encode(),
        ),
        ("purge_topic", CommandCode.PURGE_TOPIC, wire.TopicRef(_ident(s), _ident("t")).encode()),
        ("delete_topic", CommandCode.DELETE_TOPIC, wire.TopicRef(_ident(s), _ident("t")).encode()),
        (
            "create_partitions",
            CommandCode.CREATE_PARTITIONS,
            wire.PartitionsChange(_ident(s), _ident("t"), 1).encode(),
        ),
        (
            "delete_partitions",
            CommandCode.DELETE_PARTITIONS,
            wire.PartitionsChange(_ident(s), _ident("t"), 1).encode(),
        ),
        ("send_messages", CommandCode.SEND_MESSAGES, _send(s)),
        ("poll_messages", CommandCode.POLL_MESSAGES, _poll(s).encode()),
        ("poll_auto_commit", CommandCode.POLL_MESSAGES, _poll(s, auto_commit=True).encode()),
        ("poll_routing", CommandCode.POLL_ROUTING, _poll(s, auto_commit=True).encode()),
        ("poll_primary", CommandCode.POLL_PRIMARY, _poll(s, auto_commit=True).encode()),
        (
            "get_consumer_offset",
            CommandCode.GET_CONSUMER_OFFSET,
            wire.GetConsumerOffset(*_offset_target(s)).encode(),
        ),
        (
            "consumer_offset_routing",
            CommandCode.CONSUMER_OFFSET_ROUTING,
            wire.GetConsumerOffset(*_offset_target(s)).encode(),
        ),
        (
            "store_consumer_offset",
            CommandCode.STORE_CONSUMER_OFFSET,
            wire.StoreConsumerOffset(*_offset_target(s), 0).encode(),
        ),
        (
            "delete_consumer_offset",
            CommandCode.DELETE_CONSUMER_OFFSET,
            wire.DeleteConsumerOffset(*_offset_target(s)).encode(),
        ),
        (
            "create_consumer_group",
            CommandCode.CREATE_CONSUMER_GROUP,
            wire.CreateConsumerGroup(_ident(s), _ident("t"), "h").encode(),
        ),
        ("get_consumer_group", CommandCode.GET_CONSUMER_GROUP, group.encode()),
        (
            "get_consumer_groups",
            CommandCode.GET_CONSUMER_GROUPS,
            wire.TopicRef(_ident(s), _ident("t")).encode(),
        ),
        ("join_consumer_group", CommandCode.JOIN_CONSUMER_GROUP, group.encode()),
        ("sync_consumer_group", CommandCode.SYNC_CONSUMER_GROUP, group.encode()),
        ("leave_consumer_group", CommandCode.LEAVE_CONSUMER_GROUP, group.encode()),
        ("delete_consumer_group", CommandCode.DELETE_CONSUMER_GROUP, group.encode()),
    ]


# Commands that need a server-wide right.
SERVER_COMMANDS: list[tuple[str, CommandCode, bytes]] = [
    ("get_stats", CommandCode.GET_STATS, b""),
    ("create_stream", CommandCode.CREATE_STREAM, wire.CreateStream("C").encode()),
    ("get_users", CommandCode.GET_USERS, b""),
    ("get_user_other", CommandCode.GET_USER, wire.UserRef(_ident("iggy")).encode()),
    (
        "create_user",
        CommandCode.CREATE_USER,
        wire.CreateUser("mallory", "mallory-Pa55").encode(),
    ),
    (
        "update_user",
        CommandCode.UPDATE_USER,
        wire.UpdateUser(_ident("iggy"), "evil").encode(),
    ),
    (
        "update_permissions",
        CommandCode.UPDATE_PERMISSIONS,
        wire.UpdatePermissions(_ident("iggy"), None).encode(),
    ),
    (
        "change_password_other",
        CommandCode.CHANGE_PASSWORD,
        wire.ChangePassword(_ident("iggy"), ROOT_PASSWORD, "stolen-Pa55").encode(),
    ),
    ("delete_user", CommandCode.DELETE_USER, wire.UserRef(_ident("iggy")).encode()),
    ("get_snapshot_file", CommandCode.GET_SNAPSHOT_FILE, wire.GetSnapshot(2, (4,)).encode()),
]


def status_of(client: WireClient, code: CommandCode, body: bytes) -> int:
    frame = client.call_raw(int(code), body)
    assert frame.command is wire.Command.REPLY, f"{code.name}: not a reply"
    header = frame.reply_header()
    if header.status:
        return header.status
    if header.operation.is_result_framed and len(frame.body) >= 12:
        count, _, result = (int.from_bytes(frame.body[i : i + 4], "little") for i in (0, 4, 8))
        if count:
            return result
    return 0


def login(node: NodeProcess, username: str, password: str) -> WireClient:
    client = WireClient(node.address)
    client.login(username, password)
    return client


STREAM_NAMES = [name for name, _, _ in stream_commands("B")]
SERVER_NAMES = [name for name, _, _ in SERVER_COMMANDS]


@pytest.mark.parametrize("name", STREAM_NAMES + SERVER_NAMES)
def test_permissions_user_without_rights_is_unauthorized(world: World, name: str) -> None:
    commands = {n: (c, b) for n, c, b in stream_commands("B") + SERVER_COMMANDS}
    code, body = commands[name]
    with login(world.node, "nobody", NOBODY_PASSWORD) as nobody:
        assert status_of(nobody, code, body) == UNAUTHORIZED
        nobody.ping()  # the refusal costs the request, not the connection


@pytest.mark.parametrize("name", STREAM_NAMES + SERVER_NAMES)
def test_permissions_user_with_rights_on_a_only_is_refused_on_b(world: World, name: str) -> None:
    commands = {n: (c, b) for n, c, b in stream_commands("B") + SERVER_COMMANDS}
    code, body = commands[name]
    with login(world.node, "alice", ALICE_PASSWORD) as alice:
        assert status_of(alice, code, body) == UNAUTHORIZED


# On stream A alice is served: the same frames, every one of them accepted (or refused
# for a reason other than rights), so the refusals above are about rights alone. Run in
# this order, the destructive ones last.
A_ALLOWED = [
    "get_stream",
    "get_topic",
    "send_messages",
    "poll_messages",
    "poll_auto_commit",
    "poll_routing",
    "get_consumer_offset",
    "consumer_offset_routing",
    "store_consumer_offset",
    "delete_consumer_offset",
    "get_consumer_group",
    "get_consumer_groups",
    "join_consumer_group",
    "sync_consumer_group",
    "poll_primary",
    "leave_consumer_group",
    "create_consumer_group",
    "delete_consumer_group",
    "create_topic",
    "update_topic",
    "create_partitions",
    "delete_partitions",
    "update_stream",
    "purge_topic",
    "purge_stream",
    "delete_topic",
    "delete_stream",
]


def test_permissions_user_with_rights_on_a_is_served_on_a(world: World) -> None:
    assert sorted(A_ALLOWED) == sorted(STREAM_NAMES)
    commands = {n: (c, b) for n, c, b in stream_commands("A")}
    refused: dict[str, int] = {}
    with login(world.node, "alice", ALICE_PASSWORD) as alice:
        for name in A_ALLOWED:
            code, body = commands[name]
            status = status_of(alice, code, body)
            if status != 0:
                refused[name] = status
    assert refused == {}


def test_permissions_listings_show_only_what_the_user_may_read(world: World) -> None:
    def names(client: WireClient) -> list[str]:
        streams = client.call(CommandCode.GET_STREAMS, wire.Empty())
        assert isinstance(streams, wire.Streams)
        return sorted(s.name for s in streams.streams)

    with login(world.node, "nobody", NOBODY_PASSWORD) as nobody:
        assert names(nobody) == []
        topics = nobody.call(CommandCode.GET_TOPICS, wire.StreamRef(_ident("B")))
        assert isinstance(topics, wire.Topics) and topics.topics == ()
        me = nobody.call(CommandCode.GET_ME, wire.Empty())
        assert isinstance(me, wire.ClientInfoDetails)
        own = nobody.call(CommandCode.GET_USER, wire.UserRef(_ident("nobody")))
        assert isinstance(own, wire.UserDetails) and own.user.username == "nobody"
    with root(world.node) as admin:
        assert "B" in names(admin)  # (A may be gone: the test served on A deletes it)


def test_permissions_sdk_surfaces_unauthorized(world: World) -> None:
    async def scenario() -> list[str]:
        client = IggyClient(world.node.address)
        await client.connect()
        await client.login_user("nobody", NOBODY_PASSWORD)
        errors = []
        calls: list[Callable[[], Any]] = [
            lambda: client.create_stream("nope"),
            client.get_stats,
            lambda: client.send_messages(
                "B", "t", Partitioning.partition_id(0), [SendMessage(b"x")]
            ),
            client.get_users,
        ]
        for call in calls:
            try:
                await call()
                errors.append("accepted")
            except RuntimeError as error:
                errors.append(str(error))
        return errors

    assert all("Unauthorized" in error for error in run(scenario()))


# -- passwords stay secret ------------------------------------------------------------------


def _drain_output(node: NodeProcess, quiet_s: float = 0.5, bound_s: float = 5.0) -> None:
    """Wait (bounded) until the stopped node's last output lines were read."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            node.lines.get(timeout=quiet_s)
        except queue.Empty:
            return


def test_passwords_never_appear_in_logs_or_data_files(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    node = start_node(data_dir, env={"VIEWSTREAM_LOG_LEVEL": "debug"})
    secrets = {
        "root": ROOT_PASSWORD,
        "first": "Frodo-first-Secret-91",
        "changed": "Frodo-changed-Secret-92",
        "wrong": "Guess-wrong-Secret-93",
        "other": "Sam-other-Secret-94",
    }
    try:

        async def scenario() -> None:
            admin = IggyClient(node.address)
            await admin.connect()
            await admin.login_user("iggy", ROOT_PASSWORD)
            await admin.create_user("frodo", secrets["first"])
            await admin.create_user("sam", secrets["other"])
            frodo = IggyClient(node.address)
            await frodo.connect()
            await frodo.login_user("frodo", secrets["first"])
            await frodo.change_password("frodo", secrets["first"], secrets["changed"])
            for username in ("frodo", "sam", "nobody-here"):
                intruder = IggyClient(node.address)
                await intruder.connect()
                with pytest.raises(RuntimeError):
                    await intruder.login_user(username, secrets["wrong"])
            with pytest.raises(RuntimeError):
                await admin.change_password("sam", secrets["wrong"], secrets["wrong"] + "x")

        run(scenario())
        with WireClient(node.address) as client:  # the logins left a trace in the log
            client.login("frodo", secrets["changed"])
    finally:
        node.stop()
        _drain_output(node)
        node.kill()  # reaps and closes the output pipe
    log = "".join(node.output)
    assert "evicted with INVALID_CREDENTIALS" in log, (
        "the log level did not include the refused logins"
    )
    for what, secret in secrets.items():
        assert secret not in log, f"the {what} password is in the node's log"
    files = [path for path in data_dir.rglob("*") if path.is_file()]
    assert files, "the node wrote no data files"
    for path in files:
        content = path.read_bytes()
        for what, secret in secrets.items():
            assert secret.encode() not in content, f"the {what} password is in {path}"
