"""broker/state stays deterministic: the tidy check covers every module and finds nothing."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.tidy.checker import check_source

STATE = Path(__file__).resolve().parents[2] / "broker" / "state"
FORBIDDEN_IMPORTS = ("trio", "socket", "time", "os", "threading", "asyncio", "random")


def _modules() -> list[Path]:
    modules = sorted(STATE.glob("*.py"))
    assert len(modules) >= 8, "the check must see the whole package"
    return modules


def test_tidy_state_modules_read_no_clock_randomness_threads_or_sets() -> None:
    findings = [f for path in _modules() for f in check_source(path.read_text(), str(path))]
    assert findings == []


def test_tidy_state_modules_import_no_io_or_clock_module() -> None:
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"
