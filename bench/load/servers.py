"""Embedded servers (a node or a 3-node cluster) and the server-side counters of a run.

Purpose: ``--embedded single|cluster`` starts ``viewstream serve`` processes on
127.0.0.1 with fresh temporary data directories, waits until they answer, and always
stops them (SIGTERM, then SIGKILL after a bound) and removes the directories. Snapshots
of ``GET_STATS`` and of viewstream's per-group counters (command code 9000, see
``docs/operations.md``) are taken before and after the load, and their differences
are the run's server-side figures.

Invariants: every process started here is stopped by the same context manager; every
wait is bounded (``READY_TIMEOUT_S``, ``STOP_TIMEOUT_S``, ``STATS_TIMEOUT_S``); nodes get
their secrets through the environment, never the command line.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bench.load.params import Embedded

if TYPE_CHECKING:
    from sdk import Client

__all__ = [
    "CLUSTER_NODES",
    "EmbeddedServer",
    "NodeSnapshot",
    "ServerError",
    "cluster_addresses",
    "embedded_server",
    "is_local",
    "process_cpu_s",
    "server_delta",
    "snapshot_nodes",
]

CLUSTER_NODES: Final = 3
READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 20.0
STATS_TIMEOUT_S: Final = 5.0
"""viewstream's non-replicated code for its per-group counters (JSON)."""
READY_PREFIX: Final = "viewstream listening on "
_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"


class ServerError(RuntimeError):
    """An embedded server did not start or answer in time (the message says why)."""


@dataclass
class EmbeddedServer:
    """Running node processes and where clients reach them."""

    kind: Embedded
    addresses: list[str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    folder: Path | None = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]


def _viewstream_command() -> list[str]:
    """``viewstream`` next to this interpreter, else on PATH, else the module."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    script = shutil.which("viewstream", path=search)
    return [script] if script else [sys.executable, "-c", _LAUNCH]


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out on 127.0.0.1, all held until every one is known (so
    they are distinct); free unless another process races for them."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _environment(password: str, secret: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIEWSTREAM_")}
    env["VIEWSTREAM_ROOT_PASSWORD"] = password
    env["VIEWSTREAM_LOG_LEVEL"] = "warning"
    env["VIEWSTREAM_HTTP_ADDRESS"] = ""  # the bench speaks TCP; port 3000 is not ours
    if secret is not None:
        env["VIEWSTREAM_CLUSTER_SECRET"] = secret
    return env


def _start(
    command: list[str], log: Path, env: dict[str, str], cwd: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def _wait_ready(processes: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path]) -> list[str]:
    """The address each node announced (bounded by ``READY_TIMEOUT_S``)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    addresses: list[str] = []
    for process, log in zip(processes, logs, strict=True):
        while True:
            text = log.read_text(encoding="utf-8", errors="replace")
            line = next((x for x in text.splitlines() if x.startswith(READY_PREFIX)), None)
            if line is not None:
                addresses.append(line[len(READY_PREFIX) :].strip())
                break
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(text.splitlines()[-20:])
                raise ServerError(f"viewstream node did not start ({log.name}):\n{tail}")
            time.sleep(0.05)
    return addresses


def _stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each (a graceful shutdown), SIGKILL what is left after the bound."""
    for process in processes:
        if process.poll() is None:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


def _pinned_client(address: str, username: str, password: str) -> Client:
    """An SDK client of the one node at ``address`` (no discovery), every call bounded by
    ``STATS_TIMEOUT_S``."""
    from sdk import Client, ClientConfig

    config = ClientConfig.one_node(
        address, username=username, password=password, timeout_s=STATS_TIMEOUT_S
    )
    return Client(config)


def _wait_serving(addresses: Sequence[str], username: str, password: str) -> None:
    """Wait until a login succeeds (the metadata group has a primary and commits)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        for address in addresses:
            try:
                client = _pinned_client(address, username, password)
                try:
                    client.login_user(username, password)
                finally:
                    client.close()
                return
            except Exception as error:  # not up yet: a refusal, a reset, a timeout
                last = error
        time.sleep(0.2)
    raise ServerError(f"no node of {list(addresses)} accepted a login in time: {last}")


@contextmanager
def embedded_server(
    kind: Embedded, *, username: str, password: str, no_sync: bool = False
) -> Iterator[EmbeddedServer]:
    """Start a one-node or a 3-node viewstream cluster for the ``with`` block.

    Args:
        kind: ``SINGLE`` or ``CLUSTER``.
        username: The root user's name (``iggy`` unless the node is configured otherwise).
        password: The root password the nodes create the root user with.
        no_sync: Start the nodes with ``--no-sync``.

    Raises:
        ServerError: a node did not start or the cluster did not serve in time.
    """
    assert kind is not Embedded.NONE
    folder = Path(tempfile.mkdtemp(prefix="viewstream-bench-"))
    server = EmbeddedServer(kind, [], folder=folder)
    command = _viewstream_command()
    try:
        logs: list[Path] = []
        if kind is Embedded.SINGLE:
            log = folder / "node-0.log"
            args = ["serve", "--address", "127.0.0.1:0", "--data-dir", str(folder / "node-0")]
            args += ["--ws-address", ""]  # no WebSocket listener: runs may share the host
            args += ["--no-sync"] if no_sync else []
            server.processes.append(
                _start(command + args, log, _environment(password, None), folder)
            )
            logs.append(log)
        else:
            ports = _free_ports(2 * CLUSTER_NODES)
            clients = [f"127.0.0.1:{p}" for p in ports[:CLUSTER_NODES]]
            buses = [f"127.0.0.1:{p}" for p in ports[CLUSTER_NODES:]]
            env = _environment(password, secrets.token_urlsafe(32))
            for index in range(CLUSTER_NODES):
                log = folder / f"node-{index}.log"
                args = [
                    "serve",
                    "--address",
                    clients[index],
                    "--ws-address",
                    "",
                    "--data-dir",
                    str(folder / f"node-{index}"),
                    "--replica",
                    str(index),
                    "--replicas",
                    ",".join(buses),
                    "--client-addresses",
                    ",".join(clients),
                ]
                args += ["--no-sync"] if no_sync else []
                server.processes.append(_start(command + args, log, env, folder))
                logs.append(log)
        server.addresses = _wait_ready(server.processes, logs)
        _wait_serving(server.addresses, username, password)
        yield server
    finally:
        _stop(server.processes)
        shutil.rmtree(folder, ignore_errors=True)


# --- server-side counters ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One node's counters at one moment.

    Attributes:
        address: Where it was asked.
        taken_at: ``time.monotonic()`` when the answer arrived.
        server: ``GET_STATS`` fields (empty if the call failed).
        runtime: viewstream's per-node and per-group counters (empty on other servers).
        cpu_s: The server process's user+system CPU seconds, read from ``/proc`` when it
            runs on this machine.
        error: Why the snapshot is incomplete, if it is.
    """

    address: str
    taken_at: float
    server: dict[str, Any]
    runtime: dict[str, Any]
    cpu_s: float | None
    error: str | None = None


def _cpu_clock_id(pid: int) -> int:
    """Linux's CPU-time clock of process ``pid`` (what ``clock_getcpuclockid(3)`` returns:
    ``~pid << 3 | CPUCLOCK_SCHED``), which ``clock_gettime`` reads in nanoseconds."""
    return ((~pid) << 3) | 2


def process_cpu_s(pid: int) -> float | None:
    """User+system CPU seconds of a local process (every thread, ended ones included).

    Read from the process's CPU-time clock (nanoseconds), else from
    ``/proc/<pid>/stat``'s utime + stime (clock ticks, 10 ms on most kernels: too coarse
    for a short run's per-batch figure). ``None`` when the process is gone.
    """
    if sys.platform == "linux":
        try:
            return time.clock_gettime(_cpu_clock_id(pid))
        except OSError:
            pass
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def is_local(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def snapshot_nodes(addresses: Sequence[str], username: str, password: str) -> list[NodeSnapshot]:
    """A snapshot of each node (failures are recorded, never raised)."""
    from sdk.errors import IggyError

    snapshots: list[NodeSnapshot] = []
    for address in addresses:
        server: dict[str, Any] = {}
        runtime: dict[str, Any] = {}
        error: str | None = None
        cpu: float | None = None
        try:
            with _pinned_client(address, username, password) as client:
                reply = client.get_stats()
                server = {
                    name: getattr(reply, name)
                    for name in reply.__dataclass_fields__
                    if name != "cache_metrics"
                }
                with suppress(IggyError):  # a server without viewstream's counters
                    runtime = client.get_runtime_stats()
        except Exception as failure:  # stats are a side dish: never fail the run on them
            error = f"{type(failure).__name__}: {failure}"
        pid = server.get("process_id")
        if isinstance(pid, int) and is_local(address):
            cpu = process_cpu_s(pid)
        snapshots.append(NodeSnapshot(address, time.monotonic(), server, runtime, cpu, error))
    return snapshots


def cluster_addresses(address: str, username: str, password: str) -> list[str]:
    """Every node's client address from the cluster metadata (``[address]`` if the
    server does not say)."""
    try:
        with _pinned_client(address, username, password) as client:
            reply = client.get_cluster_metadata()
    except Exception:
        return [address]
    if not reply.nodes:
        return [address]
    return [f"{node.ip}:{node.tcp_port}" for node in reply.nodes]


_GROUP_COUNTERS: Final = (
    "prepares",
    "prepare_bytes",
    "prepare_messages",
    "commits",
    "commit_rounds",
    "syncs",
    "synced_prepares",
    "bytes_to_replicas",
)
_NODE_COUNTERS: Final = (
    "requests",
    "bytes_received",
    "bytes_sent",
    "forwarded",
    "flushes",
    "groups_flushed",
)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def server_delta(before: NodeSnapshot, after: NodeSnapshot) -> dict[str, Any]:
    """What one node did between two snapshots.

    Partition groups are summed (``partition S/T/P`` in the counters); the metadata
    group is left out. Derived figures: ``commit_rounds_per_s``,
    ``messages_per_prepare``, ``syncs_per_message`` and ``prepares_per_sync`` (``None``
    when the denominator is zero), ``disk_syncs`` (partition sync rounds that synced
    their own files, plus shared ``syncfs`` flushes) and ``disk_syncs_per_message``, and
    ``cpu_percent`` of one core.
    """
    seconds = max(after.taken_at - before.taken_at, 1e-9)
    out: dict[str, Any] = {"address": after.address, "seconds": seconds}
    if before.error or after.error:
        out["error"] = after.error or before.error
    groups_before = before.runtime.get("groups", {})
    groups_after = after.runtime.get("groups", {})
    sums = dict.fromkeys(_GROUP_COUNTERS, 0)
    primaries = 0
    for name, counters in groups_after.items():
        if not name.startswith("partition"):
            continue
        old = groups_before.get(name, {})
        for key in _GROUP_COUNTERS:
            sums[key] += int(counters.get(key, 0)) - int(old.get(key, 0))
        primaries += 1 if counters.get("primary") else 0
    out["partition_groups"] = sum(1 for n in groups_after if n.startswith("partition"))
    out["partition_primaries"] = primaries
    out.update(sums)
    prepare_messages, syncs = sums["prepare_messages"], sums["syncs"]
    out["commit_rounds_per_s"] = sums["commit_rounds"] / seconds
    out["messages_per_prepare"] = _ratio(prepare_messages, sums["prepares"])
    out["syncs_per_message"] = _ratio(syncs, prepare_messages)
    out["prepares_per_sync"] = _ratio(sums["synced_prepares"], syncs)
    node_before = before.runtime.get("node", {})
    node_after = after.runtime.get("node", {})
    for key in _NODE_COUNTERS:
        if key in node_after:
            out[key] = int(node_after[key]) - int(node_before.get(key, 0))
    # Disk syncs: a partition's own sync rounds, except those a shared flush covered,
    # plus the shared flushes (syncfs) themselves (``broker.runtime.flush``).
    disk_syncs = syncs - int(out.get("groups_flushed", 0)) + int(out.get("flushes", 0))
    out["disk_syncs"] = disk_syncs
    out["disk_syncs_per_message"] = _ratio(disk_syncs, prepare_messages)
    if before.cpu_s is not None and after.cpu_s is not None:
        out["cpu_percent"] = (after.cpu_s - before.cpu_s) / seconds * 100.0
    for key in ("messages_count", "messages_size_bytes", "read_bytes", "written_bytes"):
        if key in after.server and key in before.server:
            out[key] = int(after.server[key]) - int(before.server[key])
    return out
