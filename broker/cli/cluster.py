"""A local loopback cluster: ``viewstream cluster up`` and ``viewstream cluster down``.

Purpose: start N node processes on 127.0.0.1 for development and tests, with everything
in one folder::

    <folder>/cluster.json      the roster, ports and process ids (what ``down`` reads)
    <folder>/cluster.secret    the replica-bus secret (mode 0600), reused on the next ``up``
    <folder>/node-<i>/         node i's data directory
    <folder>/node-<i>.log      node i's output
    <folder>/bus-tls/          with ``bus_tls``: ca.pem, and node-<i>.pem / node-<i>.key
                               (node i's bus certificate and key, signed by that CA)

Invariants: nodes bind 127.0.0.1 only; the cluster secret and the root password reach
the nodes through their environment, never their command line (which other local users
can read); every wait is bounded; ``up`` in the foreground stops every node it started
when it is interrupted or when any node exits.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from broker.runtime.serve import READY_PREFIX

READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 20.0
_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """Where each node of a local cluster listens."""

    folder: Path
    nodes: int
    base_port: int
    bus_base_port: int
    http_base_port: int = 3000
    ws_base_port: int = 0
    """WebSocket port of node 0 (node i: +i); 0: the nodes have no WebSocket listener."""
    bus_tls: bool = False
    """Run the replica bus over mutual TLS with the certificates in ``bus_tls_folder``."""

    @property
    def http_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.http_base_port + i}" for i in range(self.nodes)]

    @property
    def bus_tls_folder(self) -> Path:
        return self.folder / "bus-tls"

    def bus_tls_files(self, index: int) -> dict[str, Path]:
        """Node ``index``'s ``bus_tls_*`` settings."""
        folder = self.bus_tls_folder
        return {
            "bus_tls_cert_file": folder / f"node-{index}.pem",
            "bus_tls_key_file": folder / f"node-{index}.key",
            "bus_tls_ca_file": folder / "ca.pem",
        }

    @property
    def client_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.base_port + i}" for i in range(self.nodes)]

    @property
    def ws_addresses(self) -> list[str]:
        """Each node's WebSocket listener; empty when they have none."""
        if not self.ws_base_port:
            return []
        return [f"127.0.0.1:{self.ws_base_port + i}" for i in range(self.nodes)]

    @property
    def bus_addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.bus_base_port + i}" for i in range(self.nodes)]


def _secret(folder: Path) -> str:
    path = folder / "cluster.secret"
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(value + "\n")
    return value


def make_bus_certificates(layout: ClusterLayout) -> bool:
    """Make the cluster's bus CA and one certificate per node, unless every file is there
    already (they are reused, as the secret is). Returns whether it made them.

    Raises:
        RuntimeError: neither the ``cryptography`` package nor ``openssl`` is available.
    """
    if all(
        path.is_file() for i in range(layout.nodes) for path in layout.bus_tls_files(i).values()
    ):
        return False
    from bench.certs import CertificatesUnavailable, make_cluster

    try:
        make_cluster(layout.bus_tls_folder, layout.nodes)
    except CertificatesUnavailable as error:
        raise RuntimeError(f"cannot make the bus certificates: {error}") from None
    return True


def _environment(
    layout: ClusterLayout, index: int, root_password: str | None, tick_ms: int | None
) -> dict[str, str]:
    environment = dict(os.environ)  # VIEWSTREAM_* settings apply to every node
    environment["VIEWSTREAM_CLUSTER_SECRET"] = _secret(layout.folder)
    if layout.bus_tls:
        for name, path in layout.bus_tls_files(index).items():
            environment[f"VIEWSTREAM_{name.upper()}"] = str(path)
    if root_password is not None:
        environment["VIEWSTREAM_ROOT_PASSWORD"] = root_password
    if tick_ms is not None:
        environment["VIEWSTREAM_TICK_MS"] = str(tick_ms)
    return environment


def log_path(layout: ClusterLayout, index: int) -> Path:
    return layout.folder / f"node-{index}.log"


def start_node_process(
    layout: ClusterLayout,
    index: int,
    *,
    root_password: str | None,
    no_sync: bool = False,
    tick_ms: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start node ``index`` of the cluster (its output appended to its log)."""
    layout.folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-c",
        _LAUNCH,
        "serve",
        "--address",
        layout.client_addresses[index],
        "--data-dir",
        str(layout.folder / f"node-{index}"),
        "--replica",
        str(index),
        "--replicas",
        ",".join(layout.bus_addresses),
        "--client-addresses",
        ",".join(layout.client_addresses),
        "--http-address",
        layout.http_addresses[index],
        "--http-addresses",
        ",".join(layout.http_addresses),
    ]
    ws = layout.ws_addresses
    if ws:
        command += ["--ws-address", ws[index], "--ws-addresses", ",".join(ws)]
    else:
        command += ["--ws-address", ""]
    if no_sync:
        command.append("--no-sync")
    path = log_path(layout, index)
    # Mark where this run's output starts, so readiness is judged on this run only.
    with path.open("ab") as log_file:
        log_file.write(f"--- start of node {index} ---\n".encode())
        log_file.flush()
        return subprocess.Popen(
            command,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_environment(layout, index, root_password, tick_ms),
            start_new_session=True,
        )


def wait_ready(
    layout: ClusterLayout, processes: list[subprocess.Popen[bytes]], indexes: list[int]
) -> None:
    """Wait until each node listens (bounded by ``READY_TIMEOUT_S``).

    Raises:
        RuntimeError: a node exited or did not become ready in time.
    """
    deadline = time.monotonic() + READY_TIMEOUT_S
    for process, index in zip(processes, indexes, strict=True):
        path = log_path(layout, index)
        while True:
            text = path.read_text(encoding="utf-8", errors="replace")
            run = text.rpartition(f"--- start of node {index} ---")[2]
            if READY_PREFIX in run:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node {index} did not start; see {path}")
            time.sleep(0.05)


def start_cluster(
    layout: ClusterLayout,
    *,
    root_password: str | None,
    no_sync: bool = False,
    tick_ms: int | None = None,
    echo: bool = True,
) -> list[subprocess.Popen[bytes]]:
    """Start every node and wait until each listens; returns the processes.

    Raises:
        RuntimeError: a node exited or did not become ready in time (every node
            started is stopped first).
    """
    layout.folder.mkdir(parents=True, exist_ok=True)
    if layout.bus_tls:
        make_bus_certificates(layout)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(layout.nodes):
            processes.append(
                start_node_process(
                    layout, index, root_password=root_password, no_sync=no_sync, tick_ms=tick_ms
                )
            )
        state = {
            "nodes": layout.nodes,
            "client_addresses": layout.client_addresses,
            "bus_addresses": layout.bus_addresses,
            "ws_addresses": layout.ws_addresses,
            "pids": [p.pid for p in processes],
        }
        (layout.folder / "cluster.json").write_text(json.dumps(state, indent=2), encoding="utf-8")
        wait_ready(layout, processes, list(range(layout.nodes)))
        if echo:
            for index, address in enumerate(layout.client_addresses):
                print(f"node {index}: {address} (log {log_path(layout, index)})", flush=True)
        return processes
    except BaseException:
        stop_processes(processes)
        raise


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every node (a graceful shutdown), then SIGKILL what is left after a while."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def cluster_up(
    layout: ClusterLayout,
    *,
    root_password: str | None,
    no_sync: bool,
    detach: bool,
) -> int:
    """``viewstream cluster up``: start, then (unless detached) wait for Ctrl-C."""
    generated = root_password is None and not (layout.folder / "cluster.json").exists()
    if root_password is None:
        root_password = os.environ.get("VIEWSTREAM_ROOT_PASSWORD")
    if root_password is None and generated:
        root_password = secrets.token_urlsafe(18)
        print(
            f"root user 'iggy' password (shown once, stored only hashed): {root_password}",
            flush=True,
        )
    processes = start_cluster(layout, root_password=root_password, no_sync=no_sync)
    if detach:
        print(f"cluster running; stop it with: viewstream cluster down --dir {layout.folder}")
        return 0
    print("cluster running; Ctrl-C stops it", flush=True)
    try:
        while all(p.poll() is None for p in processes):
            time.sleep(0.2)
        print("a node exited; stopping the cluster", flush=True)
    except KeyboardInterrupt:
        print("stopping the cluster", flush=True)
    finally:
        stop_processes(processes)
    return 0


def cluster_down(folder: Path) -> int:
    """``viewstream cluster down``: SIGTERM the nodes ``cluster.json`` lists and wait."""
    path = folder / "cluster.json"
    if not path.exists():
        print(f"no cluster in {folder}", file=sys.stderr)
        return 1
    pids = json.loads(path.read_text(encoding="utf-8"))["pids"]
    alive = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            alive.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _running(pid)]
        time.sleep(0.1)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    print(f"stopped {len(pids)} node(s)")
    return 0


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
