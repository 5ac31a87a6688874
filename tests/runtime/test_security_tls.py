"""TLS on the client listener of a real node process.

The test generates a CA and a certificate for ``localhost``/127.0.0.1 at test time
(``bench.certs``: the ``cryptography`` package when it is installed, else the ``openssl``
command; with neither, the tests are skipped and say why). The node is started with
``tls_cert_file``/``tls_key_file`` (environment settings), then:

- a standard-library ``ssl`` socket that verifies the certificate speaks ``sdk.wire``
  frames to it (login, create a stream, read it back);
- the official SDK connects with ``TcpConfig(tls_enabled=True, ...)``;
- the official SDK connects over WebSocket with TLS (``WebSocketConfig(tls_enabled=True)``,
  the same certificate on the WebSocket listener);
- a plain-TCP client is dropped (it cannot speak to a TLS listener) and the node keeps
  serving TLS clients.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import trio
from apache_iggy import (
    IggyClient,
    TcpConfig,
    TcpReconnectionConfig,
    WebSocketConfig,
    WebSocketReconnectionConfig,
)

from bench.certs import CertificatesUnavailable, make_ca, make_leaf
from sdk import wire
from sdk.blocking import Client
from sdk.client import AsyncClient
from sdk.connection_string import ClientConfig
from sdk.errors import ConnectionFailed, InvalidTlsCertificate
from sdk.wire import NEED_MORE_BYTES, CommandCode, FrameDecoder, build_request_frame, read_reply
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_interop_node import run

IO_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Certificate:
    """A test CA (what clients trust) and the node's leaf certificate and key, signed by
    it for ``localhost`` and 127.0.0.1 (``bench.certs``). A leaf separate from its CA
    matters: the official SDK (rustls) refuses a CA certificate presented as the server's
    own."""

    ca: Path
    cert: Path
    key: Path
    made_with: str


def make_certificate(folder: Path) -> Certificate:
    """A CA and a node leaf signed by it in ``folder``; skips the test without a way to
    make them."""
    try:
        ca = make_ca(folder)
    except CertificatesUnavailable as error:
        pytest.skip(f"no way to make a certificate: {error}")
    leaf = make_leaf(ca, folder, "node")
    return Certificate(ca.cert, leaf.cert, leaf.key, ca.made_with)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_node(
    tmp_path_factory: pytest.TempPathFactory, certificate: Certificate
) -> Iterator[NodeProcess]:
    data_dir = tmp_path_factory.mktemp("tls-node") / "data"
    env = {
        "VIEWSTREAM_TLS_CERT_FILE": str(certificate.cert),
        "VIEWSTREAM_TLS_KEY_FILE": str(certificate.key),
    }
    process = start_node(data_dir, ws_address="127.0.0.1:0", env=env)
    try:
        yield process
    finally:
        process.kill()


class TlsWireClient:
    """Lock-step ``sdk.wire`` frames over a verifying standard-library TLS socket."""

    def __init__(self, address: str, ca_file: Path) -> None:
        host, _, port = address.rpartition(":")
        context = ssl.create_default_context(cafile=str(ca_file))
        raw = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        self.client_id = 0x5EC0_2E
        self.session = 0
        self.request = 1
        self.decoder = FrameDecoder()

    def call(self, code: CommandCode, payload: wire.RequestPayload) -> wire.ReplyPayload | None:
        operation = wire.operation_for_code(code)
        self.sock.sendall(
            build_request_frame(
                int(code),
                payload.encode(),
                client=self.client_id,
                session=self.session,
                request=0 if operation is wire.Operation.REGISTER else self.request,
            )
        )
        if operation not in (wire.Operation.NON_REPLICATED, wire.Operation.REGISTER):
            self.request += 1
        while True:
            frame = self.decoder.next_frame()
            if frame is not NEED_MORE_BYTES:
                return read_reply(code, frame)
            data = self.sock.recv(1 << 16)
            assert data, "the node closed the connection"
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


def test_tls_ssl_socket_speaks_wire_frames(tls_node: NodeProcess, certificate: Certificate) -> None:
    client = TlsWireClient(tls_node.address, certificate.ca)
    try:
        assert client.sock.version() in ("TLSv1.2", "TLSv1.3")
        login = client.call(CommandCode.LOGIN_REGISTER, wire.LoginRegister("iggy", ROOT_PASSWORD))
        assert isinstance(login, wire.LoginRegisterReply)
        client.session = login.session
        client.call(CommandCode.CREATE_STREAM, wire.CreateStream("over-tls"))
        details = client.call(CommandCode.GET_STREAM, wire.StreamRef(wire.Identifier("over-tls")))
        assert isinstance(details, wire.StreamDetails)
        assert details.stream.name == "over-tls"
    finally:
        client.close()


def test_tls_official_sdk_connects_with_tls_enabled(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    async def scenario() -> list[str]:
        config = TcpConfig(
            server_address=tls_node.address,
            tls_enabled=True,
            tls_domain="localhost",
            tls_ca_file=str(certificate.ca),
            reconnection=TcpReconnectionConfig(enabled=False),
        )
        client = IggyClient(config)
        await client.connect()
        await client.login_user("iggy", ROOT_PASSWORD)
        await client.create_stream("sdk-tls")
        return [s.name for s in await client.get_streams()]

    assert "sdk-tls" in run(scenario())


def test_tls_official_sdk_over_websocket_uses_the_same_certificate(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    async def scenario() -> list[str]:
        config = WebSocketConfig(
            server_address=tls_node.ws_address,
            tls_enabled=True,
            tls_domain="localhost",
            tls_ca_file=str(certificate.ca),
            tls_validate_certificate=True,
            reconnection=WebSocketReconnectionConfig(enabled=False),
        )
        client = IggyClient(config)
        await client.connect()
        await client.login_user("iggy", ROOT_PASSWORD)
        await client.create_stream("sdk-wss")
        return [s.name for s in await client.get_streams()]

    assert "sdk-wss" in run(scenario())
    # A plain WebSocket upgrade on the TLS listener fails its TLS handshake: dropped.
    host, _, port = tls_node.ws_address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")
        answer = b""
        try:
            while chunk := plain.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    assert b"101" not in answer


def test_tls_plain_tcp_client_is_dropped_and_tls_keeps_working(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    host, _, port = tls_node.address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as plain:
        plain.sendall(
            build_request_frame(int(CommandCode.PING), b"", client=1, session=0, request=1)
        )
        received = b""
        while True:
            chunk = plain.recv(4096)
            if not chunk:
                break
            received += chunk
        # Whatever came back (a TLS alert at most) is no Iggy reply.
        decoder = FrameDecoder()
        try:
            decoder.feed(received)
            assert decoder.next_frame() is NEED_MORE_BYTES
        except wire.ProtocolError:
            pass
    client = TlsWireClient(tls_node.address, certificate.ca)
    try:
        client.call(CommandCode.PING, wire.Empty())
    finally:
        client.close()


def test_tls_client_that_does_not_trust_the_certificate_fails(tls_node: NodeProcess) -> None:
    host, _, port = tls_node.address.rpartition(":")
    context = ssl.create_default_context()  # the system roots do not know our certificate
    with (
        socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        context.wrap_socket(raw, server_hostname="localhost")


# --- our SDK over TLS -----------------------------------------------------------------


def _tls_config(node: NodeProcess, ca: Path, **changes: object) -> ClientConfig:
    base = ClientConfig.one_node(node.address, username="iggy", password=ROOT_PASSWORD)
    settings: dict[str, object] = {"tls_domain": "localhost", "retry_deadline_s": 10.0}
    settings.update(changes)
    return base.replace(tls=True, tls_ca_file=str(ca), **settings)


def test_tls_sdk_trio_client_connects_with_a_ca_file_and_a_server_name(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(_tls_config(tls_node, certificate.ca)) as client:
            await client.create_stream("trio-tls")
            return [stream.name for stream in await client.get_streams()]

    assert "trio-tls" in trio.run(scenario)


def test_tls_sdk_blocking_client_connects_with_a_ca_file_and_a_server_name(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    with Client(_tls_config(tls_node, certificate.ca)) as client:
        client.create_stream("blocking-tls")
        assert client.get_stream("blocking-tls") is not None


def test_tls_sdk_checks_the_host_dialed_when_no_server_name_is_given(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    # The leaf names 127.0.0.1 too, so dialing that address verifies without tls_domain.
    with Client(_tls_config(tls_node, certificate.ca, tls_domain=None)) as client:
        client.ping()


def test_tls_sdk_refuses_a_node_whose_certificate_it_cannot_verify(
    tls_node: NodeProcess, certificate: Certificate, tmp_path: Path
) -> None:
    other_ca = make_ca(tmp_path / "other")
    quick = {"retry_deadline_s": 1.0, "request_timeout_s": 1.0, "connect_timeout_s": 1.0}
    strangers = [
        _tls_config(tls_node, other_ca.cert, **quick),  # a CA that did not sign it
        _tls_config(tls_node, certificate.ca, tls_domain="not-the-node.example", **quick),
    ]
    refusal = r"TLS handshake failed.*certificate verify"
    for config in strangers:
        client = Client(config)
        try:
            with pytest.raises(ConnectionFailed, match=refusal):
                client.ping()
        finally:
            client.close()

        async def ping_over_trio(config: ClientConfig = config) -> None:
            trio_client = AsyncClient(config)
            try:
                with pytest.raises(ConnectionFailed, match=refusal):
                    await trio_client.ping()
            finally:
                await trio_client.close()

        trio.run(ping_over_trio)


def test_tls_sdk_refuses_a_missing_ca_file_when_the_client_is_made(
    tls_node: NodeProcess, tmp_path: Path
) -> None:
    with pytest.raises(InvalidTlsCertificate) as missing:
        Client(_tls_config(tls_node, tmp_path / "absent.pem"))
    assert missing.value.code == 65
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    with pytest.raises(InvalidTlsCertificate) as unusable:
        AsyncClient(_tls_config(tls_node, empty))
    assert unusable.value.code == 66


def test_tls_connection_string_options_and_a_token_work_against_a_real_node(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    options = f"tls=true&tls_domain=localhost&tls_ca_file={quote(str(certificate.ca))}"
    with Client.from_connection_string(
        f"iggy+tcp://iggy:{quote(ROOT_PASSWORD)}@{tls_node.address}?{options}"
    ) as admin:
        token = admin.create_personal_access_token("tls-string")

    async def scenario() -> tuple[int, str]:
        text = f"iggy+tcp://{token}@{tls_node.address}?{options}&cluster_discovery=false"
        async with AsyncClient.from_connection_string(text) as client:
            me = await client.get_me()
            await client.create_stream("token-over-tls")
            return me.user_id, (await client.get_streams())[-1].name

    user_id, name = trio.run(scenario)
    assert user_id == 0  # the token's owner, root
    with Client.from_connection_string(
        f"iggy://{token}@{tls_node.address}?{options}&cluster_discovery=false"
    ) as client:
        assert client.get_stream("token-over-tls") is not None
    assert name == "token-over-tls"


def test_tls_cli_takes_a_connection_string_with_tls_options_and_a_token(
    tls_node: NodeProcess, certificate: Certificate
) -> None:
    from typer.testing import CliRunner

    from broker.cli import app

    runner = CliRunner()
    options = f"tls=true&tls_domain=localhost&tls_ca_file={quote(str(certificate.ca))}"
    as_root = f"iggy+tcp://iggy:{quote(ROOT_PASSWORD)}@{tls_node.address}?{options}"

    def cli(*args: str) -> str:
        result = runner.invoke(app, list(args), env={"VIEWSTREAM_PASSWORD": None})
        assert result.exit_code == 0, result.output
        return result.output

    assert "created stream 'cli-over-tls'" in cli(
        "stream", "create", "cli-over-tls", "--address", as_root
    )
    token = cli("pat", "create", "cli-tls", "--quiet", "--address", as_root).strip()
    as_token = f"iggy://{token}@{tls_node.address}?{options}"
    assert "cli-over-tls" in cli("stream", "list", "--address", as_token)
    assert "user 0, tcp" in cli("me", "--address", as_token)  # the token's owner, root
    assert "1 ping(s)" in cli("ping", "--address", as_token)
    # Plain TCP to a TLS listener, or TLS without trusting its CA, fails and says so.
    plain = runner.invoke(app, ["ping", "--address", tls_node.address])
    assert plain.exit_code == 1
    untrusted = runner.invoke(
        app, ["ping", "--address", f"iggy://{token}@{tls_node.address}?tls=true"]
    )
    assert untrusted.exit_code == 1 and "certificate verify failed" in untrusted.output
    bad = runner.invoke(app, ["ping", "--address", "iggy://x@h:1?tls=maybe"])
    assert bad.exit_code == 2
