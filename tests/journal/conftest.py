"""Fixtures of the journal tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.journal.helpers import Disk


@pytest.fixture(params=["memory", "file"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Disk]:
    """Each test that takes ``disk`` runs on MemoryStorage and on real files in tmp_path."""
    result = Disk(str(request.param), tmp_path)
    yield result
    result.close()
