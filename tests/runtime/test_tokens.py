"""Personal access tokens against a real node process over TCP (raw frames, and the
official SDK's token login): create, list, delete, log in, expire, survive a restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_iggy import AutoLogin, IggyClient, TcpConfig

from sdk import wire
from sdk.wire import CommandCode, EvictionReason, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.wire_client import WireClient

EXPIRY_WAIT_S = 30.0
"""Bound on waiting for the primary to remove an expired token (it checks every 0.1 s)."""


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[NodeProcess]:
    process = start_node(tmp_path / "data")
    try:
        yield process
    finally:
        process.kill()


def _root(node: NodeProcess) -> WireClient:
    client = WireClient(node.address)
    client.login("iggy", ROOT_PASSWORD)
    return client


def _user(node: NodeProcess, root: WireClient, username: str) -> WireClient:
    """A user with no permissions at all, logged in on its own connection."""
    root.call(CommandCode.CREATE_USER, wire.CreateUser(username, "secret-password"))
    client = WireClient(node.address)
    client.login(username, "secret-password")
    return client


def _create(client: WireClient, name: str, expiry: int = wire.EXPIRY_NEVER) -> str:
    reply = client.call(
        CommandCode.CREATE_PERSONAL_ACCESS_TOKEN, wire.CreatePersonalAccessToken(name, expiry)
    )
    assert isinstance(reply, wire.RawPersonalAccessToken)
    return reply.token


def _tokens(client: WireClient) -> list[tuple[str, int]]:
    reply = client.call(CommandCode.GET_PERSONAL_ACCESS_TOKENS, wire.Empty())
    assert isinstance(reply, wire.PersonalAccessTokens)
    return [(t.name, t.expiry_at) for t in reply.tokens]


def _token_login(node: NodeProcess, token: str) -> WireClient:
    """A new connection logged in with ``token`` (raises SessionEvicted when refused)."""
    client = WireClient(node.address)
    try:
        reply = client.call(CommandCode.LOGIN_REGISTER_WITH_PAT, wire.LoginRegisterWithPat(token))
    except BaseException:
        client.close()
        raise
    assert isinstance(reply, wire.LoginRegisterReply)
    client.session = reply.session
    client.request = 1
    return client


def _me(client: WireClient) -> wire.ClientInfoDetails:
    reply = client.call(CommandCode.GET_ME, wire.Empty())
    assert isinstance(reply, wire.ClientInfoDetails)
    return reply


def test_token_created_by_a_user_logs_in_as_that_user_and_is_listed_to_it_only(
    node: NodeProcess,
) -> None:
    with _root(node) as root, _user(node, root, "alice") as alice:
        token = _create(alice, "ci-token")
        assert len(token) >= 43  # 256 random bits
        assert _tokens(alice) == [("ci-token", 0)]
        assert ("ci-token", 0) not in _tokens(root)  # root lists its own tokens only
        with _token_login(node, token) as by_token:
            assert by_token.session > 0
            assert _me(by_token).user_id == _me(alice).user_id
            # The token session is a session of alice's: her rights, no more.
            with pytest.raises(wire.ServerRejected) as denied:
                by_token.call(CommandCode.GET_USERS, wire.Empty())
            assert denied.value.code == IggyErrorCode.UNAUTHORIZED
            assert _tokens(by_token) == [("ci-token", 0)]


def test_token_given_a_taken_name_a_bad_name_or_a_replayed_create_is_refused(
    node: NodeProcess,
) -> None:
    with _root(node) as root, _user(node, root, "bob") as bob:
        _create(bob, "deploy")
        for name, code in (("deploy", 51), ("ab", 50), ("x" * 31, 50)):
            with pytest.raises(wire.ServerRejected) as refused:
                _create(bob, name)
            assert refused.value.code == code
        # A retry of a create (same number, same body) finds the first one committed: its
        # raw token was shown once, so the retry is refused, as Iggy refuses it.
        _create(bob, "retried")
        bob.request -= 1
        with pytest.raises(wire.ServerRejected) as replayed:
            _create(bob, "retried")
        assert replayed.value.code == 51
        assert _tokens(bob) == [("deploy", 0), ("retried", 0)]


def test_deleted_token_no_longer_logs_in_and_an_unknown_one_is_evicted_as_invalid(
    node: NodeProcess,
) -> None:
    with _root(node) as root, _user(node, root, "carol") as carol:
        token = _create(carol, "temporary")
        with pytest.raises(wire.ServerRejected) as missing:
            root.call(
                CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, wire.PersonalAccessTokenRef("temporary")
            )
        assert missing.value.code == 20  # not root's token: a user reaches only its own
        carol.call(
            CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, wire.PersonalAccessTokenRef("temporary")
        )
        assert _tokens(carol) == []
        for refused_token in (token, "not-a-token"):
            with pytest.raises(wire.SessionEvicted) as evicted:
                _token_login(node, refused_token)
            assert evicted.value.reason is EvictionReason.INVALID_TOKEN


def test_token_of_a_deleted_user_dies_with_it(node: NodeProcess) -> None:
    with _root(node) as root, _user(node, root, "dave") as dave:
        token = _create(dave, "ci-token")
        user_id = _me(dave).user_id
    with _root(node) as root:
        root.call(CommandCode.DELETE_USER, wire.UserRef(wire.Identifier(user_id)))
    with pytest.raises(wire.SessionEvicted) as evicted:
        _token_login(node, token)
    assert evicted.value.reason is EvictionReason.INVALID_TOKEN


def test_expired_token_is_refused_and_removed_by_a_replicated_op(node: NodeProcess) -> None:
    with _root(node) as root, _user(node, root, "erin") as erin:
        token = _create(erin, "short", expiry=1_000_000)  # one second
        [(name, expiry_at_us)] = _tokens(erin)
        assert name == "short" and expiry_at_us > 0
        # Bounded wait: the token goes once its expiry passed and the primary's
        # maintenance pass proposed its removal; until then it is still listed.
        deadline = time.monotonic() + EXPIRY_WAIT_S
        while _tokens(erin) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _tokens(erin) == []
        assert time.time_ns() // 1000 >= expiry_at_us  # removed only after it expired
        with pytest.raises(wire.SessionEvicted) as evicted:
            _token_login(node, token)
        assert evicted.value.reason is EvictionReason.INVALID_TOKEN


def test_token_survives_a_restart_of_the_node(fresh_node: NodeProcess, tmp_path: Path) -> None:
    with _root(fresh_node) as root:
        token = _create(root, "durable")
    assert fresh_node.stop() == 0
    # Only the hash was replicated: the raw token is in no file of the data directory.
    stored = [path for path in (tmp_path / "data").rglob("*") if path.is_file()]
    assert stored
    assert not [path for path in stored if token.encode() in path.read_bytes()]
    restarted = start_node(tmp_path / "data")
    try:
        with _token_login(restarted, token) as by_token:
            assert _me(by_token).user_id == 0  # the root user
            assert _tokens(by_token) == [("durable", 0)]
    finally:
        restarted.kill()


def test_official_sdk_logs_in_with_a_token_created_here(node: NodeProcess) -> None:
    with _root(node) as root:
        token = _create(root, "sdk-login")

    async def scenario() -> list[Any]:
        config = TcpConfig(
            server_address=node.address, auto_login=AutoLogin.personal_access_token(token)
        )
        client = IggyClient(config)
        await client.connect()
        await client.create_stream("token-stream")
        streams: list[Any] = await client.get_streams()
        return streams

    async def bounded() -> list[Any]:
        return await asyncio.wait_for(scenario(), 30.0)

    streams = asyncio.run(bounded())
    assert "token-stream" in [s.name for s in streams]
