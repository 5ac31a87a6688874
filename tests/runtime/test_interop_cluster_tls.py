"""A real 3-node cluster whose replica bus runs over mutual TLS.

The interop scenarios of ``test_interop_cluster`` run again, unchanged, against a cluster
started with ``bus_tls`` (``viewstream cluster up --bus-tls``: a cluster CA and one
certificate per node, made by ``bench.certs``): the official SDK through a backup,
routing, consumer groups, writes on every node, a node killed and restarted (it redials
over TLS and catches up). Then strangers knock on a node's bus port: one speaking plain
TCP, one with TLS but no certificate, one with a certificate from another CA. Each is
refused before the secret handshake (the bus's challenge never reaches it), the node
logs why, and the cluster keeps serving.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.certs import CertificatesUnavailable, make_ca, make_leaf
from bench.chaos.nodes import cluster_layout
from broker.cli.cluster import (
    ClusterLayout,
    log_path,
    start_cluster,
    start_node_process,
    stop_processes,
)
from sdk import wire
from sdk.wire import CommandCode
from tests.runtime.processes import ROOT_PASSWORD
from tests.runtime.test_interop_cluster import (
    TICK_MS,
    Cluster,
    _poll_until,
    _send_until_acked,
    _wire_login,
    start_cluster_node,
)
from tests.runtime.test_interop_cluster import (
    test_cluster_every_node_takes_writes_and_serves_them as test_tls_bus_every_node_takes_writes_and_serves_them,  # noqa: E501
)
from tests.runtime.test_interop_cluster import (
    test_cluster_keeps_every_acknowledged_message_when_a_node_is_killed as test_tls_bus_keeps_every_acknowledged_message_when_a_node_is_killed,  # noqa: E501
)
from tests.runtime.test_interop_cluster import (
    test_cluster_sdk_auto_commit_poll_is_routed_to_the_partition_primary as test_tls_bus_sdk_auto_commit_poll_is_routed_to_the_partition_primary,  # noqa: E501
)
from tests.runtime.test_interop_cluster import (
    test_cluster_sdk_end_to_end_through_a_backup as test_tls_bus_sdk_end_to_end_through_a_backup,
)
from tests.runtime.test_interop_cluster import (
    test_cluster_sdk_group_consumer_with_auto_commit_keeps_its_progress as test_tls_bus_sdk_group_consumer_with_auto_commit_keeps_its_progress,  # noqa: E501
)

__all__ = [
    "test_tls_bus_every_node_takes_writes_and_serves_them",
    "test_tls_bus_keeps_every_acknowledged_message_when_a_node_is_killed",
    "test_tls_bus_sdk_auto_commit_poll_is_routed_to_the_partition_primary",
    "test_tls_bus_sdk_end_to_end_through_a_backup",
    "test_tls_bus_sdk_group_consumer_with_auto_commit_keeps_its_progress",
]

IO_TIMEOUT_S = 10.0
LOG_WAIT_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder: Path = tmp_path_factory.mktemp("tls-cluster")
    layout = cluster_layout(folder, 3, bus_tls=True)
    try:
        processes = start_cluster(layout, root_password=ROOT_PASSWORD, tick_ms=TICK_MS, echo=False)
    except RuntimeError as error:
        if "cannot make the bus certificates" in str(error):
            pytest.skip(str(error))
        raise
    try:
        yield Cluster(layout, processes)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=20)


def test_tls_bus_nodes_say_their_bus_speaks_mutual_tls(cluster: Cluster) -> None:
    for index in range(3):
        text = log_path(cluster.layout, index).read_text(encoding="utf-8", errors="replace")
        assert f"replica bus of replica {index} on" in text and "(mutual TLS)" in text


def _bus_address(cluster: Cluster, index: int) -> tuple[str, int]:
    host, _, port = cluster.layout.bus_addresses[index].rpartition(":")
    return host, int(port)


def _stranger_reads(cluster: Cluster, context: ssl.SSLContext | None) -> bytes:
    """What a stranger on node 2's bus port gets to read: with ``context``, after a TLS
    handshake (which a TLS 1.3 client may finish before the node has judged its
    certificate); without, over plain TCP after a frame of zeros."""
    received = b""
    with socket.create_connection(_bus_address(cluster, 2), timeout=IO_TIMEOUT_S) as raw:
        raw.settimeout(IO_TIMEOUT_S)
        sock: socket.socket = raw
        try:
            if context is None:
                raw.sendall(bytes(64))
            else:
                sock = context.wrap_socket(raw)
                sock.sendall(bytes([0]) + bytes(64))  # claim to be replica 0
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
        except (ssl.SSLError, ConnectionError):
            pass  # the node's alert, or its reset: refused
        finally:
            sock.close()
    return received


def _stranger_context(certificate: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a stranger does not care who the node is
    if certificate is not None:
        context.load_cert_chain(*certificate)
    return context


def _wait_for_log(cluster: Cluster, index: int, needle: str, since: int) -> str:
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        text = log_path(cluster.layout, index).read_text(encoding="utf-8", errors="replace")
        if needle in text[since:]:
            return text[since:]
        assert time.monotonic() < deadline, f"node {index} did not log {needle!r}"
        time.sleep(0.05)


def test_tls_bus_refuses_peers_without_a_certificate_of_the_cluster_ca(
    cluster: Cluster, tmp_path: Path
) -> None:
    try:
        other_ca = make_ca(tmp_path / "other", "another cluster's CA")
    except CertificatesUnavailable as error:
        pytest.skip(str(error))
    other_leaf = make_leaf(other_ca, tmp_path / "other", "intruder")
    log_start = len(log_path(cluster.layout, 2).read_text(encoding="utf-8", errors="replace"))

    # Plain TCP: the node waits for a TLS ClientHello and never sends its challenge.
    assert b"VSBUS" not in _stranger_reads(cluster, None)
    # TLS without a certificate, then with one the cluster's CA did not sign.
    assert _stranger_reads(cluster, _stranger_context(None)) == b""
    assert _stranger_reads(cluster, _stranger_context((other_leaf.cert, other_leaf.key))) == b""

    logged = _wait_for_log(cluster, 2, "certificate", log_start)
    assert "bus connection refused" in logged and "TLS handshake failed" in logged

    # The cluster keeps working: a write through node 2 is acknowledged and read back on
    # node 0, so the links between the real nodes are up.
    client = _wire_login(cluster.address(2))
    try:
        client.call(CommandCode.CREATE_STREAM, wire.CreateStream("after-intruders"))
        client.call(
            CommandCode.CREATE_TOPIC,
            wire.CreateTopic(wire.Identifier("after-intruders"), 1, "t", ()),
        )
        _send_until_acked(client, "after-intruders", 0, b"still-serving")
    finally:
        client.close()
    with _wire_login(cluster.address(0)) as reader:
        _poll_until(reader, "after-intruders", 0, [b"still-serving"], timeout_s=30)


def test_tls_bus_a_node_with_a_certificate_from_another_ca_cannot_join(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A real node process holding the cluster secret and the roster, but a bus
    certificate from another CA, never gets a link: the secret alone is not enough."""
    try:
        other_ca = make_ca(tmp_path / "other", "another cluster's CA")
    except CertificatesUnavailable as error:
        pytest.skip(str(error))
    other_leaf = make_leaf(other_ca, tmp_path / "other", "impostor")
    # The impostor stands in for node 2 (killed first, so its ports are free): it is
    # node 2 in every respect but its certificate. A copy of node 2's layout whose
    # bus-tls folder holds the impostor's files and trusts the other CA.
    original = cluster.processes[2]
    original.kill()
    original.wait(timeout=20)
    impostor_layout = ClusterLayout(
        tmp_path / "impostor",
        3,
        cluster.layout.base_port,
        cluster.layout.bus_base_port,
        bus_tls=True,
    )
    impostor_layout.folder.mkdir()
    (impostor_layout.folder / "cluster.secret").write_bytes(
        (cluster.layout.folder / "cluster.secret").read_bytes()
    )
    impostor_layout.bus_tls_folder.mkdir()
    files = impostor_layout.bus_tls_files(2)
    files["bus_tls_cert_file"].write_bytes(other_leaf.cert.read_bytes())
    files["bus_tls_key_file"].write_bytes(other_leaf.key.read_bytes())
    files["bus_tls_ca_file"].write_bytes(other_ca.cert.read_bytes())
    log_starts = [
        len(log_path(cluster.layout, i).read_text(encoding="utf-8", errors="replace"))
        for i in (0, 1)
    ]
    impostor = start_node_process(impostor_layout, 2, root_password=ROOT_PASSWORD, tick_ms=TICK_MS)
    try:
        # Nodes 0 and 1 dial it and refuse its certificate (it refuses theirs too).
        for index, since in zip((0, 1), log_starts, strict=True):
            logged = _wait_for_log(cluster, index, "bus link to replica 2: TLS handshake", since)
            assert "certificate" in logged
        impostor_log = log_path(impostor_layout, 2).read_text(encoding="utf-8")
        assert "bus link to replica 2 is up" not in impostor_log
        for index, since in zip((0, 1), log_starts, strict=True):
            text = log_path(cluster.layout, index).read_text(encoding="utf-8")
            assert "bus link to replica 2 is up" not in text[since:]
        # The two real nodes are a quorum: they keep taking writes meanwhile.
        client = _wire_login(cluster.address(0))
        try:
            client.call(CommandCode.CREATE_STREAM, wire.CreateStream("impostor-present"))
            client.call(
                CommandCode.CREATE_TOPIC,
                wire.CreateTopic(wire.Identifier("impostor-present"), 1, "t", ()),
            )
            _send_until_acked(client, "impostor-present", 0, b"quorum-of-two")
            _poll_until(client, "impostor-present", 0, [b"quorum-of-two"])
        finally:
            client.close()
    finally:
        stop_processes([impostor])
    # The real node 2 comes back with its own certificate and catches up.
    restarted: subprocess.Popen[bytes] = start_cluster_node(cluster.layout, 2)
    cluster.processes[2] = restarted
    with _wire_login(cluster.address(2)) as late:
        _poll_until(late, "impostor-present", 0, [b"quorum-of-two"], timeout_s=30)
