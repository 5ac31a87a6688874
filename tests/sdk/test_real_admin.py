"""The SDK's user, token and segment calls against a real node over TCP: users created,
renamed, re-permissioned and deleted; a token created, listed, logged in with (by the
blocking and the trio client), and deleted; DELETE_SEGMENTS served (its effect on segments
is ``tests/runtime/test_retention.py``'s)."""

from __future__ import annotations

import pytest

from sdk import AsyncClient, Client
from sdk.connection_string import ClientConfig
from sdk.errors import IggyError, InvalidCredentials
from sdk.wire import (
    GlobalPermissions,
    IggyErrorCode,
    Permissions,
    StreamPermissions,
    UserStatus,
)
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.sdk.conftest import run_trio

TIMEOUT_S = 5.0


def _config(node: NodeProcess) -> ClientConfig:
    return ClientConfig.one_node(node.address, timeout_s=TIMEOUT_S)


def _root(node: NodeProcess) -> Client:
    client = Client(_config(node))
    client.login_user("iggy", ROOT_PASSWORD)
    return client


def test_user_created_updated_re_permissioned_and_deleted(real_node: NodeProcess) -> None:
    root = _root(real_node)
    try:
        created = root.create_user(
            "sdk-carol",
            "carol-password",
            permissions=Permissions(GlobalPermissions(read_streams=True)),
        )
        assert created.user.username == "sdk-carol"
        assert created.permissions == Permissions(GlobalPermissions(read_streams=True))
        assert "sdk-carol" in [user.username for user in root.get_users()]
        root.update_user("sdk-carol", username="sdk-carol2", status=UserStatus.INACTIVE)
        renamed = root.get_user(created.user.id)
        assert renamed is not None
        assert (renamed.user.username, renamed.user.status) == ("sdk-carol2", UserStatus.INACTIVE)
        streams = (StreamPermissions(1, read_stream=True),)
        root.update_permissions("sdk-carol2", Permissions(streams=streams))
        details = root.get_user("sdk-carol2")
        assert details is not None and details.permissions == Permissions(streams=streams)
        root.change_password("sdk-carol2", "carol-password", "carol-password-2")
        root.delete_user("sdk-carol2")
        assert root.get_user("sdk-carol2") is None
    finally:
        root.close()


def test_token_logs_in_with_both_clients_as_its_owner_until_deleted(
    real_node: NodeProcess,
) -> None:
    root = _root(real_node)
    try:
        root.create_user("sdk-dave", "dave-password")  # no permissions: a token needs none
        dave = Client(_config(real_node))
        dave.login_user("sdk-dave", "dave-password")
        token = dave.create_personal_access_token("sdk-dave-token", expiry_s=3600)
        listed = dave.get_personal_access_tokens()
        assert [t.name for t in listed] == ["sdk-dave-token"] and listed[0].expiry_at > 0
        dave_id = dave.get_me().user_id

        by_token = Client(_config(real_node))
        try:
            assert by_token.login_with_personal_access_token(token).user_id == dave_id
            assert by_token.get_me().user_id == dave_id
        finally:
            by_token.close()

        async def trio_login() -> int:
            async with AsyncClient(_config(real_node)) as client:
                reply = await client.login_with_personal_access_token(token)
                assert (await client.get_me()).user_id == reply.user_id
                return reply.user_id

        assert run_trio(trio_login) == dave_id

        dave.delete_personal_access_token("sdk-dave-token")
        assert dave.get_personal_access_tokens() == []
        refused = Client(_config(real_node))
        try:
            with pytest.raises(InvalidCredentials):
                refused.login_with_personal_access_token(token)
        finally:
            refused.close()
        dave.close()
    finally:
        root.close()


def test_token_with_a_taken_name_is_refused_with_iggys_code(real_node: NodeProcess) -> None:
    root = _root(real_node)
    try:
        root.create_personal_access_token("sdk-root-token")
        with pytest.raises(IggyError) as taken:
            root.create_personal_access_token("sdk-root-token")
        assert taken.value.code == IggyErrorCode.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS
        root.delete_personal_access_token("sdk-root-token")
    finally:
        root.close()


def test_delete_segments_of_a_partition_without_sealed_segments_succeeds_and_of_none_fails(
    real_node: NodeProcess,
) -> None:
    root = _root(real_node)
    try:
        root.create_stream("sdk-segments")
        root.create_topic("sdk-segments", "t", 1)
        root.delete_segments("sdk-segments", "t", 0, 1)  # nothing sealed: nothing to do
        with pytest.raises(IggyError) as refused:
            root.delete_segments("sdk-segments", "t", 3, 1)
        assert refused.value.code == IggyErrorCode.PARTITION_NOT_FOUND
        # The refusal leaves the session usable.
        assert root.get_stream("sdk-segments") is not None
        root.delete_stream("sdk-segments")
    finally:
        root.close()
