"""The ``viewstream`` CLI: admin commands against a real node, and a local cluster's
``up --detach`` / ``status`` / ``down`` round trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.cli import app
from broker.runtime.flush import syncfs_available
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, free_port

runner = CliRunner()


def invoke(node: NodeProcess, *args: str) -> str:
    result = runner.invoke(
        app, [*args, "--address", node.address, "--password", ROOT_PASSWORD], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_admin_commands_create_send_poll_and_report(node: NodeProcess) -> None:
    assert "created stream 'cli'" in invoke(node, "stream", "create", "cli")
    created = invoke(node, "topic", "create", "cli", "t", "--partitions", "2")
    assert "2 partition(s)" in created
    assert "cli" in invoke(node, "stream", "list")
    assert " t" in invoke(node, "topic", "list", "cli")
    sent = invoke(node, "send", "cli", "t", "alpha", "beta", "--partition", "1")
    assert "partition 1 from offset 0" in sent
    polled = invoke(node, "poll", "cli", "t", "--partition", "1")
    assert "alpha" in polled and "beta" in polled
    assert "leader" in invoke(node, "cluster", "status")
    report = json.loads(invoke(node, "stats", "--json"))
    assert report["server"]["streams_count"] >= 1
    assert any(name.startswith("partition") for name in report["runtime"]["groups"])
    node_report = report["runtime"]["node"]
    assert node_report["disk_full"] is False
    # The default budget leaves 5% of the file system free: more than the node holds.
    assert node_report["disk_budget_bytes"] > node_report["disk_used_bytes"]
    assert node_report["bytes_retained"] > 0 and node_report["bytes_deleted"] == 0
    text = invoke(node, "stats")
    assert "disk: data directory" in text and ", budget " in text
    assert "retention: " in text and " bytes deleted in 0 segments" in text
    scope = "filesystem" if syncfs_available() else "file"
    assert f"syncs: scope {scope}, 0 shared flushes" in text
    invoke(node, "topic", "delete", "cli", "t")
    assert "deleted stream" in invoke(node, "stream", "delete", "cli")


def test_admin_command_refused_by_the_server_exits_non_zero(node: NodeProcess) -> None:
    result = runner.invoke(
        app,
        [
            "stream",
            "delete",
            "no-such-stream",
            "--address",
            node.address,
            "--password",
            ROOT_PASSWORD,
        ],
    )
    assert result.exit_code == 1
    assert "refused" in result.output


def test_cluster_up_detached_then_down(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    base, bus = free_port(), free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VIEWSTREAM_")}
    environment["VIEWSTREAM_ROOT_PASSWORD"] = ROOT_PASSWORD
    command = [sys.executable, "-c", _LAUNCH, "cluster"]
    up = subprocess.run(
        [
            *command,
            "up",
            "--nodes",
            "1",
            "--dir",
            str(folder),
            "--base-port",
            str(base),
            "--bus-base-port",
            str(bus),
            "--http-base-port",
            str(free_port()),
            "--detach",
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert (folder / "cluster.json").exists()
        assert (folder / "node-0.log").exists()
        status = runner.invoke(
            app,
            ["cluster", "status", "--address", f"127.0.0.1:{base}", "--password", ROOT_PASSWORD],
        )
        assert "reachable" in status.output, status.output
    finally:
        down = subprocess.run(
            [*command, "down", "--dir", str(folder)],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped 1 node(s)" in down.stdout
    pids = json.loads((folder / "cluster.json").read_text())["pids"]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


_LAUNCH = "import sys; from broker.cli import app; sys.argv[0] = 'viewstream'; app()"
