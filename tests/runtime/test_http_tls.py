"""The HTTP API over TLS: the client listener's certificate serves HTTPS on the HTTP port.

The certificate comes from the TLS tests' fixture (a test CA and a leaf for localhost and
127.0.0.1); the client is the standard library's verifying HTTPS client.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, free_port, start_node
from tests.runtime.test_security_tls import Certificate, certificate

__all__ = ["certificate"]  # the fixture, used by name


@pytest.fixture(scope="module")
def https_node(
    tmp_path_factory: pytest.TempPathFactory, certificate: Certificate
) -> Iterator[tuple[NodeProcess, int]]:
    data_dir = tmp_path_factory.mktemp("https-node") / "data"
    port = free_port()
    env = {
        "VIEWSTREAM_TLS_CERT_FILE": str(certificate.cert),
        "VIEWSTREAM_TLS_KEY_FILE": str(certificate.key),
        "VIEWSTREAM_HTTP_ADDRESS": f"127.0.0.1:{port}",
    }
    process = start_node(data_dir, env=env)
    try:
        yield process, port
    finally:
        process.kill()


def https_request(
    port: int, ca: Certificate, method: str, path: str, body: Any = None, token: str = ""
) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=str(ca.ca))
    connection = http.client.HTTPSConnection("localhost", port, timeout=30, context=context)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        payload = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, json.loads(raw)
        return response.status, raw.decode()
    finally:
        connection.close()


def test_https_logs_in_and_creates_a_stream(
    https_node: tuple[NodeProcess, int], certificate: Certificate
) -> None:
    _, port = https_node
    login = {"username": "iggy", "password": ROOT_PASSWORD}
    status, identity = https_request(port, certificate, "POST", "/users/login", login)
    assert status == 200, identity
    token = identity["access_token"]["token"]
    status, _ = https_request(port, certificate, "POST", "/streams", {"name": "tls"}, token)
    assert status == 200
    status, streams = https_request(port, certificate, "GET", "/streams", token=token)
    assert status == 200 and [s["name"] for s in streams] == ["tls"]


def test_plain_http_on_the_https_port_is_dropped_and_https_keeps_working(
    https_node: tuple[NodeProcess, int], certificate: Certificate
) -> None:
    _, port = https_node
    with socket.create_connection(("127.0.0.1", port), timeout=30) as plain:
        plain.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        try:
            while chunk := plain.recv(4096):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"pong" not in answer
    assert https_request(port, certificate, "GET", "/ping") == (200, "pong")
