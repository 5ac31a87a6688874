"""The examples of docs/sdk.md, run as tests.

Every fenced ``python`` block right after a ``<!-- sdk-example: name -->`` marker is a
complete program that reads its node from ``VIEWSTREAM_URL``. Each runs, as its own
Python process, against the SDK tests' fake cluster and against a real ``viewstream
serve`` process (the module's ``real_node``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.processes import NodeProcess
from tests.sdk.fake_server import FakeCluster
from tests.sdk.real import node_url

DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
MARKER = re.compile(r"<!-- sdk-example: ([a-z0-9-]+) -->\n```python\n(.*?)\n```", re.DOTALL)
EXAMPLE_TIMEOUT_S = 60.0


def examples() -> dict[str, str]:
    found = dict(MARKER.findall(DOC.read_text(encoding="utf-8")))
    assert found, "docs/sdk.md has no marked examples"
    return found


EXAMPLES = pytest.mark.parametrize("name", sorted(examples()))


def test_docs_examples_cover_producer_consumer_group_and_exactly_once() -> None:
    assert {"producer", "consumer", "consumer-group", "exactly-once"} <= set(examples())
    text = DOC.read_text(encoding="utf-8")
    markers = len(re.findall(r"^<!-- sdk-example: [a-z0-9-]+ -->$", text, re.MULTILINE))
    assert markers == len(examples()), "every marker is followed by a python block"


def run_example(name: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VIEWSTREAM_URL": url}
    root = str(DOC.parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-c", examples()[name]],
        env=env,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
        check=False,
        cwd=root,
    )


@EXAMPLES
def test_docs_example_runs_against_the_fake_cluster(name: str) -> None:
    with FakeCluster(1) as cluster:
        result = run_example(name, cluster.connection_string())
    assert result.returncode == 0, result.stderr


@EXAMPLES
def test_docs_example_runs_against_a_real_node(name: str, real_node: NodeProcess) -> None:
    result = run_example(name, node_url(real_node.address))
    assert result.returncode == 0, result.stderr
