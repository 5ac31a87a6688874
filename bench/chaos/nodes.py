"""Real node processes of a chaos run: start, kill -9, pause, restart, and the fault proxy.

Purpose: own every process of a chaos run (three ``viewstream serve`` nodes and the fault
proxy) so that each is started with the right roster and always ends.

Layout of the run folder::

    <folder>/node-<i>/        node i's data directory
    <folder>/node-<i>.log     node i's output, one ``--- start <n> of node <i> ---`` line per start
    <folder>/proxy.log        the proxy's standard error
    <folder>/bus-tls/         with ``bus_tls``: the cluster CA and node-<i>.pem/.key

Roster through the proxy: node ``i`` lists the real bus address for itself and, for each
peer ``j``, the proxy link ``min(i, j)-max(i, j)``. Only the lower index of a pair dials
(``broker/runtime/bus.py``, invariant 1), so every byte between two nodes crosses the
proxy; the higher index never dials the address it lists for the lower one.

Invariants: everything binds 127.0.0.1; ports are drawn below the kernel's ephemeral
range so that a client socket cannot take a stopped node's port before it restarts;
secrets reach the nodes through the environment; every wait is bounded; ``close`` kills
every process this object started (by its pid, never by name) and is idempotent.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.certs import CertificatesUnavailable, make_cluster
from broker.cli.cluster import ClusterLayout
from broker.runtime.serve import READY_PREFIX
from sdk import Client, ClientConfig, NodeAddress
from sdk.errors import IggyError

READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 20.0
PROXY_TIMEOUT_S: Final = 10.0
PROBE_TIMEOUT_S: Final = 3.0
PORT_LOW: Final = 12000
"""Lowest port drawn for a node or the proxy (below the usual ephemeral range)."""
_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"


class HarnessError(RuntimeError):
    """The harness itself failed (a process did not start, the proxy lost track): the
    run says nothing about the cluster."""


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def pick_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that bind now, below the ephemeral range."""
    rng = random.SystemRandom()
    high = max(PORT_LOW + 1000, _ephemeral_low())
    chosen: list[int] = []
    for _ in range(count * 200):
        if len(chosen) == count:
            return chosen
        port = rng.randrange(PORT_LOW, high)
        if port in chosen:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
    if len(chosen) == count:
        return chosen
    raise HarnessError(f"could not find {count} free ports below {high}")


LAYOUT_TRIES: Final = 50


def _port_binds(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_layout(
    folder: Path, nodes: int = 3, *, ws: bool = False, bus_tls: bool = False
) -> ClusterLayout:
    """A local cluster layout whose every port (client, bus, HTTP and, with ``ws``,
    WebSocket: a run of ``nodes`` consecutive ports each) is distinct and binds now.

    The bases lie below the kernel's ephemeral range, so a node's outgoing connection
    (a bus dial, a forward) cannot be handed a port a later node is about to listen on.
    """
    for _ in range(LAYOUT_TRIES):
        client, bus, http, websocket = pick_ports(4)
        layout = ClusterLayout(
            folder,
            nodes,
            client,
            bus,
            http,
            ws_base_port=websocket if ws else 0,
            bus_tls=bus_tls,
        )
        addresses = (
            layout.client_addresses
            + layout.bus_addresses
            + layout.http_addresses
            + layout.ws_addresses
        )
        ports = [int(address.rpartition(":")[2]) for address in addresses]
        if len(set(ports)) == len(ports) and all(_port_binds(port) for port in ports):
            return layout
    raise HarnessError(f"no free ports for a {nodes}-node cluster in {LAYOUT_TRIES} tries")


@dataclass
class NodeHandle:
    """One node: where it listens, what roster it was given, its process if running."""

    index: int
    client_address: str
    bus_address: str
    replicas: list[str]
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class ProxyProcess:
    """The fault proxy subprocess and its control pipe."""

    process: subprocess.Popen[str]
    ports: dict[str, int]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def command(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one control command and wait (bounded) for its answer."""
        with self.lock:
            stdin = self.process.stdin
            if stdin is None or self.process.poll() is not None:
                raise HarnessError("the fault proxy is not running")
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
            try:
                line = self.lines.get(timeout=PROXY_TIMEOUT_S)
            except queue.Empty:
                raise HarnessError(f"the fault proxy did not answer {command!r}") from None
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise HarnessError(f"the fault proxy refused {command!r}: {answer.get('error')}")
        return answer

    def close(self) -> None:
        """Kill the proxy (by its pid) and close its pipes. Idempotent."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


def _pump_lines(stream: Any, lines: queue.Queue[str]) -> None:
    try:
        for line in stream:
            lines.put(line)
    except (ValueError, OSError):
        pass  # closed by close()


def start_proxy(
    links: list[dict[str, Any]], seed: int, stderr: Any, *, opaque: bool = False
) -> ProxyProcess:
    """Start the fault proxy (``bench.chaos.proxy``) and wait for its ports.

    Args:
        links: ``{"name", "port" (0: any), "target"}`` per link.
        seed: Seeds the proxy's drop and jitter draws.
        stderr: Where its standard error goes (a file opened for writing, or None).
        opaque: Treat the links as byte streams it cannot frame (a bus over TLS).

    Raises:
        HarnessError: it did not announce its ports in time.
    """
    config = {"links": links, "seed": seed, "opaque": opaque}
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.chaos.proxy", json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    proxy = ProxyProcess(process, {})
    pump = threading.Thread(target=_pump_lines, args=(process.stdout, proxy.lines))
    pump.daemon = True
    pump.start()
    try:
        line = proxy.lines.get(timeout=READY_TIMEOUT_S)
        ready = json.loads(line)
        if not ready.get("ready"):
            raise HarnessError(f"the fault proxy said {line!r}")
    except (queue.Empty, ValueError):
        proxy.close()
        raise HarnessError("the fault proxy did not start") from None
    proxy.ports = {str(k): int(v) for k, v in ready["ports"].items()}
    return proxy


class StatsProbe:
    """A logged-in connection to one node for its runtime counters, redialed on failure
    (one session per connection, not one per probe: a login is a metadata op)."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._lock = threading.Lock()

    def stats(self, address: str, password: str) -> dict[str, Any] | None:
        with self._lock:
            try:
                if self._client is None:
                    self._client = Client(
                        ClientConfig(
                            seeds=(NodeAddress.parse(address),),
                            request_timeout_s=PROBE_TIMEOUT_S,
                            connect_timeout_s=PROBE_TIMEOUT_S,
                            retry_deadline_s=PROBE_TIMEOUT_S,
                            cluster_discovery=False,
                        )
                    )
                    self._client.login_user("iggy", password)
                report: dict[str, Any] = self._client.get_runtime_stats()
            except IggyError:
                self._close()
                return None
            return report

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        with self._lock:
            self._close()


class ChaosCluster:
    """Three nodes on 127.0.0.1 behind the fault proxy, in ``folder``.

    Args:
        folder: Fresh directory for data and logs (the caller removes it).
        root_password: The root user's password (through the environment).
        cluster_secret: The replica-bus secret (through the environment).
        tick_ms: The nodes' consensus tick.
        proxy_seed: Seed of the proxy's drop and jitter draws.
        nodes: Cluster size (3 or 5).
        env: Extra ``VIEWSTREAM_*`` settings for every node.
        bus_tls: Run the replica bus over mutual TLS, with a CA and node certificates
            made in ``folder/bus-tls`` (``bench.certs``); the proxy then forwards the
            links as opaque byte streams.
    """

    def __init__(
        self,
        folder: Path,
        *,
        root_password: str,
        cluster_secret: str,
        tick_ms: int = 10,
        proxy_seed: int = 0,
        nodes: int = 3,
        env: dict[str, str] | None = None,
        bus_tls: bool = False,
    ) -> None:
        self.folder = folder
        self.bus_tls = bus_tls
        self._bus_tls_env: list[dict[str, str]] = []
        self.root_password = root_password
        self.cluster_secret = cluster_secret
        self.tick_ms = tick_ms
        self.proxy_seed = proxy_seed
        self.count = nodes
        self.env = dict(env or {})
        self.proxy: ProxyProcess | None = None
        self.nodes: list[NodeHandle] = []
        self._proxy_log: Any = None
        self._probes = [StatsProbe() for _ in range(nodes)]

    @staticmethod
    def link_name(a: int, b: int) -> str:
        low, high = sorted((a, b))
        return f"{low}-{high}"

    @property
    def links(self) -> list[str]:
        return [self.link_name(a, b) for a in range(self.count) for b in range(a + 1, self.count)]

    @property
    def client_addresses(self) -> list[str]:
        return [node.client_address for node in self.nodes]

    # -- start --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the proxy and every node, and wait until all listen."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.bus_tls:
            self._make_bus_certificates()
        ports = pick_ports(2 * self.count + len(self.links))
        client_ports, bus_ports = ports[: self.count], ports[self.count : 2 * self.count]
        proxy_ports = dict(zip(self.links, ports[2 * self.count :], strict=True))
        self._start_proxy(
            [
                {
                    "name": name,
                    "port": proxy_ports[name],
                    "target": f"127.0.0.1:{bus_ports[int(name.split('-')[1])]}",
                }
                for name in self.links
            ]
        )
        assert self.proxy is not None
        for index in range(self.count):
            replicas = [
                f"127.0.0.1:{bus_ports[index]}"
                if peer == index
                else f"127.0.0.1:{self.proxy.ports[self.link_name(index, peer)]}"
                for peer in range(self.count)
            ]
            self.nodes.append(
                NodeHandle(
                    index=index,
                    client_address=f"127.0.0.1:{client_ports[index]}",
                    bus_address=f"127.0.0.1:{bus_ports[index]}",
                    replicas=replicas,
                    data_dir=self.folder / f"node-{index}",
                    log_path=self.folder / f"node-{index}.log",
                )
            )
        for node in self.nodes:
            self.launch(node.index)
        for node in self.nodes:
            self.wait_ready(node.index)

    def _make_bus_certificates(self) -> None:
        try:
            _, leaves = make_cluster(self.folder / "bus-tls", self.count)
        except CertificatesUnavailable as error:
            raise HarnessError(f"cannot make the bus certificates: {error}") from None
        self._bus_tls_env = [
            {
                "VIEWSTREAM_BUS_TLS_CERT_FILE": str(leaf.cert),
                "VIEWSTREAM_BUS_TLS_KEY_FILE": str(leaf.key),
                "VIEWSTREAM_BUS_TLS_CA_FILE": str(leaf.ca),
            }
            for leaf in leaves
        ]

    def _start_proxy(self, links: list[dict[str, Any]]) -> None:
        self._proxy_log = (self.folder / "proxy.log").open("ab")
        self.proxy = start_proxy(links, self.proxy_seed, self._proxy_log, opaque=self.bus_tls)

    def _environment(self, index: int) -> dict[str, str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("VIEWSTREAM_")}
        environment.update(
            VIEWSTREAM_CLUSTER_SECRET=self.cluster_secret,
            VIEWSTREAM_ROOT_PASSWORD=self.root_password,
            VIEWSTREAM_TICK_MS=str(self.tick_ms),
            VIEWSTREAM_LOG_LEVEL="info",
            VIEWSTREAM_HTTP_ADDRESS="",  # the workload speaks TCP; port 3000 is not ours
        )
        environment.update(self.env)
        if self._bus_tls_env:
            environment.update(self._bus_tls_env[index])
        return environment

    def launch(self, index: int) -> None:
        """Start node ``index`` (not running) without waiting for it."""
        node = self.nodes[index]
        assert not node.running, f"node {index} is already running"
        node.starts += 1
        node.paused = False
        command = [
            sys.executable,
            "-c",
            _LAUNCH,
            "serve",
            "--address",
            node.client_address,
            "--ws-address",
            "",
            "--data-dir",
            str(node.data_dir),
            "--replica",
            str(index),
            "--replicas",
            ",".join(node.replicas),
            "--client-addresses",
            ",".join(self.client_addresses),
        ]
        with node.log_path.open("ab") as log_file:
            log_file.write(f"--- start {node.starts} of node {index} ---\n".encode())
            log_file.flush()
            node.process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._environment(index),
                start_new_session=True,
                cwd=str(self.folder),
            )

    def wait_ready(self, index: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until node ``index`` announces its listener (bounded).

        Raises:
            HarnessError: it exited or stayed silent past the timeout.
        """
        node = self.nodes[index]
        marker = f"--- start {node.starts} of node {index} ---"
        deadline = time.monotonic() + timeout_s
        while True:
            text = node.log_path.read_text(encoding="utf-8", errors="replace")
            if READY_PREFIX in text.rpartition(marker)[2]:
                return
            if not node.running or time.monotonic() > deadline:
                raise HarnessError(f"node {index} did not start; see {node.log_path}")
            time.sleep(0.05)

    def restart(self, index: int) -> None:
        self.launch(index)
        self.wait_ready(index)

    # -- faults -------------------------------------------------------------------------------

    def kill(self, index: int) -> None:
        """``kill -9`` node ``index`` and reap it."""
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            os.kill(node.process.pid, signal.SIGKILL)
        if node.process is not None:
            node.process.wait(timeout=STOP_TIMEOUT_S)
        node.paused = False

    def kill_all(self) -> None:
        """``kill -9`` every node at once (signals first, then reap)."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                os.kill(node.process.pid, signal.SIGKILL)
        for node in self.nodes:
            if node.process is not None:
                node.process.wait(timeout=STOP_TIMEOUT_S)
            node.paused = False

    def pause(self, index: int) -> None:
        node = self.nodes[index]
        assert node.process is not None and node.running
        os.kill(node.process.pid, signal.SIGSTOP)
        node.paused = True

    def resume(self, index: int) -> None:
        node = self.nodes[index]
        if node.process is not None and node.running and node.paused:
            os.kill(node.process.pid, signal.SIGCONT)
        node.paused = False

    def stop_all(self) -> None:
        """SIGTERM every node (a graceful shutdown: journals synced and closed)."""
        for node in self.nodes:
            self.resume(node.index)
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(node.index)
                raise HarnessError(f"node {node.index} ignored SIGTERM") from None

    def proxy_command(self, command: dict[str, Any]) -> dict[str, Any]:
        if self.proxy is None:
            raise HarnessError("no fault proxy")
        return self.proxy.command(command)

    def close(self) -> None:
        """Kill every process started here (nodes and proxy). Idempotent."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=STOP_TIMEOUT_S)
        if self.proxy is not None:
            self.proxy.close()
        if self._proxy_log is not None:
            self._proxy_log.close()
            self._proxy_log = None
        for probe in self._probes:
            probe.close()

    # -- observation ----------------------------------------------------------------------------

    def runtime_stats(self, index: int) -> dict[str, Any] | None:
        """Node ``index``'s per-group counters (command 9000), or None if it does not
        answer within ``PROBE_TIMEOUT_S`` (down, paused, or cannot log in)."""
        node = self.nodes[index]
        if not node.running or node.paused:
            return None
        return self._probes[index].stats(node.client_address, self.root_password)
