"""TLS on the client listener of a real node process.

The test generates a self-signed certificate for ``localhost``/127.0.0.1 at test time,
with the ``cryptography`` package when it is installed, else with the ``openssl``
command; with neither, the tests are skipped and say why. The node is started with
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

import datetime
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apache_iggy import (
    IggyClient,
    TcpConfig,
    TcpReconnectionConfig,
    WebSocketConfig,
    WebSocketReconnectionConfig,
)

from sdk import wire
from sdk.wire import NEED_MORE_BYTES, CommandCode, FrameDecoder, build_request_frame, read_reply
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_interop_node import run

IO_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Certificate:
    """A test CA (what clients trust) and the node's leaf certificate and key, signed by
    it for ``localhost`` and 127.0.0.1. A leaf separate from its CA matters: the official
    SDK (rustls) refuses a CA certificate presented as the server's own."""

    ca: Path
    cert: Path
    key: Path
    made_with: str


def _with_cryptography(folder: Path) -> Certificate | None:
    try:
        from cryptography import x509  # type: ignore[import-not-found, unused-ignore]
        from cryptography.hazmat.primitives import (  # type: ignore[import-not-found, unused-ignore]
            hashes,
            serialization,
        )
        from cryptography.hazmat.primitives.asymmetric import (  # type: ignore[import-not-found, unused-ignore]
            ec,
        )
        from cryptography.x509.oid import (  # type: ignore[import-not-found, unused-ignore]
            ExtendedKeyUsageOID,
            NameOID,
        )
    except ImportError:
        return None
    import ipaddress

    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: str, public_key: Any, signer: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = build("viewstream test CA", "viewstream test CA", ca_key.public_key(), ca_key, True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = build("localhost", "viewstream test CA", key.public_key(), ca_key, False)
    paths = Certificate(folder / "ca.pem", folder / "cert.pem", folder / "key.pem", "cryptography")
    paths.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def _with_openssl(folder: Path) -> Certificate | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    paths = Certificate(folder / "ca.pem", folder / "cert.pem", folder / "key.pem", "openssl")
    ca_key, csr, extensions = folder / "ca.key", folder / "leaf.csr", folder / "leaf.ext"
    extensions.write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "extendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature\n"
    )
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_extensions = [
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign"),
    ]
    make_ca = (
        *(openssl, "req", "-x509", *new_key, "-keyout", str(ca_key), "-out", str(paths.ca)),
        *("-days", "1", "-subj", "/CN=viewstream test CA", *ca_extensions),
    )
    make_request = (
        *(openssl, "req", *new_key, "-keyout", str(paths.key), "-out", str(csr)),
        *("-subj", "/CN=localhost"),
    )
    sign = (
        *(openssl, "x509", "-req", "-in", str(csr), "-CA", str(paths.ca), "-CAkey", str(ca_key)),
        *("-CAcreateserial", "-out", str(paths.cert), "-days", "1", "-extfile", str(extensions)),
    )
    steps = [make_ca, make_request, sign]
    for step in steps:
        subprocess.run(step, check=True, capture_output=True, timeout=60, cwd=folder)
    return paths


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    folder = tmp_path_factory.mktemp("tls")
    made = _with_cryptography(folder) or _with_openssl(folder)
    if made is None:
        pytest.skip("no way to make a certificate: neither `cryptography` nor `openssl`")
    return made


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
