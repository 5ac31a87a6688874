"""Users on the wire and in the state: translation, replies, reads, permissions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.state.admission import (
    change_password_command,
    check_password,
    create_user_command,
    domain_permissions,
    metadata_command,
)
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    ChangePassword,
    CreateConsumerGroup,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteUser,
    UpdatePermissions,
    UpdateUser,
    UserStatus,
)
from broker.state.metadata_machine import MetadataMachine, metadata_reply
from broker.state.permissions import GlobalPermissions, Permissions, StreamPermissions
from broker.state.routing import route_poll_target
from sdk import wire
from sdk.wire import CommandCode, Operation
from tests.state.helpers import PASSWORD, driver_with_root
from tests.wire.strategies import permission_sets


@settings(max_examples=50, deadline=None)
@given(permissions=st.none() | permission_sets())
def test_requested_permissions_are_kept_as_sent_up_to_id_order(
    permissions: wire.Permissions | None,
) -> None:
    back = domain_permissions(permissions)
    if permissions is None:
        assert back is None
        return
    assert back is not None
    assert back.global_ == permissions.global_
    by_id = {s.stream_id: s for s in permissions.streams}
    assert [s.stream_id for s in back.streams] == sorted(by_id)
    for stream in back.streams:
        sent = by_id[stream.stream_id]
        assert sorted(sent.topics, key=lambda t: t.topic_id) == list(stream.topics)
        assert stream.manage_stream == sent.manage_stream
        assert stream.send_messages == sent.send_messages


def test_user_requests_translate_to_commands_without_clear_passwords() -> None:
    perms = wire.Permissions(wire.GlobalPermissions(read_users=True))
    create = create_user_command(
        wire.CreateUser("alice", "clear-text", wire.UserStatus.INACTIVE, perms), PASSWORD
    )
    assert create == CreateUser(
        "alice",
        PASSWORD,
        UserStatus.INACTIVE,
        Permissions(GlobalPermissions(read_users=True)),
    )
    assert "clear-text" not in repr(create)
    change = change_password_command(
        wire.ChangePassword(wire.Identifier("alice"), "old-clear", "new-clear"), PASSWORD
    )
    assert change == ChangePassword("alice", PASSWORD)
    assert metadata_command(CommandCode.DELETE_USER, wire.UserRef(wire.Identifier(3))) == (
        DeleteUser(3)
    )
    assert metadata_command(
        CommandCode.UPDATE_USER,
        wire.UpdateUser(wire.Identifier("alice"), None, wire.UserStatus.ACTIVE),
    ) == UpdateUser("alice", None, UserStatus.ACTIVE)
    assert metadata_command(
        CommandCode.UPDATE_PERMISSIONS, wire.UpdatePermissions(wire.Identifier(3), None)
    ) == UpdatePermissions(3, None)


def test_wire_payloads_never_show_passwords_in_their_repr() -> None:
    for payload in (
        wire.CreateUser("alice", "hunter2-secret"),
        wire.ChangePassword(wire.Identifier(1), "hunter2-secret", "hunter3-secret"),
        wire.LoginRegister("alice", "hunter2-secret"),
    ):
        assert "hunter" not in repr(payload)


def test_user_options_and_bad_passwords_are_refused_before_hashing() -> None:
    with pytest.raises(StateError) as refused:
        create_user_command(
            wire.CreateUser("alice", "pw-ok", options=(wire.OptionEntry.of("x", "y"),)), PASSWORD
        )
    assert refused.value.code is ErrorCode.UNSUPPORTED_OPTION_KEY
    for bad in ("", "ab", "x" * 101):
        with pytest.raises(StateError) as refused:
            check_password(bad)
        assert refused.value.code is ErrorCode.INVALID_PASSWORD
    check_password("abc")


def test_create_user_reply_carries_the_user_details() -> None:
    driver = driver_with_root()
    perms = Permissions(streams=(StreamPermissions(4, read_stream=True),))
    result = driver.as_root(CreateUser("bob", PASSWORD, UserStatus.ACTIVE, perms))
    body = metadata_reply(Operation.CREATE_USER, result)
    details = wire.UserDetails.decode(wire.split_result(Operation.CREATE_USER, body))
    assert details.user.username == "bob"
    assert details.user.status is wire.UserStatus.ACTIVE
    assert details.permissions == perms
    assert PASSWORD.hash not in body and PASSWORD.salt not in body


def test_get_user_and_get_users_need_read_users_except_for_oneself() -> None:
    driver = driver_with_root()
    bob = driver.add_user("bob", None)
    reader = driver.add_user("reader", Permissions(GlobalPermissions(read_users=True)))
    machine = MetadataMachine(driver.state)
    bob_session = driver.login(0xB0B, bob)
    reader_session = driver.login(0x12EAD, reader)
    own = wire.UserDetails.decode(machine.get_user(wire.UserRef(wire.Identifier(bob)), bob_session))
    assert own.user.username == "bob" and own.permissions is None
    attempts: list[Callable[[], bytes]] = [
        lambda: machine.get_user(wire.UserRef(wire.Identifier("iggy")), bob_session),
        lambda: machine.get_user(wire.UserRef(wire.Identifier("nobody")), bob_session),
        lambda: machine.get_users(bob_session),
    ]
    for denied in attempts:
        with pytest.raises(StateError) as refused:
            denied()
        assert refused.value.code is ErrorCode.UNAUTHORIZED
    everyone = wire.Users.decode(machine.get_users(reader_session))
    assert [u.username for u in everyone.users] == ["iggy", "bob", "reader"]
    missing = machine.get_user(wire.UserRef(wire.Identifier("nobody")), reader_session)
    assert missing == b""
    root = wire.UserDetails.decode(
        machine.get_user(wire.UserRef(wire.Identifier(0)), driver.root_session)
    )
    assert root.permissions is not None and root.permissions.global_.manage_servers


def test_route_poll_target_does_not_judge_the_group_assignment() -> None:
    driver = driver_with_root()
    driver.as_root(CreateStream("s"))
    driver.as_root(CreateTopic("s", "t", 2))
    driver.as_root(CreateConsumerGroup("s", "t", "g"))
    poll = wire.PollMessages(
        wire.Consumer(wire.ConsumerKind.CONSUMER_GROUP, wire.Identifier("g")),
        wire.Identifier("s"),
        wire.Identifier("t"),
        1,
        wire.PollingStrategy.next(),
        10,
        True,
    )
    # Not a member: the route still names the partition; the primary judges the poll.
    route = route_poll_target(driver.state, poll, driver.root_session)
    assert (route.partition_id, route.consumer is not None) == (1, True)
