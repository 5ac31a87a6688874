"""Personal access tokens and topic options on a real 3-node cluster: what one node
commits, every other node serves, and a request refused on a node that is not the
metadata primary is refused with Iggy's error code.

The cluster is started by ``broker.cli.cluster.start_cluster`` with a 5 ms tick (client,
bus and HTTP ports free and below the ephemeral range; no WebSocket listener). A node
answers 58 (or evicts a token it has not heard of yet) until it applied the commit: the
helpers retry that, bounded. Every process is killed in teardown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from apache_iggy import AutoLogin, HeaderKey, HeaderValue, IggyClient, TcpConfig

from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import start_cluster
from sdk import wire
from sdk.wire import CommandCode, EvictionReason, IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD
from tests.runtime.test_interop_cluster import TICK_MS, TRANSIENT, Cluster
from tests.runtime.test_interop_node import run
from tests.wire_client import WireClient

NODES: Final = 3
WAIT_S: Final = 30.0
"""Bound on a node applying a commit, and on the primary removing an expired token."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder: Path = tmp_path_factory.mktemp("tokens-options-cluster")
    layout = cluster_layout(folder, NODES)
    processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
    try:
        yield Cluster(layout, processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=20)


def _root(address: str) -> WireClient:
    """Root logged in on ``address``, again after a transient refusal (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        client = WireClient(address, timeout_s=15)
        try:
            client.login("iggy", ROOT_PASSWORD)
            return client
        except wire.ServerRejected as rejected:
            client.close()
            if rejected.code not in TRANSIENT or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _token_login(address: str, token: str) -> WireClient:
    """A new connection on ``address`` logged in with ``token``; raises SessionEvicted
    when refused, ServerRejected on any error reply."""
    client = WireClient(address, timeout_s=15)
    try:
        reply = client.call(CommandCode.LOGIN_REGISTER_WITH_PAT, wire.LoginRegisterWithPat(token))
    except BaseException:
        client.close()
        raise
    assert isinstance(reply, wire.LoginRegisterReply)
    client.session = reply.session
    client.request = 1
    return client


def _token_login_once_known(address: str, token: str) -> WireClient:
    """Log in with a token just committed elsewhere: ``address`` evicts it as unknown, or
    answers 58, until it applied the commit. Bounded."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return _token_login(address, token)
        except wire.SessionEvicted as evicted:
            assert evicted.reason is EvictionReason.INVALID_TOKEN, evicted.reason
            assert time.monotonic() < deadline, f"{address} does not learn of the token"
        except wire.ServerRejected as refused:
            assert refused.code in TRANSIENT, refused.code
            assert time.monotonic() < deadline, f"{address} keeps refusing the token"
        time.sleep(0.05)


def _assert_token_refused(address: str, token: str) -> None:
    """A login with ``token`` on ``address`` is evicted as an invalid token. A 58 (the
    node lags behind what it heard of) is asked again, bounded; a login that succeeds is
    a failure at once."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            client = _token_login(address, token)
        except wire.SessionEvicted as evicted:
            assert evicted.reason is EvictionReason.INVALID_TOKEN, evicted.reason
            return
        except wire.ServerRejected as refused:
            assert refused.code in TRANSIENT, refused.code
            assert time.monotonic() < deadline, f"{address} keeps answering {refused.code}"
        else:
            client.close()
            raise AssertionError(f"{address} let a dead token log in")
        time.sleep(0.05)


async def _sdk_names_with_token(address: str, token: str) -> list[str]:
    """Log the official SDK in on ``address`` with ``token``, create a stream as the
    token's user, and list the streams' names."""
    config = TcpConfig(server_address=address, auto_login=AutoLogin.personal_access_token(token))
    client = IggyClient(config)
    await client.connect()
    await client.create_stream("token-made")
    return [s.name for s in await client.get_streams()]


def _create_token(client: WireClient, name: str, expiry_us: int = wire.EXPIRY_NEVER) -> str:
    reply = client.call(
        CommandCode.CREATE_PERSONAL_ACCESS_TOKEN, wire.CreatePersonalAccessToken(name, expiry_us)
    )
    assert isinstance(reply, wire.RawPersonalAccessToken)
    return reply.token


def _tokens(client: WireClient) -> list[tuple[str, int]]:
    frame = client.call_raw(int(CommandCode.GET_PERSONAL_ACCESS_TOKENS))
    assert frame.reply_header().status == 0
    reply = wire.read_reply(CommandCode.GET_PERSONAL_ACCESS_TOKENS, frame)
    assert isinstance(reply, wire.PersonalAccessTokens)
    return [(t.name, t.expiry_at) for t in reply.tokens]


def _tokens_raw(client: WireClient) -> bytes:
    frame = client.call_raw(int(CommandCode.GET_PERSONAL_ACCESS_TOKENS))
    assert frame.reply_header().status == 0
    return bytes(frame.body)


def _wait_until(what: str, predicate: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.1)


def test_a_token_made_on_one_node_logs_in_on_the_others_and_dies_everywhere(
    cluster: Cluster,
) -> None:
    maker, other, third = (cluster.address(i) for i in range(NODES))
    with _root(maker) as root:
        token = _create_token(root, "cluster-token")
    assert len(token) >= 43  # 256 random bits
    for address in (other, third):
        with _token_login_once_known(address, token) as by_token:
            me = by_token.call(CommandCode.GET_ME, wire.Empty())
            assert isinstance(me, wire.ClientInfoDetails) and me.user_id == 0  # root's
    # The official SDK's token login, on a node that did not make the token.
    assert "token-made" in run(_sdk_names_with_token(third, token))
    with _root(other) as root_there:
        _wait_until(
            f"{other} lists the token",
            lambda: ("cluster-token", 0) in _tokens(root_there),
        )
        # Listed by name and expiry; the raw token is in no reply.
        assert token.encode() not in _tokens_raw(root_there)
    with _root(third) as root_third:
        root_third.call(
            CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, wire.PersonalAccessTokenRef("cluster-token")
        )
        assert ("cluster-token", 0) not in _tokens(root_third)
    # The deletion was acknowledged: from now on no node lets the token in, even one
    # that has not applied the deletion yet (a login first sees everything acknowledged,
    # docs/security.md).
    for index in range(NODES):
        _assert_token_refused(cluster.address(index), token)


def _password_login(address: str, username: str, password: str) -> EvictionReason | None:
    """A password login on a new connection to ``address``: None if it got in, else the
    eviction's reason. A 58 (the node could not confirm it is current) is asked again,
    bounded."""
    deadline = time.monotonic() + WAIT_S
    while True:
        with WireClient(address, timeout_s=15) as client:
            try:
                client.login(username, password)
            except wire.SessionEvicted as evicted:
                return evicted.reason
            except wire.ServerRejected as refused:
                assert refused.code in TRANSIENT, refused.code
                assert time.monotonic() < deadline, f"{address} keeps answering {refused.code}"
            else:
                return None
        time.sleep(0.05)


def test_a_changed_password_and_a_deleted_user_are_refused_at_once_on_every_node(
    cluster: Cluster,
) -> None:
    """A login judges credentials on metadata holding every change acknowledged before
    it, wherever the change was made: a node that has not applied it yet waits for it."""
    maker = cluster.address(0)
    user = wire.Identifier.named("rotating")
    with _root(maker) as root:
        root.call(CommandCode.CREATE_USER, wire.CreateUser("rotating", "first-pass"))
        for index in range(NODES):
            assert _password_login(cluster.address(index), "rotating", "first-pass") is None
        root.call(CommandCode.CHANGE_PASSWORD, wire.ChangePassword(user, "first-pass", "next-pass"))
        for index in range(NODES):
            address = cluster.address(index)
            refused = _password_login(address, "rotating", "first-pass")
            assert refused is EvictionReason.INVALID_CREDENTIALS, (address, refused)
            assert _password_login(address, "rotating", "next-pass") is None
        root.call(CommandCode.DELETE_USER, wire.UserRef(user))
        for index in range(NODES):
            refused = _password_login(cluster.address(index), "rotating", "next-pass")
            assert refused is EvictionReason.INVALID_CREDENTIALS, (index, refused)


def test_an_expired_token_is_refused_and_removed_on_every_node(cluster: Cluster) -> None:
    with _root(cluster.address(1)) as root:
        token = _create_token(root, "short-lived", expiry_us=1_000_000)  # one second
        [expiry_at_us] = [at for name, at in _tokens(root) if name == "short-lived"]
        assert expiry_at_us > 0
    for index in range(NODES):
        with _root(cluster.address(index)) as root_any:
            _wait_until(
                f"node {index} removes the expired token",
                lambda: "short-lived" not in [n for n, _ in _tokens(root_any)],
            )
        assert time.time_ns() // 1000 >= expiry_at_us  # removed only once it expired
        _assert_token_refused(cluster.address(index), token)


async def _sdk(address: str) -> Any:
    client = IggyClient(address)
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    return client


def _metadata_primary(cluster: Cluster) -> int:
    """The index of the metadata primary, as node 0 reports it."""
    with _root(cluster.address(0)) as root:
        frame = root.call_raw(int(CommandCode.GET_CLUSTER_METADATA))
        assert frame.reply_header().status == 0
        metadata = wire.ClusterMetadata.decode(bytes(frame.body))
    leaders = [n.tcp_port for n in metadata.nodes if n.role == wire.ClusterNodeRole.LEADER]
    assert len(leaders) == 1, metadata.nodes
    ports = [int(address.rpartition(":")[2]) for address in cluster.layout.client_addresses]
    return ports.index(leaders[0])


def test_topic_options_set_on_one_node_are_served_by_the_others(cluster: Cluster) -> None:
    stream = "optioned"
    options = {"enforce_fsync": "true", "segment_size": "128 MiB"}

    async def create() -> None:
        client = await _sdk(cluster.address(0))
        await client.create_stream(stream)
        await client.create_topic(stream, "t", 1, options=options)

    run(create())

    async def read_back() -> Any:
        client = await _sdk(cluster.address(1))
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                topic = await client.get_topic(stream, "t")
            except RuntimeError as error:
                # Before the node applied the stream it answers "not found" or 58.
                assert time.monotonic() < deadline, str(error)
                topic = None
            if topic is not None:
                return topic
            assert time.monotonic() < deadline, "node 1 never served the topic"
            await asyncio.sleep(0.05)

    topic = run(read_back(), timeout_s=2 * WAIT_S)

    async def describe() -> list[Any]:
        client = await _sdk(cluster.address(2))
        described: list[Any] = await client.describe_options("topic")
        return described

    described = {spec.key: spec for spec in run(describe())}

    explicit = {str(k.value): v for k, v in topic.options.items()}
    derived = {str(k.value): v for k, v in topic.derived_options.items()}
    # Stored as parsed; ``enforce_fsync`` true as the durability it implies (the SDK
    # sends both durabilities on a create, "replicated" unless told otherwise).
    assert explicit == {
        "segment_size": HeaderValue.UnsignedInt64(128 << 20),
        "durability": HeaderValue.String("persisted"),
        "consumer_offset_durability": HeaderValue.String("replicated"),
    }
    assert topic.options[HeaderKey.String("durability")] == HeaderValue.String("persisted")
    # Every other key the node resolved is derived, with the default node 2 describes.
    assert set(derived) == set(described) - {"enforce_fsync", *explicit}
    for key, value in derived.items():
        assert value == described[key].default_value, key


def test_a_bad_option_value_is_refused_on_a_node_that_is_not_the_primary(
    cluster: Cluster,
) -> None:
    primary = _metadata_primary(cluster)
    follower = cluster.address((primary + 1) % NODES)
    with _root(follower) as root:
        created = root.call_raw(
            int(CommandCode.CREATE_STREAM), wire.CreateStream("badly-optioned").encode()
        )
        assert created.reply_header().status == 0
        body = wire.CreateTopic(
            wire.Identifier("badly-optioned"),
            1,
            "t",
            (wire.OptionEntry.of("segment_size", "lots", wire.HeaderKind.STRING),),
        ).encode()
        refused = root.call_raw(int(CommandCode.CREATE_TOPIC), body)
        assert refused.reply_header().status == IggyErrorCode.INVALID_OPTION_VALUE
        assert len(refused.body) == 0
        # Nothing was created, and the node keeps serving.
        frame = root.call_raw(
            int(CommandCode.GET_TOPIC),
            wire.TopicRef(wire.Identifier("badly-optioned"), wire.Identifier("t")).encode(),
        )
        assert frame.reply_header().status == 0 and len(frame.body) == 0
