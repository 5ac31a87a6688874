"""Fixtures of the SDK tests: fake clusters, real nodes and clusters, connection strings,
a hang watchdog."""

from __future__ import annotations

import faulthandler
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

import pytest
import trio

from tests.runtime.processes import NodeProcess, start_node
from tests.sdk.fake_server import FakeCluster
from tests.sdk.real import RealCluster

TEST_TIMEOUT_S: Final = 60.0
"""A test that runs longer than this is hung: the process dumps its stacks and exits."""

_T = TypeVar("_T")

FAST: Final = {
    "request_timeout": "250ms",
    "connect_timeout": "250ms",
    "retry_deadline": "10s",
    "reconnection_interval": "10ms",
    "reconnection_interval_max": "100ms",
}
"""Connection-string options that keep retries quick in tests."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "watchdog_s(seconds): this test's hang watchdog instead of TEST_TIMEOUT_S"
    )


@pytest.fixture(autouse=True)
def _watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    marker = request.node.get_closest_marker("watchdog_s")
    timeout_s = float(marker.args[0]) if marker is not None else TEST_TIMEOUT_S
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    with FakeCluster(1) as cluster:
        yield cluster


@pytest.fixture
def fake3() -> Iterator[FakeCluster]:
    with FakeCluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def real_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A ``viewstream serve`` process shared by a module's tests (distinct stream names),
    killed in teardown."""
    folder: Path = tmp_path_factory.mktemp("sdk-node")
    node = start_node(folder / "data")
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def real_cluster(tmp_path: Path) -> Iterator[RealCluster]:
    """A fresh 3-node cluster for one test (which may kill and restart its nodes)."""
    cluster = RealCluster.start(tmp_path / "cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


def url(cluster: FakeCluster, node: int = 0, **options: str) -> str:
    """A connection string to ``cluster`` with fast retry settings."""
    return cluster.connection_string(node, **{**FAST, **options})


def run_trio(fn: Callable[[], Awaitable[_T]], timeout_s: float = 30.0) -> _T:
    """Run an async test body under trio with a deadline."""

    async def main() -> _T:
        with trio.fail_after(timeout_s):
            return await fn()

    return trio.run(main)
