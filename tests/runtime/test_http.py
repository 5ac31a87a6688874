"""Iggy's HTTP API on a real node: the official SDK over iggy+http://, and bad clients.

The module's node serves HTTP on a free port with a known token key (so a test can make
expired and forged tokens with PyJWT), a 2 s frame read time (the slow-client bound) and
a 1 MiB frame limit (the body bound). Tests use distinct stream names.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import queue
import secrets
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

from broker.runtime.http_tokens import derive_key
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, free_port, start_node
from tests.runtime.test_interop_node import run

TOKEN_SECRET = "http-tests-token-secret-" + "x" * 16
FRAME_SIZE_MAX = 1 << 20
FRAME_READ_TIMEOUT_S = 2
KEY = derive_key(TOKEN_SECRET)


@pytest.fixture(scope="module")
def http_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, int]]:
    data_dir: Path = tmp_path_factory.mktemp("http") / "data"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    node = start_node(
        data_dir,
        env={
            "VIEWSTREAM_HTTP_ADDRESS": f"127.0.0.1:{port}",
            "VIEWSTREAM_HTTP_TOKEN_SECRET": TOKEN_SECRET,
            "VIEWSTREAM_LIMITS__FRAME_SIZE_BYTES_MAX": str(FRAME_SIZE_MAX),
            "VIEWSTREAM_LIMITS__FRAME_READ_TIMEOUT_S": str(FRAME_READ_TIMEOUT_S),
        },
    )
    try:
        yield node, port
    finally:
        node.kill()


async def http_client(port: int) -> Any:
    client = IggyClient.from_connection_string(f"iggy+http://iggy:{ROOT_PASSWORD}@127.0.0.1:{port}")
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    return client


async def tcp_client(node: NodeProcess) -> Any:
    client = IggyClient(node.address)
    await client.connect()
    await client.login_user("iggy", ROOT_PASSWORD)
    return client


def payloads(messages: list[Any]) -> list[bytes]:
    return [bytes(m.payload()) for m in messages]


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """One HTTP request on its own connection: (status, JSON body, text or None)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if body is not None:
        sent.setdefault("Content-Type", "application/json")
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        raw = response.read()
        if not raw:
            return response.status, None
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, json.loads(raw)
        return response.status, raw.decode()
    finally:
        connection.close()


def login(port: int, retry_s: float = 20.0) -> dict[str, Any]:
    """Log in as root; a transient refusal (503: a cluster still electing) is retried
    until ``retry_s`` have passed, as Iggy's clients retry it."""
    body = json.dumps({"username": "iggy", "password": ROOT_PASSWORD}).encode()
    deadline = time.monotonic() + retry_s
    while True:
        status, identity = request(port, "POST", "/users/login", body)
        if status != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 200, identity
    return dict(identity)


# -- the official SDK ------------------------------------------------------------------------


def test_sdk_over_http_creates_sends_and_polls_with_every_strategy(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node

    async def scenario() -> dict[str, list[bytes]]:
        client = await http_client(port)
        await client.ping()
        await client.create_stream("h-flow")
        await client.create_topic("h-flow", "t", 2)
        stream = await client.get_stream("h-flow")
        assert stream is not None and stream.name == "h-flow" and stream.topics_count == 1
        topic = await client.get_topic("h-flow", "t")
        assert topic is not None and topic.partitions_count == 2
        assert await client.get_stream("h-missing") is None
        before_us = time.time_ns() // 1000
        await client.send_messages("h-flow", "t", 1, [SendMessage(f"m{i}") for i in range(5)])
        consumer = Consumer.Single(7)

        async def poll(strategy: Any, count: int = 2, auto_commit: bool = False) -> list[bytes]:
            messages = await client.poll_messages(
                "h-flow",
                "t",
                consumer=consumer,
                polling_strategy=strategy,
                count=count,
                auto_commit=auto_commit,
                partition_id=1,
            )
            return payloads(messages)

        seen = {
            "offset": await poll(PollingStrategy.Offset(2)),
            "first": await poll(PollingStrategy.First()),
            "last": await poll(PollingStrategy.Last()),
            "timestamp": await poll(PollingStrategy.Timestamp(before_us)),
        }
        # Next reads from the stored offset: the auto-commit of the first poll stores it,
        # asynchronously (as over TCP): wait, bounded, until the next poll moves on.
        seen["next 1"] = await poll(PollingStrategy.Next(), 3, auto_commit=True)
        for _ in range(100):
            following = await poll(PollingStrategy.Next(), 3)
            if following[:1] != [b"m0"]:
                break
            await asyncio.sleep(0.05)
        seen["next 2"] = following
        stats = await client.get_stats()
        assert stats.messages_count >= 5
        return seen

    seen = run(scenario())
    assert seen["offset"] == [b"m2", b"m3"]
    assert seen["first"] == [b"m0", b"m1"]
    assert seen["last"] == [b"m3", b"m4"]
    assert seen["timestamp"] == [b"m0", b"m1"]
    assert seen["next 1"] == [b"m0", b"m1", b"m2"]
    assert seen["next 2"] == [b"m3", b"m4"]


def test_sdk_over_http_manages_consumer_groups(http_node: tuple[NodeProcess, int]) -> None:
    _, port = http_node

    async def scenario() -> tuple[Any, list[Any], Any]:
        client = await http_client(port)
        await client.create_stream("h-groups")
        await client.create_topic("h-groups", "t", 3)
        await client.create_consumer_group("h-groups", "t", "g")
        group = await client.get_consumer_group("h-groups", "t", "g")
        groups = await client.get_consumer_groups("h-groups", "t")
        await client.delete_consumer_group("h-groups", "t", "g")
        gone = await client.get_consumer_group("h-groups", "t", "g")
        return group, groups, gone

    group, groups, gone = run(scenario())
    assert group is not None and group.name == "g" and group.partitions_count == 3
    assert [g.name for g in groups] == ["g"]
    assert gone is None


def test_messages_cross_between_tcp_and_http(http_node: tuple[NodeProcess, int]) -> None:
    node, port = http_node

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        tcp = await tcp_client(node)
        web = await http_client(port)
        await tcp.create_stream("h-cross")
        await tcp.create_topic("h-cross", "t", 1)
        await tcp.send_messages("h-cross", "t", 0, [SendMessage(b"over tcp")])
        await web.send_messages("h-cross", "t", 0, [SendMessage(b"over http")])
        options = {
            "consumer": Consumer.Single(1),
            "polling_strategy": PollingStrategy.First(),
            "count": 10,
            "auto_commit": False,
            "partition_id": 0,
        }
        by_http = await web.poll_messages("h-cross", "t", **options)
        by_tcp = await tcp.poll_messages("h-cross", "t", **options)
        return payloads(by_http), payloads(by_tcp)

    by_http, by_tcp = run(scenario())
    assert by_http == [b"over tcp", b"over http"]
    assert by_tcp == by_http


def test_sdk_over_http_manages_users_and_logs_out(http_node: tuple[NodeProcess, int]) -> None:
    _, port = http_node

    async def scenario() -> tuple[Any, str]:
        client = await http_client(port)
        await client.create_user("h-alice", "h-alice-password-1")
        alice = await client.get_user("h-alice")
        await client.delete_user("h-alice")
        await client.logout_user()
        try:
            await client.get_streams()
        except RuntimeError as error:
            return alice, str(error)
        return alice, "no error"

    alice, after_logout = run(scenario())
    assert alice is not None and alice.username == "h-alice"
    assert "Unauthenticated" in after_logout


# -- the routes the SDK does not expose --------------------------------------------------------


def test_consumer_offsets_are_stored_read_and_deleted(http_node: tuple[NodeProcess, int]) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    status, _ = request(port, "POST", "/streams", json.dumps({"name": "h-off"}).encode(), token)
    assert status == 200
    topic = {
        "name": "t",
        "partitions_count": 1,
        "compression_algorithm": "none",
        "message_expiry": 0,
        "max_topic_size": 0,
    }
    status, created = request(
        port, "POST", "/streams/h-off/topics", json.dumps(topic).encode(), token
    )
    assert status == 200 and created["partitions_count"] == 1
    messages = {
        "partitioning": {"kind": "partition_id", "value": "AAAAAA=="},
        "messages": [{"id": 0, "payload": "b25l"}, {"id": 0, "payload": "dHdv"}],
    }
    path = "/streams/h-off/topics/t/messages"
    status, sent = request(port, "POST", path, json.dumps(messages).encode(), token)
    assert status == 201 and sent["confirmations"][0]["base_offset"] == 0
    offsets = "/streams/h-off/topics/t/consumer-offsets"
    store = {"consumer_id": 5, "partition_id": 0, "offset": 1}
    status, _ = request(port, "PUT", offsets, json.dumps(store).encode(), token)
    assert status == 204
    status, info = request(port, "GET", f"{offsets}?consumer_id=5&partition_id=0", token=token)
    assert status == 200
    assert info == {"partition_id": 0, "current_offset": 1, "stored_offset": 1}
    status, _ = request(port, "DELETE", f"{offsets}/5?partition_id=0", token=token)
    assert status == 204
    status, _ = request(port, "GET", f"{offsets}?consumer_id=5&partition_id=0", token=token)
    assert status == 404
    status, polled = request(
        port, "GET", f"{path}?consumer_id=5&partition_id=0&kind=offset&value=1&count=5", token=token
    )
    assert status == 200 and polled["count"] == 1
    assert polled["messages"][0]["payload"] == "dHdv"
    assert polled["messages"][0]["header"]["offset"] == 1


def test_cluster_metadata_reports_the_http_port(http_node: tuple[NodeProcess, int]) -> None:
    node, port = http_node
    token = login(port)["access_token"]["token"]
    status, metadata = request(port, "GET", "/cluster/metadata", token=token)
    assert status == 200
    (entry,) = metadata["nodes"]
    assert entry["endpoints"]["http"] == port
    assert entry["endpoints"]["tcp"] == int(node.address.rpartition(":")[2])
    assert entry["role"] == "leader"


def test_a_refused_command_keeps_its_iggy_code_and_status(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    body = json.dumps({"name": "h-twice"}).encode()
    assert request(port, "POST", "/streams", body, token)[0] == 200
    status, error = request(port, "POST", "/streams", body, token)
    assert status == 400
    assert error["id"] == 1012 and error["code"] == "stream_name_already_exists"
    status, error = request(port, "GET", "/streams/h-nowhere/topics/t", token=token)
    assert status == 404


def test_flush_gets_the_tcp_answer_and_metrics_need_no_token(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    body = json.dumps({"name": "h-flush"}).encode()
    assert request(port, "POST", "/streams", body, token)[0] == 200
    path = "/streams/h-flush/topics/t/messages/flush/0/true"
    status, error = request(port, "GET", path, token=token)
    assert status == 400 and error["id"] == 5  # FeatureUnavailable, as over TCP
    assert request(port, "GET", path)[0] == 401  # the route needs a token
    status, _ = request(port, "GET", "/streams/h-flush/topics/t/messages/flush/x/true", token=token)
    assert status == 400
    status, text = request(port, "GET", "/metrics")  # no token, as Prometheus scrapes
    assert status == 200 and "\nviewstream_uptime_seconds " in text


# -- bad input -----------------------------------------------------------------------------------


def test_malformed_json_is_answered_400_and_the_node_keeps_serving(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    for body in (b"{not json", b"[1, 2]", b'{"name": 5}', b"\xff\xfe"):
        status, error = request(port, "POST", "/streams", body, token)
        assert status == 400, body
        assert set(error) == {"id", "code", "reason", "field"}
    bad_messages = {"messages": [{"id": 1, "payload": "not base64!"}]}
    status, _ = request(
        port, "POST", "/streams/x/topics/y/messages", json.dumps(bad_messages).encode(), token
    )
    assert status == 400
    status, _ = request(port, "GET", "/streams/x/topics/y/messages?kind=sideways", token=token)
    assert status == 400
    assert request(port, "GET", "/ping") == (200, "pong")


def test_oversized_bodies_are_refused_before_they_are_read(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = (
            f"POST /streams HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {FRAME_SIZE_MAX + 1}\r\n\r\n"
        )
        sock.sendall(head.encode())
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413")
    # Without a token a body may be no larger than a login.
    status, _ = request(port, "POST", "/users/login", b"{" + b" " * 8192 + b"}")
    assert status == 413
    # A header block beyond the bound.
    status, _ = request(port, "GET", "/ping", headers={"X-Big": "y" * 20_000})
    assert status == 431
    assert request(port, "GET", "/ping")[0] == 200


def _token(claims: dict[str, Any], key: bytes = KEY) -> str:
    return jwt.encode(claims, key, algorithm="HS256")


def test_missing_expired_forged_and_foreign_tokens_are_401(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    identity = login(port)
    valid = identity["access_token"]["token"]
    claims = jwt.decode(valid, KEY, algorithms=["HS256"])
    now = int(time.time())
    expired = _token({**claims, "iat": now - 7200, "exp": now - 3600})
    forged = _token(claims, key=derive_key("another secret, not the node's"))
    other_client = _token({**claims, "cid": str(secrets.randbits(127) | 1)})
    no_session = _token({**claims, "sid": 10**9})
    assert request(port, "GET", "/streams", token=valid)[0] == 200
    assert request(port, "GET", "/streams")[0] == 401
    for token in (expired, forged, other_client, no_session, "not.a.jwt"):
        status, error = request(port, "GET", "/streams", token=token)
        assert status == 401, token
        assert error["id"] == 40
    # None of them ended the valid token's session.
    assert request(port, "GET", "/streams", token=valid)[0] == 200


def _read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_client_trickling_its_headers_is_dropped_and_others_are_served(
    http_node: tuple[NodeProcess, int],
) -> None:
    node, port = http_node
    head = b"GET /ping HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    closed_after = None
    with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
        slow.settimeout(0.2)
        started = time.monotonic()
        # One byte per 0.2 s: 200+ bytes would take 40 s; the node must drop it long before.
        for index, byte in enumerate(head):
            try:
                slow.sendall(bytes([byte]))
                if slow.recv(1) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break

            # Others are served meanwhile: a TCP client and an HTTP client.
            if index == 2:

                async def others() -> list[bytes]:
                    tcp = await tcp_client(node)
                    await tcp.create_stream(f"h-slow-{secrets.token_hex(4)}")
                    return []

                run(others())
                assert request(port, "GET", "/ping")[0] == 200
    assert closed_after is not None, "the trickling client was never dropped"
    assert closed_after >= FRAME_READ_TIMEOUT_S


def test_a_personal_access_token_logs_in_and_a_token_is_refreshed(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    status, created = request(
        port,
        "POST",
        "/personal-access-tokens",
        json.dumps({"name": "h-pat", "expiry": 0}).encode(),
        token,
    )
    assert status == 200, created
    body = json.dumps({"token": created["token"]}).encode()
    status, identity = request(port, "POST", "/personal-access-tokens/login", body)
    assert status == 200, identity
    by_pat = identity["access_token"]["token"]
    assert request(port, "GET", "/streams", token=by_pat)[0] == 200
    status, listed = request(port, "GET", "/personal-access-tokens", token=by_pat)
    assert status == 200 and [t["name"] for t in listed] == ["h-pat"]
    status, refreshed = request(
        port, "POST", "/users/refresh-token", json.dumps({"token": by_pat}).encode()
    )
    assert status == 200, refreshed
    assert refreshed["user_id"] == identity["user_id"]
    assert request(port, "GET", "/streams", token=refreshed["access_token"]["token"])[0] == 200
    wrong = json.dumps({"token": "no-such-token-" + "x" * 30}).encode()
    assert request(port, "POST", "/personal-access-tokens/login", wrong)[0] == 401
    assert request(port, "DELETE", "/personal-access-tokens/h-pat", token=token)[0] == 204


def test_a_node_whose_http_port_is_taken_exits_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        node = start_node(
            tmp_path / "data", env={"VIEWSTREAM_HTTP_ADDRESS": f"127.0.0.1:{taken}"}, wait=False
        )
        try:
            code = node.process.wait(timeout=60)
            # The output pump may still be reading: take its lines up to the reason.
            lines: list[str] = []
            while not any("cannot listen" in line for line in lines):
                try:
                    lines.append(node.lines.get(timeout=10))
                except queue.Empty:
                    break
        finally:
            node.kill()
    assert code == 1
    output = "".join(lines)
    assert f"http_address 127.0.0.1:{taken}: cannot listen" in output, output
    assert "Traceback" not in output


def test_http_connections_count_against_the_nodes_connection_limit(tmp_path: Path) -> None:
    port = free_port()
    node = start_node(
        tmp_path / "data",
        env={
            "VIEWSTREAM_HTTP_ADDRESS": f"127.0.0.1:{port}",
            "VIEWSTREAM_LIMITS__CONNECTIONS_MAX": "2",
            # The TCP connection holding a place never logs in: keep it open throughout.
            "VIEWSTREAM_LIMITS__LOGIN_TIMEOUT_S": "300",
        },
    )
    try:
        with (
            socket.create_connection(("127.0.0.1", node.port), timeout=30),
            socket.create_connection(("127.0.0.1", port), timeout=30) as second,
        ):
            # One TCP and one HTTP connection hold both places: the next is closed.
            second.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert second.recv(4096).startswith(b"HTTP/1.1 200")
            with socket.create_connection(("127.0.0.1", port), timeout=30) as third:
                third.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _read_until_closed(third) == b""
        # Both places given back: HTTP is served again (bounded wait for the closes).
        deadline = time.monotonic() + 30
        while True:
            try:
                if request(port, "GET", "/ping") == (200, "pong"):
                    break
            except (ConnectionError, http.client.HTTPException):
                pass
            assert time.monotonic() < deadline, "HTTP never served again"
            time.sleep(0.1)
    finally:
        node.kill()


def _closed_by_node(sock: socket.socket) -> bool:
    """Whether the node closes ``sock`` (read to its end) before the socket's timeout."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def _ping(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    return sock.recv(4096)


def _http_node(data_dir: Path, limits: dict[str, str]) -> tuple[NodeProcess, int]:
    """A node with its HTTP listener on a free port, INFO logs, and ``limits``
    (``limits.*`` settings by name); the node and its HTTP port."""
    port = free_port()
    env = {f"VIEWSTREAM_LIMITS__{name.upper()}": value for name, value in limits.items()}
    env |= {"VIEWSTREAM_HTTP_ADDRESS": f"127.0.0.1:{port}", "VIEWSTREAM_LOG_LEVEL": "info"}
    return start_node(data_dir, env=env), port


def test_http_connections_without_a_token_count_per_address_and_a_login_frees_a_place(
    tmp_path: Path,
) -> None:
    node, port = _http_node(
        tmp_path / "data",
        {"unauthenticated_connections_per_address_max": "2", "login_timeout_s": "300"},
    )
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as first,
            socket.create_connection(("127.0.0.1", port), timeout=30) as second,
        ):
            # Two connections of this address have not logged in (a ping needs no token):
            # the next one of the address is closed as it is accepted, HTTP or TCP.
            assert _ping(first).startswith(b"HTTP/1.1 200")
            assert _ping(second).startswith(b"HTTP/1.1 200")
            with socket.create_connection(("127.0.0.1", port), timeout=30) as third:
                assert _closed_by_node(third)
            with socket.create_connection(("127.0.0.1", node.port), timeout=30) as tcp:
                assert _closed_by_node(tcp)
            # A login on the first frees its place: a new connection is served.
            body = json.dumps({"username": "iggy", "password": ROOT_PASSWORD}).encode()
            head = (
                "POST /users/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            first.sendall(head.encode() + body)
            assert first.recv(65536).startswith(b"HTTP/1.1 200")
            assert request(port, "GET", "/ping") == (200, "pong")
        assert any("have not logged in" in line for line in node.output), node.output
    finally:
        node.kill()


def test_an_http_connection_that_never_logs_in_is_closed_after_the_login_timeout(
    tmp_path: Path,
) -> None:
    node, port = _http_node(tmp_path / "data", {"login_timeout_s": "1"})
    try:
        token = login(port)["access_token"]["token"]
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as anonymous,
            socket.create_connection(("127.0.0.1", port), timeout=30) as holder,
        ):
            # Public routes are served before login, but do not keep the connection.
            assert _ping(anonymous).startswith(b"HTTP/1.1 200")
            authorized = f"GET /stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
            holder.sendall(authorized.encode())
            assert holder.recv(65536).startswith(b"HTTP/1.1 200")
            assert _closed_by_node(anonymous)
            # The connection whose request carried a token stays (idle timeout: 300 s).
            time.sleep(1.5)
            holder.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert holder.recv(65536).startswith(b"HTTP/1.1 200")
        assert any("not logged in within 1 s" in line for line in node.output), node.output
    finally:
        node.kill()


def test_a_snapshot_is_a_zip_of_the_sections_asked(http_node: tuple[NodeProcess, int]) -> None:
    _, port = http_node
    token = login(port)["access_token"]["token"]
    body = json.dumps({"compression": "Deflated", "snapshot_types": ["Test", "ServerConfig"]})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request("POST", "/snapshot", body=body.encode(), headers=headers)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/zip"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
    assert len(names) == 2, names
    bad = json.dumps({"snapshot_types": ["Everything"]}).encode()
    assert request(port, "POST", "/snapshot", bad, token)[0] == 400


def test_a_client_expecting_100_continue_gets_the_go_ahead(
    http_node: tuple[NodeProcess, int],
) -> None:
    _, port = http_node
    body = json.dumps({"username": "iggy", "password": ROOT_PASSWORD}).encode()
    head = (
        f"POST /users/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode())
        # The body is held back until the node says go ahead.
        assert sock.recv(4096).startswith(b"HTTP/1.1 100")
        sock.sendall(body)
        answer = b""
        while b"access_token" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
