"""Real node processes for the runtime tests: start, wait until ready, stop, kill.

Every process binds 127.0.0.1 only, uses a temporary data directory, is waited for with a
timeout, and is killed by whoever started it (``NodeProcess.kill`` is idempotent). The
node announces its bound address on stdout (``READY_PREFIX``); a thread copies its
output into a queue so reading it never blocks a test past its timeout.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from broker.runtime.serve import READY_PREFIX, WS_READY_PREFIX

ROOT_PASSWORD: Final = "test-root-password"
CLUSTER_SECRET: Final = "test-cluster-secret-0123456789"
READY_TIMEOUT_S: Final = 20.0
STOP_TIMEOUT_S: Final = 15.0

_LAUNCH: Final = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (free unless someone races us)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class NodeProcess:
    """One ``viewstream serve`` process."""

    process: subprocess.Popen[str]
    data_dir: Path
    address: str = ""
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    output: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def ws_address(self) -> str:
        """Where the node's WebSocket listener is bound, as it announced it ("" for none)."""
        for line in self.output:
            if line.startswith(WS_READY_PREFIX):
                return line[len(WS_READY_PREFIX) :].strip()
        return ""

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if line.startswith(READY_PREFIX):
                self.address = line[len(READY_PREFIX) :].strip()
                return self.address
        self.kill()
        raise AssertionError("node did not become ready:\n" + "".join(self.output[-40:]))

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait: a graceful shutdown. Returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL (a crash) and reap; safe to call twice."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_node(
    data_dir: Path,
    *,
    address: str = "127.0.0.1:0",
    ws_address: str = "",
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
    wait: bool = True,
) -> NodeProcess:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("VIEWSTREAM_")
    }
    environment["VIEWSTREAM_ROOT_PASSWORD"] = ROOT_PASSWORD
    environment["VIEWSTREAM_LOG_LEVEL"] = "warning"
    # The HTTP listener's default port is fixed: tests that want it pass a free one.
    environment["VIEWSTREAM_HTTP_ADDRESS"] = ""
    environment.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _LAUNCH,
            "serve",
            "--address",
            address,
            "--ws-address",
            ws_address,
            "--data-dir",
            str(data_dir),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
        cwd=str(data_dir.parent),
    )
    node = NodeProcess(process, data_dir)

    def pump() -> None:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                node.output.append(line)
                node.lines.put(line)
        except ValueError:
            pass  # the pipe was closed by kill()

    threading.Thread(target=pump, daemon=True).start()
    if wait:
        node.wait_ready()
    return node
