"""Simulator tests: long swarms are marked ``slow`` and skipped unless asked for.

Run them with ``VIEWSTREAM_SLOW=1 pytest tests/sim`` or ``pytest -m slow tests/sim``.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = os.environ.get("VIEWSTREAM_SLOW") == "1" or "slow" in (config.getoption("-m") or "")
    if wanted:
        return
    skip = pytest.mark.skip(reason="slow: set VIEWSTREAM_SLOW=1 or pass -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
