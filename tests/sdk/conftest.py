"""Fixtures of the SDK tests: fake clusters, connection strings, a hang watchdog."""

from __future__ import annotations

import faulthandler
from collections.abc import Awaitable, Callable, Iterator
from typing import Final, TypeVar

import pytest
import trio

from tests.sdk.fake_server import FakeCluster

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


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True)
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


def url(cluster: FakeCluster, node: int = 0, **options: str) -> str:
    """A connection string to ``cluster`` with fast retry settings."""
    return cluster.connection_string(node, **{**FAST, **options})


def run_trio(fn: Callable[[], Awaitable[_T]], timeout_s: float = 30.0) -> _T:
    """Run an async test body under trio with a deadline."""

    async def main() -> _T:
        with trio.fail_after(timeout_s):
            return await fn()

    return trio.run(main)
