"""Fixtures for the runtime tests: a real node process per module, always killed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.processes import NodeProcess, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One node process shared by a module's tests (they use distinct stream names)."""
    data_dir: Path = tmp_path_factory.mktemp("node") / "data"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    process = start_node(data_dir)
    try:
        yield process
    finally:
        process.kill()
